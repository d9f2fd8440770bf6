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
 * included, is the prediction.  Instances run at once, one thread each,
 * so completions batch in the engine as separate requests would; streams
 * are turned off (a prediction is one body).
 */
#include <ctype.h>
#include <pthread.h>
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

typedef struct instance {
    srv_req *parent;
    const json_t *in;
    json_t *out;                  /* the prediction */
} instance;

static json_t *error_body(unsigned status, const char *fmt, const char *arg)
{
    srv_err e = { .status = status };
    snprintf(e.msg, sizeof e.msg, fmt, arg);
    return srv_error_json(&e);
}

static void *run_instance(void *arg)
{
    instance *it = arg;
    const json_t *in = it->in;
    const char *format = json_string_value(json_object_get(in, "@requestFormat"));
    srv_handler fn;
    const char *path;
    if (!json_is_object(in)) {
        it->out = error_body(400, "each instance must be a JSON object%s", "");
        return NULL;
    }
    if (!format) {
        it->out = error_body(400, "each instance must have a string @requestFormat%s", "");
        return NULL;
    }
    if (!srv_route_by_format(format, &fn, &path)) {
        it->out = error_body(400, "no route for @requestFormat '%.100s'", format);
        return NULL;
    }
    json_t *body = json_copy((json_t *)in);
    srv_req *r = calloc(1, sizeof *r);
    if (!body || !r) {
        json_decref(body);
        free(r);
        it->out = error_body(500, "out of memory%s", "");
        return NULL;
    }
    json_object_del(body, "@requestFormat");
    if (json_object_get(body, "stream")) json_object_set_new(body, "stream", json_false());
    srv_req *p = it->parent;
    r->s = p->s;
    r->conn = p->conn;
    r->route = p->route;
    r->method = "POST";
    r->url = path;
    r->http11 = p->http11;
    r->t0_ms = pk_time_ms();
    r->sessions_remaining = -1;
    r->capture = true;
    fn(r, body);
    it->out = r->captured ? r->captured : error_body(500, "the %s route gave no answer", path);
    json_decref(body);
    free(r);
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
    instance *its = calloc(n ? n : 1, sizeof *its);
    pthread_t *threads = calloc(n ? n : 1, sizeof *threads);
    bool *started = calloc(n ? n : 1, sizeof *started);
    if (!its || !threads || !started) {
        free(its);
        free(threads);
        free(started);
        return srv_reply_errorf(r, 500, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        its[i] = (instance){ .parent = r, .in = json_array_get(instances, i) };
        /* Without a thread the instance runs here, after the ones started. */
        started[i] = pthread_create(&threads[i], NULL, run_instance, &its[i]) == 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (started[i]) pthread_join(threads[i], NULL);
        else run_instance(&its[i]);
    }
    json_t *preds = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *one = its[i].out ? its[i].out : json_null();
        if (!preds) json_decref(one);
        else if (json_array_append_new(preds, one)) preds = (json_decref(preds), NULL);
    }
    free(its);
    free(threads);
    free(started);
    return srv_reply_json(r, 200, preds ? json_pack("{s:o}", "predictions", preds) : NULL);
}
