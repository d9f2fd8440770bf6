/*
 * sha256.h - SHA-256 (FIPS 180-4): a digest fed in pieces, and a file's.
 *
 * The hub's downloads check each LFS file against the sha256 the hub
 * names it by (src/hub), and the tests check the files they generate
 * against the sums a commands file records.  Plain and portable: about
 * 300 MB/s, which is a disk's pace, not a bottleneck beside a download.
 */
#ifndef PK_SHA256_H
#define PK_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pk_sha256 {
    uint32_t h[8];
    uint8_t buf[64];
    uint64_t n;             /* bytes so far */
} pk_sha256;

void pk_sha256_init(pk_sha256 *c);
void pk_sha256_update(pk_sha256 *c, const void *data, size_t len);
/* Ends c (feed it no more) and writes the digest as 64 lowercase hex
 * digits and a NUL in hex[65]. */
void pk_sha256_hex(pk_sha256 *c, char hex[65]);

/* SHA-256 of the file at path in hex[65]; false (errno set) when it cannot
 * be read.  Any thread. */
bool pk_sha256_file(const char *path, char hex[65]);

#endif
