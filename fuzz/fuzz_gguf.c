/*
 * fuzz_gguf.c - libFuzzer entry point for the GGUF reader.
 *
 * Opens the input with gguf_open_mem and, when it parses, walks every
 * accessor the way a model loader or tokenizer would, then copies every
 * key/value and tensor into a writer.  ASan catches any read outside the
 * input; the checks below trap when an accessor breaks a promise of gguf.h
 * (data outside the input, a lookup that finds the wrong entry).
 */
#include "../src/gguf/gguf.h"

#include <stdlib.h>
#include <string.h>

#define REQUIRE(x) do { if (!(x)) __builtin_trap(); } while (0)

static volatile unsigned sink;

static char *cstr(gguf_str s)
{
    char *c = malloc(s.n + 1);
    REQUIRE(c);
    memcpy(c, s.p, s.n);
    c[s.n] = 0;
    return c;
}

static void in_input(const void *p, uint64_t n, const uint8_t *data, size_t size)
{
    const uint8_t *q = p;
    REQUIRE(q >= data && q <= data + size && n <= (uint64_t)(data + size - q));
    if (n) sink += q[0] + q[n - 1];
}

static void walk_kv(const gguf_ctx *g, int64_t i, const uint8_t *data, size_t size)
{
    gguf_str k = gguf_key(g, i);
    in_input(k.p, k.n, data, size);
    char *key = cstr(k);
    int64_t j = gguf_find_key(g, key);
    REQUIRE(j == i || memchr(k.p, 0, k.n));
    gguf_type t = gguf_kv_type(g, i), et;
    int64_t iv; double dv; bool bv; gguf_str sv; uint64_t n;
    sink += gguf_get_int(g, key, &iv) == PK_OK;
    sink += gguf_get_float(g, key, &dv) == PK_OK;
    sink += gguf_get_bool(g, key, &bv) == PK_OK;
    if (gguf_get_str(g, key, &sv) == PK_OK) in_input(sv.p, sv.n, data, size);
    if (j == i && t == GGUF_TYPE_ARRAY) {
        REQUIRE(gguf_get_arr(g, key, &et, &n) == PK_OK);
        const void *d = gguf_arr_data(g, key);
        if (et == GGUF_TYPE_STRING) {
            REQUIRE(d == NULL);
            for (uint64_t e = 0; e < n; e++) {
                gguf_str s = gguf_arr_str(g, key, e);
                in_input(s.p, s.n, data, size);
            }
            REQUIRE(gguf_arr_str(g, key, n).p == NULL);
        } else {
            size_t esz = et == GGUF_TYPE_UINT8 || et == GGUF_TYPE_INT8 || et == GGUF_TYPE_BOOL ? 1
                       : et == GGUF_TYPE_UINT16 || et == GGUF_TYPE_INT16 ? 2
                       : et == GGUF_TYPE_UINT64 || et == GGUF_TYPE_INT64 || et == GGUF_TYPE_FLOAT64 ? 8 : 4;
            REQUIRE(d != NULL);
            in_input(d, n * esz, data, size);
        }
    }
    free(key);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gguf_ctx *g = NULL;
    char err[256];
    pk_status st = gguf_open_mem(data, size, &g, err, sizeof err);
    if (st != PK_OK) {
        REQUIRE(g == NULL && err[0] && !strchr(err, '\n'));
        return 0;
    }
    REQUIRE(gguf_version(g) == 2 || gguf_version(g) == 3);
    REQUIRE(gguf_file_size(g) == size);
    size_t align = gguf_alignment(g);
    REQUIRE(align && (align & (align - 1)) == 0);
    for (int64_t i = 0; i < gguf_n_kv(g); i++) walk_kv(g, i, data, size);
    REQUIRE(gguf_key(g, -1).p == NULL && gguf_key(g, gguf_n_kv(g)).p == NULL);
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        REQUIRE(t && t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS && t->nbytes > 0);
        for (int d = 0; d < GGUF_MAX_DIMS; d++) REQUIRE(t->ne[d] >= 1);
        in_input(t->name.p, t->name.n, data, size);
        in_input(t->data, t->nbytes, data, size);
        REQUIRE((size_t)((const uint8_t *)t->data - data) % align == 0);
        char *name = cstr(t->name);
        REQUIRE(gguf_find_tensor(g, name) == t || memchr(t->name.p, 0, t->name.n));
        free(name);
    }
    REQUIRE(gguf_tensor_at(g, gguf_n_tensors(g)) == NULL);

    /* What parsed must copy: every kv, and every tensor the writer allows. */
    gguf_writer *w = gguf_writer_new();
    REQUIRE(w);
    for (int64_t i = 0; i < gguf_n_kv(g); i++) REQUIRE(gguf_add_kv_from(w, g, i) == PK_OK);
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        char *name = cstr(t->name);
        st = gguf_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data, t->nbytes);
        REQUIRE(st == PK_OK || st == PK_EINVAL);   /* long or NUL-holding names */
        free(name);
    }
    gguf_writer_free(w);
    gguf_close(g);
    return 0;
}
