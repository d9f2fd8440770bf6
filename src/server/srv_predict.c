/*
 * srv_predict.c - Vertex AI's prediction protocol (llama-server's GCP
 * compatibility): with AIP_MODE=PREDICTION, POST AIP_PREDICT_ROUTE
 * (/predict) takes {"instances": [...]} and answers {"predictions": [...]},
 * one per instance, in order.
 *
 * An instance is the body of one of our POST routes plus "@requestFormat",
 * which names the route by path ("/v1/chat/completions") or by its
 * camelCase alias ("chatCompletions", srv_gcp_format_of).  Each runs the
 * route's own handler on a request of its own whose reply is captured
 * (srv_req.capture) rather than sent: its JSON body, an error object
 * included, is the prediction.  Instances run at once, as many as the
 * engine has slots (workers take them in turn), so completions batch as
 * separate requests would; streams are turned off (a prediction is one
 * body).
 */
#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv_impl.h"

#define PREDICT_MAX_INSTANCES 128     /* llama-server's bound */

void srv_gcp_format_of(const char *path, char *out, size_t cap)
{
    if (!strncmp(path, "/v1/", 4)) path += 3;
    size_t n = 0;
    bool up = false;
    for (const char *p = path; *p && n + 1 < cap; p++) {
        if (*p == '/' || *p == '-' || *p == '_') {
            up = n > 0;
            continue;
        }
        out[n++] = up ? (char)toupper((unsigned char)*p) : *p;
        up = false;
    }
    if (cap) out[MIN(n, cap - 1)] = 0;
}

/* One predict request's instances, taken in turn by its workers. */
typedef struct predict_job {
    srv_req *parent;
    const json_t *instances;
    json_t **out;                 /* [n] the predictions */
    size_t n;
    atomic_size_t next;           /* the next instance to take */
} predict_job;

static json_t *error_body(unsigned status, const char *fmt, const char *arg)
{
    srv_err e = { .status = status };
    snprintf(e.msg, sizeof e.msg, fmt, arg);
    return srv_error_json(&e);
}

/* The prediction of one instance: the captured answer of its route. */
static json_t *run_instance(srv_req *p, const json_t *in)
{
    const char *format = json_string_value(json_object_get(in, "@requestFormat"));
    srv_handler fn;
    const char *path;
    if (!json_is_object(in)) return error_body(400, "each instance must be a JSON object%s", "");
    if (!format) return error_body(400, "each instance must have a string @requestFormat%s", "");
    if (!srv_route_by_format(format, &fn, &path))
        return error_body(400, "no route for @requestFormat '%.100s'", format);
    json_t *body = json_copy((json_t *)in);
    srv_req *r = calloc(1, sizeof *r);
    if (!body || !r) {
        json_decref(body);
        free(r);
        return error_body(500, "out of memory%s", "");
    }
    json_object_del(body, "@requestFormat");
    if (json_object_get(body, "stream")) json_object_set_new(body, "stream", json_false());
    r->s = p->s;
    r->conn = p->conn;
    r->route = p->route;
    r->method = "POST";
    r->url = path;
    r->http11 = p->http11;
    r->t0_ms = pk_time_ms();
    r->sessions_remaining = -1;
    r->tenant = p->tenant;
    r->capture = true;
    fn(r, body);
    json_t *out = r->captured ? r->captured : error_body(500, "the %s route gave no answer", path);
    json_decref(body);
    free(r);
    return out;
}

static void *worker(void *arg)
{
    predict_job *j = arg;
    for (size_t i; (i = atomic_fetch_add(&j->next, 1)) < j->n;)
        j->out[i] = run_instance(j->parent, json_array_get(j->instances, i));
    return NULL;
}

enum MHD_Result srv_h_predict(srv_req *r, json_t *body)
{
    const json_t *instances = json_object_get(body, "instances");
    if (!json_is_array(instances))
        return srv_reply_errorf(r, 400, "the request body must have an array 'instances'");
    size_t n = json_array_size(instances);
    if (n > PREDICT_MAX_INSTANCES)
        return srv_reply_errorf(r, 400, "'instances' has %zu entries; at most %d", n, PREDICT_MAX_INSTANCES);
    /* As many workers as slots: more could not decode at once, and the
     * threads a request may start stay bounded. */
    size_t k = MIN(n, (size_t)MAX(eng_get_params(srv_engine(r->s))->n_slots, 1));
    predict_job j = { .parent = r, .instances = instances, .n = n, .out = calloc(n ? n : 1, sizeof *j.out) };
    size_t extra = k ? k - 1 : 0;           /* beside this thread */
    pthread_t *threads = calloc(extra ? extra : 1, sizeof *threads);
    if (!j.out || !threads) {
        free(j.out);
        free(threads);
        return srv_reply_errorf(r, 500, "out of memory");
    }
    atomic_init(&j.next, 0);
    size_t started = 0;
    while (started < extra && pthread_create(&threads[started], NULL, worker, &j) == 0) started++;
    worker(&j);                   /* this thread takes instances too (all of them without workers) */
    for (size_t i = 0; i < started; i++) pthread_join(threads[i], NULL);
    json_t *preds = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *one = j.out[i] ? j.out[i] : json_null();
        if (!preds) json_decref(one);
        else if (json_array_append_new(preds, one)) preds = (json_decref(preds), NULL);
    }
    free(j.out);
    free(threads);
    return srv_reply_json(r, 200, preds ? json_pack("{s:o}", "predictions", preds) : NULL);
}
