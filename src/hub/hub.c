/*
 * hub.c - hub_resolve (hub.h has the rules): the cache first, then the
 * hub's API (refs, then the tree at that commit), the pick, and each file
 * not cached yet fetched and linked into the snapshot.
 *
 *   spec -> repo, QUANT -> CACHE/models--U--R
 *     cached commit's snapshot holds the pick, all its parts?  -> done, no request
 *     offline?                                                 -> not found
 *     GET refs -> commit (refs/main written); GET tree -> listing -> pick
 *     each part: snapshot entry, else blob, else hub_dl_file; then link
 */
#include <jansson.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/buf.h"
#include "../httpc/httpc.h"
#include "hub_impl.h"

hub_opts hub_default_opts(void)
{
    return (hub_opts){ .progress = HUB_PROGRESS_AUTO, .n_tries = 3, .retry_delay_ms = 2000, .stall_ms = 60000,
                       .connect_timeout_ms = 30000, .api_timeout_ms = 60000 };
}

void hub_model_free(hub_model *m)
{
    if (!m) return;
    free(m->path);
    free(m->file);
    memset(m, 0, sizeof *m);
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

void hub_endpoint(char *buf, size_t cap)
{
    const char *e = env("MODEL_ENDPOINT");
    if (!e) e = env("HF_ENDPOINT");                  /* llama.cpp keeps it for backward compatibility */
    if (!e) e = "https://huggingface.co/";
    size_t n = strlen(e);
    snprintf(buf, cap, "%s%s", e, n && e[n - 1] == '/' ? "" : "/");
}

pk_status hub_cache_dir(char *buf, size_t cap)
{
    static const struct { const char *var, *sub; } order[] = {
        { "LLAMA_CACHE", "" }, { "HF_HUB_CACHE", "" }, { "HUGGINGFACE_HUB_CACHE", "" }, { "HF_HOME", "/hub" },
        { "XDG_CACHE_HOME", "/huggingface/hub" }, { "HOME", "/.cache/huggingface/hub" },
    };
    for (size_t i = 0; i < ARRAY_LEN(order); i++) {
        const char *v = env(order[i].var);
        if (v) return snprintf(buf, cap, "%s%s", v, order[i].sub) < (int)cap ? PK_OK : PK_EINVAL;
    }
    const struct passwd *pw = getpwuid(getuid());
    if (pw && pw->pw_dir && *pw->pw_dir)
        return snprintf(buf, cap, "%s/.cache/huggingface/hub", pw->pw_dir) < (int)cap ? PK_OK : PK_EINVAL;
    return PK_EINVAL;
}

/* --- the hub's API --- */

/* url's answer as JSON.  The hub's errors carry {"error": "..."}. */
static pk_status api_get(const hub_opts *o, const char *url, const char *repo, json_t **out, char *err,
                         size_t err_len)
{
    *out = NULL;
    char auth[600];
    httpc_header h[3] = { { "User-Agent", "polykv" }, { "Accept", "application/json" } };
    int n = 2;
    if (o->token && o->token[0]) {
        snprintf(auth, sizeof auth, "Bearer %s", o->token);
        h[n++] = (httpc_header){ "Authorization", auth };
    }
    httpc_request rq = { .method = "GET", .url = url, .headers = h, .n_headers = n,
                         .connect_timeout_ms = o->connect_timeout_ms, .timeout_ms = o->api_timeout_ms,
                         .max_body_bytes = 64 << 20, .max_redirects = 5 };
    httpc_response r;
    char why[256];
    pk_status st = httpc_fetch(&rq, &r, why, sizeof why);
    if (st != PK_OK) return pk_errf(err, err_len, st == PK_ENOMEM ? st : PK_EIO, "%s: cannot reach the hub: %s", url, why);
    json_t *j = r.body.p ? json_loadb(r.body.p, r.body.n, 0, NULL) : NULL;
    const char *msg = json_string_value(json_object_get(j, "error"));
    if (r.status == 401 || r.status == 403)
        st = pk_errf(err, err_len, PK_EREFUSED, "%s: the hub refused access (%ld%s%s): a gated or private repo needs "
                     "a token with access to it (--hf-token or HF_TOKEN)", repo, r.status, msg ? ": " : "", msg ? msg : "");
    else if (r.status == 404)
        st = pk_errf(err, err_len, PK_ENOTFOUND, "%s: no such repository on the hub (404%s%s)", repo, msg ? ": " : "",
                     msg ? msg : "");
    else if (r.status != 200)
        st = pk_errf(err, err_len, PK_EIO, "%s: the hub answered %ld%s%s", url, r.status, msg ? ": " : "", msg ? msg : "");
    else if (!j)
        st = pk_errf(err, err_len, PK_EFORMAT, "%s: the hub's answer is not JSON", url);
    httpc_response_free(&r);
    if (st == PK_OK) *out = j;
    else json_decref(j);
    return st;
}

/* The commit of branch "main", else of the first branch with a usable name
 * and commit (llama.cpp's get_repo_commit); written to refs/NAME. */
static pk_status api_commit(const hub_opts *o, const char *endpoint, const char *repo, const char *repo_dir,
                            char commit[41], char *err, size_t err_len)
{
    char url[2048];
    snprintf(url, sizeof url, "%sapi/models/%s/refs", endpoint, repo);
    json_t *j;
    pk_status st = api_get(o, url, repo, &j, err, err_len);
    if (st != PK_OK) return st;
    json_t *branches = json_object_get(j, "branches"), *b;
    const char *name = NULL;
    size_t i;
    json_array_foreach(branches, i, b) {
        const char *nm = json_string_value(json_object_get(b, "name"));
        const char *c = json_string_value(json_object_get(b, "targetCommit"));
        if (!nm || !c || !hub_valid_subpath(nm) || !hub_is_hex(c, 40)) continue;
        if (!name || !strcmp(nm, "main")) {
            name = nm;
            memcpy(commit, c, 41);
        }
        if (!strcmp(nm, "main")) break;
    }
    st = name ? hub_cache_write_ref(repo_dir, name, commit, err, err_len)
              : pk_errf(err, err_len, PK_EFORMAT, "%s: the hub's refs name no branch with a commit", repo);
    json_decref(j);
    return st;
}

/* The repo's files at commit (llama.cpp's get_repo_files): an LFS file's
 * oid is its sha256, another's its git oid; odd entries are skipped. */
static pk_status api_list(const hub_opts *o, const char *endpoint, const char *repo, const char *repo_dir,
                          hub_list *out, char *err, size_t err_len)
{
    memset(out, 0, sizeof *out);
    pk_status st = api_commit(o, endpoint, repo, repo_dir, out->commit, err, err_len);
    if (st != PK_OK) return st;
    char url[2048];
    snprintf(url, sizeof url, "%sapi/models/%s/tree/%s?recursive=true", endpoint, repo, out->commit);
    json_t *j, *item;
    if ((st = api_get(o, url, repo, &j, err, err_len)) != PK_OK) return st;
    if (!json_is_array(j)) st = pk_errf(err, err_len, PK_EFORMAT, "%s: the hub's file list is not a list", url);
    size_t i;
    json_array_foreach(j, i, item) {
        if (st != PK_OK) break;
        const char *type = json_string_value(json_object_get(item, "type"));
        const char *path = json_string_value(json_object_get(item, "path"));
        if (!type || strcmp(type, "file") || !path || !hub_valid_subpath(path)) continue;
        json_t *lfs = json_object_get(item, "lfs"), *from = json_is_object(lfs) ? lfs : item;
        const char *oid = json_string_value(json_object_get(from, "oid"));
        if (!oid) oid = "";
        if (oid[0] && !hub_is_hex(oid, 40) && !hub_is_hex(oid, 64)) continue;
        json_t *size = json_object_get(from, "size");
        st = hub_list_add(out, path, oid, json_is_integer(size) ? (int64_t)json_integer_value(size) : -1);
    }
    json_decref(j);
    if (st != PK_OK) hub_list_free(out);
    return st;
}

/* --- the pick over a listing --- */

static int find(const hub_list *l, const char *path)
{
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->v[i].path, path)) return i;
    return -1;
}

/* The GGUF files of l as one line, for a "no such file" message. */
static void list_ggufs(const hub_list *l, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = 0;
    for (int i = 0; i < l->n && n + 1 < cap; i++) {
        size_t k = strlen(l->v[i].path);
        if (k < 5 || strcmp(l->v[i].path + k - 5, ".gguf")) continue;
        n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? ", " : "", l->v[i].path);
    }
    if (!out[0]) snprintf(out, cap, "none");
}

/* The files to fetch for the pick: parts[0..*n_parts) index l in part
 * order.  PK_ENOTFOUND (the message says what is there) or PK_EFORMAT (a
 * split set with parts missing). */
static pk_status choose(const hub_list *l, const char *repo, const char *tag, const char *file, int **parts,
                        int *n_parts, char *err, size_t err_len)
{
    *parts = NULL;
    *n_parts = 0;
    int k;
    if (file) {
        k = find(l, file);
    } else {
        const char **paths = malloc((size_t)MAX(l->n, 1) * sizeof *paths);
        if (!paths) return PK_ENOMEM;
        for (int i = 0; i < l->n; i++) paths[i] = l->v[i].path;
        k = hub_pick(paths, l->n, tag);
        free(paths);
    }
    if (k < 0) {
        char have[1024];
        list_ggufs(l, have, sizeof have);
        return pk_errf(err, err_len, PK_ENOTFOUND, "%s has no %s%s%s; its GGUF files: %s", repo,
                       file ? "file " : "model GGUF", file ? file : tag[0] ? " for " : "", file ? "" : tag, have);
    }
    hub_split s, p;
    if (!hub_split_info(l->v[k].path, &s) || s.count <= 1) s.count = 1;
    if (!(*parts = malloc((size_t)s.count * sizeof **parts))) return PK_ENOMEM;
    *n_parts = s.count;
    for (int i = 0; i < s.count; i++) (*parts)[i] = i ? -1 : k;
    for (int i = 0; i < l->n && s.count > 1; i++)
        if (hub_split_info(l->v[i].path, &p) && p.count == s.count && p.prefix_len == s.prefix_len &&
            !strncmp(l->v[i].path, l->v[k].path, s.prefix_len) && p.index >= 1 && p.index <= s.count)
            (*parts)[p.index - 1] = i;
    for (int i = 1; i < s.count; i++)
        if ((*parts)[i] < 0) {
            free(*parts);
            *parts = NULL;
            return pk_errf(err, err_len, PK_EFORMAT, "%s: part %d of %d of %s is missing", repo, i + 1, s.count,
                           l->v[k].path);
        }
    return PK_OK;
}

/* --- fetching --- */

static bool unreserved(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* path with the bytes a URL path may not hold as they are %-escaped. */
static void url_path(const char *path, char *out, size_t cap)
{
    static const char ok[] = "-._~/!$&'()*+,;=:@";
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)path; *p && n + 4 < cap; p++)
        n += (size_t)snprintf(out + n, cap - n, unreserved(*p) || strchr(ok, *p) ? "%c" : "%%%02X", *p);
    out[n] = 0;
}

/* One part into the cache: its snapshot entry already works, its blob is
 * there (llama.cpp's rule: a blob named by its oid is that file), or it
 * is downloaded; then linked. */
static pk_status fetch(const hub_opts *o, const char *endpoint, const char *repo, const char *repo_dir,
                       const hub_list *l, const hub_file *f, int *n_downloaded, char *err, size_t err_len)
{
    char entry[PATH_MAX], dest[PATH_MAX], url[4096], esc[3200];
    if (!hub_join(entry, sizeof entry, "%s/snapshots/%s/%s", repo_dir, l->commit, f->path) ||
        !hub_join(dest, sizeof dest, "%s/blobs/%s", repo_dir, f->oid[0] ? f->oid : "") ||
        !hub_join(url, sizeof url, "%s%s/resolve/%s/", endpoint, repo, l->commit))
        return pk_errf(err, err_len, PK_EINVAL, "%s: the path or URL is too long", f->path);
    struct stat sb;
    if (stat(entry, &sb) == 0) return PK_OK;
    if (!f->oid[0]) memcpy(dest, entry, sizeof dest);
    if (stat(dest, &sb) != 0) {
        url_path(f->path, esc, sizeof esc);
        if (!hub_join(url + strlen(url), sizeof url - strlen(url), "%s", esc))
            return pk_errf(err, err_len, PK_EINVAL, "%s: the URL is too long", f->path);
        hub_dl d = { .o = o, .url = url, .dest = dest, .name = f->path, .size = f->size,
                     .sha256 = hub_is_hex(f->oid, 64) ? f->oid : "" };
        pk_status st = hub_dl_file(&d, err, err_len);
        if (st != PK_OK) return st;
        ++*n_downloaded;
    }
    return f->oid[0] ? hub_cache_link(repo_dir, l->commit, f, err, err_len) : PK_OK;
}

static pk_status fill(hub_model *out, const char *repo_dir, const hub_list *l, int k, int n_parts)
{
    char path[PATH_MAX];
    if (!hub_join(path, sizeof path, "%s/snapshots/%s/%s", repo_dir, l->commit, l->v[k].path)) return PK_EINVAL;
    out->path = strdup(path);
    out->file = strdup(l->v[k].path);
    out->n_parts = n_parts;
    return out->path && out->file ? PK_OK : PK_ENOMEM;
}

/* The pick from the cache, when all its parts are there. */
static bool from_cache(const char *repo_dir, const char *repo, const char *tag, const char *file, hub_model *out)
{
    hub_list l;
    if (hub_cache_read(repo_dir, &l) != PK_OK) return false;
    int *parts, n;
    char why[512];
    bool ok = choose(&l, repo, tag, file, &parts, &n, why, sizeof why) == PK_OK &&
              fill(out, repo_dir, &l, parts[0], n) == PK_OK;
    free(parts);
    if (!ok) hub_model_free(out);
    hub_list_free(&l);
    out->cached = ok;
    return ok;
}

/* Every check of o before a byte is read or sent. */
static pk_status check(const hub_opts *o, char *repo, char *tag, char *endpoint, char *repo_dir, char *err,
                       size_t err_len)
{
    if (hub_parse_spec(o->repo, repo, tag) != PK_OK)
        return pk_errf(err, err_len, PK_EINVAL, "%s: not USER/REPO[:QUANT] (letters, digits, '_', and '.', '-' "
                       "between them; QUANT of [A-Za-z0-9_.-])", o->repo ? o->repo : "(none)");
    if (o->file && !hub_valid_subpath(o->file))
        return pk_errf(err, err_len, PK_EINVAL, "%s: not a path inside the repo", o->file);
    for (const char *t = o->token; t && *t; t++)
        if ((unsigned char)*t <= ' ' || *t == 0x7f)
            return pk_errf(err, err_len, PK_EINVAL, "the token holds a space or control byte");
    if (o->endpoint) snprintf(endpoint, 1024, "%s%s", o->endpoint, o->endpoint[strlen(o->endpoint) - 1] == '/' ? "" : "/");
    else hub_endpoint(endpoint, 1024);
    if (strncmp(endpoint, "http://", 7) && strncmp(endpoint, "https://", 8))
        return pk_errf(err, err_len, PK_EUNSUPPORTED, "the hub endpoint %s is not http(s)", endpoint);
    char cache[PATH_MAX];
    if (o->cache_dir) snprintf(cache, sizeof cache, "%s", o->cache_dir);
    else if (hub_cache_dir(cache, sizeof cache) != PK_OK)
        return pk_errf(err, err_len, PK_EINVAL, "no cache directory: set LLAMA_CACHE or HF_HOME");
    /* models--USER--REPO, as the hub's client names it */
    size_t n = (size_t)snprintf(repo_dir, PATH_MAX, "%s/models--", cache);
    for (const char *r = repo; *r && n + 3 < PATH_MAX; r++) {
        if (*r == '/') repo_dir[n++] = '-';
        repo_dir[n++] = *r == '/' ? '-' : *r;
    }
    repo_dir[n] = 0;
    return n + 3 < PATH_MAX ? PK_OK : pk_errf(err, err_len, PK_EINVAL, "%s: the cache path is too long", cache);
}

pk_status hub_resolve(const hub_opts *o, hub_model *out, char *err, size_t err_len)
{
    memset(out, 0, sizeof *out);
    char repo[HUB_REPO_MAX], tag[HUB_TAG_MAX], endpoint[1024], repo_dir[PATH_MAX];
    pk_status st = check(o, repo, tag, endpoint, repo_dir, err, err_len);
    if (st != PK_OK) return st;
    if ((!o->refresh || o->offline) && from_cache(repo_dir, repo, tag, o->file, out)) return PK_OK;
    if (o->offline) {
        hub_list l;
        char have[1024] = "none";
        if (hub_cache_read(repo_dir, &l) == PK_OK) list_ggufs(&l, have, sizeof have), hub_list_free(&l);
        return pk_errf(err, err_len, PK_ENOTFOUND, "offline: %s%s%s%s%s is not in the cache (%s; its GGUF files "
                       "there: %s)", repo, tag[0] ? ":" : "", tag, o->file ? " file " : "", o->file ? o->file : "",
                       repo_dir, have);
    }
    hub_list l;
    if ((st = api_list(o, endpoint, repo, repo_dir, &l, err, err_len)) != PK_OK) {
        /* llama.cpp falls back on the cache when the hub cannot answer. */
        if (o->refresh && st == PK_EIO && from_cache(repo_dir, repo, tag, o->file, out)) {
            fprintf(stderr, "polykv: %s; using the cached %s\n", err, out->path);
            return PK_OK;
        }
        return st;
    }
    int *parts = NULL, n_parts = 0;
    st = choose(&l, repo, tag, o->file, &parts, &n_parts, err, err_len);
    for (int i = 0; st == PK_OK && i < n_parts; i++)
        st = fetch(o, endpoint, repo, repo_dir, &l, &l.v[parts[i]], &out->n_downloaded, err, err_len);
    if (st == PK_OK && (st = fill(out, repo_dir, &l, parts[0], n_parts)) != PK_OK)
        pk_errf(err, err_len, st, "%s", st == PK_ENOMEM ? "out of memory" : "the cache path is too long");
    free(parts);
    hub_list_free(&l);
    if (st != PK_OK) {
        int n = out->n_downloaded;
        hub_model_free(out);
        out->n_downloaded = n;
    }
    return st;
}
