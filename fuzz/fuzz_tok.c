/*
 * fuzz_tok.c - libFuzzer entry for the tokenizers (src/tokenizer): bytes ->
 * tokens -> text over every vocabulary in ../shared/models/vocab and the
 * small models' (SPM and byte-level BPE of several pre-tokenizers).
 *
 * Byte 0 picks the vocabulary and the flags (add_special, parse_special);
 * the rest is the text.  Checked on every input:
 *   - every id is in the vocabulary, and tok_encode's count agrees with a
 *     second call given exactly that room (and PK_EFULL with one less);
 *   - without special parsing, the pieces of the tokens give the text back
 *     byte for byte (SPM: after its one added leading space) whenever the
 *     text is valid UTF-8 (invalid bytes become U+FFFD first, in both kinds,
 *     as in the reference);
 *   - with special parsing (special texts become their ids, some eat the
 *     spaces beside them), the ids are valid and decode back without error;
 *   - tok_decode never writes past what it reports, and agrees with its
 *     own size query.
 * Run from the repository root (../shared must resolve, or POLYKV_SHARED).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/gguf/gguf.h"
#include "../src/tokenizer/tok.h"

#define MAX_VOCABS 12

static tok_vocab *vocabs[MAX_VOCABS];
static gguf_ctx *files[MAX_VOCABS];
static int n_vocabs;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *shared = getenv("POLYKV_SHARED");
    if (!shared) shared = "../shared";
    static const char *names[] = {
        "models/vocab/ggml-vocab-llama-spm.gguf", "models/vocab/ggml-vocab-gpt-2.gguf",
        "models/vocab/ggml-vocab-deepseek-coder.gguf", "models/vocab/ggml-vocab-phi-3.gguf",
        "models/stories260K.gguf", "models/rand-qwen2-qwen2vocab-e64-l2-F16.gguf",
        "models/rand-llama-llama3vocab-e256-l2-Q8_0.gguf",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0] && n_vocabs < MAX_VOCABS; i++) {
        char path[4096], err[256];
        snprintf(path, sizeof path, "%s/%s", shared, names[i]);
        gguf_ctx *g;
        if (gguf_open(path, &g, err, sizeof err) != PK_OK) continue;
        if (tok_load_gguf(g, &vocabs[n_vocabs], err, sizeof err) != PK_OK) {
            gguf_close(g);
            continue;
        }
        files[n_vocabs++] = g;
    }
    if (n_vocabs == 0) {
        fprintf(stderr, "fuzz_tok: no vocabulary under %s/models: nothing to fuzz\n", shared);
        exit(1);
    }
    return 0;
}

/* Strict UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF. */
static bool utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n) return false;
        unsigned cp = k == 1 ? c : c & (0x7f >> k);
        for (size_t j = 1; j < k; j++) {
            if ((p[i + j] & 0xc0) != 0x80) return false;
            cp = cp << 6 | (p[i + j] & 0x3f);
        }
        static const unsigned min[5] = { 0, 0, 0x80, 0x800, 0x10000 };
        if (cp < min[k] || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000)) return false;
        i += k;
    }
    return true;
}

static void need(bool ok)
{
    if (!ok) abort();
}

/* The concatenated pieces of ids into a malloc'ed buffer; *n its length. */
static char *pieces(const tok_vocab *v, const int32_t *ids, int32_t n_ids, bool special, size_t *n)
{
    size_t cap = 64, len = 0;
    char *out = malloc(cap);
    for (int32_t i = 0; out && i < n_ids; i++) {
        char tmp[512];
        int32_t k = tok_piece(v, ids[i], tmp, sizeof tmp, special);
        need(k >= 0);                            /* no piece is longer than 512 bytes here */
        while (len + (size_t)k > cap) out = realloc(out, cap *= 2);
        if (!out) break;
        memcpy(out + len, tmp, (size_t)k);
        len += (size_t)k;
    }
    *n = len;
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const tok_vocab *v = vocabs[data[0] % n_vocabs];
    bool add_special = (data[0] >> 4) & 1, parse_special = (data[0] >> 5) & 1;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;

    int32_t n = 0;
    pk_status st = tok_encode(v, text, len, add_special, parse_special, NULL, 0, &n);
    need(st == PK_OK || st == PK_EFULL);
    if (n == 0) return 0;
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    int32_t again = -1;
    need(ids && tok_encode(v, text, len, add_special, parse_special, ids, n, &again) == PK_OK && again == n);
    if (n > 1) need(tok_encode(v, text, len, add_special, parse_special, ids, n - 1, &again) == PK_EFULL);
    need(tok_encode(v, text, len, add_special, parse_special, ids, n, &again) == PK_OK);
    for (int32_t i = 0; i < n; i++) need(ids[i] >= 0 && ids[i] < tok_n_vocab(v));

    /* The round trip, past the BOS / EOS the model adds. */
    int32_t a = 0, b = n;
    if (add_special && tok_add_bos(v) && a < b && ids[a] == tok_bos(v)) a++;
    if (add_special && tok_add_eos(v) && a < b && ids[b - 1] == tok_eos(v)) b--;
    bool valid = utf8_valid(text, len);
    bool bytes = tok_get_kind(v) != TOK_SPM;
    /* Invalid UTF-8 becomes U+FFFD before either tokenizer runs, as the
     * reference's does: only valid text can come back unchanged. */
    /* SPM writes spaces as U+2581, so a text holding U+2581 itself comes
     * back with spaces there (the reference's as well). */
    bool escapes = !bytes && memmem(text, len, "\xe2\x96\x81", 3) != NULL;
    /* (With special parsing, special tokens may eat the spaces around them,
     * phi-3's rstrip for one, so there only the ids and decode are checked.) */
    if (valid && !escapes && !parse_special && memchr(text, 0, len) == NULL) {
        size_t m;
        char *back = pieces(v, ids + a, b - a, false, &m);
        need(back != NULL);
        /* SPM vocabularies that add a space prefix give one more leading space */
        bool same = m == len && !memcmp(back, text, len);
        bool spaced = !bytes && m == len + 1 && back[0] == ' ' && !memcmp(back + 1, text, len);
        if (!same && !spaced) {
            size_t k = 0;
            while (k < len && k < m && back[k] == text[k]) k++;
            fprintf(stderr, "round trip (vocab %d, add_special %d, parse_special %d): %zu bytes in, %zu out, "
                    "first difference at byte %zu: in '%.12s' out '%.12s'\n", data[0] % n_vocabs, add_special,
                    parse_special, len, m, k, text + k, back + k);
            abort();
        }
        free(back);
    }

    /* tok_decode: the size query, then exactly that room. */
    int32_t need_n = tok_decode(v, ids, n, NULL, 0, !add_special, parse_special);
    int32_t cap = need_n < 0 ? -need_n : need_n;
    char *buf = malloc((size_t)cap + 1);
    need(buf != NULL);
    int32_t got = tok_decode(v, ids, n, buf, cap, !add_special, parse_special);
    need(got >= 0 && got <= cap);
    free(buf);
    free(ids);
    return 0;
}
