/*
 * cli_tokenize.c - `polykv tokenize`: token ids of a text.  Loads only the
 * vocabulary, so it works on vocab-only GGUF files.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tokenizer/tok.h"
#include "cli.h"

int cli_tokenize(int argc, char **argv)
{
    const char *path = NULL, *text = NULL;
    bool no_bos = false, json = false, no_parse_special = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(path = cli_arg(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--no-bos")) no_bos = true;
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--no-parse-special")) no_parse_special = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: polykv tokenize -m MODEL [--no-bos] [--no-parse-special] [--json] TEXT\n");
            return 0;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "polykv tokenize: unknown option %s\n", a);
            return 2;
        } else text = a;
    }
    if (!path || !text) {
        fprintf(stderr, "usage: polykv tokenize -m MODEL [--no-bos] [--json] TEXT\n");
        return 2;
    }
    char err[512] = "";
    gguf_ctx *g;
    tok_vocab *v;
    if (gguf_open(path, &g, err, sizeof err) || tok_load_gguf(g, &v, err, sizeof err)) {
        fprintf(stderr, "polykv: %s: %s\n", path, err);
        return 1;
    }
    size_t len = strlen(text);
    int32_t cap = (int32_t)MIN(len + 8, (size_t)(1 << 26)), n = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    ASSERT(ids);
    pk_status st = tok_encode(v, text, len, !no_bos, !no_parse_special, ids, cap, &n);
    if (st) {
        fprintf(stderr, "polykv: tokenize failed: %s\n", pk_status_str(st));
        return 1;
    }
    if (json) {
        putchar('[');
        for (int32_t i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
        printf("]\n");
    } else {
        for (int32_t i = 0; i < n; i++) {
            char piece[256];
            int32_t k = tok_piece(v, ids[i], piece, sizeof piece - 1, true);
            piece[k > 0 ? k : 0] = 0;
            printf("%6d -> '%s'\n", ids[i], piece);
        }
    }
    free(ids);
    tok_free(v);
    gguf_close(g);
    return 0;
}
