/*
 * pol_params.c - the numbers of the policy: its parameters (defaults, flags,
 * environment, JSON for /props) and the curves that say what a history is
 * worth.  Placement itself is in pol.c.
 *
 * One table describes every parameter (name, variable, kind, field offset,
 * range, help); setting by flag, by environment and writing JSON all walk
 * it, so adding a threshold is one row plus one struct field.
 */
#include "pol.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- curves ----------------------------------------------------------- */

/* Protection knots at ttl_max_s = 120; the last one is the plateau. */
static const double ttl_knot_n[] = { 0, 500, 2000, 8000, 32000, 50000, 100000, 262144 };
static const double ttl_knot_s[] = { 0, 0.1, 2,    10,   45,    65,    90,     120 };
#define TTL_KNOT_REF_S 120.0

double pol_ttl_s(int64_t n, double ttl_max_s)
{
    if (n <= 0 || !(ttl_max_s > 0))
        return 0;
    double scale = ttl_max_s / TTL_KNOT_REF_S;
    size_t last = ARRAY_LEN(ttl_knot_n) - 1;
    double x = (double)n;
    if (x >= ttl_knot_n[last])
        return ttl_knot_s[last] * scale;
    size_t i = 1;
    while (x > ttl_knot_n[i])
        i++;
    double t = (x - ttl_knot_n[i - 1]) / (ttl_knot_n[i] - ttl_knot_n[i - 1]);
    return (ttl_knot_s[i - 1] + t * (ttl_knot_s[i] - ttl_knot_s[i - 1])) * scale;
}

double pol_size_weight(int64_t n)
{
    if (n <= 0)
        return 0;
    double x = (double)n;
    double fill = x / (x + 2000.0);
    return pow(x / 50000.0, 0.7) * fill * fill;
}

double pol_retention(int64_t n, double age_s, double ttl_s)
{
    double fresh = 0;
    if (ttl_s > 0) {
        fresh = 1.0 - MAX(age_s, 0.0) / ttl_s;
        fresh = fresh < 0 ? 0 : fresh > 1 ? 1 : fresh;
    }
    return pol_size_weight(n) * (0.25 + 0.75 * fresh);
}

double pol_value(int64_t n, double age_s, const pol_params *p)
{
    double ttl = pol_ttl_s(n, p->ttl_max_s);
    double age = MAX(age_s, 0.0);
    if (age < ttl)
        return pol_retention(n, age, ttl);
    double at_expiry = 0.25 * pol_size_weight(n);
    double zero = p->idle_value_zero_s;
    if (zero <= 0)
        return at_expiry;
    if (zero <= ttl)
        return 0;
    double x = (age - ttl) / (zero - ttl);
    x = x > 1 ? 1 : x;
    return at_expiry * (1.0 - x * x);
}

double pol_overwrite_score(double value)
{
    return 1.0 / (1.0 + value);
}

/* ---- parameter table -------------------------------------------------- */

enum par_kind { PAR_DOUBLE, PAR_INT, PAR_TEXT };

typedef struct par_row {
    pol_param_info info;
    enum par_kind kind;
    size_t off;
    double lo, hi;
} par_row;

#define ROW(name, env, kind, field, lo, hi, help) \
    { { name, env, help }, kind, offsetof(pol_params, field), lo, hi }

static const par_row rows[] = {
    ROW("ttl-max-s", "POLYKV_SLOT_TTL_MAX_S", PAR_DOUBLE, ttl_max_s, 0, 1e7,
        "protection (s) of a 262144-token history; scales the whole curve; 0 = none"),
    ROW("idle-value-zero-s", "POLYKV_SLOT_IDLE_VALUE_ZERO_S", PAR_DOUBLE, idle_value_zero_s, 0, 1e9,
        "idle age (s) where an expired history's value reaches 0; 0 = no decay"),
    ROW("sibling-share", "POLYKV_SLOT_SIBLING_SHARE", PAR_DOUBLE, sibling_share, 0, 1,
        "share of an idle history's key the prompt must repeat to replace it as an older version; 0 = off"),
    ROW("expired-keep-score", "POLYKV_SLOT_EXPIRED_KEEP_SCORE", PAR_DOUBLE, expired_keep_score, 0, 1e9,
        "an expired history worth less than this is not worth keeping"),
    ROW("park-min-value", "POLYKV_SLOT_PARK_MIN_VALUE", PAR_DOUBLE, park_min_value, 0, 1e9,
        "a history worth less than this is overwritten, not parked"),
    ROW("park-kept-share", "POLYKV_SLOT_PARK_KEPT_SHARE", PAR_DOUBLE, park_kept_share, 0, 1,
        "not parked when another history holds this share of its key; 0 = off"),
    ROW("park-value-ratio", "POLYKV_SLOT_PARK_VALUE_RATIO", PAR_DOUBLE, park_value_ratio, 0, 1e9,
        "drop an expired keeper for a park only if the parked is worth this many times more; 0 = never"),
    ROW("near-share", "POLYKV_SLOT_NEAR_SHARE", PAR_DOUBLE, near_share, 0, 1,
        "a source within this share of the best prefix is a near match"),
    ROW("near-s", "POLYKV_SLOT_NEAR_S", PAR_DOUBLE, near_s, 0, 1e6,
        "a source within this many seconds of prompt processing is a near match"),
    ROW("near-tokens", "POLYKV_SLOT_NEAR_TOKENS", PAR_INT, near_tokens, 0, INT32_MAX,
        "a source within this many tokens of the best prefix is a near match"),
    ROW("loss-tie", "POLYKV_SLOT_LOSS_TIE", PAR_DOUBLE, loss_tie, 0, 1e9,
        "least-loss candidates within this ratio of the least tie, broken by slot order"),
    ROW("turn-marker", "POLYKV_SLOT_TURN_MARKER", PAR_TEXT, turn_marker, 0, POL_MARKER_CAP - 1,
        "text of the turn marker that bounds a conversation's key; auto = from the chat template; empty = none"),
};

#undef ROW

pol_params pol_params_default(void)
{
    pol_params p = {
        .ttl_max_s = 120,
        .idle_value_zero_s = 1800,
        .sibling_share = 0.98,
        .expired_keep_score = 0.01,
        .park_min_value = 0.01,
        .park_kept_share = 0.98,
        .park_value_ratio = 2,
        .near_share = 0.02,
        .near_s = 1,
        .near_tokens = 4096,
        .loss_tie = 0.10,
    };
    snprintf(p.turn_marker, sizeof p.turn_marker, "%s", "auto");
    return p;
}

int pol_param_count(void)
{
    return (int)ARRAY_LEN(rows);
}

const pol_param_info *pol_param_at(int i)
{
    if (i < 0 || i >= (int)ARRAY_LEN(rows))
        return NULL;
    return &rows[i].info;
}

const char *pol_turn_marker_for(const char *name)
{
    if (!name)
        return "";
    if (strcasecmp(name, "chatml") == 0)
        return "<|im_start|>";
    if (strcasecmp(name, "llama3") == 0)
        return "<|start_header_id|>";
    if (strcasecmp(name, "llama2") == 0 || strcasecmp(name, "mistral") == 0)
        return "[INST]";
    if (strcasecmp(name, "command-r") == 0)
        return "<|START_OF_TURN_TOKEN|>";
    return "";
}

static bool row_value_ok(const par_row *r, double v)
{
    return isfinite(v) && v >= r->lo && v <= r->hi;
}

/* Parses text into row r's field of *p; false (nothing written) when bad. */
static bool row_parse(const par_row *r, pol_params *p, const char *text)
{
    char *field = (char *)p + r->off;
    if (r->kind == PAR_TEXT) {
        size_t len = strlen(text);
        if (len > (size_t)r->hi)
            return false;
        memcpy(field, text, len + 1);
        return true;
    }
    if (*text == '\0')
        return false;
    char *end;
    errno = 0;
    if (r->kind == PAR_INT) {
        long long v = strtoll(text, &end, 10);
        if (errno || *end != '\0' || !row_value_ok(r, (double)v))
            return false;
        *(int32_t *)field = (int32_t)v;
        return true;
    }
    double v = strtod(text, &end);
    if (errno || *end != '\0' || !row_value_ok(r, v))
        return false;
    *(double *)field = v;
    return true;
}

static const par_row *row_find(const char *name)
{
    if (strncmp(name, "--", 2) == 0)
        name += 2;
    if (strncmp(name, "slot-", 5) == 0)
        name += 5;
    for (size_t i = 0; i < ARRAY_LEN(rows); i++)
        if (strcmp(rows[i].info.name, name) == 0)
            return &rows[i];
    return NULL;
}

pk_status pol_params_set(pol_params *p, const char *name, const char *value)
{
    if (!p || !name || !value)
        return PK_EINVAL;
    const par_row *r = row_find(name);
    if (!r)
        return PK_ENOTFOUND;
    return row_parse(r, p, value) ? PK_OK : PK_EINVAL;
}

pk_status pol_params_from_env(pol_params *p, const char **bad_var)
{
    if (!p)
        return PK_EINVAL;
    pol_params next = *p;
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        const char *text = getenv(rows[i].info.env);
        if (!text)
            continue;
        if (!row_parse(&rows[i], &next, text)) {
            if (bad_var)
                *bad_var = rows[i].info.env;
            return PK_EINVAL;
        }
    }
    *p = next;
    return PK_OK;
}

pk_status pol_params_check(const pol_params *p)
{
    if (!p)
        return PK_EINVAL;
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        const par_row *r = &rows[i];
        const char *field = (const char *)p + r->off;
        switch (r->kind) {
        case PAR_DOUBLE:
            if (!row_value_ok(r, *(const double *)field))
                return PK_EINVAL;
            break;
        case PAR_INT:
            if (!row_value_ok(r, (double)*(const int32_t *)field))
                return PK_EINVAL;
            break;
        case PAR_TEXT:
            if (!memchr(field, '\0', POL_MARKER_CAP))
                return PK_EINVAL;
            break;
        }
    }
    return PK_OK;
}

/* ---- JSON ------------------------------------------------------------- */

/* An append-only text buffer that remembers whether anything was cut. */
typedef struct jbuf {
    char *buf;
    size_t cap, len;
    bool full;
} jbuf;

static void jb_printf(jbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = b->len < b->cap ? b->cap - b->len : 0;
    int n = vsnprintf(room ? b->buf + b->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= room)
        b->full = true;
    if (n > 0)
        b->len += (size_t)n;
}

/* Integers as integers, anything else in the shortest %g form that reads
 * back as the same double (JSON accepts both). */
static void jb_number(jbuf *b, double v)
{
    if (v == floor(v) && fabs(v) < 1e15) {
        jb_printf(b, "%.0f", v);
        return;
    }
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (strtod(tmp, NULL) == v)
            break;
    }
    jb_printf(b, "%s", tmp);
}

static void jb_string(jbuf *b, const char *s)
{
    jb_printf(b, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\')
            jb_printf(b, "\\%c", *c);
        else if (*c < 0x20)
            jb_printf(b, "\\u%04x", *c);
        else
            jb_printf(b, "%c", *c);
    }
    jb_printf(b, "\"");
}

pk_status pol_params_json(const pol_params *p, char *buf, size_t cap, size_t *n_out)
{
    if (!p || !buf || cap == 0)
        return PK_EINVAL;
    jbuf b = { buf, cap, 0, false };
    jb_printf(&b, "{");
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        const par_row *r = &rows[i];
        const char *field = (const char *)p + r->off;
        jb_printf(&b, "%s\"", i ? "," : "");
        for (const char *c = r->info.name; *c; c++)
            jb_printf(&b, "%c", *c == '-' ? '_' : *c);
        jb_printf(&b, "\":");
        switch (r->kind) {
        case PAR_DOUBLE: jb_number(&b, *(const double *)field); break;
        case PAR_INT:    jb_printf(&b, "%d", (int)*(const int32_t *)field); break;
        case PAR_TEXT:   jb_string(&b, field); break;
        }
    }
    jb_printf(&b, ",\"ttl_curve\":[");
    for (size_t i = 1; i < ARRAY_LEN(ttl_knot_n); i++) {
        jb_printf(&b, "%s[%.0f,", i > 1 ? "," : "", ttl_knot_n[i]);
        jb_number(&b, pol_ttl_s((int64_t)ttl_knot_n[i], p->ttl_max_s));
        jb_printf(&b, "]");
    }
    jb_printf(&b, "]}");
    if (b.full) {
        buf[cap - 1] = '\0';
        return PK_EFULL;
    }
    if (n_out)
        *n_out = b.len;
    return PK_OK;
}
