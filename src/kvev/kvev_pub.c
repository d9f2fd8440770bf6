/*
 * kvev_pub.c - the publisher of kvev_pub.h: configuration, the publisher
 * thread and its sockets (libzmq), the replay buffer.  The encoding is in
 * kvev_wire.c.
 *
 *   pair frames     : [8-byte big-endian seq][payload], or an empty frame: stop
 *   PUB frames      : topic | seq (8 bytes, big-endian) | payload
 *   replay request  : (ROUTER adds the client's id) | "" | start seq (8 bytes)
 *   replay answer   : id | "" | seq | payload, for every kept batch >= start,
 *                     then id | "" | -1 (8 bytes, two's complement) | ""
 *   ring            : the last buffer_steps batches, oldest first
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include <zmq.h>

#include "kvev_pub.h"

typedef struct kept { uint64_t seq; uint8_t *p; size_t n; } kept;

struct kvev_pub {
    kvev_pub_config c;
    void *zctx;
    void *pair_in;              /* the engine's end (kvev_pub_send) */
    void *pair_out, *pub, *replay;  /* the thread's */
    pthread_t thread;
    bool started;
    kept *ring;                 /* [buffer_steps] (thread) */
    int32_t ring_head, ring_n;
    uint64_t next_seq;          /* sender only */
    _Atomic uint64_t n_batches, n_dropped, n_events, n_replays, n_forwarded;
};

kvev_pub_config kvev_pub_default(void)
{
    kvev_pub_config c = { .buffer_steps = 10000, .hwm = 100000, .max_queue = 100000, .dp_rank = -1 };
    snprintf(c.endpoint, sizeof c.endpoint, "tcp://*:5557");
    return c;
}

/* ---- configuration ---- */

static bool put_str(json_t *v, char *dst, size_t cap)
{
    if (!json_is_string(v) || json_string_length(v) >= cap) return false;
    memcpy(dst, json_string_value(v), json_string_length(v) + 1);
    return true;
}

static bool put_int(json_t *v, int32_t *dst, int32_t lo)
{
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > INT32_MAX) return false;
    *dst = (int32_t)json_integer_value(v);
    return true;
}

pk_status kvev_pub_parse(const char *json, kvev_pub_config *c, bool *enabled, char *why, size_t cap)
{
    json_error_t err;
    json_t *o = json_loads(json, 0, &err);
    if (!json_is_object(o)) {
        snprintf(why, cap, "--kv-events-config: not a JSON object (%s)", o ? "another type" : err.text);
        json_decref(o);
        return PK_EINVAL;
    }
    *enabled = false;           /* vLLM's default: a config alone publishes nothing */
    bool on = false, null_publisher = false;
    const char *key;
    json_t *v;
    pk_status st = PK_OK;
    json_object_foreach(o, key, v) {
        bool ok;
        if (!strcmp(key, "enable_kv_cache_events")) {
            ok = json_is_boolean(v);
            on = json_is_true(v);
        } else if (!strcmp(key, "publisher")) {
            ok = json_is_string(v) && (!strcmp(json_string_value(v), "zmq") || !strcmp(json_string_value(v), "null"));
            null_publisher = ok && !strcmp(json_string_value(v), "null");
        } else if (!strcmp(key, "endpoint")) {
            ok = put_str(v, c->endpoint, sizeof c->endpoint) && c->endpoint[0];
        } else if (!strcmp(key, "replay_endpoint")) {
            ok = json_is_null(v) ? (c->replay_endpoint[0] = 0, true)
                                 : put_str(v, c->replay_endpoint, sizeof c->replay_endpoint);
        } else if (!strcmp(key, "topic")) {
            ok = put_str(v, c->topic, sizeof c->topic);
        } else if (!strcmp(key, "buffer_steps")) {
            ok = put_int(v, &c->buffer_steps, 0);
        } else if (!strcmp(key, "hwm")) {
            ok = put_int(v, &c->hwm, 0);
        } else if (!strcmp(key, "max_queue_size")) {
            ok = put_int(v, &c->max_queue, 1);
        } else if (!strcmp(key, "encoding")) {
            ok = json_is_string(v) && (!strcmp(json_string_value(v), "tagged") || !strcmp(json_string_value(v), "array"));
            if (ok) c->tagged = !strcmp(json_string_value(v), "tagged");
        } else {
            snprintf(why, cap, "--kv-events-config: unknown field \"%s\"", key);
            st = PK_EINVAL;
            break;
        }
        if (!ok) {
            snprintf(why, cap, "--kv-events-config: bad value for \"%s\"", key);
            st = PK_EINVAL;
            break;
        }
    }
    *enabled = st == PK_OK && on && !null_publisher;
    json_decref(o);
    return st;
}

/* ---- sockets ---- */

static bool binds(const char *endpoint)
{
    return strchr(endpoint, '*') || strstr(endpoint, "::") || !strncmp(endpoint, "ipc://", 6) ||
           !strncmp(endpoint, "inproc://", 9);
}

static int attach(void *sock, const char *endpoint)
{
    return binds(endpoint) ? zmq_bind(sock, endpoint) : zmq_connect(sock, endpoint);
}

static void be64(uint8_t *b, uint64_t v)
{
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (56 - 8 * i));
}

static uint64_t from_be64(const uint8_t *b)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | b[i];
    return v;
}

static void keep(kvev_pub *p, uint64_t seq, uint8_t *payload, size_t n)
{
    if (p->c.buffer_steps <= 0) {
        free(payload);
        return;
    }
    int32_t at = (p->ring_head + p->ring_n) % p->c.buffer_steps;
    if (p->ring_n == p->c.buffer_steps) {
        free(p->ring[p->ring_head].p);
        p->ring_head = (p->ring_head + 1) % p->c.buffer_steps;
    } else {
        p->ring_n++;
    }
    p->ring[at] = (kept){ seq, payload, n };
}

/* One replay request: every kept batch from its start, then the end. */
static void replay(kvev_pub *p)
{
    zmq_msg_t part[3];
    int n = 0;
    bool more = true;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, p->replay, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            break;
        }
        more = zmq_msg_more(&m);
        if (n < 3) part[n] = m;
        else zmq_msg_close(&m);
        n++;
    }
    if (n == 3 && zmq_msg_size(&part[2]) == 8) {
        uint64_t start = from_be64(zmq_msg_data(&part[2]));
        const void *id = zmq_msg_data(&part[0]);
        size_t id_n = zmq_msg_size(&part[0]);
        uint8_t seq[8];
        for (int32_t k = 0; k < p->ring_n; k++) {
            const kept *b = &p->ring[(p->ring_head + k) % p->c.buffer_steps];
            if (b->seq < start) continue;
            be64(seq, b->seq);
            zmq_send(p->replay, id, id_n, ZMQ_SNDMORE);
            zmq_send(p->replay, "", 0, ZMQ_SNDMORE);
            zmq_send(p->replay, seq, 8, ZMQ_SNDMORE);
            zmq_send(p->replay, b->p, b->n, 0);
        }
        be64(seq, UINT64_MAX);       /* -1: the end */
        zmq_send(p->replay, id, id_n, ZMQ_SNDMORE);
        zmq_send(p->replay, "", 0, ZMQ_SNDMORE);
        zmq_send(p->replay, seq, 8, ZMQ_SNDMORE);
        zmq_send(p->replay, "", 0, 0);
        atomic_fetch_add(&p->n_replays, 1);
    }
    for (int i = 0; i < MIN(n, 3); i++) zmq_msg_close(&part[i]);
}

/* One batch from the engine onto the PUB socket; false: the stop frame. */
static bool forward(kvev_pub *p)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, p->pair_out, 0) < 0) {
        zmq_msg_close(&m);
        return true;
    }
    size_t n = zmq_msg_size(&m);
    if (n < 8) {
        zmq_msg_close(&m);
        return false;
    }
    const uint8_t *b = zmq_msg_data(&m);
    zmq_send(p->pub, p->c.topic, strlen(p->c.topic), ZMQ_SNDMORE);
    zmq_send(p->pub, b, 8, ZMQ_SNDMORE);
    zmq_send(p->pub, b + 8, n - 8, 0);      /* PUB drops for a slow subscriber: never blocks */
    uint8_t *copy = p->c.buffer_steps > 0 ? malloc(n - 8) : NULL;
    if (copy) {
        memcpy(copy, b + 8, n - 8);
        keep(p, from_be64(b), copy, n - 8);
    }
    zmq_msg_close(&m);
    atomic_fetch_add(&p->n_forwarded, 1);
    return true;
}

static void *run(void *arg)
{
    kvev_pub *p = arg;
    pthread_setname_np(pthread_self(), "pk-kv-events");
    zmq_pollitem_t items[2] = { { .socket = p->pair_out, .events = ZMQ_POLLIN },
                                { .socket = p->replay, .events = ZMQ_POLLIN } };
    int n_items = p->replay ? 2 : 1;
    for (;;) {
        if (zmq_poll(items, n_items, -1) < 0) {
            if (zmq_errno() == EINTR) continue;
            break;
        }
        if ((items[0].revents & ZMQ_POLLIN) && !forward(p)) break;
        if (n_items > 1 && (items[1].revents & ZMQ_POLLIN)) replay(p);
    }
    return NULL;
}

static pk_status fail(kvev_pub *p, const char *what, const char *endpoint, char *why, size_t cap)
{
    snprintf(why, cap, "KV events: cannot %s %s: %s", what, endpoint, zmq_strerror(zmq_errno()));
    kvev_pub_free(p);
    return PK_EIO;
}

pk_status kvev_pub_new(const kvev_pub_config *c, kvev_pub **out, char *why, size_t cap)
{
    *out = NULL;
    kvev_pub *p = calloc(1, sizeof *p);
    if (!p) return PK_ENOMEM;
    p->c = *c;
    p->ring = calloc((size_t)MAX(c->buffer_steps, 1), sizeof *p->ring);
    p->zctx = zmq_ctx_new();
    if (!p->ring || !p->zctx) {
        kvev_pub_free(p);
        return PK_ENOMEM;
    }
    char inproc[64];
    snprintf(inproc, sizeof inproc, "inproc://kv-events-%p", (void *)p);
    int hwm = c->max_queue, linger = 0, pub_hwm = c->hwm;
    p->pair_out = zmq_socket(p->zctx, ZMQ_PAIR);
    p->pair_in = zmq_socket(p->zctx, ZMQ_PAIR);
    p->pub = zmq_socket(p->zctx, ZMQ_PUB);
    if (!p->pair_out || !p->pair_in || !p->pub) return fail(p, "open", "sockets", why, cap);
    zmq_setsockopt(p->pair_out, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(p->pair_in, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(p->pub, ZMQ_SNDHWM, &pub_hwm, sizeof pub_hwm);
    zmq_setsockopt(p->pub, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_bind(p->pair_out, inproc) || zmq_connect(p->pair_in, inproc))
        return fail(p, "open", inproc, why, cap);
    if (attach(p->pub, c->endpoint)) return fail(p, binds(c->endpoint) ? "bind" : "connect to", c->endpoint, why, cap);
    if (c->replay_endpoint[0]) {
        if (!(p->replay = zmq_socket(p->zctx, ZMQ_ROUTER))) return fail(p, "open", "the replay socket", why, cap);
        /* A ROUTER drops what passes its high-water mark: an answer may
         * be the whole ring (buffer_steps batches), so no mark. */
        int none = 0;
        zmq_setsockopt(p->replay, ZMQ_SNDHWM, &none, sizeof none);
        zmq_setsockopt(p->replay, ZMQ_LINGER, &linger, sizeof linger);
        if (zmq_bind(p->replay, c->replay_endpoint)) return fail(p, "bind", c->replay_endpoint, why, cap);
    }
    if (pthread_create(&p->thread, NULL, run, p) != 0) {
        kvev_pub_free(p);
        return PK_ENOMEM;
    }
    p->started = true;
    *out = p;
    return PK_OK;
}

void kvev_pub_free(kvev_pub *p)
{
    if (!p) return;
    if (p->started) {
        /* The stop frame follows every batch queued: they go out first. */
        int ms = 1000;
        zmq_setsockopt(p->pair_in, ZMQ_SNDTIMEO, &ms, sizeof ms);
        if (zmq_send(p->pair_in, "", 0, 0) < 0) {
            /* The queue stayed full for a second: stop the thread by
             * closing the context under it. */
            zmq_ctx_shutdown(p->zctx);
        }
        pthread_join(p->thread, NULL);
    }
    int linger = 0;
    void *socks[] = { p->pair_in, p->pair_out, p->pub, p->replay };
    for (size_t i = 0; i < ARRAY_LEN(socks); i++)
        if (socks[i]) {
            zmq_setsockopt(socks[i], ZMQ_LINGER, &linger, sizeof linger);
            zmq_close(socks[i]);
        }
    if (p->zctx) zmq_ctx_term(p->zctx);
    for (int32_t k = 0; p->ring && k < p->ring_n; k++) free(p->ring[(p->ring_head + k) % p->c.buffer_steps].p);
    free(p->ring);
    free(p);
}

bool kvev_pub_send(kvev_pub *p, const kvev_list *l, int64_t ts_ms)
{
    uint64_t seq = p->next_seq++;
    atomic_fetch_add(&p->n_batches, 1);
    uint8_t *payload;
    size_t n;
    bool sent = false;
    if (kvev_encode(l, ts_ms, p->c.tagged, p->c.dp_rank, &payload, &n) == PK_OK) {
        zmq_msg_t m;
        if (zmq_msg_init_size(&m, n + 8) == 0) {
            be64(zmq_msg_data(&m), seq);
            memcpy((uint8_t *)zmq_msg_data(&m) + 8, payload, n);
            sent = zmq_msg_send(&m, p->pair_in, ZMQ_DONTWAIT) >= 0;
            if (!sent) zmq_msg_close(&m);
        }
        free(payload);
    }
    if (sent) atomic_fetch_add(&p->n_events, (uint64_t)l->n_ev);
    else atomic_fetch_add(&p->n_dropped, 1);
    return sent;
}

void kvev_pub_stats_get(const kvev_pub *p, kvev_pub_stats *out)
{
    kvev_pub *w = (kvev_pub *)p;
    *out = (kvev_pub_stats){ .batches = atomic_load(&w->n_batches), .dropped = atomic_load(&w->n_dropped),
                             .events = atomic_load(&w->n_events), .replays = atomic_load(&w->n_replays),
                             .forwarded = atomic_load(&w->n_forwarded) };
}

const kvev_pub_config *kvev_pub_get_config(const kvev_pub *p)
{
    return &p->c;
}
