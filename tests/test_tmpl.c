/*
 * test_tmpl.c - chat templates: detection, names, exact renderings of the
 * reference engine's conversation test (system, user, assistant with padded
 * content, ...), default system messages, errors and EFULL.  With
 * ../shared: the Qwen2 GGUF's own template, rendered and tokenized.
 */
#include "../src/tokenizer/tok.h"
#include "test.h"

static const tmpl_msg conv[] = {
    {"system", "You are a helpful assistant"},
    {"user", "Hello"},
    {"assistant", "Hi there"},
    {"user", "Who are you"},
    {"assistant", "   I am an assistant   "},
    {"user", "Another question"},
};

static char out[4096];

static const char *render(tmpl_kind k, const tmpl_msg *m, int n, bool add_assistant)
{
    size_t n_out = 0;
    pk_status st = tmpl_apply(k, m, n, add_assistant, out, sizeof(out), &n_out);
    CHECK_EQ_INT(st, PK_OK);
    CHECK_EQ_INT(n_out, strlen(out));
    return st == PK_OK ? out : "";
}

static void test_renderings(void)
{
    CHECK_STR(render(TMPL_CHATML, conv, 6, true),
              "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
              "<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n"
              "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n"
              "<|im_start|>assistant\n");
    CHECK_STR(render(TMPL_CHATML, conv + 1, 1, false), "<|im_start|>user\nHello<|im_end|>\n");
    CHECK_STR(render(TMPL_LLAMA3, conv, 6, true),
              "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n");
    CHECK_STR(render(TMPL_LLAMA3, conv + 1, 1, false), "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>");
    CHECK_STR(render(TMPL_LLAMA2, conv, 6, true),
              "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you [/INST]"
              "   I am an assistant   </s>[INST] Another question [/INST]");
    CHECK_STR(render(TMPL_LLAMA2_SYS, conv, 6, false),
              "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>"
              "[INST] Who are you [/INST]I am an assistant</s>[INST] Another question [/INST]");
    /* llama.cpp's test_apply_chat_template expects this text for command-r. */
    CHECK_STR(render(TMPL_COMMAND_R, conv, 2, true),
              "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a helpful assistant<|END_OF_TURN_TOKEN|>"
              "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hello<|END_OF_TURN_TOKEN|>"
              "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>");
    CHECK_STR(render(TMPL_COMMAND_R, conv + 2, 3, false),
              "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>Hi there<|END_OF_TURN_TOKEN|>"
              "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Who are you<|END_OF_TURN_TOKEN|>"
              "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>I am an assistant<|END_OF_TURN_TOKEN|>");
    CHECK_STR(render(TMPL_CHATML, NULL, 0, true), "<|im_start|>assistant\n");
    CHECK_STR(render(TMPL_LLAMA2, NULL, 0, true), "[INST] ");
    static const tmpl_msg tool[] = {{"user", "2+2?"}, {"assistant", "calc(2+2)"}, {"tool", "4"}};
    CHECK_STR(render(TMPL_CHATML, tool, 3, true),
              "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\ncalc(2+2)<|im_end|>\n"
              "<|im_start|>tool\n4<|im_end|>\n<|im_start|>assistant\n");
}

static void test_errors(void)
{
    size_t n = 0;
    static const tmpl_msg bad_role[] = {{"user", "hi"}, {"bot", "hello"}};
    static const tmpl_msg tool[] = {{"tool", "4"}};
    static const tmpl_msg null_content[] = {{"user", NULL}};
    CHECK_EQ_INT(tmpl_apply(TMPL_UNKNOWN, conv, 1, true, out, sizeof(out), &n), PK_EINVAL);
    CHECK_EQ_INT(tmpl_apply((tmpl_kind)77, conv, 1, true, out, sizeof(out), &n), PK_EINVAL);
    CHECK_EQ_INT(tmpl_apply(TMPL_CHATML, bad_role, 2, true, out, sizeof(out), &n), PK_EINVAL);
    CHECK_EQ_INT(tmpl_apply(TMPL_LLAMA3, tool, 1, true, out, sizeof(out), &n), PK_EINVAL);
    CHECK_EQ_INT(tmpl_apply(TMPL_LLAMA2, tool, 1, true, out, sizeof(out), &n), PK_EINVAL);
    CHECK_EQ_INT(tmpl_apply(TMPL_CHATML, null_content, 1, true, out, sizeof(out), &n), PK_EINVAL);
    CHECK_EQ_INT(tmpl_apply(TMPL_CHATML, conv, -1, true, out, sizeof(out), &n), PK_EINVAL);
    CHECK_EQ_INT(tmpl_apply(TMPL_CHATML, NULL, 1, true, out, sizeof(out), &n), PK_EINVAL);

    /* EFULL: a truncated, terminated prefix and the length needed. */
    char small[10];
    CHECK_EQ_INT(tmpl_apply(TMPL_CHATML, conv + 1, 1, false, small, sizeof(small), &n), PK_EFULL);
    CHECK_EQ_INT(n, strlen("<|im_start|>user\nHello<|im_end|>\n"));
    CHECK_STR(small, "<|im_star");
    char exact[34];
    CHECK_EQ_INT(tmpl_apply(TMPL_CHATML, conv + 1, 1, false, exact, sizeof(exact), &n), PK_OK);
    CHECK_EQ_INT(tmpl_apply(TMPL_CHATML, conv + 1, 1, false, exact, sizeof(exact) - 1, &n), PK_EFULL);
    CHECK_EQ_INT(tmpl_apply(TMPL_CHATML, conv + 1, 1, false, NULL, 0, &n), PK_EFULL);
    CHECK_EQ_INT(n, 33);
}

static void test_detect(void)
{
    CHECK_EQ_INT(tmpl_detect(NULL), TMPL_UNKNOWN);
    CHECK_EQ_INT(tmpl_detect(""), TMPL_UNKNOWN);
    CHECK_EQ_INT(tmpl_detect("{{'<|im_start|>' + message['role'] + '\\n'}}"), TMPL_CHATML);
    CHECK_EQ_INT(tmpl_detect("{{'<|im_start|>user<|im_sep|>'}}"), TMPL_UNKNOWN);          /* Phi-4 */
    CHECK_EQ_INT(tmpl_detect("{{ '<|start_header_id|>' + role + '<|end_header_id|>' }}"), TMPL_LLAMA3);
    CHECK_EQ_INT(tmpl_detect("{{ '[INST] ' + m + ' [/INST]' }}"), TMPL_LLAMA2);
    CHECK_EQ_INT(tmpl_detect("{{ '[INST] <<SYS>>\\n' + s }}{{ content.strip() }}"), TMPL_LLAMA2_SYS);
    CHECK_EQ_INT(tmpl_detect("{{ '[SYSTEM_PROMPT]' }}{{ '[INST]' }}"), TMPL_UNKNOWN);       /* Mistral v7 */
    CHECK_EQ_INT(tmpl_detect("{{ '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + content }}"), TMPL_COMMAND_R);
    CHECK_EQ_INT(tmpl_detect("{{ messages }}"), TMPL_UNKNOWN);

    CHECK_EQ_INT(tmpl_from_name("chatml"), TMPL_CHATML);
    CHECK_EQ_INT(tmpl_from_name("llama3"), TMPL_LLAMA3);
    CHECK_EQ_INT(tmpl_from_name("llama2"), TMPL_LLAMA2);
    CHECK_EQ_INT(tmpl_from_name("mistral"), TMPL_LLAMA2);
    CHECK_EQ_INT(tmpl_from_name("llama2-sys"), TMPL_LLAMA2_SYS);
    CHECK_EQ_INT(tmpl_from_name("command-r"), TMPL_COMMAND_R);
    CHECK_EQ_INT(tmpl_from_name("vicuna"), TMPL_UNKNOWN);
    CHECK_EQ_INT(tmpl_from_name(NULL), TMPL_UNKNOWN);
    for (int k = TMPL_CHATML; k <= TMPL_COMMAND_R; k++) CHECK_EQ_INT(tmpl_from_name(tmpl_name((tmpl_kind)k)), k);
    CHECK_STR(tmpl_name(TMPL_UNKNOWN), "unknown");
}

/* Templates in the shape of Qwen's (written for this test). */
static const char qwen2_like[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nBe brief.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
static const char qwen25_like[] =
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + "
    "'<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are a test bot.\\nReally.<|im_end|>\\n' }}"
    "{%- endif %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}";
static const char qwen3_like[] =
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- endif %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n\\n' }}";

static void test_default_system(void)
{
    char sys[128];
    CHECK_EQ_INT(tmpl_default_system(qwen2_like, sys, sizeof(sys)), 9);
    CHECK_STR(sys, "Be brief.");
    CHECK_EQ_INT(tmpl_default_system(qwen25_like, sys, sizeof(sys)), 27);
    CHECK_STR(sys, "You are a test bot.\nReally.");
    CHECK_EQ_INT(tmpl_default_system(qwen3_like, sys, sizeof(sys)), 0);
    CHECK_EQ_INT(tmpl_default_system("{{ '[INST]' }}", sys, sizeof(sys)), 0);
    CHECK_EQ_INT(tmpl_default_system(NULL, sys, sizeof(sys)), 0);
    CHECK_EQ_INT(tmpl_default_system(qwen2_like, sys, 4), 9);
    CHECK_STR(sys, "Be ");

    size_t n = 0;
    CHECK_EQ_INT(tmpl_render(qwen2_like, conv + 1, 1, true, out, sizeof(out), &n), PK_OK);
    CHECK_STR(out, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
    CHECK_EQ_INT(n, strlen(out));
    /* A system message of the caller's replaces the default. */
    CHECK_EQ_INT(tmpl_render(qwen2_like, conv, 2, false, out, sizeof(out), &n), PK_OK);
    CHECK_STR(out, "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n");
    CHECK_EQ_INT(tmpl_render(qwen3_like, conv + 1, 1, false, out, sizeof(out), &n), PK_OK);
    CHECK_STR(out, "<|im_start|>user\nHello<|im_end|>\n");
    CHECK_EQ_INT(tmpl_render(qwen2_like, NULL, 0, true, out, sizeof(out), &n), PK_OK);
    CHECK_STR(out, "<|im_start|>assistant\n");
    CHECK_EQ_INT(tmpl_render("{{ messages }}", conv, 1, true, out, sizeof(out), &n), PK_EUNSUPPORTED);
    char small[20];
    CHECK_EQ_INT(tmpl_render(qwen2_like, conv + 1, 1, true, small, sizeof(small), &n), PK_EFULL);
    CHECK_EQ_INT(n, strlen("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
                           "<|im_start|>assistant\n"));
    CHECK_STR(small, "<|im_start|>system\n");
}

/* The Qwen2 model's own template: detected, default system message, and the
 * rendered prompt tokenizes into the turn markers. */
static void test_qwen2_gguf(const char *shared)
{
    char path[512], err[256];
    snprintf(path, sizeof(path), "%s/models/rand-qwen2-qwen2vocab-e64-l2-F16.gguf", shared);
    gguf_ctx *g = NULL;
    tok_vocab *v = NULL;
    CHECK_EQ_INT(gguf_open(path, &g, err, sizeof(err)), PK_OK);
    if (!g) return;
    CHECK_EQ_INT(tok_load_gguf(g, &v, err, sizeof(err)), PK_OK);
    gguf_close(g);
    if (!v) return;
    const char *src = tok_chat_template(v);
    CHECK(src != NULL);
    CHECK_EQ_INT(tmpl_detect(src), TMPL_CHATML);
    char sys[128];
    CHECK_EQ_INT(tmpl_default_system(src, sys, sizeof(sys)), 27);
    CHECK_STR(sys, "You are a helpful assistant");
    size_t n = 0;
    CHECK_EQ_INT(tmpl_render(src, conv + 1, 1, true, out, sizeof(out), &n), PK_OK);
    CHECK_STR(out, "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
                   "<|im_start|>assistant\n");
    int32_t ids[64], n_ids = 0;
    CHECK_EQ_INT(tok_encode(v, out, n, true, true, ids, 64, &n_ids), PK_OK);
    int32_t start = tok_find(v, "<|im_start|>", 12), end = tok_find(v, "<|im_end|>", 10);
    CHECK(start >= 0 && end >= 0 && n_ids > 6);
    CHECK_EQ_INT(ids[0], start);
    CHECK_EQ_INT(ids[n_ids - 3], start);
    CHECK(tok_is_eog(v, end));
    int n_start = 0, n_end = 0;
    for (int32_t i = 0; i < n_ids; i++) n_start += ids[i] == start, n_end += ids[i] == end;
    CHECK_EQ_INT(n_start, 3);
    CHECK_EQ_INT(n_end, 2);
    tok_free(v);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    TEST_RUN(test_renderings);
    TEST_RUN(test_errors);
    TEST_RUN(test_detect);
    TEST_RUN(test_default_system);
    const char *shared = test_shared_dir();
    if (!shared) {
        SKIP_PART("../shared absent: the Qwen2 GGUF template checks not run");
        return test_finish();
    }
    TEST_RUN(test_qwen2_gguf, shared);
    return test_finish();
}
