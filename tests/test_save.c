/*
 * test_save.c - the saved-KV file format (src/save) without a model: a file
 * round-trips; every truncation and every single flipped byte is refused;
 * another model, KV type, row layout or version is refused by name; the
 * tree fields must agree; client file names that could leave the directory
 * are refused; the crash-safe write leaves no temporary behind and reads
 * back as written; the directory's bound (--slot-save-max-bytes) holds
 * and a full file system is PK_EFULL.
 */
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdint.h>
#include <sys/stat.h>

#include "../src/save/sav.h"
#include "../src/tensor/tq.h"
#include "test.h"

static const sav_expect want = { .fingerprint = 0x1234567890abcdefull, .kv_type = 1, .n_layer = 3,
                                 .k_row_bytes = 8, .v_row_bytes = 12, .max_tokens = 100, .n_vocab = 500 };

static sav_header pool_header(uint32_t n, uint32_t d)
{
    return (sav_header){ .version = SAV_VERSION, .kind = SAV_POOL, .fingerprint = want.fingerprint,
                         .kv_type = want.kv_type, .n_layer = want.n_layer, .k_row_bytes = want.k_row_bytes,
                         .v_row_bytes = want.v_row_bytes, .n_tokens = n, .row_first = d, .pool_id = d ? 7 : 3,
                         .parent = d ? 3 : -1, .branch_pos = (int32_t)d, .flags = SAV_FLAG_PINNED };
}

/* A file for h with tokens i * 7 % 500 and rows of byte pattern; malloc'ed. */
static uint8_t *make(const sav_header *h, size_t *n)
{
    int32_t tok[100];
    for (uint32_t i = 0; i < h->n_tokens; i++) tok[i] = (int32_t)(i * 7 % 500);
    size_t nr = (size_t)(h->n_tokens - h->row_first) * sav_row_bytes(h);
    uint8_t *rows = malloc(nr + 1);
    for (size_t i = 0; i < nr; i++) rows[i] = (uint8_t)(i * 31 + 5);
    *n = (size_t)sav_file_bytes(h);
    uint8_t *buf = malloc(*n);
    sav_encode(h, tok, rows, buf);
    free(rows);
    return buf;
}

static void test_roundtrip(void)
{
    sav_header h = pool_header(20, 5), got;
    size_t n;
    uint8_t *buf = make(&h, &n);
    CHECK_EQ_INT(n, 12 + 12 + 20 * 4 + SAV_HEADER_BYTES + 20 * 4 + 15 * 3 * 20);
    CHECK_EQ_INT(sav_head_bytes(&h), 12 + 12 + 20 * 4);
    const int32_t *tok;
    const uint8_t *rows;
    char why[200];
    CHECK_EQ_INT(sav_parse(buf, n, &want, &got, &tok, &rows, why, sizeof why), PK_OK);
    CHECK_EQ_INT(got.n_tokens, 20);
    CHECK_EQ_INT(got.row_first, 5);
    CHECK_EQ_INT(got.pool_id, 7);
    CHECK_EQ_INT(got.parent, 3);
    CHECK_EQ_INT(got.flags, SAV_FLAG_PINNED);
    CHECK_EQ_INT(tok[19], 19 * 7 % 500);
    CHECK_EQ_INT(rows[0], 5);
    CHECK_EQ_INT(rows[15 * 60 - 1], (uint8_t)((15 * 60 - 1) * 31 + 5));
    free(buf);
}

/* Every prefix of a good file, and every byte of it flipped, is refused:
 * the checksums cover the header and the payload whole. */
static void test_damage(void)
{
    sav_header h = pool_header(9, 0), got;
    size_t n;
    uint8_t *buf = make(&h, &n);
    const int32_t *tok;
    const uint8_t *rows;
    char why[200];
    int refused = 0, truncated_named = 0;
    for (size_t len = 0; len < n; len++) {
        pk_status st = sav_parse(buf, len, &want, &got, &tok, &rows, why, sizeof why);
        refused += st == PK_EFORMAT;
        truncated_named += strstr(why, "truncated") != NULL;
    }
    CHECK_EQ_INT(refused, n);
    CHECK_EQ_INT(truncated_named, n);
    int flipped = 0;
    for (size_t i = 0; i < n; i++) {
        for (int bit = 0; bit < 8; bit += 7) {
            buf[i] ^= (uint8_t)(1u << bit);
            flipped += sav_parse(buf, n, &want, &got, &tok, &rows, why, sizeof why) != PK_OK;
            buf[i] ^= (uint8_t)(1u << bit);
        }
    }
    CHECK_EQ_INT(flipped, 2 * n);
    CHECK_EQ_INT(sav_parse(buf, n, &want, &got, &tok, &rows, why, sizeof why), PK_OK);
    /* One byte too many is refused as well. */
    uint8_t *longer = malloc(n + 1);
    memcpy(longer, buf, n);
    longer[n] = 0;
    CHECK_EQ_INT(sav_parse(longer, n + 1, &want, &got, &tok, &rows, why, sizeof why), PK_EFORMAT);
    CHECK(strstr(why, "trailing") != NULL);
    free(longer);
    free(buf);
}

/* A well-formed file that is not for this model or cache: refused with a
 * reason naming what differs. */
static void test_foreign(void)
{
    /* a cache of one type for K and V records it as files did before the
     * two could differ; different types are told apart whichever is which */
    CHECK_EQ_INT(sav_kv_type(TQ_F16, TQ_F16), 1);
    CHECK_EQ_INT(sav_kv_type(TQ_Q8_0, TQ_Q8_0), TQ_Q8_0);
    CHECK(sav_kv_type(TQ_F16, TQ_F32) != sav_kv_type(TQ_F16, TQ_F16));
    CHECK(sav_kv_type(TQ_F32, TQ_F16) != sav_kv_type(TQ_F16, TQ_F32));
    struct { const char *field; const char *reason; pk_status st; } cases[] = {
        { "fingerprint", "another model", PK_EUNSUPPORTED }, { "kv_type", "KV type", PK_EUNSUPPORTED },
        { "n_layer", "row layout", PK_EUNSUPPORTED },       { "k_row_bytes", "row layout", PK_EUNSUPPORTED },
        { "version", "format version", PK_EUNSUPPORTED },   { "tokens", "tokens (1 to", PK_EFORMAT },
        { "vocab", "outside the vocabulary", PK_EFORMAT },  { "tree", "inconsistent tree", PK_EFORMAT },
        { "slot_rows", "inconsistent tree", PK_EFORMAT },   { "kind", "unknown kind", PK_EFORMAT },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sav_header h = pool_header(10, 4);
        const char *f = cases[c].field;
        if (!strcmp(f, "fingerprint")) h.fingerprint ^= 1;
        if (!strcmp(f, "kv_type")) h.kv_type = sav_kv_type(TQ_Q8_0, TQ_Q4_0);
        if (!strcmp(f, "n_layer")) h.n_layer = 4;
        if (!strcmp(f, "k_row_bytes")) h.k_row_bytes = 16;
        if (!strcmp(f, "version")) h.version = SAV_VERSION + 1;
        if (!strcmp(f, "tokens")) h.n_tokens = h.row_first = 0;
        if (!strcmp(f, "tree")) h.parent = -1;
        if (!strcmp(f, "slot_rows")) h.kind = SAV_SLOT;
        if (!strcmp(f, "kind")) h.kind = 9;
        size_t n;
        uint8_t *buf = make(&h, &n);
        if (!strcmp(f, "vocab")) {
            int32_t big = 500;
            uint8_t *payload = buf + sav_head_bytes(&h) + SAV_HEADER_BYTES;
            memcpy(payload + 4, &big, 4);
            /* re-encoded, so only the token is wrong, not the checksum */
            uint8_t *fixed = malloc(n);
            sav_encode(&h, (const int32_t *)payload, payload + 40, fixed);
            free(buf);
            buf = fixed;
        }
        sav_header got;
        const int32_t *tok;
        const uint8_t *rows;
        char why[200] = "";
        CHECK_EQ_INT(sav_parse(buf, n, &want, &got, &tok, &rows, why, sizeof why), cases[c].st);
        if (!strstr(why, cases[c].reason)) fprintf(stderr, "case %s: reason '%s'\n", f, why);
        CHECK(strstr(why, cases[c].reason) != NULL);
        if (!strcmp(f, "kv_type")) CHECK_STR(why, "KV types q8_0/q4_0, the cache holds f16/f16");
        free(buf);
    }
}

static void test_names(void)
{
    const char *bad[] = { "", ".", "..", "../x", "a/b", "/etc/passwd", ".hidden", "a\\b", "tab\there", "\x7f" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECK(!sav_name_ok(bad[i], strlen(bad[i])));
    CHECK(!sav_name_ok("a\0b", 3));                 /* a NUL inside: the length says more than strlen */
    CHECK(!sav_name_ok("caf\xc3\xa9", 5));
    char longn[SAV_NAME_MAX + 2];
    memset(longn, 'a', sizeof longn);
    CHECK(sav_name_ok(longn, SAV_NAME_MAX));
    CHECK(!sav_name_ok(longn, SAV_NAME_MAX + 1));
    CHECK(sav_name_ok("slot1.bin", 9));
    CHECK(sav_name_ok("a..b", 4));
}

static void test_write_read(void)
{
    char dir[] = "/tmp/test_save_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return;
    }
    sav_header h = pool_header(30, 0);
    h.kind = SAV_POOL;
    int32_t tok[30];
    for (int i = 0; i < 30; i++) tok[i] = i * 3;
    size_t nr = 30 * (size_t)sav_row_bytes(&h);
    uint8_t *rows = malloc(nr);
    for (size_t i = 0; i < nr; i++) rows[i] = (uint8_t)i;
    char why[200];
    CHECK_EQ_INT(sav_write(dir, "pool-3.pkv", &h, tok, rows, 0, 0, why, sizeof why), PK_OK);
    CHECK_EQ_INT(sav_write(dir, "../escape", &h, tok, rows, 0, 0, why, sizeof why), PK_EINVAL);
    char path[256], tmp[300];
    snprintf(path, sizeof path, "%s/pool-3.pkv", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && (sb.st_mode & 077) == 0);
    uint8_t *buf;
    sav_header got;
    const int32_t *t;
    const uint8_t *r;
    CHECK_EQ_INT(sav_read(path, &want, &buf, &got, &t, &r, why, sizeof why), PK_OK);
    CHECK(buf && !memcmp(t, tok, sizeof tok) && !memcmp(r, rows, nr));
    free(buf);
    /* Cut the file short: refused before the payload is read. */
    CHECK(truncate(path, (off_t)sb.st_size - 1) == 0);
    CHECK_EQ_INT(sav_read(path, &want, &buf, &got, &t, &r, why, sizeof why), PK_EFORMAT);
    CHECK(buf == NULL && strstr(why, "truncated") != NULL);
    snprintf(tmp, sizeof tmp, "%s/none", dir);
    CHECK_EQ_INT(sav_read(tmp, &want, &buf, &got, &t, &r, why, sizeof why), PK_ENOTFOUND);
    /* A directory is the caller's mistake (a 400 on restore), not an I/O error (a 500). */
    CHECK_EQ_INT(sav_read(dir, &want, &buf, &got, &t, &r, why, sizeof why), PK_EFORMAT);
    CHECK(strstr(why, "not a regular file") != NULL);
    unlink(path);
    rmdir(dir);
    free(rows);
}

static void put_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static bool file_is(const char *path, const char *text)
{
    char got[64] = "";
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(got, 1, sizeof got - 1, f) : 0;
    if (f) fclose(f);
    got[n] = 0;
    return !strcmp(got, text);
}

/* Files planted in the directory: a symbolic link under the temporary's
 * name does not redirect a write (the file it points to stays as it was,
 * the save is a regular file); a read follows no link and opens no FIFO
 * (which would block the engine thread for ever; alarm() ends the test if
 * it does). */
static void test_planted(void)
{
    char dir[] = "/tmp/test_save_XXXXXX", out[] = "/tmp/test_save_out_XXXXXX";
    if (!mkdtemp(dir) || !mkdtemp(out)) {
        CHECK(!"mkdtemp");
        return;
    }
    char victim[300], link[300], path[300], fifo[300];
    snprintf(victim, sizeof victim, "%s/victim", out);
    snprintf(link, sizeof link, "%s/pool-3.pkv.tmp", dir);
    snprintf(path, sizeof path, "%s/pool-3.pkv", dir);
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    put_file(victim, "keep");
    CHECK(symlink(victim, link) == 0);
    sav_header h = pool_header(4, 0);
    int32_t tok[4] = { 1, 2, 3, 4 };
    uint8_t rows[4 * 60] = { 0 };
    char why[200] = "";
    CHECK_EQ_INT(sav_write(dir, "pool-3.pkv", &h, tok, rows, 0, 0, why, sizeof why), PK_OK);
    CHECK(file_is(victim, "keep"));
    struct stat sb;
    CHECK(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode));
    CHECK(lstat(link, &sb) != 0);

    uint8_t *buf;
    sav_header got;
    const int32_t *t;
    const uint8_t *r;
    char ln[300];
    snprintf(ln, sizeof ln, "%s/ln", dir);
    CHECK(symlink(path, ln) == 0);
    CHECK_EQ_INT(sav_read(ln, &want, &buf, &got, &t, &r, why, sizeof why), PK_EFORMAT);
    CHECK(strstr(why, "symbolic link") != NULL);
    CHECK(mkfifo(fifo, 0600) == 0);
    alarm(10);
    double t0 = pk_time_ms();
    CHECK_EQ_INT(sav_read(fifo, &want, &buf, &got, &t, &r, why, sizeof why), PK_EFORMAT);
    CHECK(strstr(why, "not a regular file") != NULL);
    CHECK(pk_time_ms() - t0 < 1000);
    alarm(0);
    unlink(ln);
    unlink(fifo);
    unlink(path);
    unlink(link);
    unlink(victim);
    rmdir(dir);
    rmdir(out);
}

/* Number of entries in dir, "." and ".." aside. */
static int n_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));) n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    if (d) closedir(d);
    return n;
}

/* A slot save's temporary can be no client's file: saving "keep" leaves
 * the client's own "keep.tmp" (and a link of that name) as it was, and no
 * temporary behind. */
static void test_temp_names(void)
{
    char dir[] = "/tmp/test_save_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return;
    }
    char client[300], link[300], keep[300], x[300];
    snprintf(client, sizeof client, "%s/keep.tmp", dir);
    snprintf(keep, sizeof keep, "%s/keep", dir);
    snprintf(link, sizeof link, "%s/x.tmp", dir);
    snprintf(x, sizeof x, "%s/x", dir);
    put_file(client, "client");
    CHECK(symlink(client, link) == 0);
    sav_header h = pool_header(4, 0);
    h.kind = SAV_SLOT;
    int32_t tok[4] = { 1, 2, 3, 4 };
    uint8_t rows[4 * 60] = { 0 };
    char why[200] = "";
    for (int k = 0; k < 2; k++) {
        CHECK_EQ_INT(sav_write(dir, "keep", &h, tok, rows, 0, 0, why, sizeof why), PK_OK);
        CHECK_EQ_INT(sav_write(dir, "x", &h, tok, rows, 0, 0, why, sizeof why), PK_OK);
    }
    CHECK(file_is(client, "client"));
    struct stat sb;
    CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode));
    CHECK(lstat(x, &sb) == 0 && S_ISREG(sb.st_mode));
    CHECK_EQ_INT(n_entries(dir), 4);
    unlink(client);
    unlink(keep);
    unlink(link);
    unlink(x);
    rmdir(dir);
}

/* Total bytes of the regular files in dir. */
static uint64_t dir_total(const char *dir)
{
    DIR *d = opendir(dir);
    uint64_t n = 0;
    for (struct dirent *de; d && (de = readdir(d));) {
        struct stat sb;
        if (!fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) && S_ISREG(sb.st_mode))
            n += (uint64_t)sb.st_size;
    }
    if (d) closedir(d);
    return n;
}

/* --slot-save-max-bytes: saves fill the directory up to the bound and the
 * next one is refused with PK_EFULL, writing nothing; a save that replaces
 * a file of its size still fits at the bound; a leftover temporary counts,
 * a symbolic link to a large file elsewhere does not. */
static void test_dir_bound(void)
{
    char dir[] = "/tmp/test_save_XXXXXX", out[] = "/tmp/test_save_out_XXXXXX";
    if (!mkdtemp(dir) || !mkdtemp(out)) {
        CHECK(!"mkdtemp");
        return;
    }
    sav_header h = pool_header(10, 0);
    h.kind = SAV_SLOT;
    h.pool_id = 0;
    h.flags = 0;
    int32_t tok[10] = { 0 };
    uint8_t rows[10 * 60] = { 0 };
    uint64_t one = sav_file_bytes(&h), bound = 3 * one + one / 2;
    char big[300], ln[300], why[200] = "";
    snprintf(big, sizeof big, "%s/big", out);
    snprintf(ln, sizeof ln, "%s/ln", dir);
    FILE *f = fopen(big, "w");
    CHECK(f && ftruncate(fileno(f), (off_t)(10 * one)) == 0);
    if (f) fclose(f);
    CHECK(symlink(big, ln) == 0);
    const char *names[] = { "a", "b", "c", "d" };
    for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(sav_write(dir, names[i], &h, tok, rows, bound, 0, why, sizeof why), PK_OK);
    CHECK_EQ_INT(dir_total(dir), 3 * one);
    CHECK_EQ_INT(sav_write(dir, "d", &h, tok, rows, bound, 0, why, sizeof why), PK_EFULL);
    CHECK(strstr(why, "bound") != NULL);
    CHECK_EQ_INT(n_entries(dir), 4);                /* a, b, c and the link: no d, no temporary */
    CHECK_EQ_INT(dir_total(dir), 3 * one);
    /* at the bound exactly: 3 files, "b" rewritten in place of itself */
    CHECK_EQ_INT(sav_write(dir, "b", &h, tok, rows, 3 * one, 0, why, sizeof why), PK_OK);
    CHECK_EQ_INT(sav_write(dir, "d", &h, tok, rows, 3 * one, 0, why, sizeof why), PK_EFULL);
    /* unbounded: 0 */
    CHECK_EQ_INT(sav_write(dir, "d", &h, tok, rows, 0, 0, why, sizeof why), PK_OK);
    CHECK(unlink(ln) == 0);
    /* a leftover temporary holds disk space: it counts */
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s/.d.0123456789abcdef.tmp", dir);
    char d[300];
    snprintf(d, sizeof d, "%s/d", dir);
    CHECK(rename(d, tmp) == 0);
    CHECK_EQ_INT(sav_write(dir, "b", &h, tok, rows, 3 * one, 0, why, sizeof why), PK_EFULL);
    CHECK_EQ_INT(sav_write(dir, "b", &h, tok, rows, 4 * one, 0, why, sizeof why), PK_OK);
    for (int i = 0; i < 3; i++) {
        char p[300];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    unlink(tmp);
    unlink(big);
    CHECK(rmdir(dir) == 0);
    rmdir(out);
}

static bool put_proc(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY);
    bool ok = fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text);
    if (fd >= 0) close(fd);
    return ok;
}

/* A full file system is "no room" (PK_EFULL, the 507), not an I/O error,
 * and the failed save leaves nothing: a 16 KiB tmpfs mounted in a child
 * that has its own user and mount namespaces (no privilege needed where
 * the kernel allows them; skipped where it does not). */
static void test_disk_full(void)
{
    char dir[] = "/tmp/test_save_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return;
    }
    int fds[2];
    ASSERT(pipe(fds) == 0);
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        int r[2] = { -100, 0 };           /* -100: no namespace or mount here */
        char uid_map[64], gid_map[64];
        snprintf(uid_map, sizeof uid_map, "%u %u 1", (unsigned)getuid(), (unsigned)getuid());
        snprintf(gid_map, sizeof gid_map, "%u %u 1", (unsigned)getgid(), (unsigned)getgid());
        /* unmapped ids cannot own a new file: map ours to themselves */
        if (!unshare(CLONE_NEWUSER | CLONE_NEWNS) && put_proc("/proc/self/setgroups", "deny") &&
            put_proc("/proc/self/uid_map", uid_map) && put_proc("/proc/self/gid_map", gid_map) &&
            !mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) && !mount("tmpfs", dir, "tmpfs", 0, "size=16k")) {
            sav_header h = pool_header(1000, 0);      /* 64 KB */
            h.kind = SAV_SLOT;
            h.pool_id = 0;
            h.flags = 0;
            static int32_t tok[1000];
            static uint8_t rows[1000 * 60];
            char why[200] = "";
            r[0] = sav_write(dir, "big", &h, tok, rows, 0, 0, why, sizeof why);
            r[1] = n_entries(dir);
            if (r[0] != PK_EFULL) fprintf(stderr, "  disk full: %s\n", why);
        }
        ssize_t w = write(fds[1], r, sizeof r);
        _exit(w == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fds[1]);
    int r[2] = { 0, 0 }, status = 0;
    ssize_t n = read(fds[0], r, sizeof r);
    close(fds[0]);
    waitpid(pid, &status, 0);
    rmdir(dir);
    CHECK(n == (ssize_t)sizeof r && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (r[0] == -100) {
        SKIP_PART("disk full: no user and mount namespace to mount a small tmpfs in");
        return;
    }
    CHECK_EQ_INT(r[0], PK_EFULL);
    CHECK_EQ_INT(r[1], 0);
}

/* The token list ahead of the header: written packed, llama-server's
 * layout; rewritten plain (its older files' layout, as llama.cpp's
 * test_slot_restore_legacy_token_list does) it still reads, from memory
 * and from disk; a file of an earlier build, without the list, reads; a
 * list that disagrees with the payload is refused. */
static void test_token_list(void)
{
    sav_header h = pool_header(6, 0), got;
    size_t n;
    uint8_t *buf = make(&h, &n);
    uint32_t w[6];
    memcpy(w, buf, sizeof w);
    CHECK(!memcmp(buf, "PKVT", 4) && w[1] == 1 && w[2] == 6 + 3 && w[3] == 0xFFFFFFFFu && w[5] == 6);
    const int32_t *tok;
    const uint8_t *rows;
    char why[200];
    /* plain: the 12-byte packed head dropped, n_words = n_tokens */
    size_t head = (size_t)sav_head_bytes(&h);
    uint8_t *plain = malloc(n - 12);
    memcpy(plain, buf, 12);
    memcpy(plain + 12, buf + 24, n - 24);
    uint32_t six = 6;
    memcpy(plain + 8, &six, 4);
    CHECK_EQ_INT(sav_parse(plain, n - 12, &want, &got, &tok, &rows, why, sizeof why), PK_OK);
    CHECK(got.n_tokens == 6 && tok[5] == 5 * 7 % 500);
    char dir[] = "/tmp/polykv-save-list-XXXXXX";
    ASSERT(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/legacy.bin", dir);
    FILE *f = fopen(path, "wb");
    ASSERT(f && fwrite(plain, 1, n - 12, f) == n - 12 && fclose(f) == 0);
    uint8_t *rb;
    const int32_t *t;
    const uint8_t *r;
    CHECK_EQ_INT(sav_read(path, &want, &rb, &got, &t, &r, why, sizeof why), PK_OK);
    CHECK(rb && got.n_tokens == 6 && !memcmp(t, tok, 24));
    free(rb);
    unlink(path);
    rmdir(dir);
    /* no list at all */
    CHECK_EQ_INT(sav_parse(buf + head, n - head, &want, &got, &tok, &rows, why, sizeof why), PK_OK);
    CHECK_EQ_INT(got.n_tokens, 6);
    /* a list that is not the payload's: one token changed, or one fewer */
    plain[12 + 4] ^= 1;
    CHECK_EQ_INT(sav_parse(plain, n - 12, &want, &got, &tok, &rows, why, sizeof why), PK_EFORMAT);
    CHECK(strstr(why, "token list") != NULL);
    plain[12 + 4] ^= 1;
    uint32_t five = 5;
    memcpy(plain + 8, &five, 4);
    memmove(plain + 12 + 20, plain + 12 + 24, n - 12 - 36);
    CHECK_EQ_INT(sav_parse(plain, n - 16, &want, &got, &tok, &rows, why, sizeof why), PK_EFORMAT);
    free(plain);
    free(buf);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    TEST_RUN(test_token_list);
    TEST_RUN(test_roundtrip);
    TEST_RUN(test_damage);
    TEST_RUN(test_foreign);
    TEST_RUN(test_names);
    TEST_RUN(test_write_read);
    TEST_RUN(test_planted);
    TEST_RUN(test_temp_names);
    TEST_RUN(test_dir_bound);
    TEST_RUN(test_disk_full);
    return test_finish();
}
