/*
 * test_srv_anthropic.c - Anthropic's Messages API without a model: the
 * request's conversion into the OpenAI chat request (every block kind, the
 * order of tool results, tools, tool_choice, stop_sequences, thinking, and
 * each refusal with its status and field), errors in Anthropic's shape, and
 * the answer (Qwen's and Gemma 4's layouts): whole, and streamed with the
 * text cut at every byte, where the blocks must come numbered 0, 1, 2 in
 * order, each closed before the next starts, and add up to the whole
 * answer.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "sse_gen.h"

/* The chat request of an Anthropic body given as JSON text (NULL: refused,
 * with *e). */
static json_t *convert(const char *text, srv_err *e)
{
    json_t *body = json_loads(text, 0, NULL), *out = NULL;
    ASSERT(body);
    memset(e, 0, sizeof *e);
    if (!srv_anth_to_chat(body, &out, e)) out = NULL;
    json_decref(body);
    return out;
}

/* Whether JSON value got equals the one in text. */
static bool same(const json_t *got, const char *text)
{
    json_t *want = json_loads(text, JSON_DECODE_ANY, NULL);
    ASSERT(want);
    bool eq = json_equal(got, want);
    if (!eq) {
        char *g = json_dumps(got, JSON_COMPACT | JSON_ENCODE_ANY);
        fprintf(stderr, "  got  %s\n  want %s\n", g ? g : "(null)", text);
        free(g);
    }
    json_decref(want);
    return eq;
}

static void test_messages(void)
{
    srv_err e;
    json_t *c = convert("{\"model\": \"claude\", \"max_tokens\": 9, \"temperature\": 0.5, \"metadata\": {\"user_id\": \"u\"},"
                        " \"system\": [{\"type\": \"text\", \"text\": \"Be brief.\"}, {\"type\": \"text\", \"text\": \"Be kind.\"}],"
                        " \"unknown_field\": 1, \"session_id\": \"agent-1\","
                        " \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"What is\"},"
                        "                                                {\"type\": \"text\", \"text\": \"the answer?\"}]},"
                        "   {\"role\": \"assistant\", \"content\": \"42\"}]}", &e);
    CHECK(c != NULL);
    CHECK(same(c, "{\"model\": \"claude\", \"max_tokens\": 9, \"temperature\": 0.5, \"session_id\": \"agent-1\","
                  " \"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\\nBe kind.\"},"
                  "  {\"role\": \"user\", \"content\": \"What is\\nthe answer?\"},"
                  "  {\"role\": \"assistant\", \"content\": \"42\"}]}"));
    json_decref(c);

    /* Tool turns: the results answer the assistant's calls, so they come
     * before the user's own text; thinking goes to reasoning_content. */
    c = convert("{\"messages\": [{\"role\": \"user\", \"content\": \"Weather?\"},"
                " {\"role\": \"assistant\", \"content\": [{\"type\": \"thinking\", \"thinking\": \"Ask the tool.\", \"signature\": \"\"},"
                "    {\"type\": \"redacted_thinking\", \"data\": \"xx\"}, {\"type\": \"text\", \"text\": \"Checking.\"},"
                "    {\"type\": \"tool_use\", \"id\": \"t1\", \"name\": \"get_weather\", \"input\": {\"city\": \"Paris\"}},"
                "    {\"type\": \"tool_use\", \"id\": \"t2\", \"name\": \"now\"}]},"
                " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Here:\"},"
                "    {\"type\": \"tool_result\", \"tool_use_id\": \"t1\", \"content\": \"Sunny\"},"
                "    {\"type\": \"tool_result\", \"tool_use_id\": \"t2\", \"is_error\": true,"
                "     \"content\": [{\"type\": \"text\", \"text\": \"no\"}, {\"type\": \"text\", \"text\": \"clock\"}]}]},"
                " {\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", \"tool_use_id\": \"t3\"}]}]}", &e);
    CHECK(c != NULL);
    CHECK(same(json_object_get(c, "messages"),
               "[{\"role\": \"user\", \"content\": \"Weather?\"},"
               " {\"role\": \"assistant\", \"content\": \"Checking.\", \"reasoning_content\": \"Ask the tool.\","
               "  \"tool_calls\": [{\"id\": \"t1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\","
               "                    \"arguments\": \"{\\\"city\\\":\\\"Paris\\\"}\"}},"
               "                  {\"id\": \"t2\", \"type\": \"function\", \"function\": {\"name\": \"now\", \"arguments\": \"{}\"}}]},"
               " {\"role\": \"tool\", \"tool_call_id\": \"t1\", \"content\": \"Sunny\"},"
               " {\"role\": \"tool\", \"tool_call_id\": \"t2\", \"content\": \"no\\nclock\"},"
               " {\"role\": \"user\", \"content\": \"Here:\"},"
               " {\"role\": \"tool\", \"tool_call_id\": \"t3\", \"content\": \"\"}]"));
    json_decref(c);

    /* Claude Code's billing header (a hash new each request) leaves the
     * system prompt, alone in its block or before the text. */
    static const struct { const char *system, *want; } billing[] = {
        { "[{\"type\": \"text\", \"text\": \"x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; "
          "cch=a5145;\"}, {\"type\": \"text\", \"text\": \"You are Claude Code.\"}]", "You are Claude Code." },
        { "\"x-anthropic-billing-header: cc_version=2.1; cch=77e1f;You are X; a=b;\"", "You are X; a=b;" },
        { "\"x-anthropic-billing-header: cc_version=2.1;\\nRules\"", "Rules" },
        { "\"Say x-anthropic-billing-header: cch=1;\"", "Say x-anthropic-billing-header: cch=1;" },
        { "\"x-anthropic-billing-header: cch=1\\nhi\"", "x-anthropic-billing-header: cch=1\nhi" },
    };
    for (size_t i = 0; i < ARRAY_LEN(billing); i++) {
        char body[512];
        snprintf(body, sizeof body, "{\"system\": %s, \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}",
                 billing[i].system);
        c = convert(body, &e);
        CHECK(c != NULL);
        CHECK_STR(json_string_value(json_object_get(json_array_get(json_object_get(c, "messages"), 0), "content")),
                  billing[i].want);
        json_decref(c);
    }
    c = convert("{\"system\": \"x-anthropic-billing-header: cch=00000;\", \"messages\": []}", &e);
    CHECK(same(json_object_get(c, "messages"), "[{\"role\": \"user\", \"content\": \"\"}]"));
    json_decref(c);

    /* No conversation (or only a system prompt): one empty user turn. */
    c = convert("{\"messages\": []}", &e);
    CHECK(same(json_object_get(c, "messages"), "[{\"role\": \"user\", \"content\": \"\"}]"));
    json_decref(c);
    c = convert("{\"system\": \"S\", \"messages\": []}", &e);
    CHECK(same(json_object_get(c, "messages"), "[{\"role\": \"system\", \"content\": \"S\"},"
                                               " {\"role\": \"user\", \"content\": \"\"}]"));
    json_decref(c);
}

static void test_options(void)
{
    srv_err e;
    json_t *c = convert("{\"messages\": [], \"stop_sequences\": [\"\\n\", \"END\"], \"top_k\": 5,"
                        " \"tools\": [{\"name\": \"f\", \"description\": \"d\", \"input_schema\": {\"type\": \"object\"}},"
                        "             {\"name\": \"g\", \"type\": \"custom\"}],"
                        " \"tool_choice\": {\"type\": \"tool\", \"name\": \"g\"}, \"thinking\": {\"type\": \"disabled\"}}", &e);
    CHECK(c != NULL);
    CHECK(same(json_object_get(c, "tools"),
               "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\", \"parameters\": {\"type\": \"object\"}}},"
               " {\"type\": \"function\", \"function\": {\"name\": \"g\", \"parameters\": {\"type\": \"object\"}}}]"));
    CHECK(same(json_object_get(c, "tool_choice"), "{\"type\": \"function\", \"function\": {\"name\": \"g\"}}"));
    CHECK(same(json_object_get(c, "stop"), "[\"\\n\", \"END\"]"));
    CHECK(same(json_object_get(c, "chat_template_kwargs"), "{\"enable_thinking\": false}"));
    CHECK(same(json_object_get(c, "top_k"), "5"));
    json_decref(c);
    static const struct { const char *anth, *oai; } choices[] = {
        { "{\"type\": \"auto\"}", "\"auto\"" }, { "{\"type\": \"any\"}", "\"required\"" },
        { "{\"type\": \"none\"}", "\"none\"" },
    };
    for (size_t i = 0; i < ARRAY_LEN(choices); i++) {
        char body[128];
        snprintf(body, sizeof body, "{\"messages\": [], \"tool_choice\": %s}", choices[i].anth);
        c = convert(body, &e);
        CHECK(same(json_object_get(c, "tool_choice"), choices[i].oai));
        json_decref(c);
    }
    /* Enabled thinking is the template's default; the request's own
     * enable_thinking wins over disabled. */
    c = convert("{\"messages\": [], \"thinking\": {\"type\": \"enabled\", \"budget_tokens\": 2048}}", &e);
    CHECK(c && !json_object_get(c, "chat_template_kwargs"));
    json_decref(c);
    c = convert("{\"messages\": [], \"thinking\": {\"type\": \"disabled\"},"
                " \"chat_template_kwargs\": {\"enable_thinking\": true, \"x\": 1}}", &e);
    CHECK(same(json_object_get(c, "chat_template_kwargs"), "{\"enable_thinking\": true, \"x\": 1}"));
    json_decref(c);
}

static void test_refusals(void)
{
    static const struct { const char *body; unsigned status; const char *param, *msg; } bad[] = {
        { "{\"max_tokens\": 5}", 400, "messages", "'messages' is required" },
        { "{\"messages\": {}}", 400, "messages", "'messages' must be an array" },
        { "{\"messages\": [{\"role\": \"system\", \"content\": \"x\"}]}", 400, "messages",
          "messages[0].role must be \"user\" or \"assistant\"" },
        { "{\"messages\": [{\"role\": \"user\"}]}", 400, "messages",
          "messages[0].content must be a string or an array of blocks" },
        { "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"tool_use\", \"id\": \"a\", \"name\": \"f\"}]}]}",
          400, "messages", "messages[0].content[0]: a user message cannot hold a 'tool_use' block" },
        { "{\"messages\": [{\"role\": \"assistant\", \"content\": [{\"type\": \"tool_result\", \"tool_use_id\": \"a\"}]}]}",
          400, "messages", "messages[0].content[0]: an assistant message cannot hold a 'tool_result' block" },
        { "{\"messages\": [{\"role\": \"assistant\", \"content\": [{\"type\": \"tool_use\", \"id\": \"a\", \"name\": \"f\","
          " \"input\": [1]}]}]}", 400, "messages",
          "messages[0].content[0]: a tool_use needs a string 'id' and 'name' and an object 'input'" },
        { "{\"messages\": [{\"role\": \"user\", \"content\": [{\"text\": \"x\"}]}]}", 400, "messages",
          "messages[0].content[0] must be an object with a string 'type'" },
        { "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", \"tool_use_id\": \"a\","
          " \"is_error\": \"yes\"}]}]}", 400, "is_error", "'is_error' must be a boolean" },
        { "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"x\"},"
          " {\"type\": \"image\", \"source\": {\"type\": \"base64\", \"data\": \"AA==\"}}]}]}", 500, "messages",
          "image input is not supported: polykv serves text-only models (messages[0].content[1] holds an image)" },
        { "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", \"tool_use_id\": \"a\","
          " \"content\": [{\"type\": \"image\"}]}]}]}", 500, "messages",
          "image input is not supported: polykv serves text-only models (messages[0].content[0].content[0] holds an "
          "image)" },
        { "{\"messages\": [], \"system\": [{\"type\": \"image\"}]}", 400, "system",
          "system[0] must be {\"type\": \"text\", \"text\": string}" },
        { "{\"messages\": [], \"system\": 1}", 400, "system", "'system' must be a string or an array of text blocks" },
        { "{\"messages\": [], \"tools\": [{\"type\": \"web_search_20250305\", \"name\": \"web_search\"}]}", 400, "tools",
          "tools[0]: 'web_search_20250305' is one of Anthropic's server tools, which polykv does not run; give "
          "{name, description, input_schema}" },
        { "{\"messages\": [], \"tools\": [{\"name\": \"f\", \"input_schema\": \"x\"}]}", 400, "tools",
          "tools[0] must be {\"name\": string, \"description\": string, \"input_schema\": object}" },
        { "{\"messages\": [], \"tool_choice\": \"auto\"}", 400, "tool_choice",
          "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", \"name\": string}" },
        { "{\"messages\": [], \"tool_choice\": {\"type\": \"tool\"}}", 400, "tool_choice",
          "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", \"name\": string}" },
        { "{\"messages\": [], \"stop_sequences\": [\"a\", 1]}", 400, "stop_sequences", "stop_sequences[1] must be a string" },
        { "{\"messages\": [], \"stop_sequences\": [\"1\", \"2\", \"3\", \"4\", \"5\", \"6\", \"7\", \"8\"]}", 400,
          "stop_sequences", "'stop_sequences' must be an array of at most 7 strings" },
        { "{\"messages\": [], \"thinking\": {\"type\": \"on\"}}", 400, "thinking",
          "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": n} or {\"type\": \"disabled\"}" },
        { "{\"messages\": [], \"thinking\": {\"type\": \"enabled\", \"budget_tokens\": -1}}", 400, "thinking",
          "thinking.budget_tokens must be a non-negative integer" },
        { "{\"messages\": [], \"metadata\": \"m\"}", 400, "metadata", "'metadata' must be an object" },
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        srv_err e;
        json_t *c = convert(bad[i].body, &e);
        CHECK(c == NULL);
        json_decref(c);
        CHECK_EQ_INT(e.status, bad[i].status);
        CHECK_STR(e.param, bad[i].param);
        CHECK_STR(e.msg, bad[i].msg);
    }
}

static void test_error_shape(void)
{
    static const struct { unsigned status; const char *type; } types[] = {
        { 400, "invalid_request_error" }, { 401, "authentication_error" }, { 404, "not_found_error" },
        { 413, "request_too_large" }, { 429, "rate_limit_error" }, { 500, "api_error" }, { 503, "overloaded_error" },
    };
    for (size_t i = 0; i < ARRAY_LEN(types); i++) {
        srv_err e;
        srv_fail(&e, types[i].status, "x", "bad %d", 1);
        json_t *j = srv_anth_error_json(&e);
        char want[160];
        snprintf(want, sizeof want, "{\"type\": \"error\", \"error\": {\"type\": \"%s\", \"message\": \"bad 1\"}}",
                 types[i].type);
        CHECK(same(j, want));
        json_decref(j);
    }
}

/* ---- answers ---- */

/* A generation fed text[0..n) as if it were one token event. */
static void feed(srv_gen *g, const char *text, size_t n) { sse_feed(g, srv_anth_stream_token, text, n); }

static json_t *events(const srv_gen *g) { return sse_events(g); }

/* Plays a stream's events back into content blocks (the grammar of the
 * stream checked on the way: one block open at a time, indices in order,
 * a thinking block signed before its stop) and the message_delta. */
static json_t *replay(const json_t *ev, json_t **delta)
{
    json_t *blocks = json_array();
    bool open = false, signed_ = false;
    size_t n = json_array_size(ev);
    CHECK_STR(json_string_value(json_object_get(json_array_get(ev, 0), "event")), "message_start");
    CHECK_STR(json_string_value(json_object_get(json_array_get(ev, n - 1), "event")), "message_stop");
    CHECK_STR(json_string_value(json_object_get(json_array_get(ev, n - 2), "event")), "message_delta");
    *delta = json_object_get(json_array_get(ev, n - 2), "data");
    for (size_t i = 1; i + 2 < n; i++) {
        const char *name = json_string_value(json_object_get(json_array_get(ev, i), "event"));
        const json_t *d = json_object_get(json_array_get(ev, i), "data");
        CHECK_STR(json_string_value(json_object_get(d, "type")), name);
        CHECK_EQ_INT(json_integer_value(json_object_get(d, "index")),
                     (long long)json_array_size(blocks) - (strcmp(name, "content_block_start") ? 1 : 0));
        json_t *cur = json_array_get(blocks, json_array_size(blocks) - 1);
        if (!strcmp(name, "content_block_start")) {
            CHECK(!open);
            open = true;
            signed_ = false;
            json_array_append_new(blocks, json_deep_copy(json_object_get(d, "content_block")));
        } else if (!strcmp(name, "content_block_stop")) {
            CHECK(open);
            CHECK(signed_ || strcmp(json_string_value(json_object_get(cur, "type")), "thinking"));
            open = false;
        } else {
            CHECK_STR(name, "content_block_delta");
            const json_t *dl = json_object_get(d, "delta");
            const char *t = json_string_value(json_object_get(dl, "type"));
            const char *key = !strcmp(t, "text_delta") ? "text" : !strcmp(t, "thinking_delta") ? "thinking"
                            : !strcmp(t, "input_json_delta") ? "partial_json" : NULL;
            if (!strcmp(t, "signature_delta")) {
                signed_ = true;
                json_object_set(cur, "signature", json_object_get(dl, "signature"));
                continue;
            }
            CHECK(key != NULL);
            if (!key) continue;
            const char *have = json_string_value(json_object_get(cur, key));
            char *both = NULL;
            CHECK(asprintf(&both, "%s%s", have ? have : "", json_string_value(json_object_get(dl, key))) > 0);
            json_object_set_new(cur, key, json_string(both));
            free(both);
        }
    }
    CHECK(!open);
    /* A tool_use's input arrives as its JSON text. */
    for (size_t i = 0; i < json_array_size(blocks); i++) {
        json_t *b = json_array_get(blocks, i), *pj = json_object_get(b, "partial_json");
        if (!pj) continue;
        json_object_set_new(b, "input", json_loads(json_string_value(pj), 0, NULL));
        json_object_del(b, "partial_json");
    }
    return blocks;
}

/* The message with tool_use ids made "id", which the stream and the whole
 * answer draw separately. */
static void drop_ids(json_t *blocks)
{
    for (size_t i = 0; i < json_array_size(blocks); i++) {
        json_t *b = json_array_get(blocks, i);
        const char *id = json_string_value(json_object_get(b, "id"));
        if (id) {
            CHECK(!strncmp(id, "toolu_", 6));
            json_object_set_new(b, "id", json_string("id"));
        }
    }
}

static const char THINK_TEXT_CALL[] = "<think>\nCheck the weather.\n</think>\n\nLet me check.\n<tool_call>\n"
                                      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

/* Gemma 4's layout of the same answer: its thought channel, its call. */
static const char G4_THINK_TEXT_CALL[] = "<|channel>thought\nCheck the weather.\n<channel|>Let me check.\n"
                                         "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>";

/* gpt-oss's: the analysis channel, a commentary preamble, its call. */
static const char HARMONY_THINK_TEXT_CALL[] = "<|channel|>analysis<|message|>Check the weather.<|end|><|start|>assistant"
                                              "<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant "
                                              "to=functions.get_weather<|channel|>commentary json<|message|>"
                                              "{\"city\": \"Paris\"}";

/* An answer in a family's format streamed in Messages events, cut in two
 * at every byte, and answered whole: the content blocks want. */
static void check_answer(const char *text, srv_tool_fmt tools, srv_think_tags think, const char *want)
{
    srv s = {0};
    size_t n = strlen(text);
    /* The text cut in two at every byte (0: one byte at a time). */
    for (size_t cut = 0; cut < n; cut++) {
        srv_gen g = { .s = &s, .o = { .api = SRV_API_ANTHROPIC, .stream = true, .tools = tools, .think = think,
                                      .model = "claude" }, .n_prompt = 30, .n_cached = 4 };
        snprintf(g.id, sizeof g.id, "msg_x");
        if (cut == 0)
            for (size_t i = 0; i < n; i++) feed(&g, text + i, 1);
        else {
            feed(&g, text, cut);
            feed(&g, text + cut, n - cut);
        }
        g.done = (eng_event){ .kind = ENG_EV_DONE, .stop = ENG_STOP_EOS, .n_prompt = 30, .n_gen = 20, .n_cached = 4 };
        g.have_done = true;
        srv_anth_stream_end(&g);
        json_t *ev = events(&g), *delta = NULL, *blocks = replay(ev, &delta);
        drop_ids(blocks);
        bool ok = same(blocks, want);
        CHECK(ok);
        if (!ok) fprintf(stderr, "  (cut at %zu)\n", cut);
        CHECK(same(delta, "{\"type\": \"message_delta\", \"delta\": {\"stop_reason\": \"tool_use\", \"stop_sequence\": null},"
                          " \"usage\": {\"input_tokens\": 26, \"cache_creation_input_tokens\": 0,"
                          "            \"cache_read_input_tokens\": 4, \"output_tokens\": 20}}"));
        const json_t *start = json_object_get(json_object_get(json_array_get(ev, 0), "data"), "message");
        CHECK(same(start, "{\"id\": \"msg_x\", \"type\": \"message\", \"role\": \"assistant\", \"model\": \"claude\","
                          " \"content\": [], \"stop_reason\": null, \"stop_sequence\": null,"
                          " \"usage\": {\"input_tokens\": 26, \"cache_creation_input_tokens\": 0,"
                          "            \"cache_read_input_tokens\": 4, \"output_tokens\": 0}}"));
        if (cut == n / 2) {
            /* The same generation answered whole. */
            json_t *r = srv_anth_response(&g);
            drop_ids(json_object_get(r, "content"));
            CHECK(same(json_object_get(r, "content"), want));
            CHECK_STR(json_string_value(json_object_get(r, "stop_reason")), "tool_use");
            CHECK_STR(json_string_value(json_object_get(r, "id")), "msg_x");
            CHECK(json_object_get(r, "timings") == NULL);
            json_decref(r);
        }
        json_decref(blocks);
        json_decref(ev);
        free(g.text);
        free(g.out);
        pk_buf_free(&g.h_content);
        pk_buf_free(&g.h_reason);
    }
}

static void test_answers(void)
{
    check_answer(THINK_TEXT_CALL, SRV_TOOL_QWEN, SRV_THINK_TAGS,
                 "[{\"type\": \"thinking\", \"thinking\": \"\\nCheck the weather.\\n\", \"signature\": \"\"},"
                 " {\"type\": \"text\", \"text\": \"Let me check.\"},"
                 " {\"type\": \"tool_use\", \"id\": \"id\", \"name\": \"get_weather\", \"input\": {\"city\": \"Paris\"}}]");
    check_answer(G4_THINK_TEXT_CALL, SRV_TOOL_GEMMA4, SRV_THINK_CHANNEL,
                 "[{\"type\": \"thinking\", \"thinking\": \"Check the weather.\", \"signature\": \"\"},"
                 " {\"type\": \"text\", \"text\": \"Let me check.\"},"
                 " {\"type\": \"tool_use\", \"id\": \"id\", \"name\": \"get_weather\", \"input\": {\"city\": \"Paris\"}}]");
    check_answer(HARMONY_THINK_TEXT_CALL, SRV_TOOL_HARMONY, SRV_THINK_TAGS,
                 "[{\"type\": \"thinking\", \"thinking\": \"Check the weather.\", \"signature\": \"\"},"
                 " {\"type\": \"text\", \"text\": \"Let me check.\"},"
                 " {\"type\": \"tool_use\", \"id\": \"id\", \"name\": \"get_weather\", \"input\": {\"city\": \"Paris\"}}]");
}

static void test_stops(void)
{
    srv s = {0};
    /* A stop string, and no text at all (one empty text block, both ways). */
    srv_gen g = { .s = &s, .o = { .api = SRV_API_ANTHROPIC, .stream = true, .model = "m" } };
    feed(&g, "Once upon", 9);
    g.done = (eng_event){ .kind = ENG_EV_DONE, .stop = ENG_STOP_WORD, .n_prompt = 3, .n_gen = 2 };
    snprintf(g.done.stop_word, sizeof g.done.stop_word, "END");
    json_t *r = srv_anth_response(&g);
    CHECK_STR(json_string_value(json_object_get(r, "stop_reason")), "stop_sequence");
    CHECK_STR(json_string_value(json_object_get(r, "stop_sequence")), "END");
    CHECK(same(json_object_get(r, "content"), "[{\"type\": \"text\", \"text\": \"Once upon\"}]"));
    json_decref(r);
    free(g.text);
    free(g.out);

    static const struct { eng_stop stop; const char *reason; } reasons[] = {
        { ENG_STOP_EOS, "end_turn" }, { ENG_STOP_LIMIT, "max_tokens" }, { ENG_STOP_CTX, "max_tokens" },
    };
    for (size_t i = 0; i < ARRAY_LEN(reasons); i++) {
        g = (srv_gen){ .s = &s, .o = { .api = SRV_API_ANTHROPIC, .stream = true, .model = "m" } };
        g.done = (eng_event){ .kind = ENG_EV_DONE, .stop = reasons[i].stop };
        srv_anth_stream_end(&g);
        json_t *ev = events(&g), *delta = NULL, *blocks = replay(ev, &delta);
        CHECK(same(blocks, "[{\"type\": \"text\", \"text\": \"\"}]"));
        CHECK_STR(json_string_value(json_object_get(json_object_get(delta, "delta"), "stop_reason")), reasons[i].reason);
        r = srv_anth_response(&g);
        CHECK(same(json_object_get(r, "content"), "[{\"type\": \"text\", \"text\": \"\"}]"));
        CHECK_STR(json_string_value(json_object_get(r, "stop_reason")), reasons[i].reason);
        CHECK(json_is_null(json_object_get(r, "stop_sequence")));
        json_decref(r);
        json_decref(blocks);
        json_decref(ev);
        free(g.out);
    }

    /* Cut off while thinking: one thinking block and nothing else. */
    g = (srv_gen){ .s = &s, .o = { .api = SRV_API_ANTHROPIC, .stream = true, .model = "m", .think_open = true } };
    feed(&g, "Hmm, let", 8);
    feed(&g, " me think", 9);
    g.done = (eng_event){ .kind = ENG_EV_DONE, .stop = ENG_STOP_LIMIT };
    srv_anth_stream_end(&g);
    json_t *ev = events(&g), *delta = NULL, *blocks = replay(ev, &delta);
    CHECK(same(blocks, "[{\"type\": \"thinking\", \"thinking\": \"Hmm, let me think\", \"signature\": \"\"}]"));
    r = srv_anth_response(&g);
    CHECK(same(json_object_get(r, "content"), "[{\"type\": \"thinking\", \"thinking\": \"Hmm, let me think\", "
                                              "\"signature\": \"\"}]"));
    json_decref(r);
    json_decref(blocks);
    json_decref(ev);
    free(g.text);
    free(g.out);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    TEST_RUN(test_messages);
    TEST_RUN(test_options);
    TEST_RUN(test_refusals);
    TEST_RUN(test_error_shape);
    TEST_RUN(test_answers);
    TEST_RUN(test_stops);
    return test_finish();
}
