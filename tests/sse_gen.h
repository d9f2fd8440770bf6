/*
 * sse_gen.h - a generation's event stream without a model, for the tests of
 * the streamed APIs (test_srv_anthropic.c, test_srv_responses.c):
 *   sse_feed    hands text[0..n) to a stream writer as one token event,
 *               appended to the generation's text as the engine would;
 *   sse_events  the generation's output read back as named events,
 *               [{"event": name, "data": {...}}], checking the framing
 *               ("event: " line, "data: " line, blank line).
 */
#ifndef SSE_GEN_H
#define SSE_GEN_H

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "../src/server/srv_gen.h"
#include "test.h"

typedef void (*sse_writer)(srv_gen *g, const eng_event *ev);

static inline void sse_feed(srv_gen *g, sse_writer write, const char *text, size_t n)
{
    g->text = realloc(g->text, g->n_text + n + 1);
    ASSERT(g->text);
    memcpy(g->text + g->n_text, text, n);
    g->n_text += n;
    g->text[g->n_text] = 0;
    g->n_tokens++;
    eng_event ev = { .kind = ENG_EV_TOKEN, .text = (char *)text, .text_len = n, .token = 1 };
    write(g, &ev);
}

static inline json_t *sse_events(const srv_gen *g)
{
    json_t *a = json_array();
    const char *p = g->out, *end = g->out + g->n_out;
    while (p < end) {
        const char *nl = strchr(p, '\n'), *q = strstr(p, "\n\n");
        ASSERT(nl && q && !strncmp(p, "event: ", 7) && !strncmp(nl + 1, "data: ", 6));
        json_t *data = json_loadb(nl + 7, (size_t)(q - nl - 7), 0, NULL);
        ASSERT(data);
        json_array_append_new(a, json_pack("{s:s%, s:o}", "event", p + 7, (size_t)(nl - p - 7), "data", data));
        p = q + 2;
    }
    return a;
}

#endif
