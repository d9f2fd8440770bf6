/*
 * eng_save.c - KV state on disk: llama-server's slot save / restore, and
 * the pinned pools of --pool-dir (docs/pools.md, "Surviving a restart").
 * The file format and its checks are src/save (sav.h); this file moves
 * rows between the cache and those files.
 *
 *   slot save     slot's cells, positions [0, n_hist) ──rows──▶ file
 *   slot restore  file ──▶ free cells under the slot's sequence, its cache
 *                 tokens set: the next prompt with that prefix reuses them
 *   pool dir      the saved set = explicitly pinned pools + their ancestors;
 *                 a pool's content never changes, so each is written once
 *                 (when it is in the set and resident) and its file removed
 *                 when it leaves the set.  At start the files are read in id
 *                 order, which is tree order (a parent is older than its
 *                 children): a refused file's children are refused too.
 *
 * File I/O runs on the engine thread: a save stalls the batch for as long
 * as the write and its fsyncs take (the rows of a 100K-token pool are a
 * few hundred MB on a large model).  Engine thread only, except
 * eng_save_init / eng_save_free (owner, thread not running).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../pool/pool.h"
#include "../save/sav.h"
#include "eng_impl.h"

struct eng_persist {
    uint64_t fingerprint;
    char *dir;                  /* --pool-dir, NULL none */
    int delay_ms;               /* POLYKV_TEST_SAVE_DELAY_MS: the kill -9 test's window */
    int32_t saved[ENG_MAX_POOLS];   /* ids with a complete file */
    int32_t n_saved;
    int32_t n_restored, n_refused;
    double restore_ms;
};

/* ---- the model's fingerprint ------------------------------------------ */

static uint64_t fingerprint(const model *m)
{
    const model_hparams *hp = model_get_hparams(m);
    int32_t ints[] = { (int32_t)hp->arch, hp->n_vocab, hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv,
                       hp->head_dim_k, hp->head_dim_v, hp->n_ff, hp->n_rot, (int32_t)hp->rope_type,
                       hp->tied_output };
    float fl[] = { hp->rope_freq_base, hp->rope_freq_scale, hp->rms_eps };
    uint64_t fp = sav_fp_add(SAV_FP_SEED, ints, sizeof ints);
    fp = sav_fp_add(fp, fl, sizeof fl);
    const gguf_ctx *g = model_gguf(m);
    for (int64_t i = 0; g && i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        int64_t shape[2 + GGUF_MAX_DIMS] = { t->type, t->n_dims };
        memcpy(shape + 2, t->ne, sizeof t->ne);
        fp = sav_fp_add(fp, t->name.p, t->name.n);
        fp = sav_fp_add(fp, shape, sizeof shape);
    }
    return fp;
}

uint64_t eng_model_fingerprint(const eng *e)
{
    return e->persist->fingerprint;
}

static sav_expect expect(const eng *e)
{
    mem_layout l = mem_get_layout(e->mem);
    return (sav_expect){ .fingerprint = e->persist->fingerprint, .kv_type = sav_kv_type(l.type_k, l.type_v),
                         .n_layer = (uint32_t)l.n_layer, .k_row_bytes = (uint32_t)l.k_row_bytes,
                         .v_row_bytes = (uint32_t)l.v_row_bytes, .state_bytes = (uint32_t)l.state_bytes,
                         .max_tokens = (uint32_t)e->n_ctx_slot - 1, .n_vocab = (uint32_t)e->n_vocab };
}

static sav_header header(const eng *e, sav_kind kind, int32_t n, int32_t row_first)
{
    sav_expect w = expect(e);
    return (sav_header){ .version = SAV_VERSION, .kind = kind, .fingerprint = w.fingerprint, .kv_type = w.kv_type,
                         .n_layer = w.n_layer, .k_row_bytes = w.k_row_bytes, .v_row_bytes = w.v_row_bytes,
                         .state_bytes = w.state_bytes, .n_tokens = (uint32_t)n, .row_first = (uint32_t)row_first, .parent = -1 };
}

/* ---- slots ------------------------------------------------------------ */

static void reply(eng_file_reply *o, pk_status st, const char *fmt, const char *arg)
{
    o->status = st;
    snprintf(o->message, sizeof o->message, fmt, arg);
}

static void slot_save(eng *e, slot *s, eng_call *c)
{
    eng_file_reply *o = c->u.file.out;
    if (s->n_hist < 1) {
        snprintf(o->message, sizeof o->message, "slot %d holds no tokens to save", s->id);
        o->status = PK_EINVAL;
        return;
    }
    uint8_t *rows = mem_copy_out(e->mem, s->id, 0, s->n_hist);
    if (!rows) {
        if (!mem_can_resume(e->mem, s->id, s->n_hist))
            reply(o, PK_ECONFLICT, "%s", "the slot's recurrent state is not at its end");
        else
            reply(o, PK_ENOMEM, "%s", "out of memory for the slot's rows");
        return;
    }
    sav_header h = header(e, SAV_SLOT, s->n_hist, 0);
    o->status = sav_write(c->u.file.dir, c->u.file.name, &h, s->hist, rows, e->p.slot_save_max_bytes, 0,
                          o->message, sizeof o->message);
    free(rows);
    if (o->status != PK_OK) return;
    o->n_tokens = s->n_hist;
    o->n_bytes = sav_file_bytes(&h);
}

/* Slot s's history becomes the n positions of image: copied in under a
 * spare id first, so that the history it replaces (as llama-server's
 * restore does) goes only once nothing can fail; until then it is not room
 * for its own replacement.  PK_EFULL (no spare id, or no room), PK_ENOMEM:
 * the old history is kept. */
static pk_status replace_history(eng *e, slot *s, int32_t n, const uint8_t *image)
{
    /* a hybrid needs a state slot for tmp and one for the slot (its own,
     * when it has one, is freed before the move) */
    bool has_state = s->n_hist > 0 && mem_can_resume(e->mem, s->id, s->n_hist);
    if (mem_hybrid(e->mem) && mem_states_free(e->mem) < (has_state ? 1 : 2)) return PK_EFULL;
    kv_seq tmp = eng_seq_take(e, ENG_SEQ_PARKED);
    if (tmp < 0) return PK_EFULL;
    s->state = ENG_SLOT_PREFILL;        /* busy: eng_make_room never drops it */
    bool room = eng_make_room(e, n);
    s->state = ENG_SLOT_IDLE;
    pk_status st = room ? mem_copy_in(e->mem, tmp, 0, n, image, 0, n) : PK_EFULL;
    if (st == PK_OK) {
        int32_t n_dropped;
        eng_drop_histories(e, s->id, "replaced by a restore", &n_dropped);
        ASSERT(s->n_hist == 0 && mem_seq_cells(e->mem, s->id) == 0);
        int32_t got = mem_share(e->mem, tmp, s->id, 0, n);
        ASSERT(got == n);   /* the state moves into the slot's live state slot, tmp's is freed after */
        mem_charge(e->mem, s->id, 0, n);
        mem_drop(e->mem, tmp);
    }
    eng_seq_give(e, tmp);
    return st;
}

static void slot_restore(eng *e, slot *s, eng_call *c)
{
    eng_file_reply *o = c->u.file.out;
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", c->u.file.dir, c->u.file.name) >= sizeof path) {
        reply(o, PK_EINVAL, "%s", "path too long");
        return;
    }
    sav_expect w = expect(e);
    uint8_t *buf;
    sav_header h;
    const int32_t *tok;
    const uint8_t *rows;
    char why[160];
    pk_status st = sav_read(path, &w, &buf, &h, &tok, &rows, why, sizeof why);
    if (st == PK_OK && h.kind != SAV_SLOT) {
        snprintf(why, sizeof why, "a pool file, not a slot save");
        st = PK_EFORMAT;
    }
    if (st != PK_OK) {
        free(buf);
        fprintf(stderr, "eng: slot %d: restore of '%s' refused: %s\n", s->id, c->u.file.name, why);
        reply(o, st, "Unable to restore slot: %s", why);
        return;
    }
    int32_t n = (int32_t)h.n_tokens;
    st = replace_history(e, s, n, rows);
    if (st != PK_OK) {
        free(buf);
        reply(o, st, "Unable to restore slot: %s",
              st == PK_EFULL ? "no room in the KV cache beside the slot's history" : "out of memory");
        return;
    }
    memcpy(s->hist, tok, (size_t)n * sizeof *tok);
    s->n_hist = n;
    s->session[0] = 0;
    s->moved = false;
    s->max_gap_ms = 0;
    eng_history_done(e, s);
    free(buf);
    o->n_tokens = n;
    o->n_bytes = sav_file_bytes(&h);
}

void eng_slot_file_msg(eng *e, eng_call *c)
{
    double t0 = pk_time_ms();
    eng_file_reply *o = c->u.file.out;
    slot *s = &e->slots[c->u.file.slot];
    o->status = PK_OK;
    o->message[0] = 0;
    if (s->state != ENG_SLOT_IDLE) {
        snprintf(o->message, sizeof o->message, "slot %d is busy", s->id);
        o->status = PK_ECONFLICT;
    } else if (c->u.file.save) {
        slot_save(e, s, c);
    } else {
        slot_restore(e, s, c);
    }
    o->ms = pk_time_ms() - t0;
}

/* ---- pools in --pool-dir ---------------------------------------------- */

static void pool_file(int32_t id, char *out, size_t cap) { snprintf(out, cap, "pool-%d.pkv", id); }

static int saved_index(const struct eng_persist *ps, int32_t id)
{
    for (int32_t i = 0; i < ps->n_saved; i++)
        if (ps->saved[i] == id) return i;
    return -1;
}

/* Marks the explicitly pinned pools and their ancestors: need[i] for
 * pool_at(t, i). */
static void wanted(const pool_tree *t, bool *need)
{
    int32_t n = pool_count(t);
    for (int32_t i = 0; i < n; i++) need[i] = false;
    for (int32_t i = 0; i < n; i++) {
        if (!pool_at(t, i)->pinned) continue;
        for (int32_t id = pool_at(t, i)->id, guard = 0; id > 0 && guard <= n; guard++) {
            int32_t j = 0;
            while (j < n && pool_at(t, j)->id != id) j++;
            if (j == n) break;
            need[j] = true;
            id = pool_at(t, j)->parent;
        }
    }
}

/* PK_OK once p has its file, else the status with the reason in why[cap]. */
static pk_status save_pool(eng *e, const pool_node *p, char *why, size_t cap)
{
    struct eng_persist *ps = e->persist;
    char name[64];
    pool_file(p->id, name, sizeof name);
    uint8_t *rows = mem_copy_out(e->mem, p->seq, p->branch_pos, p->prefix_len);
    if (!rows) {
        snprintf(why, cap, "pool %d: its rows cannot be read (out of memory)", p->id);
        fprintf(stderr, "eng: pool-dir: %s\n", why);
        return PK_ENOMEM;
    }
    sav_header h = header(e, SAV_POOL, p->prefix_len, p->branch_pos);
    h.pool_id = p->id;
    h.parent = p->parent;
    h.branch_pos = p->branch_pos;
    h.flags = p->pinned ? SAV_FLAG_PINNED : 0;
    char reason[160];
    pk_status st = sav_write(ps->dir, name, &h, p->tokens, rows, 0, ps->delay_ms, reason, sizeof reason);
    free(rows);
    if (st != PK_OK) {
        snprintf(why, cap, "pool %d not saved: %s", p->id, reason);
        fprintf(stderr, "eng: pool-dir: %s\n", why);
        return st;
    }
    ps->saved[ps->n_saved++] = p->id;
    return PK_OK;
}

pk_status eng_persist_sync(eng *e, char *why, size_t cap)
{
    struct eng_persist *ps = e->persist;
    if (!ps || !ps->dir) return PK_OK;
    const pool_tree *t = eng_pool_tree(e);
    bool need[ENG_MAX_POOLS];
    wanted(t, need);
    for (int32_t i = ps->n_saved - 1; i >= 0; i--) {
        const pool_node *p = pool_get(t, ps->saved[i]);
        int32_t j = 0;
        while (p && pool_at(t, j) != p) j++;
        if (p && need[j]) continue;
        char name[64], path[4200];
        pool_file(ps->saved[i], name, sizeof name);
        snprintf(path, sizeof path, "%s/%s", ps->dir, name);
        if (unlink(path)) perror("eng: pool-dir: unlink");
        ps->saved[i] = ps->saved[--ps->n_saved];
    }
    pk_status st = PK_OK;
    char one[200];
    for (int32_t i = 0; i < pool_count(t); i++) {
        const pool_node *p = pool_at(t, i);
        if (!need[i] || p->residency != POOL_RESIDENT || saved_index(ps, p->id) >= 0) continue;
        pk_status k = save_pool(e, p, one, sizeof one);
        if (k != PK_OK && st == PK_OK) {
            st = k;
            if (cap) snprintf(why, cap, "%s", one);
        }
    }
    return st;
}

bool eng_persist_check(const eng *e)
{
    const struct eng_persist *ps = e->persist;
    if (!ps) return true;
    if (!ps->dir && ps->n_saved != 0) return false;       /* files only with --pool-dir */
    if (ps->n_saved < 0 || ps->n_saved > ENG_MAX_POOLS) return false;
    for (int32_t i = 0; i < ps->n_saved; i++) {
        if (ps->saved[i] < 1 || ps->saved[i] > POOL_ID_MAX) return false;
        for (int32_t j = 0; j < i; j++)
            if (ps->saved[j] == ps->saved[i]) return false;          /* one file a pool */
    }
    return true;
}

static int cmp_id(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The id of a file named "pool-N.pkv" (or, with *tmp, "pool-N.pkv.tmp"),
 * N a plain decimal in 1..POOL_ID_MAX; 0 for any other name. */
static int32_t pool_file_id(const char *nm, bool *tmp)
{
    if (strncmp(nm, "pool-", 5)) return 0;
    const char *p = nm + 5;
    int64_t id = 0;
    if (*p < '1' || *p > '9') return 0;
    for (; *p >= '0' && *p <= '9'; p++)
        if ((id = id * 10 + (*p - '0')) > POOL_ID_MAX) return 0;
    *tmp = !strcmp(p, ".pkv.tmp");
    return *tmp || !strcmp(p, ".pkv") ? (int32_t)id : 0;
}

/* The ids of dir's "pool-N.pkv" files, ascending; stray "*.tmp" files (a
 * save the process did not live to finish) are reported and removed.
 * Names out of the id range are not pools' files and are left alone. */
static int32_t list_dir(const char *dir, int32_t *ids, int32_t cap, int32_t *next_id)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int32_t n = 0;
    for (struct dirent *de; (de = readdir(d));) {
        const char *nm = de->d_name;
        bool tmp = false;
        int32_t id = pool_file_id(nm, &tmp);
        if (id > 0 && tmp) {
            char path[4200];
            /* Its id was answered to a client once: never given again. */
            *next_id = MAX(*next_id, id + 1);
            snprintf(path, sizeof path, "%s/%s", dir, nm);
            fprintf(stderr, "eng: pool-dir: %s refused: an unfinished save (the server stopped during it); removed\n",
                    nm);
            unlink(path);
            continue;
        }
        if (id > 0) {
            if (n < cap) ids[n++] = id;
            else fprintf(stderr, "eng: pool-dir: %s skipped: more files than --pools %d\n", nm, cap);
        }
    }
    closedir(d);
    qsort(ids, (size_t)n, sizeof *ids, cmp_id);
    return n;
}

static void restore_pools(eng *e)
{
    struct eng_persist *ps = e->persist;
    double t0 = pk_time_ms();
    int32_t ids[ENG_MAX_POOLS], next_id = 1;
    int32_t n = list_dir(ps->dir, ids, ENG_MAX_POOLS, &next_id);
    if (n < 0) {
        fprintf(stderr, "eng: pool-dir: cannot read %s\n", ps->dir);
        return;
    }
    sav_expect w = expect(e);
    int64_t n_tokens = 0;
    for (int32_t i = 0; i < n; i++) {
        char name[64], path[4200], why[200];
        pool_file(ids[i], name, sizeof name);
        snprintf(path, sizeof path, "%s/%s", ps->dir, name);
        uint8_t *buf;
        sav_header h;
        const int32_t *tok;
        const uint8_t *rows;
        pk_status st = sav_read(path, &w, &buf, &h, &tok, &rows, why, sizeof why);
        if (st == PK_OK && (h.kind != SAV_POOL || h.pool_id != ids[i])) {
            snprintf(why, sizeof why, "it holds %s %d, not pool %d", h.kind == SAV_POOL ? "pool" : "a slot",
                     h.pool_id, ids[i]);
            st = PK_EFORMAT;
        }
        if (st == PK_OK)
            st = eng_pool_adopt(e, h.pool_id, h.parent, h.branch_pos, tok, (int32_t)h.n_tokens,
                                (h.flags & SAV_FLAG_PINNED) != 0, rows, why, sizeof why);
        free(buf);
        if (st != PK_OK) {
            /* Left in place for a person to look at; its id is never reused. */
            fprintf(stderr, "eng: pool-dir: %s refused: %s\n", name, why);
            pool_set_next_id(eng_pool_tree(e), ids[i] + 1);
            ps->n_refused++;
            continue;
        }
        ps->saved[ps->n_saved++] = h.pool_id;
        ps->n_restored++;
        n_tokens += h.n_tokens;
    }
    pool_set_next_id(eng_pool_tree(e), next_id);         /* past the unfinished saves (or refused) */
    ps->restore_ms = pk_time_ms() - t0;
    if (n > 0)
        fprintf(stderr, "eng: pool-dir: %d pool%s restored (%lld tokens) in %.1f ms, %d refused\n", ps->n_restored,
                ps->n_restored == 1 ? "" : "s", (long long)n_tokens, ps->restore_ms, ps->n_refused);
}

pk_status eng_save_init(eng *e)
{
    struct eng_persist *ps = calloc(1, sizeof *ps);
    if (!ps) return PK_ENOMEM;
    e->persist = ps;
    ps->fingerprint = fingerprint(e->m);
    const char *d = getenv("POLYKV_TEST_SAVE_DELAY_MS");
    ps->delay_ms = d ? atoi(d) : 0;
    if (!e->p.pool_dir || !*e->p.pool_dir) return PK_OK;
    if (!(ps->dir = strdup(e->p.pool_dir))) return PK_ENOMEM;
    e->p.pool_dir = ps->dir;
    restore_pools(e);
    return PK_OK;
}

void eng_save_free(eng *e)
{
    if (!e->persist) return;
    free(e->persist->dir);
    free(e->persist);
    e->persist = NULL;
}
