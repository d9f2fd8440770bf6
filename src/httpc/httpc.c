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

typedef struct fetch_ctx {
    const httpc_request *rq;
    httpc_response *out;
    bool over_cap, oom, cancelled;
} fetch_ctx;

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

/* One header line of an answer ("Name: value\r\n", a status line, or the
 * blank line that ends a block). */
static size_t on_header(char *line, size_t size, size_t n, void *cls)
{
    fetch_ctx *f = cls;
    size_t len = size * n;
    httpc_response *r = f->out;
    if (len >= 5 && !memcmp(line, "HTTP/", 5)) {  /* a new answer: a redirect's or an interim one's end */
        drop_headers(r);
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
    fetch_ctx *f = cls;
    size_t len = size * n;
    if (f->out->body.n + len > f->rq->max_body_bytes) {
        f->over_cap = true;
        return 0;
    }
    pk_buf_put(&f->out->body, data, len);
    if (f->out->body.oom) {
        f->oom = true;
        return 0;
    }
    return len;
}

static int on_progress(void *cls, curl_off_t dl_total, curl_off_t dl_now, curl_off_t ul_total, curl_off_t ul_now)
{
    fetch_ctx *f = cls;
    if (f->rq->keep_going && !f->rq->keep_going(f->rq->cls)) {
        f->cancelled = true;
        return 1;
    }
    return 0;
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
        for (int i = 0; i < rq->n_headers && !given; i++) given = !strcasecmp(rq->headers[i].name, defaults[k]);
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

static void set_options(CURL *c, const httpc_request *rq, fetch_ctx *f, struct curl_slist *hl)
{
    curl_easy_setopt(c, CURLOPT_URL, rq->url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, rq->max_redirects > 0 ? 1L : 0L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, (long)rq->max_redirects);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);    /* threads: no SIGALRM for DNS timeouts */
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, rq->connect_timeout_ms);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, rq->timeout_ms);
    curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)rq->max_body_bytes);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, f);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, f);
    if (rq->body || !strcmp(rq->method, "POST")) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->n_body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, rq->body ? rq->body : "");
    }
    if (!strcmp(rq->method, "HEAD")) curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else if (strcmp(rq->method, "GET") && strcmp(rq->method, "POST"))
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, rq->method);
}

pk_status httpc_fetch(const httpc_request *rq, httpc_response *out, char *err, size_t err_len)
{
    memset(out, 0, sizeof *out);
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
    struct curl_slist *hl = NULL;
    pk_status st = header_list(rq, &hl);
    if (st != PK_OK) {
        snprintf(err, err_len, st == PK_EINVAL ? "a header name or value holds CR, LF or ':'" : "out of memory");
        return st;
    }
    CURL *c = curl_easy_init();
    if (!c) {
        curl_slist_free_all(hl);
        snprintf(err, err_len, "out of memory");
        return PK_ENOMEM;
    }
    char curl_err[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, curl_err);
    fetch_ctx f = { .rq = rq, .out = out };
    set_options(c, rq, &f, hl);
    CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
        st = PK_OK;
    } else if (f.oom) {
        st = PK_ENOMEM;
        snprintf(err, err_len, "out of memory");
    } else if (f.over_cap || rc == CURLE_FILESIZE_EXCEEDED) {
        st = PK_EFULL;
        snprintf(err, err_len, "the answer is over the limit of %zu bytes", rq->max_body_bytes);
    } else if (f.cancelled) {
        st = PK_ECANCELLED;
        snprintf(err, err_len, "cancelled");
    } else {
        st = PK_EIO;
        out->timed_out = rc == CURLE_OPERATION_TIMEDOUT;
        snprintf(err, err_len, "%s", curl_err[0] ? curl_err : curl_easy_strerror(rc));
    }
    curl_easy_cleanup(c);
    curl_slist_free_all(hl);
    if (st != PK_OK) {
        bool timed_out = out->timed_out;
        httpc_response_free(out);
        out->timed_out = timed_out;
    }
    return st;
}
