/*
 * srv_metrics.c - what the server says about itself, all from one
 * eng_get_stats snapshot per request: GET /metrics (Prometheus text),
 * GET /slots (per-slot state and speed) and GET /polykv/tps (a JSON
 * snapshot of decode speed, or an SSE stream of them).
 *
 * /metrics carries three families:
 *   llamacpp:*  llama-server's names and types where they apply (the
 *               throughput gauges prompt_tokens_seconds and
 *               predicted_tokens_seconds are over the time since the last
 *               scrape, as llama-server's buckets; the other averages are
 *               over the server's life);
 *   polykv:*    aggregate and mean per-session decode speed, KV cells;
 *   vllm:*      num_requests_waiting, num_requests_running and
 *               kv_cache_usage_perc (0..1), the series the Gateway API
 *               Inference Extension / llm-d endpoint picker reads.
 */
#include <poll.h>
#include <math.h>
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
#include <malloc.h>
#define HAVE_MALLINFO2 1
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kvev/kvev_pub.h"
#include "srv_impl.h"

static void metric(pk_buf *b, const char *name, const char *type, const char *help, const char *labels, double v)
{
    pk_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s%s %.10g\n", name, help, name, type, name, labels, v);
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

/* Per-pool series, labelled by pool only (sessions come and go: a label
 * per session would grow the scrape without bound). */
static void admission_series(pk_buf *b, const eng_stats *st)
{
    pk_buf_printf(b, "# HELP polykv:admission_decisions_total Admission decisions by scope (pool, or none) and kind.\n"
                     "# TYPE polykv:admission_decisions_total counter\n");
    for (int32_t i = -1; i < st->n_pools; i++) {
        const eng_adm_info *a = i < 0 ? &st->adm : &st->pools[i].adm;
        char pool[16];
        if (i < 0) snprintf(pool, sizeof pool, "none");
        else snprintf(pool, sizeof pool, "%d", st->pools[i].pool_id);
        for (int d = 0; d < ENG_ADM_N; d++)
            pk_buf_printf(b, "polykv:admission_decisions_total{pool=\"%s\",decision=\"%s\"} %llu\n", pool,
                          eng_adm_decision_name((eng_adm_decision)d), (unsigned long long)a->decisions[d]);
    }
    pk_buf_printf(b, "# HELP polykv:pool_mean_tps Mean decode speed of the pool's warm sessions.\n"
                     "# TYPE polykv:pool_mean_tps gauge\n");
    for (int32_t i = 0; i < st->n_pools; i++)
        pk_buf_printf(b, "polykv:pool_mean_tps{pool=\"%d\"} %.10g\n", st->pools[i].pool_id, st->pools[i].adm.mean_tps);
    pk_buf_printf(b, "# HELP polykv:pool_settling 1 while the pool's last admit is settling.\n"
                     "# TYPE polykv:pool_settling gauge\n");
    for (int32_t i = 0; i < st->n_pools; i++)
        pk_buf_printf(b, "polykv:pool_settling{pool=\"%d\"} %d\n", st->pools[i].pool_id, st->pools[i].adm.settling);
}

static void pool_series(pk_buf *b, const eng_stats *st)
{
    static const struct { const char *name, *type, *help; } fam[] = {
        { "polykv:pool_kv_bytes", "gauge", "KV bytes charged to the pool (its own range)." },
        { "polykv:pool_sessions", "gauge", "Sessions attached to the pool." },
        { "polykv:pool_gen_tps", "gauge", "Summed decode speed of the pool's decoding sessions." },
        { "polykv:pool_prefix_hits_total", "counter", "Attaches that shared tokens of the pool." },
        { "polykv:pool_queries_total", "counter", "Attaches to the pool." },
    };
    for (size_t f = 0; f < ARRAY_LEN(fam); f++) {
        pk_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", fam[f].name, fam[f].help, fam[f].name, fam[f].type);
        for (int32_t i = 0; i < st->n_pools; i++) {
            const eng_pool_info *p = &st->pools[i];
            double v = f == 0 ? (double)p->own_cells * (double)st->kv_cell_bytes : f == 1 ? p->n_sessions
                     : f == 2 ? p->gen_tps : f == 3 ? (double)p->n_prefix_hits : (double)p->n_queries;
            pk_buf_printf(b, "%s{pool=\"%d\"} %.10g\n", fam[f].name, p->pool_id, v);
        }
    }
}

/* Writes s escaped for a label value (\\, " and new lines) at o, up to
 * end; returns where it stopped. */
static char *escape_label(char *o, const char *end, const char *s)
{
    for (const char *c = s; *c && o < end; c++) {
        if (*c == '\\' || *c == '"') *o++ = '\\';
        if (*c == '\n') {
            *o++ = '\\';
            *o++ = 'n';
            continue;
        }
        *o++ = *c;
    }
    return o;
}

char *srv_metrics_text(const eng_stats *st, const srv_scrape *since, const char *model_name, const char *replica,
                       const kvev_pub_stats *kv)
{
    pk_buf b = {0};
    double prompt_s = st->prompt_ms_total / 1e3, predicted_s = st->predicted_ms_total / 1e3;
    double kv_ratio = ratio(st->kv_used, st->kv_total);
    metric(&b, "llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed.", "",
           (double)st->n_prompt_tokens);
    metric(&b, "llamacpp:prompt_tokens_cached_total", "counter", "Number of prompt tokens reused from the cache.", "",
           (double)st->n_tokens_reused);
    metric(&b, "llamacpp:prompt_seconds_total", "counter", "Prompt process time.", "", prompt_s);
    metric(&b, "llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed.", "",
           (double)st->n_predicted_tokens);
    metric(&b, "llamacpp:tokens_predicted_seconds_total", "counter", "Predict process time.", "", predicted_s);
    metric(&b, "llamacpp:n_decode_total", "counter", "Total number of model_decode calls.", "",
           (double)st->n_decode_calls);
    metric(&b, "llamacpp:n_tokens_max", "counter", "Largest observed n_tokens.", "", st->n_tokens_max);
    metric(&b, "llamacpp:spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens generated.", "",
           (double)st->n_drafted);
    metric(&b, "llamacpp:spec_decode_num_accepted_tokens_total", "counter", "Number of draft tokens accepted.", "",
           (double)st->n_accepted);
    metric(&b, "llamacpp:spec_decode_num_drafts_total", "counter",
           "Number of speculative verification steps (steps that verified a draft).", "", (double)st->n_verify_steps);
    metric(&b, "polykv:spec_draft_model_seconds_total", "counter",
           "Engine thread time in the draft model's passes (-md).", "", st->draft_ms_total / 1000.0);
    metric(&b, "polykv:spec_draft_model_cells", "gauge", "Cells in use in the draft model's KV cache (-md).", "",
           (double)st->draft_cells);
    metric(&b, "llamacpp:n_busy_slots_per_decode", "gauge", "Average number of busy slots per decode call.", "",
           ratio((double)st->n_busy_slots_sum, (double)st->n_decode_calls));
    metric(&b, "llamacpp:prompt_tokens_seconds", "gauge",
           "Average prompt throughput in tokens/s since the last scrape.", "",
           ratio((double)(st->n_prompt_tokens - since->n_prompt), (st->prompt_ms_total - since->prompt_ms) / 1e3));
    metric(&b, "llamacpp:predicted_tokens_seconds", "gauge",
           "Average generation throughput in tokens/s since the last scrape.", "",
           ratio((double)(st->n_predicted_tokens - since->n_predicted),
                 (st->predicted_ms_total - since->predicted_ms) / 1e3));
    metric(&b, "llamacpp:kv_cache_usage_ratio", "gauge", "KV-cache usage. 1 means 100 percent usage.", "",
           kv_ratio);
    metric(&b, "llamacpp:kv_cache_tokens", "gauge", "KV-cache tokens.", "", st->kv_used);
    metric(&b, "llamacpp:requests_processing", "gauge", "Number of requests processing.", "", st->n_running);
    metric(&b, "llamacpp:requests_deferred", "gauge", "Number of requests deferred.", "", st->n_waiting);

    metric(&b, "polykv:aggregate_decode_tokens_per_second", "gauge",
           "Tokens decoded per second by all slots together, over the engine's speed window.", "",
           st->aggregate_tps);
    metric(&b, "polykv:mean_session_decode_tokens_per_second", "gauge",
           "Mean decode speed experienced by the warm sessions decoding now (per-slot EWMA).", "",
           st->mean_active_tps);
    metric(&b, "polykv:kv_cells_used", "gauge", "KV cache cells in use.", "", st->kv_used);
    if (st->states_total) {
        metric(&b, "polykv:recurrent_states_used", "gauge",
               "Recurrent state slots in use, live and checkpoints (hybrid models).", "", st->states_used);
        metric(&b, "polykv:recurrent_states_total", "gauge", "Recurrent state slots (hybrid models).", "",
               st->states_total);
        metric(&b, "polykv:recurrent_state_bytes", "gauge", "Bytes of one recurrent state (hybrid models).", "",
               (double)st->state_bytes);
    }
    if (st->window) {
        metric(&b, "polykv:kv_window_cells_used", "gauge",
               "Sliding-window layers' cells in use (their cells apart, freed behind the window).", "",
               st->window_cells_used);
        metric(&b, "polykv:kv_window_cell_bytes", "gauge", "Bytes of one sliding-window cell, every window layer.",
               "", (double)st->window_cell_bytes);
    }
    metric(&b, "polykv:kv_cells_total", "gauge", "KV cache cells in all.", "", st->kv_total);
    metric(&b, "polykv:requests_done_total", "counter", "Completion tasks finished.", "",
           (double)st->n_requests_done);
    metric(&b, "polykv:parked_histories", "gauge", "Finished conversations kept in the cache under reserve ids.", "",
           st->n_parked);
    metric(&b, "polykv:parked_tokens", "gauge", "Tokens of the parked histories.", "", st->parked_tokens);
    metric(&b, "polykv:seq_ids_used", "gauge", "KV sequence ids held by slots, pools and parked histories.", "",
           st->seq_ids_used);
    metric(&b, "polykv:engine_control_seconds_total", "counter",
           "Engine thread time spent answering control messages and publishing snapshots (no batch runs meanwhile).",
           "", st->control_ms_total / 1000.0);
#ifdef HAVE_MALLINFO2
    /* What a leak grows, apart from what the allocator holds free: the
     * resident size also moves with its arenas and with how many
     * connections overlap (bench/load.mjs checks this one). */
    struct mallinfo2 mi = mallinfo2();
    metric(&b, "polykv:heap_bytes_in_use", "gauge", "Bytes the C allocator has handed out and not had back.", "",
           (double)(mi.uordblks + mi.hblkhd));
#endif
    pool_series(&b, st);
    admission_series(&b, st);
    if (kv) {
        metric(&b, "polykv:kv_events_batches_total", "counter",
               "KV event batches numbered (sent or dropped): the next sequence number.", "", (double)kv->batches);
        metric(&b, "polykv:kv_events_dropped_total", "counter",
               "KV event batches dropped (publisher queue full): gaps in the sequence numbers.", "",
               (double)kv->dropped);
        metric(&b, "polykv:kv_events_total", "counter", "KV events in the batches queued for sending.", "",
               (double)kv->events);
        metric(&b, "polykv:kv_events_replays_total", "counter", "Replay requests answered.", "",
               (double)kv->replays);
        metric(&b, "polykv:kv_events_engine_seconds_total", "counter",
               "Engine thread time spent finding what changed in the cache and queueing its events.", "",
               st->kv_events_ms_total / 1000.0);
    }

    /* Label values escape \, " and new lines (Prometheus text format). */
    char label[SRV_MAX_NAME * 2 + 32], *o = label;
    o += sprintf(o, "{model_name=\"");
    o = escape_label(o, label + sizeof label - 8, model_name);
    strcpy(o, "\"}");
    char who[SRV_MAX_NAME * 2 + 600], *w = who;
    w += sprintf(w, "{replica=\"");
    w = escape_label(w, who + sizeof who / 2 - 8, replica);
    w += sprintf(w, "\",model_name=\"");
    w = escape_label(w, who + sizeof who - 8, model_name);
    strcpy(w, "\"}");
    metric(&b, "polykv:replica_info", "gauge", "This replica (its $POD_IP or host name) and its model.", who, 1);
    metric(&b, "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", label,
           st->n_waiting);
    metric(&b, "vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", label,
           st->n_running);
    metric(&b, "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", label, kv_ratio);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

const char *srv_slot_state(eng_slot_state s)
{
    return s == ENG_SLOT_PREFILL ? "prefill" : s == ENG_SLOT_DECODE ? "decode" : "idle";
}

/* A session's speculation: guesses verified and kept, the share kept, and
 * the tokens kept per step that verified some (0s when it never guessed). */
static json_t *spec_json(const eng_slot_info *si)
{
    return json_pack("{s:i, s:i, s:f, s:f}", "drafted", si->n_drafted, "accepted", si->n_accepted,
                     "acceptance_rate", si->n_drafted > 0 ? (double)si->n_accepted / si->n_drafted : 0.0,
                     "mean_accepted", si->n_verify_steps > 0 ? (double)si->n_accepted / si->n_verify_steps : 0.0);
}

json_t *srv_tps_json(const srv *s, const eng_stats *st, const srv_view *v)
{
    json_t *sessions = json_array();
    for (int32_t i = 0; i < st->n_slots; i++) {
        const eng_slot_info *si = &st->slots[i];
        if (si->state == ENG_SLOT_IDLE) continue;
        json_t *o = json_pack("{s:i, s:s, s:f, s:i, s:i, s:i, s:i, s:s?, s:o, s:b}", "slot",
                                                  si->id, "state", srv_slot_state(si->state), "tps_ewma", si->tps_ewma,
                                                  "n_decoded", si->n_decoded, "ctx_used", si->n_past, "ctx_total",
                                                  si->n_ctx, "ctx_headroom_tokens", si->n_ctx - si->n_past,
                                                  "session_id", si->session_id[0] ? si->session_id : NULL,
                                                  "pool_id", si->pool_id > 0 ? json_integer(si->pool_id) : json_null(),
                                                  "warming", si->warming);
        if (o) json_object_set_new(o, "speculation", spec_json(si));
        if (v) srv_view_tag(v, s, o, v->slot_tenant[i]);
        json_array_append_new(sessions, o);
    }
    json_t *pools = json_array();
    for (int32_t i = 0; i < st->n_pools; i++) {
        json_t *o = json_pack("{s:i, s:f, s:b, s:i}", "pool_id", st->pools[i].pool_id, "mean_tps",
                              st->pools[i].adm.mean_tps, "settling", st->pools[i].adm.settling,
                              "n_sessions", st->pools[i].n_sessions);
        if (v) srv_view_tag(v, s, o, v->pool_tenant[i]);
        json_array_append_new(pools, o);
    }
    return json_pack("{s:I, s:f, s:f, s:i, s:i, s:i, s:f, s:b, s:o, s:o}", "ts", (json_int_t)st->ts_ms,
                     "aggregate_tps", st->aggregate_tps, "mean_active_tps", st->mean_active_tps, "n_running",
                     st->n_running, "n_waiting", st->n_waiting, "n_warming", st->n_warming, "server_mean_tps",
                     st->adm.mean_tps, "server_settling", st->adm.settling, "pools", pools, "sessions", sessions);
}

static bool stats(srv_req *r, eng_stats *st)
{
    return eng_get_stats(srv_engine(r->s), st) == PK_OK;
}

enum MHD_Result srv_h_metrics(srv_req *r, json_t *body)
{
    if (!r->s->p.endpoint_metrics) {
        return srv_reply_errorf(r, 501, "This server does not support metrics endpoint. Start it with `--metrics`");
    }
    /* Server-wide counters (prompt tokens reused) move with every
     * tenant's requests: a tenant could read another's cache hits in
     * their differences. */
    if (!srv_req_admin(r)) return srv_reply_errorf(r, 403, "/metrics needs an admin key");
    eng_stats st;
    if (!stats(r, &st)) return srv_reply_errorf(r, 503, "the engine is stopping");
    /* One scrape at a time: each one's window starts where the last ended. */
    pthread_mutex_lock(&r->s->scrape_mu);
    kvev_pub_stats kv;
    if (r->s->kv) kvev_pub_stats_get(r->s->kv, &kv);
    char *text = srv_metrics_text(&st, &r->s->scrape, r->s->model_name, r->s->replica, r->s->kv ? &kv : NULL);
    if (text)
        r->s->scrape = (srv_scrape){ st.n_prompt_tokens, st.n_predicted_tokens, st.prompt_ms_total,
                                     st.predicted_ms_total };
    pthread_mutex_unlock(&r->s->scrape_mu);
    if (!text) return srv_reply_errorf(r, 500, "out of memory");
    /* llama-server's header: scrapers compute uptimes and rates from it. */
    snprintf(r->hdr_name, sizeof r->hdr_name, "Process-Start-Time-Unix");
    snprintf(r->hdr_value, sizeof r->hdr_value, "%lld", (long long)r->s->t_start);
    enum MHD_Result ret = srv_reply_text(r, 200, "text/plain; version=0.0.4", text, strlen(text));
    free(text);
    return ret;
}

enum MHD_Result srv_h_slots(srv_req *r, json_t *body)
{
    if (!r->s->p.endpoint_slots) {
        return srv_reply_errorf(r, 501, "This server does not support slots endpoint. Start it with `--slots`");
    }
    eng_stats st;
    if (!stats(r, &st)) return srv_reply_errorf(r, 503, "the engine is stopping");
    int n_idle = 0;
    for (int32_t i = 0; i < st.n_slots; i++) n_idle += st.slots[i].state == ENG_SLOT_IDLE;
    srv_view v;
    srv_view_filter(r->s, r->tenant, &st, &v);
    json_t *a = json_array();
    for (int32_t i = 0; i < st.n_slots; i++) {
        const eng_slot_info *si = &st.slots[i];
        json_t *hist = json_pack("{s:i, s:f, s:f, s:f, s:i, s:i, s:s}", "tokens", si->hist_tokens, "age_s",
                                 si->hist_age_s, "protected_for_s", si->protected_for_s, "value", si->hist_value,
                                 "last_source_seq", si->last_source_seq, "last_reused", si->last_reused,
                                 "last_reason", si->last_reason);
        json_array_append_new(a, json_pack(
            "{s:i, s:I, s:i, s:b, s:s, s:i, s:i, s:i, s:i, s:i, s:f, s:[{s:i}], s:o}",
            "id", si->id, "id_task", (json_int_t)si->task_id, "n_ctx", si->n_ctx,
            "is_processing", si->state != ENG_SLOT_IDLE, "state", srv_slot_state(si->state), "n_past", si->n_past,
            "n_prompt_tokens", si->n_prompt, "n_prompt_tokens_cache", si->n_cached, "n_cached", si->n_cached,
            "n_decoded", si->n_decoded, "tps_ewma", si->tps_ewma, "next_token", "n_decoded",
            si->state != ENG_SLOT_IDLE ? si->n_decoded : 0,
            "history", hist));
        json_t *slot = json_array_get(a, json_array_size(a) - 1);
        json_t *next = json_array_get(json_object_get(slot, "next_token"), 0);
        json_object_set_new(next, "n_remain", json_integer(si->n_remain));
        json_object_set_new(next, "has_next_token", json_boolean(si->state != ENG_SLOT_IDLE));
        if (si->has_params)   /* the current or last task's, as llama-server shows them */
            json_object_set_new(slot, "params", json_pack("{s:i, s:I, s:f, s:i, s:f, s:f, s:f, s:i, s:f, s:f}",
                "n_predict", si->n_predict, "seed", (json_int_t)si->sp.seed, "temperature", (double)si->sp.temp,
                "top_k", si->sp.top_k, "top_p", (double)si->sp.top_p, "min_p", (double)si->sp.min_p,
                "repeat_penalty", (double)si->sp.repeat_penalty, "repeat_last_n", si->sp.penalty_last_n,
                "presence_penalty", (double)si->sp.presence_penalty,
                "frequency_penalty", (double)si->sp.frequency_penalty));
        json_object_set_new(slot, "pool_id", si->pool_id > 0 ? json_integer(si->pool_id) : json_null());
        json_object_set_new(slot, "session_id", si->session_id[0] ? json_string(si->session_id) : json_null());
        json_object_set_new(slot, "pool_shared_tokens", json_integer(si->pool_shared));
        /* llama-server's flag (the server speculates), then polykv's counts */
        json_object_set_new(slot, "speculative",
                            json_boolean(eng_get_params(srv_engine(r->s))->spec.kind != SPEC_NONE));
        json_object_set_new(slot, "speculation", spec_json(si));
        json_object_set_new(slot, "ctx_used", json_integer(si->n_past));
        json_object_set_new(slot, "ctx_total", json_integer(si->n_ctx));
        json_object_set_new(slot, "ctx_headroom_tokens", json_integer(si->n_ctx - si->n_past));
        json_object_set_new(slot, "kv_owned_bytes",
                            json_real((double)si->kv_owned * (double)st.kv_cell_bytes + (double)si->state_bytes));
        srv_view_tag(&v, r->s, slot, v.slot_tenant[i]);
    }
    const char *fail = srv_query(r, "fail_on_no_slot");
    if (fail && *fail && n_idle == 0) {
        json_decref(a);
        return srv_reply_errorf(r, 503, "no slot available");
    }
    return srv_reply_json(r, 200, a);
}

/* ---- /polykv/cache ---- */

static const char *cache_kind(eng_cache_kind k)
{
    switch (k) {
    case ENG_CACHE_PLACE: return "placement";
    case ENG_CACHE_ADMIT: return "admission";
    case ENG_CACHE_PARK: return "park";
    case ENG_CACHE_DROP: return "drop";
    case ENG_CACHE_ADMISSION: return "admission_decision";
    }
    return "?";
}

/* The last cache events (placement, admission, park, drop, admission
 * decisions of enforced scopes) and the
 * counters of prompt tokens reused vs read, oldest event first. */
enum MHD_Result srv_h_cache(srv_req *r, json_t *body)
{
    static __thread eng_stats st;     /* large: off the handler's stack */
    if (!stats(r, &st)) return srv_reply_errorf(r, 503, "the engine is stopping");
    srv_view v;
    srv_view_filter(r->s, r->tenant, &st, &v);
    json_t *ev = json_array();
    for (int32_t i = 0; i < st.n_events; i++) {
        const eng_cache_event *c = &st.events[i];
        json_t *o = json_pack("{s:I, s:s, s:I, s:i, s:s}", "ts", (json_int_t)c->ts_ms, "kind", cache_kind(c->kind),
                              "id_task", (json_int_t)c->task_id, "slot", c->slot, "reason", c->reason);
        if (c->kind == ENG_CACHE_ADMIT) {
            json_object_set_new(o, "tokens_reused", json_integer(c->n_reused));
            json_object_set_new(o, "tokens_read", json_integer(c->n_read));
            json_object_set_new(o, "source_seq", json_integer(c->seq));
        } else if (c->kind == ENG_CACHE_PARK || c->kind == ENG_CACHE_DROP) {
            json_object_set_new(o, "seq", json_integer(c->seq));
            json_object_set_new(o, "tokens", json_integer(c->n_tokens));
            json_object_set_new(o, "value", json_real(c->value));
        } else if (c->kind == ENG_CACHE_ADMISSION) {
            json_object_set_new(o, "decision", json_string(eng_adm_decision_name((eng_adm_decision)c->decision)));
            json_object_set_new(o, "pool_id", c->pool_id > 0 ? json_integer(c->pool_id) : json_null());
            json_object_set_new(o, "projected_tps", isfinite(c->value) ? json_real(c->value) : json_null());
        }
        json_array_append_new(ev, o);
    }
    json_t *o = json_pack("{s:I, s:I, s:I, s:I, s:i, s:i, s:i, s:i, s:f, s:i, s:i, s:o}",
                          "ts", (json_int_t)st.ts_ms,
                          "tokens_restored", (json_int_t)st.n_tokens_restored,
                          "tokens_reused", (json_int_t)st.n_tokens_reused,
                          "tokens_read", (json_int_t)st.n_tokens_read,
                          "parked", st.n_parked, "parked_tokens", st.parked_tokens,
                          "spilled", st.n_spilled, "spilled_tokens", st.spilled_tokens,
                          "spilled_mib", st.spilled_mib,
                          "kv_used", st.kv_used, "kv_total", st.kv_total, "events", ev);
    if (o && !srv_req_admin(r)) {
        /* Server-wide reuse counters move with every tenant's prompts, and
         * histories parked or spilled are other tenants' too. */
        static const char *const shared[] = { "tokens_restored", "tokens_reused", "tokens_read", "parked",
                                              "parked_tokens", "spilled", "spilled_tokens", "spilled_mib" };
        for (size_t i = 0; i < ARRAY_LEN(shared); i++) json_object_del(o, shared[i]);
    }
    return srv_reply_json(r, 200, o);
}

/* ---- /polykv/tps ---- */

typedef struct tps_stream {
    srv *s;
    int tenant;                /* the reader's (srv_req.tenant) */
    struct MHD_Connection *conn;
    int interval_ms;
    double next_ms;            /* when the next snapshot is due */
    char *out;
    size_t n_out, pos;
} tps_stream;

static void tps_free(void *cls)
{
    tps_stream *t = cls;
    free(t->out);
    free(t);
}

static ssize_t tps_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    tps_stream *t = cls;
    (void)pos;
    if (t->pos == t->n_out) {
        free(t->out);
        t->out = NULL;
        t->n_out = t->pos = 0;
        /* Sleep until due, looking at the client and the server meanwhile. */
        for (;;) {
            if (atomic_load(&t->s->stopping) || !srv_conn_alive(t->conn, NULL)) return MHD_CONTENT_READER_END_WITH_ERROR;
            double wait = t->next_ms - pk_time_ms();
            if (wait <= 0) break;
            poll(NULL, 0, (int)MIN(wait + 1, SRV_POLL_MS));
        }
        t->next_ms += t->interval_ms;
        if (t->next_ms < pk_time_ms()) t->next_ms = pk_time_ms() + t->interval_ms;
        static __thread eng_stats st;
        if (eng_get_stats_recent(srv_engine(t->s), &st) != PK_OK) return MHD_CONTENT_READER_END_OF_STREAM;
        srv_view v;
        srv_view_filter(t->s, t->tenant, &st, &v);
        json_t *j = srv_tps_json(t->s, &st, &v);
        char *s = j ? json_dumps(j, SRV_JSON_DUMP) : NULL;
        json_decref(j);
        if (!s) return MHD_CONTENT_READER_END_WITH_ERROR;
        size_t n = strlen(s);
        t->out = malloc(n + 9);
        if (!t->out) {
            free(s);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        memcpy(t->out, "data: ", 6);
        memcpy(t->out + 6, s, n);
        memcpy(t->out + 6 + n, "\n\n", 2);
        t->n_out = n + 8;
        free(s);
    }
    size_t n = MIN(max, t->n_out - t->pos);
    memcpy(buf, t->out + t->pos, n);
    t->pos += n;
    return (ssize_t)n;
}

enum MHD_Result srv_h_tps(srv_req *r, json_t *body)
{
    const char *stream = srv_query(r, "stream");
    if (stream && (!strcmp(stream, "1") || !strcmp(stream, "true"))) {
        const char *iv = srv_query(r, "interval_ms");
        long interval = 500;
        if (iv) {
            char *end;
            interval = strtol(iv, &end, 10);
            if (end == iv || *end || interval < 50 || interval > 60000)
                return srv_reply_errorf(r, 400, "'interval_ms' must be an integer in [50, 60000]");
        }
        tps_stream *t = calloc(1, sizeof *t);
        if (!t) return srv_reply_errorf(r, 500, "out of memory");
        t->s = r->s;
        t->tenant = r->tenant;
        t->conn = r->conn;
        t->interval_ms = (int)interval;
        t->next_ms = pk_time_ms();
        return srv_reply_sse(r, tps_read, t, tps_free);
    }
    static __thread eng_stats st;
    if (eng_get_stats_recent(srv_engine(r->s), &st) != PK_OK) return srv_reply_errorf(r, 503, "the engine is stopping");
    srv_view v;
    srv_view_filter(r->s, r->tenant, &st, &v);
    return srv_reply_json(r, 200, srv_tps_json(r->s, &st, &v));
}
