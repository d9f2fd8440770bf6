/*
 * fuzz_jinja.c - libFuzzer entry for the Jinja interpreter (src/jinja): the
 * input is a template source, compiled, then rendered with a fixed
 * conversation (messages with tool calls, tools, add_generation_prompt) and
 * small limits, so loops and recursion end quickly.  Any status is fine; a
 * crash, a leak or a sanitizer report is the bug.
 */
#include <stdint.h>
#include <stdlib.h>

#include "../src/jinja/jj.h"

static const char ctx_json[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": [{\"type\": "
    "\"text\", \"text\": \"hi\"}]}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c1\", "
    "\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1.5}}}]}, {\"role\": \"tool\", "
    "\"content\": \"ok\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
    "{}}}], \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static json_t *ctx;
    if (!ctx) ctx = json_loads(ctx_json, 0, NULL);
    jj_tmpl *t;
    char err[256];
    if (jj_compile((const char *)data, size, &t, err, sizeof err) != PK_OK) return 0;
    jj_limits lim = { .max_output_bytes = 1 << 16, .max_memory_bytes = 16u << 20, .max_loop_iters = 10000,
                      .max_depth = 16, .now = 1768478400 };
    char *out;
    size_t n;
    if (jj_render(t, ctx, &lim, &out, &n, err, sizeof err) == PK_OK) free(out);
    jj_free(t);
    return 0;
}
