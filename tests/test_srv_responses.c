/*
 * test_srv_responses.c - the Responses API's translation (srv_responses.c)
 * without a model:
 *   - requests: instructions and a string input, input items (text parts,
 *     an assistant turn made of a reasoning item, a message and two
 *     function calls, a function call output), function tools,
 *     tool_choice, text.format, max_output_tokens, and the refusals;
 *   - answers: the response object (reasoning, message, function_call
 *     items, usage), and the event stream of an answer that thinks, says
 *     something and calls a tool: event names, sequence numbers, item ids,
 *     deltas adding up to the done texts and to the completed response;
 *   - Vertex AI's @requestFormat aliases of route paths.
 */
#include "sse_gen.h"

static json_t *J(const char *text)
{
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    if (!j) fprintf(stderr, "bad test JSON: %s: %s\n", text, e.text);
    ASSERT(j);
    return j;
}

static const char *S(const json_t *o, const char *key) { return json_string_value(json_object_get(o, key)); }

static void test_request(void)
{
    srv_err e;
    json_t *b = J("{\"instructions\": \"Be brief\", \"input\": \"Hi\", \"max_output_tokens\": 7, \"temperature\": 0.5}");
    json_t *c = srv_resp_to_chat(b, &e);
    CHECK(c != NULL);
    const json_t *m = json_object_get(c, "messages");
    CHECK_EQ_INT(json_array_size(m), 2);
    CHECK_STR(S(json_array_get(m, 0), "role"), "system");
    CHECK_STR(S(json_array_get(m, 0), "content"), "Be brief");
    CHECK_STR(S(json_array_get(m, 1), "role"), "user");
    CHECK_STR(S(json_array_get(m, 1), "content"), "Hi");
    CHECK_EQ_INT(json_integer_value(json_object_get(c, "max_tokens")), 7);
    CHECK(json_real_value(json_object_get(c, "temperature")) == 0.5);
    CHECK(!json_object_get(c, "input") && !json_object_get(c, "instructions") && !json_object_get(c, "max_output_tokens"));
    json_decref(b);
    json_decref(c);

    b = J("{\"input\": ["
          "{\"role\": \"developer\", \"content\": [{\"type\": \"input_text\", \"text\": \"Rules\"}]},"
          "{\"type\": \"message\", \"role\": \"user\", \"content\": [{\"type\": \"input_text\", \"text\": \"a\"},"
          " {\"type\": \"input_text\", \"text\": \"b\"}]},"
          "{\"type\": \"reasoning\", \"summary\": [], \"content\": [{\"type\": \"reasoning_text\", \"text\": \"hm\"}]},"
          "{\"type\": \"message\", \"role\": \"assistant\", \"content\": [{\"type\": \"output_text\", \"text\": \"Let me see\"}]},"
          "{\"type\": \"function_call\", \"call_id\": \"c1\", \"name\": \"f\", \"arguments\": \"{}\"},"
          "{\"type\": \"function_call\", \"call_id\": \"c2\", \"name\": \"g\", \"arguments\": \"{\\\"x\\\":1}\"},"
          "{\"type\": \"function_call_output\", \"call_id\": \"c1\", \"output\": \"one\"},"
          "{\"type\": \"function_call_output\", \"call_id\": \"c2\", \"output\": [{\"type\": \"input_text\", \"text\": \"two\"}]}],"
          " \"tools\": [{\"type\": \"function\", \"name\": \"f\", \"parameters\": {\"type\": \"object\"}},"
          "             {\"type\": \"web_search\"}],"
          " \"tool_choice\": {\"type\": \"function\", \"name\": \"f\"},"
          " \"text\": {\"format\": {\"type\": \"json_schema\", \"name\": \"x\", \"schema\": {\"type\": \"object\"}}}}");
    c = srv_resp_to_chat(b, &e);
    CHECK(c != NULL);
    m = json_object_get(c, "messages");
    CHECK_EQ_INT(json_array_size(m), 5);
    CHECK_STR(S(json_array_get(m, 0), "role"), "system");
    CHECK_STR(S(json_array_get(m, 0), "content"), "Rules");
    CHECK_STR(S(json_array_get(m, 1), "content"), "a\n\nb");
    const json_t *a = json_array_get(m, 2);              /* one assistant turn */
    CHECK_STR(S(a, "role"), "assistant");
    CHECK_STR(S(a, "content"), "Let me see");
    CHECK_STR(S(a, "reasoning_content"), "hm");
    const json_t *calls = json_object_get(a, "tool_calls");
    CHECK_EQ_INT(json_array_size(calls), 2);
    CHECK_STR(S(json_array_get(calls, 0), "id"), "c1");
    CHECK_STR(S(json_object_get(json_array_get(calls, 1), "function"), "name"), "g");
    CHECK_STR(S(json_object_get(json_array_get(calls, 1), "function"), "arguments"), "{\"x\":1}");
    CHECK_STR(S(json_array_get(m, 3), "role"), "tool");
    CHECK_STR(S(json_array_get(m, 3), "tool_call_id"), "c1");
    CHECK_STR(S(json_array_get(m, 4), "content"), "two");
    const json_t *tools = json_object_get(c, "tools");
    CHECK_EQ_INT(json_array_size(tools), 1);                   /* web_search has no chat form */
    CHECK_STR(S(json_object_get(json_array_get(tools, 0), "function"), "name"), "f");
    CHECK(!json_object_get(json_object_get(json_array_get(tools, 0), "function"), "type"));
    CHECK_STR(S(json_object_get(json_object_get(c, "tool_choice"), "function"), "name"), "f");
    CHECK_STR(S(json_object_get(c, "response_format"), "type"), "json_schema");
    CHECK(json_object_get(json_object_get(json_object_get(c, "response_format"), "json_schema"), "schema") != NULL);
    CHECK(!json_object_get(c, "text"));
    json_decref(b);
    json_decref(c);

    static const char *const bad[][2] = {
        { "{}", "input" },
        { "{\"input\": 3}", "input" },
        { "{\"input\": []}", "input" },
        { "{\"input\": \"x\", \"instructions\": 1}", "instructions" },
        { "{\"input\": [{\"role\": \"user\", \"content\": [{\"type\": \"input_file\", \"file_id\": \"f\"}]}]}", "input" },
        { "{\"input\": [{\"role\": \"robot\", \"content\": \"x\"}]}", "input" },
        { "{\"input\": [{\"type\": \"function_call\", \"call_id\": \"c\", \"name\": \"f\"}]}", "input" },
        { "{\"input\": [{\"type\": \"function_call_output\", \"output\": \"x\"}]}", "input" },
        { "{\"input\": [7]}", "input" },
        { "{\"input\": \"x\", \"previous_response_id\": \"resp_1\"}", "previous_response_id" },
        { "{\"input\": \"x\", \"tools\": {}}", "tools" },
        { "{\"input\": \"x\", \"tools\": [{\"type\": \"function\"}]}", "tools" },
        { "{\"input\": \"x\", \"tool_choice\": {\"type\": \"mcp\"}}", "tool_choice" },
        { "{\"input\": \"x\", \"text\": {\"format\": {\"type\": \"xml\"}}}", "text" },
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        b = J(bad[i][0]);
        memset(&e, 0, sizeof e);
        c = srv_resp_to_chat(b, &e);
        CHECK(c == NULL);
        CHECK_EQ_INT(e.status, 400);
        CHECK_STR(e.param, bad[i][1]);
        json_decref(c);
        json_decref(b);
    }
}

static void feed(srv_gen *g, const char *text) { sse_feed(g, srv_resp_stream_token, text, strlen(text)); }

/* The stream's data objects; each "event:" line must name its data's type. */
static json_t *events(const srv_gen *g)
{
    json_t *named = sse_events(g), *a = json_array();
    for (size_t i = 0; i < json_array_size(named); i++) {
        const json_t *e = json_array_get(named, i), *d = json_object_get(e, "data");
        const char *type = S(d, "type");
        CHECK(type && !strcmp(type, json_string_value(json_object_get(e, "event"))));
        json_array_append(a, (json_t *)d);
    }
    json_decref(named);
    return a;
}

static srv_gen new_gen(srv *s)
{
    srv_gen g = { .s = s, .o = { .api = SRV_API_OAI_RESP, .stream = true, .tools = SRV_TOOL_QWEN, .model = "m" } };
    snprintf(g.id, sizeof g.id, "resp_x");
    g.resp.rs_index = g.resp.msg_index = -1;
    return g;
}

static void test_answers(void)
{
    static const char *pieces[] = { "<think>", "Paris", " is", "</think>", "\n\nLet", " me", " check.", "<tool_call>",
                                    "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
                                    "\n</tool_call>" };
    srv s = { 0 };
    srv_gen g = new_gen(&s);
    for (size_t i = 0; i < ARRAY_LEN(pieces); i++) feed(&g, pieces[i]);
    g.done = (eng_event){ .kind = ENG_EV_DONE, .stop = ENG_STOP_EOS, .n_prompt = 30, .n_gen = 10, .n_cached = 4 };
    g.have_done = true;
    srv_resp_stream_end(&g);
    json_t *ev = events(&g);
    size_t n = json_array_size(ev);
    char reason[64] = "", text[64] = "";
    const char *rs_id = NULL, *msg_id = NULL;
    for (size_t i = 0; i < n; i++) {
        const json_t *d = json_array_get(ev, i);
        const char *t = S(d, "type");
        CHECK_EQ_INT(json_integer_value(json_object_get(d, "sequence_number")), i);
        if (!strcmp(t, "response.output_item.added") && !strcmp(S(json_object_get(d, "item"), "type"), "reasoning"))
            rs_id = S(json_object_get(d, "item"), "id");
        if (!strcmp(t, "response.output_item.added") && !strcmp(S(json_object_get(d, "item"), "type"), "message"))
            msg_id = S(json_object_get(d, "item"), "id");
        if (!strcmp(t, "response.reasoning_text.delta")) {
            CHECK_STR(S(d, "item_id"), rs_id);
            strncat(reason, S(d, "delta"), sizeof reason - strlen(reason) - 1);
        }
        if (!strcmp(t, "response.output_text.delta")) {
            CHECK_STR(S(d, "item_id"), msg_id);
            strncat(text, S(d, "delta"), sizeof text - strlen(text) - 1);
        }
        if (!strcmp(t, "response.output_text.done")) CHECK_STR(S(d, "text"), text);
        if (!strcmp(t, "response.reasoning_text.done")) CHECK_STR(S(d, "text"), reason);
    }
    CHECK_STR(S(json_array_get(ev, 0), "type"), "response.created");
    CHECK_STR(S(json_array_get(ev, 1), "type"), "response.in_progress");
    CHECK_STR(reason, "Paris is");
    CHECK_STR(text, "Let me check.");                /* the call's text never went out as text */
    CHECK(rs_id && !strncmp(rs_id, "rs_", 3) && msg_id && !strncmp(msg_id, "msg_", 4));
    const json_t *last = json_array_get(ev, n - 1), *resp = json_object_get(last, "response");
    CHECK_STR(S(last, "type"), "response.completed");
    CHECK_STR(S(resp, "status"), "completed");
    const json_t *out = json_object_get(resp, "output");
    CHECK_EQ_INT(json_array_size(out), 3);
    CHECK_STR(S(json_array_get(out, 0), "type"), "reasoning");
    CHECK_STR(S(json_array_get(out, 1), "id"), msg_id);
    const json_t *call = json_array_get(out, 2);
    CHECK_STR(S(call, "type"), "function_call");
    CHECK_STR(S(call, "name"), "get_weather");
    CHECK_STR(S(call, "arguments"), "{\"city\":\"Paris\"}");
    CHECK(!strncmp(S(call, "call_id"), "call_", 5) && !strcmp(S(call, "call_id") + 5, S(call, "id") + 3));
    CHECK_STR(S(json_array_get(ev, n - 2), "type"), "response.output_item.done");
    CHECK_STR(S(json_array_get(ev, n - 3), "type"), "response.function_call_arguments.done");
    const json_t *usage = json_object_get(resp, "usage");
    CHECK_EQ_INT(json_integer_value(json_object_get(usage, "input_tokens")), 30);
    CHECK_EQ_INT(json_integer_value(json_object_get(usage, "output_tokens")), 10);
    CHECK_EQ_INT(json_integer_value(json_object_get(usage, "total_tokens")), 40);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(usage, "input_tokens_details"), "cached_tokens")), 4);
    json_decref(ev);

    /* The whole answer: the same items. */
    json_t *r = srv_resp_response(&g);
    out = json_object_get(r, "output");
    CHECK_STR(S(r, "object"), "response");
    CHECK_EQ_INT(json_array_size(out), 3);
    CHECK_STR(S(json_array_get(json_object_get(json_array_get(out, 0), "content"), 0), "text"), "Paris is");
    CHECK_STR(S(json_array_get(json_object_get(json_array_get(out, 1), "content"), 0), "text"), "Let me check.");
    CHECK_STR(S(json_array_get(out, 2), "name"), "get_weather");
    json_decref(r);
    free(g.text);
    free(g.out);

    /* An empty answer is still one message, with an empty text. */
    g = new_gen(&s);
    g.done = (eng_event){ .kind = ENG_EV_DONE, .stop = ENG_STOP_EOS };
    srv_resp_stream_end(&g);
    ev = events(&g);
    const json_t *done = json_array_get(ev, json_array_size(ev) - 1);
    out = json_object_get(json_object_get(done, "response"), "output");
    CHECK_EQ_INT(json_array_size(out), 1);
    CHECK_STR(S(json_array_get(json_object_get(json_array_get(out, 0), "content"), 0), "text"), "");
    json_decref(ev);
    free(g.out);
}

/* gpt-oss's harmony reply, its markers cut by the pieces: the reasoning
 * and the text stream as they come, and add up to the items' texts. */
static void test_harmony(void)
{
    static const char *pieces[] = { "<|chan", "nel|>analysis<|message|>Paris", " is<|e", "nd|><|start|>assistant",
                                    "<|channel|>final<|message|>Let", " me", " check.<", "|end|>" };
    srv s = { 0 };
    srv_gen g = new_gen(&s);
    g.o.tools = SRV_TOOL_HARMONY;
    char reason[64] = "", text[64] = "";
    for (size_t i = 0; i < ARRAY_LEN(pieces); i++) {
        feed(&g, pieces[i]);
        if (i == 5) {                                /* before the end: both under way */
            json_t *ev = events(&g);
            for (size_t k = 0; k < json_array_size(ev); k++) {
                const json_t *d = json_array_get(ev, k);
                if (!strcmp(S(d, "type"), "response.reasoning_text.delta")) strcat(reason, S(d, "delta"));
                if (!strcmp(S(d, "type"), "response.output_text.delta")) strcat(text, S(d, "delta"));
            }
            CHECK_STR(reason, "Paris is");
            CHECK_STR(text, "Let me");
            json_decref(ev);
        }
    }
    g.done = (eng_event){ .kind = ENG_EV_DONE, .stop = ENG_STOP_EOS };
    srv_resp_stream_end(&g);
    json_t *ev = events(&g);
    reason[0] = text[0] = 0;
    for (size_t k = 0; k < json_array_size(ev); k++) {
        const json_t *d = json_array_get(ev, k);
        const char *t = S(d, "type");
        if (!strcmp(t, "response.reasoning_text.delta")) strncat(reason, S(d, "delta"), sizeof reason - strlen(reason) - 1);
        if (!strcmp(t, "response.output_text.delta")) strncat(text, S(d, "delta"), sizeof text - strlen(text) - 1);
        if (!strcmp(t, "response.output_text.done")) CHECK_STR(S(d, "text"), "Let me check.");
        if (!strcmp(t, "response.reasoning_text.done")) CHECK_STR(S(d, "text"), "Paris is");
    }
    CHECK_STR(reason, "Paris is");
    CHECK_STR(text, "Let me check.");
    json_decref(ev);
    free(g.text);
    free(g.out);
    pk_buf_free(&g.h_content);
    pk_buf_free(&g.h_reason);
}

static void test_formats(void)
{
    static const char *const cases[][2] = {
        { "/v1/chat/completions", "chatCompletions" }, { "/apply-template", "applyTemplate" },
        { "/completion", "completion" }, { "/v1/responses", "responses" }, { "/polykv/pools", "polykvPools" },
        { "/v1x", "v1x" },
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        char out[64];
        srv_gcp_format_of(cases[i][0], out, sizeof out);
        CHECK_STR(out, cases[i][1]);
    }
    srv_handler fn;
    const char *path;
    CHECK(srv_route_by_format("chatCompletions", &fn, &path) && !strcmp(path, "/v1/chat/completions"));
    CHECK(srv_route_by_format("/tokenize", &fn, &path) && fn == srv_h_tokenize);
    CHECK(!srv_route_by_format("health", &fn, &path));      /* a GET route */
    CHECK(!srv_route_by_format("predict", &fn, &path));
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    TEST_RUN(test_request);
    TEST_RUN(test_answers);
    TEST_RUN(test_harmony);
    TEST_RUN(test_formats);
    return test_finish();
}
