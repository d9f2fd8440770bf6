/*
 * model_copy.c - the weights into huge pages, behind the first tokens.
 *
 * WHY: decoding streams every weight once per token, and reads them 5-15%
 * faster from 2 MiB pages than from the file mapping's 4 KiB pages
 * (common/huge.h).  Filling 0.5 GB of fresh memory
 * takes 0.2-1.3 s on this machine (a VM's fresh pages are slow to fault),
 * longer than all the rest of start-up.  So model_load maps the file and
 * the model computes from the mapping at once, while one thread reads the
 * weights into huge pages; the next forward pass after the copy is
 * complete switches the weight pointers over.
 *
 * The switch must not happen under a pass, and a model may be shared by
 * contexts on several threads: passes hold m->passes (a count, or -1 while
 * switching) from start to end, and the switch happens only at count 0.
 *
 * TILING: matrices of a type with a tiled layout (tq.h: Q4_0, Q8_0,
 * IQ4_NL, MXFP4, Q4_K, Q6_K; F32 where the passes only multiply it) that
 * the CPU's kernels can run tiled (tk_runs_tiled) are written into the
 * copy in that layout instead: the same bytes at the same offsets,
 * rearranged for the decode kernels (tk_tiled_avx512.c,
 * tk_tiledk_avx512.c; F32's in tk_legacy_avx512.c), which need less than
 * half the vector operations of the row-major ones.  Stacked experts are
 * tiled matrix by matrix where each is whole tiles, so an expert's rows
 * stay where slice() in model_moe.c looks for them.  The switch then
 * changes their type along with the pointer; every path gives the same
 * results on either layout.  So the tiling costs neither memory nor start-up time, only the
 * copier's time (the copy completed 143-254 ms after load instead of
 * 70-120 ms warm, 3 runs each).
 */
#include "model_impl.h"
#include "../common/huge.h"
#include "../tensor/tk.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define COPY_CHUNK ((size_t)8 << 20)   /* bytes per memcpy; the stop flag is seen between them */

typedef struct { const char *lo, *hi; } span;

static void widen(model_w *w, void *arg)
{
    span *s = arg;
    if (!w->data) return;
    const char *a = w->data, *b = a + model_w_bytes(w);
    if (!s->lo || a < s->lo) s->lo = a;
    if (!s->hi || b > s->hi) s->hi = b;
}

typedef struct { const char *from; char *to; const model *m; } rebase;

/* Whether w is a matrix the passes only multiply (tk_matmul) or read a
 * row of (tq_dequantize_row_at): F32 also holds biases, convolutions and
 * scales read as plain floats, which must stay plain. */
static bool only_multiplied(const model *m, const model_w *w)
{
    if (w == &m->tok_embd || w == &m->output || w == &m->pl_tok_embd || w == &m->pl_model_proj) return true;
    const char *l0 = (const char *)m->layers, *p = (const char *)w;
    if (p < l0 || p >= l0 + (size_t)m->hp.n_layer * sizeof(model_layer)) return false;
    static const size_t products[] = {
        offsetof(model_layer, wq), offsetof(model_layer, wk), offsetof(model_layer, wv), offsetof(model_layer, wo),
        offsetof(model_layer, w_gate), offsetof(model_layer, w_up), offsetof(model_layer, w_down),
        offsetof(model_layer, ssm_qkv), offsetof(model_layer, ssm_z), offsetof(model_layer, ssm_beta),
        offsetof(model_layer, ssm_alpha), offsetof(model_layer, ssm_out), offsetof(model_layer, moe_router),
        offsetof(model_layer, exp_gate), offsetof(model_layer, exp_up), offsetof(model_layer, exp_down),
        offsetof(model_layer, exp_gate_up), offsetof(model_layer, sh_gate), offsetof(model_layer, sh_up),
        offsetof(model_layer, sh_down), offsetof(model_layer, sh_router), offsetof(model_layer, pl_gate),
        offsetof(model_layer, pl_proj),
    };
    size_t at = (size_t)(p - l0) % sizeof(model_layer);
    for (size_t i = 0; i < ARRAY_LEN(products); i++)
        if (at == products[i]) return true;
    return false;
}

/* The type a weight has in the copy: its tiled layout where the kernels
 * run one for its shape. */
static int copy_type(const model *m, const model_w *w)
{
    /* stacked matrices (experts) are multiplied one at a time: each must
     * be whole tiles */
    int64_t rows = w->n_mat > 1 ? w->n_rows / w->n_mat : w->n_rows;
    bool whole = w->n_mat <= 1 || rows % TQ_TILE_ROWS == 0;
    if (w->type == TQ_F32 && !only_multiplied(m, w)) return w->type;
    return rows > 1 && whole && tk_runs_tiled(w->type, rows, w->n_cols) ? tq_tiled(w->type) : w->type;
}

static void move(model_w *w, void *arg)
{
    const rebase *r = arg;
    if (!w->data) return;
    w->data = r->to + ((const char *)w->data - r->from);
    w->type = copy_type(r->m, w);
}

/* Drops this process's hold on the mapped pages inside [p, p + n): they
 * stay in the page cache, and a pass still reading the mapping faults them
 * back in (never written, so nothing is lost).  Keeps resident memory near
 * one copy of the weights rather than two. */
static void release(const char *p, size_t n)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1), b = ((uintptr_t)p + n) & ~(page - 1);
    if (b > a) (void)madvise((void *)a, b - a, MADV_DONTNEED);
}

/* A tied output: token_embd's data again, to be copied or counted once. */
static bool tied_again(const model *m, const model_w *w)
{
    return w != &m->tok_embd && w->data == m->tok_embd.data;
}

typedef struct {
    model *m;
    bool ok;   /* false once the stop flag was seen */
} copy_job;

/* One weight into the copy, at its offset in the span, in chunks (whole
 * tiles when tiled) with the stop flag checked between them.  A tied
 * output is token_embd's data: done once. */
static void copy_weight(model_w *w, void *arg)
{
    copy_job *j = arg;
    model *m = j->m;
    if (!w->data || !j->ok || tied_again(m, w)) return;
    const char *src = w->data;
    char *dst = m->copy_buf + (src - ((const char *)gguf_file_data(m->gguf) + m->copy_off));
    size_t bytes = model_w_bytes(w), done = 0;
    int type = copy_type(m, w);
    size_t step = COPY_CHUNK;
    if (type != w->type) {
        size_t tile = TQ_TILE_ROWS * tq_row_size(w->type, w->n_cols);
        step = MAX(1, COPY_CHUNK / tile) * tile;
    }
    while (done < bytes) {
        if (atomic_load_explicit(&m->copy_stop, memory_order_relaxed)) {
            j->ok = false;
            return;
        }
        size_t n = MIN(bytes - done, step);
        if (type != w->type)
            tq_tile(type, src + done, (int64_t)(n / tq_row_size(w->type, w->n_cols)), w->n_cols, dst + done);
        else
            memcpy(dst + done, src + done, n);
        release(src + done, n);
        done += n;
    }
}

/* Copies from the mapping, not by reading the path again: the file the
 * path names now need not be the one mapped. */
static void *copier(void *arg)
{
    model *m = arg;
    copy_job j = { m, true };
    pthread_setname_np(pthread_self(), "pk-copy");
    model_each_weight(m, copy_weight, &j);
    atomic_store_explicit(&m->copy_state, j.ok ? COPY_READY : COPY_FAILED, memory_order_release);
    return NULL;
}

void model_copy_start(model *m)
{
    /* the span of the file that holds weights */
    const char *base = gguf_file_data(m->gguf);
    span sp = { NULL, NULL };
    model_each_weight(m, widen, &sp);
    atomic_store(&m->copy_state, COPY_NONE);
    if (!sp.lo) return;
    m->copy_off = (size_t)(sp.lo - base);
    m->copy_len = (size_t)(sp.hi - sp.lo);
    m->copy_buf = pk_huge_alloc(m->copy_len);
    if (!m->copy_buf) return;   /* the mapping serves */
    atomic_store(&m->copy_state, COPY_RUNNING);
    if (pthread_create(&m->copier, NULL, copier, m) != 0) {
        atomic_store(&m->copy_state, COPY_NONE);
        return;
    }
    m->copier_started = true;
}

/* Points every weight into the copy (no pass is running: passes == -1). */
static void switch_to_copy(model *m)
{
    const char *map_lo = (const char *)gguf_file_data(m->gguf) + m->copy_off;
    model_each_weight(m, move, &(rebase){ map_lo, m->copy_buf, m });
    release(map_lo, m->copy_len);   /* pages passes faulted in during the copy */
}

void model_pass_begin(const model *cm)
{
    model *m = (model *)cm;   /* allocated by model_load, never const: the switch is ours to make */
    for (;;) {
        if (atomic_load_explicit(&m->copy_state, memory_order_acquire) == COPY_READY) {
            int idle = 0;
            if (atomic_compare_exchange_strong(&m->passes, &idle, -1)) {
                if (atomic_load(&m->copy_state) == COPY_READY) {
                    pthread_join(m->copier, NULL);
                    m->copier_started = false;
                    switch_to_copy(m);
                    atomic_store(&m->copy_state, COPY_ADOPTED);
                }
                atomic_store_explicit(&m->passes, 1, memory_order_release);
                return;
            }
        }
        int n = atomic_load_explicit(&m->passes, memory_order_acquire);
        if (n >= 0 && atomic_compare_exchange_weak_explicit(&m->passes, &n, n + 1, memory_order_acquire,
                                                            memory_order_relaxed))
            return;
    }
}

void model_pass_end(const model *cm)
{
    model *m = (model *)cm;
    atomic_fetch_sub_explicit(&m->passes, 1, memory_order_release);
}

void model_wait_copy(const model *m)
{
    while (atomic_load_explicit(&m->copy_state, memory_order_acquire) == COPY_RUNNING)
        nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
}

bool model_is_copy(const model *m) { return atomic_load(&m->copy_state) == COPY_ADOPTED; }

typedef struct {
    const model *m;
    size_t n;
} tiled_count;

static void add_tiled(model_w *w, void *arg)
{
    tiled_count *c = arg;
    /* as model_weight_bytes: the embeddings (a row read per token) are not counted */
    if (w->data && tq_get(w->type)->tile_rows && !tied_again(c->m, w) && w != &c->m->tok_embd &&
        w != &c->m->pl_tok_embd)
        c->n += model_w_bytes(w);
}

size_t model_tiled_bytes(const model *m)
{
    tiled_count c = { m, 0 };
    model_each_weight((model *)m, add_tiled, &c);   /* only reads here */
    return c.n;
}

void model_copy_free(model *m)
{
    atomic_store(&m->copy_stop, true);
    if (m->copier_started) pthread_join(m->copier, NULL);
    pk_huge_free(m->copy_buf, m->copy_len);
}

/* A weight back into the mapping, in its file layout. */
static void move_back(model_w *w, void *arg)
{
    const rebase *r = arg;
    if (!w->data) return;
    w->data = r->to + ((const char *)w->data - r->from);
    if (tq_get(w->type)->tile_rows) w->type = tq_get(w->type)->untiled;
}

void model_weights_release(const model *cm)
{
    model *m = (model *)cm;   /* as model_pass_begin: where the weights live is ours to change */
    if (atomic_load(&m->released)) return;
    ASSERT(atomic_load(&m->passes) == 0);
    atomic_store(&m->copy_stop, true);
    if (m->copier_started) pthread_join(m->copier, NULL);
    m->copier_started = false;
    atomic_store(&m->copy_stop, false);
    const char *map_lo = (const char *)gguf_file_data(m->gguf) + m->copy_off;
    if (atomic_load(&m->copy_state) == COPY_ADOPTED)
        model_each_weight(m, move_back, &(rebase){ m->copy_buf, (char *)map_lo, m });
    pk_huge_free(m->copy_buf, m->copy_len);
    m->copy_buf = NULL;
    atomic_store(&m->copy_state, COPY_NONE);
    span sp = { NULL, NULL };
    model_each_weight(m, widen, &sp);
    if (sp.lo) release(sp.lo, (size_t)(sp.hi - sp.lo));
    atomic_store(&m->released, true);
}

void model_weights_reload(const model *cm)
{
    model *m = (model *)cm;
    if (!atomic_load(&m->released)) return;
    atomic_store(&m->released, false);
    if (m->hold == MODEL_COPY) model_copy_start(m);
}

bool model_weights_released(const model *m) { return atomic_load(&((model *)m)->released); }
