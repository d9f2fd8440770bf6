/*
 * fuzz_server.c - libFuzzer entry for what the server does with a client's
 * bytes: the request body as JSON through generation-parameter validation
 * and chat rendering (ChatML and Llama 3.1, with tools); the same bytes as
 * generated text through tool-call parsing in both formats, checking the
 * streaming hold-back invariant; and then the same bytes as a request to
 * one route of a real server in this process (byte 0 picks the route and
 * method from the table below, every route the server has), served by an
 * engine on stories260K (../shared/models, or POLYKV_SHARED; without it
 * this part is left out, said once at start).  Every answer must be a
 * complete HTTP response whose status is below 500 (bad input is a 4xx,
 * never a server error) other than 501 (slot files without a directory:
 * none here), 503 (loading) and the Messages API's 500 for an image
 * (llama-server's answer without vision); a 4xx body must be a JSON error
 * object.  The body is also converted as a Messages request.
 *
 * Build and run (after `make`; the server files get the sanitizers, the
 * rest comes from build/libpolykv.a):
 *   fuzz/run.sh builds it: this file and the server's own sources with the
 *   sanitizers, the rest from build/libpolykv.a; run from the repository root.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "../src/model/model.h"
#include "../src/server/srv_impl.h"
#include "../src/server/srv_gen.h"
#include "../src/server/srv_parse.h"
#include "../src/server/srv_tools.h"

/* Every route, with the methods it answers and the queries it reads. */
static const struct { const char *method, *path; } routes[] = {
    { "GET", "/health" },           { "GET", "/v1/models" },          { "POST", "/v1/completions" },
    { "POST", "/v1/chat/completions" }, { "POST", "/completion" },    { "POST", "/tokenize" },
    { "POST", "/detokenize" },      { "POST", "/apply-template" },    { "GET", "/props" },
    { "GET", "/slots" },            { "GET", "/metrics" },            { "GET", "/polykv/cache" },
    { "POST", "/polykv/pools" },    { "GET", "/polykv/pools" },       { "POST", "/polykv/pools/1/fork" },
    { "POST", "/polykv/pools/1/pin" }, { "POST", "/polykv/pools/2/unpin" }, { "POST", "/polykv/pools/1/evict" },
    { "POST", "/polykv/pools/1/flush" }, { "DELETE", "/polykv/pools/2?recursive=true" },
    { "GET", "/polykv/pools/1" },   { "POST", "/polykv/pools/1/admission" }, { "GET", "/polykv/pools/1/capacity" },
    { "POST", "/polykv/admission" }, { "GET", "/polykv/admission" },  { "GET", "/polykv/capacity?expected_tokens=9" },
    { "POST", "/slots/0?action=save" }, { "POST", "/slots/0?action=restore" }, { "POST", "/slots/0?action=erase" },
    { "GET", "/polykv/tps" },       { "GET", "/" },                   { "POST", "/completions" },
    { "POST", "/v1/responses" },    { "POST", "/v1/responses/input_tokens" }, { "POST", "/predict" },
    { "POST", "/v1/messages" },     { "POST", "/v1/messages/count_tokens" },
};

static int port;                 /* 0: no model, the server part is left out */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *shared = getenv("POLYKV_SHARED");
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", shared ? shared : "../shared");
    model *m;
    if (model_load(path, MODEL_MMAP, &m, err, sizeof err) != PK_OK) {
        fprintf(stderr, "fuzz_server: %s: %s; the in-process server part is left out\n", path, err);
        return 0;
    }
    eng_params ep = eng_default_params();
    ep.n_ctx = 512;              /* 2 slots of 256: a request costs at most 256 tokens */
    ep.n_slots = 2;
    ep.n_pools = 4;
    ep.cache_ram_mib = 16;
    eng *e;
    srv *s;
    srv_params sp = srv_default_params();
    sp.port = 0;
    sp.endpoint_metrics = true;
    sp.max_body_bytes = 1 << 16;
    mkdir("build-fuzz/slots", 0700);
    sp.slot_save_path = "build-fuzz/slots";
    sp.gcp_predict_route = "/predict";
    if (eng_new(m, &ep, &e) != PK_OK || srv_new(&sp, &s, err, sizeof err) != PK_OK ||
        srv_set_engine(s, e, path, err, sizeof err) != PK_OK) {
        fprintf(stderr, "fuzz_server: cannot start the server: %s\n", err);
        exit(1);
    }
    port = srv_port(s);          /* the server lives as long as the process */
    return 0;
}

#define need(ok) need_at(ok, #ok, resp_seen)
static const char *resp_seen = "";
static void need_at(bool ok, const char *what, const char *resp)
{
    if (ok) return;
    fprintf(stderr, "fuzz_server: %s failed; the answer:\n%.600s\n", what, resp);
    abort();
}

/* Sends one request for route r with body[0, n) and checks the answer. */
static void request(size_t r, const char *body, size_t n)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = { 30, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    /* Hundreds of connections a second leave the loopback's ports in
     * TIME_WAIT; when the kernel has none free (EADDRNOTAVAIL) or the
     * backlog is full, wait and try again: that is the harness's limit,
     * not the server's answer. */
    int rc = -1;
    for (int tries = 0; fd >= 0 && tries < 200; tries++) {
        if ((rc = connect(fd, (struct sockaddr *)&a, sizeof a)) == 0) break;
        if (errno != EADDRNOTAVAIL && errno != EAGAIN && errno != ECONNREFUSED && errno != EINTR) break;
        close(fd);
        poll(NULL, 0, 50);
        fd = socket(AF_INET, SOCK_STREAM, 0);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    }
    if (rc != 0) fprintf(stderr, "fuzz_server: connect: %s\n", strerror(errno));
    need(fd >= 0 && rc == 0);
    char head[512];
    int hn = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                      routes[r].method, routes[r].path, n);
    send(fd, head, (size_t)hn, MSG_NOSIGNAL);
    for (size_t off = 0; off < n;) {
        ssize_t k = send(fd, body + off, n - off, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        off += (size_t)k;
    }
    static char resp[1 << 20];
    size_t got = 0;
    ssize_t k = 0;
    /* (libFuzzer's timer signal interrupts a blocking recv: go on reading) */
    while (got < sizeof resp - 1 && ((k = recv(fd, resp + got, sizeof resp - 1 - got, 0)) > 0 || (k < 0 && errno == EINTR)))
        if (k > 0) got += (size_t)k;
    if (got == 0) fprintf(stderr, "fuzz_server: no answer (recv %zd, %s)\n", k, k < 0 ? strerror(errno) : "closed");
    close(fd);
    resp[got] = 0;
    resp_seen = resp;
    unsigned status = 0;
    need(sscanf(resp, "HTTP/1.1 %u", &status) == 1);      /* an answer came, whole headers first */
    bool no_vision = status == 500 && strstr(resp, "image input is not supported");
    if (status >= 500 && status != 503 && !no_vision) {
        fprintf(stderr, "fuzz_server: %s %s answered %u:\n%.600s\n", routes[r].method, routes[r].path, status,
                resp);
        abort();
    }
    const char *b = strstr(resp, "\r\n\r\n");
    need(b != NULL);
    if (status >= 400) {
        json_t *j = json_loads(b + 4, 0, NULL);
        need(json_is_object(json_object_get(j, "error")));
        json_decref(j);
    }
}

static void tools(srv_tool_fmt f, const char *s, size_t n)
{
    srv_tool_msg m;
    if (srv_tools_parse(f, NULL, s, n, &m) != PK_OK) return;
    /* What streaming sends early is a prefix of the final content. */
    size_t k = srv_tools_content_prefix(f, s, n);
    if (k > n) abort();
    if (m.n_calls == 0 && (m.content_len != n || memcmp(m.content, s, n))) abort();
    for (int i = 0; i < m.n_calls; i++)
        if (!m.calls[i].name || !m.calls[i].arguments) abort();
    srv_tool_msg_free(&m);
}

/* Harmony's stream: what goes out early, at any cut, is a prefix of the
 * whole text's content and reasoning. */
static void harmony(const char *s, size_t n)
{
    srv_tool_msg m;
    if (srv_tools_parse(SRV_TOOL_HARMONY, NULL, s, n, &m) != PK_OK) return;
    pk_buf c = {0}, r = {0};
    const size_t cuts[] = { n / 2, n };
    for (size_t i = 0; i < ARRAY_LEN(cuts); i++) {
        if (srv_tools_harmony_prefix(s, cuts[i], &c, &r) != PK_OK) break;
        if (c.n > m.content_len || memcmp(c.p, m.content, c.n)) abort();
        if (r.n > m.reasoning_len || (r.n && memcmp(r.p, m.reasoning, r.n))) abort();
    }
    pk_buf_free(&c);
    pk_buf_free(&r);
    srv_tool_msg_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    tools(SRV_TOOL_QWEN, s, size);
    harmony(s, size);
    tools(SRV_TOOL_LLAMA3, s, size);
    tools(SRV_TOOL_QWEN_XML, s, size);
    tools(SRV_TOOL_GEMMA4, s, size);
    if (port && size > 0) request(data[0] % ARRAY_LEN(routes), s + 1, size - 1);

    json_t *body = json_loadb(s, size, 0, NULL);
    if (!json_is_object(body)) {
        json_decref(body);
        return 0;
    }
    eng_completion c;
    srv_gen_opts o;
    srv_err e;
    srv_gen_defaults d = { .n_slots = 4, .sp = smp_default_params(), .n_predict = -1 };
    for (srv_api api = SRV_API_NATIVE; api <= SRV_API_ANTHROPIC; api++)
        if (srv_parse_gen(body, api, &d, &c, &o, &e)) srv_gen_req_free(&c);
    json_t *msgs_chat = NULL;
    if (srv_anth_to_chat(body, &msgs_chat, &e)) {
        if (!json_is_array(json_object_get(msgs_chat, "messages"))) abort();
        json_decref(msgs_chat);
    } else if (e.status != 400 && !(e.status == 500 && strstr(e.msg, "image input is not supported"))) {
        abort();
    }
    for (tmpl_kind k = TMPL_CHATML; k <= TMPL_LLAMA3; k++) {
        char *prompt = NULL;
        size_t n = 0;
        srv_tool_fmt fmt;
        if (srv_render_chat(body, k, NULL, &prompt, &n, &fmt, &e)) {
            if (!prompt || strlen(prompt) != n) abort();
            free(prompt);
        } else if (e.status < 400 || e.status > 500) {
            abort();
        }
    }
    json_t *chat = srv_resp_to_chat(body, &e);
    if (!chat && (e.status < 400 || e.status > 500)) abort();
    json_decref(chat);
    json_decref(body);
    return 0;
}
