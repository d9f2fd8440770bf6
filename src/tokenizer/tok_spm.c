/*
 * tok_spm.c - SentencePiece-style (BPE by score) encoding of one escaped
 * fragment.
 *
 * The fragment starts as one symbol per UTF-8 character (a stray byte is a
 * character of its own; the last one may be cut short).  Every adjacent pair
 * whose concatenation is a token is queued with that token's score; the best
 * score merges first (ties: leftmost), then the merged symbol's new pairs
 * are queued.  What remains is emitted as tokens; a symbol that is not a
 * token (only single characters can be: merges always form tokens) falls
 * back to its bytes' <0xNN> tokens.
 */
#include "tok_impl.h"

typedef struct spm {
    const tok_vocab *v;
    const char *text;
    tok_sym *sym;
    tok_heap heap;
} spm;

static pk_status try_pair(spm *s, int32_t left, int32_t right)
{
    if (left < 0 || right < 0) return PK_OK;
    uint32_t size = s->sym[left].n + s->sym[right].n;
    int32_t id = tok_strtab_find(&s->v->tokens, s->text + s->sym[left].off, size);
    if (id < 0) return PK_OK;
    /* The queue pops the smallest key: negate the score to pop the best. */
    return tok_heap_push(&s->heap, (tok_bigram){-s->v->scores[id], left, right, size});
}

static pk_status emit_symbol(const spm *s, const tok_sym *y, tok_ids *out)
{
    const char *p = s->text + y->off;
    int32_t id = tok_strtab_find(&s->v->tokens, p, y->n);
    if (id >= 0) return tok_ids_push(out, id);
    for (uint32_t i = 0; i < y->n; i++) {
        /* The reference has no answer for a byte without a token (it throws);
         * we fall back to <unk>, or drop the byte when there is none. */
        int32_t b = s->v->byte_tok[(unsigned char)p[i]];
        if (b < 0) b = s->v->unk;
        if (b < 0) continue;
        pk_status st = tok_ids_push(out, b);
        if (st != PK_OK) return st;
    }
    return PK_OK;
}

pk_status tok_spm_encode(const tok_vocab *v, const char *text, size_t len, tok_ids *out)
{
    if (len == 0) return PK_OK;
    spm s = {.v = v, .text = text};
    s.sym = malloc(len * sizeof(*s.sym));
    if (!s.sym) return PK_ENOMEM;
    int32_t n = 0;
    for (size_t off = 0; off < len; n++) {
        size_t cl = MIN(tok_utf8_len((unsigned char)text[off]), len - off);
        s.sym[n] = (tok_sym){n - 1, off + cl == len ? -1 : n + 1, (uint32_t)off, (uint32_t)cl};
        off += cl;
    }

    pk_status st = PK_OK;
    for (int32_t i = 1; i < n && st == PK_OK; i++) st = try_pair(&s, i - 1, i);

    tok_bigram b;
    while (st == PK_OK && tok_heap_pop(&s.heap, &b)) {
        tok_sym *l = &s.sym[b.left], *r = &s.sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;   /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s.sym[r->next].prev = b.left;
        st = try_pair(&s, l->prev, b.left);
        if (st == PK_OK) st = try_pair(&s, b.left, l->next);
    }

    for (int32_t i = 0; i >= 0 && st == PK_OK; i = s.sym[i].next) st = emit_symbol(&s, &s.sym[i], out);
    free(s.sym);
    free(s.heap.v);
    return st;
}
