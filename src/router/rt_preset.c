/*
 * rt_preset.c - the INI text of --models-preset (rt.h), read into sections
 * of key = value pairs; what the keys mean is the caller's business.
 *
 *   ; comment            # comment
 *   version = 1          (keys before any section: section 0, named "")
 *   [*]                  (a section like any other; the caller treats "*" as global)
 *   c = 8192
 *   [my-model]
 *   model = /models/x.gguf
 *
 * Keys and values are trimmed; a value may be quoted ("..." or '...').  A
 * line that is none of these, an empty key or an unclosed section name is
 * PK_EFORMAT with its line number.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/buf.h"
#include "rt.h"

#define PRESET_MAX_BYTES (1u << 20)

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) s[--n] = 0;
    return s;
}

static pk_status add_section(rt_ini *ini, size_t *cap, const char *name)
{
    if (pk_grow((void **)&ini->sec, cap, (size_t)ini->n_sec + 1, sizeof *ini->sec)) return PK_ENOMEM;
    rt_section *s = &ini->sec[ini->n_sec];
    memset(s, 0, sizeof *s);
    if (!(s->name = strdup(name))) return PK_ENOMEM;
    ini->n_sec++;
    return PK_OK;
}

static pk_status add_kv(rt_section *s, const char *key, const char *value)
{
    rt_kv *kv = realloc(s->kv, ((size_t)s->n_kv + 1) * sizeof *kv);
    if (!kv) return PK_ENOMEM;
    s->kv = kv;
    kv[s->n_kv] = (rt_kv){ strdup(key), strdup(value) };
    if (!kv[s->n_kv].key || !kv[s->n_kv].value) {
        free(kv[s->n_kv].key);
        free(kv[s->n_kv].value);
        return PK_ENOMEM;
    }
    s->n_kv++;
    return PK_OK;
}

/* One line (NUL-terminated, no newline) into ini. */
static pk_status parse_line(rt_ini *ini, size_t *cap, char *line, int no, char *err, size_t err_len)
{
    char *t = trim(line);
    if (!*t || *t == ';' || *t == '#') return PK_OK;
    if (*t == '[') {
        char *end = strchr(t, ']');
        if (!end || *trim(end + 1)) return pk_errf(err, err_len, PK_EFORMAT, "line %d: a section is [NAME]", no);
        *end = 0;
        char *name = trim(t + 1);
        if (!*name) return pk_errf(err, err_len, PK_EFORMAT, "line %d: empty section name", no);
        return add_section(ini, cap, name);
    }
    char *eq = strchr(t, '=');
    if (!eq) return pk_errf(err, err_len, PK_EFORMAT, "line %d: expected KEY = VALUE", no);
    *eq = 0;
    char *key = trim(t), *value = trim(eq + 1);
    if (!*key) return pk_errf(err, err_len, PK_EFORMAT, "line %d: empty key", no);
    size_t n = strlen(value);
    if (n >= 2 && (value[0] == '"' || value[0] == '\'') && value[n - 1] == value[0]) {
        value[n - 1] = 0;
        value++;
    }
    return add_kv(&ini->sec[ini->n_sec - 1], key, value);
}

pk_status rt_ini_parse(const char *text, size_t n, rt_ini *out, char *err, size_t err_len)
{
    memset(out, 0, sizeof *out);
    size_t cap = 0;
    pk_status st = add_section(out, &cap, "");
    char line[4096];
    int no = 0;
    for (size_t at = 0; !st && at < n; no++) {
        const char *nl = memchr(text + at, '\n', n - at);
        size_t len = nl ? (size_t)(nl - (text + at)) : n - at;
        if (len >= sizeof line || memchr(text + at, 0, len)) {
            st = pk_errf(err, err_len, PK_EFORMAT, "line %d: too long or not text", no + 1);
            break;
        }
        memcpy(line, text + at, len);
        line[len] = 0;
        st = parse_line(out, &cap, line, no + 1, err, err_len);
        at += len + 1;
    }
    if (st == PK_ENOMEM) pk_errf(err, err_len, st, "out of memory");
    if (st) rt_ini_free(out);
    return st;
}

pk_status rt_ini_load(const char *path, rt_ini *out, char *err, size_t err_len)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return pk_errf(err, err_len, PK_EIO, "%s: %s", path, strerror(errno));
    pk_buf b = {0};
    char chunk[4096];
    size_t k;
    while ((k = fread(chunk, 1, sizeof chunk, f)) > 0 && b.n <= PRESET_MAX_BYTES) pk_buf_put(&b, chunk, k);
    bool bad = ferror(f);
    fclose(f);
    pk_status st;
    if (bad) st = pk_errf(err, err_len, PK_EIO, "%s: read error", path);
    else if (b.oom) st = pk_errf(err, err_len, PK_ENOMEM, "out of memory");
    else if (b.n > PRESET_MAX_BYTES) st = pk_errf(err, err_len, PK_EFORMAT, "%s: over 1 MiB", path);
    else {
        char why[256] = "";
        st = rt_ini_parse(b.p ? b.p : "", b.n, out, why, sizeof why);
        if (st) pk_errf(err, err_len, st, "%s: %s", path, why);
    }
    pk_buf_free(&b);
    return st;
}

void rt_ini_free(rt_ini *ini)
{
    for (int i = 0; i < ini->n_sec; i++) {
        for (int k = 0; k < ini->sec[i].n_kv; k++) {
            free(ini->sec[i].kv[k].key);
            free(ini->sec[i].kv[k].value);
        }
        free(ini->sec[i].kv);
        free(ini->sec[i].name);
    }
    free(ini->sec);
    memset(ini, 0, sizeof *ini);
}
