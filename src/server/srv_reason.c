/*
 * srv_reason.c - splitting thinking from the answer (see srv_reason.h).
 */
#include <string.h>

#include "srv_reason.h"

static const char OPEN[] = "<think>";
static const char CLOSE[] = "</think>";
#define OPEN_LEN (sizeof OPEN - 1)
#define CLOSE_LEN (sizeof CLOSE - 1)

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
    while (n > 0 && is_ws(p[n - 1])) n--;
    return n >= OPEN_LEN && !memcmp(p + n - OPEN_LEN, OPEN, OPEN_LEN);
}

/* First "</think>" in s[from..n), or n. */
static size_t find_close(const char *s, size_t from, size_t n)
{
    for (size_t i = from; i + CLOSE_LEN <= n; i++)
        if (s[i] == '<' && !memcmp(s + i, CLOSE, CLOSE_LEN)) return i;
    return n;
}

/* Length of the longest proper prefix of "</think>" that s[from..n) ends with. */
static size_t partial_close(const char *s, size_t from, size_t n)
{
    for (size_t m = CLOSE_LEN - 1; m > 0; m--)
        if (n - from >= m && !memcmp(s + n - m, CLOSE, m)) return m;
    return 0;
}

srv_reason_split srv_reason_split_text(srv_reasoning f, const char *s, size_t n, bool inside, bool final)
{
    srv_reason_split r = { .content_len = n };
    if (f == SRV_REASON_NONE) return r;
    size_t start = 0;
    if (!inside) {
        size_t i = 0;
        while (i < n && is_ws(s[i])) i++;
        size_t k = n - i < OPEN_LEN ? n - i : OPEN_LEN;
        if (memcmp(s + i, OPEN, k)) return r;            /* no thinking: all answer */
        if (k < OPEN_LEN) {                              /* "<thi" so far */
            if (final) return r;
            r.content_len = 0;
            return r;
        }
        start = i + OPEN_LEN;
    }
    r.thinking = true;
    size_t end = find_close(s, start, n);
    r.reason_off = start;
    if (end == n) {                                      /* still thinking */
        r.reason_len = n - start - (final ? 0 : partial_close(s, start, n));
        r.content_off = n;
        r.content_len = 0;
    } else {
        r.thinking = false;
        r.reason_len = end - start;
        size_t c = end + CLOSE_LEN;
        while (c < n && is_ws(s[c])) c++;
        r.content_off = c;
        r.content_len = n - c;
        if (!final && c == n) r.content_len = 0;
    }
    if (f == SRV_REASON_DEEPSEEK_LEGACY) {
        r.content_off = 0;
        r.content_len = n;
        if (!final && r.thinking) r.content_len = start + r.reason_len;
    }
    return r;
}
