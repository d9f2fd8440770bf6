/*
 * kvev_wire.c - one EventBatch as msgpack (msgpack-c), in vLLM's two
 * encodings (docs/kv-events.md, "On the wire"):
 *
 *   array (default): msgspec's array_like structs with the tag first, what
 *   llm-d's vLLM adapter decodes (pkg/kvevents/engineadapter/vllm_adapter.go)
 *     [ts, [ ["BlockStored", [...], h|nil, [...], n, nil, "GPU", nil],
 *            ["BlockRemoved", [...], "GPU"], ["AllBlocksCleared"] ], dp_rank|nil]
 *   tagged: every event a map with its "type" (vLLM's newer encoding)
 *     [ts, [ {"type": "BlockStored", "block_hashes": [...], "parent_block_hash": h|nil,
 *             "token_ids": [...], "block_size": n, "lora_id": nil, "medium": "GPU",
 *             "lora_name": nil},
 *            {"type": "BlockRemoved", "block_hashes": [...], "medium": "GPU"},
 *            {"type": "AllBlocksCleared"} ], dp_rank|nil]
 *
 * The batch itself is msgspec's array_like EventBatch in both, its three
 * fields always there (vLLM writes a nil rank).
 * Hashes are unsigned 64-bit integers (vLLM's ExternalBlockHash may be an
 * int).
 */
#include <stdlib.h>
#include <string.h>
#include <msgpack.h>

#include "kvev_pub.h"

static int str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    return msgpack_pack_str(pk, n) || msgpack_pack_str_body(pk, s, n);
}

/* A map key or an array's tag. */
static int key(msgpack_packer *pk, bool tagged, const char *k)
{
    return tagged ? str(pk, k) : 0;
}

static int hashes(msgpack_packer *pk, const kvev_list *l, const kvev_event *ev)
{
    int r = msgpack_pack_array(pk, (size_t)ev->n_hash);
    for (int32_t i = 0; !r && i < ev->n_hash; i++) r = msgpack_pack_fix_uint64(pk, l->hash[ev->h0 + i]);
    return r;
}

static int event(msgpack_packer *pk, const kvev_list *l, const kvev_event *ev, bool tagged)
{
    static const char *names[] = { [KVEV_STORED] = "BlockStored", [KVEV_REMOVED] = "BlockRemoved",
                                   [KVEV_CLEARED] = "AllBlocksCleared" };
    static const size_t n_fields[] = { [KVEV_STORED] = 7, [KVEV_REMOVED] = 2, [KVEV_CLEARED] = 0 };
    size_t n = 1 + n_fields[ev->kind];
    int r = tagged ? msgpack_pack_map(pk, n) : msgpack_pack_array(pk, n);
    r = r || key(pk, tagged, "type") || str(pk, names[ev->kind]);
    const char *medium = kvev_medium_name(ev->medium);
    switch (ev->kind) {
    case KVEV_STORED:
        r = r || key(pk, tagged, "block_hashes") || hashes(pk, l, ev);
        r = r || key(pk, tagged, "parent_block_hash") ||
            (ev->has_parent ? msgpack_pack_fix_uint64(pk, ev->parent) : msgpack_pack_nil(pk));
        r = r || key(pk, tagged, "token_ids") || msgpack_pack_array(pk, (size_t)ev->n_tok);
        for (int32_t i = 0; !r && i < ev->n_tok; i++) r = msgpack_pack_int32(pk, l->tok[ev->t0 + i]);
        r = r || key(pk, tagged, "block_size") || msgpack_pack_int32(pk, l->block_size);
        r = r || key(pk, tagged, "lora_id") || msgpack_pack_nil(pk);
        r = r || key(pk, tagged, "medium") || str(pk, medium);
        r = r || key(pk, tagged, "lora_name") || msgpack_pack_nil(pk);
        break;
    case KVEV_REMOVED:
        r = r || key(pk, tagged, "block_hashes") || hashes(pk, l, ev);
        r = r || key(pk, tagged, "medium") || str(pk, medium);
        break;
    case KVEV_CLEARED:
        break;
    }
    return r;
}

pk_status kvev_encode(const kvev_list *l, int64_t ts_ms, bool tagged, int32_t dp_rank, uint8_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int r = msgpack_pack_array(&pk, 3);
    r = r || msgpack_pack_double(&pk, (double)ts_ms / 1000.0);
    r = r || msgpack_pack_array(&pk, (size_t)l->n_ev);
    for (int32_t i = 0; !r && i < l->n_ev; i++) r = event(&pk, l, &l->ev[i], tagged);
    r = r || (dp_rank >= 0 ? msgpack_pack_int32(&pk, dp_rank) : msgpack_pack_nil(&pk));
    if (r) {
        msgpack_sbuffer_destroy(&sb);
        return PK_ENOMEM;
    }
    *n = sb.size;               /* release empties the buffer */
    *out = (uint8_t *)msgpack_sbuffer_release(&sb);
    return *out ? PK_OK : PK_ENOMEM;
}
