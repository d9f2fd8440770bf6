/*
 * srv_multi.c - the shapes of a completion request's "prompt" beyond one
 * string or one token list: llama.cpp's {"prompt_string": ...} object and
 * arrays of several prompts (each answered, in order, by srv_gen_run_multi).
 *
 * Which array is which (llama-server's rule): an array holding a number
 * at its top level is one prompt mixing ids and strings; any other array
 * is a list of prompts, each a string, an id list, a mixed list or an
 * object.
 */
#include <stdlib.h>
#include <string.h>

#include "srv_parse.h"

/* The prompt of one element: itself, or an object's "prompt_string"
 * (NULL, with e, for none). */
static const json_t *unwrap(const json_t *p, srv_err *e)
{
    if (!p || json_is_null(p)) {
        srv_fail(e, 400, "prompt", "'prompt' is required");
        return NULL;
    }
    if (!json_is_object(p)) return p;
    const json_t *mm = json_object_get(p, "multimodal_data");
    if (mm && !json_is_null(mm) && !(json_is_array(mm) && !json_array_size(mm))) {
        srv_fail(e, 400, "prompt", "multimodal_data: this server has no multimodal support");
        return NULL;
    }
    const json_t *s = json_object_get(p, "prompt_string");
    if (!json_is_string(s)) {
        srv_fail(e, 400, "prompt", "a prompt object must hold a string 'prompt_string'");
        return NULL;
    }
    return s;
}

static bool is_list(const json_t *p)
{
    if (!json_is_array(p) || !json_array_size(p)) return false;
    for (size_t i = 0; i < json_array_size(p); i++)
        if (json_is_number(json_array_get(p, i))) return false;
    return true;
}

bool srv_tokenize_prompts(const tok_vocab *v, const json_t *prompt, bool add_special, int32_t ***ids, int32_t **n,
                          int *k, srv_err *e)
{
    *ids = NULL;
    *n = NULL;
    *k = 0;
    if (!prompt || json_is_null(prompt)) return srv_fail(e, 400, "prompt", "'prompt' is required");
    size_t count = is_list(prompt) ? json_array_size(prompt) : 1;
    if (count > SRV_MAX_CHOICES)
        return srv_fail(e, 400, "prompt", "'prompt' holds %zu prompts; at most %d per request", count,
                        SRV_MAX_CHOICES);
    int32_t **a = calloc(count, sizeof *a), *na = calloc(count, sizeof *na);
    if (!a || !na) {
        free(a);
        free(na);
        return srv_fail(e, 500, NULL, "out of memory");
    }
    bool ok = true;
    for (size_t i = 0; ok && i < count; i++) {
        const json_t *one = unwrap(count > 1 || is_list(prompt) ? json_array_get(prompt, i) : prompt, e);
        ok = one && srv_tokenize_prompt(v, one, "prompt", add_special, &a[i], &na[i], e);
    }
    if (!ok) {
        for (size_t i = 0; i < count; i++) free(a[i]);
        free(a);
        free(na);
        return false;
    }
    *ids = a;
    *n = na;
    *k = (int)count;
    return true;
}
