/*
 * httpc.h - a small blocking HTTP client (libcurl underneath): one request,
 * its answer whole in memory or read as it comes, every resource bounded
 * by the caller.
 *
 * Design: httpc_fetch sends a request and returns the final answer's
 * status, headers and body.  httpc_open sends it and returns once the
 * final answer's status and headers are in; httpc_read then gives the body
 * as it arrives (an event stream, say), httpc_close ends it.  Each request
 * has its own curl handles and is driven only inside these calls, on the
 * caller's thread: nothing runs in the background, nothing is shared, so
 * any thread may use the client, a stream one thread at a time.  What a
 * caller gets to bound, and must:
 *   - the schemes: http and https only, for the URL and for every redirect;
 *   - the answer's size: past max_body_bytes the transfer stops (PK_EFULL);
 *   - the time: connect_timeout_ms to connect, timeout_ms for the whole;
 *   - redirects: at most max_redirects followed (0: a 3xx is the answer);
 *   - giving up: keep_going(cls), asked at least every 100 ms while a
 *     call waits, stops it early.
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
    void *cls;                     /* must outlive a stream; the rest is copied by httpc_open */
} httpc_request;

typedef struct httpc_stream httpc_stream;

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

/* httpc_fetch's first half: sends rq and waits for the final answer's
 * status and headers.  PK_OK: *out is the stream (httpc_close it), *head
 * the status and headers (body empty; httpc_response_free it).  Failures
 * as httpc_fetch's (*out NULL, *head holds only timed_out). */
pk_status httpc_open(const httpc_request *rq, httpc_stream **out, httpc_response *head, char *err,
                     size_t err_len);

/* Waits for body bytes: the count copied into buf[cap] (> 0), 0 at the
 * body's end, or a negative pk_status as httpc_fetch's (err says why,
 * timed_out as *timed_out when not NULL).  The bytes that arrived before
 * a failure (a connection cut midway) are given first, the failure once
 * they are read. */
long httpc_read(httpc_stream *s, void *buf, size_t cap, bool *timed_out, char *err, size_t err_len);

/* Ends the exchange (the connection closes if the body is not over) and
 * frees s; NULL is a no-op. */
void httpc_close(httpc_stream *s);

/* Frees what *r holds and zeroes it; a zeroed r is a no-op. */
void httpc_response_free(httpc_response *r);

#endif
