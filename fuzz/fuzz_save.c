/*
 * fuzz_save.c - libFuzzer entry for the saved-KV file reader (src/save):
 * any bytes go through sav_parse as a slot or pool file of a small fixed
 * cache; a file it accepts must read back the same once sav_encode wrote
 * the header and payload it reported (nothing accepted is read differently
 * from how it was written: byte for byte when it has sav_encode's size,
 * the packed token list; the plain list and no list read alike), and its
 * tokens must lie in the vocabulary.
 * Each input is read twice: as it is, and with both checksums recomputed
 * first, so that mutations get past the checksums to every field check
 * behind them (random bytes never match an XXH3).  Seeds: well-formed
 * files of both kinds, written by this binary when POLYKV_FUZZ_SEED_DIR is
 * set (fuzz/run.sh).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "../src/save/sav.h"

static const sav_expect want = { .fingerprint = 0x0123456789abcdefull, .kv_type = 1, .n_layer = 2,
                                 .k_row_bytes = 4, .v_row_bytes = 6, .max_tokens = 64, .n_vocab = 300 };

static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }

static void one(const uint8_t *data, size_t size, bool fix)
{
    sav_header h;
    const int32_t *tok;
    const uint8_t *rows;
    char why[200];
    /* A private copy: the reader's pointers are into it, aligned as a malloc'ed read is. */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return;
    memcpy(buf, data, size);
    /* the layout of sav.c: a token list "PKVT", 1, n_words, then n_words words, ahead of the header */
    size_t at = 0;
    if (size >= 12 && !memcmp(buf, "PKVT", 4)) {
        uint32_t words;
        memcpy(&words, buf + 8, 4);
        at = words < size / 4 ? 12 + (size_t)words * 4 : size;
    }
    if (fix && at <= size && size - at >= SAV_HEADER_BYTES) {
        /* payload hash at 72, header hash of [0, 80) at 80 */
        uint8_t *hd = buf + at;
        put64(hd + 72, XXH3_64bits(hd + SAV_HEADER_BYTES, size - at - SAV_HEADER_BYTES));
        put64(hd + 80, XXH3_64bits(hd, 80));
    }
    pk_status st = sav_parse(buf, size, &want, &h, &tok, &rows, why, sizeof why);
    if (st == PK_OK) {
        if (h.n_tokens < 1 || h.n_tokens > want.max_tokens) abort();
        for (uint32_t i = 0; i < h.n_tokens; i++)
            if (tok[i] < 0 || (uint32_t)tok[i] >= want.n_vocab) abort();
        size_t n_again = (size_t)sav_file_bytes(&h);
        size_t n_rows = (size_t)((h.n_tokens - h.row_first) * sav_row_bytes(&h));
        uint8_t *again = malloc(n_again);
        if (!again) abort();
        sav_encode(&h, tok, rows, again);
        if (n_again == size && memcmp(again, buf, size)) abort();
        sav_header h2;
        const int32_t *tok2;
        const uint8_t *rows2;
        if (sav_parse(again, n_again, &want, &h2, &tok2, &rows2, why, sizeof why) != PK_OK) abort();
        if (h2.n_tokens != h.n_tokens || h2.row_first != h.row_first || h2.kind != h.kind ||
            h2.pool_id != h.pool_id || h2.flags != h.flags || memcmp(tok2, tok, (size_t)h.n_tokens * 4) ||
            memcmp(rows2, rows, n_rows))
            abort();
        free(again);
    } else if (st != PK_EFORMAT && st != PK_EUNSUPPORTED) {
        abort();
    } else if (!why[0]) {
        abort();                                   /* every refusal says why */
    }
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    one(data, size, false);
    one(data, size, true);
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = getenv("POLYKV_FUZZ_SEED_DIR");
    if (!dir) return 0;
    for (int kind = SAV_SLOT; kind <= SAV_POOL; kind++) {
        uint32_t n = kind == SAV_SLOT ? 5 : 7, d = kind == SAV_SLOT ? 0 : 3;
        sav_header h = { .version = SAV_VERSION, .kind = (uint32_t)kind, .fingerprint = want.fingerprint,
                         .kv_type = want.kv_type, .n_layer = want.n_layer, .k_row_bytes = want.k_row_bytes,
                         .v_row_bytes = want.v_row_bytes, .n_tokens = n, .row_first = d,
                         .pool_id = kind == SAV_SLOT ? 0 : 4, .parent = kind == SAV_SLOT ? -1 : 2,
                         .branch_pos = (int32_t)d, .flags = 1 };
        int32_t tok[8];
        uint8_t rows[8 * 20];
        for (uint32_t i = 0; i < n; i++) tok[i] = (int32_t)(i * 37 % 300);
        for (size_t i = 0; i < sizeof rows; i++) rows[i] = (uint8_t)(i * 13);
        size_t sz = (size_t)sav_file_bytes(&h);
        uint8_t *buf = malloc(sz);
        sav_encode(&h, tok, rows, buf);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.pkv", dir, kind == SAV_SLOT ? "slot" : "pool");
        FILE *f = fopen(path, "wb");
        if (f) {
            fwrite(buf, 1, sz, f);
            fclose(f);
        }
        free(buf);
    }
    return 0;
}
