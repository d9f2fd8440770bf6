/*
 * sav.h - the file format of saved KV state (slot saves, --pool-dir pools):
 * one header, the tokens, and the K/V rows of a range of positions.
 *
 * DESIGN
 *   A file is read whole and trusted only after every check passes: its
 *   size equals what the header says, the header's own checksum and the
 *   payload's (XXH3-64) match, and the model fingerprint, KV type and row
 *   sizes equal the running model's.  Anything else is refused with a
 *   reason, never loaded wrong.
 *
 *     offset 0   token list, in llama-server's slot-file layout (so tools
 *                that read or rewrite that layout's head work on ours):
 *                  magic "PKVT", list version 1, n_words, then n_words
 *                  u32: written packed as llama-server's current files,
 *                  [0xFFFFFFFF][1][n_tokens][tokens], read also plain,
 *                  [tokens], as its older files hold them
 *     12+4*n_words  header (SAV_HEADER_BYTES, little-endian fields)
 *                  magic "PKVSTATE", version, kind, fingerprint,
 *                  kv_type, n_layer, k_row_bytes, v_row_bytes,
 *                  n_tokens, row_first, pool_id, parent, branch_pos,
 *                  flags, payload_bytes, payload_xxh3, header_xxh3,
 *                  state_bytes
 *     + header   tokens   [n_tokens] int32
 *                rows     [n_tokens - row_first][n_layer][K row | V row]
 *                states   [state_bytes]: a hybrid model's recurrent state
 *                         at n_tokens and its checkpoints (mem.h's image
 *                         states section, docs/hybrid.md); 0 bytes
 *                         otherwise, so files of attention-only models are
 *                         as before
 *
 *   The list ahead of the header repeats the payload's tokens, which the
 *   checksum covers; a file is refused unless both agree.  A file that
 *   begins with the header (earlier builds wrote no list) is read too.
 *
 *   row_first is the first position whose rows the file holds: 0 for a
 *   slot; a child pool's branch_pos (its parent holds the rest).
 *
 *   Writes are crash-safe: a temporary file in the same directory, fsync,
 *   rename over the name, fsync of the directory.  A crash leaves either
 *   the old file, the new one, or a stray "*.tmp" that readers ignore:
 *   "pool-N.pkv.tmp" for a pool, ".NAME.RANDOM.tmp" for a slot save (a
 *   name no client can give, so a save never touches a client's file).
 *
 * Threads: every function is reentrant; files are the caller's business.
 */
#ifndef SAV_H
#define SAV_H

#include <stddef.h>

#include "../common/pk.h"

#define SAV_VERSION 1
#define SAV_HEADER_BYTES 96
#define SAV_NAME_MAX 200        /* bytes of a file name given by a client */

typedef enum sav_kind { SAV_SLOT = 1, SAV_POOL = 2 } sav_kind;

#define SAV_FLAG_PINNED 1u

typedef struct sav_header {
    uint32_t version;
    uint32_t kind;              /* sav_kind */
    uint64_t fingerprint;       /* of the model (sav_fingerprint) */
    uint32_t kv_type;           /* sav_kv_type of the rows' K and V types */
    uint32_t n_layer;
    uint32_t k_row_bytes, v_row_bytes;
    uint32_t n_tokens;
    uint32_t row_first;         /* rows held for positions [row_first, n_tokens) */
    int32_t pool_id, parent, branch_pos;   /* pools; 0, -1, 0 for a slot */
    uint32_t flags;             /* SAV_FLAG_* */
    uint64_t payload_bytes;     /* tokens + rows + state */
    uint32_t state_bytes;       /* the recurrent states after the rows (hybrids), else 0 */
} sav_header;

/* What the reader requires of a file: the running model and cache. */
typedef struct sav_expect {
    uint64_t fingerprint;
    uint32_t kv_type, n_layer, k_row_bytes, v_row_bytes, state_bytes;
    uint32_t max_tokens;        /* longest prefix accepted */
    uint32_t n_vocab;           /* every token must be below it */
} sav_expect;

/* The header's kv_type for K rows of type k and V rows of type v: k's
 * tq_type when both are the same (what files held before the two could
 * differ), else k | (v + 1) << 16. */
static inline uint32_t sav_kv_type(uint32_t k, uint32_t v) { return k == v ? k : k | (v + 1) << 16; }

/* Bytes of a whole file with header h (its counts), as sav_encode writes
 * it, 0 when they overflow; sav_head_bytes: where its header starts. */
uint64_t sav_file_bytes(const sav_header *h);
uint64_t sav_head_bytes(const sav_header *h);
/* Bytes of the rows of one position. */
uint64_t sav_row_bytes(const sav_header *h);

/* A client-given file name: 1..SAV_NAME_MAX bytes, no '/', no NUL, not "."
 * or "..", no leading '.', printable ASCII only, so that it names a file
 * inside the save directory and nothing else.  true when acceptable. */
bool sav_name_ok(const char *name, size_t len);

/* Checks buf[0, n) as a file for `want`: PK_OK with *h filled and *tokens,
 * *rows pointing into buf; PK_EFORMAT (truncated, bad magic, checksum,
 * counts, a token outside the vocabulary) or PK_EUNSUPPORTED (another version, model, KV type or row
 * size), with the reason in why[cap]. */
pk_status sav_parse(const void *buf, size_t n, const sav_expect *want, sav_header *h, const int32_t **tokens,
                    const uint8_t **rows, char *why, size_t cap);

/* Reads path whole into *buf (malloc'ed, the caller frees it) and parses
 * it as sav_parse does; PK_ENOTFOUND when it does not exist, PK_EIO when
 * it cannot be read, PK_EFORMAT when it is not a regular file (a
 * directory) or its size is not the header's.  *buf is NULL on failure. */
pk_status sav_read(const char *path, const sav_expect *want, uint8_t **buf, sav_header *h,
                   const int32_t **tokens, const uint8_t **rows, char *why, size_t cap);

/* Writes dir/name crash-safely (see DESIGN) from the header and the
 * payload: tokens[h->n_tokens], rows[(n_tokens - row_first) * row bytes].
 * The checksums and payload_bytes are computed here.  max_dir_bytes > 0
 * bounds the directory: when the regular files in it (temporaries too,
 * the file this one replaces not) plus sav_file_bytes(h) would pass it,
 * nothing is written.  The bound holds between saves; during one the old
 * file and the new one's temporary are both there.  delay_ms > 0 sleeps
 * between the write and the rename (the kill -9 test's window).
 * PK_EFULL (over the bound, or the file system says ENOSPC / EDQUOT),
 * PK_EIO (reason in why), PK_EINVAL for a name sav_name_ok refuses,
 * PK_ENOMEM; after any error no new file is left in dir. */
pk_status sav_write(const char *dir, const char *name, const sav_header *h, const int32_t *tokens,
                    const uint8_t *rows, uint64_t max_dir_bytes, int delay_ms, char *why, size_t cap);

/* Serializes into buf[sav_file_bytes(h)] (tests and fuzz seeds). */
void sav_encode(const sav_header *h, const int32_t *tokens, const uint8_t *rows, uint8_t *buf);

/* 64-bit fingerprint of a model's hyper-parameters and tensor metadata
 * (names, types, shapes), as bytes fed in order by the caller: start with
 * SAV_FP_SEED, fold each piece with sav_fp_add. */
#define SAV_FP_SEED 0x504b5653u
uint64_t sav_fp_add(uint64_t fp, const void *data, size_t n);

#endif
