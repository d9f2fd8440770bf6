/*
 * tok_impl.h - what the tokenizer's .c files share; not part of the public
 * interface (that is tok.h).
 *
 * Layout of a loaded vocabulary:
 *
 *   tokens   tok_strtab   id -> text (pool + offsets), text -> id (hash)
 *   pieces   tok_strtab   id -> the token's bytes as tok_piece(special=true)
 *                         gives them (no hash)
 *   merges   tok_strtab   rank -> "left right", "left right" -> rank (BPE)
 *   attr[]   uint16_t     TOK_A_* bits per id
 *   special  int32_t[]    ids that the special-token pass looks for, longest
 *                         text first
 *
 * Files: tok_load.c (GGUF -> tables, text-based fix-ups), tok.c (lookups,
 * special-token pass, tok_encode, pieces, decode), tok_spm.c (SentencePiece
 * merge), tok_bpe.c (byte-level BPE), tok_pretok.c (BPE pre-tokenizers),
 * tok_unicode.c + tok_unicode_tab.c (UTF-8 and the generated category
 * tables, scripts/gen_unicode.py), tmpl.c (chat templates).
 *
 * Invariants after load: every id in special[] and every bos/eos/unk/...
 * that is not -1 is < n_vocab; pieces has n_vocab entries; attr bits only
 * change during load.
 */
#ifndef TOK_IMPL_H
#define TOK_IMPL_H

#include "tok.h"

#include <stdlib.h>
#include <string.h>

/* Token attributes (our own bit values). */
enum {
    TOK_A_NORMAL    = 1u << 0,
    TOK_A_UNKNOWN   = 1u << 1,
    TOK_A_CONTROL   = 1u << 2,
    TOK_A_USER      = 1u << 3,   /* user-defined: split out even when special parsing is off */
    TOK_A_UNUSED    = 1u << 4,
    TOK_A_BYTE      = 1u << 5,
    TOK_A_LSTRIP    = 1u << 6,   /* eat ASCII spaces left of the token when it is split out */
    TOK_A_RSTRIP    = 1u << 7,   /* ... and right of it */
    TOK_A_EOG       = 1u << 8,
};

/* BPE pre-tokenizers. */
typedef enum tok_pre {
    TOK_PRE_NONE = 0,            /* SPM: no pre-tokenizer */
    TOK_PRE_DEFAULT,             /* BPE without a named pre-tokenizer */
    TOK_PRE_GPT2,
    TOK_PRE_LLAMA3,
    TOK_PRE_QWEN2,
    TOK_PRE_QWEN35,
    TOK_PRE_DEEPSEEK_CODER,
    TOK_PRE_GPT4O,               /* o200k_base: gpt-oss, Llama 4 */
    TOK_PRE_GEMMA4,              /* runs of newlines and runs of anything else */
} tok_pre;

/*
 * A string table: strings 0..n-1 stored back to back in pool, string i at
 * pool[off[i] .. off[i+1]).  With a hash index (slots != NULL) it also maps a
 * string to its index; slots hold index + 1, 0 = empty, linear probing.
 */
typedef struct tok_strtab {
    char *pool;
    uint32_t *off;               /* [n + 1] */
    uint32_t n;
    uint32_t *slots;             /* [mask + 1] or NULL */
    uint32_t *hash;              /* [n] when indexed */
    uint32_t mask;
} tok_strtab;

struct tok_vocab {
    tok_kind kind;
    tok_pre pre;
    int32_t n_vocab;
    tok_strtab tokens;
    tok_strtab pieces;
    tok_strtab merges;
    float *scores;               /* [n_vocab] */
    uint16_t *attr;              /* [n_vocab] TOK_A_* */
    int32_t *special;            /* [n_special] */
    int32_t n_special;
    int32_t bos, eos, eot, eom, unk, pad;
    int32_t byte_tok[256];       /* token of each byte: SPM <0xNN> fallback, BPE byte char; -1 none */
    bool add_bos, add_eos, add_space_prefix, ignore_merges, clean_spaces;
    /* SentencePiece-style BPE (Gemma 4): spaces are U+2581 in the tokens,
     * merges run on raw UTF-8 (no byte alphabet), bytes fall back to <0xNN> */
    bool spm_bpe;
    char *chat_template;         /* NUL-terminated copy or NULL */
};

/* ---- string tables (tok.c, built in tok_load.c) ---- */
/* FNV-1a, fed piece by piece so a key can be hashed without building it. */
#define TOK_HASH_SEED 2166136261u
static inline uint32_t tok_hash_more(uint32_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}
/* Index of s in an indexed table, or -1. */
int32_t tok_strtab_find(const tok_strtab *t, const char *s, size_t n);
static inline const char *tok_strtab_str(const tok_strtab *t, uint32_t i, uint32_t *len)
{
    *len = t->off[i + 1] - t->off[i];
    return t->pool + t->off[i];
}

/* ---- growable scratch arrays used while encoding ---- */
typedef struct tok_ids { int32_t *v; size_t n, cap; } tok_ids;
typedef struct tok_bytes { char *v; size_t n, cap; } tok_bytes;
pk_status tok_ids_push(tok_ids *a, int32_t id);
pk_status tok_bytes_reserve(tok_bytes *b, size_t extra);
pk_status tok_bytes_append(tok_bytes *b, const char *s, size_t n);

/* ---- merge loop helpers shared by SPM and BPE ---- */
/* A symbol: a span of the text being merged, linked to its neighbours.
 * A symbol merged into its left neighbour keeps n = 0. */
typedef struct tok_sym { int32_t prev, next; uint32_t off, n; } tok_sym;

/* A candidate merge of symbols left and right (adjacent).  The queue pops the
 * smallest key first and, among equal keys, the leftmost pair; size is the
 * pair's byte length when queued, so a pair whose sides changed since is
 * recognised as stale and skipped. */
typedef struct tok_bigram { float key; int32_t left, right; uint32_t size; } tok_bigram;
typedef struct tok_heap { tok_bigram *v; size_t n, cap; } tok_heap;

pk_status tok_heap_push(tok_heap *h, tok_bigram b);
bool tok_heap_pop(tok_heap *h, tok_bigram *out);

/* ---- per-model encoders (tok_spm.c, tok_bpe.c) ---- */
/* Encodes one fragment of plain text (no special tokens in it), appending
 * ids.  SPM expects the text already escaped (spaces as U+2581). */
pk_status tok_spm_encode(const tok_vocab *v, const char *text, size_t len, tok_ids *out);
pk_status tok_bpe_encode(const tok_vocab *v, const char *text, size_t len, tok_ids *out);

/* ---- pre-tokenizers (tok_pretok.c) ---- */
/* Splits cpt[0..n) into words and writes their lengths (in code points) to
 * lens; lens and tmp must each have room for n entries.  Returns the number
 * of words (0 for n = 0); the lengths are > 0 and sum to n. */
size_t tok_pretok_split(tok_pre pre, const uint32_t *cpt, size_t n, uint32_t *lens, uint32_t *tmp);

/* ---- Unicode (tok_unicode.c, tables in tok_unicode_tab.c) ---- */
enum tok_uc_cat {                /* general category, first letter */
    TOK_UC_UNASSIGNED = 0, TOK_UC_LETTER = 1, TOK_UC_NUMBER = 2, TOK_UC_MARK = 3,
    TOK_UC_PUNCT = 4, TOK_UC_SYMBOL = 5, TOK_UC_SEPARATOR = 6, TOK_UC_OTHER = 7,
};
#define TOK_UC_SPACE_BIT 8       /* in tok_uc_lo entries */
#define TOK_UC_LO 0x800

extern const uint8_t tok_uc_lo[TOK_UC_LO];
extern const uint32_t tok_uc_ranges[];   /* first_cpt << 3 | category, ascending */
extern const size_t tok_uc_n_ranges;
extern const uint32_t tok_uc_space[];    /* White_Space, ascending */
extern const size_t tok_uc_n_space;
extern const uint32_t tok_uc_lower[][2]; /* (cpt, lowercase), ascending */
extern const size_t tok_uc_n_lower;

/* Category of a code point; TOK_UC_UNASSIGNED above U+10FFFF. */
int tok_uc_cat(uint32_t cpt);
bool tok_uc_is_space(uint32_t cpt);
uint32_t tok_uc_tolower(uint32_t cpt);

/* Decodes one code point at s[0..n) (n >= 1) the way the reference engine
 * does: malformed sequences and code points above U+10FFFF give U+FFFD.
 * *adv gets the bytes consumed (>= 1). */
uint32_t tok_utf8_decode(const unsigned char *s, size_t n, size_t *adv);
/* Writes cpt (<= U+10FFFF) as UTF-8 into out[0..4); returns the length. */
int tok_utf8_encode(uint32_t cpt, char *out);
/* Length of the UTF-8 sequence a lead byte announces (1 for stray bytes). */
static inline size_t tok_utf8_len(unsigned char c)
{
    static const unsigned char len_by_high_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len_by_high_nibble[c >> 4];
}

/* GPT-2 byte-level alphabet: each byte maps to a printable code point. */
uint32_t tok_byte_to_cpt(uint8_t b);
/* Inverse: the byte for a code point, or -1 when it is not in the alphabet. */
int tok_cpt_to_byte(uint32_t cpt);

#endif
