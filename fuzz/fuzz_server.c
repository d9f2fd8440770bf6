/*
 * fuzz_server.c - libFuzzer entry for what the server does with a client's
 * bytes before any model is involved: the request body as JSON through
 * generation-parameter validation and chat rendering (ChatML and Llama 3.1,
 * with tools), and the same bytes as generated text through tool-call
 * parsing in both formats, checking the streaming hold-back invariant.
 *
 * Build and run (after `make`; the server files get the sanitizers, the
 * rest comes from build/libpolykv.a):
 *   clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
 *     fuzz/fuzz_server.c src/server/*.c src/tokenizer/tmpl_tools.c src/tokenizer/tmpl.c \
 *     src/common/utf8.c build/libpolykv.a -ljansson -lmicrohttpd -lm -pthread -o build-fuzz/fuzz_server
 *   build-fuzz/fuzz_server CORPUS_DIR -max_total_time=60 -max_len=4096
 */
#include <stdlib.h>
#include <string.h>

#include "../src/server/srv_impl.h"

static void tools(srv_tool_fmt f, const char *s, size_t n)
{
    srv_tool_msg m;
    if (srv_tools_parse(f, s, n, &m) != PK_OK) return;
    /* What streaming sends early is a prefix of the final content. */
    size_t k = srv_tools_content_prefix(f, s, n);
    if (k > n) abort();
    if (m.n_calls == 0 && (m.content_len != n || memcmp(m.content, s, n))) abort();
    for (int i = 0; i < m.n_calls; i++)
        if (!m.calls[i].name || !m.calls[i].arguments) abort();
    srv_tool_msg_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    tools(SRV_TOOL_QWEN, s, size);
    tools(SRV_TOOL_LLAMA3, s, size);

    json_t *body = json_loadb(s, size, 0, NULL);
    if (!json_is_object(body)) {
        json_decref(body);
        return 0;
    }
    eng_completion c;
    srv_gen_opts o;
    srv_err e;
    for (srv_api api = SRV_API_NATIVE; api <= SRV_API_OAI_CHAT; api++) srv_parse_gen(body, api, 4, &c, &o, &e);
    for (tmpl_kind k = TMPL_CHATML; k <= TMPL_LLAMA3; k++) {
        char *prompt = NULL;
        size_t n = 0;
        srv_tool_fmt fmt;
        if (srv_render_chat(body, k, NULL, &prompt, &n, &fmt, &e)) {
            if (!prompt || strlen(prompt) != n) abort();
            free(prompt);
        } else if (e.status < 400 || e.status > 500) {
            abort();
        }
    }
    json_decref(body);
    return 0;
}
