/*
 * srv_fields.c - the llama.cpp request fields beyond the OpenAI basics:
 * reasoning_format, chat_template_kwargs, logit_bias, post_sampling_probs,
 * response_fields, timings_per_token; and the refusal of fields polykv
 * does not implement.
 *
 * Unknown fields are ignored (OpenAI clients send many), but a field
 * llama-server knows and polykv cannot honour is a 400 naming it whenever
 * it asks for something other than its neutral value: a client that sets
 * mirostat gets told, not a silently different sampler.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../grammar/gram.h"
#include "srv_parse.h"

/* Fields with the value that means "off"; anything else is refused. */
static const struct { const char *key; double neutral; const char *why; } UNSUPPORTED_NUM[] = {
    { "mirostat", 0, "mirostat sampling is not supported" },
    { "dynatemp_range", 0, "dynamic temperature is not supported" },
    { "xtc_probability", 0, "XTC sampling is not supported" },
    { "typical_p", 1, "typical sampling is not supported" },
    { "dry_multiplier", 0, "DRY sampling is not supported" },
    { "top_n_sigma", -1, "top-n-sigma sampling is not supported" },
    { "n_indent", 0, "n_indent is not supported" },
    { "t_max_predict_ms", 0, "t_max_predict_ms is not supported" },
};

static bool refuse_unsupported(const json_t *b, srv_err *e)
{
    for (size_t i = 0; i < ARRAY_LEN(UNSUPPORTED_NUM); i++) {
        const json_t *v = srv_field(b, UNSUPPORTED_NUM[i].key);
        if (!v) continue;
        if (!json_is_number(v) || json_number_value(v) != UNSUPPORTED_NUM[i].neutral)
            return srv_fail(e, 400, UNSUPPORTED_NUM[i].key, "'%s': %s", UNSUPPORTED_NUM[i].key,
                            UNSUPPORTED_NUM[i].why);
    }
    static const char *const lists[] = { "lora", "image_data", "multimodal_data", "dry_sequence_breakers" };
    for (size_t i = 0; i < ARRAY_LEN(lists); i++) {
        const json_t *v = srv_field(b, lists[i]);
        if (v && !(json_is_array(v) && !json_array_size(v)))
            return srv_fail(e, 400, lists[i], "'%s' is not supported", lists[i]);
    }
    return true;
}

/* ---- logit_bias ---- */

typedef struct bias_buf { eng_bias *p; int32_t n, cap; } bias_buf;

static bool bias_put(bias_buf *b, int32_t token, float bias)
{
    if (b->n == b->cap) {
        int32_t cap = b->cap ? 2 * b->cap : 16;
        eng_bias *p = realloc(b->p, (size_t)cap * sizeof *p);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    b->p[b->n++] = (eng_bias){ token, bias };
    return true;
}

/* The largest bias, either sign.  A logit moved by more than about 30 is
 * already certain or impossible, so this loses no meaning; it keeps the
 * sum of every entry for one token (a few million at most in a body)
 * finite in float, and so the log-probabilities: 1e308 became +inf, and
 * inf - inf is NaN. */
#define BIAS_MAX 1e9

/* A bias value: a number in [-BIAS_MAX, BIAS_MAX], or false (the token
 * banned). */
static bool bias_value(const json_t *v, float *out)
{
    if (json_is_false(v)) {
        *out = -INFINITY;
        return true;
    }
    if (!json_is_number(v) || !(fabs(json_number_value(v)) <= BIAS_MAX)) return false;
    *out = (float)json_number_value(v);
    return true;
}

/* One entry: a token id, a string (every token of its text), or, in the
 * object form, a key that is a decimal id or a text. */
static bool bias_target(const json_t *key, const char *key_text, const tok_vocab *voc, float bias, bias_buf *b,
                        srv_err *e)
{
    int32_t n_vocab = voc ? tok_n_vocab(voc) : INT32_MAX;
    if (json_is_integer(key)) {
        json_int_t id = json_integer_value(key);
        if (id < 0 || id >= n_vocab)
            return srv_fail(e, 400, "logit_bias", "logit_bias: token %lld is outside the vocabulary [0, %d)",
                            (long long)id, n_vocab);
        return bias_put(b, (int32_t)id, bias) || srv_fail(e, 500, NULL, "out of memory");
    }
    if (!key_text) return srv_fail(e, 400, "logit_bias", "logit_bias: an entry must name a token id or a text");
    if (!voc) return srv_fail(e, 400, "logit_bias", "logit_bias: texts need the model's vocabulary");
    int32_t *ids = NULL, n = 0;
    pk_status st = srv_tokenize(voc, key_text, strlen(key_text), false, false, &ids, &n);
    if (st != PK_OK) return srv_fail(e, 500, NULL, "tokenization failed: %s", pk_status_str(st));
    bool ok = true;
    for (int32_t i = 0; i < n && ok; i++) ok = bias_put(b, ids[i], bias) || srv_fail(e, 500, NULL, "out of memory");
    free(ids);
    return ok;
}

static bool parse_logit_bias(const json_t *body, const tok_vocab *voc, eng_completion *c, srv_err *e)
{
    const json_t *lb = srv_field(body, "logit_bias");
    if (!lb) return true;
    bias_buf b = {0};
    bool ok = true;
    if (json_is_array(lb)) {                    /* llama.cpp: [[id | "text", bias | false], ...] */
        for (size_t i = 0; i < json_array_size(lb) && ok; i++) {
            const json_t *pair = json_array_get(lb, i);
            float bias;
            if (!json_is_array(pair) || json_array_size(pair) != 2 || !bias_value(json_array_get(pair, 1), &bias)) {
                ok = srv_fail(e, 400, "logit_bias", "logit_bias[%zu] must be [token id or text, number in [-1e9, 1e9] "
                              "or false]", i);
                break;
            }
            const json_t *k = json_array_get(pair, 0);
            ok = bias_target(k, json_string_value(k), voc, bias, &b, e);
        }
    } else if (json_is_object(lb)) {            /* OpenAI: {"id": bias}; llama.cpp also {"text": bias} */
        const char *key;
        const json_t *v;
        json_object_foreach((json_t *)lb, key, v) {
            float bias;
            if (!bias_value(v, &bias)) {
                ok = srv_fail(e, 400, "logit_bias", "logit_bias['%.40s'] must be a number in [-1e9, 1e9] or false",
                              key);
                break;
            }
            char *end;
            long long id = strtoll(key, &end, 10);
            json_t *num = *key && !*end ? json_integer(id) : NULL;
            ok = bias_target(num, key, voc, bias, &b, e);
            json_decref(num);
            if (!ok) break;
        }
    } else {
        ok = srv_fail(e, 400, "logit_bias", "'logit_bias' must be an object or an array of pairs");
    }
    if (!ok) {
        free(b.p);
        return false;
    }
    c->bias = b.p;
    c->n_bias = b.n;
    return true;
}

/* ignore_eos as llama-server does it: every end-of-generation token gets
 * a -inf bias (so it is never sampled, rather than sampled and passed
 * over), and generation_settings.logit_bias shows them. */
static bool ban_eog(const tok_vocab *voc, eng_completion *c, srv_err *e)
{
    if (!voc) return true;
    bias_buf b = { (eng_bias *)c->bias, c->n_bias, c->n_bias };
    for (int32_t id = 0; id < tok_n_vocab(voc); id++)
        if (tok_is_eog(voc, id) && !bias_put(&b, id, -INFINITY)) {
            free(b.p);
            c->bias = NULL;
            c->n_bias = 0;
            return srv_fail(e, 500, NULL, "out of memory");
        }
    c->bias = b.p;
    c->n_bias = b.n;
    return true;
}

/* A request whose biases ban every token (false, or ignore_eos's bans
 * beside them) leaves the sampler nothing to draw: 400 rather than an
 * answer of token 0. */
static bool some_token_left(const tok_vocab *voc, const eng_completion *c, srv_err *e)
{
    int32_t n_vocab = voc ? tok_n_vocab(voc) : 0;
    if (c->n_bias < n_vocab || n_vocab <= 0) return true;
    unsigned char *banned = calloc((size_t)n_vocab, 1);
    if (!banned) return srv_fail(e, 500, NULL, "out of memory");
    int32_t n_banned = 0;
    for (int32_t k = 0; k < c->n_bias; k++) {
        int32_t t = c->bias[k].token;
        if (c->bias[k].bias == -INFINITY && !banned[t]) {
            banned[t] = 1;
            n_banned++;
        }
    }
    free(banned);
    if (n_banned < n_vocab) return true;
    return srv_fail(e, 400, "logit_bias", "logit_bias bans every token of the vocabulary (%d%s): nothing could be "
                    "sampled", n_vocab, c->ignore_eos ? ", the end-of-generation ones by ignore_eos" : "");
}

void srv_gen_req_free(eng_completion *c)
{
    gram_free(c->grammar);
    c->grammar = NULL;
    free((void *)c->bias);
    c->bias = NULL;
    c->n_bias = 0;
}

/* ---- the rest ---- */

static bool parse_reasoning(const json_t *b, srv_api api, srv_gen_opts *o, srv_err *e)
{
    const json_t *rf = srv_field(b, "reasoning_format");
    if (rf && (!json_is_string(rf) || !srv_reasoning_parse(json_string_value(rf), &o->reasoning)))
        return srv_fail(e, 400, "reasoning_format", "'reasoning_format' must be auto, none, deepseek or "
                        "deepseek-legacy");
    /* A chat's continue_final_message is read where the prompt is rendered (srv_chat.c). */
    const json_t *cfm = srv_field(b, "continue_final_message");
    if (api != SRV_API_OAI_CHAT && cfm && !json_is_false(cfm))
        return srv_fail(e, 400, "continue_final_message", "'continue_final_message' continues a chat's last "
                        "message: it belongs on /v1/chat/completions");
    const json_t *kw = srv_field(b, "chat_template_kwargs");
    if (kw && !json_is_object(kw))
        return srv_fail(e, 400, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
    return true;
}

static bool parse_response_fields(const json_t *b, srv_api api, srv_gen_opts *o, srv_err *e)
{
    const json_t *rf = srv_field(b, "response_fields");
    if (!rf) return true;
    if (!json_is_array(rf)) return srv_fail(e, 400, "response_fields", "'response_fields' must be an array of strings");
    for (size_t i = 0; i < json_array_size(rf); i++)
        if (!json_is_string(json_array_get(rf, i)))
            return srv_fail(e, 400, "response_fields", "'response_fields[%zu]' must be a string", i);
    if (api != SRV_API_NATIVE)
        return srv_fail(e, 400, "response_fields", "'response_fields' is supported on /completion");
    o->response_fields = json_array_size(rf) ? rf : NULL;
    return true;
}

/* llama-server's speculative.* fields (its schema names them; a request
 * may turn speculation on, off or change its limits; docs/speculative.md). */
static bool parse_speculative(const json_t *b, eng_completion *c, srv_err *e)
{
    const json_t *t = srv_field(b, "speculative.type");
    if (t) {
        if (!json_is_string(t) || !spec_kind_parse(json_string_value(t), &c->spec_kind))
            return srv_fail(e, 400, "speculative.type", "'speculative.type' must be \"none\", \"ngram-simple\", "
                            "\"ngram-cache\", \"draft-simple\" or \"draft-mtp\"");
        c->has_spec_kind = true;
    }
    long long x;
    if (srv_field(b, "speculative.n_max")) {
        if (!srv_get_int(b, "speculative.n_max", 0, ENG_SPEC_MAX_GUESSES, &x, e)) return false;
        c->spec_n_max = (int32_t)x;
        c->has_spec_n_max = true;
    }
    if (srv_field(b, "speculative.n_min")) {
        if (!srv_get_int(b, "speculative.n_min", 0, ENG_SPEC_MAX_GUESSES, &x, e)) return false;
        c->spec_n_min = (int32_t)x;
        c->has_spec_n_min = true;
    }
    return true;
}

bool srv_parse_llama_fields(const json_t *b, srv_api api, const tok_vocab *voc, eng_completion *c, srv_gen_opts *o,
                            srv_err *e)
{
    if (!refuse_unsupported(b, e) || !parse_reasoning(b, api, o, e) || !parse_response_fields(b, api, o, e) ||
        !srv_get_bool(b, "post_sampling_probs", &o->post_sampling_probs, e) ||
        !srv_get_bool(b, "timings_per_token", &o->timings_per_token, e) || !srv_get_bool(b, "verbose", &o->verbose, e) ||
        !srv_get_bool(b, "return_progress", &o->return_progress, e) || !parse_speculative(b, c, e))
        return false;
    if (o->stream) o->response_fields = NULL;     /* llama-server filters whole answers only */
    if (o->post_sampling_probs && api != SRV_API_NATIVE)
        return srv_fail(e, 400, "post_sampling_probs", "'post_sampling_probs' is supported on /completion");
    c->sp.post_probs = o->post_sampling_probs;
    if (!parse_logit_bias(b, voc, c, e)) return false;
    if (c->ignore_eos && !ban_eog(voc, c, e)) return false;
    if (some_token_left(voc, c, e)) return true;
    free((void *)c->bias);               /* on failure nothing is left to free, as ban_eog's */
    c->bias = NULL;
    c->n_bias = 0;
    return false;
}
