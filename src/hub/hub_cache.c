/*
 * hub_cache.c - the Hugging Face cache on disk (layout in hub.h): reading
 * a repo's recorded commit and snapshot, writing a ref, linking a
 * snapshot entry to its blob; and the file list both the cache and the
 * hub's listing fill.
 *
 * The snapshot is the truth about what is cached: an entry that opens is a
 * whole file (a blob appears only by a rename after its download was
 * complete, and checked), a link whose blob is gone is not there.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/buf.h"
#include "hub_impl.h"

bool hub_join(char *out, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, cap, fmt, ap);
    va_end(ap);
    return n >= 0 && (size_t)n < cap;
}

pk_status hub_list_add(hub_list *l, const char *path, const char *oid, int64_t size)
{
    if (pk_grow((void **)&l->v, &l->cap, (size_t)l->n + 1, sizeof *l->v) != PK_OK) return PK_ENOMEM;
    hub_file *f = &l->v[l->n];
    memset(f, 0, sizeof *f);
    if (!(f->path = strdup(path))) return PK_ENOMEM;
    snprintf(f->oid, sizeof f->oid, "%s", oid ? oid : "");
    f->size = size;
    l->n++;
    return PK_OK;
}

void hub_list_free(hub_list *l)
{
    for (int i = 0; i < l->n; i++) free(l->v[i].path);
    free(l->v);
    memset(l, 0, sizeof *l);
}

bool hub_is_hex(const char *s, size_t n)
{
    if (strlen(s) != n) return false;
    for (size_t i = 0; i < n; i++)
        if (!strchr("0123456789abcdefABCDEF", s[i])) return false;
    return true;
}

bool hub_valid_subpath(const char *p)
{
    size_t n = strlen(p);
    if (n == 0 || n >= 1024 || p[0] == '/') return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f || p[i] == '\\') return false;
    for (const char *s = p; *s;) {
        size_t k = strcspn(s, "/");
        if (k == 0 || (k == 1 && s[0] == '.') || (k == 2 && s[0] == '.' && s[1] == '.')) return false;
        s += k;
        if (*s == '/' && !*++s) return false;           /* a trailing '/' */
    }
    return true;
}

pk_status hub_mkdirs(const char *dir)
{
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return PK_EINVAL;
    for (char *s = p + 1; ; s++) {
        if (*s != '/' && *s) continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0755) && errno != EEXIST) return PK_EIO;
        *s = c;
        if (!c) break;
    }
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode) ? PK_OK : PK_EIO;
}

/* The first line of path in out[41] when it is a commit. */
static bool read_commit(const char *path, char out[41])
{
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char line[128] = "";
    bool ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    line[strcspn(line, "\r\n")] = 0;
    if (!ok || !hub_is_hex(line, 40)) return false;
    memcpy(out, line, 41);
    return true;
}

/* refs/main's commit, else the first valid ref's by name (llama.cpp takes
 * the directory's first; by name is the same answer on every machine). */
static bool cached_commit(const char *repo_dir, char out[41])
{
    char path[PATH_MAX], best[PATH_MAX] = "";
    snprintf(path, sizeof path, "%s/refs/main", repo_dir);
    if (read_commit(path, out)) return true;
    snprintf(path, sizeof path, "%s/refs", repo_dir);
    DIR *d = opendir(path);
    if (!d) return false;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char c[41];
        snprintf(path, sizeof path, "%s/refs/%s", repo_dir, e->d_name);
        if ((!best[0] || strcmp(e->d_name, best) < 0) && read_commit(path, c)) {
            snprintf(best, sizeof best, "%s", e->d_name);
            memcpy(out, c, 41);
        }
    }
    closedir(d);
    return best[0] != 0;
}

/* Adds the files under root/rel (rel "" at the top) that open. */
static pk_status walk(const char *root, const char *rel, int depth, hub_list *out)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s%s%s", root, rel[0] ? "/" : "", rel);
    DIR *d = depth < 16 ? opendir(dir) : NULL;
    if (!d) return PK_OK;
    pk_status st = PK_OK;
    struct dirent *e;
    while (st == PK_OK && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        size_t n = strlen(e->d_name), k = strlen(HUB_PARTIAL_SUFFIX);
        if (n > k && !strcmp(e->d_name + n - k, HUB_PARTIAL_SUFFIX)) continue;
        char sub[PATH_MAX], full[PATH_MAX];
        struct stat sb;
        if (!hub_join(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", e->d_name) ||
            !hub_join(full, sizeof full, "%s/%s", root, sub) || stat(full, &sb))
            continue;
        if (S_ISDIR(sb.st_mode)) st = walk(root, sub, depth + 1, out);
        else if (S_ISREG(sb.st_mode)) st = hub_list_add(out, sub, "", (int64_t)sb.st_size);
    }
    closedir(d);
    return st;
}

static int by_path(const void *a, const void *b)
{
    return strcmp(((const hub_file *)a)->path, ((const hub_file *)b)->path);
}

pk_status hub_cache_read(const char *repo_dir, hub_list *out)
{
    memset(out, 0, sizeof *out);
    char snap[PATH_MAX];
    if (!cached_commit(repo_dir, out->commit)) return PK_ENOTFOUND;
    snprintf(snap, sizeof snap, "%s/snapshots/%s", repo_dir, out->commit);
    pk_status st = walk(snap, "", 0, out);
    if (st != PK_OK) {
        hub_list_free(out);
        return st;
    }
    if (out->n == 0) return PK_ENOTFOUND;
    qsort(out->v, (size_t)out->n, sizeof *out->v, by_path);
    return PK_OK;
}

pk_status hub_cache_write_ref(const char *repo_dir, const char *branch, const char *commit, char *err,
                              size_t err_len)
{
    char path[PATH_MAX], tmp[PATH_MAX + 8], dir[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/refs/%s", repo_dir, branch) >= (int)sizeof path)
        return pk_errf(err, err_len, PK_EINVAL, "%s/refs/%s: path too long", repo_dir, branch);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = 0;
    FILE *f = hub_mkdirs(dir) == PK_OK ? fopen(tmp, "w") : NULL;
    bool ok = f && fputs(commit, f) >= 0;
    ok = f && !fclose(f) && ok && !rename(tmp, path);
    if (ok) return PK_OK;
    int e = errno;
    unlink(tmp);
    return pk_errf(err, err_len, PK_EIO, "cannot write %s: %s", path, strerror(e));
}

pk_status hub_cache_link(const char *repo_dir, const char *commit, const hub_file *f, char *err, size_t err_len)
{
    char entry[PATH_MAX], dir[PATH_MAX], blob[PATH_MAX], target[PATH_MAX] = "";
    if (snprintf(entry, sizeof entry, "%s/snapshots/%s/%s", repo_dir, commit, f->path) >= (int)sizeof entry)
        return pk_errf(err, err_len, PK_EINVAL, "%s: path too long", f->path);
    struct stat sb;
    if (stat(entry, &sb) == 0) return PK_OK;
    unlink(entry);                                   /* a link to a blob that is gone */
    snprintf(dir, sizeof dir, "%s", entry);
    *strrchr(dir, '/') = 0;
    if (hub_mkdirs(dir) != PK_OK)
        return pk_errf(err, err_len, PK_EIO, "cannot make %s: %s", dir, strerror(errno));
    snprintf(blob, sizeof blob, "%s/blobs/%s", repo_dir, f->oid);
    /* From the entry's directory up to repo_dir: snapshots/COMMIT, then
     * one more for each '/' in the path. */
    size_t n = 0;
    for (const char *s = f->path; *s; s++) n += *s == '/';
    for (size_t i = 0; i < n + 2; i++) strcat(target, "../");
    strcat(target, "blobs/");
    strcat(target, f->oid);
    if (symlink(target, entry) == 0 || rename(blob, entry) == 0) return PK_OK;
    return pk_errf(err, err_len, PK_EIO, "cannot link or move %s to %s: %s", blob, entry, strerror(errno));
}
