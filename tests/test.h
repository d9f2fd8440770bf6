/*
 * test.h - the whole test framework: CHECK macros that print both values and
 * file:line, and a main() helper.  Each test program is one process; it
 * ends with the line "N passed, M failed, K skipped" and exits non-zero on
 * any failure.  A program that cannot run at all (no ../shared data) calls
 * SKIP(), which prints the reason and exits with status 77 (the runner
 * reports it as skipped, never passed).  A part of a program that cannot run
 * here (a model file, an instruction set this CPU lacks) calls
 * SKIP_PART("reason", ...): the part counts once in K, and test_finish
 * prints each reason on a line "skipped: reason" before the summary, which
 * tests/run.sh adds to its own count and shows.
 */
#ifndef TEST_H
#define TEST_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* 1 in an ASan or TSan build, whose instrumentation makes hot loops 20-40x
 * slower: a speed bound says what the plain build must reach. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TEST_SANITIZED 1
#else
#define TEST_SANITIZED 0
#endif

static int test_n_pass, test_n_fail, test_n_skip;
static char test_skip_reason[32][200];

#define CHECK(cond) do { if (cond) test_n_pass++; else { test_n_fail++; \
    fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); } } while (0)

#define CHECK_EQ_INT(a, b) do { long long va_ = (long long)(a), vb_ = (long long)(b); \
    if (va_ == vb_) test_n_pass++; else { test_n_fail++; \
    fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a, #b, va_, vb_); } } while (0)

#define CHECK_NEAR(a, b, tol) do { double va_ = (double)(a), vb_ = (double)(b), vt_ = (double)(tol); \
    if (fabs(va_ - vb_) <= vt_) test_n_pass++; else { test_n_fail++; \
    fprintf(stderr, "%s:%d: |%s - %s| <= %s failed: %.9g vs %.9g (diff %.3g, tol %.3g)\n", \
            __FILE__, __LINE__, #a, #b, #tol, va_, vb_, fabs(va_ - vb_), vt_); } } while (0)

#define CHECK_STR(a, b) do { const char *va_ = (a), *vb_ = (b); \
    if (va_ && vb_ && strcmp(va_, vb_) == 0) test_n_pass++; else { test_n_fail++; \
    fprintf(stderr, "%s:%d: %s == %s failed: \"%s\" != \"%s\"\n", __FILE__, __LINE__, #a, #b, \
            va_ ? va_ : "(null)", vb_ ? vb_ : "(null)"); } } while (0)

#define SKIP(...) do { printf("SKIP: "); printf(__VA_ARGS__); printf("\n"); exit(77); } while (0)

/* One part of this program left out here, with its reason (printf format). */
#define SKIP_PART(...) do { if (test_n_skip < (int)(sizeof test_skip_reason / sizeof test_skip_reason[0])) \
        snprintf(test_skip_reason[test_n_skip], sizeof test_skip_reason[0], __VA_ARGS__); \
    test_n_skip++; } while (0)

/* Directory holding ../shared (models, reference), or NULL when absent. */
static inline const char *test_shared_dir(void)
{
    const char *env = getenv("POLYKV_SHARED");
    if (env && access(env, R_OK) == 0) return env;
    if (access("../shared/models", R_OK) == 0) return "../shared";
    return NULL;
}

/* llama.cpp's source beside the project (POLYKV_LLAMA_CPP, else
 * ../peers/llama.cpp): vocabularies and test vectors too large to keep in
 * the repository (its models/ggml-vocab-gemma-4.gguf is 15 MB); NULL when
 * absent, and the tests that need it skip. */
static inline const char *test_llama_cpp_dir(void)
{
    const char *env = getenv("POLYKV_LLAMA_CPP");
    if (env && access(env, R_OK) == 0) return env;
    if (access("../peers/llama.cpp/models", R_OK) == 0) return "../peers/llama.cpp";
    return NULL;
}

/* Named cases, libuv's task.h way: main calls test_select(argc, argv)
 * first, runs each case as TEST_RUN(test_name, args...), and ends with
 * test_finish().  With no argument every case runs; `test_x name...` runs
 * the cases named (the function's name, or what follows its first '_':
 * "test_alone" or "alone"), and a name no case has is a failure. */
static int test_argc;
static char **test_argv;
static bool test_matched[64];

static inline void test_select(int argc, char **argv)
{
    test_argc = argc < 65 ? argc : 65;
    test_argv = argv;
}

static inline bool test_wanted(const char *fn)
{
    if (test_argc <= 1) return true;
    const char *us = strchr(fn, '_'), *bare = us ? us + 1 : fn;   /* test_x, scenario_x: x */
    bool want = false;
    for (int i = 1; i < test_argc; i++)
        if (!strcmp(test_argv[i], fn) || !strcmp(test_argv[i], bare)) want = test_matched[i - 1] = true;
    return want;
}

#define TEST_RUN(fn, ...) do { if (test_wanted(#fn)) fn(__VA_ARGS__); } while (0)

static inline int test_finish(void)
{
    for (int i = 1; i < test_argc; i++)
        if (!test_matched[i - 1]) {
            fprintf(stderr, "no case named %s\n", test_argv[i]);
            test_n_fail++;
        }
    int n_listed = test_n_skip < (int)(sizeof test_skip_reason / sizeof test_skip_reason[0])
                 ? test_n_skip : (int)(sizeof test_skip_reason / sizeof test_skip_reason[0]);
    for (int i = 0; i < n_listed; i++) printf("skipped: %s\n", test_skip_reason[i]);
    if (n_listed < test_n_skip) printf("skipped: (%d more not listed)\n", test_n_skip - n_listed);
    printf("%d passed, %d failed, %d skipped\n", test_n_pass, test_n_fail, test_n_skip);
    return test_n_fail ? 1 : 0;
}

#endif
