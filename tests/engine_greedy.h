/*
 * engine_greedy.h - four sessions at once through the engine's continuous
 * batch, each one's greedy text checked against the model run directly
 * (prompts of 20 .. 260 tokens: prefill chunks of several sequences, then
 * batched decoding), on a file gen-model writes.  Used by test_moe and
 * test_gemma.  Header-only so each test stays one file.
 */
#ifndef ENGINE_GREEDY_H
#define ENGINE_GREEDY_H

#include <unistd.h>

#include "gen.h"
#include "ref.h"
#include "../src/engine/eng.h"
#include "spec_run.h"

/* The model at path, served by 4 slots at once, writes what ref_greedy does. */
static inline void engine_greedy_check(const char *path)
{
    char err[256] = "";
    model *m;
    ASSERT(model_load(path, MODEL_MMAP, &m, err, sizeof err) == PK_OK);
    enum { NS = 4, GEN = 48 };
    static int32_t p[NS][300], want[NS][GEN];
    int np[NS], nw[NS];
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (int i = 0; i < NS; i++) {
        np[i] = 20 + 80 * i;                     /* prompts of 20 .. 260 tokens: chunks with every expert */
        for (int j = 0; j < np[i]; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            p[i][j] = 300 + (int32_t)(x % 30000);
        }
        nw[i] = ref_greedy(m, p[i], np[i], GEN, want[i]);
    }
    eng_params ep = eng_default_params();
    ep.n_slots = NS;
    ep.n_ctx = NS * 512;
    ep.n_threads = 2;
    eng *e;
    ASSERT(eng_new(m, &ep, &e) == PK_OK);
    eng_task *ts[NS];
    for (int i = 0; i < NS; i++) {
        eng_completion c = req(p[i], np[i], GEN, SPEC_NONE);
        CHECK(eng_submit(e, &c, &ts[i]) == PK_OK);
    }
    int same = 0;
    for (int i = 0; i < NS; i++) {
        collected got;
        collect(ts[i], &got);
        same += got.n_tok == nw[i] && !memcmp(got.tok, want[i], sizeof(int32_t) * (size_t)nw[i]);
    }
    printf("engine: %d of %d sessions at once wrote the model's own greedy text\n", same, NS);
    CHECK_EQ_INT(same, NS);
    eng_free(e);
    model_free(m);
}

/* engine_greedy_check on the model `bin gen-model ARGS` writes with
 * ../shared's Qwen3.5 vocabulary (skipped without it), in a scratch
 * directory removed afterwards. */
static inline void engine_greedy_check_gen(const char *bin, const char *args)
{
    const char *shared = test_shared_dir();
    if (!shared) {
        SKIP_PART("engine: ../shared absent (set POLYKV_SHARED): gen-model needs its Qwen3.5 vocabulary");
        return;
    }
    char dir[] = "/tmp/polykv-test-engine-XXXXXX", path[256];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    CHECK(gen_model(bin, shared, args, path));
    engine_greedy_check(path);
    unlink(path);
    rmdir(dir);
}

#endif
