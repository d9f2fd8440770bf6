/*
 * seed_gguf.c - writes a few tiny GGUF files with the writer, as fuzzing
 * seeds that hold every key/value type and several tensor types.
 * Usage: seed_gguf DIR
 */
#include "../src/gguf/gguf.h"

#include <stdio.h>
#include <string.h>

static int write_seed(const char *dir, const char *name, gguf_writer *w)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    pk_status st = gguf_write_file(w, path);
    gguf_writer_free(w);
    if (st != PK_OK) fprintf(stderr, "seed_gguf: %s: %s\n", path, pk_status_str(st));
    return st != PK_OK;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: seed_gguf DIR\n");
        return 2;
    }
    int bad = 0;
    uint8_t u8s[] = {1, 2, 3};
    int16_t i16s[] = {-1, 1};
    uint32_t u32s[] = {7, 8};
    float f32s[] = {0.5f, -2.0f};
    uint64_t u64s[] = {1, 2};
    double f64s[] = {1.0, 2.0};
    gguf_str strs[] = {{"a", 1}, {"", 0}, {"\xc4\xa0 t", 4}};
    uint8_t blob[2 * 144];
    memset(blob, 0x11, sizeof blob);

    gguf_writer *w = gguf_writer_new();
    gguf_add_str(w, "general.architecture", "llama", 5);
    gguf_add_u32(w, "llama.block_count", 1);
    gguf_add_i32(w, "k.i32", -3);
    gguf_add_f32(w, "k.f32", 1e-5f);
    gguf_add_bool(w, "k.bool", true);
    gguf_add_arr(w, "k.u8", GGUF_TYPE_UINT8, u8s, 3);
    gguf_add_arr(w, "k.i16", GGUF_TYPE_INT16, i16s, 2);
    gguf_add_arr(w, "k.u32", GGUF_TYPE_UINT32, u32s, 2);
    gguf_add_arr(w, "k.f32s", GGUF_TYPE_FLOAT32, f32s, 2);
    gguf_add_arr(w, "k.u64", GGUF_TYPE_UINT64, u64s, 2);
    gguf_add_arr(w, "k.f64", GGUF_TYPE_FLOAT64, f64s, 2);
    gguf_add_arr_str(w, "tokenizer.ggml.tokens", strs, 3);
    int64_t ne_f32[] = {4, 2}, ne_q8[] = {32}, ne_q4k[] = {256, 2}, ne_f16[] = {3, 1, 1, 2};
    gguf_add_tensor(w, "f32", 0, 2, ne_f32, blob, 32);
    gguf_add_tensor(w, "q8_0", 8, 1, ne_q8, blob, 34);
    gguf_add_tensor(w, "q4_K", 12, 2, ne_q4k, blob, 288);
    gguf_add_tensor(w, "f16", 1, 4, ne_f16, blob, 12);
    bad |= write_seed(argv[1], "seed_all_types.gguf", w);

    w = gguf_writer_new();
    gguf_add_u32(w, "general.alignment", 64);
    gguf_add_str(w, "general.name", "aligned", 7);
    gguf_add_tensor(w, "a", 0, 1, ne_q8, blob, 128);
    gguf_add_tensor(w, "b", 30, 1, ne_q8, blob, 64);
    bad |= write_seed(argv[1], "seed_align64.gguf", w);

    w = gguf_writer_new();
    gguf_add_arr_str(w, "tokenizer.ggml.merges", strs, 3);
    bad |= write_seed(argv[1], "seed_no_tensors.gguf", w);
    return bad;
}
