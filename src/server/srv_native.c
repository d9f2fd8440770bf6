/*
 * srv_native.c - llama.cpp's own endpoints: POST /completion (its response
 * shape, whole and streamed), /tokenize, /detokenize, /apply-template and
 * GET /props.  Field names and defaults follow llama-server so its clients
 * work unchanged.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/utf8.h"
#include "../model/model.h"
#include "srv_gen.h"

static const char *stop_type(eng_stop s)
{
    switch (s) {
    case ENG_STOP_EOS: return "eos";
    case ENG_STOP_WORD: return "word";
    case ENG_STOP_LIMIT:
    case ENG_STOP_CTX: return "limit";
    default: return "none";
    }
}

/* The sampling settings a request ran with (llama.cpp's
 * generation_settings, the fields polykv has). */
static json_t *settings_json(const eng_completion *c, const srv_gen_opts *o)
{
    const smp_params *sp = &c->sp;
    json_t *bias = json_array();         /* llama.cpp's shape; null is a ban (-inf) */
    for (int32_t i = 0; i < c->n_bias; i++)
        json_array_append_new(bias, json_pack("{s:o, s:i}", "bias", isfinite(c->bias[i].bias)
                                              ? json_real(c->bias[i].bias) : json_null(), "token", c->bias[i].token));
    json_t *j = json_pack("{s:i, s:I, s:f, s:i, s:f, s:f, s:f, s:i, s:f, s:f, s:i, s:b, s:b, s:b}",
                     "n_predict", c->n_predict, "seed", (json_int_t)sp->seed, "temperature", (double)sp->temp,
                     "top_k", sp->top_k, "top_p", (double)sp->top_p, "min_p", (double)sp->min_p,
                     "repeat_penalty", (double)sp->repeat_penalty, "repeat_last_n", sp->penalty_last_n,
                     "presence_penalty", (double)sp->presence_penalty, "frequency_penalty",
                     (double)sp->frequency_penalty, "n_probs", c->n_probs ? o->top_logprobs : 0, "ignore_eos",
                     c->ignore_eos, "stream", o->stream, "cache_prompt", c->cache_prompt);
    if (!j) {
        json_decref(bias);
        return NULL;
    }
    json_object_set_new(j, "logit_bias", bias);
    json_object_set_new(j, "max_tokens", json_integer(c->n_predict));
    json_object_set_new(j, "n_keep", json_integer(c->n_keep));
    json_object_set_new(j, "min_keep", json_integer(sp->min_keep));
    json_object_set_new(j, "n_discard", json_integer(c->n_discard));
    json_object_set_new(j, "post_sampling_probs", json_boolean(o->post_sampling_probs));
    json_object_set_new(j, "timings_per_token", json_boolean(o->timings_per_token));
    static const char *const reasoning[] = { "auto", "none", "deepseek", "deepseek-legacy" };
    json_object_set_new(j, "reasoning_format", json_string(reasoning[o->reasoning]));
    return j;
}

/* The value at a "/"-separated path of o, NULL when absent. */
static json_t *nested(json_t *o, const char *path)
{
    char key[128];
    while (o && *path) {
        size_t n = strcspn(path, "/");
        if (n >= sizeof key) return NULL;
        memcpy(key, path, n);
        key[n] = 0;
        o = json_object_get(o, key);
        path += n + (path[n] == '/');
    }
    return o;
}

/* response_fields: only the fields named (paths into the answer, each
 * kept under its path as the key; absent ones left out), llama-server's rule. */
static json_t *keep_fields(json_t *res, const json_t *fields)
{
    if (!res || !fields) return res;
    json_t *out = json_object();
    for (size_t i = 0; out && i < json_array_size(fields); i++) {
        const char *path = json_string_value(json_array_get(fields, i));
        json_t *v = nested(res, path);
        if (v) json_object_set(out, path, v);
    }
    json_decref(res);
    return out;
}

static json_t *tokens_json(const int32_t *ids, int32_t n)
{
    json_t *a = json_array();
    for (int32_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

/* The final object; streamed, its content was already sent. */
static json_t *final_json(srv_gen *g, bool streamed)
{
    const eng_event *d = &g->done;
    bool with_tokens = g->o.return_tokens && !streamed;
    json_t *res = json_pack("{s:i, s:o, s:o, s:i, s:b, s:s, s:i, s:i, s:o, s:o, s:b, s:b, s:s, s:s, s:i, s:o}",
        "index", 0,
        "content", streamed ? json_string("") : srv_json_text(g->text ? g->text : "", g->n_text),
        "tokens", with_tokens ? tokens_json(g->tokens, g->n_tokens) : json_array(),
        "id_slot", d->slot,
        "stop", 1,
        "model", g->o.model,
        "tokens_predicted", d->n_gen,
        "tokens_evaluated", d->n_prompt,
        "generation_settings", settings_json(&g->req, &g->o),
        "prompt", streamed ? json_string("") : srv_gen_prompt_text(g),
        "has_new_line", g->text && memchr(g->text, '\n', g->n_text) != NULL,
        "truncated", g->done.truncated,
        "stop_type", stop_type(d->stop),
        "stopping_word", d->stop == ENG_STOP_WORD ? d->stop_word : "",
        "tokens_cached", d->n_prompt + d->n_gen,
        "timings", srv_gen_timings(d));
    if (res && g->probs && !streamed) json_object_set(res, "completion_probabilities", g->probs);
    return res;
}

json_t *srv_native_response(srv_gen *g) { return keep_fields(final_json(g, false), g->o.response_fields); }

void srv_native_stream_token(srv_gen *g, const eng_event *ev)
{
    json_t *j = json_pack("{s:i, s:o, s:[i], s:b, s:i, s:i, s:i}", "index", 0, "content",
                          srv_json_text(ev->text ? ev->text : "", ev->text_len), "tokens", ev->token, "stop", 0,
                          "id_slot", -1, "tokens_predicted", g->n_tokens, "tokens_evaluated", g->n_prompt);
    if (j && g->o.logprobs) json_object_set_new(j, "completion_probabilities", json_pack("[o]",
                                                srv_gen_prob_entry(g, ev)));
    if (j && g->o.timings_per_token) json_object_set_new(j, "timings", srv_gen_timings_now(g));
    srv_gen_sse(g, j);
}

void srv_native_stream_end(srv_gen *g) { srv_gen_sse(g, final_json(g, true)); }

/* ---- handlers ---- */

enum MHD_Result srv_h_completion(srv_req *r, json_t *body)
{
    return srv_gen_prompt(r, body, SRV_API_NATIVE);
}

static bool opt_bool(const json_t *b, const char *key, bool def, bool *out, srv_err *e)
{
    const json_t *v = json_object_get(b, key);
    *out = def;
    if (!v || json_is_null(v)) return true;
    if (!json_is_boolean(v)) return srv_fail(e, 400, key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return true;
}

/* /tokenize's bounds (docs/security.md, "Limits one request is held to").
 * The answer is written as text, sized before it is allocated, so a
 * request holds its body, at most this many ids and at most this much
 * answer: before, 8 MB of text with with_pieces built a JSON object per
 * token and took 2.2 GB. */
#define TOKENIZE_MAX_TOKENS (1 << 20)
#define TOKENIZE_MAX_ANSWER_BYTES ((size_t)16 << 20)

#define PIECE_BYTES 256
#define PIECE_JSON_CAP (6 * PIECE_BYTES + 2)    /* every byte as \u00XX, and the quotes */

/* A piece's JSON into out (PIECE_JSON_CAP bytes): a string when its bytes
 * are valid UTF-8, else the array of its bytes (what llama-server's
 * with_pieces returns).  Returns its length. */
static size_t piece_json(const tok_vocab *v, int32_t id, char *out)
{
    char buf[PIECE_BYTES];
    int32_t n = tok_piece(v, id, buf, sizeof buf, true);
    if (n < 0) n = 0;
    size_t o = 0;
    if (!pk_utf8_valid(buf, (size_t)n)) {
        out[o++] = '[';
        for (int32_t i = 0; i < n; i++) o += (size_t)sprintf(out + o, "%s%u", i ? "," : "", (unsigned char)buf[i]);
        out[o++] = ']';
        return o;
    }
    out[o++] = '"';
    for (int32_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c == '\n' || c == '\t' || c == '\r') {
            out[o++] = '\\';
            out[o++] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
        } else if (c < 0x20) {
            o += (size_t)sprintf(out + o, "\\u%04x", c);
        } else {
            out[o++] = (char)c;
        }
    }
    out[o++] = '"';
    return o;
}

/* The answer {"tokens": [...]} for ids[0..n) into out, or only its length
 * when out is NULL (the first of two passes, so the text is allocated
 * once at its size). */
static size_t tokenize_answer(const tok_vocab *v, const int32_t *ids, int32_t n, bool with_pieces, char *out)
{
    static const char head[] = "{\"tokens\":[";
    char item[PIECE_JSON_CAP + 48];
    size_t o = sizeof head - 1;
    if (out) memcpy(out, head, o);
    for (int32_t i = 0; i < n; i++) {
        size_t k = (size_t)sprintf(item, "%s%s%d", i ? "," : "", with_pieces ? "{\"id\":" : "", ids[i]);
        if (with_pieces) {
            memcpy(item + k, ",\"piece\":", 9);
            k += 9;
            k += piece_json(v, ids[i], item + k);
            item[k++] = '}';
        }
        if (out) memcpy(out + o, item, k);
        o += k;
    }
    if (out) memcpy(out + o, "]}", 2);
    return o + 2;
}

enum MHD_Result srv_h_tokenize(srv_req *r, json_t *body)
{
    srv *s = r->s;
    srv_err e;
    bool add_special, parse_special, with_pieces;
    if (!opt_bool(body, "add_special", false, &add_special, &e) ||
        !opt_bool(body, "parse_special", true, &parse_special, &e) ||
        !opt_bool(body, "with_pieces", false, &with_pieces, &e))
        return srv_reply_error(r, &e);
    const json_t *content = json_object_get(body, "content");
    int32_t *ids = NULL, n = 0;
    if (json_is_string(content)) {
        pk_status st = srv_tokenize_at_most(s->voc, json_string_value(content), json_string_length(content),
                                            add_special, parse_special, TOKENIZE_MAX_TOKENS, &ids, &n);
        if (st != PK_OK && st != PK_EFULL)
            return srv_reply_errorf(r, 500, "tokenization failed: %s", pk_status_str(st));
    } else if (content && !json_is_null(content)) {
        /* Only empty strings: no tokens, as for "" (a prompt would refuse it). */
        bool all_empty = json_is_array(content) && json_array_size(content) > 0;
        for (size_t i = 0; all_empty && i < json_array_size(content); i++) {
            const json_t *x = json_array_get(content, i);
            all_empty = json_is_string(x) && json_string_length(x) == 0;
        }
        if (all_empty) return srv_reply_json(r, 200, json_pack("{s:[]}", "tokens"));
        if (!json_is_array(content) || !json_array_size(content) ||
            !srv_tokenize_prompt(s->voc, content, "content", add_special, &ids, &n, &e)) {
            if (!json_is_array(content) || !json_array_size(content))
                srv_fail(&e, 400, "content", "'content' must be a string or an array of strings and token ids");
            return srv_reply_error(r, &e);
        }
    }
    if (n > TOKENIZE_MAX_TOKENS) {
        free(ids);
        srv_fail(&e, 400, "content", "'content' gives %d tokens; /tokenize answers at most %d: send the text in "
                 "parts", n, TOKENIZE_MAX_TOKENS);
        return srv_reply_error(r, &e);
    }
    size_t len = tokenize_answer(s->voc, ids, n, with_pieces, NULL);
    if (len > TOKENIZE_MAX_ANSWER_BYTES) {
        free(ids);
        srv_fail(&e, 400, with_pieces ? "with_pieces" : "content", "the answer would take %zu bytes, past /tokenize's %zu: send the text "
                 "in parts%s", len, TOKENIZE_MAX_ANSWER_BYTES, with_pieces ? ", or without 'with_pieces'" : "");
        return srv_reply_error(r, &e);
    }
    char *text = malloc(len + 1);
    if (text) text[tokenize_answer(s->voc, ids, n, with_pieces, text)] = 0;
    free(ids);
    return srv_reply_json_text(r, 200, text, len);
}

enum MHD_Result srv_h_detokenize(srv_req *r, json_t *body)
{
    srv *s = r->s;
    const json_t *tokens = json_object_get(body, "tokens");
    if (tokens && !json_is_null(tokens) && !json_is_array(tokens))
        return srv_reply_errorf(r, 400, "'tokens' must be an array of token ids");
    int32_t n_vocab = tok_n_vocab(s->voc);
    char *text = NULL;
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < json_array_size(tokens); i++) {
        const json_t *t = json_array_get(tokens, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= n_vocab) {
            free(text);
            return srv_reply_errorf(r, 400, "'tokens[%zu]' is not a token id in [0, %d)", i, n_vocab);
        }
        char buf[256];
        int32_t k = tok_piece(s->voc, (int32_t)json_integer_value(t), buf, sizeof buf, true);
        if (k <= 0) continue;
        if (n + (size_t)k + 1 > cap) {
            cap = (n + (size_t)k + 1) * 2;
            char *p = realloc(text, cap);
            if (!p) {
                free(text);
                return srv_reply_errorf(r, 500, "out of memory");
            }
            text = p;
        }
        memcpy(text + n, buf, (size_t)k);
        n += (size_t)k;
    }
    json_t *j = json_pack("{s:o}", "content", srv_json_text(text ? text : "", n));
    free(text);
    return srv_reply_json(r, 200, j);
}

enum MHD_Result srv_h_apply_template(srv_req *r, json_t *body)
{
    srv *s = r->s;
    srv_err e;
    char *prompt;
    size_t n;
    srv_tool_fmt fmt;
    if (!srv_chat_prompt(s, body, &prompt, &n, &fmt, NULL, &e)) return srv_reply_error(r, &e);
    json_t *j = json_pack("{s:o}", "prompt", srv_json_text(prompt, n));
    free(prompt);
    return srv_reply_json(r, 200, j);
}

static json_t *special_text(const tok_vocab *v, int32_t id)
{
    if (id < 0) return json_string("");
    char buf[256];
    int32_t n = tok_piece(v, id, buf, sizeof buf, true);
    return srv_json_text(buf, n > 0 ? (size_t)n : 0);
}

/* POST /props (--props): llama-server's route for changing global
 * properties.  None of polykv's can change while it runs, so a body that
 * names one is a 400 naming it; an empty one succeeds. */
static enum MHD_Result post_props(srv_req *r, json_t *body)
{
    if (!r->s->p.endpoint_props_write) {
        srv_err e;
        srv_fail(&e, 501, NULL, "This server does not support changing global properties. Start it with `--props`");
        return srv_reply_error(r, &e);
    }
    /* Global properties are every tenant's. */
    if (!srv_req_admin(r)) return srv_reply_errorf(r, 403, "POST /props needs an admin key");
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        srv_err e;
        srv_fail(&e, 400, key, "property '%.60s' cannot be changed while the server runs", key);
        return srv_reply_error(r, &e);
    }
    return srv_reply_json(r, 200, json_pack("{s:b}", "success", 1));
}

enum MHD_Result srv_h_props(srv_req *r, json_t *body)
{
    srv *s = r->s;
    if (!strcmp(r->method, "POST")) return post_props(r, body);
    if (strcmp(r->method, "GET") && strcmp(r->method, "HEAD"))
        return srv_reply_errorf(r, 405, "%s /props: method not allowed (GET, or POST with --props)", r->method);
    eng *e = srv_engine(s);
    const eng_params *ep = eng_get_params(e);
    eng_completion c = { .sp = s->p.sampling, .n_predict = s->p.n_predict, .cache_prompt = true };
    srv_gen_opts o = {0};
    json_t *props = json_pack("{s:{s:o, s:i}, s:i, s:s, s:s, s:s, s:s, s:s, s:o, s:o, s:s, s:{s:b, s:b, s:b}, "
                              "s:b, s:b, s:b, s:b}",
        "default_generation_settings", "params", settings_json(&c, &o), "n_ctx", eng_n_ctx_slot(e),
        "total_slots", ep->n_slots,
        "model_alias", s->model_name,
        "model_path", s->model_path ? s->model_path : "",
        "model_desc", model_desc(s->m),
        "chat_template", s->tmpl_src ? s->tmpl_src : "",
        "chat_template_name", tmpl_name(s->tmpl),
        "bos_token", special_text(s->voc, tok_bos(s->voc)),
        "eos_token", special_text(s->voc, tok_eos(s->voc)),
        "build_info", "polykv",
        "modalities", "vision", 0, "audio", 0, "video", 0,
        "endpoint_slots", s->p.endpoint_slots,
        "endpoint_metrics", s->p.endpoint_metrics,
        "endpoint_props", s->p.endpoint_props_write,
        "is_sleeping", eng_is_sleeping(e));
    json_object_set_new(props, "cors_proxy_enabled", json_boolean(s->p.ui_mcp_proxy));
    json_object_set_new(props, "polykv", json_pack("{s:i, s:i, s:i, s:b}", "max_pools", ep->n_pools,
                                                   "pool_grace_ms", ep->pool_grace_ms, "n_ctx_total", ep->n_ctx,
                                                   "context_shift", ep->ctx_shift));
    json_object_set_new(json_object_get(props, "polykv"), "admission", srv_policy_json(&ep->admission));
    char pol[4096];
    if (pol_params_json(&ep->policy, pol, sizeof pol, NULL) == PK_OK)
        json_object_set_new(props, "slot_policy", json_loads(pol, 0, NULL));
    return srv_reply_json(r, 200, props);
}
