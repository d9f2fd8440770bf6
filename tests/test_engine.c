/*
 * test_engine.c - the engine thread on a real model (stories260K):
 *   - a greedy completion equals greedy decoding with the model directly;
 *   - the same, while 3 other sessions decode in the same batches;
 *   - the prompt cache reuses a slot's common prefix (n_cached);
 *   - a cancelled task frees its slot; stop strings end the text;
 *   - bad submissions are refused; stats add up.
 */
#include "ref.h"

#include <pthread.h>
#include <time.h>

#include "../src/engine/eng.h"

typedef struct collected {
    int32_t tok[256];
    int n_tok;
    char text[4096];
    size_t text_len;
    eng_event done;
} collected;

static void collect(eng_task *t, collected *c)
{
    memset(c, 0, sizeof *c);
    eng_event ev;
    while (eng_task_next(t, &ev, 20000) == PK_OK) {
        if (ev.kind == ENG_EV_TOKEN) {
            if (c->n_tok < 256) c->tok[c->n_tok++] = ev.token;
            if (c->text_len + ev.text_len < sizeof c->text) {
                memcpy(c->text + c->text_len, ev.text, ev.text_len);
                c->text_len += ev.text_len;
            }
            eng_event_clear(&ev);
        } else {
            c->done = ev;
            eng_event_clear(&ev);
            break;
        }
    }
}

static eng_completion greedy_req(const int32_t *p, int n, int n_predict)
{
    eng_completion c = { .prompt = p, .n_prompt = n, .n_predict = n_predict, .cache_prompt = true,
                         .id_slot = -1 };
    c.sp = smp_default_params();
    c.sp.temp = 0;
    return c;
}

/* Polls the engine's stats until no task runs; the deadline (60 s) only
 * catches a hang, it is no bound on the engine's speed. */
static void wait_idle(eng *e, eng_stats *s)
{
    double t0 = pk_time_ms();
    pk_status st;
    while ((st = eng_get_stats(e, s)) == PK_OK && s->n_running > 0 && pk_time_ms() - t0 < 60000) {
        struct timespec pause = { 0, 5 * 1000000L };
        nanosleep(&pause, NULL);
    }
    CHECK_EQ_INT(st, PK_OK);
}

/* A slot restore that cannot find room keeps the history it would have
 * replaced: the file's rows go in beside it first.  Slot 1 holds a short
 * history, slot 0 runs a long task, and the file (a 150-token history
 * saved from slot 0 before) does not fit in what is left even with slot
 * 1's history dropped; the restore is refused and slot 1 still holds its
 * history.  A second restore into a slot with room replaces it. */
static void test_restore_keeps_history(model *m)
{
    const tok_vocab *v = model_vocab(m);
    char text[2048] = "";
    while (strlen(text) < 600) strcat(text, "Lily and Tom went to the park to play with a big red ball. ");
    int32_t lng[512], shrt[64];
    int n_lng, n_shrt;
    ASSERT(tok_encode(v, text, strlen(text), true, false, lng, 512, &n_lng) == PK_OK);
    ASSERT(tok_encode(v, "Once upon a time", 16, true, false, shrt, 64, &n_shrt) == PK_OK);
    n_lng = 150;
    eng_params ep = eng_default_params();
    ep.n_slots = 2;
    ep.n_ctx = 256;
    ep.kv_unified = true;
    ep.n_threads = 1;
    ep.cache_ram_mib = 0;                       /* a dropped history is gone, not spilled */
    eng *e;
    /* Steps of 5 ms: the long task below must still be running when the
     * restore is asked, however late this thread gets the CPU. */
    setenv("POLYKV_TEST_STEP_DELAY_MS", "5", 1);
    ASSERT(eng_new(m, &ep, &e) == PK_OK);
    unsetenv("POLYKV_TEST_STEP_DELAY_MS");
    char dir[] = "/tmp/polykv-restore-XXXXXX";
    ASSERT(mkdtemp(dir));
    eng_task *t;
    collected got;
    eng_file_reply fr;
    eng_stats s;

    eng_completion c = greedy_req(lng, n_lng, 1);
    c.id_slot = 0;
    CHECK(eng_submit(e, &c, &t) == PK_OK);
    collect(t, &got);
    eng_task_release(t);
    CHECK_EQ_INT(eng_slot_save(e, 0, dir, "long.bin", &fr), PK_OK);
    int32_t n_file = fr.n_tokens;
    CHECK(n_file >= n_lng);
    CHECK_EQ_INT(eng_erase(e, 0, NULL), PK_OK);

    c = greedy_req(shrt, n_shrt, 4);
    c.id_slot = 1;
    CHECK(eng_submit(e, &c, &t) == PK_OK);
    collect(t, &got);
    eng_task_release(t);
    wait_idle(e, &s);
    int32_t kept = s.slots[1].hist_tokens;
    CHECK(kept > 0);

    /* Slot 0 busy with a long prompt: free + slot 1's history < the file.
     * Its answer stops where its cells and slot 1's history still fit
     * (150 + 90 + 8 <= 256), so it never makes room by dropping that
     * history, and at 5 ms a step it runs for about half a second. */
    c = greedy_req(lng, n_lng, 90);
    c.id_slot = 0;
    c.ignore_eos = true;
    eng_task *busy;
    CHECK(eng_submit(e, &c, &busy) == PK_OK);
    eng_event ev;
    while (eng_task_next(busy, &ev, 20000) == PK_OK) {        /* its first token: its cells are in */
        bool tok = ev.kind == ENG_EV_TOKEN;
        eng_event_clear(&ev);
        if (tok) break;
    }
    CHECK_EQ_INT(eng_slot_restore(e, 1, dir, "long.bin", &fr), PK_EFULL);
    CHECK(eng_get_stats(e, &s) == PK_OK);
    CHECK_EQ_INT(s.slots[1].hist_tokens, kept);             /* not erased by the refused restore */
    eng_task_cancel(busy);
    eng_task_release(busy);
    wait_idle(e, &s);
    CHECK_EQ_INT(eng_slot_restore(e, 1, dir, "long.bin", &fr), PK_OK);
    CHECK(eng_get_stats(e, &s) == PK_OK);
    CHECK_EQ_INT(s.slots[1].hist_tokens, n_file);
    char path[128];
    snprintf(path, sizeof path, "%s/long.bin", dir);
    unlink(path);
    rmdir(dir);
    eng_free(e);
}

/* The model, the prompts with their greedy runs straight from the model,
 * and one engine (4 slots of 256 positions) that the cases below share. */
static model *g_m;
static eng *g_e;
static int32_t pr[4][64], np[4], want[4][64], nw[4];

static void test_alone(void)
{
    eng_completion c = greedy_req(pr[0], np[0], 40);
    eng_task *t;
    collected got;
    CHECK(eng_submit(g_e, &c, &t) == PK_OK);
    collect(t, &got);
    eng_task_release(t);
    CHECK_EQ_INT(got.done.kind, ENG_EV_DONE);
    CHECK_EQ_INT(got.n_tok, nw[0]);
    CHECK(memcmp(got.tok, want[0], sizeof(int32_t) * (size_t)nw[0]) == 0);
    CHECK_EQ_INT(got.done.n_gen, nw[0]);
    CHECK_EQ_INT(got.done.n_prompt, np[0]);
    eng_stats s;
    CHECK(eng_get_stats(g_e, &s) == PK_OK);
    CHECK(s.n_predicted_tokens >= (uint64_t)nw[0]);
}

/* Four at once: every session still equals its own greedy run. */
static void test_together(void)
{
    eng_task *ts[4];
    collected got;
    for (int i = 0; i < 4; i++) {
        eng_completion c = greedy_req(pr[i], np[i], 40);
        c.cache_prompt = false;
        CHECK(eng_submit(g_e, &c, &ts[i]) == PK_OK);
    }
    for (int i = 0; i < 4; i++) {
        collect(ts[i], &got);
        eng_task_release(ts[i]);
        CHECK_EQ_INT(got.n_tok, nw[i]);
        CHECK(memcmp(got.tok, want[i], sizeof(int32_t) * (size_t)MIN(nw[i], got.n_tok)) == 0);
    }
}

/* The same prompt again reuses all but its last token. */
static void test_prompt_cache(void)
{
    eng_completion c = greedy_req(pr[1], np[1], 4);
    eng_task *t;
    collected got;
    CHECK(eng_submit(g_e, &c, &t) == PK_OK);
    collect(t, &got);
    eng_task_release(t);
    CHECK(eng_submit(g_e, &c, &t) == PK_OK);
    collect(t, &got);
    eng_task_release(t);
    CHECK_EQ_INT(got.done.n_cached, np[1] - 1);
    CHECK(memcmp(got.tok, want[1], 4 * sizeof(int32_t)) == 0);
}

/* The text ends before a stop string and the reason says so. */
static void test_stop_string(void)
{
    eng_completion c = greedy_req(pr[0], np[0], 40);
    c.stop[0] = " little";
    eng_task *t;
    collected got;
    CHECK(eng_submit(g_e, &c, &t) == PK_OK);
    collect(t, &got);
    eng_task_release(t);
    CHECK_EQ_INT(got.done.stop, ENG_STOP_WORD);
    CHECK(strstr(got.text, "little") == NULL);
    CHECK_STR(got.done.stop_word, " little");
}

/* A cancelled task ends with its ERROR and its slot comes back. */
static void test_cancel(void)
{
    eng_completion c = greedy_req(pr[2], np[2], -1);
    c.sp.temp = 0.8f;
    c.ignore_eos = true;
    eng_task *t;
    CHECK(eng_submit(g_e, &c, &t) == PK_OK);
    eng_event ev;
    CHECK(eng_task_next(t, &ev, 20000) == PK_OK);
    eng_event_clear(&ev);
    eng_task_cancel(t);
    pk_status st;
    while ((st = eng_task_next(t, &ev, 20000)) == PK_OK && ev.kind == ENG_EV_TOKEN) eng_event_clear(&ev);
    CHECK(st == PK_OK && ev.kind == ENG_EV_ERROR && ev.status == PK_ECANCELLED);
    eng_event_clear(&ev);
    eng_task_release(t);
    eng_stats s;
    wait_idle(g_e, &s);
    CHECK_EQ_INT(s.n_running, 0);
    CHECK_EQ_INT(s.n_waiting, 0);
    CHECK(s.kv_used > 0 && s.kv_used <= s.kv_total);   /* the cancelled task's cells stay as history */
}

/* Until the context is full (n_predict -1, no context shift): prompt and
 * output fill the slot's 256 positions exactly, as llama-server counts
 * (its test_ctx_shift_disabled_short_prompt: 8 + 248); and a prompt one
 * short of the slot still gets its one token. */
static void test_context_full(void)
{
    static int32_t fill[255];
    for (int i = 0; i < 255; i++) fill[i] = pr[0][i % np[0]];
    for (int k = 0; k < 2; k++) {
        int n_prompt = k ? 255 : 8;
        eng_completion c = greedy_req(fill, n_prompt, -1);
        c.ignore_eos = true;
        eng_task *t;
        CHECK(eng_submit(g_e, &c, &t) == PK_OK);
        collected full;
        collect(t, &full);
        eng_task_release(t);
        CHECK_EQ_INT(full.done.kind, ENG_EV_DONE);
        CHECK_EQ_INT(full.done.n_gen, 256 - n_prompt);
        CHECK_EQ_INT(full.done.stop, ENG_STOP_CTX);
        CHECK(full.done.truncated);
    }
}

/* Refused: empty prompt, bad token, too long for a slot, bad slot, what
 * the sampler refuses. */
static void test_refused(void)
{
    eng_task *t;
    eng_completion c = greedy_req(pr[0], 0, 4);
    CHECK(eng_submit(g_e, &c, &t) == PK_EINVAL);
    int32_t bad = 1 << 20;
    c = greedy_req(&bad, 1, 4);
    CHECK(eng_submit(g_e, &c, &t) == PK_EINVAL);
    static int32_t longp[300];
    for (int i = 0; i < 300; i++) longp[i] = pr[0][i % np[0]];
    c = greedy_req(longp, 300, 4);
    CHECK(eng_submit(g_e, &c, &t) == PK_EINVAL);   /* n_ctx_slot = 256 */
    c = greedy_req(pr[0], np[0], 4);
    c.id_slot = 9;
    CHECK(eng_submit(g_e, &c, &t) == PK_EINVAL);
    c = greedy_req(pr[0], np[0], 4);
    c.sp.repeat_penalty = 0;
    CHECK(eng_submit(g_e, &c, &t) == PK_EINVAL);
}

/* A channel that cannot grow (as out of memory) still ends with its
 * ERROR, and the engine lets the task go.  After the first token the
 * reader stops until the engine reports no task running: the task has
 * ended, by the full channel or (were the cap ignored) after all its
 * tokens, which the count below tells apart. */
static void test_channel_full(void)
{
    eng_completion c = greedy_req(pr[0], np[0], 60);
    c.ignore_eos = true;
    c.test_event_cap = 8;
    eng_task *t;
    eng_event ev;
    eng_stats s;
    CHECK(eng_submit(g_e, &c, &t) == PK_OK);
    int n_tok = 0;
    pk_status st, last = PK_OK;
    while ((st = eng_task_next(t, &ev, 20000)) == PK_OK) {
        if (ev.kind == ENG_EV_TOKEN) n_tok++;
        if (ev.kind == ENG_EV_ERROR) last = ev.status;
        bool end = ev.kind != ENG_EV_TOKEN;
        eng_event_clear(&ev);
        if (end) break;
        if (n_tok == 1) wait_idle(g_e, &s);        /* stop reading: the channel fills */
    }
    CHECK_EQ_INT(st, PK_OK);                       /* not a timeout */
    CHECK_EQ_INT(last, PK_ENOMEM);
    CHECK(n_tok >= 1 && n_tok < 60);
    eng_task_release(t);
    wait_idle(g_e, &s);
    CHECK_EQ_INT(s.n_running, 0);
}

/* A long prompt's reader: the time each step's PROGRESS came. */
typedef struct progress_log {
    eng_task *t;
    double t_ms[64];
    int n;
} progress_log;

static void *read_progress(void *arg)
{
    progress_log *l = arg;
    eng_event ev;
    while (eng_task_next(l->t, &ev, 20000) == PK_OK) {
        bool end = ev.kind == ENG_EV_DONE || ev.kind == ENG_EV_ERROR;
        if (ev.kind == ENG_EV_PROGRESS && ev.n_processed > ev.n_cached && l->n < 64) l->t_ms[l->n++] = pk_time_ms();
        eng_event_clear(&ev);
        if (end) break;
    }
    return NULL;
}

/* Fairness between prompts: a 20-token turn that arrives while a
 * 2,000-token prompt is read (512 tokens a step) gets its first token
 * within 2 steps, not after the long prompt's remaining steps; the long
 * prompt still takes ceil(2020 / 512) = 4 steps.  Steps are stretched to
 * 100 ms (POLYKV_TEST_STEP_DELAY_MS) so the order is plain. */
static void test_short_turn_first(model *m)
{
    setenv("POLYKV_TEST_STEP_DELAY_MS", "100", 1);
    eng_params ep = eng_default_params();
    ep.n_slots = 2;
    ep.n_ctx = 4096;
    ep.n_batch = 512;
    ep.n_threads = 1;
    eng *e;
    ASSERT(eng_new(m, &ep, &e) == PK_OK);
    unsetenv("POLYKV_TEST_STEP_DELAY_MS");
    static int32_t lng[2000], shrt[20];
    for (int i = 0; i < 2000; i++) lng[i] = pr[i % 2][i % np[i % 2]];
    for (int i = 0; i < 20; i++) shrt[i] = pr[3][i % np[3]];
    eng_completion c = greedy_req(lng, 2000, 1);
    c.report_progress = true;
    progress_log log = { 0 };
    CHECK(eng_submit(e, &c, &log.t) == PK_OK);
    pthread_t th;
    ASSERT(pthread_create(&th, NULL, read_progress, &log) == 0);
    double t0 = pk_time_ms();
    while (log.n < 1 && pk_time_ms() - t0 < 60000) {      /* until its first step is done (60 s: a hang) */
        struct timespec ts = { 0, 5 * 1000000L };
        nanosleep(&ts, NULL);
    }
    CHECK(log.n >= 1);
    double t_sent = pk_time_ms();
    c = greedy_req(shrt, 20, 1);
    eng_task *t;
    collected got;
    CHECK(eng_submit(e, &c, &t) == PK_OK);
    collect(t, &got);
    double t_first = pk_time_ms();
    eng_task_release(t);
    CHECK_EQ_INT(got.done.kind, ENG_EV_DONE);
    pthread_join(th, NULL);
    eng_task_release(log.t);
    int between = 0;
    for (int k = 0; k < log.n; k++) between += log.t_ms[k] > t_sent && log.t_ms[k] < t_first;
    printf("fairness: the long prompt read in %d steps; %d of them between the short turn's arrival and its "
           "first token\n", log.n, between);
    CHECK(between <= 2);      /* the step running when it came, and the next one, which reads it */
    CHECK(log.n <= 4);
    eng_free(e);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    const char *shared = test_shared_dir();
    if (!shared) SKIP("../shared/models not found (set POLYKV_SHARED): engine checks need a model");
    char path[512], err[512] = "";
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", shared);
    ASSERT(model_load(path, MODEL_COPY, &g_m, err, sizeof err) == PK_OK);
    const tok_vocab *v = model_vocab(g_m);
    const char *texts[4] = { "Once upon a time", "Lily had a red ball. She", "The sun was", "Tom and his dog" };
    for (int i = 0; i < 4; i++) {
        ASSERT(tok_encode(v, texts[i], strlen(texts[i]), true, false, pr[i], 64, &np[i]) == PK_OK);
        nw[i] = ref_greedy(g_m, pr[i], np[i], 40, want[i]);
    }
    eng_params ep = eng_default_params();
    ep.n_slots = 4;
    ep.n_ctx = 1024;
    ep.n_threads = 2;
    ASSERT(eng_new(g_m, &ep, &g_e) == PK_OK);
    TEST_RUN(test_alone);
    TEST_RUN(test_together);
    TEST_RUN(test_prompt_cache);
    TEST_RUN(test_stop_string);
    TEST_RUN(test_cancel);
    TEST_RUN(test_context_full);
    TEST_RUN(test_refused);
    TEST_RUN(test_channel_full);
    eng_free(g_e);
    TEST_RUN(test_restore_keeps_history, g_m);
    TEST_RUN(test_short_turn_first, g_m);
    model_free(g_m);
    return test_finish();
}
