/*
 * srv_cors.c - CORS: which browser origins may read the server's answers,
 * the preflight (OPTIONS) answer and the headers on every other response.
 *
 * Policy (--cors-origins), as llama-server reads its flag of that name:
 *   "localhost"  an Origin whose host is localhost,
 *                127.0.0.1 or ::1 is reflected; any other gets no
 *                Access-Control-Allow-Origin, so the browser withholds the
 *                answer.  A page on another site cannot drive a local server.
 *   "*"          any origin: reflected when credentials are allowed (a
 *                browser refuses "*" with credentials), else "*".
 *   "a,b,c"      those origins exactly (compared after trimming spaces).
 *
 * Without the flag: "*" when --api-key is set, "localhost" when not.
 * llama-server's documented default is "*" (with credentials: any Origin
 * echoed); with a key that is safe, since a page from anywhere still needs
 * the key to get an answer.  Without one, "*" would let any site a local
 * user visits drive the server and read its answers (and, with
 * --ui-mcp-proxy, reach the user's network through it), so a keyless
 * server answers only pages served from this machine.
 *
 * A preflight is answered on every path before routing, API keys and
 * loading (browsers send no Authorization with it): 200, an empty body,
 * the allowed methods and headers, and the origin when allowed.  That the
 * server answers says nothing about the route: the real request gets its
 * own status.
 */
#include <string.h>

#include "srv_impl.h"

static const char METHODS[] = "GET, POST, DELETE, OPTIONS";

/* The host of an origin ("http://[::1]:3000" -> "::1"), into out. */
static void origin_host(const char *origin, char *out, size_t cap)
{
    const char *p = strstr(origin, "://");
    p = p ? p + 3 : origin;
    const char *end;
    if (*p == '[') {
        p++;
        end = strchr(p, ']');
        if (!end) end = p + strlen(p);
    } else {
        end = p + strcspn(p, ":/?#");
    }
    size_t n = MIN((size_t)(end - p), cap - 1);
    memcpy(out, p, n);
    out[n] = 0;
}

static bool in_list(const char *list, const char *origin)
{
    size_t n = strlen(origin);
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',') p++;
        size_t k = strcspn(p, ",");
        size_t m = k;
        while (m > 0 && p[m - 1] == ' ') m--;
        if (m && m == n && !memcmp(p, origin, n)) return true;
        p += k;
    }
    return false;
}

bool srv_cors_allowed(const char *policy, const char *origin)
{
    if (!origin || !*origin || !policy) return false;
    if (!strcmp(policy, "*")) return true;
    if (!strcmp(policy, "localhost")) {
        char host[256];
        origin_host(origin, host, sizeof host);
        return !strcmp(host, "localhost") || !strcmp(host, "127.0.0.1") || !strcmp(host, "::1");
    }
    return in_list(policy, origin);
}

const char *srv_cors_default(const srv_params *p)
{
    if (p->cors_origins) return p->cors_origins;
    return (p->api_key && *p->api_key) || p->api_key_file ? "*" : "localhost";
}

void srv_cors_add(srv_req *r, struct MHD_Response *resp, bool preflight)
{
    const srv_params *p = &r->s->p;
    const char *origin = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin");
    if (!strcmp(p->cors_origins, "*") && !p->cors_credentials) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
    } else if (srv_cors_allowed(p->cors_origins, origin)) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin);
        MHD_add_response_header(resp, "Vary", "Origin");
    }
    if (!preflight) return;
    MHD_add_response_header(resp, "Access-Control-Allow-Credentials", p->cors_credentials ? "true" : "false");
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", METHODS);
    MHD_add_response_header(resp, "Access-Control-Allow-Headers", "*");
    MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
}
