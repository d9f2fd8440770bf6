/*
 * test_server.c - the server's request handling:
 *   - generation parameters: defaults, strict types (a 400 naming the
 *     field), ranges, n != 1, stop lists, the three log-prob spellings;
 *   - error mapping: status -> OpenAI error type, the error body's shape;
 *   - prompts as text, token ids, mixed arrays, one-element lists, and the
 *     ones refused (several prompts, ids outside the vocabulary, empty);
 *   - chat rendering: plain, with tools (Qwen and Llama 3.1 formats chosen),
 *     malformed messages, tools on a template without a tool format; the
 *     real Qwen3.5, gpt-oss and Gemma 4 templates against jinja2 (Gemma 4's
 *     turns parsed and sent back first: the round trip);
 *   - chat answers with tool calls, whole and streamed: content before the
 *     call streamed, the call held back and sent as tool_calls, finish
 *     reason "tool_calls", usage, [DONE];
 *   - the live server on loopback (stories260K): 503 while loading, 404,
 *     405, 401, 413 (declared and streamed bodies), 400 for bad JSON and
 *     for a prompt longer than a slot, a streamed answer that stays whole
 *     while bad requests arrive, and a client that disconnects mid-stream
 *     freeing its slot.
 */
#include "../src/grammar/gram.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "../src/server/srv_gen.h"
#include "../src/common/utf8.h"
#include "../src/model/model.h"
#include "test.h"

static json_t *J(const char *text)
{
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    if (!j) fprintf(stderr, "bad test JSON: %s: %s\n", text, e.text);
    ASSERT(j);
    return j;
}

/* Parses body as api; returns the status (0 when accepted).  The stop
 * strings point into the body, which lives until the next call. */
static unsigned parse(const char *body, srv_api api, eng_completion *c, srv_gen_opts *o, srv_err *e)
{
    static json_t *b;
    json_decref(b);
    b = J(body);
    memset(e, 0, sizeof *e);
    srv_gen_defaults d = { .n_slots = 4, .sp = smp_default_params(), .n_predict = -1 };
    bool ok = srv_parse_gen(b, api, &d, c, o, e);
    return ok ? 0 : e->status;
}

static void test_parse_gen(void)
{
    eng_completion c;
    srv_gen_opts o;
    srv_err e;
    smp_params def = smp_default_params();

    CHECK_EQ_INT(parse("{}", SRV_API_OAI_CHAT, &c, &o, &e), 0);
    CHECK_EQ_INT(c.n_predict, -1);
    CHECK(c.cache_prompt);
    CHECK_EQ_INT(c.id_slot, -1);
    CHECK_NEAR(c.sp.temp, def.temp, 0);
    CHECK(!o.stream && !o.logprobs && c.n_probs == 0 && c.stop[0] == NULL);

    CHECK_EQ_INT(c.sp.min_keep, 0);
    CHECK_EQ_INT(parse("{\"max_tokens\": 7, \"temperature\": 0, \"top_p\": 0.5, \"seed\": 42, \"stream\": true,"
                       " \"stream_options\": {\"include_usage\": true}, \"stop\": \"\\n\", \"model\": \"m\"}",
                       SRV_API_OAI_CHAT, &c, &o, &e), 0);
    CHECK_EQ_INT(c.n_predict, 7);
    CHECK_NEAR(c.sp.temp, 0, 0);
    CHECK_NEAR(c.sp.top_p, 0.5, 1e-7);
    CHECK_EQ_INT(c.sp.seed, 42);
    CHECK(o.stream && o.include_usage);
    CHECK_STR(c.stop[0], "\n");
    CHECK(c.stop[1] == NULL);
    CHECK_STR(o.model, "m");
    CHECK_EQ_INT(parse("{\"min_keep\": 5}", SRV_API_NATIVE, &c, &o, &e), 0);
    CHECK_EQ_INT(c.sp.min_keep, 5);

    /* n_predict wins over max_tokens; null means default. */
    CHECK_EQ_INT(parse("{\"max_tokens\": 7, \"n_predict\": 9, \"temperature\": null}", SRV_API_NATIVE, &c, &o, &e), 0);
    CHECK_EQ_INT(c.n_predict, 9);
    CHECK_NEAR(c.sp.temp, def.temp, 0);

    /* Wrong types: 400 naming the field. */
    static const struct { const char *body, *param; } bad[] = {
        { "{\"max_tokens\": \"7\"}", "max_tokens" },
        { "{\"max_tokens\": 1.5}", "max_tokens" },
        { "{\"temperature\": \"hot\"}", "temperature" },
        { "{\"stream\": 1}", "stream" },
        { "{\"top_p\": 1.5}", "top_p" },
        { "{\"stop\": 5}", "stop" },
        { "{\"stop\": [\"a\", 5]}", "stop" },
        { "{\"stop\": [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\"]}", "stop" },
        { "{\"n\": 17}", "n" },
        { "{\"n\": 0}", "n" },
        { "{\"n\": 2, \"stream\": true}", "n" },
        { "{\"logit_bias\": 5}", "logit_bias" },
        { "{\"logit_bias\": [[1]]}", "logit_bias" },
        { "{\"logit_bias\": [[1, true]]}", "logit_bias" },
        { "{\"logit_bias\": {\"1\": \"x\"}}", "logit_bias" },
        { "{\"logit_bias\": [[-1, 1]]}", "logit_bias" },
        { "{\"logit_bias\": [[\"text\", 1]]}", "logit_bias" },   /* texts need a vocabulary */
        { "{\"mirostat\": 2}", "mirostat" },
        { "{\"typical_p\": 0.5}", "typical_p" },
        { "{\"dry_multiplier\": 0.8}", "dry_multiplier" },
        { "{\"lora\": [{\"id\": 0, \"scale\": 1}]}", "lora" },
        { "{\"reasoning_format\": \"nothink\"}", "reasoning_format" },
        { "{\"chat_template_kwargs\": []}", "chat_template_kwargs" },
        { "{\"response_fields\": [\"content\"]}", "response_fields" },     /* /completion only */
        { "{\"post_sampling_probs\": true}", "post_sampling_probs" },      /* /completion only */
        { "{\"return_progress\": 1}", "return_progress" },
        { "{\"seed\": \"x\"}", "seed" },
        { "{\"min_keep\": -1}", "min_keep" },
        { "{\"id_slot\": 4}", "id_slot" },
        { "{\"cache_prompt\": \"yes\"}", "cache_prompt" },
        { "{\"stream_options\": true}", "stream_options" },
        { "{\"model\": 3}", "model" },
        { "{\"top_logprobs\": 3}", "top_logprobs" },
        { "{\"logprobs\": true, \"top_logprobs\": 21}", "top_logprobs" },
        { "{\"response_format\": {\"type\": \"xml\"}}", "response_format" },
        { "{\"response_format\": {\"type\": \"json_schema\", \"json_schema\": 3}}", "response_format" },
        { "{\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"n\", "
          "\"schema\": {\"type\": \"string\", \"format\": \"email\"}}}}", "response_format" },
        { "{\"grammar\": \"root ::= foo\"}", "grammar" },
        { "{\"grammar\": 5}", "grammar" },
        { "{\"grammar\": \"root ::= \\\"a\\\"\", \"json_schema\": {}}", "grammar" },
        { "{\"json_schema\": {\"type\": \"object\", \"minProperties\": 1}}", "json_schema" },
        { "{\"json_schema\": \"{}\"}", "json_schema" },
        { "{\"echo\": true}", "echo" },
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        unsigned st = parse(bad[i].body, SRV_API_OAI_CHAT, &c, &o, &e);
        CHECK_EQ_INT(st, 400);
        CHECK_STR(e.param, bad[i].param);
        CHECK(strstr(e.msg, bad[i].param) != NULL);
    }

    /* n = 1 is fine; so is response_format text. */
    CHECK_EQ_INT(parse("{\"n\": 1, \"response_format\": {\"type\": \"text\"}}", SRV_API_OAI_CHAT, &c, &o, &e), 0);
    CHECK(c.grammar == NULL);
    CHECK_EQ_INT(o.n_choices, 1);
    CHECK_EQ_INT(parse("{\"n\": 3}", SRV_API_OAI_CHAT, &c, &o, &e), 0);
    CHECK_EQ_INT(o.n_choices, 3);
    CHECK_EQ_INT(parse("{\"n_cmpl\": 2}", SRV_API_NATIVE, &c, &o, &e), 0);
    CHECK_EQ_INT(o.n_choices, 2);
    /* Neutral values of unsupported samplers pass; the llama.cpp fields land. */
    CHECK_EQ_INT(parse("{\"mirostat\": 0, \"typical_p\": 1, \"reasoning_format\": \"none\", "
                       "\"chat_template_kwargs\": {\"enable_thinking\": false}, \"verbose\": true, "
                       "\"timings_per_token\": true, \"return_progress\": true}", SRV_API_OAI_CHAT, &c, &o, &e), 0);
    CHECK_EQ_INT(o.reasoning, SRV_REASON_NONE);
    CHECK(o.verbose && o.timings_per_token && o.return_progress);
    /* logit_bias, both forms: ids with a bias or false (a ban). */
    CHECK_EQ_INT(parse("{\"logit_bias\": [[5, -2.5], [7, false]]}", SRV_API_NATIVE, &c, &o, &e), 0);
    CHECK_EQ_INT(c.n_bias, 2);
    CHECK(c.n_bias == 2 && c.bias[0].token == 5 && c.bias[0].bias == -2.5f && c.bias[1].token == 7 &&
          isinf(c.bias[1].bias) && c.bias[1].bias < 0);
    srv_gen_req_free(&c);
    CHECK(c.bias == NULL && c.n_bias == 0);
    CHECK_EQ_INT(parse("{\"logit_bias\": {\"9\": 100}}", SRV_API_OAI_CHAT, &c, &o, &e), 0);
    CHECK(c.n_bias == 1 && c.bias[0].token == 9 && c.bias[0].bias == 100.0f);
    srv_gen_req_free(&c);
    CHECK_EQ_INT(parse("{\"post_sampling_probs\": true, \"n_probs\": 3, \"response_fields\": [\"content\"]}",
                       SRV_API_NATIVE, &c, &o, &e), 0);
    CHECK(o.post_sampling_probs && c.sp.post_probs && o.response_fields != NULL);
    /* Constraints compile into c.grammar, the caller's reference. */
    static const char *const constrained[] = {
        "{\"response_format\": {\"type\": \"json_object\"}}",
        "{\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"r\", \"strict\": true, "
        "\"schema\": {\"type\": \"object\", \"properties\": {\"next\": {\"enum\": [\"a\", \"b\"]}}}}}}",
        "{\"json_schema\": {\"type\": \"integer\", \"minimum\": 3}}",
        "{\"grammar\": \"root ::= [a-z]+\"}",
    };
    for (size_t i = 0; i < ARRAY_LEN(constrained); i++) {
        CHECK_EQ_INT(parse(constrained[i], SRV_API_OAI_CHAT, &c, &o, &e), 0);
        CHECK(c.grammar != NULL);
        gram_free(c.grammar);
    }
    CHECK_EQ_INT(parse("{\"grammar\": \"\"}", SRV_API_NATIVE, &c, &o, &e), 0);   /* "" means none */
    CHECK(c.grammar == NULL);

    /* Stop lists: empty strings skipped. */
    CHECK_EQ_INT(parse("{\"stop\": [\"a\", \"\", \"bc\"]}", SRV_API_NATIVE, &c, &o, &e), 0);
    CHECK_STR(c.stop[0], "a");
    CHECK_STR(c.stop[1], "bc");
    CHECK(c.stop[2] == NULL);

    /* Log-probs: chat (bool + top_logprobs), completions (int), native (n_probs). */
    CHECK_EQ_INT(parse("{\"logprobs\": true}", SRV_API_OAI_CHAT, &c, &o, &e), 0);
    CHECK(o.logprobs && o.top_logprobs == 0 && c.n_probs == 1);
    CHECK_EQ_INT(parse("{\"logprobs\": true, \"top_logprobs\": 3}", SRV_API_OAI_CHAT, &c, &o, &e), 0);
    CHECK(o.top_logprobs == 3 && c.n_probs == 3);
    CHECK_EQ_INT(parse("{\"logprobs\": 2}", SRV_API_OAI_CMPL, &c, &o, &e), 0);
    CHECK(o.logprobs && o.top_logprobs == 2 && c.n_probs == 2);
    CHECK_EQ_INT(parse("{\"logprobs\": 0}", SRV_API_OAI_CMPL, &c, &o, &e), 0);
    CHECK(o.logprobs && c.n_probs == 1);
    CHECK_EQ_INT(parse("{\"n_probs\": 5}", SRV_API_NATIVE, &c, &o, &e), 0);
    CHECK(o.logprobs && c.n_probs == 5);
    CHECK_EQ_INT(parse("{\"n_probs\": 0, \"return_tokens\": true, \"id_slot\": 3, \"cache_prompt\": false}",
                       SRV_API_NATIVE, &c, &o, &e), 0);
    CHECK(!o.logprobs && c.n_probs == 0 && o.return_tokens && c.id_slot == 3 && !c.cache_prompt);
}

static void test_errors(void)
{
    CHECK_STR(srv_error_type(400), "invalid_request_error");
    CHECK_STR(srv_error_type(401), "authentication_error");
    CHECK_STR(srv_error_type(404), "not_found_error");
    CHECK_STR(srv_error_type(413), "invalid_request_error");
    CHECK_STR(srv_error_type(500), "server_error");
    CHECK_STR(srv_error_type(501), "not_supported_error");
    CHECK_STR(srv_error_type(503), "unavailable_error");

    srv_err e;
    CHECK(!srv_fail(&e, 400, "temperature", "'%s' must be a number", "temperature"));
    json_t *j = srv_error_json(&e), *err = json_object_get(j, "error");
    CHECK(json_is_object(err));
    CHECK_EQ_INT(json_integer_value(json_object_get(err, "code")), 400);
    CHECK_STR(json_string_value(json_object_get(err, "type")), "invalid_request_error");
    CHECK_STR(json_string_value(json_object_get(err, "message")), "'temperature' must be a number");
    CHECK_STR(json_string_value(json_object_get(err, "param")), "temperature");
    json_decref(j);

    srv_fail(&e, 400, NULL, "too long");
    e.type = "exceed_context_size_error";
    e.n_prompt = 600;
    e.n_ctx = 512;
    j = srv_error_json(&e);
    err = json_object_get(j, "error");
    CHECK_STR(json_string_value(json_object_get(err, "type")), "exceed_context_size_error");
    CHECK_EQ_INT(json_integer_value(json_object_get(err, "n_ctx")), 512);
    CHECK(json_object_get(err, "param") == NULL);
    json_decref(j);

    /* Messages that are not valid UTF-8 still give valid JSON. */
    srv_fail(&e, 400, NULL, "bad byte \xff here");
    j = srv_error_json(&e);
    CHECK(j != NULL && json_object_get(j, "error") != NULL);
    json_decref(j);
}

static unsigned prompt(const tok_vocab *v, const char *body, int32_t **ids, int32_t *n)
{
    json_t *b = J(body);
    srv_err e = {0};
    bool ok = srv_tokenize_prompt(v, json_object_get(b, "prompt"), "prompt", true, ids, n, &e);
    json_decref(b);
    return ok ? 0 : e.status;
}

static void test_prompts(const tok_vocab *v)
{
    int32_t *ids, n, *ref, n_ref;
    CHECK_EQ_INT(srv_tokenize(v, "Once upon a time", 16, true, true, &ref, &n_ref), PK_OK);
    CHECK(n_ref > 2 && ref[0] == tok_bos(v));

    CHECK_EQ_INT(prompt(v, "{\"prompt\": \"Once upon a time\"}", &ids, &n), 0);
    CHECK(n == n_ref && !memcmp(ids, ref, (size_t)n * sizeof *ids));
    free(ids);
    CHECK_EQ_INT(prompt(v, "{\"prompt\": [\"Once upon a time\"]}", &ids, &n), 0);
    CHECK(n == n_ref && !memcmp(ids, ref, (size_t)n * sizeof *ids));
    free(ids);

    /* No prompt at all: a 400 naming it (the error was once left unset). */
    {
        int32_t **many, *n_many;
        int k;
        srv_err e;
        memset(&e, 0, sizeof e);
        CHECK(!srv_tokenize_prompts(v, NULL, true, &many, &n_many, &k, &e));
        CHECK_EQ_INT(e.status, 400);
        CHECK_STR(e.param, "prompt");
    }

    /* Token ids as given (no BOS added). */
    CHECK_EQ_INT(prompt(v, "{\"prompt\": [5, 6, 7]}", &ids, &n), 0);
    CHECK(n == 3 && ids[0] == 5 && ids[2] == 7);
    free(ids);
    CHECK_EQ_INT(prompt(v, "{\"prompt\": [[5, 6]]}", &ids, &n), 0);
    CHECK(n == 2 && ids[1] == 6);
    free(ids);

    /* Mixed: a leading string gets the BOS, later strings do not. */
    CHECK_EQ_INT(prompt(v, "{\"prompt\": [\"Once upon a time\", 7, \"Once upon a time\"]}", &ids, &n), 0);
    CHECK_EQ_INT(n, 2 * n_ref);
    CHECK(n == 2 * n_ref && ids[0] == tok_bos(v) && ids[n_ref - 1] == ref[n_ref - 1] && ids[n_ref] == 7 &&
          ids[n_ref + 1] == ref[1]);
    free(ids);
    CHECK_EQ_INT(prompt(v, "{\"prompt\": [7, \"Once upon a time\"]}", &ids, &n), 0);
    CHECK(n == n_ref && ids[0] == 7 && ids[1] == ref[1]);
    free(ids);

    CHECK_EQ_INT(prompt(v, "{\"prompt\": [\"a\", \"b\"]}", &ids, &n), 400);
    CHECK_EQ_INT(prompt(v, "{\"prompt\": []}", &ids, &n), 400);
    CHECK_EQ_INT(prompt(v, "{\"prompt\": [1, 99999999]}", &ids, &n), 400);
    CHECK_EQ_INT(prompt(v, "{\"prompt\": [1, -1]}", &ids, &n), 400);
    CHECK_EQ_INT(prompt(v, "{\"prompt\": 5}", &ids, &n), 400);
    CHECK_EQ_INT(prompt(v, "{\"prompt\": [1, {}]}", &ids, &n), 400);
    CHECK_EQ_INT(prompt(v, "{}", &ids, &n), 400);
    free(ref);
}

static unsigned chat(tmpl_kind k, const char *body, char **text, srv_tool_fmt *fmt, srv_err *e)
{
    json_t *b = J(body);
    size_t n;
    memset(e, 0, sizeof *e);
    bool ok = srv_render_chat(b, k, NULL, text, &n, fmt, e);
    json_decref(b);
    return ok ? 0 : e->status;
}

static void test_chat(void)
{
    char *text;
    srv_tool_fmt fmt;
    srv_err e;
    CHECK_EQ_INT(chat(TMPL_CHATML, "{\"messages\": [{\"role\": \"developer\", \"content\": \"Be brief.\"}, "
                      "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hi\"}, "
                      "{\"type\": \"text\", \"text\": \"there\"}]}]}", &text, &fmt, &e), 0);
    CHECK_STR(text, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi\nthere<|im_end|>\n"
                    "<|im_start|>assistant\n");
    CHECK_EQ_INT(fmt, SRV_TOOL_NONE);
    free(text);

    static const char tools_body[] =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"Weather in Paris?\"}], \"tools\": [{\"type\": "
        "\"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\"}}}]}";
    CHECK_EQ_INT(chat(TMPL_CHATML, tools_body, &text, &fmt, &e), 0);
    CHECK(strstr(text, "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"") != NULL);
    CHECK_EQ_INT(fmt, SRV_TOOL_QWEN);
    free(text);
    CHECK_EQ_INT(chat(TMPL_LLAMA3, tools_body, &text, &fmt, &e), 0);
    CHECK(strstr(text, "Environment: ipython\n") != NULL);
    CHECK_EQ_INT(fmt, SRV_TOOL_LLAMA3);
    free(text);
    CHECK_EQ_INT(chat(TMPL_LLAMA2, tools_body, &text, &fmt, &e), 400);
    CHECK_STR(e.param, "tools");

    /* tool_choice none: no tools in the prompt, no parsing. */
    CHECK_EQ_INT(chat(TMPL_CHATML, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tool_choice\": "
                      "\"none\", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]}",
                      &text, &fmt, &e), 0);
    CHECK(strstr(text, "<tools>") == NULL && fmt == SRV_TOOL_NONE);
    free(text);

    /* Each malformed body: a 400 naming the field, with the message that
     * says what is wrong with it. */
    static const struct { const char *body, *param, *msg; } bad[] = {
        { "{}", "messages", "'messages' must be an array" },
        { "{\"messages\": []}", "messages", "'messages' must not be empty" },
        { "{\"messages\": \"hi\"}", "messages", "'messages' must be an array" },
        { "{\"messages\": [{\"content\": \"x\"}]}", "messages", "messages[0] must be an object with a string 'role'" },
        { "{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}", "messages",
          "messages[0].role 'wizard' is not one of system, user, assistant, tool" },
        { "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", "messages",
          "messages[0].content must be a string or an array of parts" },
        { "{\"messages\": [{\"role\": \"user\"}]}", "messages", "messages[0].content is required" },
        { "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}", "messages",
          "messages[0].content[0]: only text parts are supported" },
        { "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": {}}", "tools",
          "'tools' must be an array" },
        { "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"type\": \"function\"}]}", "tools",
          "tools[0] must be {\"type\": \"function\", \"function\": {\"name\": string, ...}}" },
        { "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tool_choice\": \"sometimes\"}", "tool_choice",
          "'tool_choice' must be none, auto, required or an object" },
        { "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"add_generation_prompt\": 1}",
          "add_generation_prompt", "'add_generation_prompt' must be a boolean" },
        { "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {}}]}]}", "messages",
          "messages[0].tool_calls[0] must be {\"function\": {\"name\": string, \"arguments\": string}}" },
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        CHECK_EQ_INT(chat(TMPL_CHATML, bad[i].body, &text, &fmt, &e), 400);
        CHECK_STR(e.param, bad[i].param);
        CHECK_STR(e.msg, bad[i].msg);
    }
}

/* s rendering with the template file (paths from the repository root). */
static void template_srv(srv *s, const tok_vocab *v, const char *file)
{
    memset(s, 0, sizeof *s);
    s->p = srv_default_params();
    s->p.chat_template_file = file;
    char err[256] = "";
    CHECK_EQ_INT(srv_chat_init(s, v, &s->tmpl, &s->tmpl_src, err, sizeof err), PK_OK);
    if (err[0]) fprintf(stderr, "srv_chat_init: %s\n", err);
}

/* Qwen3.5's own template through the server's Jinja path: a conversation
 * whose assistant turn carries XML tool calls, its arguments JSON strings
 * as OpenAI clients send them, renders as jinja2 renders it with the
 * arguments as objects (the template iterates them: a string would fail),
 * the prompt opens <think>, and the answer is parsed in the XML form. */
static void test_qwen35_template(const tok_vocab *v)
{
    json_error_t je;
    json_t *o = json_load_file("tests/jinja/qwen35/tool_turns.json", 0, &je);
    if (!o) {
        SKIP_PART("tests/jinja/qwen35/tool_turns.json: %.100s (run from the repository root)", je.text);
        return;
    }
    srv s;
    template_srv(&s, v, "tests/jinja/qwen35/chat_template.jinja");
    ASSERT(s.jj.t);
    const json_t *h = json_object_get(o, "history");
    json_t *body = json_pack("{s:O, s:O}", "messages", json_object_get(h, "messages"), "tools",
                             json_object_get(o, "tools"));
    char *prompt = NULL;
    size_t n = 0;
    srv_tool_fmt fmt = SRV_TOOL_NONE;
    bool think_open = false;
    srv_err e;
    memset(&e, 0, sizeof e);
    CHECK(srv_chat_prompt(&s, body, &prompt, &n, &fmt, &think_open, &e));
    if (e.status) fprintf(stderr, "srv_chat_prompt: %d %s\n", e.status, e.msg);
    CHECK_STR(prompt, json_string_value(json_object_get(h, "prompt")));
    CHECK(think_open);
    CHECK_EQ_INT(srv_tools_detect(s.tmpl_src, fmt), SRV_TOOL_QWEN_XML);
    free(prompt);
    json_decref(body);
    srv_chat_free(&s);
    json_decref(o);
}

/* The date line a template prints (today on the server, a fixed day in
 * the recorded prompt) blanked, in place. */
static void blank_date(char *p)
{
    char *d = strstr(p, "Current date: ");
    for (d = d ? d + 14 : NULL; d && *d && *d != '\n'; d++) *d = '#';
}

/* gpt-oss's harmony template through the server's Jinja path
 * (tests/jinja/gpt-oss/turns.py wrote the cases with jinja2): developer
 * instructions, reasoning_effort from chat_template_kwargs, an assistant
 * turn's reasoning_content as the template's `thinking`, its content
 * dropped beside tool calls, string arguments as objects; the answer is
 * parsed as harmony whether the request has tools or not. */
static void test_gpt_oss_template(const tok_vocab *v)
{
    json_error_t je;
    json_t *cases = json_load_file("tests/jinja/gpt-oss/turns.json", 0, &je);
    if (!cases) {
        SKIP_PART("tests/jinja/gpt-oss/turns.json: %.100s (run from the repository root)", je.text);
        return;
    }
    srv s;
    template_srv(&s, v, "tests/jinja/gpt-oss/chat_template.jinja");
    ASSERT(s.jj.t && s.jj.harmony);
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const json_t *c = json_array_get(cases, i);
        char *prompt = NULL, *want = strdup(json_string_value(json_object_get(json_array_get(cases, i), "prompt")));
        size_t n = 0;
        srv_tool_fmt fmt = SRV_TOOL_NONE;
        bool think_open = false;
        srv_err e;
        memset(&e, 0, sizeof e);
        CHECK(srv_chat_prompt(&s, json_object_get(c, "request"), &prompt, &n, &fmt, &think_open, &e));
        if (e.status) fprintf(stderr, "srv_chat_prompt: %d %s\n", e.status, e.msg);
        if (prompt) blank_date(prompt);
        blank_date(want);
        CHECK_STR(prompt, want);
        CHECK_EQ_INT(srv_tools_detect(s.tmpl_src, SRV_TOOL_NONE), SRV_TOOL_HARMONY);
        free(prompt);
        free(want);
    }
    srv_chat_free(&s);
    json_decref(cases);
}

/* Gemma 4's template round trip (tests/jinja/gemma4/turns.py wrote the
 * cases with jinja2): each turn the template renders from known calls is
 * parsed as the server parses an answer (thinking, content, calls), sent
 * back as an OpenAI client sends it (content null beside calls, arguments
 * as the JSON strings the parse gave, ids, one tool message per call) and
 * rendered through the server; the prompt must be jinja2's for the known
 * calls, byte for byte. */
static void test_gemma4_template(const tok_vocab *v)
{
    json_error_t je;
    json_t *o = json_load_file("tests/jinja/gemma4/turns.json", 0, &je);
    if (!o) {
        SKIP_PART("tests/jinja/gemma4/turns.json: %.100s (run from the repository root)", je.text);
        return;
    }
    srv s;
    template_srv(&s, v, "tests/jinja/gemma4/chat_template.jinja");
    ASSERT(s.jj.t);
    CHECK(s.jj.object_arguments);
    CHECK_EQ_INT(srv_tools_detect(s.tmpl_src, SRV_TOOL_NONE), SRV_TOOL_GEMMA4);
    /* The template prints bos_token; the recording spells Gemma 4's. */
    free(s.jj.bos);
    s.jj.bos = strdup(json_string_value(json_object_get(o, "bos_token")));
    const json_t *turns = json_object_get(o, "turns");
    CHECK(json_array_size(turns) >= 8);
    for (size_t i = 0; i < json_array_size(turns); i++) {
        int fails = test_n_fail;
        const json_t *t = json_array_get(turns, i);
        const char *text = json_string_value(json_object_get(t, "text"));
        size_t n = json_string_length(json_object_get(t, "text"));
        srv_reason_split rs = srv_reason_split_text(SRV_REASON_AUTO, SRV_THINK_CHANNEL, text, n, false, true);
        srv_tool_msg m;
        CHECK_EQ_INT(srv_tools_parse(SRV_TOOL_GEMMA4, NULL, text + rs.content_off, rs.content_len, &m), PK_OK);
        json_t *calls = json_array();
        for (int k = 0; k < m.n_calls; k++) {
            char id[24];
            snprintf(id, sizeof id, "call_%d", k);
            json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function",
                                                   "function", "name", m.calls[k].name, "arguments",
                                                   m.calls[k].arguments));
        }
        json_t *answer = json_pack("{s:s, s:o, s:o}", "role", "assistant", "content",
                                   m.content_len ? json_stringn(m.content, m.content_len) : json_null(),
                                   "tool_calls", calls);
        if (rs.reason_len)
            json_object_set_new(answer, "reasoning_content", json_stringn(text + rs.reason_off, rs.reason_len));
        json_t *msgs = json_pack("[O, o]", json_object_get(o, "user"), answer);
        json_array_extend(msgs, json_object_get(t, "results"));
        json_t *body = json_pack("{s:o, s:O}", "messages", msgs, "tools", json_object_get(o, "tools"));
        char *prompt = NULL;
        size_t np = 0;
        srv_tool_fmt fmt = SRV_TOOL_NONE;
        bool think_open = true;
        srv_err e;
        memset(&e, 0, sizeof e);
        CHECK(srv_chat_prompt(&s, body, &prompt, &np, &fmt, &think_open, &e));
        if (e.status) fprintf(stderr, "srv_chat_prompt: %d %s\n", e.status, e.msg);
        CHECK_STR(prompt, json_string_value(json_object_get(t, "prompt")));
        CHECK(!think_open);
        if (test_n_fail > fails) fprintf(stderr, "in turn %s\n", json_string_value(json_object_get(t, "name")));
        free(prompt);
        json_decref(body);
        srv_tool_msg_free(&m);
    }
    srv_chat_free(&s);
    json_decref(o);
}

/* ---- tool calls in chat answers ---- */

/* A generation fed with texts as if they were token events. */
static void feed(srv_gen *g, const char *text)
{
    size_t n = strlen(text);
    g->text = realloc(g->text, g->n_text + n + 1);
    memcpy(g->text + g->n_text, text, n + 1);
    g->n_text += n;
    g->n_tokens++;
    eng_event ev = { .kind = ENG_EV_TOKEN, .text = (char *)text, .text_len = n, .token = 1 };
    srv_oai_stream_token(g, &ev);
}

/* Whether g's output (n_out bytes, not NUL-terminated) holds s. */
static bool out_has(const srv_gen *g, const char *s)
{
    return g->out && memmem(g->out, g->n_out, s, strlen(s)) != NULL;
}

/* The SSE events of g's output, as JSON (the [DONE] marker as a string). */
static json_t *events(const srv_gen *g)
{
    json_t *a = json_array();
    const char *p = g->out, *end = g->out + g->n_out;
    while (p < end) {
        const char *q = strstr(p, "\n\n");
        ASSERT(q && !strncmp(p, "data: ", 6));
        if (!strncmp(p + 6, "[DONE]", 6)) json_array_append_new(a, json_string("[DONE]"));
        else json_array_append_new(a, json_loadb(p + 6, (size_t)(q - p - 6), 0, NULL));
        p = q + 2;
    }
    return a;
}

static void test_tool_answers(void)
{
    static const char *pieces[] = { "Let", " me", " check", ".\n", "<tool_call>", "\n{\"name\": \"get_weather\", ",
                                    "\"arguments\": {\"city\": \"Paris\"}}", "\n</tool_call>" };
    srv s = {0};
    snprintf(s.model_name, sizeof s.model_name, "m");
    srv_gen g = { .s = &s, .o = { .api = SRV_API_OAI_CHAT, .stream = true, .include_usage = true,
                                  .tools = SRV_TOOL_QWEN, .model = "m" } };
    snprintf(g.id, sizeof g.id, "chatcmpl-x");
    for (size_t i = 0; i < ARRAY_LEN(pieces); i++) feed(&g, pieces[i]);
    g.done = (eng_event){ .kind = ENG_EV_DONE, .stop = ENG_STOP_EOS, .n_prompt = 30, .n_gen = 9, .n_cached = 4 };
    g.have_done = true;
    srv_oai_stream_end(&g);

    json_t *ev = events(&g);
    char content[256] = "";
    const json_t *calls = NULL;
    const char *finish = NULL;
    const json_t *usage = NULL;
    size_t n = json_array_size(ev);
    CHECK(n >= 5);
    CHECK_STR(json_string_value(json_array_get(ev, n - 1)), "[DONE]");
    for (size_t i = 0; i + 1 < n; i++) {
        const json_t *e = json_array_get(ev, i), *ch = json_array_get(json_object_get(e, "choices"), 0);
        CHECK_STR(json_string_value(json_object_get(e, "object")), "chat.completion.chunk");
        if (json_object_get(e, "usage")) usage = json_object_get(e, "usage");
        if (!ch) continue;
        const json_t *d = json_object_get(ch, "delta");
        const char *c = json_string_value(json_object_get(d, "content"));
        if (c) strncat(content, c, sizeof content - strlen(content) - 1);
        if (json_object_get(d, "tool_calls")) calls = json_object_get(d, "tool_calls");
        if (json_string_value(json_object_get(ch, "finish_reason"))) finish = json_string_value(json_object_get(ch, "finish_reason"));
    }
    CHECK_STR(content, "Let me check.");
    CHECK_STR(finish, "tool_calls");
    CHECK(calls && json_array_size(calls) == 1);
    const json_t *c0 = json_array_get(calls, 0), *fn = json_object_get(c0, "function");
    CHECK_EQ_INT(json_integer_value(json_object_get(c0, "index")), 0);
    CHECK(!strncmp(json_string_value(json_object_get(c0, "id")) ? json_string_value(json_object_get(c0, "id")) : "", "call_", 5));
    CHECK_STR(json_string_value(json_object_get(c0, "type")), "function");
    CHECK_STR(json_string_value(json_object_get(fn, "name")), "get_weather");
    CHECK_STR(json_string_value(json_object_get(fn, "arguments")), "{\"city\":\"Paris\"}");
    CHECK(usage && json_integer_value(json_object_get(usage, "completion_tokens")) == 9 &&
          json_integer_value(json_object_get(json_object_get(usage, "prompt_tokens_details"), "cached_tokens")) == 4);
    /* No chunk carried any of the call's text as content. */
    CHECK(strstr(content, "tool_call") == NULL);
    json_decref(ev);

    /* The whole answer. */
    g.o.stream = false;
    json_t *r = srv_oai_response(&g), *msg = json_object_get(json_array_get(json_object_get(r, "choices"), 0), "message");
    CHECK_STR(json_string_value(json_object_get(json_array_get(json_object_get(r, "choices"), 0), "finish_reason")),
              "tool_calls");
    CHECK_STR(json_string_value(json_object_get(msg, "content")), "Let me check.");
    CHECK_STR(json_string_value(json_object_get(json_object_get(json_array_get(json_object_get(msg, "tool_calls"), 0),
                                                                "function"), "name")), "get_weather");
    json_decref(r);

    /* Without a call the same path is plain content, finish "stop". */
    free(g.text);
    free(g.out);
    g = (srv_gen){ .s = &s, .o = { .api = SRV_API_OAI_CHAT, .stream = true, .tools = SRV_TOOL_LLAMA3, .model = "m" } };
    feed(&g, "It is");
    feed(&g, " sunny {mostly}.");
    g.done = (eng_event){ .kind = ENG_EV_DONE, .stop = ENG_STOP_EOS };
    srv_oai_stream_end(&g);
    ev = events(&g);
    content[0] = 0;
    finish = NULL;
    for (size_t i = 0; i < json_array_size(ev); i++) {
        const json_t *ch = json_array_get(json_object_get(json_array_get(ev, i), "choices"), 0);
        const char *c = json_string_value(json_object_get(json_object_get(ch, "delta"), "content"));
        if (c) strncat(content, c, sizeof content - strlen(content) - 1);
        if (json_string_value(json_object_get(ch, "finish_reason"))) finish = json_string_value(json_object_get(ch, "finish_reason"));
        CHECK(json_object_get(json_object_get(ch, "delta"), "tool_calls") == NULL);
    }
    CHECK_STR(content, "It is sunny {mostly}.");
    CHECK_STR(finish, "stop");
    json_decref(ev);
    free(g.text);
    free(g.out);
}

/* Thinking in a chat answer, through the real chunk writers: the pieces
 * cut both tags, the prompt opened <think> or not, a tool call after the
 * thinking; what the stream pieces together equals the whole answer. */
static const char *first_arguments(const json_t *calls)
{
    return json_string_value(json_object_get(json_object_get(json_array_get(calls, 0), "function"), "arguments"));
}

static void reasoning_case_fmt(srv_reasoning fmt, bool think_open, srv_think_tags think, srv_tool_fmt tools,
                               json_t *tool_defs, const char *const *pieces, size_t n_pieces, const char *want_reason,
                               const char *want_content, int want_calls, const char *want_args)
{
    srv s = {0};
    snprintf(s.model_name, sizeof s.model_name, "m");
    srv_gen g = { .s = &s, .o = { .api = SRV_API_OAI_CHAT, .stream = true, .tools = tools, .model = "m",
                                  .think = think, .think_open = think_open, .tool_defs = tool_defs,
                                  .reasoning = fmt } };
    for (size_t i = 0; i < n_pieces; i++) feed(&g, pieces[i]);
    g.done = (eng_event){ .kind = ENG_EV_DONE, .stop = ENG_STOP_EOS };
    srv_oai_stream_end(&g);
    json_t *ev = events(&g);
    char reason[256] = "", content[256] = "";
    size_t n_calls = 0;
    const char *args = NULL;
    for (size_t i = 0; i < json_array_size(ev); i++) {
        const json_t *d = json_object_get(json_array_get(json_object_get(json_array_get(ev, i), "choices"), 0), "delta");
        const char *r = json_string_value(json_object_get(d, "reasoning_content"));
        const char *c = json_string_value(json_object_get(d, "content"));
        if (r) strncat(reason, r, sizeof reason - strlen(reason) - 1);
        if (c) strncat(content, c, sizeof content - strlen(content) - 1);
        const json_t *calls = json_object_get(d, "tool_calls");
        if (!n_calls && json_array_size(calls)) args = first_arguments(calls);
        n_calls += json_array_size(calls);
    }
    CHECK_STR(reason, want_reason);
    CHECK_STR(content, want_content);
    CHECK_EQ_INT(n_calls, want_calls);
    if (want_args) CHECK_STR(args, want_args);
    json_decref(ev);
    g.o.stream = false;
    json_t *r = srv_oai_response(&g), *msg = json_object_get(json_array_get(json_object_get(r, "choices"), 0), "message");
    const char *whole_r = json_string_value(json_object_get(msg, "reasoning_content"));
    const char *whole_c = json_string_value(json_object_get(msg, "content"));
    CHECK_STR(whole_r ? whole_r : "", want_reason);
    CHECK_STR(whole_c ? whole_c : "", want_content);
    CHECK_EQ_INT(json_array_size(json_object_get(msg, "tool_calls")), want_calls);
    if (want_args) CHECK_STR(first_arguments(json_object_get(msg, "tool_calls")), want_args);
    json_decref(r);
    free(g.text);
    free(g.out);
    pk_buf_free(&g.h_content);
    pk_buf_free(&g.h_reason);
}

static void reasoning_case_typed(bool think_open, srv_think_tags think, srv_tool_fmt tools, json_t *tool_defs,
                                 const char *const *pieces, size_t n_pieces, const char *want_reason,
                                 const char *want_content, int want_calls, const char *want_args)
{
    reasoning_case_fmt(SRV_REASON_AUTO, think_open, think, tools, tool_defs, pieces, n_pieces, want_reason,
                       want_content, want_calls, want_args);
}

static void reasoning_case(bool think_open, srv_tool_fmt tools, const char *const *pieces, size_t n_pieces,
                           const char *want_reason, const char *want_content, int want_calls)
{
    reasoning_case_typed(think_open, SRV_THINK_TAGS, tools, NULL, pieces, n_pieces, want_reason, want_content,
                         want_calls, NULL);
}

static void test_reasoning_answers(void)
{
    static const char *const qwen3[] = { "<th", "ink>\nThe user", " greets.</thi", "nk>\n", "\nHello", "!" };
    reasoning_case(false, SRV_TOOL_NONE, qwen3, ARRAY_LEN(qwen3), "\nThe user greets.", "Hello!", 0);
    static const char *const r1[] = { "2+2", " is 4.", "\n</", "think>", "\n\nFour." };
    reasoning_case(true, SRV_TOOL_NONE, r1, ARRAY_LEN(r1), "2+2 is 4.\n", "Four.", 0);
    static const char *const call[] = { "<think>Need the weather.</think>\n\n", "<tool_call>\n{\"name\": \"w\", ",
                                        "\"arguments\": {}}\n</tool_call>" };
    reasoning_case(false, SRV_TOOL_QWEN, call, ARRAY_LEN(call), "Need the weather.", "", 1);
    static const char *const plain[] = { "No ", "thinking <think> here." };
    reasoning_case(false, SRV_TOOL_NONE, plain, ARRAY_LEN(plain), "", "No thinking <think> here.", 0);
    /* Qwen3.5: the prompt opened <think>; thinking, content, then an XML
     * call whose values the request's tools type (days an integer, zip a
     * string of digits). */
    json_t *defs = J("[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
                     "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": "
                     "{\"type\": \"integer\"}, \"zip\": {\"type\": \"string\"}}}}}]");
    static const char *const xml[] = { "Need the", " weather.\n</thi", "nk>\n\n", "Let me check.", "\n\n<tool_",
                                       "call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n",
                                       "<parameter=days>\n3\n</parameter>\n<parameter=zip>\n75001\n</parameter>\n",
                                       "</function>\n</tool_call>" };
    reasoning_case_typed(true, SRV_THINK_TAGS, SRV_TOOL_QWEN_XML, defs, xml, ARRAY_LEN(xml), "Need the weather.\n",
                         "Let me check.", 1, "{\"city\":\"Paris\",\"days\":3,\"zip\":\"75001\"}");
    json_decref(defs);
    /* Gemma 4: its thought channel, content, then a call, the pieces
     * cutting every marker; no piece of a marker goes out as content. */
    static const char *const g4[] = { "<|chan", "nel>thought\nThe user", " wants the weather.<chan", "nel|>Let me",
                                       " check.", "\n<|tool", "_call>call:get_weather{city:<|\"|>Par",
                                       "is<|\"|>,days:3}<tool_call|>" };
    reasoning_case_typed(false, SRV_THINK_CHANNEL, SRV_TOOL_GEMMA4, NULL, g4, ARRAY_LEN(g4),
                         "The user wants the weather.", "Let me check.", 1, "{\"city\":\"Paris\",\"days\":3}");
    /* Without tools, and the empty thought block Gemma 4 may end with. */
    static const char *const g4_plain[] = { "<|channel>thought\n", "A greeting.", "<channel|>", "Hello", "!",
                                            "<|channel>", "thought\n", "<channel|>" };
    reasoning_case_typed(false, SRV_THINK_CHANNEL, SRV_TOOL_NONE, NULL, g4_plain, ARRAY_LEN(g4_plain), "A greeting.",
                         "Hello!", 0, NULL);
}

/* gpt-oss's harmony reply streamed in two pieces cut at every character
 * (and one character at a time): the deltas pieced together are the whole answer's
 * reasoning_content and content under reasoning format fmt. */
static void harmony_case(srv_reasoning fmt, const char *text, const char *want_reason, const char *want_content,
                         int want_calls, const char *want_args)
{
    /* Pieces end on whole characters, as the engine's token events do. */
    size_t n = strlen(text), n_one = 0;
    char chars[512][5];
    const char *one[512] = { 0 };
    ASSERT(n < 512);
    for (size_t i = 0; i < n; n_one++) {
        size_t k = 1;
        while (i + k < n && ((unsigned char)text[i + k] & 0xc0) == 0x80) k++;
        memcpy(chars[n_one], text + i, k);
        chars[n_one][k] = 0;
        one[n_one] = chars[n_one];
        i += k;
    }
    int fails = test_n_fail;
    reasoning_case_fmt(fmt, false, SRV_THINK_TAGS, SRV_TOOL_HARMONY, NULL, one, n_one, want_reason, want_content,
                       want_calls, want_args);
    for (size_t cut = 1; cut < n && test_n_fail == fails; cut++) {
        if (((unsigned char)text[cut] & 0xc0) == 0x80) continue;
        char *head = strndup(text, cut);
        const char *two[] = { head, text + cut };
        reasoning_case_fmt(fmt, false, SRV_THINK_TAGS, SRV_TOOL_HARMONY, NULL, two, 2, want_reason, want_content,
                           want_calls, want_args);
        if (test_n_fail > fails) fprintf(stderr, "  harmony cut at %zu of \"%s\"\n", cut, text);
        free(head);
    }
}

/* What gpt-oss writes after "<|start|>assistant" (the layouts of
 * tests/jinja/gpt-oss/turns.json and of the template's own rendering). */
static void test_harmony_answers(void)
{
    static const char answer[] = "<|channel|>analysis<|message|>The user asks about \"tomorrow\" in Lima.<|end|>"
                                 "<|start|>assistant<|channel|>final<|message|>20 \u00b0C, cloudy.";
    harmony_case(SRV_REASON_AUTO, answer, "The user asks about \"tomorrow\" in Lima.", "20 \u00b0C, cloudy.", 0, NULL);
    /* Both went out before the end. */
    srv s = {0};
    srv_gen g = { .s = &s, .o = { .api = SRV_API_OAI_CHAT, .stream = true, .tools = SRV_TOOL_HARMONY, .model = "m" } };
    feed(&g, answer);
    CHECK(out_has(&g, "\"reasoning_content\":\"The user asks") && out_has(&g, "cloudy.\"}"));
    CHECK(g.out && !out_has(&g, "<|"));
    free(g.text);
    free(g.out);
    pk_buf_free(&g.h_content);
    pk_buf_free(&g.h_reason);
    /* none: the analysis is left out, not put in the content. */
    harmony_case(SRV_REASON_NONE, answer, "", "20 \u00b0C, cloudy.", 0, NULL);
    harmony_case(SRV_REASON_DEEPSEEK_LEGACY, answer, "The user asks about \"tomorrow\" in Lima.",
                 "20 \u00b0C, cloudy.", 0, NULL);
    static const char call[] = "<|channel|>analysis<|message|>I should call get_weather.<|end|><|start|>assistant"
                               "<|channel|>commentary<|message|>Checking Lima. <|end|><|start|>assistant to=functions."
                               "get_weather<|channel|>commentary json<|message|>{\"city\": \"Lima\", \"days\": 1}";
    harmony_case(SRV_REASON_AUTO, call, "I should call get_weather.", "Checking Lima.", 1, "{\"city\":\"Lima\",\"days\":1}");
    harmony_case(SRV_REASON_AUTO, " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}", "",
                 "", 1, "{\"city\":\"Paris\"}");
    /* Cut off while thinking; and text that is no harmony at all. */
    harmony_case(SRV_REASON_AUTO, "<|channel|>analysis<|message|>Let me think about <|", "Let me think about <|", "", 0,
                 NULL);
    harmony_case(SRV_REASON_AUTO, "plain <|words|>", "", "plain <|words|>", 0, NULL);
}

/* ---- the live server ---- */

typedef struct resp { int status; char body[1 << 16]; } resp;

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    return fd;
}

static void send_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t k = send(fd, s, n, MSG_NOSIGNAL);
        if (k <= 0) return;
        s += k;
        n -= (size_t)k;
    }
}

static void send_request(int fd, const char *method, const char *path, const char *extra, const char *body)
{
    char head[1024];
    int n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s"
                     "Content-Length: %zu\r\n\r\n", method, path, extra ? extra : "", body ? strlen(body) : 0);
    send_all(fd, head, (size_t)n);
    if (body) send_all(fd, body, strlen(body));
}

/* One request on its own connection; the whole answer, body unparsed. */
static void http(int port, const char *method, const char *path, const char *extra, const char *body, resp *r)
{
    int fd = connect_to(port);
    send_request(fd, method, path, extra, body);
    static char raw[sizeof r->body + 4096];
    size_t n = 0;
    ssize_t k;
    while (n < sizeof raw - 1 && (k = recv(fd, raw + n, sizeof raw - 1 - n, 0)) > 0) n += (size_t)k;
    raw[n] = 0;
    close(fd);
    r->status = 0;
    sscanf(raw, "HTTP/1.%*d %d", &r->status);
    const char *b = strstr(raw, "\r\n\r\n");
    snprintf(r->body, sizeof r->body, "%s", b ? b + 4 : "");
}

static bool has(const resp *r, const char *s) { return strstr(r->body, s) != NULL; }

static int wait_idle(eng *e, int ms)
{
    eng_stats st;
    for (int t = 0; t < ms; t += 10) {
        if (eng_get_stats(e, &st) == PK_OK && st.n_running == 0 && st.n_waiting == 0) return t;
        usleep(10000);
    }
    return -1;
}

/* The most tokens any slot's last task generated (eng_stats n_decoded). */
static int most_decoded(eng *e)
{
    eng_stats st;
    CHECK_EQ_INT(eng_get_stats(e, &st), PK_OK);
    int most = 0;
    for (int i = 0; i < st.n_slots; i++) most = MAX(most, st.slots[i].n_decoded);
    return most;
}

static void test_live(const char *model_path)
{
    char err[256];
    srv_params sp = srv_default_params();
    sp.port = 0;
    sp.max_body_bytes = 4096;
    sp.endpoint_metrics = true;
    srv *s;
    CHECK_EQ_INT(srv_new(&sp, &s, err, sizeof err), PK_OK);
    int port = srv_port(s);
    CHECK(port > 0);
    resp *r = malloc(sizeof *r);

    http(port, "GET", "/health", NULL, NULL, r);
    CHECK_EQ_INT(r->status, 503);
    CHECK(has(r, "\"unavailable_error\""));

    model *m;
    CHECK_EQ_INT(model_load(model_path, MODEL_COPY, &m, err, sizeof err), PK_OK);
    eng_params ep = eng_default_params();
    ep.n_slots = 2;
    ep.n_ctx = 8192;
    eng *e;
    CHECK_EQ_INT(eng_new(m, &ep, &e), PK_OK);
    CHECK_EQ_INT(srv_set_engine(s, e, model_path, err, sizeof err), PK_OK);

    http(port, "GET", "/health", NULL, NULL, r);
    CHECK_EQ_INT(r->status, 200);
    CHECK(has(r, "\"ok\""));
    http(port, "GET", "/no/such/route", NULL, NULL, r);
    CHECK_EQ_INT(r->status, 404);
    CHECK(has(r, "\"not_found_error\""));
    http(port, "GET", "/completion", NULL, NULL, r);
    CHECK_EQ_INT(r->status, 405);
    http(port, "POST", "/completion", NULL, "{\"prompt\": ", r);
    CHECK_EQ_INT(r->status, 400);
    CHECK(has(r, "invalid JSON"));
    http(port, "POST", "/completion", NULL, "[1, 2]", r);
    CHECK_EQ_INT(r->status, 400);
    http(port, "POST", "/v1/chat/completions", NULL, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
         "\"max_tokens\": \"ten\"}", r);
    CHECK_EQ_INT(r->status, 400);
    CHECK(has(r, "\"param\":\"max_tokens\""));
    /* The decode rate is over the n - 1 steps after the first token, and
     * printed precisely enough that a client recomputing it from
     * predicted_ms agrees to a millionth (llama.cpp's
     * test_metrics_generation_rate_excludes_first_token). */
    for (int n = 1; n <= 16; n += 15) {
        char req[128];
        snprintf(req, sizeof req, "{\"prompt\": \"I believe\", \"n_predict\": %d, \"temperature\": 0, "
                 "\"ignore_eos\": true}", n);
        http(port, "POST", "/completion", NULL, req, r);
        CHECK_EQ_INT(r->status, 200);
        json_t *answer = J(r->body), *t = json_object_get(answer, "timings");
        double ms = json_real_value(json_object_get(t, "predicted_ms"));
        double rate = json_real_value(json_object_get(t, "predicted_per_second"));
        CHECK_EQ_INT(json_integer_value(json_object_get(t, "predicted_n")), n);
        if (n == 1) CHECK(rate == 0 && json_real_value(json_object_get(t, "predicted_per_token_ms")) == 0);
        else CHECK(ms > 0 && fabs(rate - 1e3 / ms * (n - 1)) < 1e-6);
        json_decref(answer);
    }
    /* Two assistant turns at the end: which would be continued?  A 400, as
     * llama-server; one at the end, or two apart, are rendered. */
    static const char *const ends[][2] = {
        { "[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}, "
          "{\"role\": \"assistant\", \"content\": \"c\"}]", "400" },
        { "[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]", "200" },
        { "[{\"role\": \"assistant\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}, "
          "{\"role\": \"user\", \"content\": \"c\"}]", "200" },
    };
    for (size_t i = 0; i < ARRAY_LEN(ends); i++) {
        char req[512];
        snprintf(req, sizeof req, "{\"messages\": %s}", ends[i][0]);
        http(port, "POST", "/apply-template", NULL, req, r);
        CHECK_EQ_INT(r->status, atoi(ends[i][1]));
        if (r->status == 400) CHECK(has(r, "two assistant messages"));
        snprintf(req, sizeof req, "{\"messages\": %s, \"max_tokens\": 1}", ends[i][0]);
        http(port, "POST", "/v1/chat/completions", NULL, req, r);
        CHECK_EQ_INT(r->status, atoi(ends[i][1]));
    }

    /* Bodies over the limit: declared, and sent in chunks without a length. */
    char *big = malloc(8192);
    memset(big, ' ', 8191);
    big[0] = '{';
    big[8190] = '}';
    big[8191] = 0;
    http(port, "POST", "/completion", NULL, big, r);
    CHECK_EQ_INT(r->status, 413);
    {
        int fd = connect_to(port);
        const char *head = "POST /completion HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                           "Transfer-Encoding: chunked\r\n\r\n";
        send_all(fd, head, strlen(head));
        char chunk[64];
        for (int i = 0; i < 8; i++) {
            int n = snprintf(chunk, sizeof chunk, "400\r\n");
            send_all(fd, chunk, (size_t)n);
            send_all(fd, big, 1024);
            send_all(fd, "\r\n", 2);
        }
        send_all(fd, "0\r\n\r\n", 5);
        char raw[4096];
        ssize_t k = recv(fd, raw, sizeof raw - 1, 0);
        raw[k > 0 ? k : 0] = 0;
        int status = 0;
        sscanf(raw, "HTTP/1.%*d %d", &status);
        CHECK_EQ_INT(status, 413);
        close(fd);
    }

    /* A prompt longer than a slot. */
    char *longp = malloc(40000);
    int n = sprintf(longp, "{\"prompt\": [");
    for (int i = 0; i < 4200; i++) n += sprintf(longp + n, "%s7", i ? "," : "");
    sprintf(longp + n, "]}");
    srv_free(s);
    sp.max_body_bytes = 1 << 20;
    sp.api_key = "sekret";
    CHECK_EQ_INT(srv_new(&sp, &s, err, sizeof err), PK_OK);
    port = srv_port(s);
    CHECK_EQ_INT(srv_set_engine(s, e, model_path, err, sizeof err), PK_OK);
    const char *auth = "Authorization: Bearer sekret\r\n";
    http(port, "POST", "/completion", auth, longp, r);
    CHECK_EQ_INT(r->status, 400);
    CHECK(has(r, "exceed_context_size_error"));

    /* API key: missing, wrong, right; every route needs it, /health and
     * /slots included (--public-probes opens /health and /metrics, below). */
    http(port, "POST", "/completion", NULL, "{\"prompt\": \"Once\", \"n_predict\": 2}", r);
    CHECK_EQ_INT(r->status, 401);
    CHECK(has(r, "authentication_error"));
    http(port, "POST", "/completion", "Authorization: Bearer wrong\r\n", "{\"prompt\": \"Once\", \"n_predict\": 2}", r);
    CHECK_EQ_INT(r->status, 401);
    http(port, "POST", "/completion", auth, "{\"prompt\": \"Once\", \"n_predict\": 2, \"temperature\": 0}", r);
    CHECK_EQ_INT(r->status, 200);
    CHECK(has(r, "\"tokens_predicted\":2"));
    http(port, "GET", "/health", NULL, NULL, r);
    CHECK_EQ_INT(r->status, 401);
    http(port, "GET", "/health", auth, NULL, r);
    CHECK_EQ_INT(r->status, 200);
    static const char *keyed[] = { "/slots", "/props", "/v1/models", "/polykv/tps", "/polykv/pools",
                                   "/polykv/cache", "/polykv/capacity" };
    for (size_t i = 0; i < ARRAY_LEN(keyed); i++) {
        http(port, "GET", keyed[i], NULL, NULL, r);
        CHECK_EQ_INT(r->status, 401);
        http(port, "GET", keyed[i], "X-Api-Key: sekre\r\n", NULL, r);
        CHECK_EQ_INT(r->status, 401);
    }
    http(port, "POST", "/slots/0?action=erase", NULL, "", r);
    CHECK_EQ_INT(r->status, 401);
    http(port, "GET", "/", NULL, NULL, r);
    CHECK_EQ_INT(r->status, 200);                  /* the page loads; its data calls need the key */
    http(port, "GET", "/slots", "X-Api-Key: sekret\r\n", NULL, r);
    CHECK_EQ_INT(r->status, 200);

    /* A stream stays whole while bad requests come and go. */
    {
        int fd = connect_to(port);
        send_request(fd, "POST", "/completion", auth, "{\"prompt\": \"Once upon a time\", \"n_predict\": 400, "
                     "\"ignore_eos\": true, \"stream\": true, \"temperature\": 0}");
        for (int i = 0; i < 5; i++) {
            http(port, "POST", "/completion", auth, "{\"prompt\": [1, 99999999]}", r);
            CHECK_EQ_INT(r->status, 400);
            http(port, "POST", "/v1/completions", auth, "{\"prompt\": \"x\", \"n\": 30}", r);
            CHECK_EQ_INT(r->status, 400);
        }
        static char raw[1 << 20];
        size_t got = 0;
        ssize_t k;
        while (got < sizeof raw - 1 && (k = recv(fd, raw + got, sizeof raw - 1 - got, 0)) > 0) got += (size_t)k;
        raw[got] = 0;
        close(fd);
        int n_events = 0;
        for (const char *p = raw; (p = strstr(p, "data: {\"index\"")); p++) n_events++;
        CHECK_EQ_INT(n_events, 401);
        CHECK(strstr(raw, "\"stop\":true") != NULL && strstr(raw, "\"tokens_predicted\":400") != NULL);
    }

    /* A client that leaves mid-stream frees its slot. */
    {
        int fd = connect_to(port);
        send_request(fd, "POST", "/completion", auth, "{\"prompt\": \"Once\", \"n_predict\": -1, \"ignore_eos\": "
                     "true, \"stream\": true}");
        char buf[256];
        ssize_t k = recv(fd, buf, sizeof buf, 0);
        CHECK(k > 0);
        close(fd);
        int ms = wait_idle(e, 10000);
        CHECK(ms >= 0);
        int most = most_decoded(e);
        if (most >= eng_n_ctx_slot(e) / 2)
            fprintf(stderr, "streamed: %d tokens decoded after the client left\n", most);
        CHECK(most < eng_n_ctx_slot(e) / 2);
    }
    /* ... and so does one waiting for a whole (non-streamed) answer.  Noticed,
     * it ends within a poll interval (SRV_POLL_MS) of the close; unnoticed, it
     * runs to the end of its slot's context (n_ctx_slot - 2 tokens): either
     * past the 10 s waited, or, on a machine fast enough, with n_decoded over
     * half the slot. */
    {
        int fd = connect_to(port);
        send_request(fd, "POST", "/completion", auth, "{\"prompt\": \"Twice\", \"n_predict\": -1, \"ignore_eos\": "
                     "true}");
        usleep(20000);
        close(fd);
        CHECK(wait_idle(e, 10000) >= 0);
        int most = most_decoded(e);
        if (most >= eng_n_ctx_slot(e) / 2)
            fprintf(stderr, "non-streamed: %d tokens decoded after the client left\n", most);
        CHECK(most < eng_n_ctx_slot(e) / 2);
    }

    http(port, "GET", "/metrics", auth, NULL, r);
    CHECK_EQ_INT(r->status, 200);
    CHECK(has(r, "llamacpp:tokens_predicted_total") && has(r, "vllm:kv_cache_usage_perc{model_name="));
    http(port, "GET", "/metrics", NULL, NULL, r);
    CHECK_EQ_INT(r->status, 401);

    /* --public-probes: /health and /metrics open, nothing else. */
    srv_free(s);
    sp.public_probes = true;
    CHECK_EQ_INT(srv_new(&sp, &s, err, sizeof err), PK_OK);
    port = srv_port(s);
    CHECK_EQ_INT(srv_set_engine(s, e, model_path, err, sizeof err), PK_OK);
    http(port, "GET", "/health", NULL, NULL, r);
    CHECK_EQ_INT(r->status, 200);
    http(port, "GET", "/metrics", NULL, NULL, r);
    CHECK_EQ_INT(r->status, 200);
    http(port, "GET", "/slots", NULL, NULL, r);
    CHECK_EQ_INT(r->status, 401);
    http(port, "POST", "/completion", NULL, "{\"prompt\": \"Once\", \"n_predict\": 1}", r);
    CHECK_EQ_INT(r->status, 401);

    srv_free(s);
    eng_free(e);
    model_free(m);
    free(big);
    free(longp);
    free(r);
}

/* What the request log writes of a client's text: one line, nothing a
 * terminal takes for a command, cut at a whole escape. */
static void test_log_escape(void)
{
    char out[64];
    static const char forged[] = "/x\nsrv: POST /admin 200\r\x1b[31mred\x7f\\";
    pk_log_escape(forged, sizeof forged - 1, out, sizeof out);
    CHECK(!strcmp(out, "/x\\x0asrv: POST /admin 200\\x0d\\x1b[31mred\\x7f\\\\"));
    static const char bytes[] = "caf\xc3\xa9 \xff \xc2\x9b \xe2\x82";       /* é kept; 0xff, C1 CSI, a cut € */
    pk_log_escape(bytes, sizeof bytes - 1, out, sizeof out);
    CHECK(!strcmp(out, "caf\xc3\xa9 \\xff \\xc2\\x9b \\xe2\\x82"));
    char small[8];
    CHECK_EQ_INT(pk_log_escape("ab\ncdefgh", 9, small, sizeof small), 5);
    CHECK(!strcmp(small, "ab..."));                  /* "\x0a" would not fit beside "..." */
    CHECK_EQ_INT(pk_log_escape("abcdefgh", 8, small, sizeof small), 7);
    CHECK(!strcmp(small, "abcd..."));
    CHECK_EQ_INT(pk_log_escape("abc", 3, small, sizeof small), 3);
    CHECK(!strcmp(small, "abc"));
    CHECK_EQ_INT(pk_log_escape("abc", 3, small, 2), 0);
    CHECK(!strcmp(small, ""));
}

/* --api-key-file's lines, the key lookup, and a tenant's session ids. */
static void test_keys(void)
{
    srv_key *keys = NULL;
    int n = 0;
    char err[256];
    static const char file[] = "# comment\r\n\n  alice:ka-1  \nbob:kb-2\r\nops:ko-3:admin\nplain-key\n";
    CHECK_EQ_INT(srv_keys_parse(file, sizeof file - 1, 42, &keys, &n, err, sizeof err), PK_OK);
    CHECK_EQ_INT(n, 4);
    CHECK_STR(keys[0].name, "alice");
    CHECK(!keys[0].admin && !keys[1].admin && keys[2].admin && keys[3].admin);
    CHECK_EQ_INT(srv_key_lookup(keys, n, 42, "kb-2"), 1);
    CHECK_EQ_INT(srv_key_lookup(keys, n, 42, "plain-key"), 3);
    CHECK_EQ_INT(srv_key_lookup(keys, n, 42, "kb-"), -1);
    CHECK_EQ_INT(srv_key_lookup(keys, n, 42, "kb-22"), -1);
    CHECK_EQ_INT(srv_key_lookup(keys, n, 43, "kb-2"), -1);          /* another seed, other digests */
    static const char *const bad[] = {
        "alice:ka\nalice:kb\n",       /* a name twice */
        "alice:ka\nbob:ka\n",         /* a key twice */
        "alice:ka:root\n",            /* the third field */
        "al ice:ka\n",                /* a name's characters */
        "alice:k a\n",                /* a key with a space */
        "alice:\n",                   /* no key */
        ":ka\n",                      /* no name */
        "# only a comment\n\n",       /* no key at all */
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        srv_key *k = NULL;
        int nk = 0;
        err[0] = 0;
        CHECK_EQ_INT(srv_keys_parse(bad[i], strlen(bad[i]), 42, &k, &nk, err, sizeof err), PK_EINVAL);
        CHECK(strstr(err, "--api-key-file") != NULL);
        CHECK(!strstr(err, "ka"));                                  /* a key is never echoed */
        free(k);
    }
    free(keys);

    /* A tenant's ids carry its prefix and fit ENG_SESSION_CAP, or are refused. */
    srv_req r = { .tenant = 0x2a };
    srv_err e;
    char id[ENG_SESSION_CAP] = "agent-7";
    CHECK(srv_tenant_session(&r, "session_id", id, &e));
    CHECK(!strcmp(id, "\x1f" "2a\x1f" "agent-7"));
    CHECK_EQ_INT(srv_session_owner(id), 0x2a);
    CHECK_STR(id, "agent-7");
    memset(id, 's', 59);
    id[59] = 0;
    CHECK(srv_tenant_session(&r, "session_id", id, &e));
    CHECK_EQ_INT(strlen(id), 63);
    memset(id, 's', 60);
    id[60] = 0;
    CHECK(!srv_tenant_session(&r, "session_id", id, &e));
    CHECK_EQ_INT(e.status, 400);
    CHECK_STR(e.param, "session_id");
    id[0] = 0;                                                      /* no session: none */
    CHECK(srv_tenant_session(&r, "session_id", id, &e) && !id[0]);
    srv_req admin = { .tenant = -1 };
    snprintf(id, sizeof id, "agent-7");
    CHECK(srv_tenant_session(&admin, "session_id", id, &e));
    CHECK_STR(id, "agent-7");
    CHECK_EQ_INT(srv_session_owner(id), -1);

    /* Reuse a tenant is told: what it shared with its own pool only. */
    int32_t shown = 0;
    eng_event ev = { .kind = ENG_EV_PLACED, .n_cached = 30, .pool_id = 3, .pool_shared = 12 };
    srv_tenant_mask_event(&ev, &shown);
    CHECK_EQ_INT(ev.n_cached, 12);
    ev = (eng_event){ .kind = ENG_EV_PROGRESS, .n_cached = 30, .n_processed = 40 };
    srv_tenant_mask_event(&ev, &shown);
    CHECK_EQ_INT(ev.n_cached, 12);
    CHECK_EQ_INT(ev.n_processed, 22);
    shown = 0;
    ev = (eng_event){ .kind = ENG_EV_PLACED, .n_cached = 30 };
    srv_tenant_mask_event(&ev, &shown);
    CHECK_EQ_INT(ev.n_cached, 0);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    TEST_RUN(test_log_escape);
    TEST_RUN(test_keys);
    TEST_RUN(test_parse_gen);
    TEST_RUN(test_errors);
    TEST_RUN(test_chat);
    TEST_RUN(test_tool_answers);
    TEST_RUN(test_reasoning_answers);
    TEST_RUN(test_harmony_answers);
    const char *shared = test_shared_dir();
    if (!shared) {
        SKIP_PART("../shared absent: prompt tests (they need a vocabulary) not run");
        SKIP_PART("../shared absent: live-server tests (they need stories260K) not run");
        return test_finish();
    }
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", shared);
    model *m = NULL;
    CHECK_EQ_INT(model_load(path, MODEL_COPY, &m, err, sizeof err), PK_OK);
    if (!m) {
        fprintf(stderr, "%s: %s\n", path, err);
        return test_finish();
    }
    TEST_RUN(test_prompts, model_vocab(m));
    TEST_RUN(test_qwen35_template, model_vocab(m));
    TEST_RUN(test_gpt_oss_template, model_vocab(m));
    TEST_RUN(test_gemma4_template, model_vocab(m));
    model_free(m);
    TEST_RUN(test_live, path);
    return test_finish();
}
