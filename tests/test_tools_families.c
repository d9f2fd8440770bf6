/*
 * test_tools_families.c - tool calls of the Mistral, DeepSeek and gpt-oss
 * (harmony) formats parsed out of what those models write, the format
 * picked from a template's markers, and streaming: for every family and
 * every cut point of the text, what srv_tools_content_prefix lets out is
 * a prefix of the final content (never taken back), and the calls come out
 * the same as from the whole text.
 */
#include "../src/server/srv_tools.h"
#include "test.h"
#include "tool_check.h"

static void test_mistral(void)
{
    srv_tool_msg m = parse(SRV_TOOL_MISTRAL,
                           "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"a1b2c3d4e\"},"
                           " {\"name\": \"now\", \"arguments\": {}}]");
    CHECK_EQ_INT(m.n_calls, 2);
    check_call(&m, 0, "get_weather", "{\"city\":\"Paris\"}");
    check_call(&m, 1, "now", "{}");
    CHECK_STR(m.content, "");
    srv_tool_msg_free(&m);
    /* Devstral / Mistral Small 3.2: name[ARGS]{...}, parallel calls each with its marker. */
    m = parse(SRV_TOOL_MISTRAL, "Let me check.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Oslo\"}[TOOL_CALLS]now[ARGS]{}");
    CHECK_EQ_INT(m.n_calls, 2);
    check_call(&m, 0, "get_weather", "{\"city\":\"Oslo\"}");
    check_call(&m, 1, "now", "{}");
    CHECK_STR(m.content, "Let me check.");
    srv_tool_msg_free(&m);
    m = parse(SRV_TOOL_MISTRAL, "[TOOL_CALLS]f[CALL_ID]abc123xyz[ARGS]{\"x\": 1}");
    check_call(&m, 0, "f", "{\"x\":1}");
    srv_tool_msg_free(&m);
    /* Malformed: kept as text; plain answers untouched. */
    m = parse(SRV_TOOL_MISTRAL, "[TOOL_CALLS][{\"name\": ");
    CHECK_EQ_INT(m.n_calls, 0);
    CHECK_STR(m.content, "[TOOL_CALLS][{\"name\": ");
    srv_tool_msg_free(&m);
    m = parse(SRV_TOOL_MISTRAL, "No tools needed: [1, 2].");
    CHECK_EQ_INT(m.n_calls, 0);
    CHECK_STR(m.content, "No tools needed: [1, 2].");
    srv_tool_msg_free(&m);
}

static void test_deepseek(void)
{
    /* R1 (and its distills): type, separator, the name on its line, fenced JSON. */
    srv_tool_msg m = parse(SRV_TOOL_DEEPSEEK,
        "I will look it up.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
        "```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n"
        "```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
    CHECK_EQ_INT(m.n_calls, 2);
    check_call(&m, 0, "get_weather", "{\"city\":\"Paris\"}");
    check_call(&m, 1, "now", "{}");
    CHECK_STR(m.content, "I will look it up.");
    srv_tool_msg_free(&m);
    /* V3.1: name, separator, JSON. */
    m = parse(SRV_TOOL_DEEPSEEK, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Oslo\"}"
                                 "<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
    CHECK_EQ_INT(m.n_calls, 1);
    check_call(&m, 0, "get_weather", "{\"city\":\"Oslo\"}");
    CHECK_STR(m.content, "");
    srv_tool_msg_free(&m);
    m = parse(SRV_TOOL_DEEPSEEK, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{bad");
    CHECK_EQ_INT(m.n_calls, 0);
    CHECK_STR(m.content, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{bad");
    srv_tool_msg_free(&m);
}

static void test_harmony(void)
{
    srv_tool_msg m = parse(SRV_TOOL_HARMONY,
        "<|channel|>analysis<|message|>The user wants the weather.<|end|><|start|>assistant<|channel|>commentary "
        "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>");
    CHECK_EQ_INT(m.n_calls, 1);
    check_call(&m, 0, "get_weather", "{\"city\":\"Paris\"}");
    CHECK_STR(m.content, "");
    CHECK_STR(m.reasoning, "The user wants the weather.");
    srv_tool_msg_free(&m);
    /* The recipient may come in the role part of the header too. */
    m = parse(SRV_TOOL_HARMONY, "<|start|>assistant to=functions.now<|channel|>commentary json<|message|>{}<|call|>");
    check_call(&m, 0, "now", "{}");
    srv_tool_msg_free(&m);
    m = parse(SRV_TOOL_HARMONY, "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final"
                                "<|message|>Hello there!");
    CHECK_EQ_INT(m.n_calls, 0);
    CHECK_STR(m.content, "Hello there!");
    CHECK_STR(m.reasoning, "Easy.");
    srv_tool_msg_free(&m);
    m = parse(SRV_TOOL_HARMONY, "plain words");
    CHECK_STR(m.content, "plain words");
    CHECK(m.reasoning == NULL);
    srv_tool_msg_free(&m);
}

static void test_detect(void)
{
    CHECK_EQ_INT(srv_tools_detect("{{ '[TOOL_CALLS][' }}", SRV_TOOL_QWEN), SRV_TOOL_MISTRAL);
    CHECK_EQ_INT(srv_tools_detect("'<｜tool▁calls▁begin｜>'", SRV_TOOL_QWEN), SRV_TOOL_DEEPSEEK);
    CHECK_EQ_INT(srv_tools_detect("<|channel|>commentary to=functions.", SRV_TOOL_QWEN), SRV_TOOL_HARMONY);
    CHECK_EQ_INT(srv_tools_detect("<tool_call>\\n", SRV_TOOL_LLAMA3), SRV_TOOL_QWEN);
    CHECK_EQ_INT(srv_tools_detect("<|python_tag|>", SRV_TOOL_QWEN), SRV_TOOL_LLAMA3);
    CHECK_EQ_INT(srv_tools_detect("{{ messages }}", SRV_TOOL_QWEN), SRV_TOOL_QWEN);
    CHECK_EQ_INT(srv_tools_detect(NULL, SRV_TOOL_LLAMA3), SRV_TOOL_LLAMA3);
}

/* Every cut point: the streamed content (srv_tools_content_prefix of the
 * text so far, only ever growing) is a prefix of the final content, and
 * the final parse names the same calls as parsing the text in one piece. */
static void check_stream(srv_tool_fmt f, const char *text, int n_calls)
{
    size_t n = strlen(text);
    srv_tool_msg whole = parse(f, text);
    CHECK_EQ_INT(whole.n_calls, n_calls);
    bool ok = true;
    for (size_t cut = 0; cut <= n; cut++) {
        size_t sent = 0;
        for (size_t len = 0; len <= n; len++) {
            if (len != cut && len != n) continue;
            size_t k = srv_tools_content_prefix(f, text, len);
            if (k > sent) {
                ok &= k <= whole.content_len && !memcmp(text, whole.content, k);
                sent = k;
            }
        }
        if (!ok) {
            fprintf(stderr, "format %d, cut %zu: streamed content is not a prefix of \"%s\"\n", (int)f, cut,
                    whole.content);
            break;
        }
    }
    CHECK(ok);
    srv_tool_msg_free(&whole);
}

static void test_stream(void)
{
    check_stream(SRV_TOOL_MISTRAL, "Let me check.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Oslo\"}", 1);
    check_stream(SRV_TOOL_MISTRAL, "[TOOL_CALLS][{\"name\": \"now\", \"arguments\": {}}]", 1);
    check_stream(SRV_TOOL_MISTRAL, "An answer with [brackets] only.", 0);
    check_stream(SRV_TOOL_DEEPSEEK, "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}\n"
                                    "```<｜tool▁call▁end｜><｜tool▁calls▁end｜>", 1);
    check_stream(SRV_TOOL_DEEPSEEK, "<｜tool▁call▁begin｜>now<｜tool▁sep｜>{}<｜tool▁call▁end｜>", 1);
    check_stream(SRV_TOOL_DEEPSEEK, "Just text, with a <tag>.", 0);
    check_stream(SRV_TOOL_HARMONY, "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>commentary "
                                   "to=functions.now <|constrain|>json<|message|>{}<|call|>", 1);
    check_stream(SRV_TOOL_QWEN, "Checking.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", 1);
    check_stream(SRV_TOOL_LLAMA3, "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"a\": 1}}", 1);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    TEST_RUN(test_mistral);
    TEST_RUN(test_deepseek);
    TEST_RUN(test_harmony);
    TEST_RUN(test_detect);
    TEST_RUN(test_stream);
    return test_finish();
}
