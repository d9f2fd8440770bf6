/*
 * srv_openai.c - the OpenAI endpoints: GET /v1/models, POST /v1/completions
 * and POST /v1/chat/completions, their request handling and their
 * response shapes, whole and streamed (chat.completion.chunk /
 * text_completion chunks, ending with `data: [DONE]`).
 *
 * Chat with tools: the answer is parsed for tool calls (srv_tools.h) in the
 * model's format.  Streamed, content and reasoning go out as they come
 * except what might still turn into a call or a marker, which waits; calls
 * are sent whole in one delta (clients accumulate deltas, so this is valid), then the
 * finish_reason "tool_calls".
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../model/model.h"
#include "../grammar/gram.h"
#include "srv_gen.h"

/* llama-server's shape, "b<build>-<commit>", which its clients and tests check. */
static const char FINGERPRINT[] = "b0-polykv";

static const char *finish_reason(const srv_gen *g, bool tool_calls)
{
    if (g->done.stop == ENG_STOP_LIMIT || g->done.stop == ENG_STOP_CTX) return "length";
    return tool_calls ? "tool_calls" : "stop";
}

static json_t *usage_json(const srv_gen *g)
{
    const eng_event *d = &g->done;
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "completion_tokens", d->n_gen, "prompt_tokens", d->n_prompt,
                     "total_tokens", d->n_gen + d->n_prompt, "prompt_tokens_details", "cached_tokens", d->n_cached);
}

/* The envelope every response and chunk shares. */
static json_t *envelope(const srv_gen *g, const char *object, json_t *choices)
{
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:o}", "id", g->id, "object", object, "created",
                     (json_int_t)g->created, "model", g->o.model, "system_fingerprint", FINGERPRINT, "choices",
                     choices ? choices : json_array());
}

/* The legacy completions log-probs object for entries (srv_gen_prob_entry
 * objects); the entries themselves ride along as "content", llama.cpp's
 * shape.  *offset is the running text offset. */
static json_t *legacy_logprobs(json_t *entries, size_t *offset)
{
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    for (size_t i = 0; i < json_array_size(entries); i++) {
        json_t *e = json_array_get(entries, i), *top = json_object(), *alts = json_object_get(e, "top_logprobs");
        json_t *tok = json_object_get(e, "token");
        json_array_append(tokens, tok);
        json_array_append(lps, json_object_get(e, "logprob"));
        for (size_t k = 0; k < json_array_size(alts); k++) {
            json_t *a = json_array_get(alts, k);
            json_object_set(top, json_string_value(json_object_get(a, "token")), json_object_get(a, "logprob"));
        }
        json_array_append_new(tops, top);
        json_array_append_new(offs, json_integer((json_int_t)*offset));
        *offset += json_string_length(tok);
    }
    return json_pack("{s:o, s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops,
                     "text_offset", offs, "content", entries);
}

static json_t *tool_calls_json(const srv_tool_msg *tm, bool with_index)
{
    json_t *a = json_array();
    for (int i = 0; i < tm->n_calls; i++) {
        char id[40];
        srv_random_id(id, sizeof id, "call_");
        json_t *c = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function", "name",
                              tm->calls[i].name, "arguments", tm->calls[i].arguments);
        if (c && with_index) json_object_set_new(c, "index", json_integer(i));
        json_array_append_new(a, c);
    }
    return a;
}

bool srv_gen_answer(const srv_gen *g, srv_answer *a)
{
    const char *text = g->text ? g->text : "";
    srv_reason_split rs = srv_reason_split_text(g->o.reasoning, g->o.think, text, g->n_text, g->o.think_open, true);
    memset(a, 0, sizeof *a);
    if (srv_tools_parse(g->o.tools, g->o.tool_defs, text + rs.content_off, rs.content_len, &a->tm) != PK_OK)
        return false;
    a->content_off = rs.content_off;
    if (rs.reason_len) {
        a->reason = text + rs.reason_off;
        a->reason_len = rs.reason_len;
    } else if (a->tm.reasoning_len && g->o.reasoning != SRV_REASON_NONE) {    /* harmony's analysis channel */
        a->reason = a->tm.reasoning;
        a->reason_len = a->tm.reasoning_len;
    }
    return true;
}

json_t *srv_oai_response(srv_gen *g)
{
    json_t *choice, *res;
    if (g->o.api == SRV_API_OAI_CMPL) {
        size_t offset = 0;
        json_t *lp = g->probs ? legacy_logprobs(json_incref(g->probs), &offset) : json_null();
        choice = json_pack("{s:o, s:i, s:o, s:s}", "text", srv_json_text(g->text ? g->text : "", g->n_text),
                           "index", 0, "logprobs", lp, "finish_reason", finish_reason(g, false));
        res = envelope(g, "text_completion", json_pack("[o]", choice));
    } else {
        srv_answer a;
        if (!srv_gen_answer(g, &a)) return NULL;
        const srv_tool_msg tm = a.tm;
        json_t *msg = json_pack("{s:s}", "role", "assistant");
        json_object_set_new(msg, "content", tm.n_calls && !tm.content_len ? json_null()
                                                                          : srv_json_text(tm.content, tm.content_len));
        if (a.reason_len) json_object_set_new(msg, "reasoning_content", srv_json_text(a.reason, a.reason_len));
        if (tm.n_calls) json_object_set_new(msg, "tool_calls", tool_calls_json(&tm, false));
        json_t *lp = g->probs ? json_pack("{s:O}", "content", g->probs) : json_null();
        choice = json_pack("{s:i, s:o, s:o, s:s}", "index", 0, "message", msg, "logprobs", lp, "finish_reason",
                           finish_reason(g, tm.n_calls > 0));
        res = envelope(g, "chat.completion", json_pack("[o]", choice));
        srv_tool_msg_free(&a.tm);
    }
    if (res) {
        json_object_set_new(res, "usage", usage_json(g));
        json_object_set_new(res, "timings", srv_gen_timings(&g->done));
        if (g->o.verbose) json_object_set_new(res, "__verbose", srv_native_response(g));
    }
    return res;
}

/* ---- streaming ---- */

static void chat_chunk(srv_gen *g, json_t *delta, json_t *logprobs, const char *finish)
{
    bool role = json_object_get(delta, "role") != NULL;
    json_t *choice = json_pack("{s:i, s:o, s:o, s:o}", "index", 0, "delta", delta, "logprobs",
                               logprobs ? logprobs : json_null(), "finish_reason",
                               finish ? json_string(finish) : json_null());
    json_t *j = envelope(g, "chat.completion.chunk", json_pack("[o]", choice));
    if (j && g->o.timings_per_token && !role) json_object_set_new(j, "timings", srv_gen_timings_now(g));
    srv_gen_sse(g, j);
}

void srv_oai_stream_token(srv_gen *g, const eng_event *ev)
{
    json_t *entry = g->o.logprobs ? srv_gen_prob_entry(g, ev) : NULL;
    if (g->o.api == SRV_API_OAI_CMPL) {
        if (!ev->text_len && !entry) return;
        size_t offset = g->n_text - ev->text_len;
        json_t *lp = entry ? legacy_logprobs(json_pack("[o]", entry), &offset) : json_null();
        json_t *choice = json_pack("{s:o, s:i, s:o, s:n}", "text", srv_json_text(ev->text ? ev->text : "",
                                   ev->text_len), "index", 0, "logprobs", lp, "finish_reason");
        json_t *j = envelope(g, "text_completion", json_pack("[o]", choice));
        if (j && g->o.timings_per_token) json_object_set_new(j, "timings", srv_gen_timings_now(g));
        srv_gen_sse(g, j);
        return;
    }
    if (!g->sent_role) {
        g->sent_role = true;
        chat_chunk(g, json_pack("{s:s, s:n}", "role", "assistant", "content"), NULL, NULL);
    }
    srv_new_text t = srv_gen_take_new(g);
    json_t *delta = json_object();
    if (t.n_reason) json_object_set_new(delta, "reasoning_content", srv_json_text(t.reason, t.n_reason));
    if (t.n_content) json_object_set_new(delta, "content", srv_json_text(t.content, t.n_content));
    if (!json_object_size(delta) && !entry) {
        json_decref(delta);
        return;
    }
    chat_chunk(g, delta, entry ? json_pack("{s:[o]}", "content", entry) : NULL, NULL);
}

static void usage_chunk(srv_gen *g, const char *object)
{
    json_t *j = envelope(g, object, json_array());
    if (j) json_object_set_new(j, "usage", usage_json(g));
    if (j && g->o.timings_per_token) json_object_set_new(j, "timings", srv_gen_timings(&g->done));
    srv_gen_sse(g, j);
}

void srv_oai_stream_end(srv_gen *g)
{
    if (g->o.api == SRV_API_OAI_CMPL) {
        json_t *choice = json_pack("{s:s, s:i, s:n, s:s}", "text", "", "index", 0, "logprobs", "finish_reason",
                                   finish_reason(g, false));
        json_t *j = envelope(g, "text_completion", json_pack("[o]", choice));
        if (j) json_object_set_new(j, "timings", srv_gen_timings(&g->done));
        srv_gen_sse(g, j);
        if (g->o.include_usage) usage_chunk(g, "text_completion");
        srv_gen_out(g, "data: [DONE]\n\n", 14);
        return;
    }
    if (!g->sent_role) {
        g->sent_role = true;
        chat_chunk(g, json_pack("{s:s, s:n}", "role", "assistant", "content"), NULL, NULL);
    }
    srv_answer a;
    if (!srv_gen_answer(g, &a)) {
        g->out_oom = true;           /* its only failure: gen_read sends the error event */
        g->finished = true;
        return;
    }
    srv_tool_msg tm = a.tm;
    srv_new_text rest = srv_gen_take_rest(g, &a);
    if (rest.n_reason)
        chat_chunk(g, json_pack("{s:o}", "reasoning_content", srv_json_text(rest.reason, rest.n_reason)), NULL, NULL);
    if (rest.n_content)
        chat_chunk(g, json_pack("{s:o}", "content", srv_json_text(rest.content, rest.n_content)), NULL, NULL);
    if (tm.n_calls) chat_chunk(g, json_pack("{s:o}", "tool_calls", tool_calls_json(&tm, true)), NULL, NULL);
    json_t *choice = json_pack("{s:i, s:{}, s:n, s:s}", "index", 0, "delta", "logprobs", "finish_reason",
                               finish_reason(g, tm.n_calls > 0));
    json_t *j = envelope(g, "chat.completion.chunk", json_pack("[o]", choice));
    if (j) json_object_set_new(j, "timings", srv_gen_timings(&g->done));
    srv_gen_sse(g, j);
    srv_tool_msg_free(&tm);
    if (g->o.include_usage) usage_chunk(g, "chat.completion.chunk");
    srv_gen_out(g, "data: [DONE]\n\n", 14);
}

/* ---- handlers ---- */

/* A comma-separated list as a JSON array of its non-empty names. */
static json_t *name_list(const char *list)
{
    json_t *a = json_array();
    for (const char *p = list; a && *p;) {
        size_t n = strcspn(p, ",");
        if (n) json_array_append_new(a, json_stringn(p, n));
        p += n + (p[n] == ',');
    }
    return a;
}

enum MHD_Result srv_h_oai_models(srv_req *r, json_t *body)
{
    srv *s = r->s;
    eng *e = srv_engine(s);
    const model_hparams *hp = model_get_hparams(s->m);
    json_t *meta = json_pack("{s:i, s:i, s:i, s:i, s:i, s:s}", "vocab_type", (int)tok_get_kind(s->voc), "n_vocab",
                             tok_n_vocab(s->voc), "n_ctx", eng_n_ctx_slot(e), "n_ctx_train", hp->n_ctx_train,
                             "n_embd", hp->n_embd, "desc", model_desc(s->m));
    json_t *m = json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", s->model_name, "object", "model", "created",
                          (json_int_t)s->t_start, "owned_by", "polykv", "meta", meta);
    json_object_set_new(m, "aliases", name_list(s->p.model_alias ? s->p.model_alias : s->model_name));
    json_object_set_new(m, "tags", name_list(s->p.model_tags ? s->p.model_tags : ""));
    return srv_reply_json(r, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", m));
}

enum MHD_Result srv_h_oai_completions(srv_req *r, json_t *body)
{
    return srv_gen_prompt(r, body, SRV_API_OAI_CMPL);
}

/* --reasoning-budget 0: no thinking.  A prompt that opened <think> gets
 * it closed at once (what the templates write for enable_thinking false),
 * and when "<think>" is one token of the vocabulary it is banned, so a
 * model that opens it itself cannot.  False when out of memory. */
static bool think_off(srv *s, char **prompt, size_t *n_prompt, eng_completion *c, srv_gen_opts *o)
{
    static const char close_tag[] = "\n</think>\n\n";
    if (o->think_open) {
        char *p = realloc(*prompt, *n_prompt + sizeof close_tag);
        if (!p) return false;
        memcpy(p + *n_prompt, close_tag, sizeof close_tag);
        *prompt = p;
        *n_prompt += sizeof close_tag - 1;
        o->think_open = false;
    }
    int32_t *ids = NULL, n = 0;
    if (srv_tokenize(s->voc, "<think>", 7, false, true, &ids, &n) != PK_OK) return false;
    bool ok = true;
    if (n == 1) {
        eng_bias *b = realloc((void *)c->bias, ((size_t)c->n_bias + 1) * sizeof *b);
        if (b) {
            b[c->n_bias++] = (eng_bias){ ids[0], -INFINITY };
            c->bias = b;
        } else {
            ok = false;
        }
    }
    free(ids);
    return ok;
}

bool srv_chat_tokens(srv *s, const json_t *body, srv_api api, eng_completion *c, srv_gen_opts *o, int32_t **ids,
                     int32_t *n, srv_err *e)
{
    char *prompt = NULL;
    size_t n_prompt;
    *ids = NULL;
    *n = 0;
    srv_gen_defaults dflt = srv_gen_defaults_of(s);
    if (!srv_parse_gen(body, api, &dflt, c, o, e)) return false;
    /* A forced tool call constrains the answer to the tool's schema. */
    gram_grammar *tg = NULL;
    bool ok = srv_chat_prompt(s, body, &prompt, &n_prompt, &o->tools, &o->think_open, e);
    /* The template's own markers say how its model writes calls (the
     * rendering's family is the fallback).  A forced call is written in
     * Qwen3.5's XML form or Gemma 4's syntax where the template uses one,
     * else in the Hermes or Llama 3 JSON form of the rendering, which is
     * parsed as such. */
    const char *src = s->tmpl_src ? s->tmpl_src : tok_chat_template(s->voc);
    srv_tool_fmt family = ok ? srv_tools_detect(src, SRV_TOOL_NONE) : SRV_TOOL_NONE;
    srv_tool_fmt written = ok && o->tools && family ? family : o->tools;
    /* gpt-oss answers in harmony messages with or without tools: its
     * channels are parsed into reasoning and content either way. */
    if (family == SRV_TOOL_HARMONY) written = SRV_TOOL_HARMONY;
    /* Gemma 4 thinks in its thought channel, with or without tools. */
    o->think = family == SRV_TOOL_GEMMA4 ? SRV_THINK_CHANNEL : SRV_THINK_TAGS;
    if (written == SRV_TOOL_QWEN_XML || written == SRV_TOOL_GEMMA4) o->tools = written;
    ok = ok && srv_tools_grammar(body, o->tools, &tg, e);
    if (ok && tg && c->grammar) {
        gram_free(tg);
        ok = srv_fail(e, 400, "response_format", "a forced tool call (tool_choice) and a response format cannot both "
                      "constrain the answer");
    } else if (tg) {
        c->grammar = tg;
    }
    ok = ok && srv_gen_text_fits(s, n_prompt, e);
    if (ok) {
        if (!tg) o->tools = written;
        if (o->tools) o->tool_defs = (json_t *)json_object_get(body, "tools");
        if (s->p.reasoning_budget == 0 && !think_off(s, &prompt, &n_prompt, c, o))
            ok = srv_fail(e, 500, NULL, "out of memory");
    }
    if (ok) {
        pk_status st = srv_tokenize(s->voc, prompt, n_prompt, true, true, ids, n);
        if (st != PK_OK) ok = srv_fail(e, 500, NULL, "tokenization failed: %s", pk_status_str(st));
        else if (*n == 0) ok = srv_fail(e, 400, NULL, "the chat prompt gives no tokens");
    }
    free(prompt);
    if (!ok) {
        free(*ids);
        *ids = NULL;
        srv_gen_req_free(c);
    }
    return ok;
}

enum MHD_Result srv_oai_chat_run(srv_req *r, const json_t *body, srv_api api, json_t *echo)
{
    eng_completion c;
    srv_gen_opts o;
    srv_err e;
    int32_t *ids, n;
    if (!srv_chat_tokens(r->s, body, SRV_API_OAI_CHAT, &c, &o, &ids, &n, &e)) return srv_reply_error(r, &e);
    o.api = api;
    o.echo = echo;
    if (api == SRV_API_OAI_RESP && o.n_choices > 1) {
        free(ids);
        srv_gen_req_free(&c);
        srv_fail(&e, 400, "n", "a response has one answer: 'n' must be 1");
        return srv_reply_error(r, &e);
    }
    if (o.n_choices == 1) return srv_gen_run_ids(r, &c, &o, ids, n);
    eng_completion cs[SRV_MAX_CHOICES];
    for (int i = 0; i < o.n_choices; i++) {
        cs[i] = c;
        cs[i].prompt = ids;
        cs[i].n_prompt = n;
        cs[i].sp.seed = srv_choice_seed(c.sp.seed, i);
    }
    enum MHD_Result ret = srv_gen_run_multi(r, cs, o.n_choices, &o);
    free(ids);
    srv_gen_req_free(&c);
    return ret;
}

enum MHD_Result srv_h_oai_chat(srv_req *r, json_t *body)
{
    return srv_oai_chat_run(r, body, SRV_API_OAI_CHAT, NULL);
}

/* llama-server's token count of a chat request: its prompt as the chat
 * route renders (srv_chat_prompt: the Jinja template, a prefill) and
 * tokenizes it (the same function, srv_chat_tokens), nothing generated. */
enum MHD_Result srv_h_oai_input_tokens(srv_req *r, json_t *body)
{
    eng_completion c;
    srv_gen_opts o;
    srv_err e;
    int32_t *ids, n;
    if (!srv_chat_tokens(r->s, body, SRV_API_OAI_CHAT, &c, &o, &ids, &n, &e)) return srv_reply_error(r, &e);
    free(ids);
    srv_gen_req_free(&c);
    return srv_reply_json(r, 200, json_pack("{s:i}", "input_tokens", n));
}
