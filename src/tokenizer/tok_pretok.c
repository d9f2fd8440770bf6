/*
 * tok_pretok.c - BPE pre-tokenizers: split a text (as code points) into the
 * words that the merge loop then handles one by one.
 *
 * The models name a regular expression; we never run a regex engine.  The
 * gpt2, llama3 and qwen2 expressions are hand-written scanners that make the
 * same decisions, branch for branch, as the reference engine's own scanners
 * (which is what the test vectors encode, including its small departures
 * from the regex, e.g. which code points count as \s).  gpt-4o is a scanner
 * too, of the regex the reference hands to std::regex.  The "default" and
 * deepseek-coder pre-tokenizers are chains of simple expressions that the
 * reference hands to std::regex after collapsing every non-ASCII code point
 * to one byte per category; each such expression here is a matcher that
 * answers "does a match start at pos, and where does it end", which is all a
 * leftmost, non-overlapping regex iterator needs for these patterns.
 *
 * A pass turns a list of pieces (lengths in code points) into a finer list:
 * regex passes emit the text between matches as pieces too.
 */
#include "tok_impl.h"

/* Code point flags: bit (1 << category) plus a white-space bit.  Every code
 * point in range has at least one bit set; positions outside the piece read
 * as 0, which the scanners rely on. */
enum {
    F_UNDEF = 1 << TOK_UC_UNASSIGNED, F_LETTER = 1 << TOK_UC_LETTER,
    F_NUMBER = 1 << TOK_UC_NUMBER, F_PUNCT = 1 << TOK_UC_PUNCT,
    F_SPACE = 1 << 8,
};

static unsigned cpt_flags(uint32_t c)
{
    if (c < TOK_UC_LO) {
        unsigned e = tok_uc_lo[c];
        return (1u << (e & 7)) | ((e & TOK_UC_SPACE_BIT) ? F_SPACE : 0);
    }
    return (1u << tok_uc_cat(c)) | (tok_uc_is_space(c) ? F_SPACE : 0);
}

/* One piece [ini, end) being scanned; words are appended to out. */
typedef struct scan {
    const uint32_t *cpt;
    size_t ini, end, prev;
    uint32_t *out;
    size_t n_out;
    bool marks_are_letters;   /* qwen35: [\p{L}\p{M}] wherever qwen2 has \p{L} */
} scan;

static uint32_t at(const scan *s, size_t pos) { return pos < s->end ? s->cpt[pos] : UINT32_MAX; }
static unsigned fl(const scan *s, size_t pos)
{
    if (pos >= s->end) return 0;
    unsigned f = cpt_flags(s->cpt[pos]);
    if (s->marks_are_letters && (f & (1u << TOK_UC_MARK))) f |= F_LETTER;
    return f;
}

/* Closes the word that ends at `end` (nothing when empty). */
static void emit(scan *s, size_t end)
{
    DASSERT(s->prev <= end && end <= s->end);
    if (end > s->prev) s->out[s->n_out++] = (uint32_t)(end - s->prev);
    s->prev = end;
}

/* 's 't 're 've 'm 'll 'd at pos, optionally case-insensitive; returns the
 * length matched (0 when none). */
static size_t contraction(const scan *s, size_t pos, bool fold)
{
    if (s->cpt[pos] != '\'' || pos + 1 >= s->end) return 0;
    uint32_t a = at(s, pos + 1);
    if (fold) a = tok_uc_tolower(a);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (pos + 2 >= s->end) return 0;
    uint32_t b = at(s, pos + 2);
    if (fold) b = tok_uc_tolower(b);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static void scan_gpt2(scan *s)
{
    size_t pos = s->ini;
    while (pos < s->end) {
        uint32_t c = s->cpt[pos];
        size_t n = contraction(s, pos, false);
        if (n) { pos += n; emit(s, pos); continue; }

        unsigned f2 = c == ' ' ? fl(s, pos + 1) : fl(s, pos);
        unsigned want = (f2 & F_LETTER) ? F_LETTER : (f2 & F_NUMBER) ? F_NUMBER : 0;
        if (want) {
            pos += c == ' ';
            while (fl(s, pos) & want) pos++;
            emit(s, pos);
            continue;
        }
        if (!(f2 & (F_SPACE | F_LETTER | F_NUMBER)) && f2) {
            pos += c == ' ';
            for (unsigned f = fl(s, pos); !(f & (F_SPACE | F_LETTER | F_NUMBER)) && f; f = fl(s, pos)) pos++;
            emit(s, pos);
            continue;
        }
        size_t n_space = 0;
        while (fl(s, pos + n_space) & F_SPACE) n_space++;
        if (n_space > 1 && pos + n_space < s->end) {
            pos += n_space - 1;      /* leave the last space to the next word */
        } else if (n_space > 0) {
            pos += n_space;
        } else {
            pos++;
        }
        emit(s, pos);
    }
}

/*
 * llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *         ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * qwen2:  the same with \p{N} instead of \p{N}{1,3}.
 * qwen35: qwen2's with [\p{L}\p{M}] for \p{L} (letter runs take combining
 *         marks, and marks leave the symbol class): marks read as letters.
 */
static void scan_llama3(scan *s, size_t max_digits)
{
    size_t pos = s->ini;
    while (pos < s->end) {
        uint32_t c = s->cpt[pos];
        unsigned f = fl(s, pos);
        size_t n = contraction(s, pos, true);
        if (n) { pos += n; emit(s, pos); continue; }

        if (!(c == '\r' || c == '\n' || (f & F_NUMBER)) && ((f & F_LETTER) || (fl(s, pos + 1) & F_LETTER))) {
            pos++;
            while (fl(s, pos) & F_LETTER) pos++;
            emit(s, pos);
            continue;
        }
        if (f & F_NUMBER) {
            size_t run = 0;
            while (fl(s, pos) & F_NUMBER) {
                pos++;
                if (++run == max_digits) { emit(s, pos); run = 0; }
            }
            emit(s, pos);
            continue;
        }
        /* The reference tests the flags of pos itself here (not of the
         * character after a space), so a lone trailing space lands here. */
        unsigned f2 = c == ' ' ? fl(s, pos + 1) : f;
        if (!(f2 & (F_SPACE | F_LETTER | F_NUMBER)) && f) {
            pos += c == ' ';
            for (unsigned g = fl(s, pos); !(g & (F_SPACE | F_LETTER | F_NUMBER)) && g; g = fl(s, pos)) pos++;
            while (at(s, pos) == '\r' || at(s, pos) == '\n') pos++;
            emit(s, pos);
            continue;
        }
        size_t n_space = 0, after_newline = 0;
        while (fl(s, pos + n_space) & F_SPACE) {
            uint32_t w = s->cpt[pos + n_space];
            n_space++;
            if (w == '\r' || w == '\n') after_newline = pos + n_space;
        }
        if (after_newline) {
            pos = after_newline;
        } else if (n_space > 1 && pos + n_space < s->end) {
            pos += n_space - 1;
        } else if (n_space > 0) {
            pos += n_space;
        } else {
            pos++;
        }
        emit(s, pos);
    }
}

/* ---- std::regex-style passes over the collapsed text ---- */

typedef enum pat {
    PAT_NEWLINE,          /* [\r\n] */
    PAT_SP_LETTERS,       /* \s?\p{L}+ */
    PAT_SP_PUNCTS,        /* \s?\p{P}+ */
    PAT_CJK,              /* [一-龥ࠀ-一가-퟿]+ */
    PAT_DIGIT,            /* \p{N} */
    PAT_DIGITS,           /* \p{N}+ */
    PAT_PUNCT_SYMS,       /* [\p{P}\$\+<=>\^~\|]+ */
    PAT_ASCII3,           /* [0-9][0-9][0-9] */
} pat;

/* The collapsed view: ASCII stays itself and is classified as the C locale
 * does; any other code point is \s when Unicode white space, else it belongs
 * to \p{X} only when its category is exactly X. */
static bool c_space(uint32_t c)
{
    return c < 0x80 ? (c == ' ' || (c >= '\t' && c <= '\r')) : tok_uc_is_space(c);
}

static bool c_cat(uint32_t c, int cat)
{
    if (c >= 0x80) return !tok_uc_is_space(c) && tok_uc_cat(c) == cat;
    switch (cat) {
    case TOK_UC_LETTER: return (c | 32) >= 'a' && (c | 32) <= 'z';
    case TOK_UC_NUMBER: return c >= '0' && c <= '9';
    case TOK_UC_PUNCT:  return c < 0x80 && c != 0 && strchr("!\"#%&'()*,-./:;?@[\\]_{}", (int)c) != NULL;
    default: return false;
    }
}

static bool in_class(pat p, uint32_t c)
{
    switch (p) {
    case PAT_SP_LETTERS: return c_cat(c, TOK_UC_LETTER);
    case PAT_SP_PUNCTS:  return c_cat(c, TOK_UC_PUNCT);
    case PAT_DIGIT:
    case PAT_DIGITS:     return c_cat(c, TOK_UC_NUMBER);
    case PAT_PUNCT_SYMS: return c_cat(c, TOK_UC_PUNCT) || (c < 0x80 && c != 0 && strchr("$+<=>^~|", (int)c));
    case PAT_CJK:        return ((c >= 0x800 && c <= 0x9FA5) || (c >= 0xAC00 && c <= 0xD7FF)) && !tok_uc_is_space(c);
    case PAT_NEWLINE:    return c == '\r' || c == '\n';
    case PAT_ASCII3:     return c >= '0' && c <= '9';
    }
    return false;
}

/* End of the match of p starting exactly at pos (< end), or 0 for none. */
static size_t match_at(pat p, const uint32_t *cpt, size_t pos, size_t end)
{
    switch (p) {
    case PAT_NEWLINE:
    case PAT_DIGIT:
        return in_class(p, cpt[pos]) ? pos + 1 : 0;
    case PAT_ASCII3:
        return pos + 3 <= end && in_class(p, cpt[pos]) && in_class(p, cpt[pos + 1]) &&
               in_class(p, cpt[pos + 2]) ? pos + 3 : 0;
    case PAT_SP_LETTERS:
    case PAT_SP_PUNCTS:
        /* \s? is greedy, but a space is never in the class, so a space only
         * starts a match when the class follows it. */
        if (c_space(cpt[pos]) && pos + 1 < end && in_class(p, cpt[pos + 1])) pos++;
        /* fall through */
    case PAT_CJK:
    case PAT_DIGITS:
    case PAT_PUNCT_SYMS:
        if (!in_class(p, cpt[pos])) return 0;
        while (pos < end && in_class(p, cpt[pos])) pos++;
        return pos;
    }
    return 0;
}

/* Splits each piece of in[0..n_in) at the matches of p; returns the count. */
static size_t regex_pass(pat p, const uint32_t *cpt, const uint32_t *in, size_t n_in, uint32_t *out)
{
    size_t n_out = 0, start = 0;
    for (size_t i = 0; i < n_in; i++) {
        size_t end = start + in[i], last = start, pos = start;
        while (pos < end) {
            size_t m = match_at(p, cpt, pos, end);
            if (!m) { pos++; continue; }
            if (pos > last) out[n_out++] = (uint32_t)(pos - last);
            out[n_out++] = (uint32_t)(m - pos);
            last = pos = m;
        }
        if (end > last) out[n_out++] = (uint32_t)(end - last);
        start = end;
    }
    return n_out;
}

/* ---- gpt-4o (o200k_base: gpt-oss, Llama 4, Kanana 2, MiniMax M2) ----
 *
 * The reference has no scanner of its own for this one: it runs, with
 * std::regex over the collapsed view above,
 *   [^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+C?
 *  |[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*C?
 *  |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * with C = (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]), its
 * rewrite of o200k's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}...]+ classes.
 * Only ASCII letters have a case there: any other letter is both "not a-z"
 * (upper-ish, U) and "not A-Z" (lower-ish, W), and marks are not letters.
 * Each helper below returns where the first alternative of its group that
 * matches at pos ends (0: none), resolving the backtracking in closed form.
 */
enum { G_SPACE = 1, G_LETTER = 2, G_NUMBER = 4, G_OTHER = 8, G_U = 16, G_W = 32 };

/* The class of the code point at pos in the collapsed view; 0 past the piece. */
static unsigned g4(const scan *s, size_t pos)
{
    if (pos >= s->end) return 0;
    uint32_t c = s->cpt[pos];
    if (c_space(c)) return G_SPACE;
    if (c_cat(c, TOK_UC_NUMBER)) return G_NUMBER;
    if (!c_cat(c, TOK_UC_LETTER)) return G_OTHER;
    return G_LETTER | (c >= 'a' && c <= 'z' ? 0 : G_U) | (c >= 'A' && c <= 'Z' ? 0 : G_W);
}

static uint32_t ascii_lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* C? at pos: its length (0 when none). */
static size_t gpt4o_contraction(const scan *s, size_t pos)
{
    if (at(s, pos) != '\'') return 0;
    uint32_t a = ascii_lower(at(s, pos + 1)), b = ascii_lower(at(s, pos + 2));
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* The two letter alternatives.  U* is greedy: after the longest U run, W+
 * either goes on (an a-z letter follows) or U* gives back up to the last
 * letter of the run that is W too (a non-ASCII one), which W+ then takes
 * alone; a run of A-Z only fails the first alternative and is the second's
 * U+ (W* empty, as no W follows). */
static size_t gpt4o_word(const scan *s, size_t pos)
{
    size_t i = pos;
    if (!(g4(s, pos) & G_LETTER)) {
        uint32_t c = s->cpt[pos];
        if (c == '\r' || c == '\n' || (g4(s, pos) & G_NUMBER) || !(g4(s, pos + 1) & G_LETTER)) return 0;
        i++;
    }
    size_t u = i;
    while (g4(s, u) & G_U) u++;
    size_t e = u;
    if (g4(s, u) & G_W) {
        while (g4(s, e) & G_W) e++;
    } else {
        for (size_t k = u; k > i; k--)
            if (g4(s, k - 1) & G_W) { e = k; break; }
    }
    return e + gpt4o_contraction(s, e);
}

/*  ?[^\s\p{L}\p{N}]+[\r\n/]* */
static size_t gpt4o_symbols(const scan *s, size_t pos)
{
    size_t i = pos + (s->cpt[pos] == ' ' && (g4(s, pos + 1) & G_OTHER));
    if (!(g4(s, i) & G_OTHER)) return 0;
    while (g4(s, i) & G_OTHER) i++;
    while (at(s, i) == '\r' || at(s, i) == '\n' || at(s, i) == '/') i++;
    return i;
}

/* \s*[\r\n]+ (through the run's last CR or LF), \s+(?!\S) (all but the
 * last space before a non-space), \s+. */
static size_t gpt4o_spaces(const scan *s, size_t pos)
{
    size_t w = pos, after_newline = 0;
    while (g4(s, w) & G_SPACE) {
        if (s->cpt[w] == '\r' || s->cpt[w] == '\n') after_newline = w + 1;
        w++;
    }
    if (after_newline) return after_newline;
    return w - pos >= 2 && w < s->end ? w - 1 : w;
}

static void scan_gpt4o(scan *s)
{
    for (size_t pos = s->ini; pos < s->end; pos = s->prev) {
        size_t e = gpt4o_word(s, pos);
        if (!e && (g4(s, pos) & G_NUMBER))
            for (e = pos; e < pos + 3 && (g4(s, e) & G_NUMBER);) e++;
        if (!e) e = gpt4o_symbols(s, pos);
        if (!e) e = gpt4o_spaces(s, pos);
        emit(s, e);
    }
}

static size_t gpt2_pass(const uint32_t *cpt, const uint32_t *in, size_t n_in, uint32_t *out)
{
    scan s = {.cpt = cpt, .out = out};
    for (size_t i = 0; i < n_in; i++) {
        s.ini = s.prev = s.end;
        s.end = s.ini + in[i];
        scan_gpt2(&s);
    }
    return s.n_out;
}

size_t tok_pretok_split(tok_pre pre, const uint32_t *cpt, size_t n, uint32_t *lens, uint32_t *tmp)
{
    if (n == 0) return 0;
    scan s = {.cpt = cpt, .ini = 0, .end = n, .prev = 0, .out = lens};
    size_t k;
    switch (pre) {
    case TOK_PRE_GPT2:
        scan_gpt2(&s);
        return s.n_out;
    case TOK_PRE_LLAMA3:
        scan_llama3(&s, 3);
        return s.n_out;
    case TOK_PRE_QWEN2:
        scan_llama3(&s, 1);
        return s.n_out;
    case TOK_PRE_QWEN35:
        s.marks_are_letters = true;
        scan_llama3(&s, 1);
        return s.n_out;
    case TOK_PRE_GPT4O:
        scan_gpt4o(&s);
        return s.n_out;
    case TOK_PRE_DEFAULT:
        tmp[0] = (uint32_t)n;
        k = regex_pass(PAT_PUNCT_SYMS, cpt, tmp, 1, lens);
        k = gpt2_pass(cpt, lens, k, tmp);
        k = regex_pass(PAT_DIGITS, cpt, tmp, k, lens);
        k = regex_pass(PAT_ASCII3, cpt, lens, k, tmp);
        memcpy(lens, tmp, k * sizeof(*lens));
        return k;
    case TOK_PRE_GEMMA4:   /* [^\n]+|[\n]+ */
        k = 0;
        for (size_t i = 0; i < n; k++) {
            size_t j = i + 1;
            while (j < n && (cpt[j] == '\n') == (cpt[i] == '\n')) j++;
            lens[k] = (uint32_t)(j - i);
            i = j;
        }
        return k;
    case TOK_PRE_DEEPSEEK_CODER:
        tmp[0] = (uint32_t)n;
        k = regex_pass(PAT_NEWLINE, cpt, tmp, 1, lens);
        k = regex_pass(PAT_SP_LETTERS, cpt, lens, k, tmp);
        k = regex_pass(PAT_SP_PUNCTS, cpt, tmp, k, lens);
        k = regex_pass(PAT_CJK, cpt, lens, k, tmp);
        k = regex_pass(PAT_DIGIT, cpt, tmp, k, lens);
        return k;
    case TOK_PRE_NONE:
        break;
    }
    lens[0] = (uint32_t)n;
    return 1;
}
