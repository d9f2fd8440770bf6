/*
 * sav.c - the saved-KV file format (sav.h): encode, parse with every check,
 * and the crash-safe write.
 *
 *   token list    [0, 4) "PKVT"  [4, 8) 1  [8, 12) n_words  [12, 12 + 4 n_words) words
 *   header bytes  [0, 8) magic   [8, 72) fields   [72, 80) payload_xxh3
 *                 [80, 88) header_xxh3 of [0, 80)   [88, 96) zero
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "sav.h"
#include "../tensor/tq.h"

static const char magic[8] = { 'P', 'K', 'V', 'S', 'T', 'A', 'T', 'E' };
static const char list_magic[4] = { 'P', 'K', 'V', 'T' };
#define LIST_VERSION 1
#define LIST_HEAD 12               /* magic, version, n_words */
#define PACKED_MARK 0xFFFFFFFFu    /* llama.cpp's LLAMA_TOKEN_NULL: a packed list's first word */
#define PACKED_HEAD 12             /* mark, packed version, n_tokens */

/* Writes the reason into why[cap] and returns st. */
static pk_status fail(pk_status st, char *why, size_t cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static pk_status fail(pk_status st, char *why, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (cap) vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return st;
}

static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get64(const uint8_t *p) { return get32(p) | (uint64_t)get32(p + 4) << 32; }

uint64_t sav_row_bytes(const sav_header *h)
{
    return (uint64_t)h->n_layer * ((uint64_t)h->k_row_bytes + h->v_row_bytes);
}

/* The rows of [row_first, n_tokens), then the recurrent state at n_tokens. */
static uint64_t blob_bytes(const sav_header *h)
{
    return (uint64_t)(h->n_tokens - h->row_first) * sav_row_bytes(h) + h->state_bytes;
}

static uint64_t payload_bytes(const sav_header *h)
{
    if (h->row_first > h->n_tokens) return UINT64_MAX;
    /* Counts are 32-bit, so this cannot wrap; the cap keeps a hostile
     * header from asking for an absurd read. */
    return (uint64_t)h->n_tokens * 4 + blob_bytes(h);
}

uint64_t sav_head_bytes(const sav_header *h) { return LIST_HEAD + PACKED_HEAD + (uint64_t)h->n_tokens * 4; }

uint64_t sav_file_bytes(const sav_header *h)
{
    uint64_t p = payload_bytes(h);
    return p == UINT64_MAX ? 0 : sav_head_bytes(h) + SAV_HEADER_BYTES + p;
}

/* The token list ahead of the header (packed), into b[sav_head_bytes(h)]. */
static void encode_list(const sav_header *h, const int32_t *tokens, uint8_t *b)
{
    memcpy(b, list_magic, 4);
    put32(b + 4, LIST_VERSION);
    put32(b + 8, h->n_tokens + PACKED_HEAD / 4);
    put32(b + 12, PACKED_MARK);
    put32(b + 16, 1);
    put32(b + 20, h->n_tokens);
    memcpy(b + LIST_HEAD + PACKED_HEAD, tokens, (size_t)h->n_tokens * 4);
}

/* Where the header of b[0, n) starts: 0 for a file without a token list,
 * else after the list, whose head is checked here (the list itself is
 * compared with the payload once that is verified). */
static pk_status find_header(const uint8_t *b, size_t n, uint32_t max_tokens, size_t *at, char *why, size_t cap)
{
    if (n >= 8 && !memcmp(b, magic, 8)) {
        *at = 0;
        return PK_OK;
    }
    if (n < LIST_HEAD)
        return fail(PK_EFORMAT, why, cap, "truncated: %zu bytes, the token list's head alone has %d", n,
                    LIST_HEAD);
    if (memcmp(b, list_magic, 4)) return fail(PK_EFORMAT, why, cap, "not a polykv state file (bad magic)");
    if (get32(b + 4) != LIST_VERSION)
        return fail(PK_EUNSUPPORTED, why, cap, "token list version %u (this build reads %d)", get32(b + 4),
                    LIST_VERSION);
    uint32_t words = get32(b + 8);
    if (words > max_tokens + PACKED_HEAD / 4)
        return fail(PK_EFORMAT, why, cap, "a token list of %u words (at most %u tokens fit)", words,
                    max_tokens);
    *at = LIST_HEAD + (size_t)words * 4;
    return PK_OK;
}

/* The token list of b (whose header starts at `at`) equals tok[0, n). */
static pk_status check_list(const uint8_t *b, size_t at, const int32_t *tok, uint32_t n, char *why,
                            size_t cap)
{
    if (at == 0) return PK_OK;
    uint32_t words = get32(b + 8);
    const uint8_t *w = b + LIST_HEAD;
    if (words >= PACKED_HEAD / 4 && get32(w) == PACKED_MARK) {
        if (get32(w + 4) != 1 || get32(w + 8) != words - PACKED_HEAD / 4)
            return fail(PK_EFORMAT, why, cap, "packed token list: version %u, %u tokens in %u words",
                        get32(w + 4), get32(w + 8), words);
        w += PACKED_HEAD;
        words -= PACKED_HEAD / 4;
    }
    if (words != n || memcmp(w, tok, (size_t)n * 4))
        return fail(PK_EFORMAT, why, cap,
                    "the token list ahead of the header (%u tokens) is not the payload's (%u)", words, n);
    return PK_OK;
}

bool sav_name_ok(const char *name, size_t len)
{
    if (!name || len == 0 || len > SAV_NAME_MAX || name[0] == '.') return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c < 0x20 || c > 0x7e || c == '/' || c == '\\') return false;
    }
    return true;
}

static void encode_header(const sav_header *h, uint64_t payload_xxh, uint8_t *b)
{
    memset(b, 0, SAV_HEADER_BYTES);
    memcpy(b, magic, 8);
    put32(b + 8, h->version);
    put32(b + 12, h->kind);
    put64(b + 16, h->fingerprint);
    put32(b + 24, h->kv_type);
    put32(b + 28, h->n_layer);
    put32(b + 32, h->k_row_bytes);
    put32(b + 36, h->v_row_bytes);
    put32(b + 40, h->n_tokens);
    put32(b + 44, h->row_first);
    put32(b + 48, (uint32_t)h->pool_id);
    put32(b + 52, (uint32_t)h->parent);
    put32(b + 56, (uint32_t)h->branch_pos);
    put32(b + 60, h->flags);
    put64(b + 64, payload_bytes(h));
    put64(b + 72, payload_xxh);
    put64(b + 80, XXH3_64bits(b, 80));
    put32(b + 88, h->state_bytes);
}

/* The payload's checksum over the two parts as one stream. */
static uint64_t payload_xxh(const sav_header *h, const int32_t *tokens, const uint8_t *rows)
{
    XXH3_state_t *st = XXH3_createState();
    if (!st) return 0;
    XXH3_64bits_reset(st);
    /* tokens go in as little-endian int32 (x86-64: as they lie in memory) */
    XXH3_64bits_update(st, tokens, (size_t)h->n_tokens * 4);
    XXH3_64bits_update(st, rows, (size_t)blob_bytes(h));
    uint64_t v = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return v;
}

void sav_encode(const sav_header *h, const int32_t *tokens, const uint8_t *rows, uint8_t *buf)
{
    size_t nt = (size_t)h->n_tokens * 4, nr = (size_t)blob_bytes(h);
    encode_list(h, tokens, buf);
    buf += sav_head_bytes(h);
    encode_header(h, payload_xxh(h, tokens, rows), buf);
    memcpy(buf + SAV_HEADER_BYTES, tokens, nt);
    if (nr) memcpy(buf + SAV_HEADER_BYTES + nt, rows, nr);
}

/* "k/v" type names of a header's kv_type (sav_kv_type), into buf[40]. */
static const char *kv_types_name(uint32_t code, char buf[40])
{
    uint32_t k = code & 0xffff, v = code >> 16 ? (code >> 16) - 1 : k;
    const tq_traits *tk = tq_get((int)k), *tv = tq_get((int)v);
    if (tk && tv) snprintf(buf, 40, "%s/%s", tk->name, tv->name);
    else snprintf(buf, 40, "#%u", code);
    return buf;
}

/* Every check of the header alone (b holds SAV_HEADER_BYTES): the reader
 * runs them before it reads or allocates the payload. */
static pk_status parse_header(const uint8_t *b, const sav_expect *want, sav_header *h, char *why, size_t cap)
{
    memset(h, 0, sizeof *h);
    if (memcmp(b, magic, 8)) return fail(PK_EFORMAT, why, cap, "not a polykv state file (bad magic)");
    if (get64(b + 80) != XXH3_64bits(b, 80)) return fail(PK_EFORMAT, why, cap, "header checksum mismatch");
    if (get32(b + 92)) return fail(PK_EFORMAT, why, cap, "reserved header bytes are not zero");
    *h = (sav_header){ .version = get32(b + 8), .kind = get32(b + 12), .fingerprint = get64(b + 16),
                       .kv_type = get32(b + 24), .n_layer = get32(b + 28), .k_row_bytes = get32(b + 32),
                       .v_row_bytes = get32(b + 36), .n_tokens = get32(b + 40), .row_first = get32(b + 44),
                       .pool_id = (int32_t)get32(b + 48), .parent = (int32_t)get32(b + 52),
                       .branch_pos = (int32_t)get32(b + 56), .flags = get32(b + 60),
                       .payload_bytes = get64(b + 64), .state_bytes = get32(b + 88) };
    if (h->version != SAV_VERSION)
        return fail(PK_EUNSUPPORTED, why, cap, "format version %u (this build reads %d)", h->version, SAV_VERSION);
    if (h->kind != SAV_SLOT && h->kind != SAV_POOL) return fail(PK_EFORMAT, why, cap, "unknown kind %u", h->kind);
    if (h->fingerprint != want->fingerprint)
        return fail(PK_EUNSUPPORTED, why, cap, "saved by another model (fingerprint %016llx, this one %016llx)",
                    (unsigned long long)h->fingerprint, (unsigned long long)want->fingerprint);
    if (h->kv_type != want->kv_type) {
        char got[40], have[40];
        return fail(PK_EUNSUPPORTED, why, cap, "KV types %s, the cache holds %s", kv_types_name(h->kv_type, got),
                    kv_types_name(want->kv_type, have));
    }
    if (h->n_layer != want->n_layer || h->k_row_bytes != want->k_row_bytes || h->v_row_bytes != want->v_row_bytes)
        return fail(PK_EUNSUPPORTED, why, cap, "row layout %u layers x %u+%u bytes, the cache has %u x %u+%u", h->n_layer,
                    h->k_row_bytes, h->v_row_bytes, want->n_layer, want->k_row_bytes, want->v_row_bytes);
    if (h->state_bytes != want->state_bytes)
        return fail(PK_EUNSUPPORTED, why, cap, "recurrent state of %u bytes, the model's is %u", h->state_bytes,
                    want->state_bytes);
    if (h->n_tokens < 1 || h->n_tokens > want->max_tokens)
        return fail(PK_EFORMAT, why, cap, "%u tokens (1 to %u fit)", h->n_tokens, want->max_tokens);
    if (h->row_first >= h->n_tokens)
        return fail(PK_EFORMAT, why, cap, "rows start at %u of %u tokens", h->row_first, h->n_tokens);
    if (h->kind == SAV_SLOT ? h->row_first != 0 || h->pool_id != 0 || h->parent != -1
                            : h->pool_id < 1 || (h->parent < 1 && h->parent != -1) ||
                                  (uint32_t)h->branch_pos != h->row_first || (h->parent == -1) != (h->row_first == 0))
        return fail(PK_EFORMAT, why, cap, "inconsistent tree fields (pool %d, parent %d, branch_pos %d, rows from %u)",
                    h->pool_id, h->parent, h->branch_pos, h->row_first);
    if (h->payload_bytes != payload_bytes(h))
        return fail(PK_EFORMAT, why, cap, "payload size %llu does not match its counts", (unsigned long long)h->payload_bytes);
    return PK_OK;
}

pk_status sav_parse(const void *buf, size_t n, const sav_expect *want, sav_header *h, const int32_t **tokens,
                    const uint8_t **rows, char *why, size_t cap)
{
    const uint8_t *file = buf;
    memset(h, 0, sizeof *h);
    size_t at;
    pk_status st = find_header(file, n, want->max_tokens, &at, why, cap);
    if (st != PK_OK) return st;
    if (n < at + SAV_HEADER_BYTES)
        return fail(PK_EFORMAT, why, cap, "truncated: %zu bytes, the header ends at %zu", n,
                    at + SAV_HEADER_BYTES);
    const uint8_t *b = file + at;
    n -= at;
    st = parse_header(b, want, h, why, cap);
    if (st != PK_OK) return st;
    if ((uint64_t)n != SAV_HEADER_BYTES + h->payload_bytes)
        return fail(PK_EFORMAT, why, cap, "%s: %zu bytes, the header says %llu", n < SAV_HEADER_BYTES + h->payload_bytes ?
                    "truncated" : "trailing bytes", n, (unsigned long long)(SAV_HEADER_BYTES + h->payload_bytes));
    const int32_t *tok = (const int32_t *)(b + SAV_HEADER_BYTES);
    const uint8_t *rw = b + SAV_HEADER_BYTES + (size_t)h->n_tokens * 4;
    if (get64(b + 72) != payload_xxh(h, tok, rw)) return fail(PK_EFORMAT, why, cap, "payload checksum mismatch");
    st = check_list(file, at, tok, h->n_tokens, why, cap);
    if (st != PK_OK) return st;
    for (uint32_t i = 0; i < h->n_tokens; i++)
        if ((uint32_t)tok[i] >= want->n_vocab)
            return fail(PK_EFORMAT, why, cap, "token %d at position %u is outside the vocabulary", tok[i], i);
    *tokens = tok;
    *rows = rw;
    return PK_OK;
}

pk_status sav_read(const char *path, const sav_expect *want, uint8_t **buf, sav_header *h,
                   const int32_t **tokens, const uint8_t **rows, char *why, size_t cap)
{
    *buf = NULL;
    /* The engine thread reads: nothing here may block it.  A FIFO's open
     * waits for a writer unless O_NONBLOCK, and its read waits for data; a
     * symbolic link could point anywhere.  So the open neither follows a
     * link nor waits, and only a regular file is read (blocking again, as
     * regular files always are). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0 && errno == ELOOP) return fail(PK_EFORMAT, why, cap, "a symbolic link, not a regular file");
    if (fd < 0) return fail(errno == ENOENT ? PK_ENOTFOUND : PK_EIO, why, cap, "cannot open: %s", strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb)) {
        close(fd);
        return fail(PK_EIO, why, cap, "cannot stat: %s", strerror(errno));
    }
    if (!S_ISREG(sb.st_mode)) {        /* a directory, a FIFO: named by the client, so its 400 */
        close(fd);
        return fail(PK_EFORMAT, why, cap, "not a regular file");
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK)) {
        close(fd);
        return fail(PK_EIO, why, cap, "fcntl: %s", strerror(errno));
    }
    /* The header first: a size that disagrees is refused before reading
     * (or allocating) the rest. */
    uint8_t lh[LIST_HEAD], hb[SAV_HEADER_BYTES];
    ssize_t n_lh = pread(fd, lh, sizeof lh, 0);
    size_t at = 0;
    pk_status st = find_header(lh, n_lh > 0 ? (size_t)n_lh : 0, want->max_tokens, &at, why, cap);
    if (st != PK_OK) {
        close(fd);
        return st;
    }
    if ((uint64_t)sb.st_size < at + SAV_HEADER_BYTES || pread(fd, hb, sizeof hb, (off_t)at) != (ssize_t)sizeof hb) {
        close(fd);
        return fail(PK_EFORMAT, why, cap, "truncated: %lld bytes, the header ends at %zu", (long long)sb.st_size,
                    at + SAV_HEADER_BYTES);
    }
    st = parse_header(hb, want, h, why, cap);
    if (st != PK_OK) {
        close(fd);
        return st;
    }
    uint64_t says = at + SAV_HEADER_BYTES + h->payload_bytes;
    if (says < SAV_HEADER_BYTES || (uint64_t)sb.st_size != says) {
        close(fd);
        return fail(PK_EFORMAT, why, cap, "%s: %lld bytes, the header says %llu", (uint64_t)sb.st_size < says ? "truncated" :
                    "trailing bytes", (long long)sb.st_size, (unsigned long long)says);
    }
    uint8_t *b = malloc((size_t)sb.st_size);
    if (!b) {
        close(fd);
        return fail(PK_ENOMEM, why, cap, "out of memory for %lld bytes", (long long)sb.st_size);
    }
    size_t got = 0;
    while (got < (size_t)sb.st_size) {
        ssize_t k = pread(fd, b + got, (size_t)sb.st_size - got, (off_t)got);
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    st = sav_parse(b, got, want, h, tokens, rows, why, cap);
    if (st != PK_OK) {
        free(b);
        return st;
    }
    *buf = b;
    return PK_OK;
}

/* Creates the temporary that becomes dir/name, its path into tmp[cap].
 * In --pool-dir only the server names files, and its start-up scan knows
 * "NAME.tmp": that name, whatever had it (a leftover, a planted link)
 * removed first.  In --slot-save-path clients name files, so "NAME.tmp"
 * could be one of theirs: there the temporary is ".NAME.RANDOM.tmp", a
 * name sav_name_ok never lets a client give (its leading '.'), so no
 * client file is ever touched.  Either way O_EXCL makes a fresh file and
 * follows no link.  The fd, or -1 with errno set. */
static int create_temp(const char *dir, const char *name, sav_kind kind, char *tmp, size_t cap)
{
    if (kind != SAV_SLOT) {
        snprintf(tmp, cap, "%s/%s.tmp", dir, name);
        if (unlink(tmp) && errno != ENOENT) return -1;
        return open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    }
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 16; tries++) {
        uint64_t r;
        if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
            r = (uint64_t)(pk_time_ms() * 1e3) ^ ((uint64_t)getpid() << 40) ^ (uint64_t)tries;
        snprintf(tmp, cap, "%s/.%s.%016llx.tmp", dir, name, (unsigned long long)r);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST) break;
    }
    return fd;
}

static bool write_all(int fd, const void *p, size_t n)
{
    const uint8_t *c = p;
    while (n) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        c += k;
        n -= (size_t)k;
    }
    return true;
}

/* Bytes of the regular files in dir but `skip` (the file a save replaces,
 * which the rename removes).  Temporaries count: a crash can leave them
 * for good.  Links and other kinds hold no data of ours; lstat semantics
 * so a planted link cannot make a far-away file count.  PK_EIO when the
 * directory cannot be read. */
static pk_status dir_bytes(const char *dir, const char *skip, uint64_t *out, char *why, size_t cap)
{
    DIR *d = opendir(dir);
    if (!d) return fail(PK_EIO, why, cap, "cannot read the directory %s: %s", dir, strerror(errno));
    uint64_t sum = 0;
    int err = 0;
    for (;;) {
        errno = 0;                      /* readdir's end and its failure differ only in errno */
        struct dirent *de = readdir(d);
        if (!de) {
            err = errno;
            break;
        }
        struct stat sb;
        /* a file gone since readdir (a fstatat failure) holds nothing */
        if (!strcmp(de->d_name, skip) || fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) ||
            !S_ISREG(sb.st_mode))
            continue;
        sum += (uint64_t)sb.st_size;
    }
    closedir(d);
    if (err) return fail(PK_EIO, why, cap, "cannot read the directory %s: %s", dir, strerror(err));
    *out = sum;
    return PK_OK;
}

/* A full disk or an exhausted quota is "no room", not a broken device. */
static pk_status write_status(int err) { return err == ENOSPC || err == EDQUOT ? PK_EFULL : PK_EIO; }

pk_status sav_write(const char *dir, const char *name, const sav_header *h, const int32_t *tokens,
                    const uint8_t *rows, uint64_t max_dir_bytes, int delay_ms, char *why, size_t cap)
{
    if (!sav_name_ok(name, strlen(name))) return fail(PK_EINVAL, why, cap, "invalid file name");
    char path[4096], tmp[4096 + 32];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return fail(PK_EINVAL, why, cap, "path too long");
    if (max_dir_bytes) {
        uint64_t used = 0, adds = sav_file_bytes(h);
        pk_status st = dir_bytes(dir, name, &used, why, cap);
        if (st != PK_OK) return st;
        if (used > max_dir_bytes || adds > max_dir_bytes - used)
            return fail(PK_EFULL, why, cap, "a save of %llu bytes would bring the directory's files to %llu bytes, "
                        "over its bound of %llu", (unsigned long long)adds, (unsigned long long)(used + adds),
                        (unsigned long long)max_dir_bytes);
    }
    uint8_t hb[SAV_HEADER_BYTES];
    encode_header(h, payload_xxh(h, tokens, rows), hb);
    uint8_t *list = malloc((size_t)sav_head_bytes(h));
    if (!list) return fail(PK_ENOMEM, why, cap, "out of memory for the token list");
    encode_list(h, tokens, list);
    int fd = create_temp(dir, name, (sav_kind)h->kind, tmp, sizeof tmp);
    if (fd < 0) {
        int err = errno;
        free(list);
        return fail(write_status(err), why, cap, "cannot create %s: %s", tmp, strerror(err));
    }
    size_t nr = (size_t)blob_bytes(h);
    bool ok = write_all(fd, list, (size_t)sav_head_bytes(h)) && write_all(fd, hb, sizeof hb) &&
              write_all(fd, tokens, (size_t)h->n_tokens * 4) &&
              (!nr || write_all(fd, rows, nr)) && fsync(fd) == 0;
    int err = errno;
    free(list);
    ok = close(fd) == 0 && ok;
    if (ok && delay_ms > 0) {
        struct timespec ts = { delay_ms / 1000, (long)(delay_ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
    }
    if (!ok || rename(tmp, path)) {
        if (ok) err = errno;
        unlink(tmp);
        return fail(write_status(err), why, cap, "cannot write %s: %s", path, strerror(err));
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        /* The rename is durable only once the directory is. */
        fsync(dfd);
        close(dfd);
    }
    return PK_OK;
}

uint64_t sav_fp_add(uint64_t fp, const void *data, size_t n) { return XXH3_64bits_withSeed(data, n, fp); }
