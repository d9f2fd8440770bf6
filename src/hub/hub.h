/*
 * hub.h - a model by name: `-hf USER/REPO[:QUANT]` resolved to a GGUF file
 * in the Hugging Face cache, downloaded from the hub when it is not there.
 *
 * It follows llama.cpp (common/download.cpp, common/hf-cache.cpp), so a
 * file either program downloaded is found by the other without a request:
 *
 *   endpoint  $MODEL_ENDPOINT, else $HF_ENDPOINT, else https://huggingface.co/
 *             (a '/' is added at the end when missing)
 *   cache     the first set of $LLAMA_CACHE, $HF_HUB_CACHE,
 *             $HUGGINGFACE_HUB_CACHE, $HF_HOME/hub,
 *             $XDG_CACHE_HOME/huggingface/hub, $HOME/.cache/huggingface/hub
 *   layout    (the hub's own client's)
 *     CACHE/models--USER--REPO/refs/main            the commit (40 hex digits)
 *     CACHE/models--USER--REPO/blobs/OID            a file, named by its sha256 (LFS)
 *     CACHE/models--USER--REPO/blobs/OID.downloadInProgress   a partial download
 *     CACHE/models--USER--REPO/snapshots/COMMIT/PATH -> ../../blobs/OID
 *   requests  GET  api/models/REPO/refs                 branch "main"'s targetCommit
 *             GET  api/models/REPO/tree/COMMIT?recursive=true   path, oid, lfs.oid, size
 *             HEAD REPO/resolve/COMMIT/PATH   (not followed: X-Linked-Etag, X-Linked-Size)
 *             GET  REPO/resolve/COMMIT/PATH   (redirects followed; Range to resume)
 *   which     with -hff FILE, that path; else the first model GGUF (not
 *             mmproj, imatrix, mtp-, eagle3-, dflash-, dspark-) whose path
 *             holds QUANT followed by '.' or '-', any case; without QUANT,
 *             Q4_K_M, then Q8_0, then the first model GGUF.  A split GGUF
 *             (NAME-00001-of-0000N.gguf) is picked by its first part and all
 *             N parts are fetched.
 *
 * Where it differs, on purpose:
 *   - A file the cache holds under its repo's recorded commit is used with
 *     no request at all (llama.cpp asks the API for the newest commit on
 *     every online start); refresh asks the hub again.
 *   - Each LFS file is checked against its sha256 (the listing's lfs.oid,
 *     which names its blob; the hub's X-Linked-Etag must agree) before it
 *     is renamed into place; a mismatch deletes it and is an error.
 *     llama.cpp checks nothing.  Files without an sha256 (small files kept
 *     in git, named by their git oid) are not checked.
 *   - The token goes to the hub (API and resolve) whatever its form;
 *     libcurl drops it on a redirect to another host, port or scheme (the
 *     CDN), as llama.cpp's HTTP client does.
 *   - A repository's preset.ini (llama.cpp: router mode) is not read.
 *
 * Threads: every function runs on the caller's thread and blocks; nothing
 * is shared, so any thread may call them.  Two processes downloading the
 * same file at once are not coordinated (as in llama.cpp).
 */
#ifndef HUB_H
#define HUB_H

#include <stdbool.h>
#include <stdint.h>

#include "../common/pk.h"

enum { HUB_REPO_MAX = 257, HUB_TAG_MAX = 64 };

typedef enum hub_progress {
    HUB_PROGRESS_AUTO,     /* a bar when stderr is a terminal, else lines */
    HUB_PROGRESS_BAR,      /* one line redrawn in place on stderr */
    HUB_PROGRESS_LINES,    /* a line on stderr every 10% */
    HUB_PROGRESS_NONE,
} hub_progress;

typedef struct hub_opts {
    const char *repo;          /* "USER/REPO[:QUANT]" (-hf) */
    const char *file;          /* a path in the repo (-hff), NULL: QUANT picks */
    const char *token;         /* a bearer token for the hub, NULL or "": none */
    const char *endpoint;      /* NULL: hub_endpoint()'s */
    const char *cache_dir;     /* NULL: hub_cache_dir()'s */
    bool offline;              /* the cache only, never a request */
    bool refresh;              /* ask the hub even when the cache holds the file */
    hub_progress progress;
    int n_tries;               /* attempts per file download */
    int retry_delay_ms;        /* before the second attempt, doubling after */
    int stall_ms;              /* a transfer without a byte for this long fails the attempt */
    long connect_timeout_ms;
    long api_timeout_ms;       /* each API request and HEAD, whole */
} hub_opts;

/* The result: owned by the caller, hub_model_free it. */
typedef struct hub_model {
    char *path;                /* the file to load: the snapshot's entry (of part 1 for a split) */
    char *file;                /* its path in the repo */
    int n_parts;               /* 1, or N of a split GGUF (every part is in the snapshot) */
    bool cached;               /* found in the cache, no request made */
    int n_downloaded;          /* files fetched by this call */
} hub_model;

/* Defaults: 3 tries 2 s apart (then 4 s, as llama.cpp), a 60 s stall,
 * 30 s to connect, 60 s per API request, progress AUTO; the rest NULL or
 * false.  Pure. */
hub_opts hub_default_opts(void);

/* Finds o->repo's file in the cache or fetches it (see the top).  PK_OK:
 * *out holds it.  Errors, err saying why and what to do:
 * PK_EINVAL (a malformed repo, QUANT, file or token; no cache directory),
 * PK_ENOTFOUND (offline and not cached; no such file or QUANT in the repo,
 * the names there listed; the hub answered 404), PK_EREFUSED (401 / 403:
 * a gated or private repo, the token missing or wrong), PK_EFORMAT (the
 * hub's answer is not what its API gives; a sha256 mismatch, the file
 * deleted), PK_EIO (no answer after n_tries; a write failed), PK_EFULL
 * (no room for the file, seen before the download or by a write: no more
 * tries), PK_EUNSUPPORTED (an http(s) endpoint only), PK_ENOMEM.  A
 * download that failed keeps its partial file; the next call resumes it.
 * Progress and notes go to stderr.  Any thread. */
pk_status hub_resolve(const hub_opts *o, hub_model *out, char *err, size_t err_len);

/* Frees what m holds and zeroes it; a zeroed m is a no-op. */
void hub_model_free(hub_model *m);

/* The endpoint from the environment (see the top), ending in '/', in
 * buf[cap].  Pure but for getenv. */
void hub_endpoint(char *buf, size_t cap);

/* The cache directory from the environment (see the top) in buf[cap]:
 * PK_OK, or PK_EINVAL when no variable is set and the user has no home. */
pk_status hub_cache_dir(char *buf, size_t cap);

/* --- the pure rules, for the CLI and tests --- */

/* Splits "USER/REPO[:QUANT]" into repo[HUB_REPO_MAX] and tag[HUB_TAG_MAX]
 * ("" without one) as llama.cpp does (the text after the last ':' is the
 * tag).  The repo must be llama.cpp's valid id: [A-Za-z0-9_] with '.', '-'
 * and exactly one '/' only between them, at most 256 bytes; the tag
 * [A-Za-z0-9_.-].  PK_OK or PK_EINVAL. */
pk_status hub_parse_spec(const char *spec, char *repo, char *tag);

/* A GGUF path's split: part index and count (1 and 1 when not split),
 * prefix_len (bytes of path before "-0000i-of-0000N.gguf" or ".gguf") and
 * its quant tag upper-cased (the text after the prefix's last '-' or '.',
 * when [A-Za-z0-9_]), "" when none.  False when path does not end in
 * ".gguf". */
typedef struct hub_split {
    int index, count;
    size_t prefix_len;
    char tag[HUB_TAG_MAX];
} hub_split;
bool hub_split_info(const char *path, hub_split *out);

/* Whether path names a model GGUF: ends in ".gguf" and its base name holds
 * none of mmproj, imatrix, mtp-, eagle3-, dflash-, dspark-. */
bool hub_is_model_gguf(const char *path);

/* Picks from paths[n] (a repo's files in listing order) the model for tag
 * ("" none) by the rules at the top: its index, or -1. */
int hub_pick(const char *const *paths, int n, const char *tag);

#endif
