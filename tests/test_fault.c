/*
 * test_fault.c - fail the N-th allocation, for N = 1 .. every allocation a
 * short scripted workload makes (tests/fault.h), in three areas, and the
 * N-th send or file write of the server, the router and the CORS proxy in
 * four more:
 *
 *   start      model_load + eng_new: a failure is a status, never a crash
 *              or a leak, and the next try works;
 *   engine     a live engine (stories260K, 3 slots): two greedy sessions,
 *              a sampled one with stop strings and log-probs, a pool
 *              created, forked, attached to and released.  Every task ends
 *              with DONE or ERROR within 20 s (a hung client fails the
 *              test), a greedy session that ends with DONE has exactly its
 *              reference tokens (no damage from a failure elsewhere), and
 *              after each N the engine, fault-free, still gives the
 *              reference tokens and holds no pool, and its invariants
 *              (eng_check, POLYKV_CHECK=1) held at every step;
 *   server     the HTTP server in-process on loopback: whole and streamed
 *              completions, a chat, a Messages stream with tool turns, a
 *              pool, /tokenize, /slots.  Every
 *              request gets a whole HTTP response (a status line and a
 *              body complete by its Content-Length or its last chunk): a
 *              200, or an error status with a JSON body, or a stream that
 *              ends with its last event or an error event; never a closed
 *              connection without an answer, never a hang, and the server
 *              answers the script whole after the sweep;
 *   send       the server area's script, with the N-th send, sendmsg,
 *              write or sendfile on the server's accepted sockets failing
 *              with EPIPE or ECONNRESET (tests/fault_send.c interposes on
 *              MHD's calls, which --wrap cannot reach), N = 1 .. every send
 *              of a run, then again with the N-th sending half its bytes.
 *              A failed send cuts exactly the reply it was part of (its
 *              client reads EOF, never hangs), every other reply of the
 *              run comes whole; a short send cuts none.  A bystander
 *              client, exempt from the fault, sends greedy completions to
 *              the same server all along: each must come whole with the
 *              reference text.  After each N the script, fault-free,
 *              comes whole with the reference text, and LSan finds no
 *              leak of a cut request at exit;
 *   save       a slot saved over HTTP into --slot-save-path and restored
 *              into another slot, with the N-th write (ENOSPC), fsync or
 *              rename (EIO) of a file there failing: a save that fails
 *              answers an error and leaves no file, torn or whole, and no
 *              temporary one; a save that answers 200 restores to the same
 *              tokens and the same greedy continuation.  Then a pool
 *              pinned under --pool-dir, its file written before the pin is
 *              answered: a pin answered 200 has its file, one whose file
 *              failed is refused (5xx) and undone (not pinned, no file),
 *              and the release leaves the directory empty;
 *   router     the router in-process (src/router, srv_router.c) with one
 *              model whose child is build-fault/polykv (FAULT_POLYKV):
 *              greedy and streamed completions, a streamed chat,
 *              /tokenize, /slots and /v1/models through it.  First the
 *              N-th send of its replies fails, which must cut exactly that
 *              reply; then the N-th send of its loopback client's requests
 *              to the child (rt_http.c), which must turn that request into
 *              a whole 502 and cut nothing; then that send short (half its
 *              bytes), which must change nothing: rt_http.c sends the
 *              rest.  After each N the script comes whole, fault-free,
 *              with the reference text;
 *   cors       /cors-proxy (--ui-mcp-proxy: src/httpc, libcurl) in front
 *              of a second server on the same engine, a whole and a
 *              streamed completion and /health: the router's three sweeps,
 *              its replies, curl's sends to the upstream failing, then
 *              short.
 *
 * One run's sweep (docs/benchmarks.md): start N = 1..77; engine 1..93;
 * server 1..2301 (20,718 requests); send 1..22 (207 requests, 274 beside
 * them from the bystander), short 1..20 (189); save 1..7, pool-dir 1..7;
 * router replies 1..21 (132), to the child 1..19 (120) and short 1..19
 * (120); cors replies 1..5 (18), to the upstream 1..3 (12) and short 1..3
 * (12).  How many sends a run makes moves by a few between runs, as a
 * stream's events batch into chunks as they come.
 *
 * Built and run only by `make test-fault` (AddressSanitizer and LSan on,
 * so a leak on any failure path fails the program at exit); one area with
 * FAULT_AREA=start|engine|server|send|save|router|cors
 * FAULT_POLYKV=build-fault/polykv build-fault/tests/test_fault.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <jansson.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "../src/engine/eng.h"
#include "../src/model/model.h"
#include "../src/router/rt.h"
#include "../src/server/srv.h"
#include "fault.h"
#include "test.h"

#define N_GEN 12

typedef struct run {
    int32_t tok[3][N_GEN + 1];
    int n_tok[3];
    eng_ev_kind end[3];          /* DONE, ERROR, or 0: never submitted */
    bool placed[3];              /* its PLACED came */
    bool late_refusal[3];        /* an ERROR for what a start needs, after its PLACED */
    pk_status pool_st, fork_st;
    bool hung;
} run;

static const char *texts[3] = { "Once upon a time", "Lily had a red ball. She liked to play with it every day",
                                "The sun was" };
static int32_t prompt[3][64], n_prompt[3];
static int32_t pool_tok[64], n_pool;   /* a prefix of prompt[1] */

/* Reads t to its end; false when no event came within 20 s. */
static bool drain(eng_task *t, run *r, int i)
{
    eng_event ev;
    for (;;) {
        pk_status st = eng_task_next(t, &ev, 20000);
        if (st == PK_ETIMEDOUT) return false;
        if (st != PK_OK) return true;
        if (ev.kind == ENG_EV_TOKEN && r->n_tok[i] < N_GEN + 1) r->tok[i][r->n_tok[i]++] = ev.token;
        if (ev.kind == ENG_EV_PLACED) r->placed[i] = true;
        if (ev.kind == ENG_EV_DONE || ev.kind == ENG_EV_ERROR) r->end[i] = ev.kind;
        /* A task that cannot start (its sampler, its grammar) is refused
         * before it is announced placed, never after. */
        if (ev.kind == ENG_EV_ERROR && r->placed[i] &&
            (!strcmp(ev.message, "out of memory for the sampler") ||
             !strcmp(ev.message, "out of memory for the grammar")))
            r->late_refusal[i] = true;
        eng_event_clear(&ev);
    }
}

static eng_completion req(int i, int32_t pool_id)
{
    eng_completion c = { .prompt = prompt[i], .n_prompt = n_prompt[i], .n_predict = N_GEN, .cache_prompt = true,
                         .id_slot = -1, .pool_id = pool_id, .report_placed = true };
    c.sp = smp_default_params();
    c.sp.temp = 0;
    if (i == 2) {                /* sampled, with stop strings and log-probs */
        c.sp.temp = 0.8f;
        c.sp.seed = 7;
        c.n_probs = 3;
        c.stop[0] = "the";
        c.stop[1] = "ball";
    }
    return c;
}

static eng_pool_reply pool_op(eng *e, eng_pool_verb verb, int32_t id, const int32_t *tok, int n, bool recursive)
{
    eng_pool_req rq = { .verb = verb, .pool_id = id, .tokens = tok, .n_tokens = n, .branch_pos = -1,
                        .recursive = recursive };
    eng_pool_reply rp;
    eng_pool_op(e, &rq, &rp);
    return rp;
}

static void workload(eng *e, run *r)
{
    memset(r, 0, sizeof *r);
    eng_task *t[3] = {0};
    eng_completion c = req(0, 0);
    if (eng_submit(e, &c, &t[0]) != PK_OK) t[0] = NULL;
    eng_pool_reply p = pool_op(e, ENG_POOL_CREATE, 0, pool_tok, n_pool, false);
    r->pool_st = p.status;
    int32_t pool = p.status == PK_OK ? p.pool_id : 0;
    if (pool) r->fork_st = pool_op(e, ENG_POOL_FORK, pool, prompt[1], n_prompt[1] - 2, false).status;
    c = req(1, pool);
    if (eng_submit(e, &c, &t[1]) != PK_OK) t[1] = NULL;
    c = req(2, 0);
    if (eng_submit(e, &c, &t[2]) != PK_OK) t[2] = NULL;
    for (int i = 0; i < 3; i++) {
        if (!t[i]) continue;
        if (!drain(t[i], r, i)) r->hung = true;
        eng_task_release(t[i]);
    }
    if (pool) pool_op(e, ENG_POOL_RELEASE, pool, NULL, 0, true);
}

/* Fault-free: every pool released (a release that failed under the fault
 * leaves its pool), so each N starts from the same tree. */
static int release_all(eng *e)
{
    static eng_stats st;
    if (eng_get_stats(e, &st) != PK_OK) return -1;
    int n = st.n_pools;
    for (int i = 0; i < st.n_pools; i++) pool_op(e, ENG_POOL_RELEASE, st.pools[i].pool_id, NULL, 0, true);
    return n;
}

static bool same_tokens(const run *a, const run *b, int i)
{
    return a->n_tok[i] == b->n_tok[i] && !memcmp(a->tok[i], b->tok[i], sizeof(int32_t) * (size_t)a->n_tok[i]);
}

static void sweep_start(const char *path)
{
    long n = 1, failed = 0;
    for (;; n++) {
        char err[256] = "";
        model *m = NULL;
        eng *e = NULL;
        eng_params ep = eng_default_params();
        ep.n_slots = 3;
        ep.n_ctx = 1024;
        ep.n_threads = 1;
        fault_arm(n);
        pk_status st = model_load(path, MODEL_COPY, &m, err, sizeof err);
        if (st == PK_OK) st = eng_new(m, &ep, &e);
        bool hit = fault_hit();
        fault_arm(0);
        if (st != PK_OK) {
            failed++;
            if (!hit) CHECK(!"start failed without a fault");
        }
        eng_free(e);
        model_free(m);
        if (!hit) break;
    }
    /* The loop ends at the first N the armed allocation is not reached: a
     * hook that is never reached would pass with nothing injected. */
    CHECK(n - 1 > 0);
    CHECK(failed == n - 1);
    printf("fault: start: N = 1..%ld, %ld injected, %ld failed cleanly\n", n - 1, n - 1, failed);
}

static void sweep_engine(const char *path)
{
    char err[256] = "";
    model *m;
    ASSERT(model_load(path, MODEL_COPY, &m, err, sizeof err) == PK_OK);
    const tok_vocab *v = model_vocab(m);
    for (int i = 0; i < 3; i++)
        ASSERT(tok_encode(v, texts[i], strlen(texts[i]), true, false, prompt[i], 64, &n_prompt[i]) == PK_OK);
    n_pool = n_prompt[1] - 4;
    memcpy(pool_tok, prompt[1], sizeof(int32_t) * (size_t)n_pool);
    eng_params ep = eng_default_params();
    ep.n_slots = 3;
    ep.n_ctx = 1024;
    ep.n_threads = 1;
    eng *e;
    ASSERT(eng_new(m, &ep, &e) == PK_OK);

    run ref, r, after;
    workload(e, &ref);
    CHECK(!ref.hung);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(ref.end[i], ENG_EV_DONE);
    CHECK_EQ_INT(ref.pool_st, PK_OK);
    long a0 = fault_allocs();
    workload(e, &r);
    long per_run = fault_allocs() - a0;
    CHECK(same_tokens(&r, &ref, 0) && same_tokens(&r, &ref, 1));

    long n = 1, n_hit = 0, n_err = 0, n_hung = 0, n_damaged = 0, n_late = 0;
    for (;; n++) {
        fault_arm(n);
        workload(e, &r);
        bool hit = fault_hit();
        fault_arm(0);
        n_hit += hit;
        if (r.hung) n_hung++;
        for (int i = 0; i < 2; i++) {                /* the greedy ones */
            if (r.end[i] == ENG_EV_DONE && !same_tokens(&r, &ref, i)) n_damaged++;
            if (r.end[i] == ENG_EV_ERROR) n_err++;
        }
        if (r.end[2] == ENG_EV_ERROR) n_err++;
        for (int i = 0; i < 3; i++) n_late += r.late_refusal[i];
        CHECK(release_all(e) >= 0);
        workload(e, &after);                         /* the engine, fault-free, as before */
        if (after.hung || !same_tokens(&after, &ref, 0) || !same_tokens(&after, &ref, 1) ||
            after.pool_st != PK_OK || after.end[2] != ENG_EV_DONE) {
            n_damaged++;
            fprintf(stderr, "fault: engine: after N = %ld the fault-free run differs\n", n);
        }
        CHECK_EQ_INT(release_all(e), 0);
        if (r.hung || n_damaged) break;
        if (!hit && n > per_run) break;
    }
    CHECK_EQ_INT(n_hung, 0);
    CHECK_EQ_INT(n_damaged, 0);
    CHECK_EQ_INT(n_late, 0);
    /* With the hook never reached per_run is 0 and the loop stops at N = 1
     * having failed nothing.  Not n_hit >= per_run: the engine thread
     * batches what it finds in its mailbox, so a run's allocations can
     * move by a few. */
    CHECK(per_run > 0);
    CHECK(n_hit > 0 && n - 1 >= per_run);
    printf("fault: engine: N = 1..%ld (%ld allocations a run, %ld injected), %ld tasks ended with an ERROR, "
           "%ld hung, %ld damaged\n", n - 1, per_run, n_hit, n_err, n_hung, n_damaged);
    eng_free(e);
    model_free(m);
}

/* ---- the server in-process ---- */

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    return fd;
}

typedef enum answer { ANS_WHOLE, ANS_CLOSED, ANS_HUNG, ANS_BROKEN } answer;

/* One request's answer; big enough for the script's longest reply. */
typedef struct reply {
    char buf[1 << 17];
    size_t n;
    const char *body;            /* after the headers, in buf; NULL when there are none */
    int status;
} reply;

/* True when the body is complete by its own framing: Content-Length bytes,
 * or chunks up to the last, empty one.  A reply cut anywhere, even just
 * before its last chunk, is not whole. */
static bool framed(const reply *r)
{
    const char *end = r->buf + r->n, *p = r->body;
    const char *cl = strcasestr(r->buf, "\r\nContent-Length:");
    if (cl && cl < p) return (size_t)(end - p) == strtoull(cl + 17, NULL, 10);
    const char *te = strcasestr(r->buf, "\r\nTransfer-Encoding: chunked");
    if (!te || te > p) return true;  /* delimited by the close alone */
    for (;;) {
        char *e;
        unsigned long long k = strtoull(p, &e, 16);
        const char *crlf = e == p ? NULL : strstr(e, "\r\n");
        if (!crlf) return false;
        p = crlf + 2;
        if (k == 0) return end - p >= 2 && !strcmp(end - 2, "\r\n");
        if ((unsigned long long)(end - p) < k + 2 || memcmp(p + k, "\r\n", 2)) return false;
        p += k + 2;
    }
}

/* Sends one request (Connection: close) and reads to the end: whole when
 * there is a status line, a framed body and, for a stream, its last event.
 * exempt: this connection's sends never count (fault_send_exempt). */
static answer ask(int port, const char *path, const char *body, reply *r, bool exempt)
{
    char head[512];
    int fd = connect_to(port);
    if (exempt) {
        struct sockaddr_in a;
        socklen_t len = sizeof a;
        ASSERT(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
        fault_send_exempt(ntohs(a.sin_port));
    }
    int n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                     body ? "POST" : "GET", path, body ? strlen(body) : 0);
    send(fd, head, (size_t)n, MSG_NOSIGNAL);
    if (body) send(fd, body, strlen(body), MSG_NOSIGNAL);
    r->n = 0;
    r->body = NULL;
    answer a = ANS_CLOSED;
    for (;;) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll(&p, 1, 20000) <= 0) { a = ANS_HUNG; break; }
        ssize_t k = recv(fd, r->buf + r->n, sizeof r->buf - 1 - r->n, 0);
        if (k <= 0) break;
        r->n += (size_t)k;
        if (r->n >= sizeof r->buf - 1) break;
    }
    close(fd);
    r->buf[r->n] = 0;
    r->status = 0;
    if (a == ANS_HUNG) return a;
    if (!r->n) return ANS_CLOSED;
    if (sscanf(r->buf, "HTTP/1.1 %d", &r->status) != 1) return ANS_BROKEN;
    const char *b = strstr(r->buf, "\r\n\r\n");
    if (!b) return ANS_BROKEN;
    r->body = b += 4;
    if (!framed(r)) return ANS_BROKEN;
    if (strstr(r->buf, "text/event-stream"))
        return strstr(b, "\"stop\":true") || strstr(b, "[DONE]") || strstr(b, "\"message_stop\"") ||
               strstr(b, "\"error\"") ? ANS_WHOLE : ANS_BROKEN;
    return r->status == 200 || r->status == 201 || strstr(b, "\"error\"") ? ANS_WHOLE : ANS_BROKEN;
}

static const char *const server_script[][2] = {
    { "/completion", "{\"prompt\": \"Once upon a time\", \"n_predict\": 6, \"temperature\": 0}" },
    { "/completion", "{\"prompt\": \"Lily had\", \"n_predict\": 6, \"stream\": true, \"n_probs\": 2}" },
    { "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 4, "
                              "\"stream\": true, \"stream_options\": {\"include_usage\": true}}" },
    { "/v1/completions", "{\"prompt\": \"The sun\", \"max_tokens\": 4, \"logprobs\": 2, \"stop\": [\"the\"]}" },
    { "/v1/messages", "{\"system\": \"s\", \"max_tokens\": 4, \"stream\": true, \"messages\": [{\"role\": \"user\", "
                      "\"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": [{\"type\": \"tool_use\", \"id\": \"a\", "
                      "\"name\": \"f\", \"input\": {\"x\": 1}}]}, {\"role\": \"user\", \"content\": [{\"type\": "
                      "\"tool_result\", \"tool_use_id\": \"a\", \"content\": \"ok\"}]}]}" },
    { "/polykv/pools", "{\"prompt\": \"Once upon a time there was\"}" },
    { "/tokenize", "{\"content\": \"Once upon a time\", \"with_pieces\": true}" },
    { "/slots", NULL },
    { "/polykv/pools", NULL },
};

/* The greedy completion's text, copied into out; false when the reply has none. */
static bool content_of(const reply *r, char *out, size_t cap)
{
    if (!r->body) return false;
    json_t *j = json_loadb(r->body, (size_t)(r->buf + r->n - r->body), 0, NULL);
    const char *c = json_string_value(json_object_get(j, "content"));
    bool ok = c && strlen(c) < cap;
    if (ok) strcpy(out, c);
    json_decref(j);
    return ok;
}

/* The reply's integer field key, or -1. */
static long long int_of(const reply *r, const char *key)
{
    if (!r->body) return -1;
    json_t *j = json_loadb(r->body, (size_t)(r->buf + r->n - r->body), 0, NULL);
    const json_t *v = json_object_get(j, key);
    long long n = json_is_integer(v) ? json_integer_value(v) : -1;
    json_decref(j);
    return n;
}

/* Runs the script once, counting each answer's kind.  content (cap bytes,
 * or NULL): the first, greedy completion's text.  loud: a broken or hung
 * answer is reported (a cut one is the send area's expected outcome). */
static void script(int port, bool loud, int counts[4], int *n_requests, char *content, size_t cap)
{
    static reply r;
    for (size_t i = 0; i < ARRAY_LEN(server_script); i++) {
        answer a = ask(port, server_script[i][0], server_script[i][1], &r, false);
        counts[a]++;
        (*n_requests)++;
        if (i == 0 && content && (a != ANS_WHOLE || !content_of(&r, content, cap))) content[0] = 0;
        if (a == ANS_HUNG || (loud && a == ANS_BROKEN))
            fprintf(stderr, "fault: server: %s answered %s (status %d)\n", server_script[i][0],
                    a == ANS_HUNG ? "nothing for 20 s" : "a broken response", r.status);
    }
}

/* The in-process server the server and send areas drive. */
typedef struct server {
    model *m;
    eng *e;
    srv *s;
    int port;
} server;

/* save_dir: --slot-save-path, or NULL; pool_dir: --pool-dir, or NULL;
 * proxy: --ui-mcp-proxy. */
static void server_up(server *v, const char *path, const char *save_dir, const char *pool_dir, bool proxy)
{
    char err[256] = "";
    ASSERT(model_load(path, MODEL_COPY, &v->m, err, sizeof err) == PK_OK);
    eng_params ep = eng_default_params();
    ep.n_slots = 2;
    ep.n_ctx = 1024;
    ep.n_threads = 1;
    ep.pool_dir = pool_dir;
    ASSERT(eng_new(v->m, &ep, &v->e) == PK_OK);
    srv_params sp = srv_default_params();
    sp.port = 0;
    sp.slot_save_path = save_dir;
    sp.ui_mcp_proxy = proxy;
    ASSERT(srv_new(&sp, &v->s, err, sizeof err) == PK_OK);
    ASSERT(srv_set_engine(v->s, v->e, path, err, sizeof err) == PK_OK);
    v->port = srv_port(v->s);
}

static void server_down(server *v)
{
    srv_free(v->s);
    eng_free(v->e);
    model_free(v->m);
}

static void sweep_server(const char *path)
{
    server v;
    server_up(&v, path, NULL, NULL, false);
    int counts[4] = {0}, n_req = 0;
    long a0 = fault_allocs();
    script(v.port, true, counts, &n_req, NULL, 0);
    long per_run = fault_allocs() - a0;
    CHECK_EQ_INT(counts[ANS_WHOLE], n_req);
    release_all(v.e);
    memset(counts, 0, sizeof counts);
    n_req = 0;
    long n = 1, n_hit = 0;
    for (;; n++) {
        fault_arm(n);
        script(v.port, true, counts, &n_req, NULL, 0);
        bool hit = fault_hit();
        fault_arm(0);
        n_hit += hit;
        release_all(v.e);
        if (counts[ANS_HUNG]) break;
        if (!hit && n > per_run) break;
    }
    CHECK_EQ_INT(counts[ANS_HUNG], 0);
    CHECK_EQ_INT(counts[ANS_BROKEN], 0);
    CHECK_EQ_INT(counts[ANS_CLOSED], 0);
    /* A hook never reached would stop the loop at N = 1 with nothing
     * failed.  Not n_hit >= per_run: how many allocations a run makes
     * moves with how a stream's events batch, so an N near the end may
     * miss. */
    CHECK(per_run > 0);
    CHECK(n_hit > 0 && n - 1 >= per_run);
    /* The server still answers as before. */
    int after[4] = {0}, n_after = 0;
    script(v.port, true, after, &n_after, NULL, 0);
    CHECK_EQ_INT(after[ANS_WHOLE], n_after);
    printf("fault: server: N = 1..%ld (%ld allocations a run, %ld injected), %d requests: %d answered whole, "
           "%d closed without a response, %d broken, %d hung\n", n - 1, per_run, n_hit, n_req,
           counts[ANS_WHOLE], counts[ANS_CLOSED], counts[ANS_BROKEN], counts[ANS_HUNG]);
    server_down(&v);
}

/* ---- the server's sends ---- */

/* A client beside the script, on the same server, whose connections are
 * exempt from the fault: every one of its greedy completions must come
 * whole and with the reference text while its neighbours' replies fail. */
typedef struct bystander {
    int port;
    const char *ref;
    atomic_bool stop;
    int n, n_whole, n_right, n_hung;
} bystander;

static void *bystander_run(void *arg)
{
    bystander *b = arg;
    static reply r;
    char content[256];
    while (!atomic_load(&b->stop)) {
        answer a = ask(b->port, server_script[0][0], server_script[0][1], &r, true);
        b->n++;
        b->n_whole += a == ANS_WHOLE;
        b->n_hung += a == ANS_HUNG;
        b->n_right += a == ANS_WHOLE && content_of(&r, content, sizeof content) && !strcmp(content, b->ref);
        if (a == ANS_HUNG) break;
    }
    return NULL;
}

/* The N-th send on the server's sockets fails (or, short, sends half), for
 * N = 1 .. every send of a script run.  The request it hits ends cut (its
 * client sees EOF with part of the reply or none, never a hang); every
 * other request of that run, and every bystander's, comes whole; after
 * each N the script, fault-free, comes whole with the reference text. */
static void sweep_send(const char *path, fault_send_mode mode)
{
    const char *name = mode == FAULT_SEND_FAIL ? "send" : "send (short)";
    server v;
    server_up(&v, path, NULL, NULL, false);
    fault_send_watch(v.port);
    char ref[256], got[256];
    int counts[4] = {0}, n_req = 0;
    script(v.port, true, counts, &n_req, ref, sizeof ref);
    long s0 = fault_sends();
    script(v.port, true, counts, &n_req, got, sizeof got);
    long per_run = fault_sends() - s0;
    CHECK_EQ_INT(counts[ANS_WHOLE], n_req);
    CHECK(ref[0] && !strcmp(got, ref));
    CHECK(per_run > 0);          /* the interposers are reached at all */
    release_all(v.e);

    bystander b = { .port = v.port, .ref = ref };
    pthread_t th;
    ASSERT(pthread_create(&th, NULL, bystander_run, &b) == 0);
    long n = 1, n_hit = 0, n_wrong = 0, n_damaged = 0, n_cut = 0;
    int total[4] = {0};
    n_req = 0;
    for (;; n++) {
        memset(counts, 0, sizeof counts);
        int k = 0;
        fault_send_arm(n, mode);
        script(v.port, false, counts, &k, NULL, 0);
        bool hit = fault_send_hit();
        fault_send_arm(0, mode);
        n_hit += hit;
        n_req += k;
        for (int i = 0; i < 4; i++) total[i] += counts[i];
        int not_whole = k - counts[ANS_WHOLE];
        n_cut += not_whole;
        /* A failed send cuts exactly the reply it was part of; a short one
         * cuts nothing, MHD sends the rest. */
        int expect = hit && mode == FAULT_SEND_FAIL ? 1 : 0;
        if (not_whole != expect) {
            n_wrong++;
            fprintf(stderr, "fault: %s: N = %ld cut %d replies, not %d\n", name, n, not_whole, expect);
        }
        release_all(v.e);
        int after[4] = {0}, n_after = 0;
        script(v.port, true, after, &n_after, got, sizeof got);
        if (after[ANS_WHOLE] != n_after || strcmp(got, ref)) {
            n_damaged++;
            fprintf(stderr, "fault: %s: after N = %ld the fault-free script differs\n", name, n);
        }
        release_all(v.e);
        if (counts[ANS_HUNG] || after[ANS_HUNG] || b.n_hung) break;
        if (!hit && n > per_run) break;
    }
    atomic_store(&b.stop, true);
    pthread_join(th, NULL);
    fault_send_exempt(0);        /* a later area's client may get the same port */
    CHECK_EQ_INT(total[ANS_HUNG], 0);
    CHECK_EQ_INT(n_wrong, 0);
    CHECK_EQ_INT(n_damaged, 0);
    /* How many sends a run makes varies with how a stream's events batch,
     * so an N near the end may miss; the sweep still covers a whole run. */
    CHECK(n_hit > 0 && n - 1 >= per_run);
    CHECK(b.n > 0);
    CHECK_EQ_INT(b.n_hung, 0);
    CHECK_EQ_INT(b.n_whole, b.n);
    CHECK_EQ_INT(b.n_right, b.n);
    printf("fault: %s: N = 1..%ld (%ld sends a run, %ld hit), %d requests: %d answered whole, %ld cut (%d closed without "
           "a response, %d cut short), %d hung; bystander %d requests, %d whole with the reference text\n",
           name, n - 1, per_run, n_hit, n_req, total[ANS_WHOLE], n_cut, total[ANS_CLOSED], total[ANS_BROKEN],
           total[ANS_HUNG], b.n, b.n_right);
    fault_send_watch(0);
    server_down(&v);
}

/* ---- the save files ---- */

/* One save and restore through the server: slot 0 computes a greedy
 * completion and is saved, slot 1 restores the file and continues from it. */
typedef struct save_run {
    answer a[4];
    int status[4];               /* completion, save, restore, completion on the restored slot */
    long long n_saved, n_restored;
    char content[2][256];        /* the completions' texts */
} save_run;

static const char *const save_script[4][2] = {
    { "/completion", "{\"prompt\": \"Once upon a time\", \"n_predict\": 6, \"temperature\": 0, \"id_slot\": 0, "
                     "\"cache_prompt\": true}" },
    { "/slots/0?action=save", "{\"filename\": \"s.bin\"}" },
    { "/slots/1?action=restore", "{\"filename\": \"s.bin\"}" },
    { "/completion", "{\"prompt\": \"Once upon a time\", \"n_predict\": 6, \"temperature\": 0, \"id_slot\": 1, "
                     "\"cache_prompt\": true}" },
};

static void save_once(int port, save_run *out)
{
    static reply r;
    memset(out, 0, sizeof *out);
    for (int i = 0; i < 4; i++) {
        out->a[i] = ask(port, save_script[i][0], save_script[i][1], &r, false);
        out->status[i] = r.status;
        if ((i == 0 || i == 3) && !content_of(&r, out->content[i / 3], sizeof out->content[0]))
            out->content[i / 3][0] = 0;
        if (i == 1) out->n_saved = int_of(&r, "n_saved");
        if (i == 2) out->n_restored = int_of(&r, "n_restored");
    }
}

/* A save that says 200 left a file that restores to the same tokens and
 * the same continuation; a save that failed left no file, torn or whole,
 * and no temporary one.  Every request gets a whole answer either way. */
static bool save_sound(const save_run *r, const char *ref, const char *file, const char *tmp)
{
    for (int i = 0; i < 4; i++)
        if (r->a[i] != ANS_WHOLE) return false;
    if (access(tmp, F_OK) == 0 || r->status[0] != 200 || strcmp(r->content[0], ref)) return false;
    if (r->status[1] != 200) return access(file, F_OK) != 0 && r->status[2] != 200;
    return r->n_saved > 0 && r->status[2] == 200 && r->n_restored == r->n_saved && r->status[3] == 200 &&
           !strcmp(r->content[1], ref);
}

/* The N-th write, fsync or rename of a file in --slot-save-path fails
 * (ENOSPC, EIO), N = 1 .. every one a save makes. */
static void sweep_save(const char *path)
{
    char tmpl[] = "/tmp/polykv-fault-XXXXXX", dir[4096], file[4200], tmp[4208];
    ASSERT(mkdtemp(tmpl) && realpath(tmpl, dir));
    snprintf(file, sizeof file, "%s/s.bin", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", file);
    server v;
    server_up(&v, path, dir, NULL, false);
    fault_file_watch(dir);
    save_run r;
    save_once(v.port, &r);
    char ref[256];
    snprintf(ref, sizeof ref, "%s", r.content[0]);
    CHECK(ref[0] && save_sound(&r, ref, file, tmp) && r.status[1] == 200);
    unlink(file);
    long s0 = fault_sends();
    save_once(v.port, &r);
    long per_run = fault_sends() - s0;
    CHECK(per_run > 0);
    long n = 1, n_hit = 0, n_refused = 0, n_bad = 0, n_damaged = 0;
    for (;; n++) {
        unlink(file);
        fault_send_arm(n, FAULT_SEND_FAIL);
        save_once(v.port, &r);
        bool hit = fault_send_hit();
        fault_send_arm(0, FAULT_SEND_FAIL);
        n_hit += hit;
        n_refused += r.status[1] != 200;
        if (!save_sound(&r, ref, file, tmp) || (!hit && r.status[1] != 200)) {
            n_bad++;
            fprintf(stderr, "fault: save: N = %ld: save %d, restore %d (%lld of %lld tokens), continuation %d "
                    "\"%s\"%s\n", n, r.status[1], r.status[2], r.n_restored, r.n_saved, r.status[3], r.content[1],
                    access(tmp, F_OK) == 0 ? ", a temporary file left" : "");
        }
        unlink(file);
        save_once(v.port, &r);
        if (!save_sound(&r, ref, file, tmp) || r.status[1] != 200) {
            n_damaged++;
            fprintf(stderr, "fault: save: after N = %ld the fault-free save differs\n", n);
        }
        if (!hit && n > per_run) break;
    }
    CHECK(n_hit > 0 && n - 1 >= per_run);
    CHECK_EQ_INT(n_bad, 0);
    CHECK_EQ_INT(n_damaged, 0);
    printf("fault: save: N = 1..%ld (%ld file writes, fsyncs and renames a save), %ld saves refused with an "
           "error and no file, %ld bad, %ld damaged after\n", n - 1, per_run, n_refused, n_bad, n_damaged);
    fault_file_watch(NULL);
    server_down(&v);
    unlink(file);
    rmdir(dir);
}

/* Files in dir. */
static int n_files(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));) n += de->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

/* A pool created, pinned (--pool-dir writes its file before the pin is
 * answered), read back and released.  Returns the pin's status; *pinned,
 * *file: what GET said and whether pool-<id>.pkv was there after the pin. */
static int pin_once(const server *v, const char *dir, int *pinned, bool *file, bool *tmp)
{
    static reply r;
    char url[96], path[4200];
    ask(v->port, "/polykv/pools", "{\"prompt\": \"Once upon a time there was\"}", &r, false);
    long long id = int_of(&r, "pool_id");
    *pinned = -1;
    *file = *tmp = false;
    if (r.status != 201 || id <= 0) return -r.status;
    snprintf(url, sizeof url, "/polykv/pools/%lld/pin", id);
    ask(v->port, url, "{}", &r, false);
    int st = r.status;
    snprintf(path, sizeof path, "%s/pool-%lld.pkv", dir, id);
    *file = access(path, F_OK) == 0;
    strcat(path, ".tmp");
    *tmp = access(path, F_OK) == 0;
    snprintf(url, sizeof url, "/polykv/pools/%lld", id);
    ask(v->port, url, NULL, &r, false);
    const char *b = r.body ? strstr(r.body, "\"pinned\":") : NULL;
    if (b) *pinned = !strncmp(b + 9, "true", 4) || !strncmp(b + 10, "true", 4);
    return st;
}

/* The N-th write, fsync or rename under --pool-dir fails: a pin answered
 * 200 has its file, a refused one is undone (not pinned, no file), and
 * after the release the directory is empty. */
static void sweep_pool_dir(const char *path)
{
    char tmpl[] = "/tmp/polykv-fault-XXXXXX", dir[4096];
    ASSERT(mkdtemp(tmpl) && realpath(tmpl, dir));
    server v;
    server_up(&v, path, NULL, dir, false);
    fault_file_watch(dir);
    int pinned;
    bool file, tmp;
    CHECK(pin_once(&v, dir, &pinned, &file, &tmp) == 200 && pinned == 1 && file && !tmp);
    release_all(v.e);
    CHECK_EQ_INT(n_files(dir), 0);
    long s0 = fault_sends();
    pin_once(&v, dir, &pinned, &file, &tmp);
    long per_run = fault_sends() - s0;
    release_all(v.e);
    CHECK(per_run > 0);
    long n = 1, n_hit = 0, n_refused = 0, n_bad = 0, n_damaged = 0;
    for (;; n++) {
        fault_send_arm(n, FAULT_SEND_FAIL);
        int st = pin_once(&v, dir, &pinned, &file, &tmp);
        bool hit = fault_send_hit();
        fault_send_arm(0, FAULT_SEND_FAIL);
        n_hit += hit;
        n_refused += st != 200;
        bool sound = !tmp && (st == 200 ? pinned == 1 && file : hit && st >= 500 && pinned == 0 && !file);
        release_all(v.e);
        if (!sound || n_files(dir)) {
            n_bad++;
            fprintf(stderr, "fault: pool-dir: N = %ld: pin %d, pinned %d, file %d, .tmp %d, %d files after the "
                    "release\n", n, st, pinned, file, tmp, n_files(dir));
        }
        if (pin_once(&v, dir, &pinned, &file, &tmp) != 200 || pinned != 1 || !file) {
            n_damaged++;
            fprintf(stderr, "fault: pool-dir: after N = %ld the fault-free pin differs\n", n);
        }
        release_all(v.e);
        if (!hit && n > per_run) break;
    }
    CHECK(n_hit > 0 && n - 1 >= per_run);
    CHECK_EQ_INT(n_bad, 0);
    CHECK_EQ_INT(n_damaged, 0);
    printf("fault: pool-dir: N = 1..%ld (%ld file writes, fsyncs and renames a pin), %ld pins refused and "
           "undone, %ld bad, %ld damaged after\n", n - 1, per_run, n_refused, n_bad, n_damaged);
    fault_file_watch(NULL);
    server_down(&v);
    rmdir(dir);
}

/* ---- the router ---- */

/* The router in-process, its one model's child a polykv process. */
typedef struct router {
    rt *t;
    srv *s;
    int port, child_port;
    char dir[64];
} router;

static const char *const router_script[][2] = {
    { "/completion", "{\"model\": \"m\", \"prompt\": \"Once upon a time\", \"n_predict\": 6, \"temperature\": 0}" },
    { "/completion", "{\"model\": \"m\", \"prompt\": \"Lily had\", \"n_predict\": 6, \"stream\": true}" },
    { "/v1/chat/completions", "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                              "\"max_tokens\": 4, \"stream\": true, \"stream_options\": {\"include_usage\": true}}" },
    { "/tokenize", "{\"model\": \"m\", \"content\": \"Once upon a time\"}" },
    { "/slots?model=m", NULL },
    { "/v1/models", NULL },
};

/* A script of n requests through a relay (the router, the CORS proxy):
 * each answer's kind, the whole 502s, and the first, greedy completion's text. */
typedef struct relay_script {
    const char *name;            /* the area's, for its lines */
    const char *const (*req)[2];
    size_t n;
} relay_script;

static void relay_once(int port, const relay_script *sc, int counts[4], int *n_req, int *n_502, char *content,
                       size_t cap)
{
    static reply r;
    for (size_t i = 0; i < sc->n; i++) {
        answer a = ask(port, sc->req[i][0], sc->req[i][1], &r, false);
        counts[a]++;
        (*n_req)++;
        *n_502 += a == ANS_WHOLE && r.status == 502;
        if (i == 0 && (a != ANS_WHOLE || !content_of(&r, content, cap))) content[0] = 0;
        if (a == ANS_HUNG) fprintf(stderr, "fault: %s: %s answered nothing for 20 s\n", sc->name, sc->req[i][0]);
    }
}

static const relay_script router_run = { "router", router_script, ARRAY_LEN(router_script) };

static bool router_up(router *v, const char *gguf, const char *exe)
{
    char link[128], err[256] = "", target[PATH_MAX];
    snprintf(v->dir, sizeof v->dir, "/tmp/polykv-fault-XXXXXX");
    ASSERT(mkdtemp(v->dir));
    snprintf(link, sizeof link, "%s/m.gguf", v->dir);
    /* A relative target (../shared, the default) would resolve from /tmp. */
    ASSERT(realpath(gguf, target));
    ASSERT(symlink(target, link) == 0);
    static const char *const args[] = { "-np", "2", "-c", "1024", "-t", "1" };
    rt_params p = { .exe = exe, .models_dir = v->dir, .models_max = 1, .autoload = true, .child_args = args,
                    .n_child_args = (int)ARRAY_LEN(args), .load_timeout_ms = 60000 };
    ASSERT(rt_new(&p, &v->t, err, sizeof err) == PK_OK);
    srv_params sp = srv_default_params();
    sp.port = 0;
    sp.router = v->t;
    ASSERT(srv_new(&sp, &v->s, err, sizeof err) == PK_OK);
    v->port = srv_port(v->s);
    int counts[4] = {0}, n = 0, n_502 = 0;
    char content[256];
    relay_once(v->port, &router_run, counts, &n, &n_502, content, sizeof content);   /* loads the child */
    rt_info in;
    v->child_port = rt_info_at(v->t, 0, &in) && in.status == RT_LOADED ? in.port : 0;
    return v->child_port && counts[ANS_WHOLE] == n;
}

static void router_down(router *v)
{
    char link[128];
    srv_free(v->s);
    rt_free(v->t);
    snprintf(link, sizeof link, "%s/m.gguf", v->dir);
    unlink(link);
    rmdir(v->dir);
}

/* back 0: the N-th send of the relay's replies to its clients (on port)
 * fails, which must cut exactly that reply; back set: the N-th send of its
 * requests to the server behind it (on port back), which must turn that
 * request into a whole 502 and cut nothing.  A short send (mode) must do
 * neither: the sender sends the rest.  After each N the script comes
 * whole, fault-free, with the reference text. */
static void sweep_relay(const relay_script *sc, int port, int back, fault_send_mode mode)
{
    char name[80], ref[256], got[256];
    bool fail = mode == FAULT_SEND_FAIL;
    snprintf(name, sizeof name, "%s%s%s", sc->name, back ? " to its upstream" : "", fail ? "" : " (short)");
    int counts[4] = {0}, n_req = 0, n_502 = 0;
    relay_once(port, sc, counts, &n_req, &n_502, ref, sizeof ref);
    CHECK(ref[0] && counts[ANS_WHOLE] == n_req && !n_502);
    if (back) fault_send_watch_peer(back);
    else fault_send_watch(port);
    long s0 = fault_sends();
    relay_once(port, sc, counts, &n_req, &n_502, got, sizeof got);
    long per_run = fault_sends() - s0;
    CHECK(per_run > 0);
    long n = 1, n_hit = 0, n_wrong = 0, n_damaged = 0;
    int total[4] = {0}, total_502 = 0;
    n_req = 0;
    for (;; n++) {
        memset(counts, 0, sizeof counts);
        int k = 0, k_502 = 0;
        fault_send_arm(n, mode);
        relay_once(port, sc, counts, &k, &k_502, got, sizeof got);
        bool hit = fault_send_hit();
        fault_send_arm(0, mode);
        n_hit += hit;
        n_req += k;
        total_502 += k_502;
        for (int i = 0; i < 4; i++) total[i] += counts[i];
        int cut = k - counts[ANS_WHOLE], expect_cut = fail && hit && !back, expect_502 = fail && hit && back;
        if (cut != expect_cut || k_502 != expect_502) {
            n_wrong++;
            fprintf(stderr, "fault: %s: N = %ld cut %d replies (not %d), %d answered 502 (not %d)\n", name, n, cut,
                    expect_cut, k_502, expect_502);
        }
        int after[4] = {0}, n_after = 0, a_502 = 0;
        relay_once(port, sc, after, &n_after, &a_502, got, sizeof got);
        if (after[ANS_WHOLE] != n_after || a_502 || strcmp(got, ref)) {
            n_damaged++;
            fprintf(stderr, "fault: %s: after N = %ld the fault-free script differs\n", name, n);
        }
        if (counts[ANS_HUNG] || after[ANS_HUNG]) break;
        if (!hit && n > per_run) break;
    }
    fault_send_watch(0);
    fault_send_watch_peer(0);
    CHECK_EQ_INT(total[ANS_HUNG], 0);
    CHECK(n_hit > 0 && n - 1 >= per_run);
    CHECK_EQ_INT(n_wrong, 0);
    CHECK_EQ_INT(n_damaged, 0);
    printf("fault: %s: N = 1..%ld (%ld sends a run, %ld hit), %d requests: %d answered whole (%d of them 502), "
           "%d closed without a response, %d cut short, %d hung\n", name, n - 1, per_run, n_hit, n_req,
           total[ANS_WHOLE], total_502, total[ANS_CLOSED], total[ANS_BROKEN], total[ANS_HUNG]);
}

static void sweep_router(const char *path)
{
    const char *exe = getenv("FAULT_POLYKV");
    if (!exe || access(exe, X_OK)) {
        SKIP_PART("router area: FAULT_POLYKV names no polykv binary for the child (make test-fault sets it)");
        return;
    }
    router v;
    bool up = router_up(&v, path, exe);
    CHECK(up);
    if (up) {
        sweep_relay(&router_run, v.port, 0, FAULT_SEND_FAIL);
        sweep_relay(&router_run, v.port, v.child_port, FAULT_SEND_FAIL);
        sweep_relay(&router_run, v.port, v.child_port, FAULT_SEND_SHORT);
    }
    router_down(&v);
}

/* ---- the CORS proxy ---- */

/* /cors-proxy (--ui-mcp-proxy, libcurl through src/httpc) in front of a
 * second server on the same engine: its replies' sends and curl's sends to
 * the upstream fail in turn, as the router's do. */
static void sweep_cors(const char *path)
{
    server v;
    server_up(&v, path, NULL, NULL, true);
    char err[256] = "";
    srv_params sp = srv_default_params();
    sp.port = 0;
    srv *up;
    ASSERT(srv_new(&sp, &up, err, sizeof err) == PK_OK);
    ASSERT(srv_set_engine(up, v.e, path, err, sizeof err) == PK_OK);
    int back = srv_port(up);
    static char url[3][128];
    snprintf(url[0], sizeof url[0], "/cors-proxy?url=http://127.0.0.1:%d/completion", back);
    snprintf(url[1], sizeof url[1], "/cors-proxy?url=http://127.0.0.1:%d/completion", back);
    snprintf(url[2], sizeof url[2], "/cors-proxy?url=http://127.0.0.1:%d/health", back);
    const char *const req[3][2] = {
        { url[0], "{\"prompt\": \"Once upon a time\", \"n_predict\": 6, \"temperature\": 0}" },
        { url[1], "{\"prompt\": \"Lily had\", \"n_predict\": 6, \"stream\": true}" },
        { url[2], NULL },
    };
    relay_script sc = { "cors proxy", req, 3 };
    sweep_relay(&sc, v.port, 0, FAULT_SEND_FAIL);
    sweep_relay(&sc, v.port, back, FAULT_SEND_FAIL);
    sweep_relay(&sc, v.port, back, FAULT_SEND_SHORT);
    srv_free(up);
    server_down(&v);
}

int main(void)
{
    const char *shared = test_shared_dir();
    if (!shared) SKIP("../shared/models not found (set POLYKV_SHARED): the workloads need stories260K");
    char path[512];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", shared);
    fault_route_jansson();
    const char *only = getenv("FAULT_AREA");
    if (!only || !strcmp(only, "start")) sweep_start(path);
    if (!only || !strcmp(only, "engine")) sweep_engine(path);
    if (!only || !strcmp(only, "server")) sweep_server(path);
    if (!only || !strcmp(only, "send")) {
        sweep_send(path, FAULT_SEND_FAIL);
        sweep_send(path, FAULT_SEND_SHORT);
    }
    if (!only || !strcmp(only, "save")) {
        sweep_save(path);
        sweep_pool_dir(path);
    }
    if (!only || !strcmp(only, "router")) sweep_router(path);
    if (!only || !strcmp(only, "cors")) sweep_cors(path);
    return test_finish();
}
