/*
 * srv_admit.c - admission over HTTP (docs/admission.md): policies and
 * capacity answers as JSON, and their routes.
 *
 *   GET|POST /polykv/admission               the server scope (sessions on no pool)
 *   GET      /polykv/capacity[?expected_tokens=N][&session_id=S]
 *   GET|POST /polykv/pools/{id}/admission    (routed here from srv_pools.c)
 *   GET      /polykv/pools/{id}/capacity
 *
 * A POST sets the fields it names over the policy in force (or the flags'
 * defaults for a scope that had none); an unknown field is a 400.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv_parse.h"

json_t *srv_policy_json(const adm_policy *p)
{
    return json_pack("{s:b, s:f, s:s, s:s, s:i, s:i, s:i, s:i, s:f}", "set", p->set, "target_tps_per_session",
                     p->target_tps, "mode", adm_mode_name(p->mode), "on_saturation", adm_sat_name(p->on_saturation),
                     "guarantee_min_sessions", p->guarantee_min_sessions, "settle_tokens", p->settle_tokens,
                     "settle_max_ms", p->settle_max_ms, "queue_max_ms", p->queue_max_ms, "floor_margin_scale",
                     p->margin_scale);
}

static json_t *num_or_null(double x) { return isfinite(x) ? json_real(x) : json_null(); }

json_t *srv_capacity_json(const adm_answer *a)
{
    json_t *o = json_pack("{s:b, s:s, s:o, s:o, s:o, s:b, s:f, s:f, s:i, s:i, s:i, s:i, s:f, s:i, s:b, s:f, "
                          "s:b, s:b, s:i, s:f}",
                          "can_admit", a->can_admit, "reason", a->reason,
                          "projected_mean_tps_if_admitted", num_or_null(a->projected),
                          "projected_mean_tps_model", num_or_null(a->projected_model),
                          "projected_mean_tps_measured", num_or_null(a->projected_measured),
                          "projected_idle_estimate", a->idle_estimate,
                          "drop_per_admit_ewma", a->drop_per_admit_ewma, "mean_active_tps", a->mean_active_tps,
                          "n_active", a->n_active, "n_warming", a->n_warming, "n_pool_sessions", a->n_pool_sessions,
                          "headroom_sessions", a->headroom_sessions, "kv_headroom_pct", a->kv_headroom_pct,
                          "kv_free_cells", a->kv_free_cells, "settling", a->settling,
                          "settle_remaining_ms", a->settle_remaining_ms, "guaranteed", a->guaranteed,
                          "known_session", a->known_session, "ctx_headroom_tokens", a->ctx_headroom_tokens,
                          "compaction_pressure", a->compaction_pressure);
    if (o) json_object_set_new(o, "retry_after_s", json_real(a->retry_after_s));
    if (o) json_object_set_new(o, "n_paused", json_integer(a->n_paused));
    if (o) json_object_set_new(o, "n_starting", json_integer(a->n_starting));
    if (o) json_object_set_new(o, "step_cost_ms", json_real(a->step_cost_ms));
    if (o) json_object_set_new(o, "n_pending_new", json_integer(a->n_pending_new));
    if (o) json_object_set_new(o, "mean_long_tps", num_or_null(a->mean_long_tps));
    if (o) json_object_set_new(o, "projection_basis", json_string(a->projection_basis));
    if (o) json_object_set_new(o, "decoding_share", num_or_null(a->decoding_share));
    if (o) json_object_set_new(o, "prompt_share", num_or_null(a->prompt_share));
    if (o) json_object_set_new(o, "floor_margin_tps", json_real(a->floor_margin_tps));
    if (o) json_object_set_new(o, "decoders_if_admitted", num_or_null(a->decoders_if_admitted));
    json_t *curve = o ? json_array() : NULL;
    for (int32_t k = 1; curve && k <= ADM_CURVE_K; k++)
        if (a->curve_tps[k] > 0) json_array_append_new(curve, json_pack("{s:i, s:f}", "decoding", k, "tps", a->curve_tps[k]));
    if (curve) json_object_set_new(o, "load_curve", curve);
    json_t *knee = o ? json_array() : NULL;
    for (int32_t k = 1; knee && k <= ADM_CURVE_K; k++)
        if (a->knee_tps[k] > 0) json_array_append_new(knee, json_pack("{s:i, s:f}", "agents", k, "tps", a->knee_tps[k]));
    if (knee) json_object_set_new(o, "knee", knee);
    if (o) json_object_set_new(o, "knee_level", num_or_null(a->knee_level));
    if (o) json_object_set_new(o, "knee_low_sd", num_or_null(a->knee_low_sd));
    return o;
}

static bool get_num(const json_t *b, const char *k, double lo, double hi, double *out, srv_err *e)
{
    const json_t *v = json_object_get(b, k);
    if (!v) return true;
    if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < lo ||
        json_number_value(v) > hi)
        return srv_fail(e, 400, k, "'%s' must be a number in [%g, %g]", k, lo, hi);
    *out = json_number_value(v);
    return true;
}

static bool get_count(const json_t *b, const char *k, int32_t *out, srv_err *e)
{
    double x = *out;
    if (!get_num(b, k, 0, 1e7, &x, e)) return false;
    if (x != floor(x)) return srv_fail(e, 400, k, "'%s' must be an integer", k);
    *out = (int32_t)x;
    return true;
}

bool srv_parse_policy(const json_t *b, adm_policy *p, srv_err *e)
{
    static const char *known[] = { "target_tps_per_session", "mode", "on_saturation", "guarantee_min_sessions",
                                   "settle_tokens", "settle_max_ms", "queue_max_ms", "floor_margin_scale" };
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)b, key, v) {
        bool ok = false;
        for (size_t i = 0; i < ARRAY_LEN(known); i++) ok |= !strcmp(key, known[i]);
        if (!ok) return srv_fail(e, 400, key, "unknown admission field '%s'", key);
    }
    if (!get_num(b, "target_tps_per_session", 0, 1e6, &p->target_tps, e) ||
        !get_num(b, "floor_margin_scale", 0, 4, &p->margin_scale, e))
        return false;
    const json_t *m = json_object_get(b, "mode"), *s = json_object_get(b, "on_saturation");
    if (m && (!json_is_string(m) || adm_mode_parse(json_string_value(m), &p->mode) != PK_OK))
        return srv_fail(e, 400, "mode", "'mode' must be \"advisory\" or \"enforced\"");
    if (s && (!json_is_string(s) || adm_sat_parse(json_string_value(s), &p->on_saturation) != PK_OK))
        return srv_fail(e, 400, "on_saturation", "'on_saturation' must be \"reject\", \"warn\" or \"queue\"");
    return get_count(b, "guarantee_min_sessions", &p->guarantee_min_sessions, e) &&
           get_count(b, "settle_tokens", &p->settle_tokens, e) && get_count(b, "settle_max_ms", &p->settle_max_ms, e) &&
           get_count(b, "queue_max_ms", &p->queue_max_ms, e);
}

static enum MHD_Result reply_status(srv_req *r, pk_status st, int32_t pool)
{
    if (st == PK_ENOTFOUND) return srv_reply_errorf(r, 404, "pool %d not found", pool);
    if (st == PK_EINVAL) return srv_reply_errorf(r, 400, "invalid admission policy");
    return srv_reply_errorf(r, 503, "the engine is stopping");
}

enum MHD_Result srv_admission(srv_req *r, json_t *body, int32_t pool)
{
    eng *e = srv_engine(r->s);
    adm_policy cur;
    if (pool > 0 && !srv_pool_mine(r, pool)) return reply_status(r, PK_ENOTFOUND, pool);
    pk_status st = eng_admission(e, pool, NULL, &cur);
    if (st != PK_OK) return reply_status(r, st, pool);
    if (!strcmp(r->method, "POST")) {
        /* The server's scope holds every tenant's sessions on no pool. */
        if (pool <= 0 && !srv_req_admin(r))
            return srv_reply_errorf(r, 403, "the server's admission policy needs an admin key");
        if (!body) return srv_reply_errorf(r, 400, "the request body must be a JSON object");
        adm_policy p = cur.set ? cur : eng_get_params(e)->admission;
        srv_err err;
        if (!srv_parse_policy(body, &p, &err)) return srv_reply_error(r, &err);
        if ((st = eng_admission(e, pool, &p, &cur)) != PK_OK) return reply_status(r, st, pool);
    } else if (strcmp(r->method, "GET") && strcmp(r->method, "HEAD")) {
        return srv_reply_errorf(r, 405, "%s %s: method not allowed", r->method, r->url);
    }
    json_t *o = srv_policy_json(&cur);
    json_object_set_new(o, "pool_id", pool > 0 ? json_integer(pool) : json_null());
    return srv_reply_json(r, 200, o);
}

enum MHD_Result srv_capacity(srv_req *r, int32_t pool)
{
    if (strcmp(r->method, "GET") && strcmp(r->method, "HEAD"))
        return srv_reply_errorf(r, 405, "%s %s: method not allowed (use GET)", r->method, r->url);
    const char *et = srv_query(r, "expected_tokens"), *sid = NULL;
    size_t sid_len = 0;
    long expected = -1;
    if (et) {
        char *end;
        expected = strtol(et, &end, 10);
        if (end == et || *end || expected < 0 || expected > INT32_MAX)
            return srv_reply_errorf(r, 400, "'expected_tokens' must be an integer >= 0");
    }
    char sid_buf[ENG_SESSION_CAP];
    srv_err e;
    if (MHD_lookup_connection_value_n(r->conn, MHD_GET_ARGUMENT_KIND, "session_id", 10, &sid, &sid_len) == MHD_YES &&
        sid && !(srv_session_id(sid, sid_len, "session_id", sid_buf, &e) &&
                 srv_tenant_session(r, "session_id", sid_buf, &e)))
        return srv_reply_error(r, &e);
    if (pool > 0 && !srv_pool_mine(r, pool)) return reply_status(r, PK_ENOTFOUND, pool);
    eng_capacity_reply cr;
    pk_status st = eng_capacity(srv_engine(r->s), pool, (int32_t)expected, sid ? sid_buf : NULL, &cr);
    if (st != PK_OK) return reply_status(r, st, pool);
    json_t *o = srv_capacity_json(&cr.a);
    json_object_set_new(o, "pool_id", pool > 0 ? json_integer(pool) : json_null());
    json_object_set_new(o, "policy", srv_policy_json(&cr.policy));
    return srv_reply_json(r, 200, o);
}

enum MHD_Result srv_h_admission(srv_req *r, json_t *body) { return srv_admission(r, body, 0); }
enum MHD_Result srv_h_capacity(srv_req *r, json_t *body) { return srv_capacity(r, 0); }
