/*
 * probe.c - this machine's limits, so every speed figure can be read as a
 * fraction of them:
 *   - copy bandwidth (STREAM "Copy": a[i] = b[i], read + write bytes counted)
 *     and read bandwidth (a sum over one array), arrays far larger than the
 *     caches, each thread on its own slice, in 2 MiB pages as polykv keeps
 *     its weights (common/huge.h: the same loops ran ~12% slower from 4 KiB
 *     pages, which made the decode figures look closer to the limit than
 *     they are);
 *   - peak FP32 FMA rate: 12 independent chains of fused multiply-adds, each
 *     its own named register (an array of accumulators made the compiler
 *     keep them in memory: every FMA became load, FMA, store on one
 *     store-to-load chain, and the "peak" came out a third of the real one);
 *   - peak int8 dot rate (AVX-512 VNNI vpdpbusd: 64 multiply-adds of bytes
 *     into int32 per instruction, the instruction the quantized kernels run
 *     on), counted as 2 operations per multiply-add.
 * Usage: probe [-t THREADS] [--read] [--json].  Median of 5 runs each.
 * --read measures only the read bandwidth, in about a second: bench/run.mjs
 * runs it beside each decode measurement, because the VM's host gives
 * this machine anywhere from 40 to 80 GB/s over a day, and a decode
 * figure only says how near the limit it is against the limit of the
 * same minute.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <immintrin.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/common/huge.h"

#define ARR_BYTES ((size_t)1 << 30)   /* 1 GiB per array */
#define REPS 5

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct job {
    int kind;                 /* 0 copy, 1 read, 2 fma, 3 int8 dot */
    float *a, *b;
    size_t n;                 /* floats in this thread's slice */
    double sink;
    pthread_barrier_t *bar;
    double t0, t1;
} job;

__attribute__((target("avx2")))
static void copy_avx2(float *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i += 32) {
        __m256 x0 = _mm256_load_ps(src + i), x1 = _mm256_load_ps(src + i + 8);
        __m256 x2 = _mm256_load_ps(src + i + 16), x3 = _mm256_load_ps(src + i + 24);
        _mm256_store_ps(dst + i, x0);
        _mm256_store_ps(dst + i + 8, x1);
        _mm256_store_ps(dst + i + 16, x2);
        _mm256_store_ps(dst + i + 24, x3);
    }
}

__attribute__((target("avx2")))
static double read_avx2(const float *src, size_t n)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i < n; i += 32) {
        s0 = _mm256_add_ps(s0, _mm256_load_ps(src + i));
        s1 = _mm256_add_ps(s1, _mm256_load_ps(src + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_load_ps(src + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_load_ps(src + i + 24));
    }
    float o[8];
    _mm256_storeu_ps(o, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    return o[0] + o[7];
}

#define FMA_ITERS 20000000L

/* 12 accumulators by name: they stay in registers (see the top comment). */
#define CHAINS 12

__attribute__((target("avx512f")))
static double fma_avx512(void)
{
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    __m512 a0 = _mm512_set1_ps(0), a1 = _mm512_set1_ps(1), a2 = _mm512_set1_ps(2), a3 = _mm512_set1_ps(3);
    __m512 a4 = _mm512_set1_ps(4), a5 = _mm512_set1_ps(5), a6 = _mm512_set1_ps(6), a7 = _mm512_set1_ps(7);
    __m512 a8 = _mm512_set1_ps(8), a9 = _mm512_set1_ps(9), a10 = _mm512_set1_ps(10), a11 = _mm512_set1_ps(11);
    for (long i = 0; i < FMA_ITERS; i++) {
        a0 = _mm512_fmadd_ps(a0, m, c); a1 = _mm512_fmadd_ps(a1, m, c); a2 = _mm512_fmadd_ps(a2, m, c);
        a3 = _mm512_fmadd_ps(a3, m, c); a4 = _mm512_fmadd_ps(a4, m, c); a5 = _mm512_fmadd_ps(a5, m, c);
        a6 = _mm512_fmadd_ps(a6, m, c); a7 = _mm512_fmadd_ps(a7, m, c); a8 = _mm512_fmadd_ps(a8, m, c);
        a9 = _mm512_fmadd_ps(a9, m, c); a10 = _mm512_fmadd_ps(a10, m, c); a11 = _mm512_fmadd_ps(a11, m, c);
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma")))
static double fma_avx2(void)
{
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    __m256 a0 = _mm256_set1_ps(0), a1 = _mm256_set1_ps(1), a2 = _mm256_set1_ps(2), a3 = _mm256_set1_ps(3);
    __m256 a4 = _mm256_set1_ps(4), a5 = _mm256_set1_ps(5), a6 = _mm256_set1_ps(6), a7 = _mm256_set1_ps(7);
    __m256 a8 = _mm256_set1_ps(8), a9 = _mm256_set1_ps(9), a10 = _mm256_set1_ps(10), a11 = _mm256_set1_ps(11);
    for (long i = 0; i < FMA_ITERS; i++) {
        a0 = _mm256_fmadd_ps(a0, m, c); a1 = _mm256_fmadd_ps(a1, m, c); a2 = _mm256_fmadd_ps(a2, m, c);
        a3 = _mm256_fmadd_ps(a3, m, c); a4 = _mm256_fmadd_ps(a4, m, c); a5 = _mm256_fmadd_ps(a5, m, c);
        a6 = _mm256_fmadd_ps(a6, m, c); a7 = _mm256_fmadd_ps(a7, m, c); a8 = _mm256_fmadd_ps(a8, m, c);
        a9 = _mm256_fmadd_ps(a9, m, c); a10 = _mm256_fmadd_ps(a10, m, c); a11 = _mm256_fmadd_ps(a11, m, c);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float o[8];
    _mm256_storeu_ps(o, s);
    return o[0];
}

/* vpdpbusd on 12 independent int32 accumulators. */
__attribute__((target("avx512f,avx512vnni")))
static double vnni_avx512(void)
{
    const __m512i u = _mm512_set1_epi8(3), v = _mm512_set1_epi8(-2);
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0;
    __m512i a6 = a0, a7 = a0, a8 = a0, a9 = a0, a10 = a0, a11 = a0;
    for (long i = 0; i < FMA_ITERS; i++) {
        a0 = _mm512_dpbusd_epi32(a0, u, v); a1 = _mm512_dpbusd_epi32(a1, u, v); a2 = _mm512_dpbusd_epi32(a2, u, v);
        a3 = _mm512_dpbusd_epi32(a3, u, v); a4 = _mm512_dpbusd_epi32(a4, u, v); a5 = _mm512_dpbusd_epi32(a5, u, v);
        a6 = _mm512_dpbusd_epi32(a6, u, v); a7 = _mm512_dpbusd_epi32(a7, u, v); a8 = _mm512_dpbusd_epi32(a8, u, v);
        a9 = _mm512_dpbusd_epi32(a9, u, v); a10 = _mm512_dpbusd_epi32(a10, u, v); a11 = _mm512_dpbusd_epi32(a11, u, v);
        /* keep the compiler from collapsing the chains */
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));
        __asm__ volatile("" : "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
    }
    __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                 _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
    s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)));
    return (double)_mm512_reduce_add_epi32(s);
}

static bool has_vnni(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni");
}

static void *worker(void *arg)
{
    job *j = arg;
    pthread_barrier_wait(j->bar);
    j->t0 = now_s();
    if (j->kind == 0) copy_avx2(j->a, j->b, j->n);
    else if (j->kind == 1) j->sink = read_avx2(j->b, j->n);
    else if (j->kind == 2) j->sink = __builtin_cpu_supports("avx512f") ? fma_avx512() : fma_avx2();
    else j->sink = has_vnni() ? vnni_avx512() : 0;
    j->t1 = now_s();
    return NULL;
}

static int cmp(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* Seconds of one run of `kind` on nt threads (first start to last end). */
static double run(int kind, int nt, float *a, float *b, size_t n)
{
    pthread_t th[64];
    job jobs[64];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)nt);
    size_t per = (n / nt) & ~(size_t)31;
    for (int i = 0; i < nt; i++) {
        jobs[i] = (job){ .kind = kind, .a = a + i * per, .b = b + i * per, .n = per, .bar = &bar };
        pthread_create(&th[i], NULL, worker, &jobs[i]);
    }
    double t0 = 1e300, t1 = 0;
    for (int i = 0; i < nt; i++) {
        pthread_join(th[i], NULL);
        t0 = jobs[i].t0 < t0 ? jobs[i].t0 : t0;
        t1 = jobs[i].t1 > t1 ? jobs[i].t1 : t1;
    }
    pthread_barrier_destroy(&bar);
    return t1 - t0;
}

int main(int argc, char **argv)
{
    int nt = 2, json = 0, read_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) nt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--read")) read_only = 1;
    }
    if (nt < 1 || nt > 64) nt = 2;
    if (read_only) {   /* half the array, still far past the caches */
        const size_t bytes = ARR_BYTES / 2, n = bytes / sizeof(float), per = (n / nt) & ~(size_t)31;
        float *b = pk_huge_alloc(bytes);
        if (!b) { fprintf(stderr, "probe: out of memory\n"); return 1; }
        for (size_t i = 0; i < n; i++) b[i] = (float)(i & 1023);
        double t[REPS];
        for (int r = 0; r < REPS; r++) t[r] = run(1, nt, b, b, n);   /* kind 1 reads b only */
        qsort(t, REPS, sizeof *t, cmp);
        const double read_gbs = 1.0 * per * nt * sizeof(float) / t[REPS / 2] / 1e9;
        if (json) printf("{\"threads\":%d,\"read_gb_s\":%.2f}\n", nt, read_gbs);
        else printf("threads %d: read %.2f GB/s\n", nt, read_gbs);
        pk_huge_free(b, bytes);
        return 0;
    }
    size_t n = ARR_BYTES / sizeof(float);
    float *a = pk_huge_alloc(ARR_BYTES), *b = pk_huge_alloc(ARR_BYTES);
    if (!a || !b) { fprintf(stderr, "probe: out of memory\n"); return 1; }
    memset(a, 0, ARR_BYTES);
    for (size_t i = 0; i < n; i++) b[i] = (float)(i & 1023);

    double t[REPS], copy_gbs, read_gbs, gflops, int8_gops = 0;
    size_t per = (n / nt) & ~(size_t)31;
    for (int r = 0; r < REPS; r++) t[r] = run(0, nt, a, b, n);
    qsort(t, REPS, sizeof *t, cmp);
    copy_gbs = 2.0 * per * nt * sizeof(float) / t[REPS / 2] / 1e9;
    for (int r = 0; r < REPS; r++) t[r] = run(1, nt, a, b, n);
    qsort(t, REPS, sizeof *t, cmp);
    read_gbs = 1.0 * per * nt * sizeof(float) / t[REPS / 2] / 1e9;
    for (int r = 0; r < REPS; r++) t[r] = run(2, nt, a, b, n);
    qsort(t, REPS, sizeof *t, cmp);
    int lanes = __builtin_cpu_supports("avx512f") ? 16 : 8;
    gflops = 2.0 * lanes * CHAINS * (double)FMA_ITERS * nt / t[REPS / 2] / 1e9;
    if (has_vnni()) {
        for (int r = 0; r < REPS; r++) t[r] = run(3, nt, a, b, n);
        qsort(t, REPS, sizeof *t, cmp);
        int8_gops = 2.0 * 64 * CHAINS * (double)FMA_ITERS * nt / t[REPS / 2] / 1e9;
    }
    if (json)
        printf("{\"threads\":%d,\"copy_gb_s\":%.2f,\"read_gb_s\":%.2f,\"fp32_fma_gflops\":%.1f,"
               "\"int8_dot_gops\":%.1f}\n", nt, copy_gbs, read_gbs, gflops, int8_gops);
    else
        printf("threads %d: copy %.2f GB/s, read %.2f GB/s, FP32 FMA peak %.1f GFLOP/s, int8 VNNI peak %.1f GOP/s\n",
               nt, copy_gbs, read_gbs, gflops, int8_gops);
    pk_huge_free(a, ARR_BYTES);
    pk_huge_free(b, ARR_BYTES);
    return 0;
}
