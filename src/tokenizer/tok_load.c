/*
 * tok_load.c - building a tok_vocab from a GGUF's tokenizer.ggml.* keys.
 *
 * Everything is copied out of the GGUF, so the vocabulary outlives it.  The
 * defaults and the text-based fix-ups follow the reference loader, because
 * they change tokenization: e.g. a token spelled <|endoftext|> becomes a
 * control token (no longer matched in plain text) even when the file calls
 * it normal, and Phi-3 vocabularies eat the spaces after special tokens.
 */
#include <stdio.h>

#include "tok_impl.h"

/* ---- string tables ---- */

static pk_status strtab_alloc(tok_strtab *t, uint32_t n, size_t pool_bytes)
{
    if (pool_bytes > UINT32_MAX) return PK_EFORMAT;
    t->n = n;
    t->pool = malloc(pool_bytes ? pool_bytes : 1);
    t->off = malloc(((size_t)n + 1) * sizeof(*t->off));
    if (!t->pool || !t->off) return PK_ENOMEM;
    t->off[0] = 0;
    return PK_OK;
}

/* Builds the hash index.  With unique, a repeated string is an error
 * (*dup gets its index); otherwise the first one wins. */
static pk_status strtab_index(tok_strtab *t, bool unique, int64_t *dup)
{
    uint32_t cap = 16;
    while (cap < 2 * (uint64_t)t->n && cap < (1u << 31)) cap *= 2;
    t->mask = cap - 1;
    t->slots = calloc(cap, sizeof(*t->slots));
    t->hash = malloc(((size_t)t->n + 1) * sizeof(*t->hash));
    if (!t->slots || !t->hash) return PK_ENOMEM;
    for (uint32_t k = 0; k < t->n; k++) {
        uint32_t len;
        const char *s = tok_strtab_str(t, k, &len);
        int32_t found = tok_strtab_find(t, s, len);
        if (found >= 0) {
            if (unique) { *dup = k; return PK_EFORMAT; }
            continue;
        }
        uint32_t h = tok_hash_more(TOK_HASH_SEED, s, len), i = h & t->mask;
        t->hash[k] = h;
        while (t->slots[i]) i = (i + 1) & t->mask;
        t->slots[i] = k + 1;
    }
    return PK_OK;
}

static void strtab_free(tok_strtab *t)
{
    free(t->pool);
    free(t->off);
    free(t->slots);
    free(t->hash);
}

void tok_free(tok_vocab *v)
{
    if (!v) return;
    strtab_free(&v->tokens);
    strtab_free(&v->pieces);
    strtab_free(&v->merges);
    free(v->scores);
    free(v->attr);
    free(v->special);
    free(v->chat_template);
    free(v);
}

/* ---- reading keys ---- */

static bool str_key(const gguf_ctx *g, const char *key, gguf_str *s)
{
    *s = (gguf_str){NULL, 0};
    return gguf_get_str(g, key, s) == PK_OK;
}

static bool str_is(gguf_str s, const char *c)
{
    return s.n == strlen(c) && memcmp(s.p, c, s.n) == 0;
}

/* Copies a string array into a table; empty entries become [EMPTY_i] when
 * name_empty (as the reference names them). */
static pk_status load_strings(const gguf_ctx *g, const char *key, uint64_t n, bool name_empty, tok_strtab *t)
{
    size_t pool = 0;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s = gguf_arr_str(g, key, i);
        pool += s.n ? s.n : (name_empty ? 32 : 0);
    }
    pk_status st = strtab_alloc(t, (uint32_t)n, pool);
    if (st != PK_OK) return st;
    size_t at = 0;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s = gguf_arr_str(g, key, i);
        if (s.n) {
            memcpy(t->pool + at, s.p, s.n);
            at += s.n;
        } else if (name_empty) {
            at += (size_t)snprintf(t->pool + at, 32, "[EMPTY_%llu]", (unsigned long long)i);
        }
        t->off[i + 1] = (uint32_t)at;
    }
    return PK_OK;
}

/* The element count of a string array; PK_ENOTFOUND when absent, PK_EFORMAT
 * when not a string array. */
static pk_status str_array(const gguf_ctx *g, const char *key, uint64_t *n)
{
    gguf_type et;
    pk_status st = gguf_get_arr(g, key, &et, n);
    if (st == PK_OK && et != GGUF_TYPE_STRING) st = PK_EFORMAT;
    return st;
}

/* An optional id key: kept only when inside the vocabulary. */
static void id_key(const gguf_ctx *g, const char *key, int32_t n_vocab, int32_t *id)
{
    int64_t x;
    if (gguf_get_int(g, key, &x) == PK_OK && x >= 0 && x < n_vocab) *id = (int32_t)x;
}

static void bool_key(const gguf_ctx *g, const char *key, bool *b)
{
    bool x;
    if (gguf_get_bool(g, key, &x) == PK_OK) *b = x;
}

/* ---- model and pre-tokenizer ---- */

typedef struct pre_name { const char *name; tok_pre pre; } pre_name;

static const pre_name k_pre_names[] = {
    {"default", TOK_PRE_DEFAULT},
    {"gpt-2", TOK_PRE_GPT2}, {"phi-2", TOK_PRE_GPT2}, {"gigachat", TOK_PRE_GPT2},
    {"a.x-4.0", TOK_PRE_GPT2}, {"mellum", TOK_PRE_GPT2},
    {"llama3", TOK_PRE_LLAMA3}, {"llama-v3", TOK_PRE_LLAMA3}, {"llama-bpe", TOK_PRE_LLAMA3},
    {"falcon3", TOK_PRE_LLAMA3}, {"falcon-h1", TOK_PRE_LLAMA3}, {"pixtral", TOK_PRE_LLAMA3},
    {"midm-2.0", TOK_PRE_LLAMA3}, {"lfm2", TOK_PRE_LLAMA3}, {"jina-v5-nano", TOK_PRE_LLAMA3},
    {"qwen2", TOK_PRE_QWEN2}, {"deepseek-r1-qwen", TOK_PRE_QWEN2}, {"kormo", TOK_PRE_QWEN2},
    {"f2llmv2", TOK_PRE_QWEN2}, {"qwen35", TOK_PRE_QWEN35},
    {"deepseek-coder", TOK_PRE_DEEPSEEK_CODER},
    /* minimax-m2 is a type of its own in the reference, with the same regex */
    {"gpt-4o", TOK_PRE_GPT4O}, {"llama4", TOK_PRE_GPT4O}, {"kanana2", TOK_PRE_GPT4O},
    {"talkie", TOK_PRE_GPT4O}, {"minimax-m2", TOK_PRE_GPT4O},
    {"gemma4", TOK_PRE_GEMMA4}, {"granite-embed-multi-311m", TOK_PRE_GEMMA4},
};

static pk_status set_model(const gguf_ctx *g, tok_vocab *v, char *err, size_t err_len)
{
    gguf_str model, pre;
    if (!str_key(g, "tokenizer.ggml.model", &model))
        return pk_errf(err, err_len, PK_EFORMAT, "tokenizer.ggml.model missing or not a string");
    str_key(g, "tokenizer.ggml.pre", &pre);
    if (str_is(model, "llama")) {
        v->kind = TOK_SPM;
        v->pre = TOK_PRE_NONE;
        v->bos = 1;
        v->eos = 2;
        v->unk = 0;
        v->add_space_prefix = true;
        v->add_bos = true;
    } else if (str_is(model, "gemma4")) {
        /* BPE whatever tokenizer.ggml.pre says, with no default ids */
        v->kind = TOK_BPE;
        v->bos = v->eos = -1;
        v->clean_spaces = true;
        v->pre = TOK_PRE_GEMMA4;
    } else if (str_is(model, "gpt2")) {
        v->kind = TOK_BPE;
        v->bos = v->eos = 11;   /* the reference's defaults for BPE files without ids */
        v->clean_spaces = true;
        v->pre = pre.n ? TOK_PRE_NONE : TOK_PRE_DEFAULT;
        for (size_t i = 0; i < ARRAY_LEN(k_pre_names) && pre.n; i++)
            if (str_is(pre, k_pre_names[i].name)) v->pre = k_pre_names[i].pre;
        if (v->pre == TOK_PRE_NONE)
            return pk_errf(err, err_len, PK_EUNSUPPORTED,
                        "pre-tokenizer '%.*s' is not supported (have: default, gpt-2, llama3/llama-bpe, "
                        "qwen2, qwen35, deepseek-coder, gpt-4o, gemma4)", (int)MIN(pre.n, 64), pre.p);
        if (v->pre == TOK_PRE_LLAMA3) v->ignore_merges = v->add_bos = true;
        if (v->pre == TOK_PRE_QWEN2 || v->pre == TOK_PRE_QWEN35 || v->pre == TOK_PRE_DEEPSEEK_CODER ||
            v->pre == TOK_PRE_GPT4O)
            v->clean_spaces = false;
    } else {
        return pk_errf(err, err_len, PK_EUNSUPPORTED,
                    "tokenizer model '%.*s' is not supported (have: llama = SentencePiece, gpt2 and "
                    "gemma4 = BPE)",
                    (int)MIN(model.n, 64), model.p);
    }
    v->spm_bpe = v->pre == TOK_PRE_GEMMA4;
    bool_key(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix);
    return PK_OK;
}

/* ---- tokens, scores, types ---- */

static pk_status load_tokens(const gguf_ctx *g, tok_vocab *v, char *err, size_t err_len)
{
    uint64_t n;
    pk_status st = str_array(g, "tokenizer.ggml.tokens", &n);
    if (st != PK_OK || n == 0 || n > INT32_MAX)
        return pk_errf(err, err_len, PK_EFORMAT, "tokenizer.ggml.tokens missing, empty or not a string array");
    v->n_vocab = (int32_t)n;
    if ((st = load_strings(g, "tokenizer.ggml.tokens", n, true, &v->tokens)) != PK_OK)
        return pk_errf(err, err_len, st, "token table: %s", pk_status_str(st));
    int64_t dup = -1;
    if ((st = strtab_index(&v->tokens, true, &dup)) != PK_OK)
        return pk_errf(err, err_len, st, st == PK_EFORMAT ? "token %lld repeats an earlier token's text"
                                                       : "token index: out of memory", (long long)dup);

    v->scores = calloc(n, sizeof(*v->scores));
    v->attr = malloc(n * sizeof(*v->attr));
    if (!v->scores || !v->attr) return pk_errf(err, err_len, PK_ENOMEM, "out of memory");

    gguf_type et;
    uint64_t m;
    if (gguf_get_arr(g, "tokenizer.ggml.scores", &et, &m) == PK_OK) {
        const char *d = gguf_arr_data(g, "tokenizer.ggml.scores");
        if ((et != GGUF_TYPE_FLOAT32 && et != GGUF_TYPE_INT32) || m < n || !d)
            return pk_errf(err, err_len, PK_EFORMAT, "tokenizer.ggml.scores: need %llu float32/int32 values",
                        (unsigned long long)n);
        for (uint64_t i = 0; i < n; i++) {
            if (et == GGUF_TYPE_FLOAT32) {
                memcpy(&v->scores[i], d + 4 * i, 4);
            } else {
                int32_t x;
                memcpy(&x, d + 4 * i, 4);
                v->scores[i] = (float)x;
            }
        }
    }

    const char *types = NULL;
    if (gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &m) == PK_OK) {
        types = gguf_arr_data(g, "tokenizer.ggml.token_type");
        if (et != GGUF_TYPE_INT32 || m < n || !types)
            return pk_errf(err, err_len, PK_EFORMAT, "tokenizer.ggml.token_type: need %llu int32 values",
                        (unsigned long long)n);
    }
    static const uint16_t attr_of_type[7] = {0, TOK_A_NORMAL, TOK_A_UNKNOWN, TOK_A_CONTROL,
                                             TOK_A_USER, TOK_A_UNUSED, TOK_A_BYTE};
    for (uint64_t i = 0; i < n; i++) {
        int32_t t = 1;
        if (types) memcpy(&t, types + 4 * i, 4);
        v->attr[i] = (t >= 0 && t < 7) ? attr_of_type[t] : 0;
    }
    return PK_OK;
}

static pk_status load_merges(const gguf_ctx *g, tok_vocab *v, char *err, size_t err_len)
{
    uint64_t n;
    pk_status st = str_array(g, "tokenizer.ggml.merges", &n);
    if (st != PK_OK || n > INT32_MAX)
        return pk_errf(err, err_len, PK_EFORMAT, "tokenizer.ggml.merges missing or not a string array");
    if ((st = load_strings(g, "tokenizer.ggml.merges", n, false, &v->merges)) != PK_OK ||
        (st = strtab_index(&v->merges, false, NULL)) != PK_OK)
        return pk_errf(err, err_len, st, "merge table: %s", pk_status_str(st));
    return PK_OK;
}

/* ---- special tokens found by their text ---- */

static int32_t find_c(const tok_vocab *v, const char *s) { return tok_find(v, s, strlen(s)); }

/* The first text of the NULL-terminated list that is a token, marked as
 * control; -1 when none. */
static int32_t detect(tok_vocab *v, const char *const *texts)
{
    for (; *texts; texts++) {
        int32_t id = find_c(v, *texts);
        if (id >= 0) {
            v->attr[id] |= TOK_A_CONTROL;
            return id;
        }
    }
    return -1;
}

static const char *const k_eot[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "<end_of_utterance>", NULL};
static const char *const k_eom[] = {"<|eom_id|>", NULL};
static const char *const k_fim_pre[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
    "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>", "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
static const char *const k_fim_suf[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
    "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>", "<SUF>", "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
static const char *const k_fim_mid[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
    "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL};
static const char *const k_fim_pad[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL};
static const char *const k_fim_rep[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL};
static const char *const k_fim_sep[] = {"<|file_sep|>", NULL};
/* Texts that end generation. */
static const char *const k_eog[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
    "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "[e~[", NULL};

/* The token spelled text when it ends generation, else -1. */
static int32_t eog_text(const tok_vocab *v, const char *text)
{
    int32_t id = find_c(v, text);
    return id >= 0 && (v->attr[id] & TOK_A_EOG) ? id : -1;
}

static void mark_special(const gguf_ctx *g, tok_vocab *v)
{
    int32_t n = v->n_vocab;
    static const struct { const char *key; const char *const *texts; bool eog; } fim[] = {
        {"tokenizer.ggml.fim_pre_token_id", k_fim_pre, false}, {"tokenizer.ggml.fim_suf_token_id", k_fim_suf, false},
        {"tokenizer.ggml.fim_mid_token_id", k_fim_mid, false}, {"tokenizer.ggml.fim_pad_token_id", k_fim_pad, true},
        {"tokenizer.ggml.fim_rep_token_id", k_fim_rep, true}, {"tokenizer.ggml.fim_sep_token_id", k_fim_sep, true},
    };
    static const char *const old_fim_keys[3] = {"tokenizer.ggml.prefix_token_id", "tokenizer.ggml.suffix_token_id",
                                                "tokenizer.ggml.middle_token_id"};
    v->eot = v->eom = -1;
    id_key(g, "tokenizer.ggml.eot_token_id", n, &v->eot);
    id_key(g, "tokenizer.ggml.eom_token_id", n, &v->eom);
    if (v->eot < 0) v->eot = detect(v, k_eot);
    if (v->eom < 0) v->eom = detect(v, k_eom);
    for (size_t i = 0; i < ARRAY_LEN(fim); i++) {
        int32_t id = -1;
        id_key(g, fim[i].key, n, &id);
        if (i < 3) id_key(g, old_fim_keys[i], n, &id);
        if (id < 0) id = detect(v, fim[i].texts);
        if (id >= 0 && fim[i].eog) v->attr[id] |= TOK_A_EOG;
    }
    for (const char *const *t = k_eog; *t; t++) {
        int32_t id = find_c(v, *t);
        if (id >= 0) v->attr[id] |= TOK_A_EOG | TOK_A_CONTROL;
    }
    /* gpt-oss: these must always be rendered. */
    static const char *const always_shown[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};
    for (size_t i = 0; i < ARRAY_LEN(always_shown); i++) {
        int32_t id = find_c(v, always_shown[i]);
        if (id >= 0) v->attr[id] = TOK_A_USER | (v->attr[id] & TOK_A_EOG);
    }
    int32_t ids[3] = {v->eos, v->eot, v->eom};
    for (int i = 0; i < 3; i++)
        if (ids[i] >= 0) v->attr[ids[i]] |= TOK_A_EOG;

    /* Harmony-style vocabularies: <|end|> ends a message, not generation. */
    int32_t end = eog_text(v, "<|end|>");
    bool has_call = eog_text(v, "<|call|>") >= 0 || eog_text(v, "<|calls|>") >= 0;
    if (end >= 0 && has_call && (eog_text(v, "<|return|>") >= 0 || eog_text(v, "<|flush|>") >= 0))
        v->attr[end] = TOK_A_USER;
    /* Gemma 4 style: </s> is not an end of generation there. */
    int32_t s_end = eog_text(v, "</s>");
    if (s_end >= 0 && eog_text(v, "<|tool_response>") >= 0) v->attr[s_end] = TOK_A_NORMAL;
}

/* ---- derived tables ---- */

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The ids the special-token pass looks for, longest text first (ties: lower
 * id first), sorted as keys (~length, id) so qsort needs no context. */
static pk_status build_special(tok_vocab *v)
{
    uint64_t *keys = malloc((size_t)v->n_vocab * sizeof(*keys));
    v->special = malloc((size_t)v->n_vocab * sizeof(*v->special));
    if (!keys || !v->special) {
        free(keys);
        return PK_ENOMEM;
    }
    const tok_strtab *t = &v->tokens;
    for (int32_t i = 0; i < v->n_vocab; i++)
        if (v->attr[i] & (TOK_A_CONTROL | TOK_A_USER | TOK_A_UNKNOWN))
            keys[v->n_special++] = ((uint64_t)(UINT32_MAX - (t->off[i + 1] - t->off[i])) << 32) | (uint32_t)i;
    qsort(keys, (size_t)v->n_special, sizeof(*keys), u64_cmp);
    for (int32_t i = 0; i < v->n_special; i++) v->special[i] = (int32_t)(keys[i] & UINT32_MAX);
    free(keys);
    return PK_OK;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if ((c | 32) >= 'a' && (c | 32) <= 'f') return (c | 32) - 'a' + 10;
    return -1;
}

/* The byte a <0xNN> token stands for (hex digits at 3 and 4; what is not a
 * hex digit ends the number, as strtol would). */
static char byte_of(const char *s, uint32_t n)
{
    int v = 0;
    for (uint32_t i = 3; i < 5 && i < n && hexval(s[i]) >= 0; i++) v = v * 16 + hexval(s[i]);
    return (char)v;
}

/* Appends the piece of token id, as tok_piece(special = true) returns it. */
static pk_status append_piece(const tok_vocab *v, int32_t id, tok_bytes *out)
{
    uint32_t n;
    const char *s = tok_strtab_str(&v->tokens, (uint32_t)id, &n);
    uint16_t a = v->attr[id];
    if (a & (TOK_A_CONTROL | TOK_A_UNKNOWN | TOK_A_USER)) return tok_bytes_append(out, s, n);
    if (a & TOK_A_BYTE) {
        char b = byte_of(s, n);
        return tok_bytes_append(out, &b, 1);
    }
    if (!(a & TOK_A_NORMAL)) return PK_OK;
    pk_status st = tok_bytes_reserve(out, n);
    if (st != PK_OK) return st;
    for (uint32_t i = 0; i < n && st == PK_OK;) {
        size_t adv;
        uint32_t c = tok_utf8_decode((const unsigned char *)s + i, n - i, &adv);
        i += (uint32_t)adv;
        if (v->kind == TOK_SPM || v->spm_bpe) {
            char u[4];
            st = c == 0x2581 ? tok_bytes_append(out, " ", 1) : tok_bytes_append(out, u, (size_t)tok_utf8_encode(c, u));
            continue;
        }
        int b = tok_cpt_to_byte(c);
        if (b >= 0) {
            char ch = (char)b;
            st = tok_bytes_append(out, &ch, 1);
            continue;
        }
        /* Not in the byte alphabet: the reference writes a marker with the
         * character's UTF-8 in hex and the whole token text. */
        char u[4], hex[32];
        int ul = tok_utf8_encode(c, u), hl = snprintf(hex, sizeof(hex), "[UNK_BYTE_0x");
        for (int k = 0; k < ul; k++) hl += snprintf(hex + hl, sizeof(hex) - (size_t)hl, "%02x", (unsigned char)u[k]);
        st = tok_bytes_append(out, hex, (size_t)hl);
        if (st == PK_OK) st = tok_bytes_append(out, s, n);
        if (st == PK_OK) st = tok_bytes_append(out, "]", 1);
    }
    return st;
}

static pk_status build_pieces(tok_vocab *v)
{
    tok_bytes pool = {0};
    tok_strtab *t = &v->pieces;
    t->n = (uint32_t)v->n_vocab;
    t->off = malloc(((size_t)t->n + 1) * sizeof(*t->off));
    if (!t->off) return PK_ENOMEM;
    t->off[0] = 0;
    pk_status st = PK_OK;
    for (int32_t i = 0; i < v->n_vocab && st == PK_OK; i++) {
        st = append_piece(v, i, &pool);
        if (pool.n > UINT32_MAX) st = PK_EFORMAT;
        t->off[i + 1] = (uint32_t)pool.n;
    }
    t->pool = pool.v ? pool.v : malloc(1);
    return st != PK_OK ? st : t->pool ? PK_OK : PK_ENOMEM;
}

static void find_bytes(tok_vocab *v)
{
    for (int b = 0; b < 256; b++) {
        char one = (char)b, hex[8];
        int32_t id = -1;
        if (v->kind == TOK_SPM || v->spm_bpe) {
            snprintf(hex, sizeof(hex), "<0x%02X>", b);
            id = find_c(v, hex);
        }
        /* SentencePiece-style BPE has only the <0xNN> spelling */
        v->byte_tok[b] = id >= 0 || v->spm_bpe ? id : tok_find(v, &one, 1);
    }
}

/* Phi-3 (recognised by general.name, as the reference does): special tokens
 * swallow the white space after them, except <unk>, <s>, <|endoftext|>. */
static void phi3_strip(const gguf_ctx *g, tok_vocab *v)
{
    gguf_str name;
    if (!str_key(g, "general.name", &name)) return;
    char low[256];
    size_t n = MIN(name.n, sizeof(low) - 1);
    for (size_t i = 0; i < n; i++) low[i] = (name.p[i] >= 'A' && name.p[i] <= 'Z') ? name.p[i] + 32 : name.p[i];
    low[n] = '\0';
    if (!strstr(low, "phi-3") && !strstr(low, "phi3")) return;
    for (int32_t i = 0; i < v->n_special; i++) v->attr[v->special[i]] |= TOK_A_RSTRIP;
    int32_t id = find_c(v, "</s>");
    if (id >= 0) v->attr[id] |= TOK_A_RSTRIP;
    static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
    for (size_t i = 0; i < ARRAY_LEN(keep); i++)
        if ((id = find_c(v, keep[i])) >= 0) v->attr[id] &= (uint16_t)~TOK_A_RSTRIP;
}

pk_status tok_load_gguf(const gguf_ctx *g, tok_vocab **out, char *err, size_t err_len)
{
    if (err && err_len) err[0] = '\0';
    if (!g || !out) return pk_errf(err, err_len, PK_EINVAL, "tok_load_gguf: NULL argument");
    *out = NULL;
    tok_vocab *v = calloc(1, sizeof(*v));
    if (!v) return pk_errf(err, err_len, PK_ENOMEM, "out of memory");
    v->pad = -1;
    pk_status st = set_model(g, v, err, err_len);
    if (st == PK_OK) st = load_tokens(g, v, err, err_len);
    if (st == PK_OK && v->kind == TOK_BPE) st = load_merges(g, v, err, err_len);
    if (st != PK_OK) {
        tok_free(v);
        return st;
    }
    int32_t n = v->n_vocab;
    /* Default ids that do not fit this vocabulary are dropped. */
    if (v->bos >= n) v->bos = -1;
    if (v->eos >= n) v->eos = -1;
    if (v->unk >= n || v->kind == TOK_BPE) v->unk = -1;
    id_key(g, "tokenizer.ggml.bos_token_id", n, &v->bos);
    id_key(g, "tokenizer.ggml.eos_token_id", n, &v->eos);
    id_key(g, "tokenizer.ggml.unknown_token_id", n, &v->unk);
    id_key(g, "tokenizer.ggml.padding_token_id", n, &v->pad);
    bool_key(g, "tokenizer.ggml.add_bos_token", &v->add_bos);
    bool_key(g, "tokenizer.ggml.add_eos_token", &v->add_eos);
    if (v->pre == TOK_PRE_GEMMA4) v->add_bos = true;   /* the reference overrides the file: a BOS always */
    if (v->bos < 0) v->add_bos = false;
    if (v->eos < 0) v->add_eos = false;

    mark_special(g, v);
    find_bytes(v);
    st = build_special(v);
    if (st == PK_OK) st = build_pieces(v);
    if (st != PK_OK) {
        tok_free(v);
        return pk_errf(err, err_len, st, "building token tables: %s", pk_status_str(st));
    }
    phi3_strip(g, v);

    gguf_str tmpl;
    if (str_key(g, "tokenizer.chat_template", &tmpl)) {
        v->chat_template = malloc(tmpl.n + 1);
        if (!v->chat_template) {
            tok_free(v);
            return pk_errf(err, err_len, PK_ENOMEM, "out of memory");
        }
        memcpy(v->chat_template, tmpl.p, tmpl.n);
        v->chat_template[tmpl.n] = '\0';
    }
    *out = v;
    return PK_OK;
}
