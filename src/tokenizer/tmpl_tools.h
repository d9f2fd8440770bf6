/*
 * tmpl_tools.h - chat prompts with tools: tool definitions, assistant tool
 * calls and tool results, rendered the way the models' own Jinja templates
 * render them.
 *
 * DESIGN
 *   tmpl_apply (tok.h) renders plain conversations; this file covers the
 *   conversations that carry tools, for the two layouts that have a tool
 *   protocol:
 *
 *     TMPL_CHATML  Qwen2.5-Instruct's template: the tool list goes into the
 *                  system turn inside <tools></tools> (one JSON object per
 *                  line) with Qwen's instructions; assistant calls become
 *                  <tool_call>\n{"name": .., "arguments": ..}\n</tool_call>;
 *                  consecutive tool results share one user turn, each in
 *                  <tool_response>\n..\n</tool_response>.  Without a system
 *                  message Qwen's default one is used.
 *     TMPL_LLAMA3  Llama-3.1-Instruct's template (tools in the first user
 *                  message, the default): "Environment: ipython" and the
 *                  knowledge/today dates in the system turn, the tools as
 *                  JSON indented by 4 in the first user turn, one call per
 *                  assistant turn as {"name": .., "parameters": ..}, results
 *                  in "ipython" turns (JSON-encoded, as the template's
 *                  tojson does to a string).
 *
 *   JSON inside the prompt is written as the templates' `tojson` writes it
 *   (Python's json.dumps: ", " and ": " separators, or indent=4; non-ASCII
 *   kept, key order kept).  Call arguments that arrive as a string holding
 *   a JSON object are written as that object, as the reference engine does
 *   for templates that expect objects.  No BOS is written: tokenizing with
 *   add_special adds it.
 *
 *   Input is the OpenAI message shape as jansson values:
 *     messages: [{"role": "system"|"user"|"assistant"|"tool"|"ipython",
 *                 "content": string | null,
 *                 "tool_calls": [{"function": {"name": s, "arguments": s | {}}}]}]
 *     tools:    [{"type": "function", "function": {...}}] or NULL
 *   (content given as an array of text parts must be joined by the caller).
 *
 * Threads: any; nothing is shared.
 */
#ifndef TMPL_TOOLS_H
#define TMPL_TOOLS_H

#include <jansson.h>

#include "tok.h"

/*
 * Renders messages (and tools, which may be NULL or empty) for template
 * kind k; with add_assistant the text ends with the opening of the
 * assistant's turn.  Returns PK_OK with *out a NUL-terminated string the
 * caller frees and *n_out its length; PK_EUNSUPPORTED for a kind without a
 * tool protocol; PK_EINVAL with a one-line reason in err for a
 * conversation the template rejects (a message that is not an object, an
 * unknown role, a content that is not a string, Llama 3.1: not exactly one
 * call in an assistant turn, or tools with no message to put them in);
 * PK_ENOMEM.
 */
pk_status tmpl_tools_render(tmpl_kind k, const json_t *messages, const json_t *tools, bool add_assistant,
                            char **out, size_t *n_out, char *err, size_t err_len);

#endif
