/* utf8.c - making byte strings valid UTF-8 for JSON output. */
#include "utf8.h"

#include <stdio.h>
#include <string.h>

/* Length of the valid UTF-8 sequence starting at s (n bytes left), or 0. */
static size_t seq_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) { len = 2; cp = c & 0x1f; }
    else if (c >= 0xe0 && c <= 0xef) { len = 3; cp = c & 0x0f; }
    else if (c >= 0xf0 && c <= 0xf4) { len = 4; cp = c & 0x07; }
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return len;
}

size_t pk_utf8_sanitize(const char *in, size_t n, char *out)
{
    const unsigned char *s = (const unsigned char *)in;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t l = seq_len(s + i, n - i);
        if (l) {
            for (size_t k = 0; k < l; k++) out[o++] = (char)s[i + k];
            i += l;
        } else {
            out[o++] = (char)0xef; out[o++] = (char)0xbf; out[o++] = (char)0xbd;
            i++;
        }
    }
    out[o] = 0;
    return o;
}

bool pk_utf8_valid(const char *in, size_t n)
{
    const unsigned char *s = (const unsigned char *)in;
    for (size_t i = 0, l; i < n; i += l)
        if (!(l = seq_len(s + i, n - i))) return false;
    return true;
}

size_t pk_log_escape(const char *in, size_t n, char *out, size_t cap)
{
    const unsigned char *s = (const unsigned char *)in;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t l = seq_len(s + i, n - i);
        /* A terminal reads C1 controls (U+0080-U+009F, 0xc2 0x80-0x9f) as
         * escapes too. */
        bool ctl = !l || s[i] < 0x20 || s[i] == 0x7f || s[i] == '\\' || (l == 2 && s[i] == 0xc2 && s[i + 1] < 0xa0);
        size_t w = ctl ? (s[i] == '\\' ? 2 : 4 * (l ? l : 1)) : l;
        if (o + w + 4 > cap) {          /* every step keeps room for "..." and the NUL (cap >= 4) */
            if (cap < 4) {
                if (cap) out[0] = 0;
                return 0;
            }
            memcpy(out + o, "...", 4);
            return o + 3;
        }
        if (s[i] == '\\') {
            out[o++] = '\\';
            out[o++] = '\\';
        } else if (ctl) {
            for (size_t k = 0; k < (l ? l : 1); k++) o += (size_t)sprintf(out + o, "\\x%02x", s[i + k]);
        } else {
            memcpy(out + o, s + i, l);
            o += l;
        }
        i += l ? l : 1;
    }
    if (cap) out[o] = 0;
    return o;
}
