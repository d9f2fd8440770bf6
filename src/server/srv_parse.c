/*
 * srv_parse.c - request validation shared by the completion endpoints:
 * generation parameters, prompts (text, token ids, mixed), and chat
 * messages rendered through the chat template.
 *
 * Validation is strict about types (a wrong type is a 400 that names the
 * field) and lenient about presence: absent and null both mean "default",
 * and unknown fields are ignored, as OpenAI clients send many.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../grammar/gram.h"
#include "../tokenizer/tmpl_tools.h"
#include "../common/utf8.h"
#include "srv_parse.h"

/* ---- typed getters: false (with e set) only for a present, wrong value ---- */

const json_t *srv_field(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

bool srv_get_bool(const json_t *o, const char *key, bool *out, srv_err *e)
{
    const json_t *v = srv_field(o, key);
    if (!v) return true;
    if (!json_is_boolean(v)) return srv_fail(e, 400, key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return true;
}

static bool get_int(const json_t *o, const char *key, long long lo, long long hi, long long *out, srv_err *e)
{
    const json_t *v = srv_field(o, key);
    if (!v) return true;
    long long x;
    if (json_is_integer(v)) x = json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9e15)
        x = (long long)json_real_value(v);
    else return srv_fail(e, 400, key, "'%s' must be an integer", key);
    if (x < lo || x > hi) return srv_fail(e, 400, key, "'%s' must be in [%lld, %lld], got %lld", key, lo, hi, x);
    *out = x;
    return true;
}

bool srv_get_int(const json_t *o, const char *key, long long lo, long long hi, long long *out, srv_err *e)
{
    return get_int(o, key, lo, hi, out, e);
}

static bool get_i32(const json_t *o, const char *key, long long lo, long long hi, int32_t *out, srv_err *e)
{
    long long x = *out;
    if (!get_int(o, key, lo, hi, &x, e)) return false;
    *out = (int32_t)x;
    return true;
}

static bool get_float(const json_t *o, const char *key, double lo, double hi, float *out, srv_err *e)
{
    const json_t *v = srv_field(o, key);
    if (!v) return true;
    if (!json_is_number(v)) return srv_fail(e, 400, key, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) return srv_fail(e, 400, key, "'%s' must be in [%g, %g], got %g", key, lo, hi, x);
    *out = (float)x;
    return true;
}

static bool parse_stop(const json_t *b, eng_completion *c, srv_err *e)
{
    const json_t *v = srv_field(b, "stop");
    if (!v) return true;
    if (json_is_string(v)) {
        if (json_string_length(v) >= ENG_STOP_CAP)
            return srv_fail(e, 400, "stop", "a stop string holds at most %d bytes", ENG_STOP_CAP - 1);
        if (json_string_length(v)) c->stop[0] = json_string_value(v);
        return true;
    }
    if (!json_is_array(v)) return srv_fail(e, 400, "stop", "'stop' must be a string or an array of strings");
    if (json_array_size(v) > ENG_MAX_STOP - 1)
        return srv_fail(e, 400, "stop", "'stop' holds at most %d strings", ENG_MAX_STOP - 1);
    int n = 0;
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *s = json_array_get(v, i);
        if (!json_is_string(s)) return srv_fail(e, 400, "stop", "'stop[%zu]' must be a string", i);
        if (json_string_length(s) >= ENG_STOP_CAP)
            return srv_fail(e, 400, "stop", "'stop[%zu]' is longer than %d bytes", i, ENG_STOP_CAP - 1);
        if (json_string_length(s)) c->stop[n++] = json_string_value(s);
    }
    return true;
}

static bool parse_logprobs(const json_t *b, srv_api api, srv_gen_opts *o, srv_err *e)
{
    int32_t top = 0;
    switch (api) {
    case SRV_API_OAI_CHAT:
    case SRV_API_OAI_RESP:
        if (!srv_get_bool(b, "logprobs", &o->logprobs, e)) return false;
        if (!get_i32(b, "top_logprobs", 0, ENG_MAX_PROBS, &top, e)) return false;
        if (top > 0 && !o->logprobs)
            return srv_fail(e, 400, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        break;
    case SRV_API_OAI_CMPL: {
        /* The legacy API's logprobs is the number of alternatives. */
        const json_t *v = srv_field(b, "logprobs");
        if (json_is_boolean(v)) {
            o->logprobs = json_is_true(v);
        } else if (v) {
            if (!get_i32(b, "logprobs", 0, ENG_MAX_PROBS, &top, e)) return false;
            o->logprobs = true;
        }
        break;
    }
    case SRV_API_NATIVE:
        if (!get_i32(b, "n_probs", 0, ENG_MAX_PROBS, &top, e)) return false;
        o->logprobs = top > 0;
        break;
    case SRV_API_ANTHROPIC:          /* Messages answers carry no log-probs */
        break;
    }
    o->top_logprobs = top;
    return true;
}

/* ---- output constraints ---- */

bool srv_compile_gbnf(const char *src, size_t len, const char *param, gram_grammar **out, srv_err *e)
{
    gram_error ge;
    pk_status st = gram_parse(src, len, NULL, out, &ge);
    if (st == PK_ENOMEM) return srv_fail(e, 500, NULL, "out of memory");
    if (st) return srv_fail(e, 400, param, "invalid grammar at line %d, column %d (byte %lld): %s", ge.line, ge.col,
                            (long long)ge.pos, ge.msg);
    return true;
}

bool srv_compile_schema(const json_t *schema, const char *param, gram_grammar **out, srv_err *e)
{
    *out = NULL;
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return srv_fail(e, 400, param, "'%s' must be a JSON Schema (an object)", param);
    char *text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY), *gbnf = NULL;
    if (!text) return srv_fail(e, 500, NULL, "out of memory");
    gram_error ge;
    pk_status st = gram_schema_to_gbnf(text, strlen(text), &gbnf, &ge);
    free(text);
    if (st == PK_ENOMEM) return srv_fail(e, 500, NULL, "out of memory");
    if (st) return srv_fail(e, 400, param, "%s in '%s': %s", st == PK_EUNSUPPORTED ? "unsupported JSON Schema" :
                            "invalid JSON Schema", param, ge.msg);
    bool ok = srv_compile_gbnf(gbnf, strlen(gbnf), param, out, e);
    free(gbnf);
    return ok;
}

/* grammar (GBNF) and json_schema (llama.cpp), response_format (OpenAI:
 * text, json_object, json_schema; llama.cpp's json_object with "schema"
 * too).  At most one of them constrains; c->grammar is set on success. */
static bool parse_constraint(const json_t *b, eng_completion *c, srv_err *e)
{
    const json_t *gr = srv_field(b, "grammar"), *js = srv_field(b, "json_schema"), *rf = srv_field(b, "response_format");
    const json_t *schema = NULL;
    const char *param = NULL;
    if (rf) {
        const char *type = json_string_value(json_object_get(rf, "type"));
        if (!json_is_object(rf) || !type)
            return srv_fail(e, 400, "response_format", "'response_format' must be an object with a 'type'");
        if (!strcmp(type, "json_schema")) {
            const json_t *o = json_object_get(rf, "json_schema");
            schema = json_is_object(o) ? json_object_get(o, "schema") : NULL;
            if (!schema && json_is_object(o) && !json_object_get(o, "name"))
                schema = o;                        /* the schema itself, as some clients send */
            if (!json_is_object(o))
                return srv_fail(e, 400, "response_format", "response_format json_schema needs a 'json_schema' object "
                                "with a 'schema'");
            if (!schema) schema = json_true();     /* a name alone: any JSON */
            param = "response_format";
        } else if (!strcmp(type, "json_object")) {
            schema = srv_field(rf, "schema");
            param = "response_format";
            if (!schema) {
                if (gr || js) return srv_fail(e, 400, "response_format", "give one of grammar, json_schema and "
                                              "response_format");
                const char *g = gram_json_object_gbnf();
                return srv_compile_gbnf(g, strlen(g), "response_format", &c->grammar, e);
            }
        } else if (strcmp(type, "text")) {
            return srv_fail(e, 400, "response_format", "response_format '%s' is not supported (text, json_object, "
                            "json_schema)", type);
        }
    }
    if ((gr != NULL) + (js != NULL) + (schema != NULL) > 1)
        return srv_fail(e, 400, gr ? "grammar" : "json_schema", "give one of grammar, json_schema and response_format");
    if (js) { schema = js; param = "json_schema"; }
    if (schema) return srv_compile_schema(schema, param, &c->grammar, e);
    if (gr) {
        if (!json_is_string(gr)) return srv_fail(e, 400, "grammar", "'grammar' must be a string (GBNF)");
        if (!json_string_length(gr)) return true;  /* llama.cpp: "" means none */
        return srv_compile_gbnf(json_string_value(gr), json_string_length(gr), "grammar", &c->grammar, e);
    }
    return true;
}

bool srv_parse_gen(const json_t *b, srv_api api, const srv_gen_defaults *d, eng_completion *c, srv_gen_opts *o,
                   srv_err *e)
{
    memset(c, 0, sizeof *c);
    memset(o, 0, sizeof *o);
    c->sp = d->sp;
    c->n_predict = d->n_predict;
    o->reasoning = d->reasoning;
    o->verbose = d->verbose;
    int32_t n_slots = d->n_slots;
    c->cache_prompt = true;
    c->id_slot = -1;
    o->api = api;

    if (!srv_get_bool(b, "stream", &o->stream, e)) return false;
    /* n (OpenAI) or n_cmpl (llama.cpp): that many completions of the prompt. */
    o->n_choices = 1;
    if (!get_i32(b, "n", 1, SRV_MAX_CHOICES, &o->n_choices, e)) return false;
    if (!get_i32(b, "n_cmpl", 1, SRV_MAX_CHOICES, &o->n_choices, e)) return false;
    if (o->n_choices > 1 && o->stream)
        return srv_fail(e, 400, "n", "several completions (n > 1) are not streamed; set stream to false");

    /* max_tokens (OpenAI), max_completion_tokens (newer OpenAI), n_predict
     * (llama.cpp, wins when given).  -1: until the context is full. */
    const int32_t lim = 1 << 24;
    if (!get_i32(b, "max_tokens", -1, lim, &c->n_predict, e)) return false;
    if (!get_i32(b, "max_completion_tokens", -1, lim, &c->n_predict, e)) return false;
    if (!get_i32(b, "n_predict", -1, lim, &c->n_predict, e)) return false;

    smp_params *sp = &c->sp;
    if (!get_float(b, "temperature", -1e9, 1e9, &sp->temp, e)) return false;
    if (!get_float(b, "top_p", 0, 1, &sp->top_p, e)) return false;
    if (!get_float(b, "min_p", 0, 1, &sp->min_p, e)) return false;
    if (!get_i32(b, "top_k", 0, 1 << 30, &sp->top_k, e)) return false;
    if (!get_i32(b, "min_keep", 0, INT32_MAX, &sp->min_keep, e)) return false;
    if (!get_float(b, "presence_penalty", -2, 2, &sp->presence_penalty, e)) return false;
    if (!get_float(b, "frequency_penalty", -2, 2, &sp->frequency_penalty, e)) return false;
    if (!get_float(b, "repeat_penalty", 0, 1e9, &sp->repeat_penalty, e)) return false;
    if (!(sp->repeat_penalty > 0))        /* also what underflows to 0 as a float */
        return srv_fail(e, 400, "repeat_penalty", "'repeat_penalty' must be > 0 (1 = off)");
    if (!get_i32(b, "repeat_last_n", -1, lim, &sp->penalty_last_n, e)) return false;
    long long seed = -1;
    if (!get_int(b, "seed", -1, INT64_MAX, &seed, e)) return false;
    if (seed >= 0) sp->seed = (uint64_t)seed;

    if (!parse_stop(b, c, e)) return false;
    if (!srv_get_bool(b, "ignore_eos", &c->ignore_eos, e)) return false;
    if (!srv_get_bool(b, "cache_prompt", &c->cache_prompt, e)) return false;
    if (!get_i32(b, "id_slot", -1, n_slots - 1, &c->id_slot, e)) return false;
    if (!get_i32(b, "n_keep", -1, INT32_MAX, &c->n_keep, e)) return false;
    if (!get_i32(b, "n_discard", 0, INT32_MAX, &c->n_discard, e)) return false;
    if (!get_i32(b, "pool_id", 1, INT32_MAX, &c->pool_id, e)) return false;
    if (!srv_get_bool(b, "overcommit", &c->overcommit, e)) return false;
    const json_t *spn = srv_field(b, "shared_prefix_n_tokens");
    if (spn && !c->pool_id)
        return srv_fail(e, 400, "shared_prefix_n_tokens", "'shared_prefix_n_tokens' needs a 'pool_id'");
    if (spn && !get_i32(b, "shared_prefix_n_tokens", 0, INT32_MAX, &c->shared_prefix_n, e)) return false;
    c->shared_prefix_set = spn != NULL;
    const json_t *sid = srv_field(b, "session_id");
    if (sid && !json_is_string(sid))
        return srv_fail(e, 400, "session_id", "'session_id' must be a string of at most %d bytes",
                        ENG_SESSION_CAP - 1);
    if (sid && !srv_session_id(json_string_value(sid), json_string_length(sid), "session_id", c->session_id, e))
        return false;
    if (!parse_logprobs(b, api, o, e)) return false;
    /* The engine computes log-probs only when asked for alternatives; one
     * alternative is the cheapest way to get the chosen token's. */
    c->n_probs = o->logprobs ? MAX(o->top_logprobs, 1) : 0;
    if (!srv_get_bool(b, "return_tokens", &o->return_tokens, e)) return false;

    const json_t *so = srv_field(b, "stream_options");
    if (so && !json_is_object(so)) return srv_fail(e, 400, "stream_options", "'stream_options' must be an object");
    if (so && !srv_get_bool(so, "include_usage", &o->include_usage, e)) return false;

    const json_t *name = srv_field(b, "model");
    if (name && !json_is_string(name)) return srv_fail(e, 400, "model", "'model' must be a string");
    if (name) {
        /* Echoed back: cut at a character boundary, never inside one. */
        size_t len = MIN(json_string_length(name), sizeof o->model - 1);
        const char *m = json_string_value(name);
        while (len > 0 && len < json_string_length(name) && ((unsigned char)m[len] & 0xC0) == 0x80) len--;
        memcpy(o->model, m, len);
        o->model[len] = 0;
    }

    for (const char *const *k = (const char *const[]){ "echo", "best_of", "suffix", NULL }; *k; k++) {
        const json_t *v = srv_field(b, *k);
        if (v && !(json_is_false(v) || (json_is_integer(v) && json_integer_value(v) == 1) ||
                   (json_is_string(v) && !json_string_length(v))))
            return srv_fail(e, 400, *k, "'%s' is not supported", *k);
    }
    if (!srv_parse_llama_fields(b, api, d->voc, c, o, e)) return false;
    /* Last, so nothing above can fail with a grammar to free. */
    if (parse_constraint(b, c, e)) return true;
    srv_gen_req_free(c);
    return false;
}

/* ---- ids in URLs ---- */

bool srv_url_id(const char *s, long max, long *id, const char **end)
{
    /* strtol would take a sign, leading spaces and zeros: "+1", " 1" and
     * "01" would all name pool 1, so one pool had many URLs. */
    if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] >= '0' && s[1] <= '9')) return false;
    long v = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > (max - (*s - '0')) / 10) return false;
        v = v * 10 + (*s - '0');
    }
    *id = v;
    *end = s;
    return true;
}

/* ---- session ids ---- */

bool srv_session_id(const char *id, size_t len, const char *param, char out[ENG_SESSION_CAP], srv_err *e)
{
    /* A cut id is another session's name (two ids sharing 63 bytes met in
     * one), and one cut inside a character is not valid UTF-8, which no
     * JSON answer can name: so nothing is cut, and every place an id comes
     * from (body, header, query) is held to the same rule. */
    if (len >= ENG_SESSION_CAP)
        return srv_fail(e, 400, param, "'%s' is %zu bytes; a session id is at most %d", param, len,
                        ENG_SESSION_CAP - 1);
    if (!pk_utf8_valid(id, len)) return srv_fail(e, 400, param, "'%s' is not valid UTF-8", param);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)id[i] < 0x20 || id[i] == 0x7f)
            return srv_fail(e, 400, param, "'%s' holds a control character (byte %zu)", param, i);
    memcpy(out, id, len);
    out[len] = 0;
    return true;
}

/* ---- prompts ---- */

pk_status srv_tokenize_at_most(const tok_vocab *v, const char *text, size_t len, bool add_special,
                               bool parse_special, int32_t n_max, int32_t **out, int32_t *n_out)
{
    /* A token stands for at least one byte but for the few added around
     * the text, so len + 16 is nearly always enough for one pass. */
    int32_t cap = (int32_t)MIN(len + 16, (size_t)MIN(n_max, INT32_MAX / 8)), n = 0;
    int32_t *ids = malloc((size_t)MAX(cap, 1) * sizeof *ids);
    if (!ids) return PK_ENOMEM;
    pk_status st = tok_encode(v, text, len, add_special, parse_special, ids, cap, &n);
    if (st == PK_EFULL && n > n_max) {
        free(ids);
        *out = NULL;
        *n_out = n;
        return PK_EFULL;
    }
    if (st == PK_EFULL) {
        int32_t *p = realloc(ids, (size_t)n * sizeof *ids);
        if (!p) {
            free(ids);
            return PK_ENOMEM;
        }
        ids = p;
        cap = n;
        st = tok_encode(v, text, len, add_special, parse_special, ids, cap, &n);
    }
    if (st != PK_OK) {
        free(ids);
        return st;
    }
    *out = ids;
    *n_out = n;
    return PK_OK;
}

pk_status srv_tokenize(const tok_vocab *v, const char *text, size_t len, bool add_special, bool parse_special,
                       int32_t **out, int32_t *n_out)
{
    return srv_tokenize_at_most(v, text, len, add_special, parse_special, INT32_MAX, out, n_out);
}

typedef struct ids_buf { int32_t *p; int32_t n, cap; } ids_buf;

static bool ids_put(ids_buf *b, const int32_t *ids, int32_t n)
{
    if (b->n + n > b->cap) {
        int32_t cap = MAX(b->cap * 2, b->n + n + 16);
        int32_t *p = realloc(b->p, (size_t)cap * sizeof *p);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, ids, (size_t)n * sizeof *ids);
    b->n += n;
    return true;
}

static bool has_number(const json_t *a)
{
    for (size_t i = 0; i < json_array_size(a); i++)
        if (json_is_number(json_array_get(a, i))) return true;
    return false;
}

/* One prompt: a string, or an array of ids and strings. */
static bool one_prompt(const tok_vocab *v, const json_t *p, const char *field_name, bool add_special, ids_buf *out,
                       srv_err *e)
{
    int32_t n_vocab = tok_n_vocab(v);
    const json_t *items = p;
    json_t *single = NULL;
    if (json_is_string(p)) items = single = json_pack("[O]", p);
    if (!items) return srv_fail(e, 500, NULL, "out of memory");
    bool ok = true;
    for (size_t i = 0; ok && i < json_array_size(items); i++) {
        const json_t *x = json_array_get(items, i);
        if (json_is_string(x)) {
            int32_t *ids = NULL, n = 0;
            if (srv_tokenize(v, json_string_value(x), json_string_length(x), add_special && i == 0, true, &ids, &n)) {
                ok = srv_fail(e, 500, NULL, "tokenization failed");
                break;
            }
            if (!ids_put(out, ids, n)) ok = srv_fail(e, 500, NULL, "out of memory");
            free(ids);
        } else if (json_is_integer(x) || (json_is_real(x) && json_real_value(x) == floor(json_real_value(x)) &&
                                           fabs(json_real_value(x)) < 9e15)) {
            /* One rule for integers everywhere (get_int's): 2.0 is 2. */
            json_int_t id = json_is_integer(x) ? json_integer_value(x) : (json_int_t)json_real_value(x);
            if (id < 0 || id >= n_vocab)
                ok = srv_fail(e, 400, field_name, "'%s' holds the token id %lld, outside the vocabulary [0, %d)",
                              field_name, (long long)id, n_vocab);
            else {
                int32_t t = (int32_t)id;
                if (!ids_put(out, &t, 1)) ok = srv_fail(e, 500, NULL, "out of memory");
            }
        } else {
            ok = srv_fail(e, 400, field_name, "'%s' must be a string, an array of token ids, or an array of "
                          "strings and token ids", field_name);
        }
    }
    json_decref(single);
    return ok;
}

bool srv_tokenize_prompt(const tok_vocab *v, const json_t *prompt, const char *field_name, bool add_special,
                         int32_t **out, int32_t *n_out, srv_err *e)
{
    *out = NULL;
    *n_out = 0;
    if (!prompt || json_is_null(prompt)) return srv_fail(e, 400, field_name, "'%s' is required", field_name);
    if (json_is_array(prompt) && !has_number(prompt)) {
        /* An array without ids is a list of prompts; one is allowed. */
        if (json_array_size(prompt) != 1)
            return srv_fail(e, 400, field_name, json_array_size(prompt) ? "'%s' holds several prompts; only one "
                            "per request is supported" : "'%s' must not be empty", field_name);
        prompt = json_array_get(prompt, 0);
    }
    if (!json_is_string(prompt) && !json_is_array(prompt))
        return srv_fail(e, 400, field_name, "'%s' must be a string or an array", field_name);
    ids_buf b = {0};
    if (!one_prompt(v, prompt, field_name, add_special, &b, e)) {
        free(b.p);
        return false;
    }
    if (b.n == 0) {
        free(b.p);
        return srv_fail(e, 400, field_name, "'%s' gives no tokens", field_name);
    }
    *out = b.p;
    *n_out = b.n;
    return true;
}

/* ---- chat ---- */

/* Text of a content value: a string, or text parts joined by new lines. */
static bool content_text(const json_t *c, size_t i, json_t **out, srv_err *e)
{
    *out = NULL;
    if (!c || json_is_null(c)) return true;
    if (json_is_string(c)) {
        *out = json_incref((json_t *)c);
        return true;
    }
    if (!json_is_array(c))
        return srv_fail(e, 400, "messages", "messages[%zu].content must be a string or an array of parts", i);
    char *text = NULL;
    size_t n = 0;
    for (size_t k = 0; k < json_array_size(c); k++) {
        const json_t *part = json_array_get(c, k);
        const char *type = json_string_value(json_object_get(part, "type"));
        const json_t *t = json_object_get(part, "text");
        if (!type || strcmp(type, "text") || !json_is_string(t)) {
            free(text);
            return srv_fail(e, 400, "messages", "messages[%zu].content[%zu]: only text parts are supported", i, k);
        }
        size_t len = json_string_length(t);
        char *p = realloc(text, n + len + 2);
        if (!p) {
            free(text);
            return srv_fail(e, 500, NULL, "out of memory");
        }
        text = p;
        if (n) text[n++] = '\n';
        memcpy(text + n, json_string_value(t), len);
        n += len;
        text[n] = 0;
    }
    *out = json_stringn(text ? text : "", n);
    free(text);
    return *out != NULL || srv_fail(e, 400, "messages", "messages[%zu].content is not valid UTF-8", i);
}

static bool check_tool_calls(const json_t *calls, size_t i, srv_err *e)
{
    if (!json_is_array(calls)) return srv_fail(e, 400, "messages", "messages[%zu].tool_calls must be an array", i);
    for (size_t k = 0; k < json_array_size(calls); k++) {
        const json_t *f = json_object_get(json_array_get(calls, k), "function");
        const json_t *args = json_object_get(f, "arguments");
        if (!json_is_object(f) || !json_is_string(json_object_get(f, "name")) ||
            (args && !json_is_string(args) && !json_is_object(args)))
            return srv_fail(e, 400, "messages", "messages[%zu].tool_calls[%zu] must be {\"function\": {\"name\": "
                            "string, \"arguments\": string}}", i, k);
    }
    return true;
}

/* The messages in the shape tmpl_tools / tmpl_apply take: roles checked,
 * "developer" read as "system", content a string or null. */
static bool normalize_messages(const json_t *msgs, json_t **out, bool *has_tool_msgs, srv_err *e)
{
    *out = NULL;
    *has_tool_msgs = false;
    if (!json_is_array(msgs)) return srv_fail(e, 400, "messages", "'messages' must be an array");
    if (!json_array_size(msgs)) return srv_fail(e, 400, "messages", "'messages' must not be empty");
    json_t *norm = json_array();
    for (size_t i = 0; norm && i < json_array_size(msgs); i++) {
        const json_t *m = json_array_get(msgs, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!json_is_object(m) || !role) {
            json_decref(norm);
            return srv_fail(e, 400, "messages", "messages[%zu] must be an object with a string 'role'", i);
        }
        if (!strcmp(role, "developer")) role = "system";
        if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "tool")) {
            json_decref(norm);
            return srv_fail(e, 400, "messages", "messages[%zu].role '%s' is not one of system, user, assistant, "
                            "tool", i, role);
        }
        json_t *content;
        if (!content_text(json_object_get(m, "content"), i, &content, e)) {
            json_decref(norm);
            return false;
        }
        const json_t *calls = srv_field(m, "tool_calls");
        bool is_assistant = !strcmp(role, "assistant");
        if ((calls && (!is_assistant || !check_tool_calls(calls, i, e))) || (!content && !(is_assistant && calls))) {
            json_decref(content);
            json_decref(norm);
            if (calls && !is_assistant)
                return srv_fail(e, 400, "messages", "messages[%zu]: only assistant messages carry tool_calls", i);
            if (calls) return false;
            return srv_fail(e, 400, "messages", "messages[%zu].content is required", i);
        }
        json_t *nm = json_pack("{s:s, s:o}", "role", role, "content", content ? content : json_null());
        if (calls && json_array_size(calls)) {
            json_object_set(nm, "tool_calls", (json_t *)calls);
            *has_tool_msgs = true;
        }
        if (!strcmp(role, "tool")) *has_tool_msgs = true;
        if (!nm || json_array_append_new(norm, nm)) {
            json_decref(norm);
            return srv_fail(e, 500, NULL, "out of memory");
        }
    }
    if (!norm) return srv_fail(e, 500, NULL, "out of memory");
    *out = norm;
    return true;
}

static bool check_tools(const json_t *tools, srv_err *e)
{
    if (!json_is_array(tools)) return srv_fail(e, 400, "tools", "'tools' must be an array");
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *t = json_array_get(tools, i);
        const char *type = json_string_value(json_object_get(t, "type"));
        const json_t *f = json_object_get(t, "function");
        if (!type || strcmp(type, "function") || !json_is_object(f) || !json_is_string(json_object_get(f, "name")))
            return srv_fail(e, 400, "tools", "tools[%zu] must be {\"type\": \"function\", \"function\": {\"name\": "
                            "string, ...}}", i);
        const json_t *params = json_object_get(f, "parameters");
        if (params && !json_is_object(params))
            return srv_fail(e, 400, "tools", "tools[%zu].function.parameters must be a JSON Schema object", i);
    }
    return true;
}

/* tool_choice: "none" | "auto" | "required" | {"type": "function", ...}.
 * Sets *use to whether the tools go into the prompt. */
static bool check_tool_choice(const json_t *b, bool *use, srv_err *e)
{
    const json_t *tc = srv_field(b, "tool_choice");
    *use = true;
    if (!tc) return true;
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (!strcmp(s, "none")) *use = false;
        else if (strcmp(s, "auto") && strcmp(s, "required"))
            return srv_fail(e, 400, "tool_choice", "'tool_choice' must be none, auto, required or an object");
        return true;
    }
    if (!json_is_object(tc)) return srv_fail(e, 400, "tool_choice", "'tool_choice' must be a string or an object");
    return true;
}

/* The model's own template source when there is one (so what its Jinja
 * adds, such as Qwen's default system message, is there too), else the
 * plain layout of kind k. */
static pk_status render_msgs(tmpl_kind k, const char *src, const tmpl_msg *m, int n, bool add_assistant, char *out,
                             size_t cap, size_t *n_out)
{
    if (src) return tmpl_render(src, m, n, add_assistant, out, cap, n_out);
    return tmpl_apply(k, m, n, add_assistant, out, cap, n_out);
}

static bool render_plain(tmpl_kind k, const char *src, const json_t *msgs, bool add_assistant, char **out,
                         size_t *n_out, srv_err *e)
{
    size_t n = json_array_size(msgs), need = 0;
    tmpl_msg *tm = calloc(n ? n : 1, sizeof *tm);
    if (!tm) return srv_fail(e, 500, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(msgs, i);
        tm[i].role = json_string_value(json_object_get(m, "role"));
        tm[i].content = json_string_value(json_object_get(m, "content"));
        if (!tm[i].content) tm[i].content = "";
    }
    pk_status st = render_msgs(k, src, tm, (int)n, add_assistant, NULL, 0, &need);
    char *text = NULL;
    if (st == PK_OK || st == PK_EFULL) {
        text = malloc(need + 1);
        st = text ? render_msgs(k, src, tm, (int)n, add_assistant, text, need + 1, &need) : PK_ENOMEM;
    }
    free(tm);
    if (st != PK_OK) {
        free(text);
        if (st == PK_ENOMEM) return srv_fail(e, 500, NULL, "out of memory");
        return srv_fail(e, 400, "messages", "the %s chat template cannot render these messages (roles?)",
                        tmpl_name(k));
    }
    *out = text;
    *n_out = need;
    return true;
}

bool srv_render_chat(const json_t *body, tmpl_kind k, const char *tmpl_src, char **prompt, size_t *n_prompt,
                     srv_tool_fmt *tools_fmt, srv_err *e)
{
    *prompt = NULL;
    *n_prompt = 0;
    *tools_fmt = SRV_TOOL_NONE;
    bool add_gen = true, use_tools, has_tool_msgs;
    if (!srv_get_bool(body, "add_generation_prompt", &add_gen, e)) return false;
    const json_t *tools = srv_field(body, "tools");
    if (tools && !check_tools(tools, e)) return false;
    if (!check_tool_choice(body, &use_tools, e)) return false;
    use_tools = use_tools && tools && json_array_size(tools) > 0;
    json_t *msgs;
    if (!normalize_messages(json_object_get(body, "messages"), &msgs, &has_tool_msgs, e)) return false;
    bool ok;
    if (use_tools || has_tool_msgs) {
        char err[200] = "";
        pk_status st = tmpl_tools_render(k, msgs, use_tools ? tools : NULL, add_gen, prompt, n_prompt, err,
                                         sizeof err);
        ok = st == PK_OK || srv_fail(e, st == PK_ENOMEM ? 500 : 400, use_tools ? "tools" : "messages", "%s",
                                     st == PK_ENOMEM ? "out of memory" : err);
        if (ok && use_tools) *tools_fmt = k == TMPL_LLAMA3 ? SRV_TOOL_LLAMA3 : SRV_TOOL_QWEN;
    } else {
        ok = render_plain(k, tmpl_src, msgs, add_gen, prompt, n_prompt, e);
    }
    json_decref(msgs);
    return ok;
}

/* ---- forcing a call: a grammar for tool_choice ---- */

static void put_lit(pk_buf *b, const char *s) { gram_put_literal(b, s, strlen(s)); }

/* A parameter value of the XML form that is text: anything up to the
 * closing tag, so no "</" (a rare loss: such a string cannot be forced). */
#define XML_TEXT_RULE "xml-text ::= ([^<] | \"<\" [^/])*\n"

/* How a parameter's VALUE is constrained: 1, its schema allows strings
 * (srv_tools_parse keeps such a value as the text written); 2, an enum of
 * strings only (one of them, as text); 0, the JSON its schema allows. */
static int text_kind(const json_t *sch)
{
    const json_t *t = json_object_get(sch, "type"), *en = json_object_get(sch, "enum");
    bool str = json_is_string(t) && !strcmp(json_string_value(t), "string");
    for (size_t j = 0; json_is_array(t) && j < json_array_size(t); j++) {
        const char *v = json_string_value(json_array_get(t, j));
        str = str || (v && !strcmp(v, "string"));
    }
    if (!str || json_object_get(sch, "const")) return 0;
    if (!en) return 1;
    for (size_t j = 0; j < json_array_size(en); j++)
        if (!json_is_string(json_array_get(en, j))) return 0;
    return json_array_size(en) ? 2 : 0;
}

/*
 * The QWEN_XML call of tool i (its parameters schema `params`):
 *   <tool_call>\n<function=N>\n(<parameter=P>\nVALUE\n</parameter>\n)*</function>\n</tool_call>
 * the parameters in the schema's order, the required ones always; VALUE
 * as text_kind says.
 */
static pk_status put_xml_call_rule(pk_buf *b, int i, const char *name, const json_t *params, gram_error *ge)
{
    const json_t *props = json_object_get(params, "properties"), *req = json_object_get(params, "required");
    pk_buf_printf(b, "call%d ::= \"<tool_call>\\n<function=\" ", i);
    put_lit(b, name);
    pk_buf_puts(b, " \">\\n\"");
    const char *key;
    const json_t *sch;
    int k = 0;
    pk_buf rules = {0};
    pk_status st = PK_OK;
    json_object_foreach((json_t *)props, key, sch) {
        bool required = false;
        for (size_t j = 0; j < json_array_size(req); j++) {
            const char *r = json_string_value(json_array_get(req, j));
            required = required || (r && !strcmp(r, key));
        }
        pk_buf_printf(b, " t%d-p%d%s", i, k, required ? "" : "?");
        pk_buf_printf(&rules, "t%d-p%d ::= \"<parameter=\" ", i, k);
        put_lit(&rules, key);
        pk_buf_puts(&rules, " \">\\n\" ");
        int kind = text_kind(sch);
        char *value_rules = NULL;   /* kind 0: the schema's rules */
        if (kind == 1) {
            pk_buf_puts(&rules, "xml-text");
        } else if (kind == 2) {
            const json_t *en = json_object_get(sch, "enum");
            pk_buf_puts(&rules, "(");
            for (size_t j = 0; j < json_array_size(en); j++) {
                pk_buf_puts(&rules, j ? " | " : "");
                put_lit(&rules, json_string_value(json_array_get(en, j)));
            }
            pk_buf_puts(&rules, ")");
        } else {
            char pfx[32], *text = json_dumps(sch, JSON_COMPACT | JSON_ENCODE_ANY);
            snprintf(pfx, sizeof pfx, "t%d-v%d-", i, k);
            st = text ? gram_schema_rules(text, strlen(text), pfx, GRAM_SYNTAX_JSON, &value_rules, ge) : PK_ENOMEM;
            free(text);
            if (st) break;
            pk_buf_printf(&rules, "%sroot", pfx);
        }
        pk_buf_puts(&rules, " \"\\n</parameter>\\n\"\n");
        if (value_rules) pk_buf_puts(&rules, value_rules);
        free(value_rules);
        k++;
    }
    pk_buf_puts(b, " \"</function>\\n</tool_call>\"\n");
    pk_buf_put(b, rules.p ? rules.p : "", rules.n);
    if (!st && rules.oom) st = PK_ENOMEM;
    pk_buf_free(&rules);
    return st;
}

/* The text the model must write for a call of `name` in format f:
 *   QWEN    <tool_call>\n{"name": "N", "arguments": ARGS}\n</tool_call>
 *   LLAMA3  {"name": "N", "parameters": ARGS}
 *   GEMMA4  <|tool_call>call:N{ARGS}<tool_call|>
 * where ARGS follows the tool's parameters schema (rules t<i>-..., in
 * Gemma 4's own value syntax for GEMMA4); QWEN_XML: put_xml_call_rule. */
static void put_call_rule(pk_buf *b, srv_tool_fmt f, int i, const char *name)
{
    if (f == SRV_TOOL_GEMMA4) {
        pk_buf_printf(b, "call%d ::= \"<|tool_call>call:\" ", i);
        put_lit(b, name);
        pk_buf_printf(b, " t%d-root \"<tool_call|>\"\n", i);
        return;
    }
    json_t *js = json_string(name);
    char *q = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;   /* "N" with JSON escapes */
    json_decref(js);
    pk_buf head = {0};   /* {"name": "N", "arguments":  */
    pk_buf_printf(&head, "{\"name\": %s, \"%s\": ", q ? q : "\"\"", f == SRV_TOOL_QWEN ? "arguments" : "parameters");
    free(q);
    pk_buf_printf(b, "call%d ::= ", i);
    pk_buf_puts(b, f == SRV_TOOL_QWEN ? "\"<tool_call>\\n\" " : "");
    gram_put_literal(b, head.p ? head.p : "", head.n);
    b->oom = b->oom || head.oom;
    pk_buf_free(&head);
    pk_buf_printf(b, " t%d-root \"}\"", i);
    pk_buf_puts(b, f == SRV_TOOL_QWEN ? " \"\\n</tool_call>\"\n" : "\n");
}

bool srv_tools_grammar(const json_t *body, srv_tool_fmt f, struct gram_grammar **out, srv_err *e)
{
    *out = NULL;
    const json_t *tc = json_object_get(body, "tool_choice"), *tools = json_object_get(body, "tools");
    const char *only = NULL;
    if (json_is_object(tc)) {
        only = json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
        if (!only) return srv_fail(e, 400, "tool_choice", "tool_choice must name a function: "
                                   "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    } else if (!json_is_string(tc) || strcmp(json_string_value(tc), "required")) {
        return true;
    }
    if (f == SRV_TOOL_NONE || !json_array_size(tools))
        return srv_fail(e, 400, "tool_choice", "tool_choice forces a call but the request has no tools");
    pk_buf b = {0}, rules = {0};
    int n = 0;
    bool ok = true;
    /* Gemma 4's arguments in its template's own syntax; the other JSON
     * forms and the XML form's non-text values in JSON. */
    gram_syntax syn = f == SRV_TOOL_GEMMA4 ? GRAM_SYNTAX_GEMMA4 : GRAM_SYNTAX_JSON;
    pk_buf_puts(&b, "root ::= ");
    for (size_t i = 0; i < json_array_size(tools) && ok; i++) {
        const json_t *fn = json_object_get(json_array_get(tools, i), "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!name || (only && strcmp(name, only))) continue;
        const json_t *params = json_object_get(fn, "parameters");
        gram_error ge;
        pk_status st;
        if (f == SRV_TOOL_GEMMA4 && !srv_tools_gemma4_name_ok(name)) {
            ok = srv_fail(e, 400, "tools", "tools[%zu] (%s): Gemma 4's call syntax cannot hold this name", i, name);
            break;
        }
        if (f == SRV_TOOL_QWEN_XML) {
            st = put_xml_call_rule(&rules, (int)i, name, params, &ge);
        } else {
            json_t *any = NULL;
            if (!params || (json_is_object(params) && !json_object_size(params)))
                params = any = json_pack("{s:s}", "type", "object");
            char *text = json_dumps(params, JSON_COMPACT | JSON_ENCODE_ANY), *r = NULL;
            json_decref(any);
            char pfx[24];
            snprintf(pfx, sizeof pfx, "t%zu-", i);
            st = text ? gram_schema_rules(text, strlen(text), pfx, syn, &r, &ge) : PK_ENOMEM;
            free(text);
            if (!st) {
                put_call_rule(&rules, f, (int)i, name);
                pk_buf_puts(&rules, r);
            }
            free(r);
        }
        if (st) {
            ok = st == PK_ENOMEM ? srv_fail(e, 500, NULL, "out of memory")
                                 : srv_fail(e, 400, "tools", "tools[%zu] (%s): its parameters cannot constrain the "
                                            "call: %s", i, name, ge.msg);
            break;
        }
        pk_buf_printf(&b, "%scall%zu", n ? " | " : "", i);
        n++;
    }
    if (ok && !n) ok = srv_fail(e, 400, "tool_choice", "tool_choice names '%s', which is not among the tools", only);
    if (ok) {
        pk_buf_puts(&b, "\n");
        pk_buf_put(&b, rules.p ? rules.p : "", rules.n);
        pk_buf_puts(&b, gram_syntax_rules(syn));
        if (f == SRV_TOOL_QWEN_XML) pk_buf_puts(&b, XML_TEXT_RULE);
        ok = b.oom || rules.oom ? srv_fail(e, 500, NULL, "out of memory")
                                : srv_compile_gbnf(b.p, b.n, "tools", out, e);
    }
    pk_buf_free(&b);
    pk_buf_free(&rules);
    return ok;
}
