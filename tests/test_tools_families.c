/*
 * test_tools_families.c - tool calls of the Mistral, DeepSeek, gpt-oss
 * (harmony), Qwen3.5 (Qwen3-Coder XML) and Gemma 4 formats parsed out of
 * what those models write, the format picked from a template's markers, and
 * streaming: for every family and every cut point of the text, what
 * srv_tools_content_prefix lets out is a prefix of the final content
 * (never taken back), and the calls come out the same as from the whole
 * text; for harmony, the content and reasoning it streams likewise.  The XML and Gemma 4 formats are also checked against their
 * templates: the turns jinja2 renders from known calls
 * (tests/jinja/qwen35/tool_turns.json, tests/jinja/gemma4/turns.json)
 * parse back to those calls; and Gemma 4's against llama.cpp's parser on
 * the same replies (tests/data/gemma4_tools).  The forced-call grammars of
 * both take what their templates write (tests/jinja/gemma4/forced.json
 * for Gemma 4's), and Gemma 4's, walked at random, writes only calls whose
 * arguments are valid under their schema and that the template renders
 * back as written.
 */
#include <ctype.h>

#include "../src/grammar/gram.h"
#include "../src/jinja/jj.h"
#include "../src/server/srv_parse.h"
#include "../src/server/srv_reason.h"
#include "../src/server/srv_tools.h"
#include "schema_check.h"
#include "test.h"
#include "tool_check.h"

#define QWEN35_DIR "tests/jinja/qwen35"
#define GEMMA4_DIR "tests/jinja/gemma4"
#define GEMMA4_REFS "tests/data/gemma4_tools/replies.json"
#define TEST_RNG_SEED 0x2545f4914f6cdd1dull
#include "test_rng.h"

/* The oracle data at path, or NULL with the part skipped (the tests run
 * from the repository root). */
static json_t *load_oracle(const char *path)
{
    json_error_t err;
    json_t *o = json_load_file(path, 0, &err);
    if (!o) SKIP_PART("%s: %.100s (run from the repository root)", path, err.text);
    return o;
}

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

/* What gpt-oss writes after the generation prompt "<|start|>assistant", in
 * the layout its template (llama.cpp's models/templates/openai-gpt-oss-120b.jinja)
 * renders the same turns in: the recipient in the role part of the header
 * right away, a preamble on the commentary channel, a final answer with a
 * constrained format; the end tokens (<|call|>, <|return|>) end generation
 * and are not part of the text. */
static void test_harmony_template(void)
{
    srv_tool_msg m = parse(SRV_TOOL_HARMONY, " to=functions.get_weather<|channel|>commentary json<|message|>"
                                             "{\"city\": \"Paris\", \"unit\": \"celsius\"}");
    CHECK_EQ_INT(m.n_calls, 1);
    check_call(&m, 0, "get_weather", "{\"city\":\"Paris\",\"unit\":\"celsius\"}");
    CHECK_STR(m.content, "");
    CHECK(m.reasoning == NULL);
    srv_tool_msg_free(&m);
    m = parse(SRV_TOOL_HARMONY, "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant to=functions."
                                "get_weather<|channel|>commentary json<|message|>{\"city\": \"Lima\"}");
    check_call(&m, 0, "get_weather", "{\"city\":\"Lima\"}");
    CHECK_STR(m.reasoning, "Need the weather.");
    CHECK_STR(m.content, "");
    srv_tool_msg_free(&m);
    m = parse(SRV_TOOL_HARMONY, "<|channel|>analysis<|message|>Plan.<|end|><|start|>assistant<|channel|>commentary"
                                "<|message|>Let me check.<|end|><|start|>assistant<|channel|>commentary to=functions.now "
                                "<|constrain|>json<|message|>{}");
    check_call(&m, 0, "now", "{}");
    CHECK_STR(m.content, "Let me check.");
    CHECK_STR(m.reasoning, "Plan.");
    srv_tool_msg_free(&m);
    m = parse(SRV_TOOL_HARMONY, "<|channel|>analysis<|message|>JSON wanted.<|end|><|start|>assistant<|channel|>final "
                                "<|constrain|>json<|message|>{\"ok\": true}");
    CHECK_EQ_INT(m.n_calls, 0);
    CHECK_STR(m.content, "{\"ok\": true}");
    CHECK_STR(m.reasoning, "JSON wanted.");
    srv_tool_msg_free(&m);
    /* Cut off while thinking (max_tokens): all reasoning so far. */
    m = parse(SRV_TOOL_HARMONY, "<|channel|>analysis<|message|>Let me think about");
    CHECK_STR(m.content, "");
    CHECK_STR(m.reasoning, "Let me think about");
    srv_tool_msg_free(&m);
    /* A header cut off before its body shows nothing. */
    m = parse(SRV_TOOL_HARMONY, "<|channel|>analysis<|message|>x<|end|><|start|>assistant to=functions.get_wea");
    CHECK_EQ_INT(m.n_calls, 0);
    CHECK_STR(m.content, "");
    srv_tool_msg_free(&m);
}

/* Gemma 4: calls as its template's format_argument prints arguments
 * (bare keys, strings between <|"|> marks, JSON scalars, arrays, dicts). */
static void test_gemma4(void)
{
    srv_tool_msg m = parse(SRV_TOOL_GEMMA4, "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>");
    CHECK_EQ_INT(m.n_calls, 1);
    check_call(&m, 0, "get_weather", "{\"city\":\"Paris\"}");
    CHECK_STR(m.content, "");
    srv_tool_msg_free(&m);

    /* Strings hold anything but the mark, unescaped: commas, braces,
     * colons, JSON quotes, backslashes, new lines, tabs, UTF-8. */
    m = parse(SRV_TOOL_GEMMA4, "<|tool_call>call:write_file{content:<|\"|>a, {b}: \"c\" \\n\n\td\u00fc \xe4\xbd\xa0"
                               "<|\"|>,path:<|\"|>x.txt<|\"|>}<tool_call|>");
    check_call(&m, 0, "write_file", "{\"content\":\"a, {b}: \\\"c\\\" \\\\n\\n\\td\u00fc \xe4\xbd\xa0\","
                                    "\"path\":\"x.txt\"}");
    srv_tool_msg_free(&m);

    /* Nesting, numbers as written, booleans, null (also as the template
     * prints one, None), empty containers. */
    m = parse(SRV_TOOL_GEMMA4, "<|tool_call>call:search{filters:{lang:<|\"|>C<|\"|>,stars:{min:100,max:1.5e3}},"
                               "limit:-10,exact:false,fuzzy:true,since:null,until:None,"
                               "tags:[<|\"|>a<|\"|>,[1,2.50],{},[]],opts:{}}<tool_call|>");
    check_call(&m, 0, "search", "{\"filters\":{\"lang\":\"C\",\"stars\":{\"min\":100,\"max\":1.5e3}},"
                                "\"limit\":-10,\"exact\":false,\"fuzzy\":true,\"since\":null,\"until\":null,"
                                "\"tags\":[\"a\",[1,2.50],{},[]],\"opts\":{}}");
    srv_tool_msg_free(&m);

    /* White space between the parts; a key quoted as a string. */
    m = parse(SRV_TOOL_GEMMA4, "<|tool_call>call:f{ a: 1 , <|\"|>b c<|\"|>: [ 2 , 3 ] }<tool_call|>");
    check_call(&m, 0, "f", "{\"a\":1,\"b c\":[2,3]}");
    srv_tool_msg_free(&m);

    /* Several calls; content before, between and after them kept. */
    m = parse(SRV_TOOL_GEMMA4, "Let me check both.\n<|tool_call>call:get_weather{city:<|\"|>Oslo<|\"|>}<tool_call|>"
                               "<|tool_call>call:now{}<tool_call|>\n<|tool_call>call:get_weather{city:<|\"|>Rome<|\"|>}"
                               "<tool_call|>\nDone.");
    CHECK_EQ_INT(m.n_calls, 3);
    check_call(&m, 0, "get_weather", "{\"city\":\"Oslo\"}");
    check_call(&m, 1, "now", "{}");
    check_call(&m, 2, "get_weather", "{\"city\":\"Rome\"}");
    CHECK_STR(m.content, "Let me check both.\n\n\nDone.");
    srv_tool_msg_free(&m);

    /* Cut off right after the arguments (the close never came). */
    m = parse(SRV_TOOL_GEMMA4, "<|tool_call>call:now{}");
    check_call(&m, 0, "now", "{}");
    srv_tool_msg_free(&m);

    /* Malformed: kept as the model wrote it, no call. */
    static const char *const bad[] = {
        "<|tool_call>call:get_weather{city:<|\"|>Paris}<tool_call|>",      /* string never closed */
        "<|tool_call>call:get_weather{city:Paris}<tool_call|>",             /* a bare word */
        "<|tool_call>call:f{a:01}<tool_call|>",                             /* not JSON numbers */
        "<|tool_call>call:f{a:1.}<tool_call|>",
        "<|tool_call>call:f{a:+1}<tool_call|>",
        "<|tool_call>call:f{a:True}<tool_call|>",
        "<|tool_call>call:f{a:1,}<tool_call|>",                             /* trailing comma */
        "<|tool_call>call:f{a:[1,2}<tool_call|>",
        "<|tool_call>call:f{:1}<tool_call|>",                               /* empty key */
        "<|tool_call>call:f{a:1}junk<tool_call|>",
        "<|tool_call>call:f{a:1",                                            /* cut off */
        "<|tool_call>call:f",
        "<|tool_call>call:{a:1}<tool_call|>",                               /* no name */
        "<|tool_call>call:my tool{}<tool_call|>",
        "<|tool_call>get_weather{}<tool_call|>",                            /* no "call:" */
        "<|tool_call>call:f[1]<tool_call|>",                                /* arguments not a dict */
        "<|tool_call>call:f{a:<|\"|>\xff<|\"|>}<tool_call|>",                /* not UTF-8 */
        "Say <|tool_call> to call.",
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        m = parse(SRV_TOOL_GEMMA4, bad[i]);
        CHECK_EQ_INT(m.n_calls, 0);
        CHECK_STR(m.content, bad[i]);
        srv_tool_msg_free(&m);
    }
    /* A bad call stays content; a good one after it still counts. */
    m = parse(SRV_TOOL_GEMMA4, "<|tool_call>call:f{a:}<tool_call|> <|tool_call>call:g{b:2}<tool_call|>");
    CHECK_EQ_INT(m.n_calls, 1);
    check_call(&m, 0, "g", "{\"b\":2}");
    CHECK_STR(m.content, "<|tool_call>call:f{a:}<tool_call|>");
    srv_tool_msg_free(&m);

    /* Nesting past the limit is refused, not followed down the stack. */
    char deep[2200] = "<|tool_call>call:f{a:";
    size_t k = strlen(deep);
    for (int i = 0; i < 1000; i++) deep[k++] = '[';
    for (int i = 0; i < 1000; i++) deep[k++] = ']';
    strcpy(deep + k, "}<tool_call|>");
    m = parse(SRV_TOOL_GEMMA4, deep);
    CHECK_EQ_INT(m.n_calls, 0);
    srv_tool_msg_free(&m);

    /* Thinking, then a call: srv_reason takes the channel, the rest parses. */
    const char *text = "<|channel>thought\nThe user wants the weather.<channel|>"
                       "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>";
    srv_reason_split rs = srv_reason_split_text(SRV_REASON_AUTO, SRV_THINK_CHANNEL, text, strlen(text), false, true);
    CHECK(rs.reason_len == 27 && !strncmp(text + rs.reason_off, "The user wants the weather.", 27));
    CHECK_EQ_INT(srv_tools_parse(SRV_TOOL_GEMMA4, NULL, text + rs.content_off, rs.content_len, &m), PK_OK);
    check_call(&m, 0, "get_weather", "{\"city\":\"Paris\"}");
    CHECK_STR(m.content, "");
    srv_tool_msg_free(&m);
}

/* A turn a template rendered from known calls ("text", "content", "calls"
 * with their "want" arguments), its thinking split with tags (the prompt
 * opened it: inside) and the rest parsed with f (typed by tools): the
 * thinking must be want_r, the content and calls the turn's. */
static void check_turn(const json_t *t, srv_tool_fmt f, const json_t *tools, srv_think_tags tags, bool inside,
                       const char *want_r)
{
    int fails = test_n_fail;
    const json_t *calls = json_object_get(t, "calls");
    const char *text = json_string_value(json_object_get(t, "text"));
    size_t n = json_string_length(json_object_get(t, "text"));
    srv_reason_split rs = srv_reason_split_text(SRV_REASON_AUTO, tags, text, n, inside, true);
    CHECK_EQ_INT(rs.reason_len, strlen(want_r));
    CHECK(!strncmp(text + rs.reason_off, want_r, rs.reason_len));
    srv_tool_msg m;
    CHECK_EQ_INT(srv_tools_parse(f, tools, text + rs.content_off, rs.content_len, &m), PK_OK);
    CHECK_STR(m.content, json_string_value(json_object_get(t, "content")));
    CHECK_EQ_INT(m.n_calls, (int)json_array_size(calls));
    for (size_t k = 0; k < json_array_size(calls); k++)
        check_call(&m, (int)k, json_string_value(json_object_get(json_array_get(calls, k), "name")),
                   json_string_value(json_object_get(json_array_get(calls, k), "want")));
    if (test_n_fail > fails) fprintf(stderr, "in turn %s\n", json_string_value(json_object_get(t, "name")));
    srv_tool_msg_free(&m);
}

/* Gemma 4's template rendering known turns (jinja2, tests/jinja/gemma4/
 * turns.py), cut where the model's text starts: the thinking, the content
 * (which the template writes after the calls) and the calls must come back
 * as they went in. */
static void test_gemma4_oracle(void)
{
    json_t *o = load_oracle(GEMMA4_DIR "/turns.json");
    if (!o) return;
    const json_t *turns = json_object_get(o, "turns");
    CHECK(json_array_size(turns) >= 8);
    for (size_t i = 0; i < json_array_size(turns); i++) {
        const json_t *t = json_array_get(turns, i);
        const char *want_r = json_string_value(json_object_get(t, "reasoning"));
        check_turn(t, SRV_TOOL_GEMMA4, NULL, SRV_THINK_CHANNEL, false, want_r);
    }
    json_decref(o);
}

/* s[0..n) less the white space at both ends equals want's. */
static bool same_trimmed(const char *s, size_t n, const char *want)
{
    size_t wn = strlen(want);
    while (n && strchr(" \t\r\n", s[0])) s++, n--;
    while (n && strchr(" \t\r\n", s[n - 1])) n--;
    while (wn && strchr(" \t\r\n", want[0])) want++, wn--;
    while (wn && strchr(" \t\r\n", want[wn - 1])) wn--;
    return n == wn && !memcmp(s, want, n);
}

/* Whether a parse (content, reasoning, calls) is the answer w: content and
 * reasoning compared without the white space at their ends (polykv trims
 * content around calls and takes only the template's new lines off the
 * thinking; llama.cpp trims neither the same way), calls exactly. */
static bool same_answer(const srv_tool_msg *m, const char *reason, size_t n_reason, const json_t *w)
{
    const json_t *calls = json_object_get(w, "tool_calls");
    bool ok = same_trimmed(m->content, m->content_len, json_string_value(json_object_get(w, "content"))) &&
              same_trimmed(reason, n_reason, json_string_value(json_object_get(w, "reasoning_content"))) &&
              m->n_calls == (int)json_array_size(calls);
    for (int k = 0; ok && k < m->n_calls; k++) {
        const json_t *c = json_array_get(calls, (size_t)k);
        ok = !strcmp(m->calls[k].name, json_string_value(json_object_get(c, "name"))) &&
             !strcmp(m->calls[k].arguments, json_string_value(json_object_get(c, "arguments")));
    }
    return ok;
}

/* llama.cpp's Gemma 4 parser on hand-written replies (tests/data/
 * gemma4_tools, scripts/refs/make_gemma4_tool_refs.sh): polykv's thinking
 * split and call parse give its answer, except where a case records
 * polykv's own answer and why; there llama.cpp's must indeed differ. */
static void test_gemma4_llama(void)
{
    json_t *cases = load_oracle(GEMMA4_REFS);
    if (!cases) return;
    CHECK(json_array_size(cases) >= 30);
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const json_t *c = json_array_get(cases, i);
        const char *name = json_string_value(json_object_get(c, "name"));
        const char *text = json_string_value(json_object_get(c, "text"));
        size_t n = json_string_length(json_object_get(c, "text"));
        srv_reasoning f = SRV_REASON_AUTO;
        CHECK(srv_reasoning_parse(json_string_value(json_object_get(c, "reasoning_format")), &f));
        srv_tool_fmt fmt = json_is_true(json_object_get(c, "tools")) ? SRV_TOOL_GEMMA4 : SRV_TOOL_NONE;
        srv_reason_split rs = srv_reason_split_text(f, SRV_THINK_CHANNEL, text, n, false, true);
        srv_tool_msg m;
        CHECK_EQ_INT(srv_tools_parse(fmt, NULL, text + rs.content_off, rs.content_len, &m), PK_OK);
        const json_t *ours = json_object_get(c, "polykv"), *llama = json_object_get(c, "want");
        CHECK_STR(json_string_value(json_object_get(c, "format")), "peg-gemma4");
        if (!same_answer(&m, text + rs.reason_off, rs.reason_len, ours ? ours : llama)) {
            fprintf(stderr, "case %s: polykv's parse is not %s's answer\n", name, ours ? "its recorded" : "llama.cpp");
            CHECK(false);
        }
        if (ours && llama && same_answer(&m, text + rs.reason_off, rs.reason_len, llama)) {
            fprintf(stderr, "case %s: llama.cpp now agrees; its polykv answer is not needed\n", name);
            CHECK(false);
        }
        CHECK(ours || llama);
        CHECK(!ours || json_string_length(json_object_get(c, "why")));
        srv_tool_msg_free(&m);
    }
    json_decref(cases);
}

static srv_tool_msg parse_typed(const json_t *tools, const char *text)
{
    srv_tool_msg m;
    CHECK_EQ_INT(srv_tools_parse(SRV_TOOL_QWEN_XML, tools, text, strlen(text), &m), PK_OK);
    return m;
}

/* Text that must stay content, byte for byte, with no call. */
static void check_not_call(const json_t *tools, const char *text)
{
    srv_tool_msg m = parse_typed(tools, text);
    CHECK_EQ_INT(m.n_calls, 0);
    CHECK_STR(m.content, text);
    srv_tool_msg_free(&m);
}

static void test_qwen_xml(void)
{
    json_t *tools = json_loads(
        "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
        "\"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}, "
        "\"zip\": {\"type\": \"string\"}, \"metric\": {\"type\": \"boolean\"}, "
        "\"limit\": {\"anyOf\": [{\"type\": \"integer\"}, {\"type\": \"null\"}]}, "
        "\"opts\": {\"type\": [\"object\", \"null\"]}}}}}, "
        "{\"type\": \"function\", \"function\": {\"name\": \"now\"}}]", 0, NULL);
    ASSERT(tools);
    /* Content before the call; values typed by the schema: a string type
     * keeps digits as text, an integer type reads them. */
    srv_tool_msg m = parse_typed(tools, "I'll check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
                                        "</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=zip>\n75001\n"
                                        "</parameter>\n</function>\n</tool_call>");
    CHECK_EQ_INT(m.n_calls, 1);
    check_call(&m, 0, "get_weather", "{\"city\":\"Paris\",\"days\":3,\"zip\":\"75001\"}");
    CHECK_STR(m.content, "I'll check.");
    srv_tool_msg_free(&m);

    /* Booleans as Python prints them, None and null for a nullable type,
     * an object as written (compact, its order and digits kept). */
    m = parse_typed(tools, "<tool_call>\n<function=get_weather>\n<parameter=metric>\nFalse\n</parameter>\n"
                           "<parameter=limit>\nNone\n</parameter>\n<parameter=opts>\n{\"a\": [1.50, 2e3], \"b\": {}}\n"
                           "</parameter>\n</function>\n</tool_call>");
    check_call(&m, 0, "get_weather", "{\"metric\":false,\"limit\":null,\"opts\":{\"a\":[1.50,2e3],\"b\":{}}}");
    srv_tool_msg_free(&m);

    /* No schema for the parameter (or no tools at all): JSON other than a
     * string is that JSON, anything else a string; a typed value that
     * does not read as its type falls back the same way. */
    m = parse_typed(tools, "<tool_call>\n<function=get_weather>\n<parameter=n>\n42\n</parameter>\n<parameter=s>\nhello\n"
                           "</parameter>\n<parameter=q>\n\"quoted\"\n</parameter>\n<parameter=t>\nTrue\n</parameter>\n"
                           "<parameter=o>\n[1, {\"k\": null}]\n</parameter>\n<parameter=days>\nthree\n</parameter>\n"
                           "<parameter=limit>\n2.5\n</parameter>\n</function>\n</tool_call>");
    check_call(&m, 0, "get_weather", "{\"n\":42,\"s\":\"hello\",\"q\":\"\\\"quoted\\\"\",\"t\":\"True\","
                                     "\"o\":[1,{\"k\":null}],\"days\":\"three\",\"limit\":2.5}");
    srv_tool_msg_free(&m);
    m = parse_typed(NULL, "<tool_call>\n<function=f>\n<parameter=zip>\n75001\n</parameter>\n<parameter=city>\nnull\n"
                          "</parameter>\n</function>\n</tool_call>");
    check_call(&m, 0, "f", "{\"zip\":75001,\"city\":null}");
    srv_tool_msg_free(&m);
    m = parse_typed(tools, "<tool_call>\n<function=get_weather>\n<parameter=city>\nnull\n</parameter>\n</function>\n"
                           "</tool_call>");
    check_call(&m, 0, "get_weather", "{\"city\":\"null\"}");
    srv_tool_msg_free(&m);

    /* Exactly one new line comes off each end; inside, the text is kept
     * and escaped (quotes, backslash, tab, control bytes, UTF-8). */
    m = parse_typed(tools, "<tool_call>\n<function=get_weather>\n<parameter=city>\n\n  Z\xc3\xbcrich \"a\\b\"\t\x01\n\n"
                           "</parameter>\n</function>\n</tool_call>");
    check_call(&m, 0, "get_weather", "{\"city\":\"\\n  Z\xc3\xbcrich \\\"a\\\\b\\\"\\t\\u0001\\n\"}");
    srv_tool_msg_free(&m);

    /* Two calls with text between; a function without parameters; a
     * parameter left unclosed before the next one and before </function>. */
    m = parse_typed(tools, "First:\n<tool_call>\n<function=now>\n</function>\n</tool_call>\nthen\n<tool_call>\n"
                           "<function=get_weather>\n<parameter=city>\nOslo\n<parameter=days>\n2\n</function>\n</tool_call>");
    CHECK_EQ_INT(m.n_calls, 2);
    check_call(&m, 0, "now", "{}");
    check_call(&m, 1, "get_weather", "{\"city\":\"Oslo\",\"days\":2}");
    CHECK_STR(m.content, "First:\n\nthen");
    srv_tool_msg_free(&m);

    /* Two functions in one block; a block cut off right after </function>. */
    m = parse_typed(tools, "<tool_call>\n<function=now>\n</function>\n<function=now>\n</function>\n</tool_call>");
    CHECK_EQ_INT(m.n_calls, 2);
    srv_tool_msg_free(&m);
    m = parse_typed(tools, "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n");
    check_call(&m, 0, "get_weather", "{\"city\":\"Rome\"}");
    srv_tool_msg_free(&m);

    /* Malformed: kept as the model wrote it. */
    check_not_call(tools, "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar");
    check_not_call(tools, "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n");
    check_not_call(tools, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>");
    check_not_call(tools, "<tool_call>\n<function=>\n</function>\n</tool_call>");
    check_not_call(tools, "<tool_call>\n<function=now>\nstray words\n</function>\n</tool_call>");
    check_not_call(tools, "<tool_call>\n<function=now>\n</function>\n<function=bad\n</tool_call>");
    check_not_call(tools, "<tool_call>\n<function=f>\n<parameter=a>\n\xff\n</parameter>\n</function>\n</tool_call>");
    check_not_call(tools, "Use <function=name> and <parameter=x> tags.");
    /* A bad block stays content; a good one after it still counts. */
    m = parse_typed(tools, "<tool_call>\n<function=now\n</tool_call>\n<tool_call>\n<function=now>\n</function>\n"
                           "</tool_call>");
    CHECK_EQ_INT(m.n_calls, 1);
    CHECK_STR(m.content, "<tool_call>\n<function=now\n</tool_call>");
    srv_tool_msg_free(&m);
    json_decref(tools);
}

/* The template's own rendering of known calls (jinja2, tool_turns.py), cut
 * where the model's text starts: the thinking, the content and the calls
 * must come back as they went in. */
static void test_qwen_xml_oracle(void)
{
    json_t *o = load_oracle(QWEN35_DIR "/tool_turns.json");
    if (!o) return;
    const json_t *tools = json_object_get(o, "tools"), *turns = json_object_get(o, "turns");
    CHECK(json_array_size(turns) >= 7);
    for (size_t i = 0; i < json_array_size(turns); i++) {
        const json_t *t = json_array_get(turns, i);
        char want_r[256];
        /* The new line before </think> stays with the thinking. */
        snprintf(want_r, sizeof want_r, "%s\n", json_string_value(json_object_get(t, "reasoning")));
        /* The generation prompt ends inside "<think>\n". */
        check_turn(t, SRV_TOOL_QWEN_XML, tools, SRV_THINK_TAGS, true, want_r);
    }
    json_decref(o);
}

/* tool_choice forcing a call with Qwen3.5's XML form: the grammar takes
 * the form the template prints (parameters in the schema's order, the
 * required ones always, strings as text, other values as JSON), and what
 * it takes parses back into the call; the Hermes JSON form, a missing
 * required parameter, a value of the wrong type, another function and
 * text before the call are refused. */
static void test_qwen_xml_forced(void)
{
    const char *body_src =
        "{\"tool_choice\": \"required\", \"tools\": ["
        "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {"
        "\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, "
        "\"days\": {\"type\": \"integer\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"c\", \"f\"]}, "
        "\"opts\": {\"type\": \"object\", \"properties\": {\"hourly\": {\"type\": \"boolean\"}}}}, "
        "\"required\": [\"city\", \"days\"]}}},"
        "{\"type\": \"function\", \"function\": {\"name\": \"now\"}}]}";
    json_error_t jerr;
    json_t *body = json_loads(body_src, 0, &jerr);
    CHECK(body != NULL);
    gram_grammar *g = NULL;
    srv_err e = {0};
    CHECK(srv_tools_grammar(body, SRV_TOOL_QWEN_XML, &g, &e));
    CHECK(g != NULL);
    static const char *const yes[] = {
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco, x < y\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n-2\n"
        "</parameter>\n<parameter=unit>\nf\n</parameter>\n<parameter=opts>\n{\"hourly\": true}\n</parameter>\n"
        "</function>\n</tool_call>",
        "<tool_call>\n<function=now>\n</function>\n</tool_call>",
    };
    static const char *const want[] = { "{\"city\":\"San Francisco, x < y\",\"days\":3}",
                                        "{\"city\":\"Oslo\",\"days\":-2,\"unit\":\"f\",\"opts\":{\"hourly\":true}}",
                                        "{}" };
    static const char *const no[] = {
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 3}}\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=days>\nthree\n"
        "</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n3\n"
        "</parameter>\n<parameter=unit>\nkelvin\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=get_time>\n</function>\n</tool_call>",
        "Sure.\n<tool_call>\n<function=now>\n</function>\n</tool_call>",
    };
    const json_t *tools = json_object_get(body, "tools");
    for (size_t i = 0; g && i < ARRAY_LEN(yes); i++) {
        CHECK(gram_accepts(g, yes[i], strlen(yes[i])));
        srv_tool_msg m;
        CHECK_EQ_INT(srv_tools_parse(SRV_TOOL_QWEN_XML, tools, yes[i], strlen(yes[i]), &m), PK_OK);
        CHECK_EQ_INT(m.n_calls, 1);
        if (m.n_calls == 1) CHECK_STR(m.calls[0].arguments, want[i]);
        srv_tool_msg_free(&m);
    }
    for (size_t i = 0; g && i < ARRAY_LEN(no); i++) {
        bool ok = gram_accepts(g, no[i], strlen(no[i]));
        if (ok) fprintf(stderr, "forced XML call grammar took: %s\n", no[i]);
        CHECK(!ok);
    }
    gram_free(g);
    /* a named function: only that one */
    json_object_set_new(body, "tool_choice", json_pack("{s:s, s:{s:s}}", "type", "function", "function", "name", "now"));
    CHECK(srv_tools_grammar(body, SRV_TOOL_QWEN_XML, &g, &e));
    CHECK(g && gram_accepts(g, yes[2], strlen(yes[2])) && !gram_accepts(g, yes[0], strlen(yes[0])));
    gram_free(g);
    json_decref(body);
}

/* ---- Gemma 4's forced calls ---- */

static const char G4_OPEN[] = "<|tool_call>", G4_CLOSE[] = "<tool_call|>";

/* The forced-call grammar of tools in Gemma 4's syntax, with tool_choice
 * "required" or the function named only (NULL). */
static gram_grammar *g4_forced_grammar(const json_t *tools, const char *only)
{
    json_t *body = json_pack("{s:O}", "tools", tools);
    if (only) json_object_set_new(body, "tool_choice", json_pack("{s:s, s:{s:s}}", "type", "function", "function",
                                                                 "name", only));
    else json_object_set_new(body, "tool_choice", json_string("required"));
    gram_grammar *g = NULL;
    srv_err e = {0};
    bool ok = srv_tools_grammar(body, SRV_TOOL_GEMMA4, &g, &e);
    if (!ok) fprintf(stderr, "forced Gemma 4 grammar: %d %s\n", e.status, e.msg);
    CHECK(ok && g);
    json_decref(body);
    return g;
}

/* The index of function name among tools, or -1. */
static int g4_tool(const json_t *tools, const char *name)
{
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t)
        if (!strcmp(json_string_value(json_object_get(json_object_get(t, "function"), "name")), name)) return (int)i;
    return -1;
}

/* The parameters schema of function name among tools, or NULL. */
static const json_t *g4_params(const json_t *tools, const char *name)
{
    int k = g4_tool(tools, name);
    return k < 0 ? NULL : json_object_get(json_object_get(json_array_get(tools, (size_t)k), "function"), "parameters");
}

/* tool_choice forcing a call with Gemma 4's template: what the template
 * prints for known calls (jinja2, tests/jinja/gemma4/forced.py: strings
 * with quotes, '<', new lines and non-ASCII text, integers in a range,
 * Python's floats, booleans, None, enums, nested objects and arrays of
 * them, a free-form object, no arguments) is a sentence of the grammar and
 * parses back to the call's arguments, valid under its schema; what the
 * template would never print (the Hermes JSON form, JSON's quotes, null
 * and spaces, keys out of dictsort's order, a required key missing, a
 * value of the wrong type or out of range, numbers Python prints otherwise,
 * a string holding the mark, text around the call) is refused. */
static void test_gemma4_forced(void)
{
    json_t *o = load_oracle(GEMMA4_DIR "/forced.json");
    if (!o) return;
    const json_t *tools = json_object_get(o, "tools"), *calls = json_object_get(o, "calls");
    CHECK(json_array_size(calls) >= 8);
    gram_grammar *g = g4_forced_grammar(tools, NULL);
    size_t i;
    const json_t *c;
    json_array_foreach(calls, i, c) {
        const char *text = json_string_value(json_object_get(c, "text"));
        const char *name = json_string_value(json_object_get(c, "name"));
        bool ok = g && gram_accepts(g, text, strlen(text));
        if (!ok) fprintf(stderr, "forced Gemma 4 grammar refused the template's %s\n", text);
        CHECK(ok);
        srv_tool_msg m = parse(SRV_TOOL_GEMMA4, text);
        CHECK_EQ_INT(m.n_calls, 1);
        CHECK_STR(m.content, "");
        check_call(&m, 0, name, json_string_value(json_object_get(c, "want")));
        json_t *args = m.n_calls ? json_loads(m.calls[0].arguments, 0, NULL) : NULL;
        CHECK(args && schema_valid(g4_params(tools, name), args));
        json_decref(args);
        srv_tool_msg_free(&m);
    }
    static const char *const no[] = {
        "<tool_call>\n{\"name\": \"set_level\", \"arguments\": {\"level\": 4, \"mode\": \"fast\"}}\n</tool_call>",
        "<|tool_call>call:set_level{\"level\":4,\"mode\":\"fast\"}<tool_call|>",
        "<|tool_call>call:set_level{level:4, mode:<|\"|>fast<|\"|>}<tool_call|>",
        "<|tool_call>call:set_level{mode:<|\"|>fast<|\"|>,level:4}<tool_call|>",
        "<|tool_call>call:set_level{level:4}<tool_call|>",
        "<|tool_call>call:set_level{level:101,mode:<|\"|>fast<|\"|>}<tool_call|>",
        "<|tool_call>call:set_level{level:4,mode:<|\"|>slow<|\"|>}<tool_call|>",
        "<|tool_call>call:set_level{level:4,mode:<|\"|>fast<|\"|>,note:<|\"|>thirteen long<|\"|>}<tool_call|>",
        "<|tool_call>call:set_level{level:<|\"|>4<|\"|>,mode:<|\"|>fast<|\"|>}<tool_call|>",
        "<|tool_call>call:book{ratio:null,Title:<|\"|>t<|\"|>,when:{date:<|\"|>2024-01-01<|\"|>}}<tool_call|>",
        "<|tool_call>call:book{title:<|\"|>t<|\"|>,when:{date:<|\"|>2024-01-01<|\"|>}}<tool_call|>",
        "<|tool_call>call:book{price:1.50,Title:<|\"|>t<|\"|>,when:{date:<|\"|>2024-01-01<|\"|>}}<tool_call|>",
        "<|tool_call>call:book{price:1e5,Title:<|\"|>t<|\"|>,when:{date:<|\"|>2024-01-01<|\"|>}}<tool_call|>",
        "<|tool_call>call:book{price:0.00001,Title:<|\"|>t<|\"|>,when:{date:<|\"|>2024-01-01<|\"|>}}<tool_call|>",
        "<|tool_call>call:book{price:-0,Title:<|\"|>t<|\"|>,when:{date:<|\"|>2024-01-01<|\"|>}}<tool_call|>",
        "<|tool_call>call:book{price:01,Title:<|\"|>t<|\"|>,when:{date:<|\"|>2024-01-01<|\"|>}}<tool_call|>",
        "<|tool_call>call:book{Title:<|\"|>t<|\"|>,vip:True,when:{date:<|\"|>2024-01-01<|\"|>}}<tool_call|>",
        "<|tool_call>call:book{Title:<|\"|>t<|\"|>,when:{date:<|\"|>2024-02-30<|\"|>}}<tool_call|>",
        "<|tool_call>call:book{Title:<|\"|>t<|\"|>,when:{hour:3,date:<|\"|>2024-01-01<|\"|>}}<tool_call|>",
        "<|tool_call>call:book{Title:<|\"|>t<|\"|>,when:{date:<|\"|>2024-01-01<|\"|>,hour:24}}<tool_call|>",
        "<|tool_call>call:book{guests:[{name:<|\"|>a<|\"|>},{name:<|\"|>b<|\"|>},{name:<|\"|>c<|\"|>},"
        "{name:<|\"|>d<|\"|>}],Title:<|\"|>t<|\"|>,when:{date:<|\"|>2024-01-01<|\"|>}}<tool_call|>",
        "<|tool_call>call:book{guests:[{age:3}],Title:<|\"|>t<|\"|>,when:{date:<|\"|>2024-01-01<|\"|>}}<tool_call|>",
        "<|tool_call>call:book{tags:[<|\"|>b<|\"|>],Title:<|\"|>t<|\"|>,"
        "when:{date:<|\"|>2024-01-01<|\"|>}}<tool_call|>",
        "<|tool_call>call:book{level:3,Title:<|\"|>t<|\"|>,when:{date:<|\"|>2024-01-01<|\"|>}}<tool_call|>",
        "<|tool_call>call:log{message:<|\"|>a<|\"|>b<|\"|>}<tool_call|>",
        "<|tool_call>call:log{message:\"a\"}<tool_call|>",
        "<|tool_call>call:now{}<tool_call|>\n",
        "Sure.<|tool_call>call:now{}<tool_call|>",
        "<|tool_call>call:now{}",
        "<|tool_call>call:later{}<tool_call|>",
    };
    for (i = 0; g && i < ARRAY_LEN(no); i++) {
        bool ok = gram_accepts(g, no[i], strlen(no[i]));
        if (ok) fprintf(stderr, "forced Gemma 4 grammar took: %s\n", no[i]);
        CHECK(!ok);
    }
    gram_free(g);
    /* a named function: only that one */
    g = g4_forced_grammar(tools, "now");
    const char *now = "<|tool_call>call:now{}<tool_call|>";
    const char *lvl = json_string_value(json_object_get(json_array_get(calls, 0), "text"));
    CHECK(g && gram_accepts(g, now, strlen(now)) && !gram_accepts(g, lvl, strlen(lvl)));
    gram_free(g);
    /* a name its call syntax cannot hold, a string enum holding the mark: refused, naming the tool */
    json_t *body = json_loads("{\"tool_choice\": \"required\", \"tools\": [{\"type\": \"function\", \"function\": "
                              "{\"name\": \"a b\"}}]}", 0, NULL);
    srv_err e = {0};
    CHECK(!srv_tools_grammar(body, SRV_TOOL_GEMMA4, &g, &e) && e.status == 400 && strstr(e.msg, "a b"));
    json_decref(body);
    body = json_loads("{\"tool_choice\": \"required\", \"tools\": [{\"type\": \"function\", \"function\": "
                      "{\"name\": \"f\", \"parameters\": {\"properties\": {\"q\": {\"enum\": [\"<|\\\"|>\"]}}}}}]}",
                      0, NULL);
    CHECK(body && !srv_tools_grammar(body, SRV_TOOL_GEMMA4, &g, &e) && e.status == 400 && strstr(e.msg, "mark"));
    json_decref(body);
    json_decref(o);
}

static uint32_t g4_rnd(uint32_t n) { return next_u32() % n; }

/* Bytes a walk prefers, and how much: structure often, '<' often enough
 * that strings end (and sometimes hold a '<'), a few letters, digits and
 * the lead bytes of 2- and 3-byte characters.  One step in four, and where
 * none of them is allowed (a literal's next byte, a character's
 * continuation), any allowed byte. */
static int g4_weight(int byte)
{
    if (byte && strchr(":,}]", byte)) return 6;
    if (byte == '<') return 5;
    if (byte == '.' || byte == '-') return 3;
    if (byte == 0xC3 || byte == 0xE4 || (byte < 0x80 && isalnum(byte))) return 1;
    if (byte && strchr("{[_ +\"|>\n\t\\'", byte)) return 1;
    return 0;
}

/* One random sentence of g (a byte-per-token vocabulary v: token b is the
 * byte b, token 256 the end) into out, or false when it ran past cap.
 * Once a '<' is written, the rest of Gemma 4's string mark is taken 7
 * times in 8 where allowed, so strings end without walks of thousands. */
static bool g4_walk(gram_grammar *g, gram_vocab *v, char *out, size_t cap, size_t *n_out)
{
    static const char mark[] = "<|\"|>";
    gram_matcher *m = NULL;
    CHECK_EQ_INT(gram_matcher_new(g, v, &m), PK_OK);
    size_t n = 0;
    bool ended = false;
    while (m && n + 1 < cap && !ended) {
        const uint64_t *mask = gram_matcher_mask(m);
        CHECK(mask != NULL);
        if (!mask) break;
        int allowed[256], na = 0, w_sum = 0, next = -1;
        for (int b = 1; b < 256; b++)
            if (mask[b / 64] >> (b % 64) & 1) { allowed[na++] = b; w_sum += g4_weight(b); }
        bool can_end = mask[256 / 64] >> (256 % 64) & 1;
        if (can_end && (!na || g4_rnd(4) == 0)) { ended = true; break; }
        CHECK(na > 0);
        if (!na) break;
        for (size_t p = 1; p < sizeof mark - 1 && next < 0; p++)
            if (n >= p && !memcmp(out + n - p, mark, p) && mask[mark[p] / 64] >> (mark[p] % 64) & 1 && g4_rnd(8))
                next = mark[p];
        if (next < 0 && w_sum && g4_rnd(4)) {
            int r = (int)g4_rnd((uint32_t)w_sum);
            for (int k = 0; k < na && next < 0; k++)
                if ((r -= g4_weight(allowed[k])) < 0) next = allowed[k];
        }
        if (next < 0) next = allowed[g4_rnd((uint32_t)na)];
        CHECK_EQ_INT(gram_matcher_accept(m, next), PK_OK);
        out[n++] = (char)next;
        ended = gram_matcher_done(m);
    }
    ended = ended && gram_matcher_can_end(m);
    gram_matcher_free(m);
    *n_out = n;
    out[n] = 0;
    return ended;
}

/* Whether a schema holds an object without properties, whose keys the
 * model writes in its own order (the template would sort them). */
static bool g4_has_free_object(const json_t *s)
{
    if (!json_is_object(s)) return false;
    const json_t *t = json_object_get(s, "type");
    if (json_is_string(t) && !strcmp(json_string_value(t), "object") &&
        !json_object_size(json_object_get(s, "properties")))
        return true;
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)s, k, x) {
        if (g4_has_free_object(x)) return true;
        size_t i;
        json_t *y;
        if (json_is_array(x)) json_array_foreach(x, i, y) if (g4_has_free_object(y)) return true;
    }
    return false;
}

/* The call the template prints for an assistant turn calling name with
 * args (polykv's Jinja, which renders this template as jinja2 does), into
 * out (malloc'd), or NULL. */
static char *g4_render_call(const jj_tmpl *t, const json_t *tools, const char *name, const json_t *args)
{
    json_t *ctx = json_pack("{s:[{s:s, s:s}, {s:s, s:s, s:[{s:s, s:s, s:{s:s, s:O}}]}], s:O, s:b, s:s, s:s, s:b}",
                            "messages", "role", "user", "content", "Please help.", "role", "assistant", "content", "",
                            "tool_calls", "id", "call_0", "type", "function", "function", "name", name, "arguments",
                            args, "tools", tools, "add_generation_prompt", 0, "bos_token", "<bos>", "eos_token",
                            "<eos>", "enable_thinking", 1);
    char *text = NULL, *call = NULL, msg[200];
    size_t n;
    CHECK_EQ_INT(jj_render(t, ctx, NULL, &text, &n, msg, sizeof msg), PK_OK);
    const char *a = text ? strstr(text, G4_OPEN) : NULL, *z = a ? strstr(a, G4_CLOSE) : NULL;
    if (z) call = strndup(a, (size_t)(z - a) + strlen(G4_CLOSE));
    free(text);
    json_decref(ctx);
    return call;
}

/* The forced-call grammar of forced.json's tools walked at random: every
 * sentence parses back into one call of a tool, its arguments valid under
 * the tool's schema, and is what the template prints for those arguments
 * (byte for byte; for a free-form object, whose keys the template sorts,
 * the same arguments again). */
static void test_gemma4_forced_walk(void)
{
    json_t *o = load_oracle(GEMMA4_DIR "/forced.json");
    char *src = NULL;
    FILE *f = fopen(GEMMA4_DIR "/chat_template.jinja", "rb");
    size_t n_src = 0;
    if (f && !fseek(f, 0, SEEK_END) && (n_src = (size_t)ftell(f)) && !fseek(f, 0, SEEK_SET) &&
        (src = malloc(n_src)) && fread(src, 1, n_src, f) != n_src) n_src = 0;
    if (f) fclose(f);
    if (!o || !n_src) {
        if (o) SKIP_PART(GEMMA4_DIR "/chat_template.jinja absent (run from the repository root)");
        json_decref(o);
        free(src);
        return;
    }
    char msg[200];
    jj_tmpl *t = NULL;
    CHECK_EQ_INT(jj_compile(src, n_src, &t, msg, sizeof msg), PK_OK);
    free(src);
    /* A vocabulary of bytes: token b (1..255) is the byte b, token 0 has
     * none (never allowed), token 256 ends the generation. */
    static char bytes[255];
    int64_t off[258] = {0};
    bool eog[257] = { [256] = true };
    for (int b = 1; b < 256; b++) { bytes[b - 1] = (char)b; off[b] = b - 1; }
    off[256] = off[257] = 255;
    gram_vocab *v = NULL;
    CHECK_EQ_INT(gram_vocab_new(257, bytes, off, eog, &v), PK_OK);
    const json_t *tools = json_object_get(o, "tools");
    /* "required" first, then each function named, so each is walked often */
    size_t n_tools = json_array_size(tools);
    gram_grammar *g = NULL;
    int n_done = 0, n_exact = 0, n_runs = 0, per_tool[8] = {0};
    static char text[8192];
    for (int run = 0; run < 100 * (int)(n_tools + 1) && v && t; run++) {
        if (run % 100 == 0) {
            gram_free(g);
            const json_t *fn = run ? json_object_get(json_array_get(tools, (size_t)run / 100 - 1), "function") : NULL;
            g = g4_forced_grammar(tools, fn ? json_string_value(json_object_get(fn, "name")) : NULL);
        }
        if (!g) break;
        n_runs++;
        size_t n;
        if (!g4_walk(g, v, text, sizeof text, &n)) continue;
        n_done++;
        int fails = test_n_fail;
        srv_tool_msg m;
        CHECK_EQ_INT(srv_tools_parse(SRV_TOOL_GEMMA4, tools, text, n, &m), PK_OK);
        CHECK_EQ_INT(m.n_calls, 1);
        CHECK_STR(m.content, "");
        const json_t *params = m.n_calls == 1 ? g4_params(tools, m.calls[0].name) : NULL;
        json_t *args = m.n_calls == 1 ? json_loads(m.calls[0].arguments, 0, NULL) : NULL;
        CHECK(params && args && schema_valid(params, args));
        int k = params ? g4_tool(tools, m.calls[0].name) : -1;
        if (k >= 0 && k < (int)ARRAY_LEN(per_tool)) per_tool[k]++;
        char *back = params && args ? g4_render_call(t, tools, m.calls[0].name, args) : NULL;
        CHECK(back != NULL);
        if (back && !g4_has_free_object(params)) {
            CHECK_STR(back, text);
            n_exact++;
        } else if (back) {
            srv_tool_msg m2 = parse(SRV_TOOL_GEMMA4, back);
            json_t *args2 = m2.n_calls == 1 ? json_loads(m2.calls[0].arguments, 0, NULL) : NULL;
            CHECK(args2 && json_equal(args, args2));
            json_decref(args2);
            srv_tool_msg_free(&m2);
        }
        if (test_n_fail > fails || getenv("G4_WALK_SHOW")) fprintf(stderr, "  walk %d wrote: %s\n", run, text);
        free(back);
        json_decref(args);
        srv_tool_msg_free(&m);
    }
    printf("forced Gemma 4 walks: %d of %d complete, %d rendered back byte for byte; per tool %d %d %d %d\n", n_done,
           n_runs, n_exact, per_tool[0], per_tool[1], per_tool[2], per_tool[3]);
    CHECK(n_runs == 500 && n_done >= 450);
    for (int k = 0; k < 4; k++) CHECK(per_tool[k] >= 100);
    gram_free(g);
    gram_vocab_free(v);
    jj_free(t);
    json_decref(o);
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
    CHECK_EQ_INT(srv_tools_detect("'<tool_call>\n<function=' + n + '>\n' ... '<parameter=' + k", SRV_TOOL_QWEN),
                 SRV_TOOL_QWEN_XML);
    CHECK_EQ_INT(srv_tools_detect("{{- '<|tool_call>call:' + function['name'] + '{' -}}", SRV_TOOL_QWEN),
                 SRV_TOOL_GEMMA4);
    /* Qwen3.5's template carries <tool_call> too: the XML form must win. */
    FILE *f = fopen(QWEN35_DIR "/chat_template.jinja", "rb");
    if (!f) {
        SKIP_PART(QWEN35_DIR "/chat_template.jinja absent (run from the repository root)");
        return;
    }
    static char src[16384];
    size_t n = fread(src, 1, sizeof src - 1, f);
    fclose(f);
    src[n] = 0;
    CHECK(n > 0 && n < sizeof src - 1);
    CHECK_EQ_INT(srv_tools_detect(src, SRV_TOOL_QWEN), SRV_TOOL_QWEN_XML);
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
    check_stream(SRV_TOOL_HARMONY, " to=functions.now<|channel|>commentary json<|message|>{}", 1);
    check_stream(SRV_TOOL_QWEN, "Checking.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", 1);
    check_stream(SRV_TOOL_LLAMA3, "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"a\": 1}}", 1);
    check_stream(SRV_TOOL_QWEN_XML, "Checking.\n\n<tool_call>\n<function=f>\n<parameter=a>\nx < y\n</parameter>\n"
                                    "</function>\n</tool_call>", 1);
    check_stream(SRV_TOOL_QWEN_XML, "Plain <b>text</b> with <tool_", 0);
    check_stream(SRV_TOOL_GEMMA4, "Checking.\n<|tool_call>call:f{a:<|\"|>x<|\"|>}<tool_call|>"
                                  "<|tool_call>call:g{}<tool_call|>", 2);
    check_stream(SRV_TOOL_GEMMA4, "Plain <|text|> with <|tool_", 0);
    CHECK_EQ_INT(srv_tools_content_prefix(SRV_TOOL_GEMMA4, "Hi <|tool_c", 11), 2);
    CHECK_EQ_INT(srv_tools_content_prefix(SRV_TOOL_GEMMA4, "Hi\n<|tool_call>call:f{", 23), 2);
    CHECK_EQ_INT(srv_tools_content_prefix(SRV_TOOL_QWEN_XML, "Hi <tool_c", 10), 2);
    CHECK_EQ_INT(srv_tools_content_prefix(SRV_TOOL_QWEN_XML, "Hi\n<tool_call>\n<function=f>", 27), 2);
}

/* Harmony streamed: at every length of the text so far, what
 * srv_tools_harmony_prefix lets out (content and reasoning) only grows and
 * is a prefix of the whole text's parse; with `early`, the text just before
 * its end already lets out all of it but what the end changes (the last
 * byte and a final partial marker), so it does stream. */
static void check_harmony_stream(const char *text, bool early)
{
    size_t n = strlen(text);
    srv_tool_msg whole = parse(SRV_TOOL_HARMONY, text);
    const char *want_r = whole.reasoning ? whole.reasoning : "";
    size_t n_r = whole.reasoning_len;
    pk_buf c = {0}, r = {0};
    size_t sent_c = 0, sent_r = 0;
    bool ok = true;
    for (size_t len = 0; len <= n && ok; len++) {
        CHECK_EQ_INT(srv_tools_harmony_prefix(text, len, &c, &r), PK_OK);
        ok = c.n >= sent_c && c.n <= whole.content_len && !memcmp(c.p, whole.content, c.n) && r.n >= sent_r &&
             r.n <= n_r && !memcmp(r.p, want_r, r.n);
        if (!ok)
            fprintf(stderr, "harmony at %zu bytes: content \"%s\" reasoning \"%s\" against \"%s\" / \"%s\"\n", len,
                    c.p, r.p, whole.content, want_r);
        sent_c = c.n;
        sent_r = r.n;
    }
    CHECK(ok);
    if (early) CHECK(sent_c + sent_r + 1 >= whole.content_len + n_r);
    pk_buf_free(&c);
    pk_buf_free(&r);
    srv_tool_msg_free(&whole);
}

static void test_harmony_stream(void)
{
    /* The layouts of test_harmony_template, and a preamble before a call. */
    check_harmony_stream("<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final"
                         "<|message|>Hello there!", true);
    check_harmony_stream("<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant to=functions."
                         "get_weather<|channel|>commentary json<|message|>{\"city\": \"Lima\"}", false);
    check_harmony_stream("<|channel|>analysis<|message|>Plan.<|end|><|start|>assistant<|channel|>commentary"
                         "<|message|>Let me check. <|end|><|start|>assistant<|channel|>commentary to=functions.now "
                         "<|constrain|>json<|message|>{}", false);
    check_harmony_stream("<|channel|>analysis<|message|>JSON wanted.<|end|><|start|>assistant<|channel|>final "
                         "<|constrain|>json<|message|>{\"ok\": true}", true);
    check_harmony_stream("<|channel|>analysis<|message|>Let me think about <|tags|> and <|", false);
    check_harmony_stream(" to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}", true);
    /* Two analysis messages and text between messages that is no body. */
    check_harmony_stream("<|channel|>analysis<|message|>A<|end|>stray<|start|>assistant<|channel|>analysis"
                         "<|message|>B <|end|><|start|>assistant<|channel|>final<|message|>C\n", true);
    /* Malformed: plain text, a header never closed, markers in odd places. */
    check_harmony_stream("plain words, no messages", false);
    check_harmony_stream("Hi <|start|>assistant<|channel|>final<|message|>x<|call|>tail", true);
    check_harmony_stream("<|channel|>final<|channel|>analysis<|message|><|message|>y<|end|><|end|>", true);
    check_harmony_stream("<|channel|>final to=<|message|>z<|return|>", true);
    check_harmony_stream("<|channel|>final<|message|>body then a cut header <|start|>assistant<|chan", true);
    pk_buf c = {0}, r = {0};
    /* A partial marker waits; once it turns out not to be one it goes. */
    CHECK_EQ_INT(srv_tools_harmony_prefix("<|channel|>final<|message|>a<|en", 32, &c, &r), PK_OK);
    CHECK_STR(c.p, "a");
    CHECK_EQ_INT(srv_tools_harmony_prefix("<|channel|>final<|message|>a<|en>", 33, &c, &r), PK_OK);
    CHECK_STR(c.p, "a<|en>");
    /* The recipient before the first channel: nothing shown of it. */
    CHECK_EQ_INT(srv_tools_harmony_prefix(" to=functions.f<|chan", 21, &c, &r), PK_OK);
    CHECK_EQ_INT(c.n + r.n, 0);
    pk_buf_free(&c);
    pk_buf_free(&r);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    TEST_RUN(test_mistral);
    TEST_RUN(test_deepseek);
    TEST_RUN(test_harmony);
    TEST_RUN(test_harmony_template);
    TEST_RUN(test_harmony_stream);
    TEST_RUN(test_gemma4);
    TEST_RUN(test_gemma4_oracle);
    TEST_RUN(test_gemma4_llama);
    TEST_RUN(test_qwen_xml);
    TEST_RUN(test_qwen_xml_oracle);
    TEST_RUN(test_qwen_xml_forced);
    TEST_RUN(test_gemma4_forced);
    TEST_RUN(test_gemma4_forced_walk);
    TEST_RUN(test_detect);
    TEST_RUN(test_stream);
    return test_finish();
}
