/* fuzz_grammar.c - libFuzzer entry for the grammar engine: the input is
 * "<mode byte><grammar or schema>\0<text>".  Mode even: GBNF; odd: a JSON
 * Schema converted to GBNF first.  A grammar that compiles then runs over
 * the text byte by byte and over a tiny vocabulary's masks; nothing may
 * crash, leak or hang, and a mask must agree with accepting its tokens. */
#include <stdlib.h>
#include <string.h>

#include "../src/grammar/gram.h"

static const char *const TOKS[] = { "{", "}", "\"", "a", "ab", " ", "1", "\xc3", "\xa9", ",", ":", "[", "]", "<eos>" };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int mode = data[0];
    const char *src = (const char *)data + 1;
    size_t n = size - 1, glen = 0;
    while (glen < n && src[glen]) glen++;
    const char *text = src + glen + (glen < n);
    size_t tlen = n - glen - (glen < n);
    gram_error e;
    gram_grammar *g = NULL;
    if (mode & 1) {
        char *gbnf = NULL;
        if (gram_schema_to_gbnf(src, glen, &gbnf, &e) != PK_OK) return 0;
        if (gram_parse(gbnf, strlen(gbnf), NULL, &g, &e) != PK_OK) abort();   /* our own output must compile */
        free(gbnf);
    } else if (gram_parse(src, glen, NULL, &g, &e) != PK_OK) {
        if (e.pos < 0 || (size_t)e.pos > glen || !e.msg[0]) abort();
        return 0;
    }
    (void)gram_accepts(g, text, tlen);
    enum { NT = sizeof TOKS / sizeof TOKS[0] };
    char bytes[64];
    int64_t off[NT + 1];
    bool eog[NT] = { 0 };
    int64_t o = 0;
    for (int i = 0; i < NT; i++) {
        off[i] = o;
        size_t l = strlen(TOKS[i]);
        memcpy(bytes + o, TOKS[i], l);
        o += (int64_t)l;
    }
    off[NT] = o;
    eog[NT - 1] = true;
    gram_vocab *v = NULL;
    gram_matcher *m = NULL;
    if (gram_vocab_new(NT, bytes, off, eog, &v) == PK_OK && gram_matcher_new(g, v, &m) == PK_OK) {
        for (size_t i = 0; i < tlen && i < 64; i++) {
            const uint64_t *mask = gram_matcher_mask(m);
            if (!mask) break;
            int t = (unsigned char)text[i] % NT;
            bool allowed = mask[0] >> t & 1;
            pk_status st = gram_matcher_accept(m, t);
            if ((st == PK_OK) != allowed) abort();
            if (gram_matcher_done(m)) break;
        }
    }
    gram_matcher_free(m);
    gram_vocab_free(v);
    gram_free(g);
    return 0;
}
