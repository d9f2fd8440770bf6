/*
 * httpc.c - httpc_fetch over libcurl's easy interface (httpc.h has the
 * contract).  A fetch is one easy handle, made and freed inside the call:
 * no connection cache outlives it, so nothing needs a lock but libcurl's
 * one-time global initialisation.
 *
 * The answer is collected by two callbacks: headers (cleared at each new
 * status line, so a followed redirect's headers do not leak into the final
 * answer's) and body (refusing, past the cap, the bytes that would exceed
 * it, which makes libcurl stop with a write error).
 */
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "httpc.h"

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc = CURLE_FAILED_INIT;

static void global_init(void) { global_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

/* One exchange: the curl handles, what came back so far, how it ended. */
struct httpc_stream {
    CURLM *multi;
    CURL *easy;
    struct curl_slist *headers;
    bool (*keep_going)(void *cls);
    void *cls;
    size_t max_body_bytes, n_body;     /* the cap; body bytes received in all */
    bool follow;                       /* redirects are followed */
    httpc_response *head;              /* open: the caller's; after it, the stream's own copy */
    pk_buf body;                       /* received, not yet read: [pos, n) */
    size_t pos;
    bool head_done, done, over_cap, oom, cancelled;
    CURLcode result;
    char curl_err[CURL_ERROR_SIZE];
};

bool httpc_url_ok(const char *url)
{
    if (!url || strpbrk(url, "\r\n")) return false;
    CURLU *u = curl_url();
    if (!u) return false;
    char *scheme = NULL, *host = NULL, *user = NULL, *pass = NULL;
    bool ok = curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME) == CURLUE_OK &&
              curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
              curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK && host[0] &&
              (!strcasecmp(scheme, "http") || !strcasecmp(scheme, "https")) &&
              curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_NO_USER &&
              curl_url_get(u, CURLUPART_PASSWORD, &pass, 0) == CURLUE_NO_PASSWORD;
    curl_free(scheme);
    curl_free(host);
    curl_free(user);
    curl_free(pass);
    curl_url_cleanup(u);
    return ok;
}

static void drop_headers(httpc_response *r)
{
    for (int i = 0; i < r->n_headers; i++) {
        free(r->names[i]);
        free(r->values[i]);
    }
    free(r->names);
    free(r->values);
    r->names = r->values = NULL;
    r->n_headers = 0;
}

void httpc_response_free(httpc_response *r)
{
    if (!r) return;
    drop_headers(r);
    pk_buf_free(&r->body);
    memset(r, 0, sizeof *r);
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

static char *dup_range(const char *p, size_t n)
{
    char *s = malloc(n + 1);
    if (!s) return NULL;
    memcpy(s, p, n);
    s[n] = 0;
    return s;
}

/* A block of headers ended: the final answer's, unless it is an interim
 * 1xx or a redirect curl is about to follow. */
static bool final_block(httpc_stream *f)
{
    long code = 0;
    curl_easy_getinfo(f->easy, CURLINFO_RESPONSE_CODE, &code);
    if (code < 200) return false;
    bool redirect = code == 301 || code == 302 || code == 303 || code == 307 || code == 308;
    for (int i = 0; redirect && f->follow && i < f->head->n_headers; i++)
        if (!strcasecmp(f->head->names[i], "location")) return false;
    f->head->status = code;
    return true;
}

/* One header line of an answer ("Name: value\r\n", a status line, or the
 * blank line that ends a block). */
static size_t on_header(char *line, size_t size, size_t n, void *cls)
{
    httpc_stream *f = cls;
    size_t len = size * n;
    httpc_response *r = f->head;
    if (f->head_done) return len;                 /* trailers of a chunked body */
    if (len >= 5 && !memcmp(line, "HTTP/", 5)) {  /* a new answer: a redirect's or an interim one's end */
        drop_headers(r);
        return len;
    }
    if (len <= 2 && (line[0] == '\r' || line[0] == '\n')) {
        f->head_done = final_block(f);
        return len;
    }
    const char *colon = memchr(line, ':', len);
    if (!colon || colon == line) return len;
    size_t name_len = (size_t)(colon - line);
    const char *v = colon + 1, *end = line + len;
    while (v < end && is_space(*v)) v++;
    while (end > v && is_space(end[-1])) end--;
    if (r->n_headers >= 256) return len;          /* a peer that floods headers gets the first 256 */
    char **names = realloc(r->names, (size_t)(r->n_headers + 1) * sizeof *names);
    if (names) r->names = names;
    char **values = realloc(r->values, (size_t)(r->n_headers + 1) * sizeof *values);
    if (values) r->values = values;
    char *nm = dup_range(line, name_len), *val = dup_range(v, (size_t)(end - v));
    if (!names || !values || !nm || !val) {
        free(nm);
        free(val);
        f->oom = true;
        return 0;
    }
    r->names[r->n_headers] = nm;
    r->values[r->n_headers] = val;
    r->n_headers++;
    return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *cls)
{
    httpc_stream *f = cls;
    size_t len = size * n;
    if (f->n_body + len > f->max_body_bytes) {
        f->over_cap = true;
        return 0;
    }
    f->head_done = true;                          /* a body means the headers before it were final */
    if (f->pos == f->body.n) f->pos = f->body.n = 0;   /* all read: start over, keep the room */
    pk_buf_put(&f->body, data, len);
    if (f->body.oom) {
        f->oom = true;
        return 0;
    }
    f->n_body += len;
    return len;
}

/* The request's header list: the caller's, then empty values that remove
 * libcurl's defaults the caller did not set. */
static pk_status header_list(const httpc_request *rq, struct curl_slist **out)
{
    static const char *const defaults[] = { "Accept", "Expect", "Content-Type" };
    struct curl_slist *l = NULL;
    pk_buf line = {0};
    for (int i = 0; i < rq->n_headers; i++) {
        const httpc_header *h = &rq->headers[i];
        if (!h->name[0] || strpbrk(h->name, "\r\n:") || strpbrk(h->value, "\r\n")) {
            curl_slist_free_all(l);
            pk_buf_free(&line);
            return PK_EINVAL;
        }
        line.n = 0;
        /* "Name;" sends a header with an empty value; "Name:" would remove it. */
        if (h->value[0]) pk_buf_printf(&line, "%s: %s", h->name, h->value);
        else pk_buf_printf(&line, "%s;", h->name);
        struct curl_slist *next = line.oom ? NULL : curl_slist_append(l, line.p);
        if (!next) goto oom;
        l = next;
    }
    for (size_t k = 0; k < ARRAY_LEN(defaults); k++) {
        bool given = false;
        for (int i = 0; i < rq->n_headers && !given; i++)
            given = !strcasecmp(rq->headers[i].name, defaults[k]);
        if (given) continue;
        line.n = 0;
        pk_buf_printf(&line, "%s:", defaults[k]);
        struct curl_slist *next = line.oom ? NULL : curl_slist_append(l, line.p);
        if (!next) goto oom;
        l = next;
    }
    pk_buf_free(&line);
    *out = l;
    return PK_OK;
oom:
    curl_slist_free_all(l);
    pk_buf_free(&line);
    return PK_ENOMEM;
}

static void set_options(CURL *c, const httpc_request *rq, httpc_stream *f)
{
    curl_easy_setopt(c, CURLOPT_URL, rq->url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, f->follow ? 1L : 0L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, (long)rq->max_redirects);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);    /* threads: no SIGALRM for DNS timeouts */
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, rq->connect_timeout_ms);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, rq->timeout_ms);
    curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)rq->max_body_bytes);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, f->headers);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, f);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, f->curl_err);
    if (rq->body || !strcmp(rq->method, "POST")) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->n_body);
        curl_easy_setopt(c, CURLOPT_COPYPOSTFIELDS, rq->body ? rq->body : "");
    }
    if (!strcmp(rq->method, "HEAD")) curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else if (strcmp(rq->method, "GET") && strcmp(rq->method, "POST"))
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, rq->method);
}

/* What went wrong, once the exchange stopped short: a status and err. */
static pk_status failure(const httpc_stream *f, bool *timed_out, char *err, size_t err_len)
{
    if (timed_out) *timed_out = false;
    if (f->oom) {
        snprintf(err, err_len, "out of memory");
        return PK_ENOMEM;
    }
    if (f->over_cap || f->result == CURLE_FILESIZE_EXCEEDED) {
        snprintf(err, err_len, "the answer is over the limit of %zu bytes", f->max_body_bytes);
        return PK_EFULL;
    }
    if (f->cancelled) {
        snprintf(err, err_len, "cancelled");
        return PK_ECANCELLED;
    }
    if (timed_out) *timed_out = f->result == CURLE_OPERATION_TIMEDOUT;
    snprintf(err, err_len, "%s", f->curl_err[0] ? f->curl_err : curl_easy_strerror(f->result));
    return PK_EIO;
}

/* Runs the exchange until want(f) or its end; false when it failed (the
 * end of a successful one is true, with done set). */
static bool drive(httpc_stream *f, bool (*want)(const httpc_stream *))
{
    while (!want(f) && !f->done) {
        int running = 0;
        CURLMcode mc = curl_multi_perform(f->multi, &running);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(f->multi, &left)))
            if (m->msg == CURLMSG_DONE) {
                f->done = true;
                f->result = m->data.result;
            }
        if (mc != CURLM_OK && !f->done) {
            f->done = true;
            f->result = CURLE_OUT_OF_MEMORY;
            f->oom = mc == CURLM_OUT_OF_MEMORY;
        }
        if (want(f) || f->done) break;
        if (f->keep_going && !f->keep_going(f->cls)) {
            f->cancelled = true;
            return false;
        }
        curl_multi_poll(f->multi, NULL, 0, 100, NULL);
    }
    return !f->done || f->result == CURLE_OK;
}

static bool have_head(const httpc_stream *f) { return f->head_done; }
static bool have_bytes(const httpc_stream *f) { return f->pos < f->body.n; }

void httpc_close(httpc_stream *f)
{
    if (!f) return;
    if (f->multi && f->easy) curl_multi_remove_handle(f->multi, f->easy);
    curl_easy_cleanup(f->easy);
    curl_multi_cleanup(f->multi);
    curl_slist_free_all(f->headers);
    pk_buf_free(&f->body);
    if (f->head) {
        httpc_response_free(f->head);
        free(f->head);
    }
    free(f);
}

pk_status httpc_open(const httpc_request *rq, httpc_stream **out, httpc_response *head, char *err,
                     size_t err_len)
{
    *out = NULL;
    memset(head, 0, sizeof *head);
    if (err_len) err[0] = 0;
    if (!httpc_url_ok(rq->url)) {
        snprintf(err, err_len, "not an http(s) URL with a host (and no user or password)");
        return PK_EINVAL;
    }
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK) {
        snprintf(err, err_len, "libcurl: %s", curl_easy_strerror(global_rc));
        return PK_EIO;
    }
    httpc_stream *f = calloc(1, sizeof *f);
    if (!f) {
        snprintf(err, err_len, "out of memory");
        return PK_ENOMEM;
    }
    *f = (httpc_stream){ .keep_going = rq->keep_going, .cls = rq->cls, .max_body_bytes = rq->max_body_bytes,
                         .follow = rq->max_redirects > 0, .head = head };
    pk_status st = header_list(rq, &f->headers);
    if (st != PK_OK) {
        snprintf(err, err_len, "%s",
                 st == PK_EINVAL ? "a header name or value holds CR, LF or ':'" : "out of memory");
        f->head = NULL;
        httpc_close(f);
        return st;
    }
    f->multi = curl_multi_init();
    f->easy = curl_easy_init();
    if (!f->multi || !f->easy) {
        f->head = NULL;
        httpc_close(f);
        snprintf(err, err_len, "out of memory");
        return PK_ENOMEM;
    }
    set_options(f->easy, rq, f);
    if (curl_multi_add_handle(f->multi, f->easy) != CURLM_OK) {
        curl_easy_cleanup(f->easy);
        f->easy = NULL;
        f->head = NULL;
        httpc_close(f);
        snprintf(err, err_len, "out of memory");
        return PK_ENOMEM;
    }
    if (!drive(f, have_head) && !(f->head_done && have_bytes(f))) {   /* body bytes before a failure: httpc_read's */
        bool timed_out = false;
        st = failure(f, &timed_out, err, err_len);
        f->head = NULL;
        httpc_close(f);
        httpc_response_free(head);
        head->timed_out = timed_out;
        return st;
    }
    if (!f->head_done) {                          /* ended cleanly without a body: its headers were final */
        long code = 0;
        curl_easy_getinfo(f->easy, CURLINFO_RESPONSE_CODE, &code);
        head->status = code;
    }
    /* From here the caller owns *head; later headers (trailers) go nowhere. */
    f->head = calloc(1, sizeof *f->head);
    if (!f->head) {
        httpc_close(f);
        httpc_response_free(head);
        snprintf(err, err_len, "out of memory");
        return PK_ENOMEM;
    }
    f->head_done = true;
    *out = f;
    return PK_OK;
}

long httpc_read(httpc_stream *f, void *buf, size_t cap, bool *timed_out, char *err, size_t err_len)
{
    if (timed_out) *timed_out = false;
    /* Bytes that came before a failure are the caller's first (the part
     * of a download before a cut is kept and resumed); the failure is
     * told when nothing is left to read. */
    if (!drive(f, have_bytes) && !have_bytes(f)) return failure(f, timed_out, err, err_len);
    size_t n = MIN(cap, f->body.n - f->pos);
    if (n) memcpy(buf, f->body.p + f->pos, n);
    f->pos += n;
    return (long)n;
}

pk_status httpc_fetch(const httpc_request *rq, httpc_response *out, char *err, size_t err_len)
{
    httpc_stream *f;
    pk_status st = httpc_open(rq, &f, out, err, err_len);
    if (st != PK_OK) return st;
    bool timed_out = false;
    char chunk[16384];
    for (;;) {
        long n = httpc_read(f, chunk, sizeof chunk, &timed_out, err, err_len);
        if (n == 0) break;
        if (n < 0) {
            st = (pk_status)n;
            break;
        }
        pk_buf_put(&out->body, chunk, (size_t)n);
        if (out->body.oom) {
            snprintf(err, err_len, "out of memory");
            st = PK_ENOMEM;
            break;
        }
    }
    httpc_close(f);
    if (st != PK_OK) {
        httpc_response_free(out);
        out->timed_out = timed_out;
    }
    return st;
}
