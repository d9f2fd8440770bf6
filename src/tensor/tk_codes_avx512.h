/*
 * tk_codes_avx512.h - reading the 32-value block formats' codes, shared by
 * the AVX-512 kernel files (include only from files compiled with the
 * AVX-512 flags).
 */
#ifndef TK_CODES_AVX512_H
#define TK_CODES_AVX512_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* 4 bytes at any alignment. */
static inline int32_t load_i32(const void *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Sum of 32 signed bytes (exact). */
static inline int sum_s8_32(__m256i v)
{
    __m256i s = _mm256_sad_epu8(_mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)), _mm256_setzero_si256());
    __m128i t = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    t = _mm_add_epi64(t, _mm_unpackhi_epi64(t, t));
    return _mm_cvtsi128_si32(t) - 32 * 128;
}

/* Nibble codes of one 32-value block, value order (low nibbles, then high). */
static inline __m256i nibbles32(const uint8_t *qs)
{
    __m128i v = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0f));
}

/* 5-bit codes of one block, unsigned 0..31: nibble + 16 where bit j of qh is set. */
static inline __m256i codes5_32(const uint8_t *qs, const uint8_t *qh)
{
    __m256i nib = nibbles32(qs);
    return _mm256_mask_add_epi8(nib, (__mmask32)(uint32_t)load_i32(qh), nib, _mm256_set1_epi8(16));
}

#endif
