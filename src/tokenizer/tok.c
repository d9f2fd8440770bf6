/*
 * tok.c - lookups, the special-token pass, tok_encode, pieces and decoding.
 * Loading is in tok_load.c, the merge loops in tok_spm.c / tok_bpe.c.
 *
 * tok_encode works in three steps:
 *   1. split the text into fragments: plain text, or one special token (the
 *      special tokens are tried longest first, each splitting every plain
 *      fragment at all of its occurrences);
 *   2. encode each plain fragment (SPM: escape spaces, maybe prefix one;
 *      BPE: pre-tokenize, byte-encode, merge);
 *   3. add BOS/EOS as the model asks.
 * All scratch memory is per call; a vocabulary is never written after load.
 */
#include "tok_impl.h"
#include "../common/buf.h"

/* ---- hashing and string tables ---- */

int32_t tok_strtab_find(const tok_strtab *t, const char *s, size_t n)
{
    if (!t->slots) return -1;
    uint32_t h = tok_hash_more(TOK_HASH_SEED, s, n);
    for (uint32_t i = h & t->mask;; i = (i + 1) & t->mask) {
        uint32_t e = t->slots[i];
        if (e == 0) return -1;
        uint32_t k = e - 1, len;
        const char *str = tok_strtab_str(t, k, &len);
        if (t->hash[k] == h && len == n && memcmp(str, s, n) == 0) return (int32_t)k;
    }
}

/* ---- scratch arrays ---- */

pk_status tok_ids_push(tok_ids *a, int32_t id)
{
    pk_status st = pk_grow((void **)&a->v, &a->cap, a->n + 1, sizeof(*a->v));
    if (st == PK_OK) a->v[a->n++] = id;
    return st;
}

pk_status tok_bytes_reserve(tok_bytes *b, size_t extra)
{
    return pk_grow((void **)&b->v, &b->cap, b->n + extra, 1);
}

pk_status tok_bytes_append(tok_bytes *b, const char *s, size_t n)
{
    if (n == 0) return PK_OK;
    pk_status st = tok_bytes_reserve(b, n);
    if (st != PK_OK) return st;
    memcpy(b->v + b->n, s, n);
    b->n += n;
    return PK_OK;
}

/* ---- the merge queue: a binary min-heap on (key, left) ---- */

static bool bigram_before(const tok_bigram *a, const tok_bigram *b)
{
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

pk_status tok_heap_push(tok_heap *h, tok_bigram b)
{
    pk_status st = pk_grow((void **)&h->v, &h->cap, h->n + 1, sizeof(*h->v));
    if (st != PK_OK) return st;
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bigram_before(&b, &h->v[parent])) break;
        h->v[i] = h->v[parent];
        i = parent;
    }
    h->v[i] = b;
    return PK_OK;
}

bool tok_heap_pop(tok_heap *h, tok_bigram *out)
{
    if (h->n == 0) return false;
    *out = h->v[0];
    tok_bigram last = h->v[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bigram_before(&h->v[c + 1], &h->v[c])) c++;
        if (!bigram_before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (n) h->v[i] = last;
    return true;
}

/* ---- accessors ---- */

tok_kind tok_get_kind(const tok_vocab *v) { return v->kind; }
int32_t tok_n_vocab(const tok_vocab *v) { return v->n_vocab; }
int32_t tok_bos(const tok_vocab *v) { return v->bos; }
int32_t tok_eos(const tok_vocab *v) { return v->eos; }
bool tok_add_bos(const tok_vocab *v) { return v->add_bos; }
bool tok_add_eos(const tok_vocab *v) { return v->add_eos; }
const char *tok_chat_template(const tok_vocab *v) { return v->chat_template; }

bool tok_is_eog(const tok_vocab *v, int32_t id)
{
    return id >= 0 && id < v->n_vocab && (v->attr[id] & TOK_A_EOG);
}

bool tok_is_control(const tok_vocab *v, int32_t id)
{
    return id >= 0 && id < v->n_vocab && (v->attr[id] & TOK_A_CONTROL);
}

int32_t tok_find(const tok_vocab *v, const char *text, size_t len)
{
    return tok_strtab_find(&v->tokens, text, len);
}

const char *tok_text(const tok_vocab *v, int32_t id, size_t *len)
{
    if (id < 0 || id >= v->n_vocab) { *len = 0; return NULL; }
    uint32_t n;
    const char *s = tok_strtab_str(&v->tokens, (uint32_t)id, &n);
    *len = n;
    return s;
}

size_t tok_max_token_bytes(const tok_vocab *v)
{
    if (v->unk < 0)
        for (int b = 0; b < 256; b++)
            if (v->byte_tok[b] < 0) return 0;
    size_t most = 1;
    for (int32_t id = 0; id < v->n_vocab; id++) {
        size_t n;
        tok_text(v, id, &n);
        most = MAX(most, n);
    }
    return most;
}

/* ---- step 1: special tokens ---- */

typedef struct frag { uint32_t off, len; int32_t id; } frag;   /* id -1: plain text */
typedef struct frags { frag *v; size_t n, cap; } frags;

static pk_status frag_push(frags *f, uint32_t off, uint32_t len, int32_t id)
{
    pk_status st = pk_grow((void **)&f->v, &f->cap, f->n + 1, sizeof(*f->v));
    if (st == PK_OK) f->v[f->n++] = (frag){off, len, id};
    return st;
}

static bool ascii_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Splits plain fragment [off, off + len) at every occurrence of special
 * token id, appending the pieces to out. */
static pk_status split_at_token(const tok_vocab *v, const char *text, uint32_t off, uint32_t len,
                                int32_t id, frags *out)
{
    uint32_t tlen;
    const char *t = tok_strtab_str(&v->tokens, (uint32_t)id, &tlen);
    uint16_t a = v->attr[id];
    pk_status st = PK_OK;
    while (st == PK_OK) {
        const char *m = len >= tlen ? memmem(text + off, len, t, tlen) : NULL;
        if (!m) return len ? frag_push(out, off, len, -1) : PK_OK;
        uint32_t at = (uint32_t)(m - text), left = at - off;
        if (a & TOK_A_LSTRIP)
            while (left > 0 && ascii_space(text[off + left - 1])) left--;
        if (left) st = frag_push(out, off, left, -1);
        if (st == PK_OK) st = frag_push(out, at, tlen, id);
        uint32_t roff = at + tlen, rlen = off + len - roff;
        if (rlen == 0) break;
        if (a & TOK_A_RSTRIP)
            while (rlen > 0 && ascii_space(text[roff])) roff++, rlen--;
        off = roff;
        len = rlen;
    }
    return st;
}

static pk_status partition(const tok_vocab *v, const char *text, size_t len, bool parse_special, frags *f)
{
    frags next = {0};
    pk_status st = PK_OK;
    f->n = 0;
    if (len) st = frag_push(f, 0, (uint32_t)len, -1);
    for (int32_t s = 0; s < v->n_special && st == PK_OK; s++) {
        int32_t id = v->special[s];
        if (!parse_special && (v->attr[id] & (TOK_A_CONTROL | TOK_A_UNKNOWN))) continue;
        bool any_plain = false;
        for (size_t i = 0; i < f->n && !any_plain; i++) any_plain = f->v[i].id < 0;
        if (!any_plain) break;
        next.n = 0;
        for (size_t i = 0; i < f->n && st == PK_OK; i++) {
            frag x = f->v[i];
            st = x.id >= 0 ? frag_push(&next, x.off, x.len, x.id)
                           : split_at_token(v, text, x.off, x.len, id, &next);
        }
        frags t = *f; *f = next; next = t;
    }
    free(next.v);
    return st;
}

/* ---- step 2 and 3 ---- */

static pk_status spm_fragment(const tok_vocab *v, const char *s, size_t n, bool space_prefix,
                              tok_bytes *esc, tok_ids *out)
{
    static const char lower_one_eighth_block[3] = {'\xe2', '\x96', '\x81'};   /* U+2581 */
    esc->n = 0;
    pk_status st = tok_bytes_reserve(esc, 3 * (n + 1));
    if (st != PK_OK) return st;
    if (space_prefix) tok_bytes_append(esc, lower_one_eighth_block, 3);
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') tok_bytes_append(esc, lower_one_eighth_block, 3);
        else esc->v[esc->n++] = s[i];
    }
    return tok_spm_encode(v, esc->v, esc->n, out);
}

pk_status tok_encode(const tok_vocab *v, const char *text, size_t len, bool add_special,
                     bool parse_special, int32_t *out, int32_t n_max, int32_t *n_out)
{
    if (!v || (!text && len) || n_max < 0 || (!out && n_max > 0) || !n_out || len > UINT32_MAX / 4)
        return PK_EINVAL;
    frags f = {0};
    tok_ids ids = {0};
    tok_bytes esc = {0};
    pk_status st = partition(v, text, len, parse_special, &f);
    if (st == PK_OK && add_special && v->add_bos) st = tok_ids_push(&ids, v->bos);
    bool prev_special = true;   /* SPM: a space prefix goes before text that starts the prompt */
    for (size_t i = 0; i < f.n && st == PK_OK; i++) {
        const frag *x = &f.v[i];
        if (x->id >= 0) {
            st = tok_ids_push(&ids, x->id);
            prev_special = true;
        } else if (v->kind == TOK_SPM) {
            st = spm_fragment(v, text + x->off, x->len, v->add_space_prefix && prev_special, &esc, &ids);
            prev_special = false;
        } else {
            st = tok_bpe_encode(v, text + x->off, x->len, &ids);
        }
    }
    if (st == PK_OK && add_special && v->add_eos) st = tok_ids_push(&ids, v->eos);
    if (st == PK_OK) {
        if (ids.n > INT32_MAX) st = PK_EINVAL;
        else {
            size_t n_copy = MIN(ids.n, (size_t)n_max);
            if (n_copy) memcpy(out, ids.v, n_copy * sizeof(*out));
            *n_out = (int32_t)ids.n;
            if (ids.n > (size_t)n_max) st = PK_EFULL;
        }
    }
    free(f.v);
    free(ids.v);
    free(esc.v);
    return st;
}

/* ---- pieces and decoding ---- */

static const char *piece_of(const tok_vocab *v, int32_t id, bool special, uint32_t *len)
{
    if (id < 0 || id >= v->n_vocab || (!special && (v->attr[id] & (TOK_A_CONTROL | TOK_A_UNKNOWN)))) {
        *len = 0;
        return "";
    }
    return tok_strtab_str(&v->pieces, (uint32_t)id, len);
}

int32_t tok_piece(const tok_vocab *v, int32_t id, char *buf, int32_t cap, bool special)
{
    uint32_t n;
    const char *p = piece_of(v, id, special, &n);
    if ((int64_t)n > cap) return -(int32_t)n;
    if (n) memcpy(buf, p, n);
    return (int32_t)n;
}

/* The reference detokenizer's clean-up for BPE models with
 * clean_up_tokenization_spaces: drop the space before ? ! . , ; the spaces
 * around a lone apostrophe; and the space before 's 'm 're 've.  Three
 * in-place passes, each looking at the previous pass's output. */
static int32_t clean_spaces(char *t, int32_t n)
{
    int32_t w = n ? 1 : 0;
    for (int32_t i = 1; i < n; i++) {
        char c = t[i];
        if (t[i - 1] == ' ' && (c == '?' || c == '!' || c == '.' || c == ',')) w--;
        t[w++] = c;
    }
    n = w;
    w = n ? 1 : 0;
    for (int32_t i = 1; i < n; i++) {
        char c = t[i];
        if (c == '\'' && i + 1 < n && t[i - 1] == ' ' && t[i + 1] == ' ') {
            w--;
            t[++i] = '\0';   /* the next space is skipped, and no longer reads as a space */
        }
        t[w++] = c;
    }
    n = w;
    w = n ? 1 : 0;
    for (int32_t i = 1; i < n; i++) {
        char c = t[i];
        if (t[i - 1] == ' ' && c == '\'' && i + 1 < n) {
            char c1 = t[i + 1];
            if (c1 == 's' || c1 == 'm') w--;
            else if (i + 2 < n && ((c1 == 'r' && t[i + 2] == 'e') || (c1 == 'v' && t[i + 2] == 'e'))) w--;
        }
        t[w++] = c;
    }
    return w;
}

int32_t tok_decode(const tok_vocab *v, const int32_t *ids, int32_t n, char *buf, int32_t cap,
                   bool remove_special, bool unparse_special)
{
    bool strip_space = v->add_space_prefix;
    if (remove_special && v->add_bos && n > 0 && ids[0] == v->bos) {
        strip_space = false;
        ids++;
        n--;
    }
    if (remove_special && v->add_eos && n > 0 && ids[n - 1] == v->eos) n--;
    int64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        uint32_t len;
        const char *p = piece_of(v, ids[i], unparse_special, &len);
        if (strip_space && len && p[0] == ' ') p++, len--;
        strip_space = false;
        if (len && total + len <= cap) memcpy(buf + total, p, len);
        total += len;
        if (total > INT32_MAX) return INT32_MIN;
    }
    if (total > cap) return -(int32_t)total;
    return v->clean_spaces ? clean_spaces(buf, (int32_t)total) : (int32_t)total;
}

size_t tok_utf8_complete(const char *buf, size_t n)
{
    size_t stop = n > 4 ? n - 4 : 0;
    for (size_t j = n; j > stop; j--) {
        unsigned c = (unsigned char)buf[j - 1];
        if ((c & 0xC0) == 0x80) continue;
        size_t need = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
        return n - (j - 1) < need ? j - 1 : n;
    }
    return n;   /* only stray continuation bytes at the end: nothing to wait for */
}
