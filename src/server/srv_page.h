/*
 * srv_page.h - the monitor page (docs/monitor.md) built into the binary.
 *
 * web/build.mjs bundles web/src with esbuild and writes BUILD/gen/page_assets.c,
 * a table of srv_asset: the page at "/" and its script and style sheet at
 * "/assets/<name>-<content hash>.<ext>", each raw and gzip-compressed.
 * srv_page.c serves them; nothing is read from disk at run time.
 *
 * Invariants: paths are unique; hashed assets never change under their
 * name (served as immutable), "/" is revalidated on every load.
 */
#ifndef SRV_PAGE_H
#define SRV_PAGE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct srv_asset {
    const char *path;              /* "/" or "/assets/..." */
    const char *type;              /* Content-Type */
    const unsigned char *data;     /* [n] the bytes as built */
    size_t n;
    const unsigned char *gz;       /* [n_gz] the same, gzip-compressed */
    size_t n_gz;
    bool immutable;                /* named by its hash: cacheable for ever */
} srv_asset;

/* The generated table (BUILD/gen/page_assets.c). */
extern const srv_asset srv_page_assets[];
extern const int srv_page_n_assets;

#endif
