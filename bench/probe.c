/*
 * probe.c - this machine's limits, so every speed figure can be read as a
 * fraction of them:
 *   - copy bandwidth (STREAM "Copy": a[i] = b[i], read + write bytes counted)
 *     and read bandwidth (a sum over one array), arrays far larger than the
 *     caches, each thread on its own slice;
 *   - peak FP32 FMA rate (independent fused multiply-adds in registers).
 * Usage: probe [-t THREADS] [--json].  Median of 5 runs each.
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ARR_BYTES ((size_t)1 << 30)   /* 1 GiB per array */
#define REPS 5

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct job {
    int kind;                 /* 0 copy, 1 read, 2 fma */
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

__attribute__((target("avx512f")))
static double fma_avx512(void)
{
    __m512 a[12], m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (int k = 0; k < 12; k++) a[k] = _mm512_set1_ps((float)k);
    for (long i = 0; i < FMA_ITERS; i++)
        for (int k = 0; k < 12; k++) a[k] = _mm512_fmadd_ps(a[k], m, c);
    float o[16];
    __m512 s = a[0];
    for (int k = 1; k < 12; k++) s = _mm512_add_ps(s, a[k]);
    _mm512_storeu_ps(o, s);
    return o[0];
}

__attribute__((target("avx2,fma")))
static double fma_avx2(void)
{
    __m256 a[12], m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (int k = 0; k < 12; k++) a[k] = _mm256_set1_ps((float)k);
    for (long i = 0; i < FMA_ITERS; i++)
        for (int k = 0; k < 12; k++) a[k] = _mm256_fmadd_ps(a[k], m, c);
    float o[8];
    __m256 s = a[0];
    for (int k = 1; k < 12; k++) s = _mm256_add_ps(s, a[k]);
    _mm256_storeu_ps(o, s);
    return o[0];
}

static void *worker(void *arg)
{
    job *j = arg;
    pthread_barrier_wait(j->bar);
    j->t0 = now_s();
    if (j->kind == 0) copy_avx2(j->a, j->b, j->n);
    else if (j->kind == 1) j->sink = read_avx2(j->b, j->n);
    else j->sink = __builtin_cpu_supports("avx512f") ? fma_avx512() : fma_avx2();
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
    int nt = 2, json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) nt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json")) json = 1;
    }
    if (nt < 1 || nt > 64) nt = 2;
    size_t n = ARR_BYTES / sizeof(float);
    float *a = aligned_alloc(64, ARR_BYTES), *b = aligned_alloc(64, ARR_BYTES);
    if (!a || !b) { fprintf(stderr, "probe: out of memory\n"); return 1; }
    memset(a, 0, ARR_BYTES);
    for (size_t i = 0; i < n; i++) b[i] = (float)(i & 1023);

    double t[REPS], copy_gbs, read_gbs, gflops;
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
    gflops = 2.0 * lanes * 12 * (double)FMA_ITERS * nt / t[REPS / 2] / 1e9;
    if (json)
        printf("{\"threads\":%d,\"copy_gb_s\":%.2f,\"read_gb_s\":%.2f,\"fp32_fma_gflops\":%.1f}\n",
               nt, copy_gbs, read_gbs, gflops);
    else
        printf("threads %d: copy %.2f GB/s, read %.2f GB/s, FP32 FMA peak %.1f GFLOP/s\n",
               nt, copy_gbs, read_gbs, gflops);
    free(a);
    free(b);
    return 0;
}
