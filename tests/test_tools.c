/*
 * test_tools.c - tool-call parsing (srv_tools) over what Qwen2.5 and
 * Llama 3.1 instruct models actually write: single and parallel calls,
 * content around calls, the python tag, arguments as a JSON string, calls
 * cut off by the token limit, malformed calls (kept as content) and plain
 * answers (never mistaken for calls); and the streaming hold-back point.
 * Also tmpl_tools: prompts with tools rendered exactly as the models' Jinja
 * templates render them.
 */
#include "../src/server/srv_tools.h"
#include "../src/tokenizer/tmpl_tools.h"
#include "test.h"
#include "tool_check.h"

/* Expected prompts: the models' own Jinja templates
 * (Qwen-Qwen2.5-7B-Instruct.jinja, meta-llama-Llama-3.1-8B-Instruct.jinja)
 * rendered by Jinja2 with transformers' tojson, for the conversations below. */
static const char want_q1[] =
    "<|im_start|>system\n"
    "You are a weather bot.\n"
    "\n"
    "# Tools\n"
    "\n"
    "You may call one or more functions to assist with the user query.\n"
    "\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n"
    "<tools>\n"
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the current weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name, e.g. Z\xc3\xbc""rich\"}}, \"required\": [\"city\"]}}}\n"
    "{\"type\": \"function\", \"function\": {\"name\": \"now\", \"description\": \"Current time\", \"parameters\": {\"type\": \"object\", \"properties\": {}}}}\n"
    "</tools>\n"
    "\n"
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
    "<tool_call>\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "What's the weather in Paris?<|im_end|>\n"
    "<|im_start|>assistant\n"
    "<tool_call>\n"
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "{\"temp\": 24}\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
    "It is 24 degrees in Paris.<|im_end|>\n"
    "<|im_start|>user\n"
    "Thanks!<|im_end|>\n"
    "<|im_start|>assistant\n";

static const char want_q2[] =
    "<|im_start|>system\n"
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n"
    "\n"
    "# Tools\n"
    "\n"
    "You may call one or more functions to assist with the user query.\n"
    "\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n"
    "<tools>\n"
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the current weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name, e.g. Z\xc3\xbc""rich\"}}, \"required\": [\"city\"]}}}\n"
    "{\"type\": \"function\", \"function\": {\"name\": \"now\", \"description\": \"Current time\", \"parameters\": {\"type\": \"object\", \"properties\": {}}}}\n"
    "</tools>\n"
    "\n"
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
    "<tool_call>\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "Weather in Oslo and the time?<|im_end|>\n"
    "<|im_start|>assistant\n"
    "Checking.\n"
    "<tool_call>\n"
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
    "</tool_call>\n"
    "<tool_call>\n"
    "{\"name\": \"now\", \"arguments\": {}}\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "-3C\n"
    "</tool_response>\n"
    "<tool_response>\n"
    "12:00\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n";

static const char want_q3[] =
    "<|im_start|>system\n"
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\n"
    "Weather in Oslo and the time?<|im_end|>\n"
    "<|im_start|>assistant\n"
    "Checking.\n"
    "<tool_call>\n"
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
    "</tool_call>\n"
    "<tool_call>\n"
    "{\"name\": \"now\", \"arguments\": {}}\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "-3C\n"
    "</tool_response>\n"
    "<tool_response>\n"
    "12:00\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n";

static const char want_l1[] =
    "<|start_header_id|>system<|end_header_id|>\n"
    "\n"
    "Environment: ipython\n"
    "Cutting Knowledge Date: December 2023\n"
    "Today Date: 26 Jul 2024\n"
    "\n"
    "You are a weather bot.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
    "\n"
    "Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n"
    "\n"
    "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use variables.\n"
    "\n"
    "{\n"
    "    \"type\": \"function\",\n"
    "    \"function\": {\n"
    "        \"name\": \"get_weather\",\n"
    "        \"description\": \"Get the current weather\",\n"
    "        \"parameters\": {\n"
    "            \"type\": \"object\",\n"
    "            \"properties\": {\n"
    "                \"city\": {\n"
    "                    \"type\": \"string\",\n"
    "                    \"description\": \"City name, e.g. Z\xc3\xbc""rich\"\n"
    "                }\n"
    "            },\n"
    "            \"required\": [\n"
    "                \"city\"\n"
    "            ]\n"
    "        }\n"
    "    }\n"
    "}\n"
    "\n"
    "{\n"
    "    \"type\": \"function\",\n"
    "    \"function\": {\n"
    "        \"name\": \"now\",\n"
    "        \"description\": \"Current time\",\n"
    "        \"parameters\": {\n"
    "            \"type\": \"object\",\n"
    "            \"properties\": {}\n"
    "        }\n"
    "    }\n"
    "}\n"
    "\n"
    "What's the weather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
    "\n"
    "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n"
    "\n"
    "\"{\\\"temp\\\": 24}\"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
    "\n"
    "It is 24 degrees in Paris.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
    "\n"
    "Thanks!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
    "\n";

static const char want_l2[] =
    "<|start_header_id|>system<|end_header_id|>\n"
    "\n"
    "Cutting Knowledge Date: December 2023\n"
    "Today Date: 26 Jul 2024\n"
    "\n"
    "<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
    "\n"
    "What's the weather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
    "\n"
    "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n"
    "\n"
    "\"{\\\"temp\\\": 24}\"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
    "\n";

static void test_qwen(void)
{
    /* Qwen2.5-7B-Instruct, one call (its usual output: nothing else). */
    srv_tool_msg m = parse(SRV_TOOL_QWEN,
        "<tool_call>\n{\"name\": \"get_current_weather\", \"arguments\": {\"location\": \"San Francisco, CA\", "
        "\"unit\": \"fahrenheit\"}}\n</tool_call>");
    CHECK_EQ_INT(m.n_calls, 1);
    check_call(&m, 0, "get_current_weather", "{\"location\":\"San Francisco, CA\",\"unit\":\"fahrenheit\"}");
    CHECK_STR(m.content, "");
    srv_tool_msg_free(&m);

    /* Parallel calls, as in Qwen's function-calling guide. */
    m = parse(SRV_TOOL_QWEN,
        "<tool_call>\n{\"name\": \"get_current_temperature\", \"arguments\": {\"location\": \"San Francisco, CA, USA\"}}\n"
        "</tool_call>\n<tool_call>\n{\"name\": \"get_temperature_date\", \"arguments\": {\"location\": "
        "\"San Francisco, CA, USA\", \"date\": \"2024-10-01\"}}\n</tool_call>");
    CHECK_EQ_INT(m.n_calls, 2);
    check_call(&m, 0, "get_current_temperature", "{\"location\":\"San Francisco, CA, USA\"}");
    check_call(&m, 1, "get_temperature_date", "{\"location\":\"San Francisco, CA, USA\",\"date\":\"2024-10-01\"}");
    CHECK_STR(m.content, "");
    srv_tool_msg_free(&m);

    /* Content before the call; nested arguments keep their order. */
    m = parse(SRV_TOOL_QWEN,
        "I'll look up the forecast for you.\n\n<tool_call>\n{\"name\": \"forecast\", \"arguments\": "
        "{\"city\": \"Paris\", \"days\": 3, \"opts\": {\"metric\": true, \"fields\": [\"rain\", \"wind\"]}}}\n</tool_call>");
    CHECK_EQ_INT(m.n_calls, 1);
    check_call(&m, 0, "forecast", "{\"city\":\"Paris\",\"days\":3,\"opts\":{\"metric\":true,\"fields\":[\"rain\",\"wind\"]}}");
    CHECK_STR(m.content, "I'll look up the forecast for you.");
    srv_tool_msg_free(&m);

    /* No call: the text unchanged, trailing new line included. */
    m = parse(SRV_TOOL_QWEN, "The weather in Paris is sunny, 24 degrees.\n");
    CHECK_EQ_INT(m.n_calls, 0);
    CHECK_STR(m.content, "The weather in Paris is sunny, 24 degrees.\n");
    srv_tool_msg_free(&m);

    /* Malformed JSON inside the tags stays content, byte for byte. */
    const char *bad = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>";
    m = parse(SRV_TOOL_QWEN, bad);
    CHECK_EQ_INT(m.n_calls, 0);
    CHECK_STR(m.content, bad);
    srv_tool_msg_free(&m);

    /* Cut off by max_tokens after the object: still a call. */
    m = parse(SRV_TOOL_QWEN, "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"llama\"}}\n");
    CHECK_EQ_INT(m.n_calls, 1);
    check_call(&m, 0, "search", "{\"q\":\"llama\"}");
    srv_tool_msg_free(&m);

    /* Cut off inside the object: content. */
    m = parse(SRV_TOOL_QWEN, "<tool_call>\n{\"name\": \"search\", \"argu");
    CHECK_EQ_INT(m.n_calls, 0);
    CHECK_STR(m.content, "<tool_call>\n{\"name\": \"search\", \"argu");
    srv_tool_msg_free(&m);

    /* Arguments given as a JSON string, and a call without arguments. */
    m = parse(SRV_TOOL_QWEN,
        "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"now\"}\n</tool_call>");
    CHECK_EQ_INT(m.n_calls, 2);
    check_call(&m, 0, "f", "{\"a\":1}");
    check_call(&m, 1, "now", "{}");
    srv_tool_msg_free(&m);

    /* Unicode in arguments passes through as UTF-8. */
    m = parse(SRV_TOOL_QWEN, "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"city\": \"Z\xc3\xbcrich\"}}\n</tool_call>");
    check_call(&m, 0, "w", "{\"city\":\"Z\xc3\xbcrich\"}");
    srv_tool_msg_free(&m);
}

static void test_llama3(void)
{
    /* Llama 3.1 8B Instruct, the format of Meta's prompt-format guide. */
    srv_tool_msg m = parse(SRV_TOOL_LLAMA3,
        "{\"name\": \"get_current_conditions\", \"parameters\": {\"location\": \"San Francisco, CA\", "
        "\"unit\": \"Fahrenheit\"}}");
    CHECK_EQ_INT(m.n_calls, 1);
    check_call(&m, 0, "get_current_conditions", "{\"location\":\"San Francisco, CA\",\"unit\":\"Fahrenheit\"}");
    CHECK_STR(m.content, "");
    srv_tool_msg_free(&m);

    /* With the python tag rendered. */
    m = parse(SRV_TOOL_LLAMA3, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Tokyo\"}}");
    CHECK_EQ_INT(m.n_calls, 1);
    check_call(&m, 0, "get_weather", "{\"city\":\"Tokyo\"}");
    CHECK_STR(m.content, "");
    srv_tool_msg_free(&m);

    /* Parallel calls separated by ';', and the "type" key some emit. */
    m = parse(SRV_TOOL_LLAMA3,
        "{\"type\": \"function\", \"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": 1}}");
    CHECK_EQ_INT(m.n_calls, 2);
    check_call(&m, 0, "a", "{}");
    check_call(&m, 1, "b", "{\"x\":1}");
    srv_tool_msg_free(&m);

    /* Content before the JSON. */
    m = parse(SRV_TOOL_LLAMA3,
        "Let me check the weather.\n\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}");
    CHECK_EQ_INT(m.n_calls, 1);
    CHECK_STR(m.content, "Let me check the weather.");
    srv_tool_msg_free(&m);

    /* Plain JSON answers and text are content. */
    m = parse(SRV_TOOL_LLAMA3, "{\"answer\": 42}");
    CHECK_EQ_INT(m.n_calls, 0);
    CHECK_STR(m.content, "{\"answer\": 42}");
    srv_tool_msg_free(&m);
    m = parse(SRV_TOOL_LLAMA3, "{\"name\": \"Alice\", \"age\": 30}");
    CHECK_EQ_INT(m.n_calls, 0);
    srv_tool_msg_free(&m);
    m = parse(SRV_TOOL_LLAMA3, "I'm sorry, I can't help with that.");
    CHECK_EQ_INT(m.n_calls, 0);
    CHECK_STR(m.content, "I'm sorry, I can't help with that.");
    srv_tool_msg_free(&m);

    /* A built-in tool call (code, not JSON) is not a function call. */
    m = parse(SRV_TOOL_LLAMA3, "<|python_tag|>brave_search.call(query=\"weather in Menlo Park\")");
    CHECK_EQ_INT(m.n_calls, 0);
    CHECK_STR(m.content, "<|python_tag|>brave_search.call(query=\"weather in Menlo Park\")");
    srv_tool_msg_free(&m);

    /* Parameters as a JSON string (seen from 8B at high temperature). */
    m = parse(SRV_TOOL_LLAMA3, "{\"name\": \"f\", \"parameters\": \"{\\\"k\\\": \\\"v\\\"}\"}");
    CHECK_EQ_INT(m.n_calls, 1);
    check_call(&m, 0, "f", "{\"k\":\"v\"}");
    srv_tool_msg_free(&m);
}

static size_t prefix(srv_tool_fmt f, const char *s) { return srv_tools_content_prefix(f, s, strlen(s)); }

static void test_prefix(void)
{
    CHECK_EQ_INT(prefix(SRV_TOOL_NONE, "abc <tool"), 9);
    CHECK_EQ_INT(prefix(SRV_TOOL_QWEN, "Hello"), 5);
    CHECK_EQ_INT(prefix(SRV_TOOL_QWEN, "Hello "), 5);
    CHECK_EQ_INT(prefix(SRV_TOOL_QWEN, "Hello <tool_"), 5);
    CHECK_EQ_INT(prefix(SRV_TOOL_QWEN, "Hello <b>"), 9);
    CHECK_EQ_INT(prefix(SRV_TOOL_QWEN, "Hi\n<tool_call>\n{\"name\""), 2);
    CHECK_EQ_INT(prefix(SRV_TOOL_QWEN, "<"), 0);
    CHECK_EQ_INT(prefix(SRV_TOOL_LLAMA3, "Sure: {\"a\""), 5);
    CHECK_EQ_INT(prefix(SRV_TOOL_LLAMA3, "<|python"), 0);
    CHECK_EQ_INT(prefix(SRV_TOOL_LLAMA3, "plain text"), 10);

    /* What was streamed is always a prefix of the final content. */
    const char *text = "Checking now.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
    size_t sent = 0;
    for (size_t n = 0; n <= strlen(text); n++) {
        size_t k = srv_tools_content_prefix(SRV_TOOL_QWEN, text, n);
        if (k > sent) sent = k;
    }
    srv_tool_msg m = parse(SRV_TOOL_QWEN, text);
    CHECK(sent <= m.content_len && !memcmp(m.content, text, sent));
    srv_tool_msg_free(&m);
}

/* The conversations, as an OpenAI client sends them (arguments as strings). */
static const char TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the current weather\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", "
    "\"description\": \"City name, e.g. Z\xc3\xbcrich\"}}, \"required\": [\"city\"]}}}, "
    "{\"type\": \"function\", \"function\": {\"name\": \"now\", \"description\": \"Current time\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {}}}}]";
static const char CONV1[] =
    "[{\"role\": \"system\", \"content\": \"You are a weather bot.\"},"
    " {\"role\": \"user\", \"content\": \"What's the weather in Paris?\"},"
    " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\","
    "   \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \"{\\\"temp\\\": 24}\"},"
    " {\"role\": \"assistant\", \"content\": \"It is 24 degrees in Paris.\"},"
    " {\"role\": \"user\", \"content\": \"Thanks!\"}]";
static const char CONV2[] =
    "[{\"role\": \"user\", \"content\": \"Weather in Oslo and the time?\"},"
    " {\"role\": \"assistant\", \"content\": \"Checking.\", \"tool_calls\": ["
    "   {\"id\": \"a\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}},"
    "   {\"id\": \"b\", \"type\": \"function\", \"function\": {\"name\": \"now\", \"arguments\": \"{}\"}}]},"
    " {\"role\": \"tool\", \"content\": \"-3C\"}, {\"role\": \"tool\", \"content\": \"12:00\"}]";

static void check_render(tmpl_kind k, json_t *msgs, json_t *tools, const char *want)
{
    char *out = NULL, err[160] = "";
    size_t n = 0;
    pk_status st = tmpl_tools_render(k, msgs, tools, true, &out, &n, err, sizeof err);
    CHECK_EQ_INT(st, PK_OK);
    if (st != PK_OK) fprintf(stderr, "render: %s\n", err);
    CHECK_STR(out, want);
    CHECK_EQ_INT(n, strlen(want));
    free(out);
}

static void test_render(void)
{
    json_t *tools = json_loads(TOOLS, 0, NULL), *c1 = json_loads(CONV1, 0, NULL), *c2 = json_loads(CONV2, 0, NULL);
    ASSERT(tools && c1 && c2);
    check_render(TMPL_CHATML, c1, tools, want_q1);
    check_render(TMPL_CHATML, c2, tools, want_q2);
    check_render(TMPL_CHATML, c2, NULL, want_q3);
    check_render(TMPL_LLAMA3, c1, tools, want_l1);
    json_t *c1_mid = json_array();
    for (size_t i = 1; i < 4; i++) json_array_append(c1_mid, json_array_get(c1, i));
    check_render(TMPL_LLAMA3, c1_mid, NULL, want_l2);

    /* What the templates refuse. */
    char *out = NULL, err[160] = "";
    size_t n = 0;
    CHECK_EQ_INT(tmpl_tools_render(TMPL_LLAMA3, c2, tools, true, &out, &n, err, sizeof err), PK_EINVAL);
    CHECK(strstr(err, "one tool call") != NULL);
    CHECK(out == NULL);
    CHECK_EQ_INT(tmpl_tools_render(TMPL_LLAMA2, c1, tools, true, &out, &n, err, sizeof err), PK_EUNSUPPORTED);
    json_t *bad = json_loads("[{\"role\": \"wizard\", \"content\": \"x\"}]", 0, NULL);
    CHECK_EQ_INT(tmpl_tools_render(TMPL_CHATML, bad, tools, true, &out, &n, err, sizeof err), PK_EINVAL);
    CHECK(strstr(err, "role") != NULL);
    json_decref(bad);
    bad = json_loads("[{\"role\": \"user\", \"content\": 5}]", 0, NULL);
    CHECK_EQ_INT(tmpl_tools_render(TMPL_CHATML, bad, tools, true, &out, &n, err, sizeof err), PK_EINVAL);
    CHECK(strstr(err, "content") != NULL);
    json_decref(bad);
    json_t *sys_only = json_loads("[{\"role\": \"system\", \"content\": \"s\"}]", 0, NULL);
    CHECK_EQ_INT(tmpl_tools_render(TMPL_LLAMA3, sys_only, tools, true, &out, &n, err, sizeof err), PK_EINVAL);
    json_decref(sys_only);
    json_decref(c1_mid);
    json_decref(tools);
    json_decref(c1);
    json_decref(c2);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    TEST_RUN(test_render);
    TEST_RUN(test_qwen);
    TEST_RUN(test_llama3);
    TEST_RUN(test_prefix);
    return test_finish();
}
