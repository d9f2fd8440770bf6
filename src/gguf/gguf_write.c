/*
 * gguf_write.c - the GGUF v3 writer.
 *
 * DESIGN: every key/value is serialized into its own byte blob when it is
 * added (key, type, value exactly as they go to disk), so adding copies the
 * caller's data once and writing is a straight walk.  Tensors keep a copy of
 * their data.  gguf_write_file lays the file out as llama.cpp does and as its
 * loader insists on:
 *
 *   header | kv blobs in order added | tensor infos in order added
 *   | zero pad to alignment | tensor 0 | pad | tensor 1 | pad | ...
 *
 * with each tensor's offset = the running sum of the previous tensors' sizes,
 * each rounded up to the alignment (general.alignment if the caller set it,
 * else 32).  The file is written under a temporary name in the same directory
 * and renamed over the target, so a reader never sees half a file.
 *
 * Invariants: keys and tensor names are unique and non-empty; each tensor's
 * nbytes matches its type and shape.
 */
#include "gguf_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ggml keeps tensor names in 64-byte fields, NUL included. */
#define MAX_TENSOR_NAME 63

typedef struct wbuf {
    uint8_t *p;
    size_t n, cap;
    bool oom;                  /* sticky: an append failed */
} wbuf;

typedef struct wkv {
    uint8_t *blob;             /* u64 key length, key, u32 type, value */
    size_t len;
} wkv;

typedef struct wtensor {
    char *name;
    size_t name_len;
    int type, n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint8_t *data;             /* [nbytes], our copy */
    size_t nbytes;
} wtensor;

struct gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    size_t alignment;
};

/* ---- byte buffer ---- */

static void put(wbuf *b, const void *p, size_t n)
{
    if (b->oom || n == 0) return;
    if (n > b->cap - b->n) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap - b->n < n) {
            if (cap > SIZE_MAX / 2) { b->oom = true; return; }
            cap *= 2;
        }
        uint8_t *q = realloc(b->p, cap);
        if (!q) { b->oom = true; return; }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void put_u32(wbuf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(wbuf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(wbuf *b, const void *p, uint64_t n) { put_u64(b, n); put(b, p, (size_t)n); }

/* ---- create / destroy ---- */

gguf_writer *gguf_writer_new(void)
{
    gguf_writer *w = calloc(1, sizeof *w);
    if (w) w->alignment = GGUF_DEFAULT_ALIGNMENT;
    return w;
}

void gguf_writer_free(gguf_writer *w)
{
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) free(w->kv[i].blob);
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->kv);
    free(w->t);
    free(w);
}

/* ---- key/values ---- */

static bool key_taken(const gguf_writer *w, const char *key, size_t n)
{
    for (size_t i = 0; i < w->n_kv; i++) {
        uint64_t kn;
        memcpy(&kn, w->kv[i].blob, 8);
        if (kn == n && memcmp(w->kv[i].blob + 8, key, n) == 0) return true;
    }
    return false;
}

/* Starts a kv blob after checking the key; the caller appends the value. */
static pk_status kv_begin(const gguf_writer *w, wbuf *b, const char *key, size_t n, gguf_type type)
{
    if (!key || n == 0 || key_taken(w, key, n)) return PK_EINVAL;
    *b = (wbuf){0};
    put_str(b, key, n);
    put_u32(b, (uint32_t)type);
    return PK_OK;
}

/* Takes ownership of b's bytes; the alignment key also sets the layout, and
 * must be what the reader accepts. */
static pk_status kv_end(gguf_writer *w, wbuf *b, const char *key, size_t n)
{
    static const char align_key[] = "general.alignment";
    size_t new_alignment = w->alignment;
    if (b->oom) {
        free(b->p);
        return PK_ENOMEM;
    }
    if (n == sizeof align_key - 1 && memcmp(key, align_key, n) == 0) {
        uint32_t type, a = 0;
        memcpy(&type, b->p + 8 + n, 4);
        if (b->n == 8 + n + 4 + 4) memcpy(&a, b->p + 8 + n + 4, 4);
        if (type != GGUF_TYPE_UINT32 || a == 0 || (a & (a - 1))) {
            free(b->p);
            return PK_EINVAL;
        }
        new_alignment = a;
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
        wkv *kv = realloc(w->kv, cap * sizeof *kv);
        if (!kv) {
            free(b->p);
            return PK_ENOMEM;
        }
        w->kv = kv;
        w->cap_kv = cap;
    }
    w->kv[w->n_kv++] = (wkv){b->p, b->n};
    w->alignment = new_alignment;
    return PK_OK;
}

static pk_status add_scalar(gguf_writer *w, const char *key, gguf_type type, const void *v, size_t size)
{
    wbuf b;
    size_t n = key ? strlen(key) : 0;
    pk_status st = kv_begin(w, &b, key, n, type);
    if (st) return st;
    put(&b, v, size);
    return kv_end(w, &b, key, n);
}

pk_status gguf_add_u32(gguf_writer *w, const char *key, uint32_t v)
{
    return add_scalar(w, key, GGUF_TYPE_UINT32, &v, 4);
}

pk_status gguf_add_i32(gguf_writer *w, const char *key, int32_t v)
{
    return add_scalar(w, key, GGUF_TYPE_INT32, &v, 4);
}

pk_status gguf_add_f32(gguf_writer *w, const char *key, float v)
{
    return add_scalar(w, key, GGUF_TYPE_FLOAT32, &v, 4);
}

pk_status gguf_add_bool(gguf_writer *w, const char *key, bool v)
{
    uint8_t b = v ? 1 : 0;
    return add_scalar(w, key, GGUF_TYPE_BOOL, &b, 1);
}

pk_status gguf_add_str(gguf_writer *w, const char *key, const char *v, size_t n)
{
    if (!v && n) return PK_EINVAL;
    wbuf b;
    size_t kn = key ? strlen(key) : 0;
    pk_status st = kv_begin(w, &b, key, kn, GGUF_TYPE_STRING);
    if (st) return st;
    put_str(&b, v, n);
    return kv_end(w, &b, key, kn);
}

pk_status gguf_add_arr(gguf_writer *w, const char *key, gguf_type elem_type, const void *data, uint64_t n)
{
    size_t esz = gguf_scalar_size(elem_type);
    if (!esz || n > SIZE_MAX / esz || (!data && n)) return PK_EINVAL;
    wbuf b;
    size_t kn = key ? strlen(key) : 0;
    pk_status st = kv_begin(w, &b, key, kn, GGUF_TYPE_ARRAY);
    if (st) return st;
    put_u32(&b, (uint32_t)elem_type);
    put_u64(&b, n);
    put(&b, data, (size_t)n * esz);
    return kv_end(w, &b, key, kn);
}

pk_status gguf_add_arr_str(gguf_writer *w, const char *key, const gguf_str *v, uint64_t n)
{
    if (!v && n) return PK_EINVAL;
    for (uint64_t i = 0; i < n; i++)
        if (!v[i].p && v[i].n) return PK_EINVAL;
    wbuf b;
    size_t kn = key ? strlen(key) : 0;
    pk_status st = kv_begin(w, &b, key, kn, GGUF_TYPE_ARRAY);
    if (st) return st;
    put_u32(&b, GGUF_TYPE_STRING);
    put_u64(&b, n);
    for (uint64_t i = 0; i < n; i++) put_str(&b, v[i].p, v[i].n);
    return kv_end(w, &b, key, kn);
}

pk_status gguf_add_kv_from(gguf_writer *w, const gguf_ctx *src, int64_t i)
{
    if (!src || i < 0 || i >= src->n_kv) return PK_EINVAL;
    const gguf_kv *e = &src->kv[i];
    wbuf b;
    pk_status st = kv_begin(w, &b, e->key.p, (size_t)e->key.n, e->type);
    if (st) return st;
    if (e->type == GGUF_TYPE_STRING) {
        put_str(&b, e->val, e->n);
    } else if (e->type != GGUF_TYPE_ARRAY) {
        put(&b, e->val, gguf_scalar_size(e->type));
    } else {
        put_u32(&b, (uint32_t)e->elem);
        put_u64(&b, e->n);
        if (e->elem == GGUF_TYPE_STRING) {
            for (uint64_t j = 0; j < e->n; j++) put_str(&b, src->strs[e->str0 + j].p, src->strs[e->str0 + j].n);
        } else {
            put(&b, e->val, (size_t)e->n * gguf_scalar_size(e->elem));   /* fits: it is in the file */
        }
    }
    return kv_end(w, &b, e->key.p, (size_t)e->key.n);
}

/* ---- tensors ---- */

pk_status gguf_add_tensor(gguf_writer *w, const char *name, int type, int n_dims,
                          const int64_t *ne, const void *data, size_t nbytes)
{
    size_t name_len = name ? strlen(name) : 0;
    const gguf_ttype *tt = type >= 0 ? gguf_ttype_get((uint32_t)type) : NULL;
    if (name_len == 0 || name_len > MAX_TENSOR_NAME || !tt || n_dims < 1 || n_dims > GGUF_MAX_DIMS || !ne)
        return PK_EINVAL;
    for (size_t i = 0; i < w->n_t; i++)
        if (w->t[i].name_len == name_len && memcmp(w->t[i].name, name, name_len) == 0) return PK_EINVAL;
    wtensor t = {.name_len = name_len, .type = type, .n_dims = n_dims, .nbytes = nbytes};
    int64_t nelem = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] < 1 || t.ne[d] > INT64_MAX / nelem) return PK_EINVAL;
        nelem *= t.ne[d];
    }
    if (t.ne[0] % tt->blck || (uint64_t)(nelem / tt->blck) > SIZE_MAX / tt->size ||
        (size_t)(nelem / tt->blck) * tt->size != nbytes || !data)
        return PK_EINVAL;
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 16;
        wtensor *nt = realloc(w->t, cap * sizeof *nt);
        if (!nt) return PK_ENOMEM;
        w->t = nt;
        w->cap_t = cap;
    }
    t.name = malloc(name_len + 1);
    t.data = malloc(nbytes);
    if (!t.name || !t.data) {
        free(t.name);
        free(t.data);
        return PK_ENOMEM;
    }
    memcpy(t.name, name, name_len + 1);
    memcpy(t.data, data, nbytes);
    w->t[w->n_t++] = t;
    return PK_OK;
}

/* ---- output ---- */

static size_t pad_to(size_t n, size_t a) { return (n + a - 1) / a * a; }

static bool write_pad(FILE *f, size_t *pos, size_t a)
{
    static const uint8_t zeros[256];
    size_t n = pad_to(*pos, a) - *pos;
    *pos += n;
    while (n) {
        size_t k = MIN(n, sizeof zeros);
        if (fwrite(zeros, 1, k, f) != k) return false;
        n -= k;
    }
    return true;
}

static bool write_all(FILE *f, const gguf_writer *w)
{
    wbuf h = {0};
    put(&h, "GGUF", 4);
    put_u32(&h, 3);
    put_u64(&h, w->n_t);
    put_u64(&h, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) put(&h, w->kv[i].blob, w->kv[i].len);
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        put_str(&h, t->name, t->name_len);
        put_u32(&h, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) put_u64(&h, (uint64_t)t->ne[d]);
        put_u32(&h, (uint32_t)t->type);
        put_u64(&h, off);
        off += pad_to(t->nbytes, w->alignment);
    }
    bool ok = !h.oom && fwrite(h.p, 1, h.n, f) == h.n;
    size_t pos = h.n;
    free(h.p);
    ok = ok && write_pad(f, &pos, w->alignment);
    for (size_t i = 0; ok && i < w->n_t; i++) {
        ok = fwrite(w->t[i].data, 1, w->t[i].nbytes, f) == w->t[i].nbytes;
        pos += w->t[i].nbytes;
        ok = ok && write_pad(f, &pos, w->alignment);
    }
    return ok;
}

pk_status gguf_write_file(const gguf_writer *w, const char *path)
{
    if (!w || !path || !*path) return PK_EINVAL;
    size_t n = strlen(path);
    char *tmp = malloc(n + sizeof ".tmp.XXXXXX");
    if (!tmp) return PK_ENOMEM;
    memcpy(tmp, path, n);
    memcpy(tmp + n, ".tmp.XXXXXX", sizeof ".tmp.XXXXXX");
    int fd = mkstemp(tmp);
    if (fd < 0) {
        free(tmp);
        return PK_EIO;
    }
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        close(fd);
        unlink(tmp);
        free(tmp);
        return PK_EIO;
    }
    /* mkstemp makes the file private; a model file is for everyone to read. */
    bool ok = fchmod(fd, 0644) == 0 && write_all(f, w);
    ok = fflush(f) == 0 && ok;
    ok = fsync(fd) == 0 && ok;
    ok = fclose(f) == 0 && ok;
    ok = ok && rename(tmp, path) == 0;
    if (!ok) unlink(tmp);
    free(tmp);
    return ok ? PK_OK : PK_EIO;
}
