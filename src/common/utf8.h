/*
 * utf8.h - UTF-8 helpers for output paths (JSON needs valid UTF-8, while
 * token pieces can split a character).
 */
#ifndef PK_UTF8_H
#define PK_UTF8_H

#include "pk.h"

/* Copies in[0..n) to out, replacing each byte that does not start a valid
 * UTF-8 sequence with U+FFFD; NUL-terminates.  out needs 3 * n + 1 bytes.
 * Returns the bytes written (without the NUL). */
size_t pk_utf8_sanitize(const char *in, size_t n, char *out);
/* Whether in[0..n) is valid UTF-8 as JSON takes it (no overlong forms,
 * surrogates or code points past U+10FFFF); a NUL byte counts as valid. */
bool pk_utf8_valid(const char *in, size_t n);
/* in[0..n) made safe for one line of a log: control characters (C0, DEL,
 * C1), bytes that are not UTF-8 and the backslash written as \xNN (the
 * backslash as \\), the rest kept.  Writes at most cap - 1 bytes and a
 * NUL (cap > 0), ending with "..." when in did not fit, never inside an
 * escape or a character.  Returns the bytes written. */
size_t pk_log_escape(const char *in, size_t n, char *out, size_t cap);

#endif
