/*
 * srv_tenant.c - several API keys, each a namespace of its own sessions and
 * pools (docs/security.md, "Tenants"): the key table and the key check,
 * session ids as the engine knows them, who created each pool, and what a
 * stats snapshot shows to the key that reads it.
 *
 * DESIGN
 *   The engine knows nothing of tenants; everything here is the server's.
 *
 *     key table     srv.keys[i]: a seeded XXH3-128 digest of the key, a
 *                   name, admin or not.  --api-key KEY is keys[0], an
 *                   admin named "admin"; --api-key-file adds its lines.
 *     sessions      a tenant key's session "s" reaches the engine as
 *                   "\x1fTT\x1fs" (TT: the key's index, two hex digits).
 *                   A client's id can never start with \x1f (srv_session_id
 *                   refuses control characters), so no other key can name
 *                   it: not by from_session, not by continuing it, not in
 *                   a capacity question.  Admin keys use ids as given,
 *                   the namespace of a server with one key or none.
 *     pools         srv.own: pool id -> the tenant that created it (ids
 *                   are never reused, so an entry never names a later
 *                   pool).  A pool without one is the admins' (made with
 *                   an admin key, or restored from --pool-dir).  Another
 *                   tenant's pool answers 404 with the words an unknown
 *                   one gets: its existence is not confirmed.
 *     reads         srv_view_filter cuts a snapshot to the reader's own
 *                   sessions and pools and strips the prefix; an admin
 *                   sees everything, each entry with its "tenant".
 *     reuse counts  placement still shares cached prefixes across tenants
 *                   (the engine's rule; docs/security.md says what would
 *                   end it), so every count of reused tokens that a tenant
 *                   key is answered is cut to what it shared with its own
 *                   pool (srv_tenant_mask_event, srv_view_filter).
 *
 * With no tenant key (no --api-key-file line without ":admin") nothing
 * here changes an answer: every request is an admin's.
 *
 * Threads: keys are written by srv_new only; srv.own under srv.own_mu,
 * from any request thread.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv_impl.h"

#define TAG_LEN 4                  /* "\x1f" + two hex digits + "\x1f" */
#define KEY_FILE_MAX (1u << 20)

/* ---- keys ---- */

static XXH128_hash_t digest(const char *key, size_t len, uint64_t seed)
{
    return XXH3_128bits_withSeed(key, len, seed);
}

int srv_key_lookup(const srv_key *keys, int n_keys, uint64_t seed, const char *given)
{
    /* Every key is compared, with no early exit and no byte loop over the
     * client's string: the time says nothing of which key, or how much of
     * one, matched. */
    XXH128_hash_t a = digest(given, strlen(given), seed);
    int found = -1;
    for (int i = 0; i < n_keys; i++) {
        volatile uint64_t diff = (a.low64 ^ keys[i].digest.low64) | (a.high64 ^ keys[i].digest.high64);
        if (diff == 0) found = i;
    }
    return found;
}

static bool name_ok(const char *s, size_t n)
{
    if (n < 1 || n >= SRV_TENANT_NAME_CAP) return false;
    for (size_t i = 0; i < n; i++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-", s[i]) || !s[i]) return false;
    return true;
}

/* A key travels in a header: printable ASCII, no space (a Bearer value is
 * trimmed) and, in a NAME:KEY line, no ':'. */
static bool key_ok(const char *s, size_t n)
{
    if (n < 1 || n > SRV_KEY_MAX) return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] > '~' || s[i] == ':') return false;
    return true;
}

static pk_status add_key(srv_key **keys, int *n_keys, uint64_t seed, const char *name, size_t n_name,
                         const char *key, size_t n_key, bool admin, int line, char *err, size_t err_len)
{
    if (*n_keys >= SRV_MAX_KEYS) {
        snprintf(err, err_len, "--api-key-file: line %d: more than %d keys", line, SRV_MAX_KEYS);
        return PK_EINVAL;
    }
    XXH128_hash_t d = digest(key, n_key, seed);
    for (int i = 0; i < *n_keys; i++) {
        const srv_key *k = &(*keys)[i];
        if (k->digest.low64 == d.low64 && k->digest.high64 == d.high64) {
            snprintf(err, err_len, "--api-key-file: line %d: the same key as %s's", line, k->name);
            return PK_EINVAL;
        }
        if (strlen(k->name) == n_name && !memcmp(k->name, name, n_name)) {
            snprintf(err, err_len, "--api-key-file: line %d: the name %.*s is taken", line, (int)n_name, name);
            return PK_EINVAL;
        }
    }
    srv_key *grown = realloc(*keys, (size_t)(*n_keys + 1) * sizeof *grown);
    if (!grown) return PK_ENOMEM;
    *keys = grown;
    srv_key *k = &grown[(*n_keys)++];
    memset(k, 0, sizeof *k);
    k->digest = d;
    memcpy(k->name, name, n_name);
    k->admin = admin;
    return PK_OK;
}

pk_status srv_keys_parse(const char *text, size_t len, uint64_t seed, srv_key **keys, int *n_keys, char *err,
                         size_t err_len)
{
    int line = 0, added = 0;
    for (const char *p = text, *end = text + len; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        const char *next = nl ? nl + 1 : end;
        line++;
        if (e > p && e[-1] == '\r') e--;
        while (p < e && (*p == ' ' || *p == '\t')) p++;
        while (e > p && (e[-1] == ' ' || e[-1] == '\t')) e--;
        if (p == e || *p == '#') {
            p = next;
            continue;
        }
        /* KEY (llama-server's form: a key with every right), NAME:KEY (a
         * tenant) or NAME:KEY:admin. */
        const char *c1 = memchr(p, ':', (size_t)(e - p));
        const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(e - c1 - 1)) : NULL;
        const char *name = "admin", *key = p;
        size_t n_name = 5, n_key = (size_t)(e - p);
        bool admin = true;
        char anon[16];
        if (!c1) {
            n_name = (size_t)snprintf(anon, sizeof anon, "key%d", line);
            name = anon;
        } else {
            name = p;
            n_name = (size_t)(c1 - p);
            key = c1 + 1;
            n_key = (size_t)((c2 ? c2 : e) - key);
            admin = c2 != NULL;
            if (c2 && ((size_t)(e - c2 - 1) != 5 || memcmp(c2 + 1, "admin", 5))) {
                snprintf(err, err_len, "--api-key-file: line %d: the third field may only be 'admin'", line);
                return PK_EINVAL;
            }
            if (!name_ok(name, n_name)) {
                snprintf(err, err_len, "--api-key-file: line %d: a name is 1 to %d of A-Z a-z 0-9 _ . -", line,
                         SRV_TENANT_NAME_CAP - 1);
                return PK_EINVAL;
            }
        }
        if (!key_ok(key, n_key)) {
            /* The key itself is never printed: the message may reach a log. */
            snprintf(err, err_len, "--api-key-file: line %d: a key is 1 to %d printable ASCII bytes, no space or ':'",
                     line, SRV_KEY_MAX);
            return PK_EINVAL;
        }
        pk_status st = add_key(keys, n_keys, seed, name, n_name, key, n_key, admin, line, err, err_len);
        if (st != PK_OK) return st;
        added++;
        p = next;
    }
    if (!added) {
        snprintf(err, err_len, "--api-key-file: no key in the file");
        return PK_EINVAL;
    }
    return PK_OK;
}

pk_status srv_keys_load(srv *s, const char *api_key, const char *file, char *err, size_t err_len)
{
    if (api_key && *api_key) {
        pk_status st = add_key(&s->keys, &s->n_keys, s->key_seed, "admin", 5, api_key, strlen(api_key), true, 0,
                               err, err_len);
        if (st != PK_OK) return st;
    }
    if (!file) return PK_OK;
    FILE *f = fopen(file, "rb");
    if (!f) {
        snprintf(err, err_len, "--api-key-file %s: %s", file, strerror(errno));
        return PK_EIO;
    }
    char *text = malloc(KEY_FILE_MAX + 1);
    size_t n = text ? fread(text, 1, KEY_FILE_MAX + 1, f) : 0;
    bool bad = ferror(f);
    fclose(f);
    pk_status st = PK_OK;
    if (!text) st = PK_ENOMEM;
    else if (bad) snprintf(err, err_len, "--api-key-file %s: read error", file), st = PK_EIO;
    else if (n > KEY_FILE_MAX) snprintf(err, err_len, "--api-key-file %s: larger than 1 MiB", file), st = PK_EINVAL;
    else st = srv_keys_parse(text, n, s->key_seed, &s->keys, &s->n_keys, err, err_len);
    free(text);
    for (int i = 0; st == PK_OK && i < s->n_keys; i++) s->tenancy |= !s->keys[i].admin;
    return st;
}

const char *srv_tenant_name(const srv *s, int tenant)
{
    return tenant >= 0 && tenant < s->n_keys ? s->keys[tenant].name : NULL;
}

bool srv_req_admin(const srv_req *r)
{
    return r->tenant < 0;
}

/* ---- sessions ---- */

bool srv_tenant_session(const srv_req *r, const char *param, char id[ENG_SESSION_CAP], srv_err *e)
{
    if (r->tenant < 0 || !id[0]) return true;
    size_t n = strlen(id);
    if (n + TAG_LEN >= ENG_SESSION_CAP)
        return srv_fail(e, 400, param, "'%s' is %zu bytes; with a tenant's key a session id is at most %d", param, n,
                        ENG_SESSION_CAP - 1 - TAG_LEN);
    memmove(id + TAG_LEN, id, n + 1);
    char tag[TAG_LEN + 1];
    snprintf(tag, sizeof tag, "\x1f%02x\x1f", (unsigned)r->tenant);
    memcpy(id, tag, TAG_LEN);
    return true;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int srv_session_owner(char id[ENG_SESSION_CAP])
{
    if (id[0] != '\x1f' || hexval(id[1]) < 0 || hexval(id[2]) < 0 || id[3] != '\x1f') return -1;
    int tenant = hexval(id[1]) * 16 + hexval(id[2]);
    memmove(id, id + TAG_LEN, strlen(id + TAG_LEN) + 1);
    return tenant;
}

/* ---- pools ---- */

void srv_pool_own(srv *s, int32_t pool_id, int tenant)
{
    if (!s->tenancy || tenant < 0 || pool_id <= 0) return;
    pthread_mutex_lock(&s->own_mu);
    size_t cap = (size_t)s->cap_own;
    if (s->n_own < s->cap_own || !pk_grow((void **)&s->own, &cap, (size_t)s->n_own + 1, sizeof *s->own)) {
        s->cap_own = (int32_t)cap;
        s->own[s->n_own++] = (srv_owner){ pool_id, (int16_t)tenant };
    } else {
        /* Unrecorded, the pool is the admins': its creator gets 404s for
         * it, never another tenant its content. */
        fprintf(stderr, "srv: out of memory recording pool %d's tenant\n", pool_id);
    }
    pthread_mutex_unlock(&s->own_mu);
}

int srv_pool_owner(srv *s, int32_t pool_id)
{
    int owner = -1;
    pthread_mutex_lock(&s->own_mu);
    for (int32_t i = 0; i < s->n_own; i++)
        if (s->own[i].pool_id == pool_id) owner = s->own[i].tenant;
    pthread_mutex_unlock(&s->own_mu);
    return owner;
}

bool srv_pool_mine(const srv_req *r, int32_t pool_id)
{
    return r->tenant < 0 || srv_pool_owner(r->s, pool_id) == r->tenant;
}

void srv_pool_prune(srv *s, const eng_stats *st)
{
    pthread_mutex_lock(&s->own_mu);
    int32_t k = 0;
    for (int32_t i = 0; i < s->n_own; i++) {
        bool alive = false;
        for (int32_t j = 0; j < st->n_pools; j++) alive |= st->pools[j].pool_id == s->own[i].pool_id;
        if (alive) s->own[k++] = s->own[i];
    }
    s->n_own = k;
    pthread_mutex_unlock(&s->own_mu);
}

/* ---- what a tenant is told ---- */

/* The reused tokens a tenant may be told of: those shared with its pool
 * (whose tokens are its own), never what placement found elsewhere. */
static int32_t own_reuse(int32_t pool_id, int32_t pool_shared, int32_t n_cached)
{
    return pool_id > 0 ? MIN(pool_shared, n_cached) : 0;
}

void srv_tenant_mask_event(eng_event *ev, int32_t *shown_cached)
{
    if (ev->kind == ENG_EV_PLACED) *shown_cached = own_reuse(ev->pool_id, ev->pool_shared, ev->n_cached);
    if (ev->kind != ENG_EV_PLACED && ev->kind != ENG_EV_PROGRESS && ev->kind != ENG_EV_DONE) return;
    int32_t shown = MIN(*shown_cached, ev->n_cached);
    if (ev->kind == ENG_EV_PROGRESS) ev->n_processed -= ev->n_cached - shown;
    ev->n_cached = shown;
}

void srv_view_filter(srv *s, int reader, eng_stats *st, srv_view *v)
{
    v->tag = s->tenancy && reader < 0;
    int32_t k = 0;
    for (int32_t i = 0; i < st->n_slots; i++) {
        eng_slot_info si = st->slots[i];
        int owner = srv_session_owner(si.session_id);
        if (reader >= 0 && owner != reader) continue;
        if (reader >= 0) {
            si.n_cached = own_reuse(si.pool_id, si.pool_shared, si.n_cached);
            si.last_reused = own_reuse(si.pool_id, si.pool_shared, si.last_reused);
            si.last_source_seq = -1;
            si.last_reason[0] = 0;
            /* The cells charged to it tell how much it shared, and with
             * whom: its positions past its pool are what it is told. */
            si.kv_owned = MAX(si.n_past - si.pool_shared, 0);
        }
        v->slot_tenant[k] = (int16_t)owner;
        st->slots[k++] = si;
    }
    st->n_slots = k;
    k = 0;
    for (int32_t i = 0; i < st->n_pools; i++) {
        int owner = srv_pool_owner(s, st->pools[i].pool_id);
        if (reader >= 0 && owner != reader) continue;
        v->pool_tenant[k] = (int16_t)owner;
        st->pools[k++] = st->pools[i];
    }
    st->n_pools = k;
    if (reader < 0) return;
    /* Placement, reuse, park and drop events tell what other tenants'
     * prompts left in the cache; a tenant keeps the admission decisions
     * of its own pools. */
    k = 0;
    for (int32_t i = 0; i < st->n_events; i++) {
        const eng_cache_event *c = &st->events[i];
        if (c->kind == ENG_CACHE_ADMISSION && c->pool_id > 0 && srv_pool_owner(s, c->pool_id) == reader)
            st->events[k++] = *c;
    }
    st->n_events = k;
}

void srv_view_tag(const srv_view *v, const srv *s, json_t *o, int tenant)
{
    if (!v || !v->tag || !o) return;
    const char *name = srv_tenant_name(s, tenant);
    json_object_set_new(o, "tenant", name ? json_string(name) : json_null());
}
