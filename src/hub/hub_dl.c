/*
 * hub_dl.c - one file from the hub (hub_impl.h has the contract).
 *
 * DESIGN
 *   HEAD the resolve URL without following it: for an LFS file the hub
 *   answers a redirect to its CDN carrying X-Linked-Etag (the sha256) and
 *   X-Linked-Size, which must agree with the listing; 401 / 403 / 404 end
 *   here with their reason.  Then GET it, redirects followed, into
 *   DEST.downloadInProgress:
 *
 *     DEST.downloadInProgress   [0, have) on disk == what sha has hashed
 *         attempt k: GET, "Range: bytes=have-" when have > 0
 *           206 from have  -> append          200 -> start over (Range ignored)
 *           cut, stall     -> attempt k+1 after a delay (2 s, 4 s, ...)
 *         whole: sha256 == expected -> rename to DEST; else delete, error
 *
 *   The partial file outlives a failed run (a later start resumes it, and
 *   hashes its bytes once to get sha back in step); only a checksum
 *   mismatch deletes it.  The token rides on both requests; libcurl does
 *   not send a caller's Authorization header on to another host, port or
 *   scheme, so the CDN never sees it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "../common/sha256.h"
#include "../httpc/httpc.h"
#include "hub_impl.h"

#define MIB (1024.0 * 1024.0)
#define DL_CHUNK (1 << 16)

/* One file's transfer, across attempts. */
typedef struct dl {
    const hub_dl *d;
    char tmp[PATH_MAX + 32];
    char sha256[65];           /* expected, "" unknown */
    int64_t total;             /* expected bytes, -1 unknown */
    int fd;
    int64_t have;              /* bytes in tmp, all hashed into sha */
    pk_sha256 sha;
    double last_byte_ms;       /* stall watch */
    bool stalled;
    bool bar;                  /* progress: a bar, else lines */
    double t0_ms, shown_ms;
    int64_t have_at_t0;
    int shown_tenth;
    char *buf;                 /* [DL_CHUNK] */
} dl;

static const char *header(const httpc_response *r, const char *name)
{
    for (int i = 0; i < r->n_headers; i++)
        if (!strcasecmp(r->names[i], name)) return r->values[i];
    return NULL;
}

/* An ETag's value as a lowercase sha256 in out[65], when it is one
 * (quotes and a weak W/ taken off). */
static bool etag_sha256(const char *v, char out[65])
{
    if (!v) return false;
    if (!strncmp(v, "W/", 2)) v += 2;
    size_t n = strlen(v);
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') v++, n -= 2;
    if (n != 64) return false;
    for (size_t i = 0; i < 64; i++) {
        char c = v[i];
        if (!strchr("0123456789abcdefABCDEF", c)) return false;
        out[i] = (char)(c >= 'A' && c <= 'F' ? c - 'A' + 'a' : c);
    }
    out[64] = 0;
    return true;
}

static int64_t parse_size(const char *v)
{
    if (!v || !*v) return -1;
    char *end;
    long long x = strtoll(v, &end, 10);
    return *end || x < 0 ? -1 : (int64_t)x;
}

static bool keep_going(void *cls)
{
    dl *t = cls;
    if (pk_time_ms() - t->last_byte_ms <= t->d->o->stall_ms) return true;
    t->stalled = true;
    return false;
}

/* The headers every request carries; n returned. */
static int base_headers(const hub_dl *d, httpc_header *h, char *auth, size_t cap)
{
    int n = 0;
    h[n++] = (httpc_header){ "User-Agent", "polykv" };
    if (d->o->token && d->o->token[0]) {
        snprintf(auth, cap, "Bearer %s", d->o->token);
        h[n++] = (httpc_header){ "Authorization", auth };
    }
    return n;
}

/* What the hub says before the transfer: access, and the sha256 and size
 * it links the file to. */
static pk_status head(dl *t, char *err, size_t err_len)
{
    const hub_dl *d = t->d;
    httpc_header h[3];
    char auth[600];
    int n = base_headers(d, h, auth, sizeof auth);
    httpc_request rq = { .method = "HEAD", .url = d->url, .headers = h, .n_headers = n,
                         .connect_timeout_ms = d->o->connect_timeout_ms, .timeout_ms = d->o->api_timeout_ms,
                         .max_body_bytes = 1 << 20, .max_redirects = 0 };
    httpc_response r;
    char why[256];
    if (httpc_fetch(&rq, &r, why, sizeof why) != PK_OK)
        return pk_errf(err, err_len, PK_EIO, "%s: cannot reach the hub: %s", d->name, why);
    pk_status st = PK_OK;
    char linked[65];
    if (r.status == 401 || r.status == 403)
        st = pk_errf(err, err_len, PK_EREFUSED, "%s: the hub refused access (%ld): a gated or private repo needs "
                     "a token with access to it (--hf-token or HF_TOKEN)", d->name, r.status);
    else if (r.status == 404)
        st = pk_errf(err, err_len, PK_ENOTFOUND, "%s: the hub has no such file (404)", d->name);
    else if (etag_sha256(header(&r, "X-Linked-Etag"), linked)) {
        if (t->sha256[0] && strcmp(t->sha256, linked))
            st = pk_errf(err, err_len, PK_EFORMAT, "%s: the hub's listing gives sha256 %s, its file answer %s",
                         d->name, t->sha256, linked);
        memcpy(t->sha256, linked, sizeof linked);
    }
    int64_t size = parse_size(header(&r, "X-Linked-Size"));
    if (t->total < 0 && size >= 0) t->total = size;
    httpc_response_free(&r);
    return st;
}

static void progress(dl *t, bool done)
{
    hub_progress mode = t->d->o->progress;
    if (mode == HUB_PROGRESS_NONE) return;
    double now = pk_time_ms(), s = (now - t->t0_ms) / 1000.0;
    double rate = s > 0 ? (double)(t->have - t->have_at_t0) / MIB / s : 0;
    if (t->bar) {
        if (!done && now - t->shown_ms < 100) return;
        t->shown_ms = now;
        int pct = t->total > 0 ? (int)(100 * t->have / t->total) : 0, w = 30, fill = pct * w / 100;
        fprintf(stderr, "\rpolykv: %s %3d%% [%.*s%*s] %.1f/%.1f MiB %.1f MiB/s\033[K%s", t->d->name, pct, fill,
                "##############################", w - fill, "", (double)t->have / MIB,
                (double)(t->total > 0 ? t->total : t->have) / MIB, rate, done ? "\n" : "");
        return;
    }
    /* Lines: one per tenth of a known size, one per 100 MiB of an unknown one. */
    int tenth = t->total > 0 ? (int)(10 * t->have / t->total) : (int)(t->have / (100 * 1024 * 1024));
    if (tenth <= t->shown_tenth && (!done || (t->total > 0 && tenth == 10))) return;
    t->shown_tenth = tenth;
    if (t->total > 0)
        fprintf(stderr, "polykv: %s: %d%% (%.1f of %.1f MiB, %.1f MiB/s)\n", t->d->name, (int)(100 * t->have / t->total),
                (double)t->have / MIB, (double)t->total / MIB, rate);
    else
        fprintf(stderr, "polykv: %s: %.1f MiB (%.1f MiB/s)\n", t->d->name, (double)t->have / MIB, rate);
}

/* Back to an empty partial file. */
static pk_status restart(dl *t, char *err, size_t err_len)
{
    if (ftruncate(t->fd, 0) || lseek(t->fd, 0, SEEK_SET) < 0)
        return pk_errf(err, err_len, PK_EIO, "%s: %s", t->tmp, strerror(errno));
    t->have = 0;
    pk_sha256_init(&t->sha);
    return PK_OK;
}

static pk_status write_all(dl *t, const char *p, size_t n, char *err, size_t err_len)
{
    while (n) {
        ssize_t k = write(t->fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            /* No room is not worth another try in this start; the next one resumes. */
            int e = k < 0 ? errno : EIO;
            bool full = e == ENOSPC || e == EDQUOT || e == EFBIG;
            return pk_errf(err, err_len, full ? PK_EFULL : PK_EIO, "writing %s: %s (the partial file is kept; "
                           "the next start resumes it)", t->tmp, strerror(e));
        }
        pk_sha256_update(&t->sha, p, (size_t)k);
        t->have += k;
        p += k, n -= (size_t)k;
    }
    return PK_OK;
}

/* Whether the answer to a Range request continues at t->have. */
static bool continues(const dl *t, const httpc_response *r)
{
    const char *cr = header(r, "Content-Range");
    long long from, to, all;
    if (!cr || sscanf(cr, "bytes %lld-%lld/%lld", &from, &to, &all) != 3) return false;
    return from == t->have;
}

/* What an answer's status means for the attempt: PK_OK to read its body
 * (the file started over when the body starts at 0), PK_EIO to try again,
 * anything else ends the download. */
static pk_status answer(dl *t, long status, const httpc_response *r, char *err, size_t err_len)
{
    const char *name = t->d->name;
    if (status == 206 && continues(t, r)) return PK_OK;
    if (status == 200) return t->have > 0 ? restart(t, err, err_len) : PK_OK;
    if (status == 206 || status == 416) {
        pk_status st = restart(t, err, err_len);
        return st != PK_OK ? st : pk_errf(err, err_len, PK_EIO, "%s: the answer to a resume (%ld) does not start "
                                          "where the partial file ends; starting over", name, status);
    }
    if (status == 401 || status == 403)
        return pk_errf(err, err_len, PK_EREFUSED, "%s: the hub refused access (%ld): a gated or private repo needs "
                       "a token with access to it (--hf-token or HF_TOKEN)", name, status);
    if (status == 404) return pk_errf(err, err_len, PK_ENOTFOUND, "%s: the hub has no such file (404)", name);
    return pk_errf(err, err_len, status == 429 || status >= 500 ? PK_EIO : PK_EFORMAT, "%s: the hub answered %ld",
                   name, status);
}

/* One GET: PK_OK when the body ended whole; PK_EIO when another attempt
 * may do better; anything else ends the download. */
static pk_status attempt(dl *t, char *err, size_t err_len)
{
    const hub_dl *d = t->d;
    httpc_header h[4];
    char auth[600], range[64];
    int n = base_headers(d, h, auth, sizeof auth);
    if (t->have > 0) {
        snprintf(range, sizeof range, "bytes=%lld-", (long long)t->have);
        h[n++] = (httpc_header){ "Range", range };
    }
    httpc_request rq = { .method = "GET", .url = d->url, .headers = h, .n_headers = n,
                         .connect_timeout_ms = d->o->connect_timeout_ms, .timeout_ms = 0,
                         .max_body_bytes = (size_t)1 << 50, .max_redirects = 10,
                         .keep_going = keep_going, .cls = t };
    httpc_stream *s;
    httpc_response r;
    char why[256];
    t->last_byte_ms = pk_time_ms();
    t->stalled = false;
    pk_status st = httpc_open(&rq, &s, &r, why, sizeof why);
    if (st != PK_OK)
        return pk_errf(err, err_len, st == PK_ENOMEM ? st : PK_EIO, "%s: %s", d->name,
                       t->stalled ? "no answer within the stall limit" : why);
    if (t->have > 0 && r.status == 416 && t->total == t->have) {
        httpc_close(s);                               /* the partial file was whole already */
        httpc_response_free(&r);
        return PK_OK;
    }
    st = answer(t, r.status, &r, err, err_len);
    int64_t len = parse_size(header(&r, "Content-Length"));
    if (st == PK_OK && t->total < 0 && len >= 0) t->total = t->have + len;
    httpc_response_free(&r);
    while (st == PK_OK) {
        bool timed_out;
        long k = httpc_read(s, t->buf, DL_CHUNK, &timed_out, why, sizeof why);
        if (k == 0) break;
        if (k < 0) {
            st = pk_errf(err, err_len, PK_EIO, "%s: the transfer broke at %lld bytes: %s", d->name,
                         (long long)t->have, t->stalled ? "no data within the stall limit" : why);
            break;
        }
        t->last_byte_ms = pk_time_ms();
        st = write_all(t, t->buf, (size_t)k, err, err_len);
        progress(t, false);
    }
    httpc_close(s);
    if (st == PK_OK && t->total >= 0 && t->have != t->total)
        st = pk_errf(err, err_len, t->have < t->total ? PK_EIO : PK_EFORMAT, "%s: the transfer ended at %lld of "
                     "%lld bytes", d->name, (long long)t->have, (long long)t->total);
    return st;
}

/* Opens the partial file and hashes what it holds, so a resume continues
 * both the bytes and the digest. */
static pk_status open_partial(dl *t, char *err, size_t err_len)
{
    t->fd = open(t->tmp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (t->fd < 0) return pk_errf(err, err_len, PK_EIO, "cannot open %s: %s", t->tmp, strerror(errno));
    pk_sha256_init(&t->sha);
    ssize_t k;
    while ((k = read(t->fd, t->buf, DL_CHUNK)) > 0) {
        pk_sha256_update(&t->sha, t->buf, (size_t)k);
        t->have += k;
    }
    if (k < 0) return pk_errf(err, err_len, PK_EIO, "reading %s: %s", t->tmp, strerror(errno));
    if (t->total >= 0 && t->have > t->total) return restart(t, err, err_len);
    return PK_OK;
}

/* Room on the disk for the bytes still to come. */
static pk_status room(const dl *t, char *err, size_t err_len)
{
    struct statvfs v;
    if (t->total < 0 || fstatvfs(t->fd, &v)) return PK_OK;
    double free_b = (double)v.f_bavail * (double)v.f_frsize, need = (double)(t->total - t->have);
    if (need <= free_b) return PK_OK;
    return pk_errf(err, err_len, PK_EFULL, "%s needs %.1f MiB more in %s; %.1f MiB are free", t->d->name, need / MIB,
                   t->tmp, free_b / MIB);
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) && errno == EINTR) {}
}

static pk_status transfer(dl *t, char *err, size_t err_len)
{
    pk_status st = open_partial(t, err, err_len);
    if (st == PK_OK) st = room(t, err, err_len);
    if (st != PK_OK) return st;
    if (t->have > 0) fprintf(stderr, "polykv: %s: resuming at %.1f MiB\n", t->d->name, (double)t->have / MIB);
    else if (t->d->o->progress != HUB_PROGRESS_NONE)
        fprintf(stderr, "polykv: downloading %s (%.1f MiB)\n", t->d->name, t->total > 0 ? (double)t->total / MIB : 0);
    t->t0_ms = t->shown_ms = pk_time_ms();
    t->have_at_t0 = t->have;
    t->shown_tenth = t->total > 0 ? (int)(10 * t->have / t->total) : 0;
    int delay = t->d->o->retry_delay_ms;
    for (int k = 0; k < MAX(1, t->d->o->n_tries); k++) {
        if (k) {
            fprintf(stderr, "polykv: %s; trying again in %d ms (%d of %d)\n", err, delay, k + 1, t->d->o->n_tries);
            sleep_ms(delay);
            delay *= 2;
        }
        err[0] = 0;
        if ((st = attempt(t, err, err_len)) != PK_EIO) break;
    }
    if (st == PK_OK) progress(t, true);
    else if (t->bar) fputc('\n', stderr);
    return st;
}

/* The whole file against its sha256; then into place. */
static pk_status finish(dl *t, char *err, size_t err_len)
{
    const hub_dl *d = t->d;
    char got[65];
    pk_sha256_hex(&t->sha, got);
    if (t->sha256[0] && strcmp(got, t->sha256)) {
        unlink(t->tmp);
        return pk_errf(err, err_len, PK_EFORMAT, "%s: sha256 mismatch: the hub gives %s, the %lld bytes received hash "
                       "to %s; the download is deleted (try again; if it persists, the hub or a proxy between "
                       "serves a damaged file)", d->name, t->sha256, (long long)t->have, got);
    }
    if (fsync(t->fd) || rename(t->tmp, d->dest))
        return pk_errf(err, err_len, PK_EIO, "cannot move %s to %s: %s", t->tmp, d->dest, strerror(errno));
    if (!t->sha256[0])
        fprintf(stderr, "polykv: %s: the hub gives no sha256 for it (not an LFS file): not checked\n", d->name);
    return PK_OK;
}

pk_status hub_dl_file(const hub_dl *d, char *err, size_t err_len)
{
    dl t = { .d = d, .total = d->size, .fd = -1, .buf = malloc(DL_CHUNK) };
    if (!t.buf) return pk_errf(err, err_len, PK_ENOMEM, "out of memory");
    snprintf(t.tmp, sizeof t.tmp, "%s%s", d->dest, HUB_PARTIAL_SUFFIX);
    snprintf(t.sha256, sizeof t.sha256, "%s", d->sha256 ? d->sha256 : "");
    hub_progress p = d->o->progress;
    t.bar = p == HUB_PROGRESS_BAR || (p == HUB_PROGRESS_AUTO && isatty(2));
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", d->dest);
    if (strrchr(dir, '/')) *strrchr(dir, '/') = 0;
    if (hub_mkdirs(dir) != PK_OK) return pk_errf(err, err_len, PK_EIO, "cannot make %s: %s", dir, strerror(errno));
    pk_status st = head(&t, err, err_len);
    if (st == PK_OK) st = transfer(&t, err, err_len);
    if (st == PK_OK) st = finish(&t, err, err_len);
    if (t.fd >= 0) close(t.fd);
    free(t.buf);
    return st;
}
