/*
 * test_fault.c - fail the N-th allocation, for N = 1 .. every allocation a
 * short scripted workload makes (tests/fault.h), in three areas:
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
 *              request gets a whole HTTP response: a 200, or an error
 *              status with a JSON body, or a stream that ends with its
 *              last event or an error event; never a closed connection
 *              without an answer, never a hang, and the server answers
 *              the script whole after each N.
 *
 * Not covered: failing writes.  The server's sends are MHD's (inside the
 * shared library, out of the linker's reach); what a failed send does is
 * what a client that leaves does, which native.test.mjs and bench/load.mjs
 * drive over real sockets.
 *
 * Built and run only by `make test-fault` (AddressSanitizer and LSan on,
 * so a leak on any failure path fails the program at exit).
 */
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "../src/engine/eng.h"
#include "../src/model/model.h"
#include "../src/server/srv.h"
#include "fault.h"
#include "test.h"

#define N_GEN 12

typedef struct run {
    int32_t tok[3][N_GEN + 1];
    int n_tok[3];
    eng_ev_kind end[3];          /* DONE, ERROR, or 0: never submitted */
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
        if (st == PK_EFULL) return false;
        if (st != PK_OK) return true;
        if (ev.kind == ENG_EV_TOKEN && r->n_tok[i] < N_GEN + 1) r->tok[i][r->n_tok[i]++] = ev.token;
        if (ev.kind == ENG_EV_DONE || ev.kind == ENG_EV_ERROR) r->end[i] = ev.kind;
        eng_event_clear(&ev);
    }
}

static eng_completion req(int i, int32_t pool_id)
{
    eng_completion c = { .prompt = prompt[i], .n_prompt = n_prompt[i], .n_predict = N_GEN, .cache_prompt = true,
                         .id_slot = -1, .pool_id = pool_id };
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
    CHECK(failed == n - 1);
    printf("fault: start: N = 1..%ld, %ld failed cleanly\n", n - 1, failed);
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

    long n = 1, n_err = 0, n_hung = 0, n_damaged = 0;
    for (;; n++) {
        fault_arm(n);
        workload(e, &r);
        bool hit = fault_hit();
        fault_arm(0);
        if (r.hung) n_hung++;
        for (int i = 0; i < 2; i++) {                /* the greedy ones */
            if (r.end[i] == ENG_EV_DONE && !same_tokens(&r, &ref, i)) n_damaged++;
            if (r.end[i] == ENG_EV_ERROR) n_err++;
        }
        if (r.end[2] == ENG_EV_ERROR) n_err++;
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
    printf("fault: engine: N = 1..%ld (%ld allocations a run), %ld tasks ended with an ERROR, %ld hung, "
           "%ld damaged\n", n - 1, per_run, n_err, n_hung, n_damaged);
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

/* Sends one request (Connection: close) and reads to the end: whole when
 * there is a status line and, for a stream, its last event. */
static answer ask(int port, const char *path, const char *body, int *status)
{
    static char buf[1 << 17];
    char head[512];
    int fd = connect_to(port);
    int n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                     body ? "POST" : "GET", path, body ? strlen(body) : 0);
    send(fd, head, (size_t)n, MSG_NOSIGNAL);
    if (body) send(fd, body, strlen(body), MSG_NOSIGNAL);
    size_t got = 0;
    answer a = ANS_CLOSED;
    for (;;) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll(&p, 1, 20000) <= 0) { a = ANS_HUNG; break; }
        ssize_t k = recv(fd, buf + got, sizeof buf - 1 - got, 0);
        if (k <= 0) break;
        got += (size_t)k;
        if (got >= sizeof buf - 1) break;
    }
    close(fd);
    buf[got] = 0;
    *status = 0;
    if (a == ANS_HUNG) return a;
    if (!got) return ANS_CLOSED;
    if (sscanf(buf, "HTTP/1.1 %d", status) != 1) return ANS_BROKEN;
    const char *b = strstr(buf, "\r\n\r\n");
    if (!b) return ANS_BROKEN;
    if (strstr(buf, "text/event-stream"))
        return strstr(b, "\"stop\":true") || strstr(b, "[DONE]") || strstr(b, "\"message_stop\"") ||
               strstr(b, "\"error\"") ? ANS_WHOLE : ANS_BROKEN;
    return *status == 200 || *status == 201 || strstr(b, "\"error\"") ? ANS_WHOLE : ANS_BROKEN;
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

static void script(int port, int counts[4], int *n_requests)
{
    for (size_t i = 0; i < ARRAY_LEN(server_script); i++) {
        int status;
        answer a = ask(port, server_script[i][0], server_script[i][1], &status);
        counts[a]++;
        (*n_requests)++;
        if (a == ANS_BROKEN || a == ANS_HUNG)
            fprintf(stderr, "fault: server: %s answered %s (status %d)\n", server_script[i][0],
                    a == ANS_HUNG ? "nothing for 20 s" : "a broken response", status);
    }
}

static void sweep_server(const char *path)
{
    char err[256] = "";
    model *m;
    ASSERT(model_load(path, MODEL_COPY, &m, err, sizeof err) == PK_OK);
    eng_params ep = eng_default_params();
    ep.n_slots = 2;
    ep.n_ctx = 1024;
    ep.n_threads = 1;
    eng *e;
    ASSERT(eng_new(m, &ep, &e) == PK_OK);
    srv_params sp = srv_default_params();
    sp.port = 0;
    srv *s;
    ASSERT(srv_new(&sp, &s, err, sizeof err) == PK_OK);
    ASSERT(srv_set_engine(s, e, path, err, sizeof err) == PK_OK);
    int port = srv_port(s);

    int counts[4] = {0}, n_req = 0;
    long a0 = fault_allocs();
    script(port, counts, &n_req);
    long per_run = fault_allocs() - a0;
    CHECK_EQ_INT(counts[ANS_WHOLE], n_req);
    release_all(e);
    memset(counts, 0, sizeof counts);
    n_req = 0;
    long n = 1;
    for (;; n++) {
        fault_arm(n);
        script(port, counts, &n_req);
        bool hit = fault_hit();
        fault_arm(0);
        release_all(e);
        if (counts[ANS_HUNG]) break;
        if (!hit && n > per_run) break;
    }
    CHECK_EQ_INT(counts[ANS_HUNG], 0);
    CHECK_EQ_INT(counts[ANS_BROKEN], 0);
    CHECK_EQ_INT(counts[ANS_CLOSED], 0);
    /* The server still answers as before. */
    int after[4] = {0}, n_after = 0;
    script(port, after, &n_after);
    CHECK_EQ_INT(after[ANS_WHOLE], n_after);
    printf("fault: server: N = 1..%ld (%ld allocations a run), %d requests: %d answered whole, %d closed "
           "without a response, %d broken, %d hung\n", n - 1, per_run, n_req, counts[ANS_WHOLE],
           counts[ANS_CLOSED], counts[ANS_BROKEN], counts[ANS_HUNG]);
    srv_free(s);
    eng_free(e);
    model_free(m);
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
    return test_finish();
}
