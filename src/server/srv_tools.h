/*
 * srv_tools.h - tool calls in generated text: finding them and turning them
 * back into OpenAI `tool_calls`.
 *
 * DESIGN
 *   Pure functions over a byte string; no server state, no allocation
 *   beyond the result.  The output formats understood are the ones the
 *   models' templates (and those of tmpl_tools.h) ask the model for:
 *
 *     QWEN    (ChatML / Hermes style; Qwen2.5, Qwen3)
 *               [content]<tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>...
 *             any number of calls; text outside the tags is content.
 *     LLAMA3  (Llama 3.1 / 3.2 / 3.3 JSON tool calls)
 *               [content][<|python_tag|>]{"name": N, "parameters": {...}}[; {...}]
 *             an object counts as a call only when it has a string "name"
 *             and an object "parameters" (or "arguments"), so an ordinary
 *             JSON answer stays content.
 *
 *     MISTRAL (Mistral Nemo / Small 3.x, Ministral, Devstral)
 *               [content][TOOL_CALLS][{"name": N, "arguments": {...}}, ...]
 *               [content][TOOL_CALLS]N[ARGS]{...}[TOOL_CALLS]N2[ARGS]{...}
 *             (the newer form may carry [CALL_ID]id before [ARGS]).
 *     DEEPSEEK (R1 and its distills; V3.1 and later)
 *               [content]<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N
 *               ```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
 *             or <｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}<｜tool▁call▁end｜>.
 *     QWEN_XML (Qwen3.5, Qwen3-Coder: the Qwen3-Coder XML form)
 *               [content]<tool_call>\n<function=N>\n<parameter=P>\nVALUE\n</parameter>\n...
 *               </function>\n</tool_call>...
 *             any number of calls (a block may hold several functions);
 *             a VALUE runs to </parameter> (or the next <parameter= or
 *             </function>, which a model may write without closing it), one
 *             new line stripped at each end, and may span lines.  Arguments
 *             are built by the request's tool definitions: a parameter whose
 *             schema "type" allows null, boolean, integer, number, object or
 *             array and whose VALUE reads as one is that JSON (null also as
 *             Python's None, booleans in any case: the template prints
 *             values with Python's str); a string type keeps the text;
 *             anything else is the VALUE as JSON when it is JSON other than a
 *             string, else the text as a string.
 *     HARMONY (gpt-oss): messages <|channel|>C[ to=functions.N][ <|constrain|>json]<|message|>BODY
 *             ended by <|end|>, <|call|>, <|return|> or the next <|start|>:
 *             a header naming functions.N is a call with BODY its arguments,
 *             channel analysis is reasoning, final and plain commentary are
 *             content.  Its content is not a prefix of the text: a stream
 *             takes it from srv_tools_harmony_prefix.
 *     GEMMA4  (Gemma 4)
 *               [content]<|tool_call>call:N{KEY:VALUE,...}<tool_call|>...
 *             any number of calls; text outside them is content.  The
 *             arguments are written as the template's format_argument
 *             prints them: keys bare (or quoted), strings between <|"|>
 *             marks (any text but the mark, unescaped), numbers, true,
 *             false and null as in JSON (null also as None, which is how
 *             the template prints one), [arrays] and {dicts} of those.
 *             They come back as JSON, numbers as written.  (The thinking,
 *             <|channel>thought...<channel|>, is srv_reason.h's.)
 *
 *   srv_tools_detect picks the format from markers in a template's source.
 *
 *   A call whose JSON is malformed is left in the content as text: the
 *   client sees what the model wrote rather than a call it did not make.
 *   Arguments come back as compact JSON text (what OpenAI's `arguments`
 *   string holds); a string holding JSON is unwrapped first.
 *
 *   For streaming, srv_tools_content_prefix says how much of the text so far
 *   is surely content (can be sent now) and how much might still turn into
 *   a call (held back until the end).
 *
 * Threads: any; the functions share nothing.
 */
#ifndef SRV_TOOLS_H
#define SRV_TOOLS_H

#include <jansson.h>

#include "../common/buf.h"
#include "../common/pk.h"

typedef enum srv_tool_fmt {
    SRV_TOOL_NONE = 0,          /* no tools in the request: everything is content */
    SRV_TOOL_QWEN,
    SRV_TOOL_LLAMA3,
    SRV_TOOL_MISTRAL,
    SRV_TOOL_DEEPSEEK,
    SRV_TOOL_HARMONY,
    SRV_TOOL_QWEN_XML,
    SRV_TOOL_GEMMA4,
} srv_tool_fmt;

typedef struct srv_tool_call {
    char *name;                 /* NUL-terminated, owned by the srv_tool_msg */
    char *arguments;            /* compact JSON text, owned */
} srv_tool_call;

typedef struct srv_tool_msg {
    char *content;              /* text outside the calls, NUL-terminated, owned */
    size_t content_len;
    srv_tool_call *calls;       /* [n_calls], owned */
    int n_calls;
    char *reasoning;            /* HARMONY: the analysis channel, NUL-terminated, owned; else NULL */
    size_t reasoning_len;
} srv_tool_msg;

/* Splits text[0..len) into content and tool calls.  With calls found, the
 * content is trimmed of surrounding white space; without, it is the text
 * unchanged.  tools: the request's OpenAI "tools" array (or NULL); only
 * QWEN_XML reads it, to type the arguments, which its text leaves untyped.
 * Returns PK_OK, or PK_ENOMEM (out is then empty).  Free the result with
 * srv_tool_msg_free. */
pk_status srv_tools_parse(srv_tool_fmt f, const json_t *tools, const char *text, size_t len, srv_tool_msg *out);
void srv_tool_msg_free(srv_tool_msg *m);                /* fields reset; NULL is a no-op */

/* The format a chat template asks tool calls in, from its markers
 * ("<|tool_call>call:", "<function=" with "<parameter=", "<tool_call>", "[TOOL_CALLS]",
 * "<｜tool▁calls▁begin｜>", "<|channel|>", "<|python_tag|>" / Llama 3's headers); fallback when
 * src is NULL or has none of them. */
srv_tool_fmt srv_tools_detect(const char *src, srv_tool_fmt fallback);

/* Whether GEMMA4 reads name (NUL-terminated) back as a call's name: a
 * forced call can only be written for such a name. */
bool srv_tools_gemma4_name_ok(const char *name);

/* Bytes at the start of text[0..len) that cannot become part of a call
 * whatever comes next (streamable as content now). */
size_t srv_tools_content_prefix(srv_tool_fmt f, const char *text, size_t len);

/* HARMONY's counterpart, its content being the messages' bodies: the
 * content and reasoning of text[0..len) that no later bytes can change
 * (each a prefix of what srv_tools_parse gives for any text that begins
 * with this one), put in content and reasoning (emptied first; kept as
 * scratch between calls).  Headers, ends of messages, calls, a partial
 * marker and white space that may precede a call are held back.  PK_OK,
 * or PK_ENOMEM. */
pk_status srv_tools_harmony_prefix(const char *text, size_t len, pk_buf *content, pk_buf *reasoning);

#endif
