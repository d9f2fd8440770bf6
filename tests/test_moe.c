/*
 * test_moe.c - the MoE architectures of the llama family against llama.cpp.
 *
 * qwen3moe (Qwen3 30B-A3B's layout: Qwen3's attention with QK-norm, every
 * FFN a router over stacked experts, softmax, top-k renormalized, no shared
 * expert): gen-model writes a small model (n_embd 128, 3 layers, 8 experts,
 * 2 used; the 151,936-token vocabulary of ../shared) in four types that
 * llama.cpp ran once (scripts/refs/make_moe_refs.sh, tests/data/moe); each is
 * written again by the binary under test, checked byte for byte against the
 * recorded sha256 and held to llama.cpp's logits over the first positions and
 * 32 greedy steps of four prompts (tests/gen_ref.h).  Then the engine serves
 * it: greedy text through the server's continuous batch with sessions at
 * once equals the model run directly, so the grouped prefill (tokens grouped
 * by expert) and the per-token decode agree.
 */
#include "gen_ref.h"

#include "engine_greedy.h"

#define DATA "tests/data/moe"
#define GEN_QWEN3MOE "--arch qwen3moe --n-embd 128 --n-layer 3 --n-head 4 --n-head-kv 2 --n-ff 256 --n-expert 8 " \
                     "--n-expert-used 2 --n-ff-exp 64 --seed 37"

/* gpt-oss: router and expert biases, top-k then softmax, the clamped
 * SwiGLU, attention biases and sinks, YaRN (factor 32 over 4,096), and a
 * sliding window of 32 on layers 0 and 2: the 1,670-token prompt runs far
 * past it */
#define GEN_GPTOSS "--arch gpt-oss --n-embd 128 --n-layer 4 --n-head 4 --n-head-kv 2 --head-dim 32 --n-ff 256 " \
                   "--n-expert 8 --n-expert-used 2 --n-ff-exp 64 --swa 32 --seed 43"

static const struct { const char *name, *args; double frac, frac_steps; } gen_models[] = {
    { "gen-qwen3moe-e128-l3-x8a2-F32", GEN_QWEN3MOE " --type f32", 3e-6, 0 },
    { "gen-qwen3moe-e128-l3-x8a2-BF16", GEN_QWEN3MOE " --type bf16", 4e-3, 0 },
    { "gen-qwen3moe-e128-l3-x8a2-Q8_0", GEN_QWEN3MOE " --type q8_0", 1e-2, 0 },
    { "gen-qwen3moe-e128-l3-x8a2-Q4_K", GEN_QWEN3MOE " --type q4_k", 1.5e-2, 0 },
    /* gpt-oss: the first positions within the qwen3moe budgets (F32 1e-5:
     * YaRN's angles, which llama.cpp's compiler may contract into FMAs);
     * the greedy steps wider, because the k best of 8 raw logits switch
     * experts at a near-tie on a last-bit difference (the quantized runs'
     * activations round differently in llama.cpp's repacked Q4_K and MXFP4
     * kernels), and a switched expert moves that step's logits by several
     * hundredths of max |logit|.  Measured, first positions / steps:
     * 1.8e-6 / 4.3e-6, 2.1e-3 / 4.2e-3, 5.0e-3 / 1.2e-2, 8.6e-3 / 4.5e-2,
     * 9.6e-3 / 6.9e-2. */
    { "gen-gptoss-e128-l4-x8a2-w32-F32", GEN_GPTOSS " --type f32", 1e-5, 0 },
    { "gen-gptoss-e128-l4-x8a2-w32-BF16", GEN_GPTOSS " --type bf16", 4e-3, 6e-3 },
    { "gen-gptoss-e128-l4-x8a2-w32-Q8_0", GEN_GPTOSS " --type q8_0", 1e-2, 2e-2 },
    { "gen-gptoss-e128-l4-x8a2-w32-Q4_K", GEN_GPTOSS " --type q4_k", 1.5e-2, 8e-2 },
    { "gen-gptoss-e128-l4-x8a2-w32-MXFP4_MOE", GEN_GPTOSS " --type mxfp4_moe", 1.5e-2, 8e-2 },
};

static const char *g_bin;

int main(int argc, char **argv)
{
    test_select(argc, argv);
    g_bin = gen_bin(argv[0]);
    if (access(DATA "/commands.txt", R_OK) != 0)
        SKIP(DATA " absent (run from the repository root): llama.cpp's outputs are there");
    for (size_t i = 0; i < ARRAY_LEN(gen_models); i++)
        TEST_RUN(gen_ref_check_gen, g_bin, DATA, DATA "/commands.txt", "scripts/refs/make_moe_refs.sh",
                 gen_models[i].name, gen_models[i].args, gen_models[i].frac, gen_models[i].frac_steps);
    /* four sessions at once through the engine (gpt-oss: chunks of several
     * sequences, each token with its own window) */
    TEST_RUN(engine_greedy_check_gen, g_bin, GEN_QWEN3MOE " --type q8_0");
    TEST_RUN(engine_greedy_check_gen, g_bin, GEN_GPTOSS " --type q8_0");
    return test_finish();
}
