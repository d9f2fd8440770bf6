/* sha256.c - see sha256.h. */
#include "sha256.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint32_t k256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t ror(uint32_t x, int r) { return x >> r | x << (32 - r); }

static void block(pk_sha256 *c, const uint8_t *p)
{
    uint32_t w[64], s[8];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ w[i - 15] >> 3;
        uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ w[i - 2] >> 10;
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    memcpy(s, c->h, sizeof s);
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = s[7] + (ror(s[4], 6) ^ ror(s[4], 11) ^ ror(s[4], 25)) + ((s[4] & s[5]) ^ (~s[4] & s[6])) +
                      k256[i] + w[i];
        uint32_t t2 = (ror(s[0], 2) ^ ror(s[0], 13) ^ ror(s[0], 22)) + ((s[0] & s[1]) ^ (s[0] & s[2]) ^ (s[1] & s[2]));
        memmove(s + 1, s, 7 * sizeof *s);
        s[4] += t1;
        s[0] = t1 + t2;
    }
    for (int i = 0; i < 8; i++) c->h[i] += s[i];
}

void pk_sha256_init(pk_sha256 *c)
{
    static const uint32_t h0[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
    memcpy(c->h, h0, sizeof h0);
    c->n = 0;
}

void pk_sha256_update(pk_sha256 *c, const void *data, size_t len)
{
    const uint8_t *p = data;
    size_t have = (size_t)(c->n % 64);
    c->n += len;
    if (have) {
        size_t take = len < 64 - have ? len : 64 - have;
        memcpy(c->buf + have, p, take);
        p += take, len -= take, have += take;
        if (have < 64) return;
        block(c, c->buf);
    }
    for (; len >= 64; p += 64, len -= 64) block(c, p);
    memcpy(c->buf, p, len);
}

void pk_sha256_hex(pk_sha256 *c, char hex[65])
{
    uint64_t bits = c->n * 8;
    uint8_t pad[72] = { 0x80 };
    size_t np = (size_t)(c->n % 64 < 56 ? 56 - c->n % 64 : 120 - c->n % 64);
    for (int i = 0; i < 8; i++) pad[np + (size_t)i] = (uint8_t)(bits >> (56 - 8 * i));
    pk_sha256_update(c, pad, np + 8);
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        unsigned b = (c->h[i / 4] >> (24 - 8 * (i % 4))) & 0xff;
        hex[2 * i] = digits[b >> 4];
        hex[2 * i + 1] = digits[b & 15];
    }
    hex[64] = 0;
}

bool pk_sha256_file(const char *path, char hex[65])
{
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    enum { CHUNK = 1 << 16 };
    uint8_t *buf = malloc(CHUNK);
    if (!buf) {
        fclose(f);
        return false;
    }
    pk_sha256 c;
    pk_sha256_init(&c);
    size_t k;
    while ((k = fread(buf, 1, CHUNK, f)) > 0) pk_sha256_update(&c, buf, k);
    bool ok = !ferror(f);
    fclose(f);
    free(buf);
    if (ok) pk_sha256_hex(&c, hex);
    return ok;
}
