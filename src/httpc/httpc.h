/*
 * httpc.h - a small blocking HTTP client (libcurl underneath): one request,
 * its whole answer in memory, every resource bounded by the caller.
 *
 * Design: one call, httpc_fetch, sends a request and returns the final
 * answer's status, headers and body.  Nothing is shared between calls (each
 * makes its own curl handle), so any thread may call it at any time.  What
 * a caller gets to bound, and must:
 *   - the schemes: http and https only, for the URL and for every redirect;
 *   - the answer's size: past max_body_bytes the transfer stops (PK_EFULL);
 *   - the time: connect_timeout_ms to connect, timeout_ms for the whole;
 *   - redirects: at most max_redirects followed (0: a 3xx is the answer);
 *   - giving up: keep_going(cls), asked often while data flows and about
 *     once a second while none does, stops it early.
 * Headers go out exactly as given (name and value checked for CR / LF);
 * libcurl's own defaults (Accept, Expect, a form Content-Type) are removed,
 * so the peer sees only Host, Content-Length and the caller's headers.
 * Bodies are never decompressed (no Accept-Encoding is added).
 */
#ifndef HTTPC_H
#define HTTPC_H

#include <stddef.h>

#include "../common/buf.h"

typedef struct httpc_header { const char *name, *value; } httpc_header;

typedef struct httpc_request {
    const char *method;            /* "GET", "POST", ... */
    const char *url;               /* absolute http:// or https:// URL */
    const httpc_header *headers;   /* [n_headers], borrowed */
    int n_headers;
    const void *body;              /* [n_body] bytes sent as the body (NULL: none) */
    size_t n_body;
    long connect_timeout_ms;
    long timeout_ms;               /* the whole exchange */
    size_t max_body_bytes;         /* of the answer */
    int max_redirects;
    bool (*keep_going)(void *cls); /* NULL: never gives up */
    void *cls;
} httpc_request;

/* The answer: owned by the caller once httpc_fetch returned PK_OK. */
typedef struct httpc_response {
    long status;
    char **names, **values;        /* [n_headers] of the final answer, as sent (malloc'ed) */
    int n_headers;
    pk_buf body;                   /* p NULL when the answer had no body */
    bool timed_out;                /* PK_EIO because a timeout passed */
} httpc_response;

/* Whether url is one httpc_fetch takes: an absolute http or https URL with
 * a host and no user name or password in it.  Pure; any thread. */
bool httpc_url_ok(const char *url);

/* Sends rq and waits for its answer.  PK_OK: *out holds it (any status).
 * Otherwise *out holds nothing to free, err a line saying why:
 * PK_EINVAL (the URL is not httpc_url_ok, a header name holds CR, LF or
 * a colon, a value CR or LF),
 * PK_EIO (no answer: DNS, connect, TLS, a timeout: timed_out set),
 * PK_EFULL (the answer outgrew max_body_bytes), PK_ECANCELLED
 * (keep_going said stop), PK_ENOMEM.  Any thread. */
pk_status httpc_fetch(const httpc_request *rq, httpc_response *out, char *err, size_t err_len);

/* Frees what *r holds and zeroes it; a zeroed r is a no-op. */
void httpc_response_free(httpc_response *r);

#endif
