/*
 * srv_fmt.c - how each API shapes a generation's answer: one row per
 * srv_api.  srv_gen.c runs every generation the same way and asks this
 * table for the shape: the id's prefix, the whole answer, a streamed token,
 * a stream's end, its error event, its progress chunk, and the last event
 * that needs no memory.  The formats' own files (srv_openai.c,
 * srv_native.c, srv_responses.c, srv_anthropic_out.c) build the JSON; they
 * call srv_gen's output helpers, never srv_gen's loop, so the dependency
 * runs one way: srv_gen.c -> this table -> the formats.
 */
#include "srv_gen.h"

/* ---- the OpenAI-shaped progress chunk and error event ---- */

static json_t *progress_envelope(srv_gen *g, const char *object)
{
    return json_pack("{s:s, s:s, s:I, s:s, s:[]}", "id", g->id, "object", object, "created",
                     (json_int_t)g->created, "model", g->o.model, "choices");
}

static json_t *oai_cmpl_progress(srv_gen *g, const eng_event *ev)
{
    return progress_envelope(g, "text_completion");
}

static json_t *oai_chat_progress(srv_gen *g, const eng_event *ev)
{
    return progress_envelope(g, "chat.completion.chunk");
}

static json_t *native_progress(srv_gen *g, const eng_event *ev)
{
    return json_pack("{s:i, s:s, s:[], s:b, s:i, s:i, s:i}", "index", 0, "content", "", "tokens", "stop", 0,
                     "id_slot", ev->slot, "tokens_predicted", 0, "tokens_evaluated", ev->n_prompt);
}

static json_t *resp_progress(srv_gen *g, const eng_event *ev)
{
    return srv_resp_progress_event(g);
}

static void oai_stream_error(srv_gen *g)
{
    srv_gen_sse(g, srv_error_json(&g->err));
}

static void resp_stream_error(srv_gen *g)
{
    srv_resp_sse(g, srv_resp_error_event(&g->err));
}

static const char oom_event[] =
    "data: {\"error\":{\"code\":500,\"message\":\"out of memory\",\"type\":\"server_error\"}}\n\n";
static const char oom_event_anth[] =
    "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"out of memory\"}}\n\n";

static const srv_fmt fmts[] = {
    [SRV_API_NATIVE] = { "cmpl-", srv_native_response, srv_native_stream_token, srv_native_stream_end,
                         oai_stream_error, native_progress, srv_gen_sse, oom_event, true, true },
    [SRV_API_OAI_CMPL] = { "cmpl-", srv_oai_response, srv_oai_stream_token, srv_oai_stream_end,
                           oai_stream_error, oai_cmpl_progress, srv_gen_sse, oom_event, false },
    [SRV_API_OAI_CHAT] = { "chatcmpl-", srv_oai_response, srv_oai_stream_token, srv_oai_stream_end,
                           oai_stream_error, oai_chat_progress, srv_gen_sse, oom_event, false },
    [SRV_API_OAI_RESP] = { "resp_", srv_resp_response, srv_resp_stream_token, srv_resp_stream_end,
                           resp_stream_error, resp_progress, srv_resp_sse, oom_event, false },
    [SRV_API_ANTHROPIC] = { "msg_", srv_anth_response, srv_anth_stream_token, srv_anth_stream_end,
                            srv_anth_stream_error, oai_cmpl_progress, srv_gen_sse, oom_event_anth, false },
};

const srv_fmt *srv_fmt_of(srv_api api)
{
    ASSERT(api >= SRV_API_NATIVE && api <= SRV_API_ANTHROPIC);
    return &fmts[api];
}
