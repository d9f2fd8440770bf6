/*
 * tok_bpe.c - byte-level BPE encoding of one plain-text fragment.
 *
 *   text --decode--> code points --pre-tokenizer--> words
 *   word --re-encode UTF-8, map each byte to its GPT-2 alphabet char--> string
 *   string --merge loop by rank--> symbols --lookup--> ids
 *
 * Invalid UTF-8 becomes U+FFFD before pre-tokenizing, as in the reference.
 * The merge loop queues each adjacent symbol pair listed in the merges (by
 * rank, ties leftmost), merges the best, and queues the new neighbours.  With
 * ignore_merges (llama3) a word that is itself a token is emitted whole.
 * A final symbol that is not a token emits the tokens of its single bytes
 * where they exist (this never happens with a complete byte alphabet).
 *
 * SentencePiece-style BPE (Gemma 4, v->spm_bpe) differs in three places, as
 * the reference does it: spaces become U+2581 before the split, a word
 * stays raw UTF-8 (no byte alphabet), and a word of newlines only that is
 * itself a token is emitted whole; its byte fallback is <0xNN>.
 */
#include "tok_impl.h"

typedef struct bpe {
    const tok_vocab *v;
    const char *text;            /* the byte-encoded word */
    tok_sym *sym;
    size_t sym_cap;
    tok_heap heap;
} bpe;

/* Rank of the merge "left right", or -1.  The key is hashed and compared in
 * place, without building the string. */
static int32_t merge_rank(const tok_vocab *v, const char *l, uint32_t ln, const char *r, uint32_t rn)
{
    const tok_strtab *t = &v->merges;
    if (!t->slots) return -1;
    uint32_t h = tok_hash_more(tok_hash_more(tok_hash_more(TOK_HASH_SEED, l, ln), " ", 1), r, rn);
    for (uint32_t i = h & t->mask;; i = (i + 1) & t->mask) {
        uint32_t e = t->slots[i];
        if (e == 0) return -1;
        uint32_t k = e - 1, len;
        const char *s = tok_strtab_str(t, k, &len);
        if (t->hash[k] == h && len == ln + 1 + rn && memcmp(s, l, ln) == 0 && s[ln] == ' ' &&
            memcmp(s + ln + 1, r, rn) == 0)
            return (int32_t)k;
    }
}

static pk_status try_pair(bpe *b, int32_t left, int32_t right)
{
    if (left < 0 || right < 0) return PK_OK;
    const tok_sym *l = &b->sym[left], *r = &b->sym[right];
    int32_t rank = merge_rank(b->v, b->text + l->off, l->n, b->text + r->off, r->n);
    if (rank < 0) return PK_OK;
    return tok_heap_push(&b->heap, (tok_bigram){(float)rank, left, right, l->n + r->n});
}

static pk_status emit_symbol(const bpe *b, const tok_sym *y, tok_ids *out)
{
    const char *p = b->text + y->off;
    int32_t id = tok_strtab_find(&b->v->tokens, p, y->n);
    if (id >= 0) return tok_ids_push(out, id);
    for (uint32_t i = 0; i < y->n; i++) {
        int32_t t = b->v->byte_tok[(unsigned char)p[i]];
        if (t < 0) continue;
        pk_status st = tok_ids_push(out, t);
        if (st != PK_OK) return st;
    }
    return PK_OK;
}

static pk_status merge_word(bpe *b, const char *w, size_t len, tok_ids *out)
{
    bool newlines = b->v->spm_bpe;
    for (size_t i = 0; i < len && newlines; i++) newlines = w[i] == '\n';
    if (b->v->ignore_merges || newlines) {
        int32_t id = tok_strtab_find(&b->v->tokens, w, len);
        if (id >= 0) return tok_ids_push(out, id);
    }
    if (len > b->sym_cap) {
        tok_sym *s = realloc(b->sym, len * sizeof(*s));
        if (!s) return PK_ENOMEM;
        b->sym = s;
        b->sym_cap = len;
    }
    b->text = w;
    b->heap.n = 0;
    int32_t n = 0;
    for (size_t off = 0; off < len; n++) {
        size_t cl = MIN(tok_utf8_len((unsigned char)w[off]), len - off);
        b->sym[n] = (tok_sym){n - 1, off + cl == len ? -1 : n + 1, (uint32_t)off, (uint32_t)cl};
        off += cl;
    }
    pk_status st = PK_OK;
    for (int32_t i = 1; i < n && st == PK_OK; i++) st = try_pair(b, i - 1, i);

    tok_bigram g;
    while (st == PK_OK && tok_heap_pop(&b->heap, &g)) {
        tok_sym *l = &b->sym[g.left], *r = &b->sym[g.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != g.size) continue;   /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) b->sym[r->next].prev = g.left;
        st = try_pair(b, l->prev, g.left);
        if (st == PK_OK) st = try_pair(b, g.left, l->next);
    }
    for (int32_t i = 0; n > 0 && i >= 0 && st == PK_OK; i = b->sym[i].next) st = emit_symbol(b, &b->sym[i], out);
    return st;
}

pk_status tok_bpe_encode(const tok_vocab *v, const char *text, size_t len, tok_ids *out)
{
    if (len == 0) return PK_OK;
    /* Byte-level spelling of each byte: one or two UTF-8 bytes. */
    char alpha[256][2];
    unsigned char alpha_n[256];
    for (int i = 0; i < 256; i++) {
        char tmp[4];
        alpha_n[i] = (unsigned char)tok_utf8_encode(tok_byte_to_cpt((uint8_t)i), tmp);
        memcpy(alpha[i], tmp, 2);
    }

    uint32_t *cpt = malloc(3 * len * sizeof(*cpt));
    if (!cpt) return PK_ENOMEM;
    uint32_t *lens = cpt + len, *tmp = lens + len;
    size_t n = 0;
    for (size_t off = 0; off < len; n++) {
        size_t adv;
        cpt[n] = tok_utf8_decode((const unsigned char *)text + off, len - off, &adv);
        if (v->spm_bpe && cpt[n] == ' ') cpt[n] = 0x2581;
        off += adv;
    }
    size_t n_words = tok_pretok_split(v->pre, cpt, n, lens, tmp);

    bpe b = {.v = v};
    tok_bytes word = {0};
    pk_status st = PK_OK;
    size_t start = 0;
    for (size_t w = 0; w < n_words && st == PK_OK; w++) {
        word.n = 0;
        st = tok_bytes_reserve(&word, (size_t)lens[w] * 8);
        for (size_t i = start; i < start + lens[w] && st == PK_OK; i++) {
            char u[4];
            int ul = tok_utf8_encode(cpt[i], u);
            if (v->spm_bpe) {
                memcpy(word.v + word.n, u, (size_t)ul);
                word.n += (size_t)ul;
                continue;
            }
            for (int k = 0; k < ul; k++) {
                unsigned char byte = (unsigned char)u[k];
                memcpy(word.v + word.n, alpha[byte], alpha_n[byte]);
                word.n += alpha_n[byte];
            }
        }
        start += lens[w];
        if (st == PK_OK) st = merge_word(&b, word.v, word.n, out);
    }
    free(word.v);
    free(b.sym);
    free(b.heap.v);
    free(cpt);
    return st;
}
