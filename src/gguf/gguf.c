/*
 * gguf.c - the GGUF reader: one pass over a mapped file that checks every
 * field before it trusts it, then sorted indices for lookup.
 *
 * FILE LAYOUT (versions 2 and 3 are identical; all little-endian):
 *
 *   "GGUF" u32 version  u64 n_tensors  u64 n_kv
 *   n_kv x      { str key, u32 type, value }          value: scalar | str |
 *                                                      u32 elem, u64 n, n x elem
 *   n_tensors x { str name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset }
 *   zero padding up to a multiple of general.alignment (default 32)
 *   data section: each tensor at data_off + offset, offset % alignment == 0
 *
 *   str = u64 length + bytes (no NUL)
 *
 * DEFENCE: the cursor only moves through take(), which compares the request
 * against the bytes left before it hands out a pointer, so nothing reads past
 * the buffer.  Counts are compared with the bytes left divided by the
 * smallest possible item before anything is allocated, so a count of 2^60
 * fails at once and every allocation is bounded by a small multiple of the
 * file size.  Duplicate keys and tensor names are found by sorting indices
 * (a merge sort: O(n log n) whatever the input, where a hash table with a
 * fixed hash could be driven quadratic by a crafted file); lookups are binary
 * searches over the same indices.
 */
#include "gguf_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Smallest encodings, used to bound counts by the bytes left:
 * a kv is key length + 1-byte key + type + 1-byte value; a tensor info is
 * name length + 1-byte name + n_dims + one ne + type + offset; a string is
 * its length field. */
#define MIN_KV_BYTES     (8 + 1 + 4 + 1)
#define MIN_TENSOR_BYTES (8 + 1 + 4 + 8 + 4 + 8)
#define MIN_STR_BYTES    8

/* Ids as in ggml's type table; gaps are ids retired from the format. */
static const gguf_ttype ttypes[] = {
    [0]  = {"F32", 1, 4},        [1]  = {"F16", 1, 2},
    [2]  = {"Q4_0", 32, 18},     [3]  = {"Q4_1", 32, 20},
    [6]  = {"Q5_0", 32, 22},     [7]  = {"Q5_1", 32, 24},
    [8]  = {"Q8_0", 32, 34},     [9]  = {"Q8_1", 32, 36},
    [10] = {"Q2_K", 256, 84},    [11] = {"Q3_K", 256, 110},
    [12] = {"Q4_K", 256, 144},   [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},   [15] = {"Q8_K", 256, 292},
    [16] = {"IQ2_XXS", 256, 66}, [17] = {"IQ2_XS", 256, 74},
    [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},   [21] = {"IQ3_S", 256, 110},
    [22] = {"IQ2_S", 256, 82},   [23] = {"IQ4_XS", 256, 136},
    [24] = {"I8", 1, 1},         [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},        [27] = {"I64", 1, 8},
    [28] = {"F64", 1, 8},        [29] = {"IQ1_M", 256, 56},
    [30] = {"BF16", 1, 2},
    [34] = {"TQ1_0", 256, 54},   [35] = {"TQ2_0", 256, 66},
    [39] = {"MXFP4", 32, 17},
};

const gguf_ttype *gguf_ttype_get(uint32_t t)
{
    if (t >= ARRAY_LEN(ttypes) || !ttypes[t].name) return NULL;
    return &ttypes[t];
}

size_t gguf_scalar_size(uint32_t t)
{
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

/* ---- cursor ---- */

typedef struct rd {
    const uint8_t *p;
    size_t size, pos;
    char where[112];           /* the item being parsed, prefixed to errors */
    char *err;
    size_t err_len;
} rd;

__attribute__((format(printf, 2, 3)))
static pk_status bad(rd *r, const char *fmt, ...)
{
    if (r->err && r->err_len) {
        char msg[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        if (r->where[0]) snprintf(r->err, r->err_len, "%s: %s", r->where, msg);
        else snprintf(r->err, r->err_len, "%s", msg);
    }
    return PK_EFORMAT;
}

/* Writes a printable, bounded rendering of s into buf: names in a hostile file
 * may hold newlines or be megabytes long, and a message stays one line. */
static const char *show(char *buf, size_t len, gguf_str s)
{
    size_t max = len - 4, j = 0;
    for (uint64_t i = 0; i < s.n && j < max; i++) {
        unsigned char c = (unsigned char)s.p[i];
        buf[j++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (s.n > max) { memcpy(buf + j, "...", 3); j += 3; }
    buf[j] = 0;
    return buf;
}

static size_t left(const rd *r) { return r->size - r->pos; }

static pk_status take(rd *r, uint64_t n, const uint8_t **out, const char *what)
{
    if (n > left(r))
        return bad(r, "%s (%llu bytes at offset %zu) runs past end of file (size %zu)",
                   what, (unsigned long long)n, r->pos, r->size);
    *out = r->p + r->pos;
    r->pos += n;
    return PK_OK;
}

static pk_status take_u32(rd *r, uint32_t *v, const char *what)
{
    const uint8_t *q = NULL;
    pk_status st = take(r, 4, &q, what);
    if (st == PK_OK) memcpy(v, q, 4);
    return st;
}

static pk_status take_u64(rd *r, uint64_t *v, const char *what)
{
    const uint8_t *q = NULL;
    pk_status st = take(r, 8, &q, what);
    if (st == PK_OK) memcpy(v, q, 8);
    return st;
}

static pk_status take_str(rd *r, gguf_str *s, const char *what)
{
    uint64_t n;
    const uint8_t *q = NULL;
    pk_status st = take_u64(r, &n, what);
    if (st == PK_OK) st = take(r, n, &q, what);
    if (st == PK_OK) { s->p = (const char *)q; s->n = n; }
    return st;
}

/* ---- names: ordering, sorting, lookup ---- */

static int str_cmp(gguf_str a, gguf_str b)
{
    size_t m = a.n < b.n ? a.n : b.n;
    int c = m ? memcmp(a.p, b.p, m) : 0;
    if (c) return c;
    return (a.n > b.n) - (a.n < b.n);
}

/* Both gguf_kv and gguf_tensor start with their name, so one sort and one
 * search serve both tables, given the element stride. */
static gguf_str name_at(const void *tab, size_t stride, size_t i)
{
    return *(const gguf_str *)((const char *)tab + i * stride);
}

/* Sorts idx[0..n) by name, stable bottom-up merge sort; tmp holds n entries. */
static void sort_names(size_t *idx, size_t *tmp, size_t n, const void *tab, size_t stride)
{
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = MIN(lo + w, n), hi = MIN(lo + 2 * w, n);
            size_t a = lo, b = mid, k = lo;
            while (a < mid && b < hi)
                tmp[k++] = str_cmp(name_at(tab, stride, idx[b]), name_at(tab, stride, idx[a])) < 0
                         ? idx[b++] : idx[a++];
            while (a < mid) tmp[k++] = idx[a++];
            while (b < hi) tmp[k++] = idx[b++];
        }
        memcpy(idx, tmp, n * sizeof *idx);
    }
}

/* Index (into tab) of the entry named c, or -1. */
static int64_t find_name(const size_t *idx, size_t n, const void *tab, size_t stride, const char *c)
{
    gguf_str key = {c, strlen(c)};
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int cmp = str_cmp(name_at(tab, stride, idx[mid]), key);
        if (cmp == 0) return (int64_t)idx[mid];
        if (cmp < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

/* Sorts and rejects the first duplicate name; `what` names the name and
 * `item` the entry in the message. */
static pk_status index_names(rd *r, size_t **out, size_t n, const void *tab, size_t stride,
                             const char *what, const char *item)
{
    size_t *idx = malloc((n ? n : 1) * sizeof *idx);
    size_t *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!idx || !tmp) {
        free(idx);
        free(tmp);
        r->where[0] = 0;
        bad(r, "out of memory indexing %zu %ss", n, what);
        return PK_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) idx[i] = i;
    sort_names(idx, tmp, n, tab, stride);
    free(tmp);
    *out = idx;
    for (size_t i = 1; i < n; i++) {
        if (str_cmp(name_at(tab, stride, idx[i - 1]), name_at(tab, stride, idx[i])) == 0) {
            char nb[80];
            size_t a = MIN(idx[i - 1], idx[i]), b = MAX(idx[i - 1], idx[i]);
            r->where[0] = 0;
            return bad(r, "duplicate %s '%s' (%s %zu and %s %zu)", what,
                       show(nb, sizeof nb, name_at(tab, stride, a)), item, a, item, b);
        }
    }
    return PK_OK;
}

/* ---- parsing ---- */

static pk_status grow_strs(rd *r, gguf_ctx *g, uint64_t more)
{
    uint64_t need = g->n_strs + more;   /* both bounded by size / 8: no overflow */
    if (need <= g->cap_strs) return PK_OK;
    uint64_t cap = MAX(need, 2 * g->cap_strs);
    gguf_str *s = realloc(g->strs, cap * sizeof *s);
    if (!s) {
        bad(r, "out of memory for %llu strings", (unsigned long long)cap);
        return PK_ENOMEM;
    }
    g->strs = s;
    g->cap_strs = cap;
    return PK_OK;
}

static pk_status parse_array(rd *r, gguf_ctx *g, gguf_kv *e)
{
    uint32_t elem;
    pk_status st = take_u32(r, &elem, "array element type");
    if (st) return st;
    size_t at = r->pos - 4;
    if (elem == GGUF_TYPE_ARRAY) return bad(r, "array of arrays at offset %zu is not allowed", at);
    if (elem != GGUF_TYPE_STRING && !gguf_scalar_size(elem))
        return bad(r, "unknown array element type %u at offset %zu", elem, at);
    if ((st = take_u64(r, &e->n, "array length"))) return st;
    e->elem = (gguf_type)elem;
    e->val = r->p + r->pos;
    if (elem != GGUF_TYPE_STRING) {
        size_t esz = gguf_scalar_size(elem);
        if (e->n > left(r) / esz)
            return bad(r, "array of %llu %zu-byte elements at offset %zu runs past end of file (size %zu)",
                       (unsigned long long)e->n, esz, r->pos, r->size);
        r->pos += e->n * esz;
        return PK_OK;
    }
    if (e->n > left(r) / MIN_STR_BYTES)
        return bad(r, "array of %llu strings at offset %zu cannot fit in the %zu bytes left",
                   (unsigned long long)e->n, r->pos, left(r));
    if ((st = grow_strs(r, g, e->n))) return st;
    e->str0 = g->n_strs;
    for (uint64_t j = 0; j < e->n; j++) {
        uint64_t n;
        if (left(r) < 8)
            return bad(r, "string %llu of %llu: length at offset %zu runs past end of file (size %zu)",
                       (unsigned long long)j, (unsigned long long)e->n, r->pos, r->size);
        memcpy(&n, r->p + r->pos, 8);
        r->pos += 8;
        if (n > left(r))
            return bad(r, "string %llu of %llu: %llu bytes at offset %zu run past end of file (size %zu)",
                       (unsigned long long)j, (unsigned long long)e->n, (unsigned long long)n,
                       r->pos, r->size);
        g->strs[g->n_strs++] = (gguf_str){(const char *)r->p + r->pos, n};
        r->pos += n;
    }
    return PK_OK;
}

static pk_status parse_kv(rd *r, gguf_ctx *g, int64_t i)
{
    gguf_kv *e = &g->kv[i];
    char nb[80];
    uint32_t type;
    snprintf(r->where, sizeof r->where, "kv %lld", (long long)i);
    pk_status st = take_str(r, &e->key, "key");
    if (st) return st;
    if (e->key.n == 0) return bad(r, "empty key at offset %zu", r->pos - 8);
    snprintf(r->where, sizeof r->where, "kv %lld '%s'", (long long)i, show(nb, sizeof nb, e->key));
    if ((st = take_u32(r, &type, "value type"))) return st;
    e->type = (gguf_type)type;
    if (type == GGUF_TYPE_STRING) {
        gguf_str s;
        if ((st = take_str(r, &s, "string value"))) return st;
        e->val = (const uint8_t *)s.p;
        e->n = s.n;
        return PK_OK;
    }
    if (type == GGUF_TYPE_ARRAY) return parse_array(r, g, e);
    if (!gguf_scalar_size(type)) return bad(r, "unknown value type %u at offset %zu", type, r->pos - 4);
    return take(r, gguf_scalar_size(type), &e->val, "value");
}

static pk_status parse_tensor_info(rd *r, gguf_ctx *g, int64_t i)
{
    gguf_tensor *t = &g->tensors[i];
    char nb[80];
    uint32_t n_dims, type;
    snprintf(r->where, sizeof r->where, "tensor %lld", (long long)i);
    pk_status st = take_str(r, &t->name, "name");
    if (st) return st;
    snprintf(r->where, sizeof r->where, "tensor '%s'", show(nb, sizeof nb, t->name));
    if ((st = take_u32(r, &n_dims, "n_dims"))) return st;
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return bad(r, "%u dimensions at offset %zu, expected 1 to %d", n_dims, r->pos - 4, GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    int64_t nelem = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t ne = 1;
        if (d < t->n_dims && (st = take_u64(r, &ne, "shape"))) return st;
        if (ne == 0 || ne > (uint64_t)INT64_MAX)
            return bad(r, "ne[%d] = %llu at offset %zu, expected 1 to 2^63-1",
                       d, (unsigned long long)ne, r->pos - 8);
        if ((int64_t)ne > INT64_MAX / nelem)
            return bad(r, "element count overflows at ne[%d] = %llu", d, (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
        nelem *= (int64_t)ne;
    }
    if ((st = take_u32(r, &type, "type"))) return st;
    const gguf_ttype *tt = gguf_ttype_get(type);
    if (!tt) return bad(r, "unknown tensor type %u at offset %zu", type, r->pos - 4);
    t->type = (int)type;
    if (t->ne[0] % tt->blck)
        return bad(r, "row length %lld is not a multiple of the %s block size %u",
                   (long long)t->ne[0], tt->name, tt->blck);
    uint64_t blocks = (uint64_t)(nelem / tt->blck);
    if (blocks > SIZE_MAX / tt->size)
        return bad(r, "%llu blocks of %s overflow a byte count", (unsigned long long)blocks, tt->name);
    t->nbytes = (size_t)blocks * tt->size;
    return take_u64(r, &t->offset, "data offset");
}

static uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

/* Places every tensor in the data section; runs after all infos are read. */
static pk_status place_tensors(rd *r, gguf_ctx *g)
{
    char nb[80];
    for (int64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        snprintf(r->where, sizeof r->where, "tensor '%s'", show(nb, sizeof nb, t->name));
        if (t->offset % g->alignment)
            return bad(r, "data offset %llu is not a multiple of the alignment %zu",
                       (unsigned long long)t->offset, g->alignment);
        size_t room = g->size - g->data_off;
        if (t->offset > room || t->nbytes > room - t->offset) {
            uint64_t x = sat_add(g->data_off, t->offset);
            return bad(r, "data [%llu, %llu) beyond end of file (size %zu)",
                       (unsigned long long)x, (unsigned long long)sat_add(x, t->nbytes), g->size);
        }
        t->data = g->base + g->data_off + t->offset;
    }
    return PK_OK;
}

static pk_status parse(rd *r, gguf_ctx *g)
{
    const uint8_t *magic = NULL;
    uint32_t version;
    uint64_t n_tensors, n_kv;
    pk_status st;
    snprintf(r->where, sizeof r->where, "header");
    if ((st = take(r, 4, &magic, "magic"))) return st;
    if (memcmp(magic, "GGUF", 4) != 0) {
        char nb[16];
        return bad(r, "bad magic '%s', expected 'GGUF'",
                   show(nb, sizeof nb, (gguf_str){(const char *)magic, 4}));
    }
    if ((st = take_u32(r, &version, "version"))) return st;
    if (version == 1) return bad(r, "GGUF version 1 is not supported (only 2 and 3)");
    if (version != 2 && version != 3) {
        if ((version & 0xffff) == 0 && version >> 16)
            return bad(r, "version %u looks byte-swapped: big-endian GGUF is not supported", version);
        return bad(r, "unsupported GGUF version %u (only 2 and 3)", version);
    }
    g->version = version;
    if ((st = take_u64(r, &n_tensors, "tensor count"))) return st;
    if ((st = take_u64(r, &n_kv, "key/value count"))) return st;
    if (n_kv > left(r) / MIN_KV_BYTES)
        return bad(r, "%llu key/values cannot fit in the %zu bytes left",
                   (unsigned long long)n_kv, left(r));
    if (n_tensors > left(r) / MIN_TENSOR_BYTES ||
        n_kv * MIN_KV_BYTES + n_tensors * MIN_TENSOR_BYTES > left(r))
        return bad(r, "%llu tensors and %llu key/values cannot fit in the %zu bytes left",
                   (unsigned long long)n_tensors, (unsigned long long)n_kv, left(r));

    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors) {
        bad(r, "out of memory for %llu key/values and %llu tensors",
            (unsigned long long)n_kv, (unsigned long long)n_tensors);
        return PK_ENOMEM;
    }
    for (int64_t i = 0; i < g->n_kv; i++)
        if ((st = parse_kv(r, g, i))) return st;
    if ((st = index_names(r, &g->kv_sorted, n_kv, g->kv, sizeof *g->kv, "key", "kv"))) return st;

    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t ai = gguf_find_key(g, "general.alignment");
    if (ai >= 0) {
        const gguf_kv *e = &g->kv[ai];
        uint32_t a;
        snprintf(r->where, sizeof r->where, "kv %lld 'general.alignment'", (long long)ai);
        if (e->type != GGUF_TYPE_UINT32) return bad(r, "type %u, expected UINT32", (unsigned)e->type);
        memcpy(&a, e->val, 4);
        if (a == 0 || (a & (a - 1))) return bad(r, "%u is not a power of two", a);
        g->alignment = a;
    }

    for (int64_t i = 0; i < g->n_tensors; i++)
        if ((st = parse_tensor_info(r, g, i))) return st;
    if ((st = index_names(r, &g->t_sorted, n_tensors, g->tensors, sizeof *g->tensors,
                          "tensor name", "tensor")))
        return st;

    /* The data section starts at the next aligned offset.  A file without
     * tensors may end right after its metadata, unpadded. */
    uint64_t pad = (r->pos + g->alignment - 1) / g->alignment * g->alignment;
    if (pad > r->size) {
        if (g->n_tensors > 0) {
            r->where[0] = 0;
            return bad(r, "data section at offset %llu beyond end of file (size %zu)",
                       (unsigned long long)pad, r->size);
        }
        pad = r->size;
    }
    g->data_off = (size_t)pad;
    return place_tensors(r, g);
}

/* ---- open / close ---- */

pk_status gguf_open_mem(const void *data, size_t size, gguf_ctx **out, char *err, size_t err_len)
{
    *out = NULL;
    if (err && err_len) err[0] = 0;
    if (!data && size) {
        if (err && err_len) snprintf(err, err_len, "gguf_open_mem: NULL buffer of %zu bytes", size);
        return PK_EINVAL;
    }
    gguf_ctx *g = calloc(1, sizeof *g);
    if (!g) {
        if (err && err_len) snprintf(err, err_len, "out of memory");
        return PK_ENOMEM;
    }
    static const uint8_t empty[1];
    g->base = data ? data : empty;
    g->size = size;
    rd r = {.p = g->base, .size = size, .err = err, .err_len = err_len};
    pk_status st = parse(&r, g);
    if (st != PK_OK) {
        gguf_close(g);
        return st;
    }
    *out = g;
    return PK_OK;
}

pk_status gguf_open(const char *path, gguf_ctx **out, char *err, size_t err_len)
{
    *out = NULL;
    if (err && err_len) err[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (err && err_len) snprintf(err, err_len, "%s: open: %s", path, strerror(errno));
        return PK_EIO;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        if (err && err_len) snprintf(err, err_len, "%s: fstat: %s", path, strerror(errno));
        close(fd);
        return PK_EIO;
    }
    if (!S_ISREG(sb.st_mode)) {
        if (err && err_len) snprintf(err, err_len, "%s: not a regular file", path);
        close(fd);
        return PK_EIO;
    }
    size_t size = (size_t)sb.st_size;
    void *map = NULL;
    if (size > 0) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            if (err && err_len) snprintf(err, err_len, "%s: mmap: %s", path, strerror(errno));
            close(fd);
            return PK_EIO;
        }
    }
    close(fd);   /* the mapping keeps the file */

    char msg[384];
    pk_status st = gguf_open_mem(map, size, out, msg, sizeof msg);
    if (st != PK_OK) {
        if (err && err_len) snprintf(err, err_len, "%s: %s", path, msg);
        if (map) munmap(map, size);
        return st;
    }
    (*out)->map = map;
    (*out)->map_len = size;
    return PK_OK;
}

void gguf_close(gguf_ctx *g)
{
    if (!g) return;
    if (g->map) munmap(g->map, g->map_len);
    free(g->kv);
    free(g->kv_sorted);
    free(g->tensors);
    free(g->t_sorted);
    free(g->strs);
    free(g);
}

/* ---- accessors ---- */

uint32_t gguf_version(const gguf_ctx *g) { return g->version; }
size_t gguf_file_size(const gguf_ctx *g) { return g->size; }
const void *gguf_file_data(const gguf_ctx *g) { return g->base; }
size_t gguf_alignment(const gguf_ctx *g) { return g->alignment; }
int64_t gguf_n_kv(const gguf_ctx *g) { return g->n_kv; }
int64_t gguf_n_tensors(const gguf_ctx *g) { return g->n_tensors; }

int64_t gguf_find_key(const gguf_ctx *g, const char *key)
{
    return find_name(g->kv_sorted, (size_t)g->n_kv, g->kv, sizeof *g->kv, key);
}

gguf_str gguf_key(const gguf_ctx *g, int64_t i)
{
    if (i < 0 || i >= g->n_kv) return (gguf_str){NULL, 0};
    return g->kv[i].key;
}

gguf_type gguf_kv_type(const gguf_ctx *g, int64_t i)
{
    ASSERT(i >= 0 && i < g->n_kv);
    return g->kv[i].type;
}

static const gguf_kv *kv_by_name(const gguf_ctx *g, const char *key)
{
    int64_t i = gguf_find_key(g, key);
    return i < 0 ? NULL : &g->kv[i];
}

pk_status gguf_get_int(const gguf_ctx *g, const char *key, int64_t *out)
{
    const gguf_kv *e = kv_by_name(g, key);
    if (!e) return PK_ENOTFOUND;
    const uint8_t *v = e->val;
    union { uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
            uint64_t u64; int64_t i64; } x;
    size_t n = gguf_scalar_size(e->type);
    if (e->type == GGUF_TYPE_FLOAT32 || e->type == GGUF_TYPE_FLOAT64 || !n) return PK_EFORMAT;
    memcpy(&x, v, n);
    switch (e->type) {
    case GGUF_TYPE_BOOL:   *out = x.u8 != 0; break;
    case GGUF_TYPE_UINT8:  *out = x.u8; break;
    case GGUF_TYPE_INT8:   *out = x.i8; break;
    case GGUF_TYPE_UINT16: *out = x.u16; break;
    case GGUF_TYPE_INT16:  *out = x.i16; break;
    case GGUF_TYPE_UINT32: *out = x.u32; break;
    case GGUF_TYPE_INT32:  *out = x.i32; break;
    case GGUF_TYPE_INT64:  *out = x.i64; break;
    case GGUF_TYPE_UINT64:
        if (x.u64 > (uint64_t)INT64_MAX) return PK_EFORMAT;
        *out = (int64_t)x.u64;
        break;
    default: return PK_EFORMAT;
    }
    return PK_OK;
}

pk_status gguf_get_float(const gguf_ctx *g, const char *key, double *out)
{
    const gguf_kv *e = kv_by_name(g, key);
    if (!e) return PK_ENOTFOUND;
    if (e->type == GGUF_TYPE_FLOAT32) {
        float f;
        memcpy(&f, e->val, 4);
        *out = f;
    } else if (e->type == GGUF_TYPE_FLOAT64) {
        memcpy(out, e->val, 8);
    } else {
        return PK_EFORMAT;
    }
    return PK_OK;
}

pk_status gguf_get_bool(const gguf_ctx *g, const char *key, bool *out)
{
    const gguf_kv *e = kv_by_name(g, key);
    if (!e) return PK_ENOTFOUND;
    if (e->type != GGUF_TYPE_BOOL) return PK_EFORMAT;
    *out = e->val[0] != 0;
    return PK_OK;
}

pk_status gguf_get_str(const gguf_ctx *g, const char *key, gguf_str *out)
{
    const gguf_kv *e = kv_by_name(g, key);
    if (!e) return PK_ENOTFOUND;
    if (e->type != GGUF_TYPE_STRING) return PK_EFORMAT;
    *out = (gguf_str){(const char *)e->val, e->n};
    return PK_OK;
}

pk_status gguf_get_arr(const gguf_ctx *g, const char *key, gguf_type *elem_type, uint64_t *n)
{
    const gguf_kv *e = kv_by_name(g, key);
    if (!e) return PK_ENOTFOUND;
    if (e->type != GGUF_TYPE_ARRAY) return PK_EFORMAT;
    *elem_type = e->elem;
    *n = e->n;
    return PK_OK;
}

const void *gguf_arr_data(const gguf_ctx *g, const char *key)
{
    const gguf_kv *e = kv_by_name(g, key);
    if (!e || e->type != GGUF_TYPE_ARRAY || e->elem == GGUF_TYPE_STRING) return NULL;
    return e->val;
}

gguf_str gguf_arr_str(const gguf_ctx *g, const char *key, uint64_t i)
{
    const gguf_kv *e = kv_by_name(g, key);
    if (!e || e->type != GGUF_TYPE_ARRAY || e->elem != GGUF_TYPE_STRING || i >= e->n)
        return (gguf_str){NULL, 0};
    return g->strs[e->str0 + i];
}

const gguf_tensor *gguf_tensor_at(const gguf_ctx *g, int64_t i)
{
    if (i < 0 || i >= g->n_tensors) return NULL;
    return &g->tensors[i];
}

const gguf_tensor *gguf_find_tensor(const gguf_ctx *g, const char *name)
{
    int64_t i = find_name(g->t_sorted, (size_t)g->n_tensors, g->tensors, sizeof *g->tensors, name);
    return i < 0 ? NULL : &g->tensors[i];
}

bool gguf_str_eq(gguf_str s, const char *c)
{
    size_t n = strlen(c);
    return s.n == n && (n == 0 || memcmp(s.p, c, n) == 0);
}
