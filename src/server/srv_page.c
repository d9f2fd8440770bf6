/*
 * srv_page.c - GET / and GET /assets/...: the monitor page (docs/monitor.md)
 * from the table web/build.mjs generates (srv_page.h).  Public routes: the
 * page holds no data of its own; it asks the API with the key the operator
 * types into it.  Sent gzip-compressed when the client accepts it.
 */
#include <string.h>

#include "srv_impl.h"
#include "srv_page.h"

/* Whether Accept-Encoding names gzip (q=0 is not honoured: no browser sends it). */
static bool accepts_gzip(struct MHD_Connection *conn)
{
    const char *ae = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT_ENCODING);
    return ae && strstr(ae, "gzip");
}

enum MHD_Result srv_h_page(srv_req *r, json_t *body)
{
    if (r->s->p.no_ui) return srv_reply_errorf(r, 404, "File Not Found");
    const srv_asset *a = NULL;
    for (int i = 0; i < srv_page_n_assets && !a; i++)
        if (!strcmp(srv_page_assets[i].path, r->url)) a = &srv_page_assets[i];
    if (!a) return srv_reply_errorf(r, 404, "File Not Found");
    bool gz = accepts_gzip(r->conn);
    struct MHD_Response *resp = MHD_create_response_from_buffer(gz ? a->n_gz : a->n,
                                                                (void *)(gz ? a->gz : a->data), MHD_RESPMEM_PERSISTENT);
    if (!resp) return srv_reply_errorf(r, 500, "out of memory");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, a->type);
    if (gz) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_ENCODING, "gzip");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, "Accept-Encoding");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL,
                            a->immutable ? "public, max-age=31536000, immutable" : "no-cache");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    enum MHD_Result ret = MHD_queue_response(r->conn, 200, resp);
    MHD_destroy_response(resp);
    r->replied = true;
    r->status = 200;
    return ret;
}
