/*
 * test_gguf.c - the GGUF reader and writer.
 *
 *   1. round trip: every kv type and several tensor types through the writer
 *      and back, layout rules, writer argument checks, gguf_add_kv_from;
 *   2. hand-corrupted small files: each rule of the reader fires with a message;
 *   3. the real files in ../shared/models: known facts (SKIP when absent);
 *   4. robustness, on the round-trip file always and on stories260K.gguf and
 *      the gpt-2 vocab when present: truncation at every length (stories: the
 *      first 64 KiB, then every 4 KiB; the vocab every 4093 bytes), which must
 *      parse exactly when all tensor data is kept, and thousands of
 *      deterministic corruptions of counts, lengths, types, offsets and random
 *      header bytes, which must parse or fail with PK_EFORMAT and one line.
 *      Each buffer ends flush against a PROT_NONE page, so reading one byte
 *      too far faults.
 */
#include "../src/gguf/gguf.h"
#include "test.h"

#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>

static char tmp_dir[64];
static uint8_t *rt_file;       /* the round-trip file, kept for the robustness sweeps */
static size_t rt_size;

static uint8_t *read_all(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(n > 0 ? (size_t)n : 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) { free(p); p = NULL; }
    fclose(f);
    *size = (size_t)n;
    return p;
}

static const char *tmp_path(const char *name)
{
    static char buf[4][128];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmp_dir, name);
    return buf[k];
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* ---- guard-page buffers ---- */

typedef struct guarded {
    uint8_t *region;
    size_t len;                /* bytes before the guard page */
} guarded;

static guarded guarded_new(size_t cap)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t len = (cap + pg - 1) / pg * pg;
    uint8_t *p = mmap(NULL, len + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { fprintf(stderr, "mmap failed\n"); exit(1); }
    if (mprotect(p + len, pg, PROT_NONE) != 0) { fprintf(stderr, "mprotect failed\n"); exit(1); }
    return (guarded){p, len};
}

static void guarded_free(guarded g) { munmap(g.region, g.len + (size_t)sysconf(_SC_PAGESIZE)); }

/* Copies src[0..n) so that its last byte is the last readable one. */
static uint8_t *place(guarded g, const uint8_t *src, size_t n)
{
    uint8_t *dst = g.region + g.len - n;
    memcpy(dst, src, n);
    return dst;
}

/* ---- walking a parsed file, as a consumer would ---- */

static volatile unsigned sink;

static char *cstr(gguf_str s)
{
    char *c = malloc(s.n + 1);
    memcpy(c, s.p, s.n);
    c[s.n] = 0;
    return c;
}

/* Touches everything a successful open promises, checking it stays in buf. */
static void walk(const gguf_ctx *g, const uint8_t *buf, size_t size)
{
    const uint8_t *end = buf + size;
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        gguf_str k = gguf_key(g, i);
        CHECK(k.p && (const uint8_t *)k.p >= buf && (const uint8_t *)k.p + k.n <= end);
        char *key = cstr(k);
        int64_t j = gguf_find_key(g, key);
        CHECK(j == i || memchr(k.p, 0, k.n));
        gguf_type t = gguf_kv_type(g, i), et;
        int64_t iv; double dv; bool bv; gguf_str sv; uint64_t n;
        sink += gguf_get_int(g, key, &iv) == PK_OK;
        sink += gguf_get_float(g, key, &dv) == PK_OK;
        sink += gguf_get_bool(g, key, &bv) == PK_OK;
        if (gguf_get_str(g, key, &sv) == PK_OK && sv.n) sink += (unsigned char)sv.p[sv.n - 1];
        if (j == i && t == GGUF_TYPE_ARRAY && gguf_get_arr(g, key, &et, &n) == PK_OK) {
            const uint8_t *d = gguf_arr_data(g, key);
            if (et == GGUF_TYPE_STRING) {
                CHECK(d == NULL);
                for (uint64_t e = 0; e < n; e++) {
                    gguf_str s = gguf_arr_str(g, key, e);
                    CHECK((const uint8_t *)s.p >= buf && (const uint8_t *)s.p + s.n <= end);
                    if (s.n) sink += (unsigned char)s.p[s.n - 1];
                }
                CHECK(gguf_arr_str(g, key, n).p == NULL);
            } else if (n) {
                CHECK(d >= buf && d < end);
                sink += d[0];
            }
        }
        free(key);
    }
    CHECK(gguf_key(g, gguf_n_kv(g)).p == NULL);
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        const uint8_t *d = t->data;
        CHECK(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS);
        CHECK(d >= buf && t->nbytes <= (size_t)(end - d));
        CHECK((size_t)(d - buf) % gguf_alignment(g) == 0);
        sink += d[0] + d[t->nbytes - 1];
        char *name = cstr(t->name);
        CHECK(gguf_find_tensor(g, name) == t || memchr(t->name.p, 0, t->name.n));
        free(name);
    }
    CHECK(gguf_tensor_at(g, -1) == NULL && gguf_tensor_at(g, gguf_n_tensors(g)) == NULL);
}

/* ---- 1. round trip ---- */

static void test_round_trip(void)
{
    gguf_writer *w = gguf_writer_new();
    CHECK(w != NULL);
    uint8_t u8s[] = {0, 1, 255};          int8_t i8s[] = {-128, 0, 127};
    uint16_t u16s[] = {0, 65535};         int16_t i16s[] = {-32768, 32767};
    uint32_t u32s[] = {0, 4294967295u};   int32_t i32s[] = {INT32_MIN, -1, INT32_MAX};
    float f32s[] = {1.5f, -0.0f, 3e38f};  uint8_t bools[] = {1, 0, 1, 1};
    uint64_t u64s[] = {UINT64_MAX, 0};    int64_t i64s[] = {INT64_MIN, 42};
    double f64s[] = {3.141592653589793, -1e300};
    gguf_str strs[] = {{"hello", 5}, {"", 0}, {"a\0b", 3}, {"\xc4\xa0 t", 4}};

    CHECK_EQ_INT(gguf_add_str(w, "general.architecture", "llama", 5), PK_OK);
    CHECK_EQ_INT(gguf_add_u32(w, "t.u32", 4000000000u), PK_OK);
    CHECK_EQ_INT(gguf_add_i32(w, "t.i32", -7), PK_OK);
    CHECK_EQ_INT(gguf_add_f32(w, "t.f32", 1e-5f), PK_OK);
    CHECK_EQ_INT(gguf_add_bool(w, "t.bool", true), PK_OK);
    CHECK_EQ_INT(gguf_add_str(w, "t.str_nul", "x\0y", 3), PK_OK);
    CHECK_EQ_INT(gguf_add_str(w, "t.str_empty", NULL, 0), PK_OK);
    CHECK_EQ_INT(gguf_add_arr(w, "a.u8", GGUF_TYPE_UINT8, u8s, 3), PK_OK);
    CHECK_EQ_INT(gguf_add_arr(w, "a.i8", GGUF_TYPE_INT8, i8s, 3), PK_OK);
    CHECK_EQ_INT(gguf_add_arr(w, "a.u16", GGUF_TYPE_UINT16, u16s, 2), PK_OK);
    CHECK_EQ_INT(gguf_add_arr(w, "a.i16", GGUF_TYPE_INT16, i16s, 2), PK_OK);
    CHECK_EQ_INT(gguf_add_arr(w, "a.u32", GGUF_TYPE_UINT32, u32s, 2), PK_OK);
    CHECK_EQ_INT(gguf_add_arr(w, "a.i32", GGUF_TYPE_INT32, i32s, 3), PK_OK);
    CHECK_EQ_INT(gguf_add_arr(w, "a.f32", GGUF_TYPE_FLOAT32, f32s, 3), PK_OK);
    CHECK_EQ_INT(gguf_add_arr(w, "a.bool", GGUF_TYPE_BOOL, bools, 4), PK_OK);
    CHECK_EQ_INT(gguf_add_arr(w, "a.u64", GGUF_TYPE_UINT64, u64s, 2), PK_OK);
    CHECK_EQ_INT(gguf_add_arr(w, "a.i64", GGUF_TYPE_INT64, i64s, 2), PK_OK);
    CHECK_EQ_INT(gguf_add_arr(w, "a.f64", GGUF_TYPE_FLOAT64, f64s, 2), PK_OK);
    CHECK_EQ_INT(gguf_add_arr(w, "a.empty", GGUF_TYPE_INT32, NULL, 0), PK_OK);
    CHECK_EQ_INT(gguf_add_arr_str(w, "a.str", strs, 4), PK_OK);
    CHECK_EQ_INT(gguf_add_arr_str(w, "a.str_empty", NULL, 0), PK_OK);

    /* The writer refuses what the reader (or llama.cpp) would refuse. */
    CHECK_EQ_INT(gguf_add_u32(w, "t.u32", 1), PK_EINVAL);
    CHECK_EQ_INT(gguf_add_u32(w, "", 1), PK_EINVAL);
    CHECK_EQ_INT(gguf_add_u32(w, "general.alignment", 48), PK_EINVAL);
    CHECK_EQ_INT(gguf_add_i32(w, "general.alignment", 64), PK_EINVAL);
    CHECK_EQ_INT(gguf_add_arr(w, "a.bad", GGUF_TYPE_STRING, u8s, 1), PK_EINVAL);
    CHECK_EQ_INT(gguf_add_arr(w, "a.bad", GGUF_TYPE_ARRAY, u8s, 1), PK_EINVAL);
    CHECK_EQ_INT(gguf_add_arr(w, "a.bad", GGUF_TYPE_UINT64, u8s, UINT64_MAX / 4), PK_EINVAL);

    float f32t[15];
    for (int i = 0; i < 15; i++) f32t[i] = (float)i * 0.25f;
    uint8_t q8[2 * 2 * 34], q4k[2 * 144], f16t[14];
    for (size_t i = 0; i < sizeof q8; i++) q8[i] = (uint8_t)(i * 7);
    for (size_t i = 0; i < sizeof q4k; i++) q4k[i] = (uint8_t)(i * 13 + 1);
    for (size_t i = 0; i < sizeof f16t; i++) f16t[i] = (uint8_t)(200 - i);
    int64_t ne_f32[] = {5, 3}, ne_q8[] = {64, 2}, ne_f16[] = {7}, ne_q4k[] = {256, 1, 1, 2};
    CHECK_EQ_INT(gguf_add_tensor(w, "a.weight", 0, 2, ne_f32, f32t, sizeof f32t), PK_OK);
    CHECK_EQ_INT(gguf_add_tensor(w, "b.weight", 8, 2, ne_q8, q8, sizeof q8), PK_OK);
    CHECK_EQ_INT(gguf_add_tensor(w, "c", 1, 1, ne_f16, f16t, sizeof f16t), PK_OK);
    CHECK_EQ_INT(gguf_add_tensor(w, "d.4d", 12, 4, ne_q4k, q4k, sizeof q4k), PK_OK);
    CHECK_EQ_INT(gguf_add_tensor(w, "c", 1, 1, ne_f16, f16t, sizeof f16t), PK_EINVAL);
    CHECK_EQ_INT(gguf_add_tensor(w, "e", 8, 2, ne_q8, q8, sizeof q8 - 1), PK_EINVAL);
    CHECK_EQ_INT(gguf_add_tensor(w, "e", 8, 1, ne_f16, q8, 34), PK_EINVAL);   /* 7 % 32 */
    CHECK_EQ_INT(gguf_add_tensor(w, "e", 4, 1, ne_f16, q8, 14), PK_EINVAL);   /* retired id */
    CHECK_EQ_INT(gguf_add_tensor(w, "e", 0, 0, ne_f16, q8, 4), PK_EINVAL);
    CHECK_EQ_INT(gguf_add_tensor(w, "e", 0, 5, ne_q4k, q8, 4), PK_EINVAL);
    int64_t ne_zero[] = {0};
    CHECK_EQ_INT(gguf_add_tensor(w, "e", 0, 1, ne_zero, q8, 0), PK_EINVAL);
    char long_name[80];
    memset(long_name, 'x', 64);
    long_name[64] = 0;
    CHECK_EQ_INT(gguf_add_tensor(w, long_name, 0, 1, ne_f16, f32t, 28), PK_EINVAL);

    const char *path = tmp_path("rt.gguf");
    CHECK_EQ_INT(gguf_write_file(w, path), PK_OK);
    CHECK_EQ_INT(gguf_write_file(w, tmp_path("no/such/dir.gguf")), PK_EIO);

    char err[256];
    gguf_ctx *g = NULL;
    CHECK_EQ_INT(gguf_open(path, &g, err, sizeof err), PK_OK);
    if (!g) { fprintf(stderr, "open: %s\n", err); return; }
    CHECK_EQ_INT(gguf_version(g), 3);
    CHECK_EQ_INT(gguf_alignment(g), 32);
    CHECK_EQ_INT(gguf_n_kv(g), 21);
    CHECK_EQ_INT(gguf_n_tensors(g), 4);
    CHECK(gguf_str_eq(gguf_key(g, 0), "general.architecture"));
    CHECK(gguf_str_eq(gguf_key(g, 20), "a.str_empty"));
    CHECK_EQ_INT(gguf_kv_type(g, 1), GGUF_TYPE_UINT32);
    CHECK_EQ_INT(gguf_find_key(g, "t.bool"), 4);
    CHECK_EQ_INT(gguf_find_key(g, "t.boo"), -1);
    CHECK_EQ_INT(gguf_find_key(g, "t.bool2"), -1);

    int64_t iv = 99; double dv = 0; bool bv = false; gguf_str sv;
    CHECK_EQ_INT(gguf_get_int(g, "t.u32", &iv), PK_OK);   CHECK_EQ_INT(iv, 4000000000ll);
    CHECK_EQ_INT(gguf_get_int(g, "t.i32", &iv), PK_OK);   CHECK_EQ_INT(iv, -7);
    CHECK_EQ_INT(gguf_get_int(g, "t.bool", &iv), PK_OK);  CHECK_EQ_INT(iv, 1);
    iv = 99;
    CHECK_EQ_INT(gguf_get_int(g, "t.f32", &iv), PK_EFORMAT);
    CHECK_EQ_INT(gguf_get_int(g, "a.u8", &iv), PK_EFORMAT);
    CHECK_EQ_INT(gguf_get_int(g, "nope", &iv), PK_ENOTFOUND);
    CHECK_EQ_INT(iv, 99);
    CHECK_EQ_INT(gguf_get_float(g, "t.f32", &dv), PK_OK); CHECK(dv == (double)1e-5f);
    CHECK_EQ_INT(gguf_get_float(g, "t.i32", &dv), PK_EFORMAT);
    CHECK_EQ_INT(gguf_get_bool(g, "t.bool", &bv), PK_OK); CHECK(bv);
    CHECK_EQ_INT(gguf_get_bool(g, "t.u32", &bv), PK_EFORMAT);
    CHECK_EQ_INT(gguf_get_str(g, "general.architecture", &sv), PK_OK);
    CHECK(gguf_str_eq(sv, "llama"));
    CHECK_EQ_INT(gguf_get_str(g, "t.str_nul", &sv), PK_OK);
    CHECK(sv.n == 3 && memcmp(sv.p, "x\0y", 3) == 0);
    CHECK_EQ_INT(gguf_get_str(g, "t.str_empty", &sv), PK_OK); CHECK_EQ_INT(sv.n, 0);
    CHECK_EQ_INT(gguf_get_str(g, "t.u32", &sv), PK_EFORMAT);

    struct { const char *key; gguf_type t; const void *data; uint64_t n; size_t esz; } arrs[] = {
        {"a.u8", GGUF_TYPE_UINT8, u8s, 3, 1},       {"a.i8", GGUF_TYPE_INT8, i8s, 3, 1},
        {"a.u16", GGUF_TYPE_UINT16, u16s, 2, 2},    {"a.i16", GGUF_TYPE_INT16, i16s, 2, 2},
        {"a.u32", GGUF_TYPE_UINT32, u32s, 2, 4},    {"a.i32", GGUF_TYPE_INT32, i32s, 3, 4},
        {"a.f32", GGUF_TYPE_FLOAT32, f32s, 3, 4},   {"a.bool", GGUF_TYPE_BOOL, bools, 4, 1},
        {"a.u64", GGUF_TYPE_UINT64, u64s, 2, 8},    {"a.i64", GGUF_TYPE_INT64, i64s, 2, 8},
        {"a.f64", GGUF_TYPE_FLOAT64, f64s, 2, 8},   {"a.empty", GGUF_TYPE_INT32, NULL, 0, 4},
    };
    for (size_t i = 0; i < ARRAY_LEN(arrs); i++) {
        gguf_type et = GGUF_TYPE_ARRAY;
        uint64_t n = 99;
        CHECK_EQ_INT(gguf_get_arr(g, arrs[i].key, &et, &n), PK_OK);
        CHECK_EQ_INT(et, arrs[i].t);
        CHECK_EQ_INT(n, arrs[i].n);
        const void *d = gguf_arr_data(g, arrs[i].key);
        CHECK(d != NULL);
        CHECK(n == 0 || memcmp(d, arrs[i].data, n * arrs[i].esz) == 0);
    }
    gguf_type et;
    uint64_t n;
    CHECK_EQ_INT(gguf_get_arr(g, "a.str", &et, &n), PK_OK);
    CHECK_EQ_INT(et, GGUF_TYPE_STRING);
    CHECK_EQ_INT(n, 4);
    CHECK(gguf_arr_data(g, "a.str") == NULL);
    CHECK(gguf_arr_data(g, "t.u32") == NULL);
    for (uint64_t i = 0; i < 4; i++) {
        gguf_str s = gguf_arr_str(g, "a.str", i);
        CHECK(s.n == strs[i].n && (s.n == 0 || memcmp(s.p, strs[i].p, s.n) == 0));
    }
    CHECK(gguf_arr_str(g, "a.str", 4).p == NULL);
    CHECK(gguf_arr_str(g, "a.u8", 0).p == NULL);
    CHECK_EQ_INT(gguf_get_arr(g, "a.str_empty", &et, &n), PK_OK);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(gguf_get_arr(g, "t.u32", &et, &n), PK_EFORMAT);

    /* Tensors: data equal, shape padded with 1s, layout as llama.cpp writes. */
    size_t size;
    uint8_t *file = read_all(path, &size);
    CHECK_EQ_INT(size, gguf_file_size(g));
    const gguf_tensor *t = gguf_find_tensor(g, "a.weight");
    CHECK(t && t->type == 0 && t->n_dims == 2 && t->ne[0] == 5 && t->ne[1] == 3 && t->ne[2] == 1 && t->ne[3] == 1);
    CHECK(t && t->nbytes == sizeof f32t && t->offset == 0 && memcmp(t->data, f32t, sizeof f32t) == 0);
    t = gguf_find_tensor(g, "b.weight");
    CHECK(t && t->type == 8 && t->offset == 64 && t->nbytes == sizeof q8 && memcmp(t->data, q8, sizeof q8) == 0);
    t = gguf_find_tensor(g, "c");
    CHECK(t && t->offset == 64 + 160 && t->ne[0] == 7 && memcmp(t->data, f16t, sizeof f16t) == 0);
    t = gguf_find_tensor(g, "d.4d");
    CHECK(t && t->n_dims == 4 && t->ne[3] == 2 && t->offset == 64 + 160 + 32);
    CHECK(t && memcmp(t->data, q4k, sizeof q4k) == 0);
    CHECK(gguf_find_tensor(g, "d") == NULL);
    gguf_close(g);

    /* The same bytes parse from memory; the data section starts aligned. */
    g = NULL;
    CHECK_EQ_INT(gguf_open_mem(file, size, &g, err, sizeof err), PK_OK);
    if (g) {
        const uint8_t *d0 = gguf_tensor_at(g, 0)->data;
        CHECK_EQ_INT((d0 - file) % 32, 0);
        CHECK_EQ_INT(size, (size_t)(d0 - file) + 64 + 160 + 32 + 288);
        walk(g, file, size);
        rt_file = malloc(size);
        memcpy(rt_file, file, size);
        rt_size = size;

        /* Copying every kv and tensor reproduces the file byte for byte. */
        gguf_writer *w2 = gguf_writer_new();
        for (int64_t i = 0; i < gguf_n_kv(g); i++) CHECK_EQ_INT(gguf_add_kv_from(w2, g, i), PK_OK);
        CHECK_EQ_INT(gguf_add_kv_from(w2, g, 0), PK_EINVAL);
        CHECK_EQ_INT(gguf_add_kv_from(w2, g, gguf_n_kv(g)), PK_EINVAL);
        for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
            const gguf_tensor *ti = gguf_tensor_at(g, i);
            char *name = cstr(ti->name);
            CHECK_EQ_INT(gguf_add_tensor(w2, name, ti->type, ti->n_dims, ti->ne, ti->data, ti->nbytes), PK_OK);
            free(name);
        }
        const char *path2 = tmp_path("rt2.gguf");
        CHECK_EQ_INT(gguf_write_file(w2, path2), PK_OK);
        size_t size2;
        uint8_t *file2 = read_all(path2, &size2);
        CHECK(file2 && size2 == size && memcmp(file, file2, size) == 0);
        free(file2);
        gguf_writer_free(w2);
        gguf_close(g);
    }
    free(file);
    gguf_writer_free(w);

    /* A custom alignment moves every offset to its multiples. */
    w = gguf_writer_new();
    CHECK_EQ_INT(gguf_add_u32(w, "general.alignment", 128), PK_OK);
    CHECK_EQ_INT(gguf_add_tensor(w, "x", 0, 1, ne_f16, f32t, 28), PK_OK);
    CHECK_EQ_INT(gguf_add_tensor(w, "y", 0, 1, ne_f16, f32t, 28), PK_OK);
    CHECK_EQ_INT(gguf_write_file(w, path), PK_OK);
    gguf_writer_free(w);
    file = read_all(path, &size);
    g = NULL;
    CHECK_EQ_INT(gguf_open_mem(file, size, &g, err, sizeof err), PK_OK);
    if (g) {
        CHECK_EQ_INT(gguf_alignment(g), 128);
        CHECK_EQ_INT(gguf_tensor_at(g, 1)->offset, 128);
        CHECK_EQ_INT(((const uint8_t *)gguf_tensor_at(g, 0)->data - file) % 128, 0);
        CHECK_EQ_INT(size % 128, 0);
        gguf_close(g);
    }
    free(file);

    /* No tensors: still a valid file, readable back. */
    w = gguf_writer_new();
    CHECK_EQ_INT(gguf_write_file(w, path), PK_OK);
    gguf_writer_free(w);
    g = NULL;
    CHECK_EQ_INT(gguf_open(path, &g, err, sizeof err), PK_OK);
    CHECK(g && gguf_n_kv(g) == 0 && gguf_n_tensors(g) == 0 && gguf_find_key(g, "x") == -1);
    CHECK(g && gguf_find_tensor(g, "x") == NULL);
    gguf_close(g);
    gguf_close(NULL);
    gguf_writer_free(NULL);
}

/* ---- 2. hand-corrupted files ---- */

static void expect_fail(const uint8_t *buf, size_t size, const char *want, int line)
{
    guarded gb = guarded_new(size);
    char err[256] = "";
    gguf_ctx *g = NULL;
    pk_status st = gguf_open_mem(place(gb, buf, size), size, &g, err, sizeof err);
    if (st != PK_EFORMAT || !strstr(err, want)) {
        test_n_fail++;
        fprintf(stderr, "line %d: want PK_EFORMAT and '%s', got %d '%s'\n", line, want, st, err);
    } else {
        test_n_pass++;
    }
    gguf_close(g);
    guarded_free(gb);
}
#define EXPECT_FAIL(buf, size, want) expect_fail(buf, size, want, __LINE__)

static size_t find(const uint8_t *buf, size_t size, const char *s)
{
    const uint8_t *p = memmem(buf, size, s, strlen(s));
    if (!p) { fprintf(stderr, "'%s' not in the file\n", s); exit(1); }
    return (size_t)(p - buf);
}

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

static void test_corrupt(void)
{
    gguf_writer *w = gguf_writer_new();
    int32_t arr[3] = {1, 2, 3};
    float data[8] = {0};
    int64_t ne8[] = {8}, ne81[] = {8, 1};
    gguf_add_u32(w, "k.aa", 1);
    gguf_add_u32(w, "k.ab", 2);
    gguf_add_arr(w, "k.arr", GGUF_TYPE_INT32, arr, 3);
    gguf_add_u32(w, "general.alignment", 32);
    gguf_add_tensor(w, "t.a", 0, 1, ne8, data, sizeof data);
    gguf_add_tensor(w, "t.b", 0, 1, ne8, data, sizeof data);
    gguf_add_tensor(w, "t.c", 0, 2, ne81, data, sizeof data);
    const char *path = tmp_path("small.gguf");
    CHECK_EQ_INT(gguf_write_file(w, path), PK_OK);
    gguf_writer_free(w);
    size_t size;
    uint8_t *orig = read_all(path, &size), *b = malloc(size);
    char err[256];
    gguf_ctx *g = NULL;
    CHECK_EQ_INT(gguf_open_mem(orig, size, &g, err, sizeof err), PK_OK);
    gguf_close(g);

    size_t aa = find(orig, size, "k.ab"), arr_at = find(orig, size, "k.arr") + 5;
    size_t al = find(orig, size, "general.alignment") + 17;
    size_t ta = find(orig, size, "t.a") + 3, tb = find(orig, size, "t.b"), tc = find(orig, size, "t.c") + 3;
#define MUTATE(stmt, want) do { memcpy(b, orig, size); stmt; EXPECT_FAIL(b, size, want); } while (0)
    MUTATE(b[0] = 'X', "bad magic 'XGUF'");
    MUTATE(put32(b + 4, 1), "version 1 is not supported");
    MUTATE(put32(b + 4, 0x03000000), "byte-swapped");
    MUTATE(put32(b + 4, 4), "unsupported GGUF version 4");
    MUTATE(put64(b + 8, 1ull << 60), "cannot fit");
    MUTATE(put64(b + 16, 1ull << 60), "cannot fit");
    MUTATE(put64(b + 16, UINT64_MAX), "cannot fit");
    MUTATE(put64(b + 24, 0), "kv 0: empty key");
    MUTATE(put64(b + 24, UINT64_MAX), "kv 0: key");
    MUTATE(memcpy(b + aa, "k.aa", 4), "duplicate key 'k.aa' (kv 0 and kv 1)");
    MUTATE(put32(b + aa + 4, 13), "kv 1 'k.ab': unknown value type 13");
    MUTATE(put32(b + arr_at + 4, GGUF_TYPE_ARRAY), "kv 2 'k.arr': array of arrays");
    MUTATE(put32(b + arr_at + 4, 99), "unknown array element type 99");
    MUTATE(put64(b + arr_at + 8, UINT64_MAX / 2), "kv 2 'k.arr': array of");
    MUTATE(put32(b + al + 4, 48), "general.alignment': 48 is not a power of two");
    MUTATE(put32(b + al + 4, 0), "0 is not a power of two");
    MUTATE(put32(b + al, GGUF_TYPE_INT32), "expected UINT32");
    MUTATE(memcpy(b + tb, "t.a", 3), "duplicate tensor name 't.a' (tensor 0 and tensor 1)");
    MUTATE(put32(b + ta, 0), "tensor 't.a': 0 dimensions");
    MUTATE(put32(b + ta, 5), "tensor 't.a': 5 dimensions");
    MUTATE(put64(b + ta + 4, 0), "tensor 't.a': ne[0] = 0");
    MUTATE(put64(b + ta + 4, 1ull << 63), "ne[0] = 9223372036854775808");
    MUTATE((put64(b + tc + 4, 1ull << 40), put64(b + tc + 12, 1ull << 40)), "tensor 't.c': element count overflows");
    MUTATE(put32(b + ta + 12, 4), "tensor 't.a': unknown tensor type 4");
    MUTATE(put32(b + ta + 12, 40), "unknown tensor type 40");
    MUTATE(put32(b + ta + 12, 8), "row length 8 is not a multiple of the Q8_0 block size 32");
    MUTATE((put64(b + ta + 4, 1ull << 62), put32(b + ta + 12, 15)), "beyond end of file");
    MUTATE(put64(b + ta + 16, 1), "tensor 't.a': data offset 1 is not a multiple of the alignment 32");
    MUTATE(put64(b + ta + 16, 4096), "tensor 't.a': data [");
    MUTATE(put64(b + ta + 16, UINT64_MAX - 31), "beyond end of file");

    /* Truncating the last tensor names it and its byte range. */
    const gguf_tensor *t;
    g = NULL;
    gguf_open_mem(orig, size, &g, err, sizeof err);
    t = gguf_find_tensor(g, "t.c");
    size_t start = (size_t)((const uint8_t *)t->data - orig);
    char want[128];
    snprintf(want, sizeof want, "tensor 't.c': data [%zu, %zu) beyond end of file (size %zu)",
             start, start + 32, start + 31);
    memcpy(b, orig, size);
    EXPECT_FAIL(b, start + 31, want);
    gguf_close(g);
    EXPECT_FAIL(orig, 0, "magic");
    EXPECT_FAIL(orig, 3, "magic");
    EXPECT_FAIL(orig, 23, "key/value count");

    /* gguf_open: I/O errors and the path in the message. */
    CHECK_EQ_INT(gguf_open(tmp_path("missing.gguf"), &g, err, sizeof err), PK_EIO);
    CHECK(g == NULL && strstr(err, "missing.gguf") != NULL);
    CHECK_EQ_INT(gguf_open(tmp_dir, &g, err, sizeof err), PK_EIO);
    FILE *f = fopen(tmp_path("empty.gguf"), "wb");
    fclose(f);
    CHECK_EQ_INT(gguf_open(tmp_path("empty.gguf"), &g, err, sizeof err), PK_EFORMAT);
    CHECK(strstr(err, "empty.gguf: header: magic") != NULL);
    CHECK_EQ_INT(gguf_open_mem(NULL, 5, &g, err, sizeof err), PK_EINVAL);
    CHECK_EQ_INT(gguf_open_mem(orig, 3, &g, NULL, 0), PK_EFORMAT);
    free(orig);
    free(b);
}

/* ---- 3. the real files ---- */

static gguf_ctx *open_shared(const char *shared, const char *name)
{
    char path[512], err[384];
    gguf_ctx *g = NULL;
    snprintf(path, sizeof path, "%s/models/%s", shared, name);
    pk_status st = gguf_open(path, &g, err, sizeof err);
    if (st != PK_OK) {
        test_n_fail++;
        fprintf(stderr, "%s: %s\n", name, err);
        return NULL;
    }
    test_n_pass++;
    /* Key 0 follows the 24-byte header and its 8-byte length in every file. */
    const uint8_t *base = (const uint8_t *)gguf_key(g, 0).p - 32;
    if (gguf_n_kv(g) > 0) walk(g, base, gguf_file_size(g));
    return g;
}

static int64_t get_int(const gguf_ctx *g, const char *key)
{
    int64_t v = -12345;
    CHECK_EQ_INT(gguf_get_int(g, key, &v), PK_OK);
    return v;
}

static uint64_t arr_len(const gguf_ctx *g, const char *key, gguf_type want)
{
    gguf_type t = GGUF_TYPE_ARRAY;
    uint64_t n = 0;
    CHECK_EQ_INT(gguf_get_arr(g, key, &t, &n), PK_OK);
    CHECK_EQ_INT(t, want);
    return n;
}

static bool arr_str_is(const gguf_ctx *g, const char *key, uint64_t i, const char *want)
{
    return gguf_str_eq(gguf_arr_str(g, key, i), want);
}

static void check_tensor(const gguf_ctx *g, const char *name, int type, int n_dims,
                         int64_t ne0, int64_t ne1, uint64_t offset, int line)
{
    const gguf_tensor *t = gguf_find_tensor(g, name);
    if (t && t->type == type && t->n_dims == n_dims && t->ne[0] == ne0 && t->ne[1] == ne1 &&
        t->offset == offset) {
        test_n_pass++;
        return;
    }
    test_n_fail++;
    fprintf(stderr, "line %d: tensor %s: ", line, name);
    if (t) fprintf(stderr, "type %d n_dims %d ne {%lld, %lld} offset %llu\n", t->type, t->n_dims,
                   (long long)t->ne[0], (long long)t->ne[1], (unsigned long long)t->offset);
    else fprintf(stderr, "absent\n");
}
#define CHECK_TENSOR(g, name, type, n_dims, ne0, ne1, off) \
    check_tensor(g, name, type, n_dims, ne0, ne1, off, __LINE__)

static void test_real_files(const char *shared)
{
    gguf_str s;
    double d;
    gguf_ctx *g = open_shared(shared, "stories260K.gguf");
    if (g) {
        CHECK_EQ_INT(gguf_version(g), 3);
        CHECK_EQ_INT(gguf_file_size(g), 1185376);
        CHECK_EQ_INT(gguf_n_kv(g), 19);
        CHECK_EQ_INT(gguf_n_tensors(g), 48);
        CHECK(gguf_get_str(g, "general.architecture", &s) == PK_OK && gguf_str_eq(s, "llama"));
        CHECK(gguf_get_str(g, "tokenizer.ggml.model", &s) == PK_OK && gguf_str_eq(s, "llama"));
        CHECK_EQ_INT(get_int(g, "llama.embedding_length"), 64);
        CHECK_EQ_INT(get_int(g, "llama.block_count"), 5);
        CHECK_EQ_INT(get_int(g, "llama.feed_forward_length"), 172);
        CHECK_EQ_INT(get_int(g, "llama.attention.head_count"), 8);
        CHECK_EQ_INT(get_int(g, "llama.attention.head_count_kv"), 4);
        CHECK_EQ_INT(get_int(g, "tokenizer.ggml.seperator_token_id"), 4294967295ll);
        CHECK(gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", &d) == PK_OK);
        CHECK(d == (double)1e-5f);
        CHECK_EQ_INT(arr_len(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING), 512);
        CHECK(arr_str_is(g, "tokenizer.ggml.tokens", 0, "<unk>"));
        CHECK(arr_str_is(g, "tokenizer.ggml.tokens", 511, "\xe2\x80\x8a"));
        CHECK_EQ_INT(arr_len(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32), 512);
        float last;
        memcpy(&last, (const float *)gguf_arr_data(g, "tokenizer.ggml.scores") + 511, 4);
        CHECK(last == -252.0f);
        CHECK_EQ_INT(arr_len(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32), 512);
        CHECK_TENSOR(g, "token_embd.weight", 0, 2, 64, 512, 0);
        CHECK_TENSOR(g, "output_norm.weight", 0, 1, 64, 1, 131072);
        CHECK_TENSOR(g, "blk.4.ffn_norm.weight", 0, 1, 64, 1, 1170944);
        const gguf_tensor *t = gguf_find_tensor(g, "token_embd.weight");
        CHECK(t && t->nbytes == 64 * 512 * 4 && t == gguf_tensor_at(g, 0));
        /* The data section starts at 14176 and the last tensor ends the file. */
        const uint8_t *base = (const uint8_t *)gguf_key(g, 0).p - 32;
        CHECK(t && (const uint8_t *)t->data - base == 14176);
        t = gguf_tensor_at(g, 47);
        CHECK(t && (const uint8_t *)t->data + t->nbytes == base + 1185376);
        gguf_close(g);
    }

    g = open_shared(shared, "rand-qwen2-qwen2vocab-e64-l2-F16.gguf");
    if (g) {
        CHECK_EQ_INT(gguf_n_kv(g), 20);
        CHECK_EQ_INT(gguf_n_tensors(g), 26);
        CHECK(gguf_get_str(g, "general.architecture", &s) == PK_OK && gguf_str_eq(s, "qwen2"));
        CHECK(gguf_get_str(g, "tokenizer.ggml.pre", &s) == PK_OK && gguf_str_eq(s, "qwen2"));
        CHECK_EQ_INT(get_int(g, "qwen2.block_count"), 2);
        CHECK_EQ_INT(get_int(g, "general.file_type"), 1);
        CHECK(gguf_get_float(g, "qwen2.rope.freq_base", &d) == PK_OK && d == 1e6);
        CHECK_EQ_INT(arr_len(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING), 151936);
        CHECK(arr_str_is(g, "tokenizer.ggml.tokens", 0, "!"));
        CHECK(arr_str_is(g, "tokenizer.ggml.tokens", 151935, "[PAD151935]"));
        CHECK_EQ_INT(arr_len(g, "tokenizer.ggml.merges", GGUF_TYPE_STRING), 151387);
        CHECK(arr_str_is(g, "tokenizer.ggml.merges", 0, "\xc4\xa0 \xc4\xa0"));
        CHECK_EQ_INT(arr_len(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32), 151936);
        CHECK_EQ_INT(get_int(g, "tokenizer.ggml.eos_token_id"), 151643);
        CHECK_TENSOR(g, "token_embd.weight", 1, 2, 64, 151936, 0);
        CHECK_TENSOR(g, "blk.0.attn_norm.weight", 0, 1, 64, 1, 19447808);
        CHECK_TENSOR(g, "output_norm.weight", 0, 1, 64, 1, 19892224);
        const uint8_t *base = (const uint8_t *)gguf_key(g, 0).p - 32;
        CHECK((const uint8_t *)gguf_tensor_at(g, 0)->data - base == 5930176);
        gguf_close(g);
    }

    g = open_shared(shared, "rand-llama-llama3vocab-e256-l2-Q4_K_M.gguf");
    if (g) {
        CHECK_EQ_INT(gguf_n_tensors(g), 20);
        CHECK_TENSOR(g, "token_embd.weight", 14, 2, 256, 128256, 1024);
        CHECK_TENSOR(g, "blk.0.attn_k.weight", 12, 2, 256, 128, 26934784);
        CHECK_EQ_INT(gguf_find_tensor(g, "token_embd.weight")->nbytes, 128256ull * 210);
        gguf_close(g);
    }
    g = open_shared(shared, "rand-qwen3-qwen2vocab-e64-l2-Q8_0.gguf");
    if (g) {
        CHECK_EQ_INT(gguf_n_tensors(g), 24);
        CHECK_TENSOR(g, "token_embd.weight", 8, 2, 64, 151936, 256);
        CHECK_TENSOR(g, "blk.0.attn_k_norm.weight", 0, 1, 32, 1, 10336256);
        gguf_close(g);
    }
    const char *more[] = {"rand-llama-llama3vocab-e256-l2-Q4_0.gguf", "rand-llama-llama3vocab-e256-l2-Q8_0.gguf"};
    for (size_t i = 0; i < ARRAY_LEN(more); i++) {
        g = open_shared(shared, more[i]);
        CHECK(g && gguf_n_tensors(g) == 20);
        gguf_close(g);
    }

    struct { const char *file, *model, *last; uint64_t n_tokens, n_merges; int64_t bos; } vocabs[] = {
        {"vocab/ggml-vocab-deepseek-coder.gguf", "gpt2", "[PAD32255]", 32256, 31757, 32013},
        {"vocab/ggml-vocab-gpt-2.gguf", "gpt2", "<|endoftext|>", 50257, 50000, 50256},
        {"vocab/ggml-vocab-llama-spm.gguf", "llama", "\xe7\xbb\x99", 32000, 0, 1},
        {"vocab/ggml-vocab-phi-3.gguf", "llama", "[PAD32063]", 32064, 0, 1},
    };
    for (size_t i = 0; i < ARRAY_LEN(vocabs); i++) {
        g = open_shared(shared, vocabs[i].file);
        if (!g) continue;
        CHECK_EQ_INT(gguf_n_tensors(g), 0);
        CHECK(gguf_get_str(g, "tokenizer.ggml.model", &s) == PK_OK && gguf_str_eq(s, vocabs[i].model));
        uint64_t n = arr_len(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
        CHECK_EQ_INT(n, vocabs[i].n_tokens);
        CHECK(arr_str_is(g, "tokenizer.ggml.tokens", n - 1, vocabs[i].last));
        if (vocabs[i].n_merges)
            CHECK_EQ_INT(arr_len(g, "tokenizer.ggml.merges", GGUF_TYPE_STRING), vocabs[i].n_merges);
        CHECK_EQ_INT(get_int(g, "tokenizer.ggml.bos_token_id"), vocabs[i].bos);
        gguf_close(g);
    }

    /* gguf_add_kv_from: the tokenizer.* keys of a vocab into a new model file. */
    gguf_ctx *v = open_shared(shared, "vocab/ggml-vocab-gpt-2.gguf");
    if (!v) return;
    gguf_writer *w = gguf_writer_new();
    CHECK_EQ_INT(gguf_add_str(w, "general.architecture", "gpt2", 4), PK_OK);
    int64_t copied = 0;
    for (int64_t i = 0; i < gguf_n_kv(v); i++) {
        gguf_str k = gguf_key(v, i);
        if (k.n > 10 && memcmp(k.p, "tokenizer.", 10) == 0) {
            CHECK_EQ_INT(gguf_add_kv_from(w, v, i), PK_OK);
            copied++;
        }
    }
    float one = 1.0f;
    int64_t ne1[] = {1};
    CHECK_EQ_INT(gguf_add_tensor(w, "x", 0, 1, ne1, &one, 4), PK_OK);
    const char *path = tmp_path("vocabcopy.gguf");
    CHECK_EQ_INT(gguf_write_file(w, path), PK_OK);
    gguf_writer_free(w);
    char err[384];
    g = NULL;
    CHECK_EQ_INT(gguf_open(path, &g, err, sizeof err), PK_OK);
    if (g) {
        CHECK_EQ_INT(gguf_n_kv(g), copied + 1);
        for (int64_t i = 0; i < gguf_n_kv(v); i++) {
            char *key = cstr(gguf_key(v, i));
            int64_t j = gguf_find_key(g, key);
            if (strncmp(key, "tokenizer.", 10) == 0) {
                CHECK(j >= 0);
                if (j >= 0) CHECK_EQ_INT(gguf_kv_type(g, j), gguf_kv_type(v, i));
            }
            free(key);
        }
        uint64_t n = arr_len(g, "tokenizer.ggml.merges", GGUF_TYPE_STRING), same = 0;
        for (uint64_t i = 0; i < n; i++) {
            gguf_str a = gguf_arr_str(g, "tokenizer.ggml.merges", i);
            gguf_str b = gguf_arr_str(v, "tokenizer.ggml.merges", i);
            same += a.n == b.n && memcmp(a.p, b.p, a.n) == 0;
        }
        CHECK_EQ_INT(same, 50000);
        CHECK(gguf_find_tensor(g, "x") && *(const float *)gguf_find_tensor(g, "x")->data == 1.0f);
        gguf_close(g);
    }
    gguf_close(v);
}

/* ---- 4. robustness ---- */

typedef struct field { size_t at; int width; } field;

static int n_ok, n_rejected;

/* Every outcome must be a clean success or PK_EFORMAT with a one-line reason. */
static void judge(const uint8_t *buf, size_t size, const char *what, size_t arg)
{
    char err[256];
    memset(err, 0, sizeof err);
    gguf_ctx *g = NULL;
    pk_status st = gguf_open_mem(buf, size, &g, err, sizeof err);
    if (st == PK_OK) {
        n_ok++;
        walk(g, buf, size);
        gguf_close(g);
    } else if (st == PK_EFORMAT && err[0] && !strchr(err, '\n') && g == NULL) {
        n_rejected++;
    } else {
        test_n_fail++;
        fprintf(stderr, "%s %zu: status %d, err '%s'\n", what, arg, st, err);
    }
}

/* The offsets of every count, length, type and offset field, found through
 * the reader's own pointers into buf. */
static field *header_fields(const gguf_ctx *g, const uint8_t *buf, size_t *n_out)
{
    size_t cap = 64, n = 0;
    field *f = malloc(cap * sizeof *f);
#define ADD(pos, w) do { if (n == cap) f = realloc(f, (cap *= 2) * sizeof *f); \
                         f[n++] = (field){(size_t)(pos), (w)}; } while (0)
    ADD(4, 4); ADD(8, 8); ADD(16, 8);
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        gguf_str k = gguf_key(g, i);
        size_t at = (size_t)((const uint8_t *)k.p - buf);
        ADD(at - 8, 8);
        ADD(at + k.n, 4);
        gguf_type t = gguf_kv_type(g, i);
        if (t == GGUF_TYPE_STRING) ADD(at + k.n + 4, 8);
        if (t != GGUF_TYPE_ARRAY) continue;
        ADD(at + k.n + 4, 4);
        ADD(at + k.n + 8, 8);
        char *key = cstr(k);
        gguf_type et;
        uint64_t len;
        gguf_get_arr(g, key, &et, &len);
        for (uint64_t e = 0; et == GGUF_TYPE_STRING && e < len; e++)
            ADD((const uint8_t *)gguf_arr_str(g, key, e).p - buf - 8, 8);
        free(key);
    }
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        size_t at = (size_t)((const uint8_t *)t->name.p - buf);
        ADD(at - 8, 8);
        at += t->name.n;
        ADD(at, 4);
        for (int d = 0; d < t->n_dims; d++) ADD(at + 4 + 8 * (size_t)d, 8);
        ADD(at + 4 + 8 * (size_t)t->n_dims, 4);
        ADD(at + 8 + 8 * (size_t)t->n_dims, 8);
    }
#undef ADD
    *n_out = n;
    return f;
}

static uint64_t interesting(uint64_t old, size_t size)
{
    static const uint64_t v[] = {
        0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 14, 15, 16, 31, 32, 33, 64, 255, 256,
        0x7fff, 0xffff, 0x7fffffff, 0x80000000, 0xffffffff, 0x100000000ull,
        1ull << 60, 0x7fffffffffffffffull, 0x8000000000000000ull, UINT64_MAX, UINT64_MAX - 7,
    };
    switch (rng() % 6) {
    case 0: return old + 1;
    case 1: return old - 1;
    case 2: return old * 2;
    case 3: return rng() % (size + 64);
    case 4: return rng();
    default: return v[rng() % ARRAY_LEN(v)];
    }
}

/* judge() returns whether the buffer parsed. */
static bool judged_ok(const uint8_t *buf, size_t size, const char *what, size_t arg)
{
    int before = n_ok;
    judge(buf, size, what, arg);
    return n_ok > before;
}

/* Truncations of file: every length below `dense`, then every `stride`.  A
 * prefix must parse exactly when it holds all tensor data (for a file
 * without tensors, the whole file). */
static void sweep_truncations(const char *label, const uint8_t *file, size_t size,
                              size_t dense, size_t stride)
{
    gguf_ctx *g = NULL;
    char err[256];
    CHECK_EQ_INT(gguf_open_mem(file, size, &g, err, sizeof err), PK_OK);
    if (!g) return;
    size_t need = gguf_n_tensors(g) ? 0 : size;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        need = MAX(need, (size_t)((const uint8_t *)t->data - file) + t->nbytes);
    }
    gguf_close(g);
    guarded gb = guarded_new(size);
    int wrong = 0;
    for (size_t len = 0;; len = MIN(size, len + (len < dense ? 1 : stride))) {
        if (judged_ok(place(gb, file, len), len, label, len) != (len >= need) && wrong++ < 5)
            fprintf(stderr, "%s %zu of %zu (data ends at %zu): parsed %s\n",
                    label, len, size, need, len >= need ? "no" : "yes");
        if (len == size) break;
    }
    CHECK_EQ_INT(wrong, 0);
    guarded_free(gb);
}

/* Corruptions of the whole file in place, each undone after its parse. */
static void sweep_corruptions(const char *label, const uint8_t *file, size_t size, int n)
{
    guarded gb = guarded_new(size);
    uint8_t *buf = place(gb, file, size);
    gguf_ctx *g = NULL;
    char err[256];
    CHECK_EQ_INT(gguf_open_mem(buf, size, &g, err, sizeof err), PK_OK);
    if (!g) return;
    size_t n_fields;
    field *fields = header_fields(g, buf, &n_fields);
    size_t header_end = gguf_n_tensors(g) ? (size_t)((const uint8_t *)gguf_tensor_at(g, 0)->data - buf) : size;
    gguf_close(g);
    for (int it = 0; it < n; it++) {
        size_t lo = size, hi = 0;
        int n_mut = it % 8 == 7 ? 2 + (int)(rng() % 3) : 1;
        for (int m = 0; m < n_mut; m++) {
            size_t at, w = 1;
            int kind = (int)(rng() % 8);
            if (kind < 4) {                     /* a count, length, type or offset */
                field f = fields[rng() % n_fields];
                uint64_t old = 0, v;
                at = f.at;
                w = (size_t)f.width;
                memcpy(&old, buf + at, w);
                v = interesting(old, size);
                memcpy(buf + at, &v, w);
            } else if (kind < 6) {              /* one header byte */
                at = rng() % header_end;
                buf[at] = (uint8_t)rng();
            } else if (kind < 7) {              /* one header bit */
                at = rng() % header_end;
                buf[at] ^= (uint8_t)(1u << (rng() % 8));
            } else {                            /* anywhere */
                at = rng() % size;
                buf[at] = (uint8_t)rng();
            }
            lo = MIN(lo, at);
            hi = MAX(hi, at + w);
        }
        judge(buf, size, label, (size_t)it);
        memcpy(buf + lo, file + lo, hi - lo);
    }
    free(fields);
    guarded_free(gb);
}

/* The writer's own file always; stories260K.gguf and a vocab when present. */
static void test_robust(const char *shared)
{
    double t0 = pk_time_ms();
    sweep_truncations("rt.gguf truncated to", rt_file, rt_size, rt_size, 1);
    sweep_corruptions("rt.gguf corruption", rt_file, rt_size, 5000);
    printf("robustness rt.gguf (%zu bytes): %d parsed, %d rejected, %.0f ms\n",
           rt_size, n_ok, n_rejected, pk_time_ms() - t0);
    n_ok = n_rejected = 0;
    if (!shared) return;

    char path[512];
    size_t size;
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", shared);
    uint8_t *file = read_all(path, &size);
    CHECK(file != NULL);
    if (file) {
        t0 = pk_time_ms();
        sweep_truncations("stories260K truncated to", file, size, 65536, 4096);
        double t1 = pk_time_ms();
        sweep_corruptions("stories260K corruption", file, size, 20000);
        printf("robustness stories260K: %d parsed, %d rejected; truncations %.0f ms, corruptions %.0f ms\n",
               n_ok, n_rejected, t1 - t0, pk_time_ms() - t1);
        n_ok = n_rejected = 0;
        free(file);
    }
    /* The string-heavy vocab, truncated at a stride. */
    snprintf(path, sizeof path, "%s/models/vocab/ggml-vocab-gpt-2.gguf", shared);
    file = read_all(path, &size);
    CHECK(file != NULL);
    if (file) {
        t0 = pk_time_ms();
        sweep_truncations("gpt-2 vocab truncated to", file, size, 0, 4093);
        printf("robustness gpt-2 vocab: %d parsed, %d rejected, %.0f ms\n",
               n_ok, n_rejected, pk_time_ms() - t0);
        free(file);
    }
}

/* ---- main ---- */

static void remove_tmp_dir(void)
{
    static const char *names[] = {"rt.gguf", "rt2.gguf", "small.gguf", "empty.gguf", "vocabcopy.gguf"};
    for (size_t i = 0; i < ARRAY_LEN(names); i++) unlink(tmp_path(names[i]));
    rmdir(tmp_dir);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/test_gguf_XXXXXX");
    if (!mkdtemp(tmp_dir)) { perror("mkdtemp"); return 1; }
    TEST_RUN(test_round_trip);
    TEST_RUN(test_corrupt);
    const char *shared = test_shared_dir();
    if (shared) test_real_files(shared);
    TEST_RUN(test_robust, shared);
    free(rt_file);
    remove_tmp_dir();
    if (!shared) SKIP_PART("../shared absent: real-file tests and their robustness sweeps not run");
    return test_finish();
}
