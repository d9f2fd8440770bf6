/*
 * hub_pick.c - the pure rules of a model by name (hub.h): the repo spec,
 * split GGUF names, which file a QUANT picks.  llama.cpp writes them as
 * regular expressions (get_gguf_split_info, find_best_model); here they are
 * spelled out byte by byte, with the same answers.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "hub.h"

static bool word_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* llama.cpp's is_valid_repo_id: base characters [A-Za-z0-9_], and '/',
 * '.', '-' only between two of them; exactly one '/'. */
static bool valid_repo(const char *r, size_t n)
{
    if (n == 0 || n > 256) return false;
    int slashes = 0;
    bool after_special = true;
    for (size_t i = 0; i < n; i++) {
        if (word_char(r[i])) {
            after_special = false;
        } else if (r[i] == '/' || r[i] == '.' || r[i] == '-') {
            if (after_special) return false;
            slashes += r[i] == '/';
            after_special = true;
        } else {
            return false;
        }
    }
    return !after_special && slashes == 1;
}

pk_status hub_parse_spec(const char *spec, char *repo, char *tag)
{
    repo[0] = tag[0] = 0;
    if (!spec) return PK_EINVAL;
    /* llama.cpp splits on every ':' and takes the first piece as the repo
     * and the last as the tag, so "a/b:x:y" is a/b tagged y. */
    size_t n_repo = strcspn(spec, ":");
    const char *last = strrchr(spec, ':');
    if (!valid_repo(spec, n_repo)) return PK_EINVAL;
    memcpy(repo, spec, n_repo);
    repo[n_repo] = 0;
    if (!last) return PK_OK;
    const char *t = last + 1;
    size_t n_tag = strlen(t);
    if (n_tag >= HUB_TAG_MAX) return PK_EINVAL;
    for (size_t i = 0; i < n_tag; i++)
        if (!word_char(t[i]) && t[i] != '.' && t[i] != '-') return PK_EINVAL;
    memcpy(tag, t, n_tag + 1);
    return PK_OK;
}

/* llama.cpp's string_ends_with: case-sensitive. */
static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !memcmp(s + n - k, suffix, k);
}

/* Five digits at p. */
static bool five_digits(const char *p, int *v)
{
    *v = 0;
    for (int i = 0; i < 5; i++) {
        if (!isdigit((unsigned char)p[i])) return false;
        *v = *v * 10 + (p[i] - '0');
    }
    return true;
}

bool hub_split_info(const char *path, hub_split *out)
{
    memset(out, 0, sizeof *out);
    size_t n = strlen(path);
    if (!ends_with(path, ".gguf")) return false;
    n -= 5;
    out->index = out->count = 1;
    /* "^(.+)-([0-9]{5})-of-([0-9]{5})$", case-insensitive. */
    const size_t k = strlen("-00001-of-00003");
    int idx, cnt;
    if (n > k && path[n - k] == '-' && five_digits(path + n - k + 1, &idx) &&
        !strncasecmp(path + n - k + 6, "-of-", 4) && five_digits(path + n - 5, &cnt)) {
        out->index = idx;
        out->count = cnt;
        n -= k;
    }
    out->prefix_len = n;
    /* "[-.]([A-Z0-9_]+)$": the word after the last '-' or '.'. */
    size_t s = n;
    while (s > 0 && word_char(path[s - 1])) s--;
    if (s > 0 && s < n && (path[s - 1] == '-' || path[s - 1] == '.') && n - s < HUB_TAG_MAX) {
        for (size_t i = s; i < n; i++) out->tag[i - s] = (char)toupper((unsigned char)path[i]);
        out->tag[n - s] = 0;
    }
    return true;
}

bool hub_is_model_gguf(const char *path)
{
    static const char *const not_models[] = { "mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-" };
    if (!ends_with(path, ".gguf")) return false;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    for (size_t i = 0; i < ARRAY_LEN(not_models); i++)
        if (strstr(base, not_models[i])) return false;
    return true;
}

/* Whether path holds tag followed by '.' or '-', any case (llama.cpp's
 * regex_search of TAG "[.-]", icase). */
static bool holds_tag(const char *path, const char *tag)
{
    size_t k = strlen(tag);
    for (const char *p = path; *p; p++)
        if (!strncasecmp(p, tag, k) && (p[k] == '.' || p[k] == '-')) return true;
    return false;
}

/* A model GGUF that is not a later part of a split. */
static bool candidate(const char *path)
{
    hub_split s;
    return hub_is_model_gguf(path) && hub_split_info(path, &s) && (s.count <= 1 || s.index == 1);
}

int hub_pick(const char *const *paths, int n, const char *tag)
{
    static const char *const defaults[] = { "Q4_K_M", "Q8_0" };
    const char *const *tags = tag && tag[0] ? &tag : defaults;
    size_t n_tags = tag && tag[0] ? 1 : ARRAY_LEN(defaults);
    for (size_t t = 0; t < n_tags; t++)
        for (int i = 0; i < n; i++)
            if (candidate(paths[i]) && holds_tag(paths[i], tags[t])) return i;
    if (tag && tag[0]) return -1;
    for (int i = 0; i < n; i++)
        if (candidate(paths[i])) return i;
    return -1;
}
