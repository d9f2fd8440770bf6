/*
 * srv_gen.c - running one completion task for one request: submit, read
 * its events (noticing a client that left and a server that stops), and
 * either answer with one JSON body or stream SSE events through an MHD
 * callback response.  The JSON shapes come from srv_openai.c and
 * srv_native.c; this file is the mechanism they share.
 *
 * Streaming: MHD calls gen_read when the socket can take more.  gen_read
 * blocks for the next event (this is the connection's own thread), then
 * also takes every event already waiting, so a burst of tokens goes out
 * in one write.  When the client goes away MHD frees the response; the
 * free callback releases the task, which cancels it in the engine.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/utf8.h"
#include "../grammar/gram.h"
#include "srv_gen.h"

#define GEN_BATCH_BYTES 8192   /* stop gathering waiting events past this much output */

static void gen_free(void *cls)
{
    srv_gen *g = cls;
    if (!g) return;
    if (g->task) eng_task_release(g->task);
    json_decref(g->o.echo);
    json_decref(g->o.tool_defs);
    free(g->text);
    free(g->bias);
    free(g->prompt);
    free(g->tokens);
    free(g->out);
    pk_buf_free(&g->h_content);
    pk_buf_free(&g->h_reason);
    json_decref(g->probs);
    free(g);
}

/* gen_next's wait, PK_ETIMEDOUT when no event came within wait_ms. */
static pk_status gen_wait(srv_gen *g, eng_event *ev, double wait_ms)
{
    double t_end = pk_time_ms() + wait_ms;
    for (;;) {
        double now = pk_time_ms();
        if (now - g->t_last_check >= SRV_POLL_MS) {
            g->t_last_check = now;
            if (atomic_load(&g->s->stopping) || !srv_conn_alive(g->conn, g->headers_sent ? NULL : &g->probe)) {
                eng_task_cancel(g->task);
                return PK_ECANCELLED;
            }
        }
        if (now >= t_end) return PK_ETIMEDOUT;
        pk_status st = eng_task_next(g->task, ev, (int)MIN(SRV_POLL_MS, t_end - now + 1));
        if (st == PK_OK && g->tenant >= 0) srv_tenant_mask_event(ev, &g->shown_cached);
        if (st != PK_ETIMEDOUT) return st;
    }
}

/* The next event, or PK_ECANCELLED (task cancelled) when the client left
 * or the server is stopping; PK_ENOTFOUND after the last event. */
static pk_status gen_next(srv_gen *g, eng_event *ev)
{
    return gen_wait(g, ev, 1e18);
}

static void fail_oom(srv_gen *g)
{
    g->failed = true;
    srv_fail(&g->err, 500, NULL, "out of memory");
}

/* Records what an event brings: text, token, log-probs, the end. */
static void gen_take(srv_gen *g, const eng_event *ev)
{
    switch (ev->kind) {
    case ENG_EV_TOKEN: {
        size_t cap_tok = (size_t)g->cap_tokens;
        if (pk_grow((void **)&g->text, &g->cap_text, g->n_text + ev->text_len + 1, 1) ||
            pk_grow((void **)&g->tokens, &cap_tok, (size_t)g->n_tokens + 1, sizeof *g->tokens)) {
            fail_oom(g);
            return;
        }
        g->cap_tokens = (int32_t)cap_tok;
        memcpy(g->text + g->n_text, ev->text ? ev->text : "", ev->text_len);
        g->n_text += ev->text_len;
        g->text[g->n_text] = 0;
        g->tokens[g->n_tokens++] = ev->token;
        if (g->n_tokens == 1) g->t_first_ms = pk_time_ms();
        if (g->probs) json_array_append_new(g->probs, srv_gen_prob_entry(g, ev));
        break;
    }
    case ENG_EV_DONE:
        g->done = *ev;
        g->done.text = NULL;
        g->done.text_len = 0;
        g->have_done = true;
        break;
    case ENG_EV_ERROR: {
        unsigned status = ev->status == PK_EINVAL ? 400 : ev->status == PK_ENOTFOUND ? 404
                        : ev->status == PK_ECONFLICT ? 409 : ev->status == PK_EREFUSED ? 429
                        : ev->status == PK_ECANCELLED ? 503 : 500;
        g->failed = true;
        if (ev->has_cap) {
            status = 429;
            g->refused = true;
            g->cap = ev->cap;
        }
        srv_fail(&g->err, status, NULL, "%s", ev->message[0] ? ev->message : pk_status_str(ev->status));
        break;
    }
    case ENG_EV_PLACED:                 /* read by srv_gen_run before the reply */
    case ENG_EV_PROGRESS:               /* streamed only (stream_event) */
        break;
    }
}

/* ---- output buffer ---- */

/* Out of memory for the stream's output: it ends, with gen_read's static
 * error event after what was already whole. */
static void out_failed(srv_gen *g)
{
    g->out_oom = true;
    g->finished = true;
}

void srv_gen_out(srv_gen *g, const char *s, size_t n)
{
    if (g->out_oom) return;
    if (pk_grow((void **)&g->out, &g->cap_out, g->n_out + n + 1, 1)) {
        out_failed(g);
        return;
    }
    memcpy(g->out + g->n_out, s, n);
    g->n_out += n;
}

void srv_gen_sse_event(srv_gen *g, const char *name, json_t *j)
{
    char *s = j ? json_dumps(j, SRV_JSON_DUMP) : NULL;
    json_decref(j);
    size_t n = s ? strlen(s) : 0, n_name = name ? strlen(name) : 0;
    /* Room for the whole event first, so none goes out half written. */
    if (!s || pk_grow((void **)&g->out, &g->cap_out, g->n_out + n + n_name + 17, 1)) {
        free(s);
        out_failed(g);
        return;
    }
    if (name) {
        srv_gen_out(g, "event: ", 7);
        srv_gen_out(g, name, n_name);
        srv_gen_out(g, "\n", 1);
    }
    srv_gen_out(g, "data: ", 6);
    srv_gen_out(g, s, n);
    srv_gen_out(g, "\n\n", 2);
    free(s);
}

void srv_gen_sse(srv_gen *g, json_t *j)
{
    srv_gen_sse_event(g, NULL, j);
}

/* ---- JSON pieces every format uses ---- */

json_t *srv_json_text(const char *s, size_t n)
{
    json_t *j = json_stringn(s, n);
    if (j) return j;
    char *clean = malloc(3 * n + 1);
    if (!clean) return NULL;
    size_t m = pk_utf8_sanitize(s, n, clean);
    j = json_stringn(clean, m);
    free(clean);
    return j;
}

json_t *srv_gen_piece(const srv_gen *g, int32_t id, json_t **bytes)
{
    char small[128], *buf = small;
    int32_t n = tok_piece(g->s->voc, id, small, sizeof small, true);
    if (n < 0) {
        buf = malloc((size_t)-n);
        n = buf ? tok_piece(g->s->voc, id, buf, -n, true) : 0;
        if (n < 0) n = 0;
    }
    if (bytes) {
        *bytes = json_array();
        for (int32_t i = 0; i < n; i++) json_array_append_new(*bytes, json_integer((unsigned char)buf[i]));
    }
    json_t *s = srv_json_text(buf ? buf : "", (size_t)n);
    if (buf != small) free(buf);
    return s;
}

/* JSON cannot hold -inf; the reference engine writes the lowest float. */
static json_t *logprob_json(float lp)
{
    return json_real(isfinite(lp) ? lp : -FLT_MAX);
}

json_t *srv_gen_prob_entry(const srv_gen *g, const eng_event *ev)
{
    /* post_sampling_probs: probabilities of the distribution drawn from
     * (smp_params.post_probs), under llama.cpp's names. */
    bool post = g->o.post_sampling_probs;
    const char *key = post ? "prob" : "logprob";
    json_t *bytes, *top = json_array();
    json_t *tok = srv_gen_piece(g, ev->token, &bytes);
    int n_top = MIN(ev->n_top, g->o.top_logprobs);
    for (int i = 0; i < n_top; i++) {
        if (ev->top[i].id < 0) break;          /* fewer kept than asked for */
        json_t *b;
        json_t *t = srv_gen_piece(g, ev->top[i].id, &b);
        json_array_append_new(top, json_pack("{s:i, s:o, s:o, s:o}", "id", ev->top[i].id, "token", t, "bytes", b,
                                             key, post ? json_real(exp(ev->top[i].logprob))
                                                       : logprob_json(ev->top[i].logprob)));
    }
    return json_pack("{s:i, s:o, s:o, s:o, s:o}", "id", ev->token, "token", tok, "bytes", bytes, key,
                     post ? json_real(exp(ev->logprob)) : logprob_json(ev->logprob),
                     post ? "top_probs" : "top_logprobs", top);
}

/* Milliseconds to the microsecond: the clock's resolution, not noise. */
static double ms3(double ms) { return round(ms * 1e3) / 1e3; }

json_t *srv_gen_timings(const eng_event *d)
{
    int32_t prompt_n = d->n_prompt - d->n_cached;
    /* The first token comes from the prompt's last batch: the decode rate
     * is over the n_gen - 1 steps after it (llama-server's definition). */
    int32_t steps = d->n_gen - 1;
    double gen_ms = ms3(d->gen_ms);
    json_t *t = json_pack("{s:i, s:i, s:f, s:f, s:f, s:i, s:f, s:f, s:f}",
                     "cache_n", d->n_cached,
                     "prompt_n", prompt_n,
                     "prompt_ms", ms3(d->prompt_ms),
                     "prompt_per_token_ms", prompt_n > 0 ? ms3(d->prompt_ms / prompt_n) : 0.0,
                     "prompt_per_second", d->prompt_ms > 0 ? ms3(1e3 * prompt_n / d->prompt_ms) : 0.0,
                     "predicted_n", d->n_gen,
                     "predicted_ms", ms3(d->gen_ms),
                     "predicted_per_token_ms", steps > 0 ? gen_ms / steps : 0.0,
                     "predicted_per_second", steps > 0 && gen_ms > 0 ? 1e3 * steps / gen_ms : 0.0);
    /* llama-server's fields, present when guesses were verified. */
    if (t && d->n_drafted > 0) {
        json_object_set_new(t, "draft_n", json_integer(d->n_drafted));
        json_object_set_new(t, "draft_n_accepted", json_integer(d->n_accepted));
    }
    return t;
}

json_t *srv_gen_timings_now(const srv_gen *g)
{
    double now = pk_time_ms();
    double prompt_ms = g->n_tokens ? g->t_first_ms - g->t_placed_ms : now - g->t_placed_ms;
    double gen_ms = g->n_tokens ? now - g->t_first_ms : 0;
    int32_t prompt_n = g->n_prompt - g->n_cached, steps = g->n_tokens - 1;
    return json_pack("{s:i, s:i, s:f, s:f, s:f, s:i, s:f, s:f, s:f}",
                     "cache_n", g->n_cached,
                     "prompt_n", prompt_n,
                     "prompt_ms", ms3(prompt_ms),
                     "prompt_per_token_ms", prompt_n > 0 ? ms3(prompt_ms / prompt_n) : 0.0,
                     "prompt_per_second", prompt_ms > 0 ? ms3(1e3 * prompt_n / prompt_ms) : 0.0,
                     "predicted_n", g->n_tokens,
                     "predicted_ms", ms3(gen_ms),
                     "predicted_per_token_ms", steps > 0 ? ms3(gen_ms / steps) : 0.0,
                     "predicted_per_second", steps > 0 && gen_ms > 0 ? ms3(1e3 * steps / gen_ms) : 0.0);
}

json_t *srv_gen_prompt_text(const srv_gen *g)
{
    pk_buf b = {0};
    pk_buf_put(&b, "", 0);
    for (int32_t i = 0; g->prompt && i < g->n_prompt; i++) {
        char small[128];
        int32_t n = tok_piece(g->s->voc, g->prompt[i], small, sizeof small, true);
        if (n >= 0) {
            pk_buf_put(&b, small, (size_t)n);
            continue;
        }
        char *big = malloc((size_t)-n);
        if (big && (n = tok_piece(g->s->voc, g->prompt[i], big, -n, true)) > 0) pk_buf_put(&b, big, (size_t)n);
        free(big);
    }
    json_t *j = b.oom ? NULL : srv_json_text(b.p, b.n);
    pk_buf_free(&b);
    return j;
}

/* ---- streaming ---- */

/* return_progress: a chunk with llama-server's prompt_progress object
 * (and, with timings_per_token, the prompt's timings so far). */
static json_t *progress_chunk(srv_gen *g, const eng_event *ev)
{
    json_t *j = srv_fmt_of(g->o.api)->progress(g, ev);
    if (!j) return NULL;
    json_object_set_new(j, "prompt_progress", json_pack("{s:i, s:i, s:i, s:f}", "total", ev->n_prompt, "cache",
                                                        ev->n_cached, "processed", ev->n_processed, "time_ms",
                                                        ms3(ev->prompt_ms)));
    if (g->o.timings_per_token) {
        int32_t prompt_n = ev->n_processed - ev->n_cached;
        json_object_set_new(j, "timings", json_pack("{s:i, s:i, s:f, s:f, s:f, s:i, s:f, s:f, s:f}",
            "cache_n", ev->n_cached, "prompt_n", prompt_n, "prompt_ms", ms3(ev->prompt_ms),
            "prompt_per_token_ms", prompt_n > 0 ? ms3(ev->prompt_ms / prompt_n) : 0.0,
            "prompt_per_second", ev->prompt_ms > 0 ? ms3(1e3 * prompt_n / ev->prompt_ms) : 0.0,
            "predicted_n", 0, "predicted_ms", 0.0, "predicted_per_token_ms", 0.0, "predicted_per_second", 0.0));
    }
    return j;
}

/* The event that ends a stream with g->err, in its API's shape. */
static void stream_error(srv_gen *g)
{
    srv_fmt_of(g->o.api)->stream_error(g);
    g->finished = true;
}

static void stream_event(srv_gen *g, const eng_event *ev)
{
    gen_take(g, ev);
    if (g->failed) {
        stream_error(g);
        return;
    }
    const srv_fmt *f = srv_fmt_of(g->o.api);
    if (ev->kind == ENG_EV_PROGRESS) {
        if (g->o.return_progress) f->send(g, progress_chunk(g, ev));
    } else if (ev->kind == ENG_EV_TOKEN) {
        f->stream_token(g, ev);
    } else if (ev->kind == ENG_EV_DONE) {
        f->stream_end(g);
        g->finished = true;
    }
}

/* A stream's keep-alive period: well inside the connection's idle timeout
 * (which closes a connection that sent nothing for that long, response or
 * not), and often enough that a client behind a proxy sees the stream live. */
static double keepalive_ms(const srv *s)
{
    double t = s->p.timeout_s > 0 ? 1e3 * s->p.timeout_s / 2 : 1e9;
    return MAX(MIN(t, SRV_KEEPALIVE_MS), SRV_POLL_MS);
}

/* How long a stream waits for its placement before its headers go
 * without it: half the idle timeout, so the reply still makes it in time,
 * and no shorter, so a refusal (404, 429) keeps its own status but under
 * a queue that long. */
static double placement_wait_ms(const srv *s)
{
    return s->p.timeout_s > 0 ? MAX(1e3 * s->p.timeout_s / 2, SRV_POLL_MS) : 1e18;
}

static ssize_t gen_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    srv_gen *g = cls;
    (void)pos;
    while (g->out_pos == g->n_out) {
        const char *oom = srv_fmt_of(g->o.api)->oom_event;
        size_t n_oom = strlen(oom);
        if (g->finished && g->out_oom && !g->oom_sent && max >= n_oom) {
            /* Needs no memory: a stream never ends without its last event. */
            g->oom_sent = true;
            memcpy(buf, oom, n_oom);
            return (ssize_t)n_oom;
        }
        if (g->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        g->n_out = g->out_pos = 0;
        eng_event ev;
        pk_status st = gen_wait(g, &ev, keepalive_ms(g->s));
        if (st == PK_ECANCELLED) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (st == PK_ETIMEDOUT) {
            /* Queued or prefilling: an SSE comment keeps the connection
             * inside its idle timeout (clients skip comments). */
            static const char ping[] = ": keep-alive\n\n";
            srv_gen_out(g, ping, sizeof ping - 1);
            continue;
        }
        for (;;) {
            if (st == PK_ENOTFOUND) {
                /* The channel closed without DONE or ERROR: a broken engine. */
                g->failed = true;
                srv_fail(&g->err, 500, NULL, "the task ended without a result");
                stream_error(g);
                break;
            }
            stream_event(g, &ev);
            eng_event_clear(&ev);
            if (g->finished || g->n_out >= GEN_BATCH_BYTES) break;
            st = eng_task_next(g->task, &ev, 0);
            if (st == PK_OK && g->tenant >= 0) srv_tenant_mask_event(&ev, &g->shown_cached);
            if (st == PK_ETIMEDOUT) break;
        }
    }
    size_t n = MIN(max, g->n_out - g->out_pos);
    memcpy(buf, g->out + g->out_pos, n);
    g->out_pos += n;
    return (ssize_t)n;
}

/* ---- entry point ---- */

static enum MHD_Result submit_failed(srv_req *r, pk_status st)
{
    if (st == PK_EINVAL) return srv_reply_errorf(r, 400, "the engine refused the request (bad token id, slot or size)");
    if (st == PK_ECANCELLED) return srv_reply_errorf(r, 503, "the server is stopping");
    return srv_reply_errorf(r, 500, "cannot queue the request: %s", pk_status_str(st));
}

static bool over_context(srv_err *err, int32_t n_prompt, int32_t n_ctx, bool at_least)
{
    srv_fail(err, 400, NULL, "the request exceeds the available context size: the prompt has %s%d tokens, a "
             "slot holds %d (try a shorter prompt or a larger -c)", at_least ? "at least " : "", n_prompt, n_ctx);
    err->type = "exceed_context_size_error";
    err->n_prompt = n_prompt;
    err->n_ctx = n_ctx;
    return false;
}

bool srv_gen_text_fits(srv *s, size_t n_bytes, srv_err *e)
{
    int32_t n_ctx = eng_n_ctx_slot(srv_engine(s));
    if (!s->max_token_bytes || n_bytes / s->max_token_bytes < (size_t)n_ctx) return true;
    size_t least = n_bytes / s->max_token_bytes;
    return over_context(e, (int32_t)MIN(least, (size_t)INT32_MAX), n_ctx, true);
}

size_t srv_prompt_bytes(const json_t *prompt)
{
    if (json_is_string(prompt)) return json_string_length(prompt);
    /* An array with a number in it is one prompt (strings and ids mixed);
     * one without is several prompts, each bounded on its own. */
    bool one = false;
    for (size_t i = 0; i < json_array_size(prompt); i++) one |= json_is_number(json_array_get(prompt, i));
    size_t n = 0;
    for (size_t i = 0; i < json_array_size(prompt); i++) {
        size_t k = srv_prompt_bytes(json_array_get(prompt, i));
        n = one ? n + k : MAX(n, k);
    }
    return n;
}

/* Submits c: the new generation, or NULL with the reply queued in *ret. */
static srv_gen *gen_submit(srv_req *r, const eng_completion *c, const srv_gen_opts *o, enum MHD_Result *ret)
{
    srv *s = r->s;
    eng *e = srv_engine(s);
    /* The header names the session when the body does not; either way it
     * is held to the body's rule. */
    const char *hdr = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "x-session-id");
    char hdr_sid[ENG_SESSION_CAP] = "";
    srv_err err;
    if (hdr && !srv_session_id(hdr, strlen(hdr), "x-session-id", hdr_sid, &err)) {
        *ret = srv_reply_error(r, &err);
        return NULL;
    }
    int32_t n_ctx = eng_n_ctx_slot(e);
    if (c->n_prompt >= n_ctx) {
        over_context(&err, c->n_prompt, n_ctx, false);
        *ret = srv_reply_error(r, &err);
        return NULL;
    }
    /* A tenant's session is named in its own namespace; another tenant's
     * pool is answered as the engine answers a pool that does not exist. */
    eng_completion sub = *c;
    if (!sub.session_id[0]) memcpy(sub.session_id, hdr_sid, sizeof sub.session_id);
    if (!srv_tenant_session(r, c->session_id[0] ? "session_id" : "x-session-id", sub.session_id, &err)) {
        *ret = srv_reply_error(r, &err);
        return NULL;
    }
    if (sub.pool_id > 0 && !srv_pool_mine(r, sub.pool_id)) {
        *ret = srv_reply_errorf(r, 404, "pool %d not found (released, or never created)", sub.pool_id);
        return NULL;
    }
    srv_gen *g = calloc(1, sizeof *g);
    if (!g) {
        *ret = srv_reply_errorf(r, 500, "out of memory");
        return NULL;
    }
    g->s = s;
    g->conn = r->conn;
    g->probe = r->http11 ? SRV_PROBE_READY : SRV_PROBE_NONE;
    g->o = *o;
    json_incref(g->o.echo);
    json_incref(g->o.tool_defs);
    g->req = *c;
    g->req.prompt = NULL;
    g->req.grammar = NULL;             /* the task holds its own reference */
    g->req.bias = NULL;
    if (c->n_bias > 0 && (g->bias = malloc((size_t)c->n_bias * sizeof *g->bias))) {
        memcpy(g->bias, c->bias, (size_t)c->n_bias * sizeof *g->bias);
        g->req.bias = g->bias;
    }
    if (!g->req.bias) g->req.n_bias = 0;
    if ((srv_fmt_of(o->api)->echoes_prompt || o->verbose) && (g->prompt = malloc((size_t)c->n_prompt * sizeof *g->prompt)))
        memcpy(g->prompt, c->prompt, (size_t)c->n_prompt * sizeof *g->prompt);
    memset(g->req.stop, 0, sizeof g->req.stop);
    g->created = (int64_t)time(NULL);
    g->n_prompt = c->n_prompt;
    if (!g->o.model[0]) snprintf(g->o.model, sizeof g->o.model, "%s", s->model_name);
    srv_random_id(g->id, sizeof g->id, srv_fmt_of(o->api)->id_prefix);
    g->resp.rs_index = g->resp.msg_index = -1;
    if (o->logprobs && !o->stream) g->probs = json_array();
    g->tenant = r->tenant;
    sub.report_placed = true;
    sub.report_progress = o->return_progress && o->stream;
    pk_status st = eng_submit(e, &sub, &g->task);
    if (st != PK_OK) {
        gen_free(g);
        *ret = submit_failed(r, st);
        return NULL;
    }
    return g;
}

/* Waits until g is placed (true, its placement in r's headers) or refused
 * (false: g freed and the reply queued in *ret; MHD_NO when the client
 * left).  Headers go once the request is placed, so a stream carries what
 * was shared too, and a request that cannot be placed gets its own status.
 * A stream waits for that at most half the idle timeout: queued longer,
 * it is taken as placed (true, r->placed false): its headers go without
 * the placement and pings hold the connection open. */
static bool gen_placed(srv_req *r, srv_gen *g, enum MHD_Result *ret)
{
    eng_event ev;
    pk_status st = g->o.stream ? gen_wait(g, &ev, placement_wait_ms(r->s)) : gen_next(g, &ev);
    if (st == PK_ECANCELLED) {
        gen_free(g);
        *ret = MHD_NO;
        return false;
    }
    if (st == PK_ETIMEDOUT) return true;
    if (st != PK_OK || ev.kind != ENG_EV_PLACED) {
        if (st == PK_OK) gen_take(g, &ev);
        else srv_fail(&g->err, 500, NULL, "the task ended without a result");
        eng_event_clear(&ev);
        json_t *j = srv_req_error_json(r, &g->err);
        if (g->refused && j) {         /* 429: when to come back, and what it was decided on */
            r->retry_after_s = (int32_t)g->cap.retry_after_s;
            json_object_set_new(j, "capacity", srv_capacity_json(&g->cap));
        }
        *ret = srv_reply_json(r, g->err.status, j);
        gen_free(g);
        return false;
    }
    if (!r->placed) {
        r->placed = true;
        r->placed_pool = ev.pool_id;
        r->placed_cached = ev.n_cached;
        r->sessions_remaining = ev.sessions_remaining;
    }
    g->n_cached = ev.n_cached;
    g->t_placed_ms = pk_time_ms();
    eng_event_clear(&ev);
    return true;
}

/* Reads g's events to its end; false when the client left or the server
 * stops (the task cancelled). */
static bool gen_collect(srv_gen *g)
{
    while (!g->have_done && !g->failed) {
        eng_event ev;
        pk_status st = gen_next(g, &ev);
        if (st == PK_ECANCELLED) return false;
        if (st == PK_ENOTFOUND) {
            g->failed = true;
            srv_fail(&g->err, 500, NULL, "the task ended without a result");
            break;
        }
        gen_take(g, &ev);
        eng_event_clear(&ev);
    }
    return true;
}

static json_t *gen_response(srv_gen *g)
{
    return srv_fmt_of(g->o.api)->response(g);
}

enum MHD_Result srv_gen_run(srv_req *r, const eng_completion *c, const srv_gen_opts *o)
{
    enum MHD_Result ret;
    srv_gen *g = gen_submit(r, c, o, &ret);
    if (!g || !gen_placed(r, g, &ret)) return ret;
    if (o->stream) {
        g->headers_sent = true;
        return srv_reply_sse(r, gen_read, g, gen_free);
    }
    if (!gen_collect(g)) ret = MHD_NO;
    else if (g->failed) ret = srv_reply_error(r, &g->err);
    else ret = srv_reply_json(r, 200, gen_response(g));
    gen_free(g);
    return ret;
}

/* The answers of several generations as one: native, an array of the
 * answers (index i); OpenAI, one envelope whose choices are each one's
 * (index i), usage summed over the completions. */
static json_t *multi_response(srv_gen **gs, int k)
{
    if (srv_fmt_of(gs[0]->o.api)->answers_as_array) {
        json_t *a = json_array();
        for (int i = 0; a && i < k; i++) {
            json_t *one = gen_response(gs[i]);
            if (json_object_get(one, "index")) json_object_set_new(one, "index", json_integer(i));
            if (!one || json_array_append_new(a, one)) {
                json_decref(a);
                return NULL;
            }
        }
        return a;
    }
    json_t *res = gen_response(gs[0]);
    json_t *choices = json_object_get(res, "choices"), *usage = json_object_get(res, "usage");
    int32_t n_gen = gs[0]->done.n_gen;
    for (int i = 1; res && i < k; i++) {
        json_t *one = gen_response(gs[i]);
        json_t *ch = json_array_get(json_object_get(one, "choices"), 0);
        if (!ch) {
            json_decref(one);
            json_decref(res);
            return NULL;
        }
        json_object_set_new(ch, "index", json_integer(i));
        json_array_append(choices, ch);
        json_decref(one);
        n_gen += gs[i]->done.n_gen;
    }
    if (usage) {
        json_object_set_new(usage, "completion_tokens", json_integer(n_gen));
        json_object_set_new(usage, "total_tokens", json_integer(n_gen + gs[0]->done.n_prompt));
    }
    return res;
}

uint64_t srv_choice_seed(uint64_t seed, int j)
{
    /* llama-server's child tasks: seed + j in 32 bits, and a random seed
     * stays random (each choice draws its own). */
    return j > 0 && seed != SMP_SEED_RANDOM ? (uint32_t)(seed + (uint64_t)j) : seed;
}

enum MHD_Result srv_gen_run_multi(srv_req *r, const eng_completion *cs, int k, const srv_gen_opts *o)
{
    if (k == 1) return srv_gen_run(r, cs, o);
    if (o->stream) return srv_reply_errorf(r, 400, "streaming gives one completion; send one prompt with n = 1");
    srv_gen **gs = calloc((size_t)k, sizeof *gs);
    if (!gs) return srv_reply_errorf(r, 500, "out of memory");
    enum MHD_Result ret = MHD_YES;
    int n = 0;
    bool ok = true;
    /* All submitted first, so they decode together in as many slots. */
    for (; n < k && ok; n++) ok = (gs[n] = gen_submit(r, &cs[n], o, &ret)) != NULL;
    if (!ok) n--;
    for (int i = 0; ok && i < n; i++) {
        ok = gen_placed(r, gs[i], &ret);
        if (!ok) gs[i] = NULL;                     /* freed by gen_placed */
    }
    for (int i = 0; ok && i < n; i++) ok = gen_collect(gs[i]) || ((ret = MHD_NO), false);
    for (int i = 0; ok && i < n; i++)
        if (gs[i]->failed) {
            ret = srv_reply_error(r, &gs[i]->err);
            ok = false;
        }
    if (ok) ret = srv_reply_json(r, 200, multi_response(gs, k));
    for (int i = 0; i < n; i++) gen_free(gs[i]);
    free(gs);
    return ret;
}

enum MHD_Result srv_gen_run_ids(srv_req *r, eng_completion *c, const srv_gen_opts *o, int32_t *ids, int32_t n)
{
    c->prompt = ids;
    c->n_prompt = n;
    enum MHD_Result ret = srv_gen_run(r, c, o);
    free(ids);
    srv_gen_req_free(c);
    return ret;
}

enum MHD_Result srv_gen_prompt(srv_req *r, json_t *body, srv_api api)
{
    srv *s = r->s;
    eng_completion c;
    srv_gen_opts o;
    srv_err e;
    int32_t **ids, *n;
    int k;
    srv_gen_defaults dflt = srv_gen_defaults_of(s);
    if (!srv_parse_gen(body, api, &dflt, &c, &o, &e)) return srv_reply_error(r, &e);
    if (!srv_gen_text_fits(s, srv_prompt_bytes(json_object_get(body, "prompt")), &e) ||
        !srv_tokenize_prompts(s->voc, json_object_get(body, "prompt"), true, &ids, &n, &k, &e)) {
        srv_gen_req_free(&c);
        return srv_reply_error(r, &e);
    }
    enum MHD_Result ret;
    if (k * o.n_choices > SRV_MAX_CHOICES) {
        ret = srv_reply_errorf(r, 400, "%d prompts x n = %d completions; at most %d per request", k, o.n_choices,
                               SRV_MAX_CHOICES);
    } else if (k == 1 && o.n_choices == 1) {
        c.prompt = ids[0];
        c.n_prompt = n[0];
        ret = srv_gen_run(r, &c, &o);
    } else {
        /* One task per completion: the prompts in order, each n times. */
        int total = k * o.n_choices;
        eng_completion *cs = malloc((size_t)total * sizeof *cs);
        for (int i = 0; cs && i < total; i++) {
            cs[i] = c;
            cs[i].prompt = ids[i / o.n_choices];
            cs[i].n_prompt = n[i / o.n_choices];
            cs[i].sp.seed = srv_choice_seed(c.sp.seed, i % o.n_choices);
        }
        ret = cs ? srv_gen_run_multi(r, cs, total, &o) : srv_reply_errorf(r, 500, "out of memory");
        free(cs);
    }
    for (int i = 0; i < k; i++) free(ids[i]);
    free(ids);
    free(n);
    srv_gen_req_free(&c);
    return ret;
}

srv_new_text srv_gen_take_new(srv_gen *g)
{
    srv_new_text t = { 0 };
    srv_reason_split rs =
        srv_reason_split_text(g->o.reasoning, g->o.think, g->text, g->n_text, g->o.think_open, false);
    const char *reason = g->text + rs.reason_off, *content = g->text + rs.content_off;
    size_t n_reason = rs.reason_len, safe;
    if (g->o.tools == SRV_TOOL_HARMONY) {
        /* Out of memory, nothing goes now: the end's parse fails too and says so. */
        if (srv_tools_harmony_prefix(content, rs.content_len, &g->h_content, &g->h_reason) != PK_OK) return t;
        content = g->h_content.p;
        safe = g->h_content.n;
        /* As srv_gen_answer chooses: the analysis channel unless the text thought in tags. */
        if (!n_reason && g->o.reasoning != SRV_REASON_NONE) {
            reason = g->h_reason.p;
            n_reason = g->h_reason.n;
        }
    } else {
        safe = srv_tools_content_prefix(g->o.tools, content, rs.content_len);
    }
    if (n_reason > g->n_sent_reason) {
        t.reason = reason + g->n_sent_reason;
        t.n_reason = n_reason - g->n_sent_reason;
        g->n_sent_reason = n_reason;
    }
    if (safe > g->n_sent) {
        t.content = content + g->n_sent;
        t.n_content = safe - g->n_sent;
        g->n_sent = safe;
    }
    return t;
}

srv_new_text srv_gen_take_rest(const srv_gen *g, const srv_answer *a)
{
    srv_new_text t = { 0 };
    if (a->reason_len > g->n_sent_reason) {
        t.reason = a->reason + g->n_sent_reason;
        t.n_reason = a->reason_len - g->n_sent_reason;
    }
    const char *sent = g->o.tools == SRV_TOOL_HARMONY ? g->h_content.p : (g->text ? g->text : "") + a->content_off;
    if (a->tm.content_len > g->n_sent && (!g->n_sent || !memcmp(a->tm.content, sent, g->n_sent))) {
        t.content = a->tm.content + g->n_sent;
        t.n_content = a->tm.content_len - g->n_sent;
    }
    return t;
}
