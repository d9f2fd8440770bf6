/*
 * test_srv_reason.c - splitting <think>...</think> from the answer
 * (srv_reason): what DeepSeek-R1 and Qwen3 write, with the prompt opening
 * <think> or not, unclosed thinking, the four formats; Gemma 4's thought
 * channel, its empty closing block included; and streaming: the
 * text cut into two pieces at every byte (so every tag is cut everywhere),
 * the parts sent as they become safe, must add up to the whole-text split,
 * and what was sent is never taken back.
 */
#include "../src/server/srv_reason.h"
#include "test.h"

typedef struct want { const char *reason, *content; } want;

static void check_split_tags(srv_reasoning f, srv_think_tags t, const char *text, bool inside, want w)
{
    size_t n = strlen(text);
    srv_reason_split r = srv_reason_split_text(f, t, text, n, inside, true);
    char got_r[512], got_c[512];
    snprintf(got_r, sizeof got_r, "%.*s", (int)r.reason_len, text + r.reason_off);
    snprintf(got_c, sizeof got_c, "%.*s", (int)r.content_len, text + r.content_off);
    CHECK_STR(got_r, w.reason);
    CHECK_STR(got_c, w.content);
}

static void check_split(srv_reasoning f, const char *text, bool inside, want w)
{
    check_split_tags(f, SRV_THINK_TAGS, text, inside, w);
}

/* Sends the new bytes of each part of split p of text, as srv_openai does. */
static void send_parts(const char *text, srv_reason_split p, char *r, size_t *n_r, char *c, size_t *n_c)
{
    if (p.reason_len > *n_r) {
        memcpy(r + *n_r, text + p.reason_off + *n_r, p.reason_len - *n_r);
        *n_r = p.reason_len;
    }
    if (p.content_len > *n_c) {
        memcpy(c + *n_c, text + p.content_off + *n_c, p.content_len - *n_c);
        *n_c = p.content_len;
    }
}

/* Streams text cut in two at every byte (cut 0: one byte at a time),
 * sending each part's new bytes at every step and the rest at the end:
 * what the client pieces together is the whole-text split. */
static void check_stream(srv_reasoning f, srv_think_tags t, const char *text, bool inside)
{
    size_t n = strlen(text);
    srv_reason_split whole = srv_reason_split_text(f, t, text, n, inside, true);
    for (size_t cut = 0; cut <= n; cut++) {
        char r[256], c[256];
        size_t n_r = 0, n_c = 0;
        for (size_t len = 1; len <= n; len++) {
            if (cut && len != cut && len != n) continue;
            send_parts(text, srv_reason_split_text(f, t, text, len, inside, false), r, &n_r, c, &n_c);
        }
        send_parts(text, whole, r, &n_r, c, &n_c);
        bool ok = n_r == whole.reason_len && !memcmp(r, text + whole.reason_off, n_r) &&
                  n_c == whole.content_len && !memcmp(c, text + whole.content_off, n_c);
        if (!ok) fprintf(stderr, "stream of \"%s\" cut at %zu (format %d, tags %d, inside %d) diverged\n", text, cut,
                         (int)f, (int)t, inside);
        CHECK(ok);
    }
}

static void test_whole(void)
{
    /* DeepSeek-R1-Distill: the template ends with "<think>\n". */
    check_split(SRV_REASON_DEEPSEEK, "Okay, 2+2 is 4.\n</think>\n\nThe answer is 4.", true,
                (want){ "Okay, 2+2 is 4.\n", "The answer is 4." });
    /* Qwen3: the model opens the tag itself. */
    check_split(SRV_REASON_AUTO, "<think>\nLet me think.\n</think>\n\nHello!", false,
                (want){ "\nLet me think.\n", "Hello!" });
    check_split(SRV_REASON_AUTO, "  <think>x</think>y", false, (want){ "x", "y" });
    /* enable_thinking false: the template wrote an empty block; the answer is plain. */
    check_split(SRV_REASON_AUTO, "Hello there.", false, (want){ "", "Hello there." });
    /* A tag later in the text is content. */
    check_split(SRV_REASON_AUTO, "Use <think> tags.</think> ok", false, (want){ "", "Use <think> tags.</think> ok" });
    /* Cut by the token limit while thinking: all reasoning. */
    check_split(SRV_REASON_DEEPSEEK, "<think>still going", false, (want){ "still going", "" });
    check_split(SRV_REASON_DEEPSEEK, "still going </thi", true, (want){ "still going </thi", "" });
    /* A lone "<thi" that never became a tag is the answer. */
    check_split(SRV_REASON_AUTO, "<thi", false, (want){ "", "<thi" });
    check_split(SRV_REASON_NONE, "<think>a</think>b", false, (want){ "", "<think>a</think>b" });
    check_split(SRV_REASON_DEEPSEEK_LEGACY, "<think>a</think>b", false, (want){ "a", "<think>a</think>b" });
    /* Only the first closing tag ends the thinking. */
    check_split(SRV_REASON_DEEPSEEK, "a</think>b</think>c", true, (want){ "a", "b</think>c" });
    CHECK(srv_reason_prompt_opens("<|Assistant|><think>\n", 21));
    CHECK(!srv_reason_prompt_opens("<think>\n\n</think>\n\n", 19));
    CHECK(!srv_reason_prompt_opens("", 0));
    srv_reasoning f;
    CHECK(srv_reasoning_parse("deepseek-legacy", &f) && f == SRV_REASON_DEEPSEEK_LEGACY);
    CHECK(!srv_reasoning_parse("nothink", &f));
}

static void test_partial(void)
{
    /* Mid-stream the parts hold back what could still change. */
    const char *t = "<think>ab</th";
    srv_reason_split p = srv_reason_split_text(SRV_REASON_AUTO, SRV_THINK_TAGS, t, strlen(t), false, false);
    CHECK_EQ_INT(p.reason_len, 2);
    CHECK_EQ_INT(p.content_len, 0);
    CHECK(p.thinking);
    p = srv_reason_split_text(SRV_REASON_AUTO, SRV_THINK_TAGS, "<th", 3, false, false);
    CHECK_EQ_INT(p.content_len, 0);
    t = "<think>a</think>\n\n";
    p = srv_reason_split_text(SRV_REASON_AUTO, SRV_THINK_TAGS, t, strlen(t), false, false);
    CHECK_EQ_INT(p.reason_len, 1);
    CHECK_EQ_INT(p.content_len, 0);        /* white space after the tag waits */
    CHECK(!p.thinking);
    p = srv_reason_split_text(SRV_REASON_AUTO, SRV_THINK_TAGS, "Hi", 2, false, false);
    CHECK_EQ_INT(p.content_len, 2);
}

static void test_stream(void)
{
    static const char *const texts[] = {
        "<think>\nLet me think.\n</think>\n\nHello!",
        "Okay.\n</think>\n\nThe answer is 4.",
        "Plain answer, no thinking.",
        "<think>unclosed",
        "<thi",
        "a</think>b</think>c",
        "\xe4\xbd\xa0\xe5\xa5\xbd</think>\xe5\x97\xa8",
    };
    for (size_t i = 0; i < ARRAY_LEN(texts); i++)
        for (int f = SRV_REASON_AUTO; f <= SRV_REASON_DEEPSEEK_LEGACY; f++) {
            check_stream((srv_reasoning)f, SRV_THINK_TAGS, texts[i], false);
            check_stream((srv_reasoning)f, SRV_THINK_TAGS, texts[i], true);
        }
    static const char *const channel[] = {
        "<|channel>thought\nLet me think.\n<channel|>Hello!",
        "\n<|channel>thought\n\n<channel|>\n\nHi.",
        "<|channel>thought\nPlan.<channel|>Answer.<|channel>thought\n<channel|>",
        "Answer.\n<|channel>thought\n<channel|>\n",
        "Answer <|channel>thought\nnot empty<channel|> more",
        "Answer <|channel>thought <channel|> then more",
        "<|channel>thought\nunclosed </channel",
        "<|channel>thought\n\nTwo lines.\n\n<channel|>Hi",
        "<|channel>thought\nends with a new line\n",
        "<|chan",
        "No thinking, a <channel|> alone.",
    };
    for (size_t i = 0; i < ARRAY_LEN(channel); i++)
        for (int f = SRV_REASON_AUTO; f <= SRV_REASON_DEEPSEEK_LEGACY; f++) {
            check_stream((srv_reasoning)f, SRV_THINK_CHANNEL, channel[i], false);
            check_stream((srv_reasoning)f, SRV_THINK_CHANNEL, channel[i], true);
        }
}

/* Gemma 4's thought channel: the new lines its template frames the
 * thinking with are not thinking; an empty block at the end of an answer
 * is dropped, one anywhere else (or one that holds thinking) is the
 * answer's text. */
static void test_channel(void)
{
    const srv_think_tags c = SRV_THINK_CHANNEL;
    check_split_tags(SRV_REASON_AUTO, c, "<|channel>thought\nThe user greets me.\n<channel|>Hello!", false,
                     (want){ "The user greets me.", "Hello!" });
    check_split_tags(SRV_REASON_AUTO, c, "<|channel>thought\n\nTwo lines.\n\n<channel|>Hi", false,
                     (want){ "\nTwo lines.\n", "Hi" });
    check_split_tags(SRV_REASON_AUTO, c, "<|channel>thought\nShort.<channel|>\n\nHello!", false,
                     (want){ "Short.", "Hello!" });
    check_split_tags(SRV_REASON_AUTO, c, " \n<|channel>thought\n\n<channel|>Plain.", false, (want){ "", "Plain." });
    check_split_tags(SRV_REASON_AUTO, c, "Hello.", false, (want){ "", "Hello." });
    check_split_tags(SRV_REASON_AUTO, c, "Hello.<|channel>thought\n<channel|>", false, (want){ "", "Hello." });
    check_split_tags(SRV_REASON_AUTO, c, "Hello.\n<|channel>thought <channel|>\n", false, (want){ "", "Hello.\n" });
    check_split_tags(SRV_REASON_AUTO, c, "<|channel>thought\nx<channel|>Hi.<|channel>thought\n<channel|>", false,
                     (want){ "x", "Hi." });
    check_split_tags(SRV_REASON_AUTO, c, "A<|channel>thought\nB<channel|>C", false,
                     (want){ "", "A<|channel>thought\nB<channel|>C" });
    check_split_tags(SRV_REASON_AUTO, c, "A<|channel>thought\n<channel|>C", false,
                     (want){ "", "A<|channel>thought\n<channel|>C" });
    check_split_tags(SRV_REASON_AUTO, c, "<|channel>thought\nstill going", false, (want){ "still going", "" });
    check_split_tags(SRV_REASON_AUTO, c, "Hi<channel|>there", false, (want){ "", "Hi<channel|>there" });
    check_split_tags(SRV_REASON_AUTO, c, "<think>x</think>y", false, (want){ "", "<think>x</think>y" });
    check_split_tags(SRV_REASON_NONE, c, "<|channel>thought\nX<channel|>Y<|channel>thought\n<channel|>", false,
                     (want){ "", "<|channel>thought\nX<channel|>Y<|channel>thought\n<channel|>" });
    check_split_tags(SRV_REASON_DEEPSEEK_LEGACY, c, "<|channel>thought\nX<channel|>Y", false,
                     (want){ "X", "<|channel>thought\nX<channel|>Y" });
    check_split_tags(SRV_REASON_DEEPSEEK, c, "\nstill<channel|>done", true, (want){ "still", "done" });
    /* Mid-stream: the start of a possible closing block waits. */
    const char *t = "Hello.<|channel>thou";
    srv_reason_split p = srv_reason_split_text(SRV_REASON_AUTO, c, t, strlen(t), false, false);
    CHECK_EQ_INT(p.content_len, 6);
    t = "Hello.<|channel>thought\n<channel|>";
    p = srv_reason_split_text(SRV_REASON_AUTO, c, t, strlen(t), false, false);
    CHECK_EQ_INT(p.content_len, 6);
    t = "Hello.<|channel>thought\nno";
    p = srv_reason_split_text(SRV_REASON_AUTO, c, t, strlen(t), false, false);
    CHECK_EQ_INT(p.content_len, strlen(t));
    t = "<|channel>thought\n\n";
    p = srv_reason_split_text(SRV_REASON_AUTO, c, t, strlen(t), false, false);
    CHECK(p.thinking);
    CHECK_EQ_INT(p.reason_len, 0);
    t = "<|channel>thought\nab\n";          /* the new line may be the close's */
    p = srv_reason_split_text(SRV_REASON_AUTO, c, t, strlen(t), false, false);
    CHECK_EQ_INT(p.reason_len, 2);
    p = srv_reason_split_text(SRV_REASON_AUTO, c, t, strlen(t), false, true);
    CHECK_EQ_INT(p.reason_len, 3);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    TEST_RUN(test_whole);
    TEST_RUN(test_partial);
    TEST_RUN(test_stream);
    TEST_RUN(test_channel);
    return test_finish();
}
