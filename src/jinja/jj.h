/*
 * jj.h - a Jinja2 interpreter for chat templates (docs/chat-templates.md).
 *
 * It renders a model's `tokenizer.chat_template` the way Hugging Face
 * transformers' apply_chat_template does: jinja2 in an immutable sandbox
 * with trim_blocks and lstrip_blocks, the loopcontrols extension,
 * transformers' own tojson (json.dumps, ensure_ascii off), raise_exception()
 * and strftime_now().  The subset is what real model templates use:
 * if/for/set/macro/call/filter blocks, break/continue, generation blocks,
 * jinja2's Undefined, Python's str() and repr() of values, and the filters,
 * tests and str/dict methods listed in docs/chat-templates.md.
 *
 * A compiled template (jj_compile) is immutable: any number of threads may
 * render it at once.  Each render allocates from its own arena, freed before
 * jj_render returns, and is bounded (jj_limits): output bytes, memory, loop
 * iterations and call depth.  Errors never abort: a status and a one-line
 * message naming the template line ("line 12: ..."), as jinja2 reports them.
 */
#ifndef JJ_H
#define JJ_H

#include <jansson.h>
#include <time.h>

#include "../common/pk.h"

typedef struct jj_tmpl jj_tmpl;

typedef struct jj_limits {
    size_t max_output_bytes;       /* 0 = 8 MiB */
    size_t max_memory_bytes;       /* arena of one render; 0 = 256 MiB */
    int64_t max_loop_iters;        /* all loops of one render; 0 = 1e6 */
    int max_depth;                 /* macro calls nested; 0 = 64 */
    time_t now;                    /* strftime_now's clock, read in UTC; 0 = the local time now */
} jj_limits;

/* Compiles src (n bytes).  Returns PK_OK and *out (free with jj_free), or
 * PK_EFORMAT for a syntax error or an unknown filter / test, with the
 * message in err.  Any thread. */
pk_status jj_compile(const char *src, size_t n, jj_tmpl **out, char *err, size_t err_len);

/* Renders t with the members of the JSON object ctx as its variables
 * (messages, tools, add_generation_prompt, bos_token, ... ; ctx may be NULL)
 * plus the globals range, namespace, dict, raise_exception, strftime_now.
 * On PK_OK *out is a malloc'd NUL-terminated string of *n_out bytes (the
 * caller frees it).  Errors: PK_EINVAL for an error the template raises or
 * a type error while rendering, PK_EFULL when a limit is reached, PK_ENOMEM;
 * the message in err; *out untouched.  lim may be NULL (the defaults).  Any
 * thread, concurrently on one t. */
pk_status jj_render(const jj_tmpl *t, const json_t *ctx, const jj_limits *lim, char **out,
                    size_t *n_out, char *err, size_t err_len);

/* jj_free(NULL) is a no-op. */
void jj_free(jj_tmpl *t);

#endif
