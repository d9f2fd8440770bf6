/*
 * gguf_impl.h - what the GGUF reader (gguf.c) and writer (gguf_write.c)
 * share and nobody else sees: the tensor type table and the reader's layout,
 * which gguf_add_kv_from walks to copy a key/value byte for byte.
 *
 * The type table is local on purpose: the file format only needs each type's
 * block size and bytes per block to bound-check a tensor, and keeping it here
 * lets the parser stand alone (fuzzing builds nothing else).
 */
#ifndef GGUF_IMPL_H
#define GGUF_IMPL_H

#include "gguf.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader maps little-endian files as they are: little-endian hosts only"
#endif

/* Block layout of a tensor type: blck values stored in size bytes. */
typedef struct gguf_ttype {
    const char *name;   /* NULL: the id is not a type GGUF files may use */
    uint32_t blck;
    uint32_t size;
} gguf_ttype;

/* Layout of type id t; NULL when t is unknown.  Thread-safe (static table). */
const gguf_ttype *gguf_ttype_get(uint32_t t);

/* Bytes of one scalar of a numeric/bool gguf_type; 0 for STRING, ARRAY and
 * unknown types. */
size_t gguf_scalar_size(uint32_t t);

/* One key/value as parsed.  Everything points into the caller's buffer. */
typedef struct gguf_kv {
    gguf_str key;              /* first member: the name sort relies on it */
    gguf_type type;
    gguf_type elem;            /* ARRAY: element type */
    uint64_t n;                /* ARRAY: elements; STRING: bytes */
    const uint8_t *val;        /* scalar bytes, string bytes, or packed array elements */
    uint64_t str0;             /* ARRAY of STRING: first element in gguf_ctx.strs */
} gguf_kv;

struct gguf_ctx {
    const uint8_t *base;       /* the whole file */
    size_t size;
    void *map;                 /* our mmap (gguf_open) or NULL (gguf_open_mem) */
    size_t map_len;
    uint32_t version;
    size_t alignment;
    size_t data_off;           /* start of the data section, from base */

    int64_t n_kv;
    gguf_kv *kv;               /* [n_kv] in file order */
    size_t *kv_sorted;         /* [n_kv] indices into kv, by key bytes */

    int64_t n_tensors;
    gguf_tensor *tensors;      /* [n_tensors] in file order */
    size_t *t_sorted;          /* [n_tensors] indices into tensors, by name */

    gguf_str *strs;            /* elements of every string array, in file order */
    uint64_t n_strs, cap_strs;
};

#endif
