/*
 * test_conv.c - qwen3moe, gpt-oss and gemma4 on files llama.cpp's own
 * converter wrote, against llama.cpp's outputs on the same files, read from
 * tests/data/conv/ (scripts/convrefs/make_refs.sh wrote them with a
 * llama.cpp build beside the project; its commands.txt says how).
 *
 * test_moe and test_gemma check these architectures on files polykv's
 * gen-model writes; here `transformers` initialized each model at random
 * from a small config (scripts/convrefs/make_models.py) with the real
 * vocabulary (Qwen3's 151,936 tokens, gpt-oss's o200k_harmony 201,088,
 * Gemma 4's 262,144, each converted token for token as in a vocabulary
 * file made without these scripts), and convert_hf_to_gguf.py wrote it in
 * F32, BF16 and Q8_0:
 *   rand-qwen3moe-e256-l4-x8a2     4 layers, 8 experts of 128, 2 chosen;
 *   rand-gptoss-e256-l4-x8a2-w32   4 layers (sliding window 32 on 0 and 2),
 *                                  8 experts, 2 chosen, sinks, YaRN 32;
 *   rand-gemma4-e256-l6-w64        6 layers (window 64; 2 and 5 global,
 *                                  V = K, head size 128), logits capped at 3.
 * 90 to 440 MB each for the vocabularies, so they are not in the
 * repository; the cases read them from $POLYKV_CONV_DIR and skip with a
 * message without it.  Each is checked as test_qwen35 checks its converter
 * models (gen_ref_check_file): four prompts of 4 to 1,674 tokens (the last
 * runs in 4 chunks of 512, far past both windows), an F32 cache, 32 greedy
 * steps, within the budget (frac of max |logit|) at the first positions
 * and the steps' budget over the greedy steps, with the margin rule.
 *
 * Budgets (frac of max |logit|): the first positions' (every prompt token
 * read at once), then the greedy steps'; the F32 ones are test_moe's and
 * test_gemma's.  Measured, max |diff| / max |logit| at the first
 * positions, then over all steps, the largest of the AVX-512, AVX2 and
 * scalar kernels:
 *   qwen3moe  F32 3.6e-7, 5.8e-7; BF16 1.5e-3, 2.5e-2; Q8_0 4.9e-3, 3.0e-2;
 *   gpt-oss   F32 3.4e-7, 4.1e-7; BF16 1.6e-3, 2.8e-3; Q8_0 7.7e-3, 6.8e-2;
 *   gemma4    F32 6.4e-5, 6.4e-5; BF16 1.5e-3, 1.7e-3; Q8_0 6.1e-3, 6.1e-3.
 * Every F32 run, on every kernel, matches all 32 greedy tokens of every
 * prompt (free run 128 of 128).  gemma4's F32 is held at test_gemma's 2e-4:
 * llama.cpp differs from itself by 4.0e-5 on this model (the 1,657-token
 * prompt decoded at once or token by token), its GELU rounding its input
 * to F16.  The MoE steps' large values are single greedy steps (qwen3moe
 * BF16 and Q8_0 prompt 0 steps 31 and 27, gpt-oss Q8_0 prompt 3 step 22,
 * and in the scalar build one more) where one layer's second and third
 * router logits are 8.7e-3 to 9.8e-3 apart (transformers, F32), so that a
 * rounding can pick the other expert, and that step's logits move by 2e-2
 * to 7e-2 of max |logit| while the steps before stay within the first
 * positions' budget: the near-tie test_qwen35 documents.  So the MoE steps
 * of the rounded types hold test_qwen35's 1.2e-1 (their margin rule then
 * checks little), their first positions test_moe's budgets; gpt-oss BF16,
 * with no such step here, keeps test_moe's 6e-3.  The nine take about 7 s
 * on 2 threads.
 */
#include "gen_ref.h"

#include <stdlib.h>
#include <unistd.h>

#define DATA "tests/data/conv"

static const gen_ref_file models[] = {
    { "rand-qwen3moe-e256-l4-x8a2-F32", 3e-6, 3e-6 },
    { "rand-qwen3moe-e256-l4-x8a2-BF16", 4e-3, 1.2e-1 },
    { "rand-qwen3moe-e256-l4-x8a2-Q8_0", 1e-2, 1.2e-1 },
    { "rand-gptoss-e256-l4-x8a2-w32-F32", 1e-5, 1e-5 },
    { "rand-gptoss-e256-l4-x8a2-w32-BF16", 4e-3, 6e-3 },
    { "rand-gptoss-e256-l4-x8a2-w32-Q8_0", 1e-2, 1.2e-1 },
    { "rand-gemma4-e256-l6-w64-F32", 2e-4, 2e-4 },
    { "rand-gemma4-e256-l6-w64-BF16", 4e-3, 4e-3 },
    { "rand-gemma4-e256-l6-w64-Q8_0", 1e-2, 1e-2 },
};

int main(int argc, char **argv)
{
    test_select(argc, argv);
    if (access(DATA "/commands.txt", R_OK) != 0)
        SKIP(DATA " absent (run from the repository root): llama.cpp's outputs are there");
    const char *dir = getenv("POLYKV_CONV_DIR");
    if (!dir || !*dir)
        SKIP("set POLYKV_CONV_DIR to the directory scripts/convrefs/make_refs.sh wrote: the converter's models "
             "(90 to 440 MB each) are not in the repository");
    gen_ref_check_env_all("POLYKV_CONV_DIR", "scripts/convrefs/make_refs.sh", DATA, models, ARRAY_LEN(models));
    return test_finish();
}
