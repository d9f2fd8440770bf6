/*
 * tmpl.c - chat templates recognised from their Jinja source and rendered by
 * code.
 *
 * The renderings are the reference engine's own (llama_chat_apply_template):
 *   chatml      <|im_start|>{role}\n{content}<|im_end|>\n ... [<|im_start|>assistant\n]
 *   llama3      <|start_header_id|>{role}<|end_header_id|>\n\n{trim(content)}<|eot_id|> ...
 *               [<|start_header_id|>assistant<|end_header_id|>\n\n]
 *   llama2      [INST] {system}\n{user} [/INST]{assistant}</s>[INST] {user} [/INST]
 *   llama2-sys  [INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST]{assistant}</s>...
 *               (contents trimmed, as Llama-2-chat's template strips them)
 *   command-r   <|START_OF_TURN_TOKEN|><|{SYSTEM,USER,CHATBOT}_TOKEN|>{trim(content)}<|END_OF_TURN_TOKEN|>
 *               ... [<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>]
 * No BOS is written: the tokenizer adds it.  What the reference's C renderer
 * leaves out and the Jinja source does, tmpl_render adds from the source:
 * Qwen's default system message, inserted when the conversation does not
 * start with one.
 */
#include <string.h>

#include "tok.h"

typedef struct out_buf { char *p; size_t cap, n; } out_buf;

/* Appends what fits (keeping room for the NUL) and counts everything. */
static void put(out_buf *o, const char *s, size_t n)
{
    if (o->n < o->cap) {
        size_t room = o->cap - 1 - o->n;
        memcpy(o->p + o->n, s, MIN(n, room));
    }
    o->n += n;
}

static void puts_(out_buf *o, const char *s) { put(o, s, strlen(s)); }

static bool c_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

static void put_trimmed(out_buf *o, const char *s)
{
    size_t a = 0, b = strlen(s);
    while (a < b && c_space(s[a])) a++;
    while (b > a && c_space(s[b - 1])) b--;
    put(o, s + a, b - a);
}

static bool has(const char *s, const char *needle) { return strstr(s, needle) != NULL; }

tmpl_kind tmpl_detect(const char *src)
{
    if (!src) return TMPL_UNKNOWN;
    if (has(src, "<|im_start|>"))
        /* Phi-4 and SmolVLM use <|im_start|> with another layout. */
        return has(src, "<|im_sep|>") || has(src, "<end_of_utterance>") ? TMPL_UNKNOWN : TMPL_CHATML;
    if (has(src, "[INST]")) {
        /* Mistral v3/v7 layouts differ in spacing and system handling. */
        if (has(src, "[SYSTEM_PROMPT]") || has(src, "[AVAILABLE_TOOLS]")) return TMPL_UNKNOWN;
        return has(src, "<<SYS>>") ? TMPL_LLAMA2_SYS : TMPL_LLAMA2;
    }
    if (has(src, "<|START_OF_TURN_TOKEN|>") && has(src, "<|USER_TOKEN|>")) return TMPL_COMMAND_R;
    if (has(src, "<|start_header_id|>") && has(src, "<|end_header_id|>")) return TMPL_LLAMA3;
    return TMPL_UNKNOWN;
}

tmpl_kind tmpl_from_name(const char *name)
{
    static const struct { const char *name; tmpl_kind k; } names[] = {
        {"chatml", TMPL_CHATML}, {"llama3", TMPL_LLAMA3}, {"llama2", TMPL_LLAMA2},
        {"mistral", TMPL_LLAMA2}, {"llama2-sys", TMPL_LLAMA2_SYS}, {"command-r", TMPL_COMMAND_R},
    };
    for (size_t i = 0; name && i < ARRAY_LEN(names); i++)
        if (strcmp(name, names[i].name) == 0) return names[i].k;
    return TMPL_UNKNOWN;
}

const char *tmpl_name(tmpl_kind k)
{
    switch (k) {
    case TMPL_CHATML: return "chatml";
    case TMPL_LLAMA3: return "llama3";
    case TMPL_LLAMA2: return "llama2";
    case TMPL_LLAMA2_SYS: return "llama2-sys";
    case TMPL_COMMAND_R: return "command-r";
    case TMPL_UNKNOWN: break;
    }
    return "unknown";
}

static bool role_ok(tmpl_kind k, const char *role)
{
    if (!strcmp(role, "system") || !strcmp(role, "user") || !strcmp(role, "assistant")) return true;
    return k == TMPL_CHATML && !strcmp(role, "tool");
}

static void render_llama2(out_buf *o, const tmpl_msg *m, int n, bool sys_block)
{
    bool in_turn = true;
    puts_(o, "[INST] ");
    for (int i = 0; i < n; i++) {
        if (!in_turn) {
            in_turn = true;
            puts_(o, "[INST] ");
        }
        void (*content)(out_buf *, const char *) = sys_block ? put_trimmed : puts_;
        if (!strcmp(m[i].role, "system")) {
            if (sys_block) puts_(o, "<<SYS>>\n");
            content(o, m[i].content);
            puts_(o, sys_block ? "\n<</SYS>>\n\n" : "\n");
        } else if (!strcmp(m[i].role, "user")) {
            content(o, m[i].content);
            puts_(o, " [/INST]");
        } else {
            content(o, m[i].content);
            puts_(o, "</s>");
            in_turn = false;
        }
    }
}

pk_status tmpl_apply(tmpl_kind k, const tmpl_msg *msgs, int n_msgs, bool add_assistant,
                     char *out, size_t cap, size_t *n_out)
{
    if (n_msgs < 0 || (!msgs && n_msgs) || (!out && cap) || !n_out) return PK_EINVAL;
    if (k != TMPL_CHATML && k != TMPL_LLAMA3 && k != TMPL_LLAMA2 && k != TMPL_LLAMA2_SYS && k != TMPL_COMMAND_R)
        return PK_EINVAL;
    for (int i = 0; i < n_msgs; i++)
        if (!msgs[i].role || !msgs[i].content || !role_ok(k, msgs[i].role)) return PK_EINVAL;

    out_buf o = {out, cap, 0};
    switch (k) {
    case TMPL_CHATML:
        for (int i = 0; i < n_msgs; i++) {
            puts_(&o, "<|im_start|>");
            puts_(&o, msgs[i].role);
            puts_(&o, "\n");
            puts_(&o, msgs[i].content);
            puts_(&o, "<|im_end|>\n");
        }
        if (add_assistant) puts_(&o, "<|im_start|>assistant\n");
        break;
    case TMPL_LLAMA3:
        for (int i = 0; i < n_msgs; i++) {
            puts_(&o, "<|start_header_id|>");
            puts_(&o, msgs[i].role);
            puts_(&o, "<|end_header_id|>\n\n");
            put_trimmed(&o, msgs[i].content);
            puts_(&o, "<|eot_id|>");
        }
        if (add_assistant) puts_(&o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case TMPL_COMMAND_R:
        for (int i = 0; i < n_msgs; i++) {
            const char *r = msgs[i].role;
            puts_(&o, "<|START_OF_TURN_TOKEN|>");
            puts_(&o, !strcmp(r, "system") ? "<|SYSTEM_TOKEN|>" : !strcmp(r, "user") ? "<|USER_TOKEN|>"
                                                                                      : "<|CHATBOT_TOKEN|>");
            put_trimmed(&o, msgs[i].content);
            puts_(&o, "<|END_OF_TURN_TOKEN|>");
        }
        if (add_assistant) puts_(&o, "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>");
        break;
    case TMPL_LLAMA2:
    case TMPL_LLAMA2_SYS:
        /* The prompt already ends where the assistant speaks. */
        render_llama2(&o, msgs, n_msgs, k == TMPL_LLAMA2_SYS);
        break;
    case TMPL_UNKNOWN:
        break;
    }
    *n_out = o.n;
    if (cap) out[MIN(o.n, cap - 1)] = '\0';
    return o.n < cap ? PK_OK : PK_EFULL;
}

size_t tmpl_default_system(const char *src, char *out, size_t cap)
{
    static const char open[] = "<|im_start|>system", close[] = "<|im_end|>";
    if (!src || tmpl_detect(src) != TMPL_CHATML) return 0;
    for (const char *p = strstr(src, open); p; p = strstr(p + 1, open)) {
        const char *q = p + sizeof(open) - 1;
        if (*q == '\n') q++;
        else if (q[0] == '\\' && q[1] == 'n') q += 2;
        else continue;
        const char *end = strstr(q, close);
        /* A default is spelled inside one string literal: no quote before
         * <|im_end|> (the system message proper is concatenated in). */
        if (!end || end == q || memchr(q, '\'', (size_t)(end - q)) || memchr(q, '"', (size_t)(end - q))) continue;
        out_buf o = {out, cap, 0};
        for (const char *s = q; s < end; s++) {
            if (s[0] == '\\' && s + 1 < end && s[1] == 'n') {
                put(&o, "\n", 1);
                s++;
            } else {
                put(&o, s, 1);
            }
        }
        if (cap) out[MIN(o.n, cap - 1)] = '\0';
        return o.n;
    }
    return 0;
}

pk_status tmpl_render(const char *src, const tmpl_msg *msgs, int n_msgs, bool add_assistant,
                      char *out, size_t cap, size_t *n_out)
{
    tmpl_kind k = tmpl_detect(src);
    if (k == TMPL_UNKNOWN) return PK_EUNSUPPORTED;
    if (n_msgs < 0 || (!msgs && n_msgs)) return PK_EINVAL;
    char sys[1024];
    size_t n_sys = tmpl_default_system(src, sys, sizeof(sys));
    if (n_sys == 0 || n_sys >= sizeof(sys) || n_msgs == 0 || (msgs[0].role && !strcmp(msgs[0].role, "system")))
        return tmpl_apply(k, msgs, n_msgs, add_assistant, out, cap, n_out);

    /* Render the default system turn, then the conversation after it. */
    tmpl_msg first = {"system", sys};
    size_t n_first = 0;
    pk_status st = tmpl_apply(k, &first, 1, false, out, cap, &n_first);
    if (st != PK_OK && st != PK_EFULL) return st;
    size_t used = MIN(n_first, cap ? cap - 1 : 0), n_rest = 0;
    pk_status st2 = tmpl_apply(k, msgs, n_msgs, add_assistant, out ? out + used : NULL, cap - used, &n_rest);
    if (st2 != PK_OK && st2 != PK_EFULL) return st2;
    *n_out = n_first + n_rest;
    return *n_out < cap ? PK_OK : PK_EFULL;
}
