/*
 * kvev_pub.h - KV events on the wire: vLLM's ZMQ publisher, its message
 * encoding and its replay socket (docs/kv-events.md).
 *
 * DESIGN
 *   The engine thread hands each step's events (kvev_list) to
 *   kvev_pub_send, which encodes them as one EventBatch (msgpack-c),
 *   numbers it, and queues it on an inproc ZMQ pair whose high-water mark
 *   is the queue's bound: a full queue drops the batch (counted), so a
 *   step never waits, and the number it took leaves a gap subscribers
 *   see.  The publisher thread owns the sockets: it sends each batch on
 *   the PUB socket as (topic, 8-byte big-endian sequence number, payload),
 *   keeps the last buffer_steps batches, and answers replay requests on
 *   the ROUTER socket.
 *
 *     engine ── kvev_pub_send ──▶ inproc pair (bounded) ──▶ publisher thread
 *                                                            ├─▶ PUB  (endpoint)
 *                                                            └─◀ ROUTER (replay_endpoint)
 *
 *   An endpoint with '*' (or ipc://, inproc://) is bound, any other
 *   connected: vLLM's rule, so a publisher can also push to a router's
 *   central subscriber.
 *
 * Threads: kvev_pub_send from one thread at a time (the engine's);
 * kvev_pub_stats from any; kvev_pub_new / kvev_pub_free from the owner
 * when no send runs.
 */
#ifndef KVEV_PUB_H
#define KVEV_PUB_H

#include "kvev.h"

typedef struct kvev_pub_config {
    char endpoint[256];         /* tcp://(star):5557 by default */
    char replay_endpoint[256];  /* "" none; e.g. tcp://(star):5558 */
    char topic[512];            /* "kv@<pod>@<model>" */
    int32_t buffer_steps;       /* batches kept for replay, 10000 */
    int32_t hwm;                /* PUB high-water mark (messages per subscriber), 100000 */
    int32_t max_queue;          /* batches waiting for the publisher thread, 100000 */
    bool tagged;                /* events as maps with "type" (vLLM's newer encoding); else
                                   msgspec's positional arrays, what llm-d's adapter decodes */
    int32_t dp_rank;            /* data_parallel_rank, -1: nil */
} kvev_pub_config;

/* vLLM's KVEventsConfig defaults. */
kvev_pub_config kvev_pub_default(void);

/* Reads a KVEventsConfig-shaped JSON object into *c (fields it names
 * replace c's: publisher ("zmq" or "null"), endpoint, replay_endpoint,
 * topic, buffer_steps, hwm, max_queue_size, enable_kv_cache_events,
 * polykv's "encoding": "array" | "tagged"; unknown fields are refused).
 * *enabled is enable_kv_cache_events (false when absent, as in vLLM) and
 * publisher != "null".  PK_EINVAL
 * with the reason in why. */
pk_status kvev_pub_parse(const char *json, kvev_pub_config *c, bool *enabled, char *why, size_t cap);

typedef struct kvev_pub kvev_pub;

/* Binds or connects the sockets and starts the publisher thread.
 * PK_EIO (why says which endpoint and errno's text), PK_ENOMEM. */
pk_status kvev_pub_new(const kvev_pub_config *c, kvev_pub **out, char *why, size_t cap);
/* Sends what is queued (waiting at most 1 s), stops the thread, closes
 * the sockets.  NULL is a no-op. */
void kvev_pub_free(kvev_pub *p);

/* Encodes l as one batch stamped ts_ms (wall clock) and queues it; false
 * when it was dropped (queue full or no memory), which counts and still
 * uses a sequence number. */
bool kvev_pub_send(kvev_pub *p, const kvev_list *l, int64_t ts_ms);

typedef struct kvev_pub_stats {
    uint64_t batches;           /* numbered (sent or dropped) */
    uint64_t dropped;           /* never sent: queue full or no memory */
    uint64_t events;            /* events in the batches queued */
    uint64_t replays;           /* replay requests answered */
    uint64_t forwarded;         /* put on the PUB socket and into the replay buffer */
} kvev_pub_stats;
void kvev_pub_stats_get(const kvev_pub *p, kvev_pub_stats *out);
const kvev_pub_config *kvev_pub_get_config(const kvev_pub *p);

/* The msgpack payload of one batch (kvev_pub_send's encoding), malloc'ed
 * into *out / *n; for tests and the fuzzer.  PK_ENOMEM. */
pk_status kvev_encode(const kvev_list *l, int64_t ts_ms, bool tagged, int32_t dp_rank, uint8_t **out, size_t *n);

#endif
