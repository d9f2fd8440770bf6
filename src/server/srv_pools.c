/*
 * srv_pools.c - the /polykv/pools routes (docs/pools.md): JSON in, one
 * eng_pool_op, JSON out; and the pool tree as JSON for GET.
 *
 *   POST   /polykv/pools                   create a root
 *   GET    /polykv/pools                   the whole tree
 *   GET    /polykv/pools/{id}              one subtree
 *   DELETE /polykv/pools/{id}[?recursive=true]
 *   POST   /polykv/pools/{id}/fork | pin | unpin | evict | flush
 *   POST   /slots/{id}?action=save | restore | erase   (llama-server's)
 *
 * A prefix is given by exactly one of tokens (ids), prompt (text, as
 * /completion tokenizes it), messages (+ tools: the chat template without
 * the generation prompt, so that a later chat request with the same system
 * block and tools shares all of it) or from_session.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../pool/pool.h"
#include "../save/sav.h"
#include "srv_gen.h"

static unsigned pool_status(pk_status st)
{
    switch (st) {
    case PK_OK: return 200;
    case PK_ENOTFOUND: return 404;
    case PK_EINVAL: return 400;
    case PK_ECONFLICT: return 409;
    case PK_EFULL: return 429;
    case PK_ECANCELLED: return 503;
    default: return 500;
    }
}

static enum MHD_Result reply_op_error(srv_req *r, const eng_pool_reply *rp)
{
    srv_err e = { .status = pool_status(rp->status) };
    snprintf(e.msg, sizeof e.msg, "%s", rp->message[0] ? rp->message : pk_status_str(rp->status));
    json_t *j = srv_error_json(&e);
    if (j && rp->status == PK_ECONFLICT && rp->conflict_pos >= 0 && rp->message[0] && strstr(rp->message, "differs"))
        json_object_set_new(json_object_get(j, "error"), "first_differing_position", json_integer(rp->conflict_pos));
    return srv_reply_json(r, e.status, j);
}

/* The prefix of a create or fork body: *ids malloc'ed, or session[] set
 * (the engine's name for the client's from_session: r's namespace). */
static bool body_prefix(srv_req *r, const json_t *b, int32_t **ids, int32_t *n, char session[ENG_SESSION_CAP],
                        srv_err *e)
{
    srv *s = r->s;
    static const char *keys[] = { "tokens", "prompt", "messages", "from_session" };
    int given = 0;
    for (size_t i = 0; i < ARRAY_LEN(keys); i++) given += json_object_get(b, keys[i]) != NULL;
    if (given != 1)
        return srv_fail(e, 400, NULL, "give exactly one of 'tokens', 'prompt', 'messages' or 'from_session'");
    *ids = NULL;
    *n = 0;
    session[0] = 0;
    const json_t *v;
    if ((v = json_object_get(b, "from_session"))) {
        if (!json_is_string(v) || !json_string_length(v))
            return srv_fail(e, 400, "from_session", "'from_session' must be a session id of 1 to %d bytes",
                            ENG_SESSION_CAP - 1);
        return srv_session_id(json_string_value(v), json_string_length(v), "from_session", session, e) &&
               srv_tenant_session(r, "from_session", session, e);
    }
    if ((v = json_object_get(b, "tokens"))) {
        if (!json_is_array(v) || !json_array_size(v))
            return srv_fail(e, 400, "tokens", "'tokens' must be a non-empty array of token ids");
        return srv_tokenize_prompt(s->voc, v, "tokens", false, ids, n, e);
    }
    /* A pool holds no more than a slot: text certainly past that is refused
     * before it is tokenized (srv_gen_text_fits). */
    if ((v = json_object_get(b, "prompt")))
        return srv_gen_text_fits(s, srv_prompt_bytes(v), e) && srv_tokenize_prompt(s->voc, v, "prompt", true, ids, n, e);
    /* messages: rendered as a chat request would be, minus the generation
     * prompt, and every turn closed (a last assistant message is history
     * here, not a prefill: the request that follows adds a turn) */
    json_t *copy = json_deep_copy(b);
    if (!copy) return srv_fail(e, 500, NULL, "out of memory");
    json_object_set_new(copy, "add_generation_prompt", json_false());
    char *text;
    size_t len;
    srv_tool_fmt fmt;
    bool ok = srv_chat_history(s, copy, &text, &len, &fmt, e);
    json_decref(copy);
    if (!ok) return false;
    if (!srv_gen_text_fits(s, len, e)) {
        free(text);
        return false;
    }
    pk_status st = srv_tokenize(s->voc, text, len, true, true, ids, n);
    free(text);
    if (st != PK_OK) return srv_fail(e, 500, NULL, "tokenization failed: %s", pk_status_str(st));
    if (*n == 0) return srv_fail(e, 400, "messages", "the messages give no tokens");
    return true;
}

static enum MHD_Result make_pool(srv_req *r, json_t *body, int32_t parent)
{
    srv *s = r->s;
    srv_err e;
    if (!body) return srv_reply_errorf(r, 400, "the request body must be a JSON object");
    int32_t *ids, n;
    char session[ENG_SESSION_CAP];
    if (!body_prefix(r, body, &ids, &n, session, &e)) return srv_reply_error(r, &e);
    eng_pool_req rq = { .verb = parent > 0 ? ENG_POOL_FORK : ENG_POOL_CREATE, .pool_id = parent, .tokens = ids,
                        .n_tokens = n, .from_session = session[0] ? session : NULL, .branch_pos = -1 };
    const json_t *bp = json_object_get(body, "branch_pos");
    if (bp) {
        if (parent <= 0) {
            free(ids);
            return srv_reply_errorf(r, 400, "'branch_pos' applies to a fork");
        }
        long long pos = -1;                 /* null is left there: refused as before */
        bool ok = srv_get_int(body, "branch_pos", 0, INT32_MAX, &pos, &e);
        if (ok && pos < 0) ok = srv_fail(&e, 400, "branch_pos", "'branch_pos' must be an integer >= 0");
        if (!ok) {
            free(ids);
            return srv_reply_error(r, &e);
        }
        rq.branch_pos = (int32_t)pos;
    }
    eng_pool_reply rp;
    if (parent > 0 && !srv_pool_mine(r, parent)) {
        free(ids);
        return srv_reply_errorf(r, 404, "pool %d not found", parent);
    }
    eng_pool_op(srv_engine(s), &rq, &rp);
    free(ids);
    if (rp.status == PK_ENOTFOUND && rq.from_session && r->tenant >= 0) {
        /* The engine's words name the prefixed id: the client's instead. */
        const json_t *v = json_object_get(body, "from_session");
        snprintf(rp.message, sizeof rp.message, "session '%s' holds no context now", json_string_value(v));
    }
    if (rp.status != PK_OK) return reply_op_error(r, &rp);
    srv_pool_own(s, rp.pool_id, r->tenant);
    /* What a materialization found in the cache may be another tenant's
     * prompt: a tenant is told its own range as computed. */
    int32_t prefilled = r->tenant >= 0 && !rq.from_session ? rp.own_tokens : rp.n_prefilled;
    return srv_reply_json(r, 201, json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:f}", "pool_id", rp.pool_id,
                                            "prefix_len", rp.prefix_len, "parent", rp.parent, "branch_pos",
                                            rp.branch_pos, "own_tokens", rp.own_tokens, "prefilled_tokens",
                                            prefilled, "ms", rp.ms));
}

/* ---- the tree as JSON ------------------------------------------------- */

static json_t *session_json(const srv *s, const eng_stats *st, int32_t i, const srv_view *v)
{
    const eng_slot_info *si = &st->slots[i];
    double bytes = (double)st->kv_cell_bytes;
    json_t *o = json_pack("{s:s?, s:i, s:s, s:i, s:i, s:f, s:f, s:f, s:i, s:i, s:i}",
                     "session_id", si->session_id[0] ? si->session_id : NULL, "slot", si->id,
                     "state", srv_slot_state(si->state), "shared_tokens", si->pool_shared,
                     "suffix_n_tokens", si->n_past - si->pool_shared,
                     "marginal_kv_bytes", si->kv_owned * bytes + (double)si->state_bytes, "tps_ewma", si->tps_ewma, "ttft_ms", si->ttft_ms,
                     "ctx_used", si->n_past, "ctx_total", si->n_ctx, "ctx_headroom_tokens", si->n_ctx - si->n_past);
    if (v) srv_view_tag(v, s, o, v->slot_tenant[i]);
    return o;
}

static json_t *pool_json(const srv *s, const eng_stats *st, int32_t k, const srv_view *v)
{
    const eng_pool_info *p = &st->pools[k];
    double bytes = (double)st->kv_cell_bytes;
    json_t *kids = json_array(), *sessions = json_array();
    for (int32_t i = 0; i < st->n_pools; i++)
        if (st->pools[i].parent == p->pool_id) json_array_append_new(kids, json_integer(st->pools[i].pool_id));
    for (int32_t i = 0; i < st->n_slots; i++) {
        const eng_slot_info *si = &st->slots[i];
        if (si->pool_id == p->pool_id && (si->state != ENG_SLOT_IDLE || si->n_past > 0))
            json_array_append_new(sessions, session_json(s, st, i, v));
    }
    json_t *o = json_pack("{s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:s, s:b, s:b, s:b, s:I, s:I, s:I, s:f}",
                          "pool_id", p->pool_id, "parent", p->parent, "branch_pos", p->branch_pos,
                          "prefix_len", p->prefix_len, "own_tokens", p->prefix_len - p->branch_pos,
                          "own_kv_bytes", p->own_cells * bytes + (double)p->own_state_bytes, "subtree_kv_bytes", p->subtree_cells * bytes,
                          "residency", pool_residency_name((pool_residency)p->residency), "pinned", p->pinned,
                          "auto_pinned", p->auto_pinned, "orphaned_pin", p->orphaned_pin,
                          "last_access_ts", (json_int_t)p->last_access_ms,
                          "prefix_hits", (json_int_t)p->n_prefix_hits, "queries", (json_int_t)p->n_queries,
                          "gen_tps", p->gen_tps);
    json_object_set_new(o, "children", kids);
    json_object_set_new(o, "sessions", sessions);
    json_object_set_new(o, "admission", srv_policy_json(&p->adm.policy));
    json_object_set_new(o, "mean_tps", json_real(p->adm.mean_tps));
    json_object_set_new(o, "settling", json_boolean(p->adm.settling));
    if (v) srv_view_tag(v, s, o, v->pool_tenant[k]);
    return o;
}

static bool in_subtree(const eng_stats *st, int32_t root, int32_t id)
{
    for (int guard = 0; id > 0 && guard <= st->n_pools; guard++) {
        if (id == root) return true;
        int32_t parent = -1;
        for (int32_t i = 0; i < st->n_pools; i++)
            if (st->pools[i].pool_id == id) parent = st->pools[i].parent;
        id = parent;
    }
    return false;
}

json_t *srv_pools_json(const srv *s, const eng_stats *st, int32_t root, const srv_view *v)
{
    json_t *a = json_array();
    for (int32_t i = 0; i < st->n_pools; i++)
        if (root <= 0 || in_subtree(st, root, st->pools[i].pool_id))
            json_array_append_new(a, pool_json(s, st, i, v));
    /* on a hybrid, the recurrent states are bytes in use too: every state
     * is a slot's, a parked history's or a pool's (docs/hybrid.md) */
    double bytes = (double)st->kv_cell_bytes, states = (double)st->state_bytes;
    return json_pack("{s:s, s:s, s:I, s:o, s:i, s:i, s:i, s:f, s:f, s:f}", "replica", s->replica, "model",
                     s->model_name, "ts", (json_int_t)st->ts_ms, "pools", a,
                     "tree_depth", st->pool_tree_depth, "seq_ids_used", st->seq_ids_used, "seq_ids_max",
                     st->seq_ids_max, "kv_bytes_used", st->kv_used * bytes + st->states_used * states,
                     "kv_bytes_total", st->kv_total * bytes + st->states_total * states,
                     "parked_kv_bytes", st->parked_owned_cells * bytes + (double)st->parked_state_bytes);
}

/* ---- handlers --------------------------------------------------------- */

/* POST /polykv/lookup: the longest prefix of a token list this replica
 * could reuse now, read-only (docs/kv-events.md).  "tokens": ids, or
 * "prompt": a completion prompt, tokenized as /completion does.  Admin
 * only: the answer says what other tenants' prompts hold. */
enum MHD_Result srv_h_lookup(srv_req *r, json_t *body)
{
    srv *s = r->s;
    if (!srv_req_admin(r)) return srv_reply_errorf(r, 403, "/polykv/lookup needs an admin key");
    const json_t *tokens = json_object_get(body, "tokens"), *prompt = json_object_get(body, "prompt");
    if (!tokens == !prompt) return srv_reply_errorf(r, 400, "give one of 'tokens' (token ids) or 'prompt'");
    srv_err e;
    int32_t *ids = NULL, n = 0;
    if (prompt) {
        if (!srv_tokenize_prompt(s->voc, prompt, "prompt", true, &ids, &n, &e)) return srv_reply_error(r, &e);
    } else {
        if (!json_is_array(tokens)) return srv_reply_errorf(r, 400, "'tokens' must be an array of token ids");
        n = (int32_t)MIN(json_array_size(tokens), (size_t)INT32_MAX);
        if (!(ids = malloc((size_t)MAX(n, 1) * sizeof *ids))) return srv_reply_errorf(r, 500, "out of memory");
        for (int32_t i = 0; i < n; i++) {
            const json_t *t = json_array_get(tokens, (size_t)i);
            if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= tok_n_vocab(s->voc)) {
                free(ids);
                return srv_reply_errorf(r, 400, "'tokens'[%d] is not a token id of this model", i);
            }
            ids[i] = (int32_t)json_integer_value(t);
        }
    }
    eng_lookup_reply o;
    pk_status st = eng_lookup(srv_engine(s), ids, n, &o);
    free(ids);
    if (st != PK_OK) return srv_reply_errorf(r, st == PK_ENOMEM ? 500 : 503, "lookup failed: %s", pk_status_str(st));
    return srv_reply_json(r, 200, json_pack("{s:i, s:i, s:i, s:i, s:s, s:i, s:s, s:s}", "n_tokens", n, "n_cached",
                                            o.n_cached, "n_blocks", o.n_cached / o.block_size, "block_size",
                                            o.block_size, "where", o.where, "id", o.ref, "medium",
                                            o.medium ? "CPU" : "GPU", "replica", s->replica));
}

enum MHD_Result srv_h_pools(srv_req *r, json_t *body)
{
    if (!strcmp(r->method, "POST")) return make_pool(r, body, 0);
    if (!strcmp(r->method, "DELETE")) return srv_reply_errorf(r, 405, "DELETE /polykv/pools/{id} releases one pool");
    static __thread eng_stats st;        /* large: off the handler's stack */
    if (eng_get_stats(srv_engine(r->s), &st) != PK_OK) return srv_reply_errorf(r, 503, "the engine is stopping");
    srv_view v;
    srv_view_filter(r->s, r->tenant, &st, &v);
    return srv_reply_json(r, 200, srv_pools_json(r->s, &st, 0, &v));
}

/* /polykv/pools/{id}[/verb] */
enum MHD_Result srv_h_pool(srv_req *r, json_t *body)
{
    const char *rest = r->url + strlen("/polykv/pools/"), *end;
    long id;
    if (!srv_url_id(rest, INT32_MAX, &id, &end) || id < 1 || (*end && *end != '/'))
        return srv_reply_errorf(r, 404, "no such pool route: %s", r->url);
    const char *verb = *end == '/' ? end + 1 : "";
    bool get = !strcmp(r->method, "GET") || !strcmp(r->method, "HEAD"), del = !strcmp(r->method, "DELETE");
    if (!*verb && get) {
        static __thread eng_stats st;
        if (eng_get_stats(srv_engine(r->s), &st) != PK_OK) return srv_reply_errorf(r, 503, "the engine is stopping");
        srv_view v;
        srv_view_filter(r->s, r->tenant, &st, &v);
        bool found = false;
        for (int32_t i = 0; i < st.n_pools; i++) found |= st.pools[i].pool_id == id;
        if (!found) return srv_reply_errorf(r, 404, "pool %ld not found", id);
        return srv_reply_json(r, 200, srv_pools_json(r->s, &st, (int32_t)id, &v));
    }
    if (!strcmp(verb, "admission")) return srv_admission(r, body, (int32_t)id);
    if (!strcmp(verb, "capacity")) return srv_capacity(r, (int32_t)id);
    eng_pool_req rq = { .pool_id = (int32_t)id, .branch_pos = -1 };
    if (!*verb && del) {
        const char *rec = srv_query(r, "recursive");
        rq.verb = ENG_POOL_RELEASE;
        rq.recursive = rec && (!strcmp(rec, "true") || !strcmp(rec, "1"));
    } else if (!strcmp(r->method, "POST")) {
        if (!strcmp(verb, "fork")) return make_pool(r, body, (int32_t)id);
        if (!strcmp(verb, "pin")) rq.verb = ENG_POOL_PIN;
        else if (!strcmp(verb, "unpin")) rq.verb = ENG_POOL_UNPIN;
        else if (!strcmp(verb, "evict")) rq.verb = ENG_POOL_EVICT;
        else if (!strcmp(verb, "flush")) rq.verb = ENG_POOL_FLUSH;
        else return srv_reply_errorf(r, 404, "no such pool operation: %s", verb);
    } else {
        return srv_reply_errorf(r, 405, "%s %s: method not allowed", r->method, r->url);
    }
    if (!srv_pool_mine(r, (int32_t)id)) return srv_reply_errorf(r, 404, "pool %ld not found", id);
    eng_pool_reply rp;
    eng_pool_op(srv_engine(r->s), &rq, &rp);
    if (rp.status != PK_OK) return reply_op_error(r, &rp);
    if (rq.verb == ENG_POOL_RELEASE && r->s->tenancy) {
        static __thread eng_stats st;
        if (eng_get_stats(srv_engine(r->s), &st) == PK_OK) srv_pool_prune(r->s, &st);
    }
    json_t *o = json_pack("{s:i, s:b}", "pool_id", rp.pool_id > 0 ? rp.pool_id : (int)id, "ok", 1);
    if (rq.verb == ENG_POOL_RELEASE) json_object_set_new(o, "released", json_integer(rp.n_released));
    if (rq.verb == ENG_POOL_FLUSH) json_object_set_new(o, "ms", json_real(rp.ms));
    return srv_reply_json(r, 200, o);
}

static unsigned file_status(pk_status st)
{
    switch (st) {
    case PK_OK: return 200;
    case PK_EINVAL: case PK_EFORMAT: case PK_EUNSUPPORTED: return 400;
    case PK_ENOTFOUND: return 404;
    case PK_ECONFLICT: return 409;
    case PK_EFULL: return 429;
    case PK_ECANCELLED: return 503;
    default: return 500;
    }
}

/* A name of --pool-dir's files ("pool-N.pkv", and "pool-N.pkv.tmp" while
 * one is written), as its start-up scan reads them: a slot file must never
 * pass for a pool, nor a pool's file be restored into a slot. */
static bool pool_file_name(const char *name)
{
    int id, used = 0;
    return sscanf(name, "pool-%d.pkv%n", &id, &used) == 1 && used > 0 &&
           (!name[used] || !strcmp(name + used, ".tmp"));
}

/* save / restore: {"filename": NAME} inside --slot-save-path, nowhere else. */
static enum MHD_Result slot_file(srv_req *r, json_t *body, int32_t id, bool save)
{
    srv *s = r->s;
    if (!s->save_dir)
        return srv_reply_errorf(r, 501, "This server does not support slots action. Start it with `--slot-save-path`");
    const json_t *fn = body ? json_object_get(body, "filename") : NULL;
    if (!json_is_string(fn)) return srv_reply_errorf(r, 400, "'filename' must be a string");
    const char *name = json_string_value(fn);
    if (!sav_name_ok(name, json_string_length(fn)) || strlen(name) != json_string_length(fn))
        return srv_reply_errorf(r, 400, "Invalid filename: 1 to %d printable ASCII bytes, no '/' or '\\', "
                                "not starting with '.'", SAV_NAME_MAX);
    if (pool_file_name(name))
        return srv_reply_errorf(r, 400, "Invalid filename: '%s' is a name of --pool-dir's files", name);
    eng_file_reply rp;
    pk_status st = save ? eng_slot_save(srv_engine(s), id, s->save_dir, name, &rp)
                        : eng_slot_restore(srv_engine(s), id, s->save_dir, name, &rp);
    if (st != PK_OK) {
        /* A save's PK_EFULL is the directory's bound or a full disk: no
         * storage, where a restore's is no KV room (retry later) */
        srv_err e = { .status = save && st == PK_EFULL ? 507 : file_status(st) };
        snprintf(e.msg, sizeof e.msg, "%s%s", save && st == PK_EFULL ? "Unable to save slot: " : "",
                 rp.message[0] ? rp.message : pk_status_str(st));
        return srv_reply_error(r, &e);
    }
    return srv_reply_json(r, 200, json_pack("{s:i, s:s, s:i, s:I, s:{s:f}}", "id_slot", id, "filename", name,
                                            save ? "n_saved" : "n_restored", rp.n_tokens,
                                            save ? "n_written" : "n_read", (json_int_t)rp.n_bytes, "timings",
                                            save ? "save_ms" : "restore_ms", rp.ms));
}

/* POST /slots/{id}?action=save|restore|erase (llama-server's). */
enum MHD_Result srv_h_slot_action(srv_req *r, json_t *body)
{
    const char *rest = r->url + strlen("/slots/"), *end = rest;
    long id = -1;
    bool plain = srv_url_id(rest, INT32_MAX, &id, &end);
    const char *action = srv_query(r, "action");
    eng *e = srv_engine(r->s);
    if (strcmp(r->method, "POST")) return srv_reply_errorf(r, 405, "%s %s: method not allowed (use POST)", r->method, r->url);
    /* A slot holds whoever ran there last: saving it, restoring it into
     * one's own slot or erasing it crosses tenants. */
    if (!srv_req_admin(r)) return srv_reply_errorf(r, 403, "slot actions need an admin key");
    if (!plain || *end || id >= eng_get_params(e)->n_slots) return srv_reply_errorf(r, 400, "Invalid slot ID");
    if (action && (!strcmp(action, "save") || !strcmp(action, "restore")))
        return slot_file(r, body, (int32_t)id, !strcmp(action, "save"));
    if (!action || strcmp(action, "erase")) return srv_reply_errorf(r, 400, "Invalid action (save, restore or erase)");
    int32_t n = 0;
    pk_status st = eng_erase(e, (int32_t)id, &n);
    if (st == PK_ECONFLICT) return srv_reply_errorf(r, 409, "slot %ld is busy", id);
    if (st != PK_OK) return srv_reply_errorf(r, 503, "the engine is stopping");
    return srv_reply_json(r, 200, json_pack("{s:i, s:i}", "id_slot", (int)id, "n_erased", n));
}
