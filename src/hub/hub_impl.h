/*
 * hub_impl.h - what the hub module's files share (hub.h is the manual):
 * a repo's file list, the cache's file operations (hub_cache.c) and one
 * file's download (hub_dl.c).
 */
#ifndef HUB_IMPL_H
#define HUB_IMPL_H

#include <limits.h>
#include <stddef.h>

#include "hub.h"

/* Beside the file it becomes, as llama.cpp names it, so either program
 * resumes the other's partial download. */
#define HUB_PARTIAL_SUFFIX ".downloadInProgress"

typedef struct hub_file {
    char *path;                /* in the repo, checked by hub_valid_subpath */
    char oid[65];              /* an LFS file's sha256 (64 hex), a git oid (40 hex), or "" */
    int64_t size;              /* bytes, -1 unknown */
} hub_file;

/* A repo's files at one commit: the hub's listing or the cache's. */
typedef struct hub_list {
    hub_file *v;               /* [n] */
    int n;
    size_t cap;
    char commit[41];
} hub_list;

pk_status hub_list_add(hub_list *l, const char *path, const char *oid, int64_t size);
void hub_list_free(hub_list *l);

/* snprintf into out[cap]: false when it did not fit (out then holds a
 * cut text that must not be used as a path). */
bool hub_join(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Whether s is n hex digits and nothing more (n = 40 or 64 for oids). */
bool hub_is_hex(const char *s, size_t n);

/* A relative path that stays inside the directory it is joined to: no
 * leading '/', no empty, "." or ".." part, no control byte or '\\', under
 * 1024 bytes. */
bool hub_valid_subpath(const char *p);

/* --- hub_cache.c: the cache's directories (layout in hub.h) --- */

/* Makes dir and its parents (mode 0755); PK_OK when they exist. */
pk_status hub_mkdirs(const char *dir);
/* The files of repo_dir's recorded commit (refs/main, else the first ref
 * by name) whose snapshot entry opens (a link to a missing blob does not),
 * sorted by path.  PK_ENOTFOUND: no ref or snapshot; PK_ENOMEM. */
pk_status hub_cache_read(const char *repo_dir, hub_list *out);
/* Records commit as branch's in repo_dir/refs (written whole, then
 * renamed). */
pk_status hub_cache_write_ref(const char *repo_dir, const char *branch, const char *commit, char *err,
                              size_t err_len);
/* Makes f's snapshot entry under commit a relative link to its blob
 * (llama.cpp's finalize_file; where links cannot be made, the blob is
 * moved there).  A working entry is kept as it is. */
pk_status hub_cache_link(const char *repo_dir, const char *commit, const hub_file *f, char *err, size_t err_len);

/* --- hub_dl.c: one file --- */

typedef struct hub_dl {
    const hub_opts *o;         /* token, tries, timeouts, progress */
    const char *url;           /* the hub's resolve URL */
    const char *dest;          /* where the whole, checked file goes */
    const char *name;          /* shown in progress and errors */
    const char *sha256;        /* 64 hex the file must hash to, or "" (then the hub's X-Linked-Etag, if any) */
    int64_t size;              /* from the listing, -1 unknown */
} hub_dl;

/* Fetches d->url into d->dest: HEAD at the hub, then GET (redirects
 * followed) into dest + HUB_PARTIAL_SUFFIX, resumed with Range where a
 * partial file is, up to n_tries attempts; checked, then renamed to dest.
 * Errors as hub_resolve's. */
pk_status hub_dl_file(const hub_dl *d, char *err, size_t err_len);

#endif
