/*
 * srv_reason.c - splitting thinking from the answer (see srv_reason.h).
 */
#include <string.h>

#include "srv_reason.h"

typedef struct tag_pair {
    const char *open, *close;
    size_t n_open, n_close;
    bool channel;               /* Gemma 4's: a new line after open and one before close are the
                                   template's frame, not thinking; an empty block may end an answer */
} tag_pair;

#define PAIR(o, c, w) { o, c, sizeof o - 1, sizeof c - 1, w }
static const tag_pair PAIRS[] = {
    [SRV_THINK_TAGS] = PAIR("<think>", "</think>", false),
    [SRV_THINK_CHANNEL] = PAIR("<|channel>thought", "<channel|>", true),
};

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool srv_reasoning_parse(const char *name, srv_reasoning *out)
{
    static const char *const names[] = { "auto", "none", "deepseek", "deepseek-legacy" };
    for (size_t i = 0; i < ARRAY_LEN(names); i++)
        if (name && !strcmp(name, names[i])) {
            *out = (srv_reasoning)i;
            return true;
        }
    return false;
}

bool srv_reason_prompt_opens(const char *p, size_t n)
{
    const tag_pair *t = &PAIRS[SRV_THINK_TAGS];
    while (n > 0 && is_ws(p[n - 1])) n--;
    return n >= t->n_open && !memcmp(p + n - t->n_open, t->open, t->n_open);
}

/* First tag in s[from..n), or n. */
static size_t find_tag(const char *s, size_t from, size_t n, const char *tag, size_t k)
{
    for (size_t i = from; i + k <= n; i++)
        if (s[i] == tag[0] && !memcmp(s + i, tag, k)) return i;
    return n;
}

/* Length of the longest proper prefix of tag that s[from..n) ends with. */
static size_t partial_tag(const char *s, size_t from, size_t n, const char *tag, size_t k)
{
    for (size_t m = k - 1; m > 0; m--)
        if (n - from >= m && !memcmp(s + n - m, tag, m)) return m;
    return 0;
}

/* How much of s[0..n) reads as an empty thought block: open, white space,
 * close, white space.  2: all of it (a whole block); 1: all of it, but a
 * block cut short; 0: not one. */
static int empty_block(const tag_pair *t, const char *s, size_t n)
{
    size_t k = MIN(n, t->n_open);
    if (memcmp(s, t->open, k)) return 0;
    if (k < t->n_open) return 1;
    size_t i = k;
    while (i < n && is_ws(s[i])) i++;
    k = MIN(n - i, t->n_close);
    if (memcmp(s + i, t->close, k)) return 0;
    if (k < t->n_close) return 1;
    for (i += k; i < n; i++)
        if (!is_ws(s[i])) return 0;
    return 2;
}

/* The bytes at the end of the answer s[from..n) that an empty thought
 * block takes (with final false, also what may still become one).  Its
 * opening is the last or the one before the last '<' of the answer (the
 * block holds no other), the earlier when both would do. */
static size_t empty_block_tail(const tag_pair *t, const char *s, size_t from, size_t n, bool final)
{
    size_t p = n, tail = 0;
    for (int tries = 0; tries < 2 && p > from; tries++) {
        while (p > from && s[p - 1] != '<') p--;
        if (p == from) break;
        p--;
        int m = empty_block(t, s + p, n - p);
        if (m == 2 || (m == 1 && !final)) tail = n - p;
    }
    return tail;
}

srv_reason_split srv_reason_split_text(srv_reasoning f, srv_think_tags tags, const char *s, size_t n, bool inside,
                                       bool final)
{
    const tag_pair *t = &PAIRS[tags];
    srv_reason_split r = { .content_len = n };
    if (f == SRV_REASON_NONE) return r;
    size_t start = 0;
    if (!inside) {
        size_t i = 0;
        while (i < n && is_ws(s[i])) i++;
        size_t k = MIN(n - i, t->n_open);
        if (memcmp(s + i, t->open, k)) {                  /* no thinking: all answer */
            if (f != SRV_REASON_DEEPSEEK_LEGACY && t->channel) r.content_len -= empty_block_tail(t, s, 0, n, final);
            return r;
        }
        if (k < t->n_open) {                              /* "<thi" so far */
            if (final) return r;
            r.content_len = 0;
            return r;
        }
        start = i + t->n_open;
    }
    if (t->channel && start < n && s[start] == '\n') start++;
    r.thinking = true;
    size_t end = find_tag(s, start, n, t->close, t->n_close);
    r.reason_off = start;
    if (end == n) {                                      /* still thinking */
        r.reason_len = n - start - (final ? 0 : partial_tag(s, start, n, t->close, t->n_close));
        if (t->channel && !final && r.reason_len && s[start + r.reason_len - 1] == '\n') r.reason_len--;
        r.content_off = n;
        r.content_len = 0;
    } else {
        r.thinking = false;
        r.reason_len = end - start;
        if (t->channel && r.reason_len && s[end - 1] == '\n') r.reason_len--;
        size_t c = end + t->n_close;
        while (c < n && is_ws(s[c])) c++;
        r.content_off = c;
        r.content_len = n - c;
        if (t->channel) r.content_len -= empty_block_tail(t, s, c, n, final);
        if (!final && c == n) r.content_len = 0;
    }
    if (f == SRV_REASON_DEEPSEEK_LEGACY) {
        r.content_off = 0;
        r.content_len = n;
        if (!final && r.thinking) r.content_len = start + r.reason_len;
    }
    return r;
}
