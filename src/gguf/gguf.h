/*
 * gguf.h - reading and writing GGUF files (versions 2 and 3).
 *
 * DESIGN: the reader maps the file read-only and never copies tensor data or
 * strings: a gguf_str points into the mapping and is NOT NUL-terminated.
 * Parsing checks every count, length, offset and alignment against the
 * mapped size before it reads, so a truncated, corrupted or hostile file gives
 * PK_EFORMAT and a message (never a crash or an out-of-bounds read).  After a
 * successful open every accessor is a bounds-checked lookup into tables built
 * at open time.
 *
 * Invariants after gguf_open: every tensor's [offset, offset + nbytes) lies
 * inside the data section, its type is known, its shape's element count does
 * not overflow and is a multiple of the type's block size; every array's
 * elements lie inside the file.
 *
 * Threads: a gguf_ctx is immutable after open; any thread may read it.
 */
#ifndef GGUF_H
#define GGUF_H

#include "../common/pk.h"

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

typedef enum gguf_type {
    GGUF_TYPE_UINT8 = 0, GGUF_TYPE_INT8 = 1, GGUF_TYPE_UINT16 = 2, GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4, GGUF_TYPE_INT32 = 5, GGUF_TYPE_FLOAT32 = 6, GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8, GGUF_TYPE_ARRAY = 9, GGUF_TYPE_UINT64 = 10, GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
} gguf_type;

typedef struct gguf_str { const char *p; uint64_t n; } gguf_str;  /* not NUL-terminated */

typedef struct gguf_tensor {
    gguf_str name;
    int type;                      /* tq_type id */
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];     /* ne[0] = row length (fastest); unused dims = 1 */
    uint64_t offset;               /* from the start of the data section */
    const void *data;              /* into the mapping */
    size_t nbytes;
} gguf_tensor;

typedef struct gguf_ctx gguf_ctx;

/* Opens and validates a file (mmap).  On error returns PK_EIO / PK_EFORMAT /
 * PK_ENOMEM and writes a one-line reason into err (may be NULL): the path,
 * then the item and offset, e.g. "m.gguf: tensor 'output.weight': data
 * [x, y) beyond end of file (size z)".  GGUF v1 and big-endian files are
 * PK_EFORMAT.  *out is NULL on error.  The file must not shrink while open
 * (a mapping past its end faults). */
pk_status gguf_open(const char *path, gguf_ctx **out, char *err, size_t err_len);
/* The same over a caller-owned buffer that must outlive the ctx (fuzzing,
 * tests); it is never read outside [data, data + size).  PK_EINVAL when data
 * is NULL and size is not 0. */
pk_status gguf_open_mem(const void *data, size_t size, gguf_ctx **out, char *err, size_t err_len);
void gguf_close(gguf_ctx *g);      /* NULL is a no-op */

uint32_t gguf_version(const gguf_ctx *g);
size_t gguf_file_size(const gguf_ctx *g);
/* The file's first byte: every tensor's data is at an offset from here. */
const void *gguf_file_data(const gguf_ctx *g);
size_t gguf_alignment(const gguf_ctx *g);

/* Key/values.  Index-based; gguf_find_key returns -1 when absent.  Indices
 * follow the file's order.  gguf_key is {NULL,0} for an index out of range;
 * gguf_kv_type requires 0 <= i < gguf_n_kv (ASSERT).  Lookups are binary
 * searches over an index sorted at open: O(log n_kv). */
int64_t gguf_n_kv(const gguf_ctx *g);
int64_t gguf_find_key(const gguf_ctx *g, const char *key);
gguf_str gguf_key(const gguf_ctx *g, int64_t i);
gguf_type gguf_kv_type(const gguf_ctx *g, int64_t i);

/* Typed getters by key name.  They return PK_ENOTFOUND when the key is absent
 * and PK_EFORMAT when its type does not fit; *out is untouched then.
 * gguf_get_int accepts any integer type (and bool) whose value fits in int64;
 * gguf_get_float accepts FLOAT32/FLOAT64. */
pk_status gguf_get_int(const gguf_ctx *g, const char *key, int64_t *out);
pk_status gguf_get_float(const gguf_ctx *g, const char *key, double *out);
pk_status gguf_get_bool(const gguf_ctx *g, const char *key, bool *out);
pk_status gguf_get_str(const gguf_ctx *g, const char *key, gguf_str *out);

/* Arrays: element type and count; raw elements for numeric arrays (little
 * endian, packed), strings one by one.  PK_EFORMAT when not an array.
 * gguf_arr_data points into the file and may be misaligned for its element
 * type: read it with memcpy.  gguf_arr_str is O(log n_kv) per call. */
pk_status gguf_get_arr(const gguf_ctx *g, const char *key, gguf_type *elem_type, uint64_t *n);
const void *gguf_arr_data(const gguf_ctx *g, const char *key);     /* NULL for string arrays */
gguf_str gguf_arr_str(const gguf_ctx *g, const char *key, uint64_t i); /* {NULL,0} when out of range */

/* Tensors, in file order; gguf_tensor_at is NULL out of range. */
int64_t gguf_n_tensors(const gguf_ctx *g);
const gguf_tensor *gguf_tensor_at(const gguf_ctx *g, int64_t i);
const gguf_tensor *gguf_find_tensor(const gguf_ctx *g, const char *name);  /* NULL when absent */

/* True when s equals the NUL-terminated c. */
bool gguf_str_eq(gguf_str s, const char *c);

/*
 * Writer: collect key/values and tensors, then write a GGUF v3 file.
 * Keys are written in the order added; tensors too, each aligned to 32.
 * Strings and data are copied at add time, so the caller's may go away.
 * The layout is llama.cpp's (copying one of its files key by key and tensor
 * by tensor gives the same bytes).
 *
 * The add functions return PK_OK, PK_ENOMEM, or PK_EINVAL for what a reader
 * would refuse: an empty or already added key, a NULL pointer with a
 * non-zero count, a STRING/ARRAY element type in gguf_add_arr, and
 * "general.alignment" other than a power-of-two u32 (when valid it sets the
 * alignment of the layout).  A writer is used by one thread at a time.
 */
typedef struct gguf_writer gguf_writer;
gguf_writer *gguf_writer_new(void);                 /* NULL on no memory */
void gguf_writer_free(gguf_writer *w);
pk_status gguf_add_u32(gguf_writer *w, const char *key, uint32_t v);
pk_status gguf_add_i32(gguf_writer *w, const char *key, int32_t v);
pk_status gguf_add_f32(gguf_writer *w, const char *key, float v);
pk_status gguf_add_bool(gguf_writer *w, const char *key, bool v);
pk_status gguf_add_str(gguf_writer *w, const char *key, const char *v, size_t n);
/* Numeric array of n elements of elem_type, raw packed little-endian data. */
pk_status gguf_add_arr(gguf_writer *w, const char *key, gguf_type elem_type, const void *data, uint64_t n);
pk_status gguf_add_arr_str(gguf_writer *w, const char *key, const gguf_str *v, uint64_t n);
/* Copies the key/value at index i of a reader (any type, arrays included).
 * PK_EINVAL when i is out of range or the key was already added. */
pk_status gguf_add_kv_from(gguf_writer *w, const gguf_ctx *src, int64_t i);
/* PK_EINVAL when the name is empty, longer than 63 bytes (llama.cpp's limit)
 * or already added, the type unknown, n_dims outside 1..4, an ne[d] < 1, ne[0]
 * not a multiple of the type's block size, or nbytes not the shape's size. */
pk_status gguf_add_tensor(gguf_writer *w, const char *name, int type, int n_dims,
                          const int64_t *ne, const void *data, size_t nbytes);
/* Writes path.tmp.XXXXXX next to path, fsyncs it and renames it over path;
 * PK_EIO (and no file left behind) when any step fails. */
pk_status gguf_write_file(const gguf_writer *w, const char *path);

#endif
