/*
 * tok_unicode.c - UTF-8 decoding/encoding as the reference engine does it,
 * lookups into the generated category tables (tok_unicode_tab.c, made by
 * scripts/gen_unicode.py), and the GPT-2 byte-level alphabet.
 */
#include "tok_impl.h"

int tok_uc_cat(uint32_t cpt)
{
    if (cpt < TOK_UC_LO) return tok_uc_lo[cpt] & 7;
    if (cpt > 0x10FFFF) return TOK_UC_UNASSIGNED;
    /* Last range whose first code point is <= cpt. */
    size_t lo = 0, hi = tok_uc_n_ranges;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if ((tok_uc_ranges[mid] >> 3) <= cpt) lo = mid;
        else hi = mid;
    }
    return (int)(tok_uc_ranges[lo] & 7);
}

bool tok_uc_is_space(uint32_t cpt)
{
    if (cpt < TOK_UC_LO) return (tok_uc_lo[cpt] & TOK_UC_SPACE_BIT) != 0;
    for (size_t i = 0; i < tok_uc_n_space; i++)
        if (tok_uc_space[i] == cpt) return true;
    return false;
}

uint32_t tok_uc_tolower(uint32_t cpt)
{
    if (cpt < 0x80) return (cpt >= 'A' && cpt <= 'Z') ? cpt + 32 : cpt;
    size_t lo = 0, hi = tok_uc_n_lower;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (tok_uc_lower[mid][0] < cpt) lo = mid + 1;
        else hi = mid;
    }
    return (lo < tok_uc_n_lower && tok_uc_lower[lo][0] == cpt) ? tok_uc_lower[lo][1] : cpt;
}

/*
 * The reference decoder checks only that the continuation bytes are there
 * and look like continuations: overlong forms and surrogates pass and are
 * re-encoded later as the code point they spell.  Code points above U+10FFFF
 * cannot be re-encoded, so they become U+FFFD here (the reference throws).
 */
uint32_t tok_utf8_decode(const unsigned char *s, size_t n, size_t *adv)
{
    unsigned c = s[0];
    size_t need;
    uint32_t cpt;
    *adv = 1;
    if (c < 0x80) return c;
    if ((c & 0x40) == 0) return 0xFFFD;
    if ((c & 0x20) == 0) { need = 1; cpt = c & 0x1F; }
    else if ((c & 0x10) == 0) { need = 2; cpt = c & 0x0F; }
    else if ((c & 0x08) == 0) { need = 3; cpt = c & 0x07; }
    else return 0xFFFD;
    if (need >= n) return 0xFFFD;
    for (size_t i = 1; i <= need; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0xFFFD;
        cpt = (cpt << 6) | (s[i] & 0x3F);
    }
    *adv = need + 1;
    return cpt > 0x10FFFF ? 0xFFFD : cpt;
}

int tok_utf8_encode(uint32_t cpt, char *out)
{
    if (cpt < 0x80) { out[0] = (char)cpt; return 1; }
    if (cpt < 0x800) {
        out[0] = (char)(0xC0 | (cpt >> 6));
        out[1] = (char)(0x80 | (cpt & 0x3F));
        return 2;
    }
    if (cpt < 0x10000) {
        out[0] = (char)(0xE0 | (cpt >> 12));
        out[1] = (char)(0x80 | ((cpt >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cpt & 0x3F));
        return 3;
    }
    DASSERT(cpt <= 0x10FFFF);
    out[0] = (char)(0xF0 | (cpt >> 18));
    out[1] = (char)(0x80 | ((cpt >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cpt >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cpt & 0x3F));
    return 4;
}

/*
 * GPT-2's byte-level alphabet: the printable bytes ! .. ~, ¡ .. ¬ and ® .. ÿ
 * stand for themselves; the other 68 bytes (0x00-0x20, 0x7F-0xA0, 0xAD), in
 * byte order, take the code points 256, 257, ... so that every byte has a
 * visible, non-space character.
 */
static bool byte_is_self(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

uint32_t tok_byte_to_cpt(uint8_t b)
{
    if (byte_is_self(b)) return b;
    if (b <= 0x20) return 256u + b;
    if (b <= 0xA0) return 256u + 33 + (b - 0x7Fu);
    return 256u + 67;   /* 0xAD, the soft hyphen */
}

int tok_cpt_to_byte(uint32_t cpt)
{
    if (cpt < 256) return byte_is_self(cpt) ? (int)cpt : -1;
    if (cpt < 256 + 33) return (int)(cpt - 256);
    if (cpt < 256 + 67) return (int)(0x7F + (cpt - 256 - 33));
    if (cpt == 256 + 67) return 0xAD;
    return -1;
}
