/* test_kv.c - the KV cache: storage addressing, every cell and sequence
 * operation, sharing and ownership, and a randomized comparison against a
 * naive reference model with every invariant checked after each step. */
#include "../src/kv/kv.h"
#include "test.h"

#include <stdint.h>

static kv_cache *make2(int n_layer, int n_ctx, int n_embd_k, int n_embd_v, tq_type type_k, tq_type type_v)
{
    kv_params p = { .n_layer = n_layer, .n_ctx = n_ctx, .n_embd_k = n_embd_k,
                    .n_embd_v = n_embd_v, .type_k = type_k, .type_v = type_v };
    kv_cache *kv = NULL;
    pk_status st = kv_new(&p, &kv);
    CHECK_EQ_INT(st, PK_OK);
    if (!kv) { test_finish(); exit(1); }
    return kv;
}

static kv_cache *make(int n_layer, int n_ctx, int n_embd_k, int n_embd_v, tq_type type)
{
    return make2(n_layer, n_ctx, n_embd_k, n_embd_v, type, type);
}

/* Occupies the lowest free cell with (pos, members) and returns its index. */
static int put(kv_cache *kv, kv_pos pos, const kv_seq *seqs, int n_seqs)
{
    int cell = -1;
    CHECK_EQ_INT(kv_find_slot(kv, 1, &cell), PK_OK);
    kv_cell_set(kv, cell, pos, seqs, n_seqs);
    return cell;
}

static int put1(kv_cache *kv, kv_pos pos, kv_seq s)
{
    return put(kv, pos, &s, 1);
}

static int owned_sum(const kv_cache *kv)
{
    int sum = 0;
    for (kv_seq s = 0; s < KV_MAX_SEQ; s++) sum += kv_seq_owned(kv, s);
    return sum;
}

static void test_params(void)
{
    kv_cache *kv = (kv_cache *)1;
    kv_params bad[] = {
        { 0, 8, 4, 4, TQ_F16, TQ_F16 }, { 1, 0, 4, 4, TQ_F16, TQ_F16 }, { 1, 8, 0, 4, TQ_F16, TQ_F16 },
        { 1, 8, 4, -1, TQ_F16, TQ_F16 },
        /* rows of a block format hold whole blocks */
        { 1, 8, 4, 4, TQ_Q8_0, TQ_Q8_0 }, { 1, 8, 64, 48, TQ_Q8_0, TQ_Q4_0 }, { 1, 8, 64, 64, TQ_F16, 12345 },
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        CHECK_EQ_INT(kv_new(&bad[i], &kv), PK_EINVAL);
        CHECK(kv == NULL);
    }
    CHECK_EQ_INT(kv_new(NULL, &kv), PK_EINVAL);
    /* Sizes whose product overflows size_t are refused before allocating. */
    kv_params huge = { INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX, TQ_F32, TQ_F32 };
    CHECK_EQ_INT(kv_new(&huge, &kv), PK_ENOMEM);
    CHECK(kv == NULL);
    kv_free(NULL);
}

/* Rows of nk and nv values: kb and vb bytes each. */
static void test_storage(tq_type tk_, tq_type tv, int nk, int nv, size_t kb, size_t vb)
{
    const int n_layer = 3, n_ctx = 37;
    kv_cache *kv = make2(n_layer, n_ctx, nk, nv, tk_, tv);
    const kv_params *p = kv_get_params(kv);
    CHECK_EQ_INT(p->n_layer, n_layer);
    CHECK_EQ_INT(p->n_ctx, n_ctx);
    CHECK_EQ_INT(p->type_k, tk_);
    CHECK_EQ_INT(p->type_v, tv);
    CHECK_EQ_INT(kv_k_row_bytes(kv), kb);
    CHECK_EQ_INT(kv_v_row_bytes(kv), vb);
    CHECK_EQ_INT(kv_size_bytes(kv), (size_t)n_layer * n_ctx * (kb + vb));

    /* Zeroed at creation. */
    int nonzero = 0;
    for (int l = 0; l < n_layer; l++)
        for (int c = 0; c < n_ctx; c++) {
            const uint8_t *k = kv_k_row(kv, l, c), *v = kv_v_row(kv, l, c);
            for (size_t b = 0; b < kv_k_row_bytes(kv); b++) nonzero += k[b] != 0;
            for (size_t b = 0; b < kv_v_row_bytes(kv); b++) nonzero += v[b] != 0;
        }
    CHECK_EQ_INT(nonzero, 0);

    for (int l = 0; l < n_layer; l++) {
        CHECK_EQ_INT((uintptr_t)kv_k_base(kv, l) % 64, 0);
        CHECK_EQ_INT((uintptr_t)kv_v_base(kv, l) % 64, 0);
        CHECK(kv_k_base(kv, l) == kv_k_row(kv, l, 0));
        CHECK(kv_v_base(kv, l) == kv_v_row(kv, l, 0));
        for (int c = 0; c < n_ctx; c++) {
            CHECK((uint8_t *)kv_k_row(kv, l, c) == (const uint8_t *)kv_k_base(kv, l) + c * kv_k_row_bytes(kv));
            CHECK((uint8_t *)kv_v_row(kv, l, c) == (const uint8_t *)kv_v_base(kv, l) + c * kv_v_row_bytes(kv));
        }
    }

    /* Every row gets a distinct byte pattern; reading back proves no two
     * rows (of any layer, K or V) overlap. */
    for (int l = 0; l < n_layer; l++)
        for (int c = 0; c < n_ctx; c++) {
            memset(kv_k_row(kv, l, c), (l * n_ctx + c) * 2 % 251 + 1, kv_k_row_bytes(kv));
            memset(kv_v_row(kv, l, c), (l * n_ctx + c) * 2 % 251 + 2, kv_v_row_bytes(kv));
        }
    int bad = 0;
    for (int l = 0; l < n_layer; l++)
        for (int c = 0; c < n_ctx; c++) {
            const uint8_t *k = kv_k_row(kv, l, c), *v = kv_v_row(kv, l, c);
            for (size_t b = 0; b < kv_k_row_bytes(kv); b++) bad += k[b] != (l * n_ctx + c) * 2 % 251 + 1;
            for (size_t b = 0; b < kv_v_row_bytes(kv); b++) bad += v[b] != (l * n_ctx + c) * 2 % 251 + 2;
        }
    CHECK_EQ_INT(bad, 0);

    /* Typed access through the row pointers. */
    if (tk_ == TQ_F32) {
        float *r = kv_k_row(kv, 2, 36);
        r[nk - 1] = 1.5f;
        CHECK(((const float *)kv_k_base(kv, 2))[36 * nk + nk - 1] == 1.5f);
    }
    kv_free(kv);
}

static void test_empty(void)
{
    kv_cache *kv = make(1, 8, 4, 4, TQ_F16);
    CHECK_EQ_INT(kv_used(kv), 0);
    CHECK_EQ_INT(kv_cells_end(kv), 0);
    for (int i = 0; i < 8; i++) {
        CHECK_EQ_INT(kv_cell_pos(kv, i), -1);
        CHECK_EQ_INT(kv_cell_owner(kv, i), -1);
        const kv_seqset *s = kv_cell_seqs(kv, i);
        CHECK((s->w[0] | s->w[1] | s->w[2] | s->w[3]) == 0);
    }
    CHECK_EQ_INT(kv_seq_pos_min(kv, 0), -1);
    CHECK_EQ_INT(kv_seq_pos_max(kv, 255), -1);
    CHECK_EQ_INT(kv_seq_cells(kv, 3), 0);
    CHECK_EQ_INT(kv_seq_owned(kv, 3), 0);
    /* Operations on an empty cache are harmless. */
    kv_seq_rm(kv, -1, -1, -1);
    kv_seq_rm(kv, 2, 0, 10);
    kv_seq_cp(kv, 0, 1, -1, -1);
    kv_seq_keep(kv, 0);
    CHECK_EQ_INT(kv_seq_add(kv, 0, -1, -1, 5), PK_OK);
    CHECK(kv_check(kv));
    kv_free(kv);
}

static void test_find_slot_and_set(void)
{
    kv_cache *kv = make(1, 8, 4, 4, TQ_F32);
    int cells[8];
    CHECK_EQ_INT(kv_find_slot(kv, 0, cells), PK_OK);
    CHECK_EQ_INT(kv_find_slot(kv, -1, cells), PK_EINVAL);
    CHECK_EQ_INT(kv_find_slot(kv, 9, cells), PK_EFULL);
    CHECK_EQ_INT(kv_find_slot(kv, 3, cells), PK_OK);
    CHECK_EQ_INT(cells[0], 0);
    CHECK_EQ_INT(cells[1], 1);
    CHECK_EQ_INT(cells[2], 2);
    /* Marks nothing. */
    CHECK_EQ_INT(kv_used(kv), 0);
    CHECK_EQ_INT(kv_find_slot(kv, 1, cells), PK_OK);
    CHECK_EQ_INT(cells[0], 0);

    kv_seq two[2] = { 5, 1 };
    kv_cell_set(kv, 0, 10, &two[0], 1);
    kv_cell_set(kv, 2, 11, two, 2);
    CHECK_EQ_INT(kv_used(kv), 2);
    CHECK_EQ_INT(kv_cells_end(kv), 3);
    CHECK_EQ_INT(kv_cell_pos(kv, 2), 11);
    CHECK_EQ_INT(kv_cell_owner(kv, 2), 5);          /* first member owns */
    CHECK(kv_seqset_has(kv_cell_seqs(kv, 2), 1));
    CHECK(kv_seqset_has(kv_cell_seqs(kv, 2), 5));
    CHECK(!kv_seqset_has(kv_cell_seqs(kv, 2), 0));
    CHECK_EQ_INT(kv_seq_cells(kv, 5), 2);
    CHECK_EQ_INT(kv_seq_cells(kv, 1), 1);
    CHECK_EQ_INT(kv_seq_owned(kv, 5), 2);
    CHECK_EQ_INT(kv_seq_owned(kv, 1), 0);

    /* Lowest free first, skipping used cells. */
    CHECK_EQ_INT(kv_find_slot(kv, 3, cells), PK_OK);
    CHECK_EQ_INT(cells[0], 1);
    CHECK_EQ_INT(cells[1], 3);
    CHECK_EQ_INT(cells[2], 4);

    /* Fill up: exactly the free count fits, one more is PK_EFULL and leaves
     * the output untouched. */
    CHECK_EQ_INT(kv_find_slot(kv, 6, cells), PK_OK);
    for (int i = 0; i < 6; i++) kv_cell_set(kv, cells[i], 20 + i, &two[1], 1);
    CHECK_EQ_INT(kv_used(kv), 8);
    CHECK_EQ_INT(kv_cells_end(kv), 8);
    cells[0] = 1234;
    CHECK_EQ_INT(kv_find_slot(kv, 1, cells), PK_EFULL);
    CHECK_EQ_INT(cells[0], 1234);
    CHECK_EQ_INT(kv_find_slot(kv, 0, cells), PK_OK);

    /* Freeing a middle cell makes it the next slot. */
    kv_seq_rm(kv, 1, 23, 24);
    CHECK_EQ_INT(kv_used(kv), 7);
    CHECK_EQ_INT(kv_find_slot(kv, 1, cells), PK_OK);
    int freed = cells[0];
    CHECK_EQ_INT(kv_cell_pos(kv, freed), -1);
    CHECK_EQ_INT(kv_find_slot(kv, 2, cells), PK_EFULL);

    /* Repeated ids count once. */
    kv_seq dup[3] = { 7, 7, 8 };
    kv_cell_set(kv, freed, 3, dup, 3);
    CHECK_EQ_INT(kv_seq_cells(kv, 7), 1);
    CHECK_EQ_INT(kv_seq_owned(kv, 7), 1);
    CHECK_EQ_INT(owned_sum(kv), kv_used(kv));
    CHECK(kv_check(kv));
    kv_free(kv);
}

static void test_rm_ranges(void)
{
    kv_cache *kv = make(1, 16, 4, 4, TQ_F16);
    for (int p = 0; p < 10; p++) put1(kv, p, 0);
    for (int p = 0; p < 3; p++) put1(kv, p, 1);
    CHECK_EQ_INT(kv_cells_end(kv), 13);
    CHECK_EQ_INT(kv_seq_pos_min(kv, 0), 0);
    CHECK_EQ_INT(kv_seq_pos_max(kv, 0), 9);

    kv_seq_rm(kv, 0, 7, -1);                 /* [7, inf) */
    CHECK_EQ_INT(kv_seq_cells(kv, 0), 7);
    CHECK_EQ_INT(kv_seq_pos_max(kv, 0), 6);
    CHECK_EQ_INT(kv_cells_end(kv), 13);      /* seq 1 sits at 10..12 */
    kv_seq_rm(kv, 0, -1, 2);                 /* [0, 2) */
    CHECK_EQ_INT(kv_seq_cells(kv, 0), 5);
    CHECK_EQ_INT(kv_seq_pos_min(kv, 0), 2);
    kv_seq_rm(kv, 0, 4, 4);                  /* empty range */
    CHECK_EQ_INT(kv_seq_cells(kv, 0), 5);
    kv_seq_rm(kv, 0, 5, 3);                  /* inverted range: empty */
    CHECK_EQ_INT(kv_seq_cells(kv, 0), 5);
    kv_seq_rm(kv, 1, -1, -1);
    CHECK_EQ_INT(kv_seq_cells(kv, 1), 0);
    CHECK_EQ_INT(kv_cells_end(kv), 7);       /* trailing free cells trimmed */
    CHECK_EQ_INT(kv_used(kv), 5);

    /* seq < 0: every sequence, shared cells included. */
    kv_seq both[2] = { 2, 3 };
    put(kv, 100, both, 2);
    kv_seq_rm(kv, -1, 4, 101);
    CHECK_EQ_INT(kv_used(kv), 2);            /* pos 2, 3 of seq 0 */
    CHECK_EQ_INT(kv_seq_cells(kv, 2), 0);
    CHECK_EQ_INT(kv_seq_cells(kv, 3), 0);
    CHECK_EQ_INT(kv_seq_owned(kv, 2), 0);
    CHECK_EQ_INT(kv_seq_pos_max(kv, 0), 3);
    kv_seq_rm(kv, -1, -1, -1);
    CHECK_EQ_INT(kv_used(kv), 0);
    CHECK_EQ_INT(kv_cells_end(kv), 0);
    CHECK(kv_check(kv));
    kv_free(kv);
}

/* seq_cp shares without moving data; removing the original keeps the cells;
 * removing the last member frees them. */
static void test_sharing(void)
{
    kv_cache *kv = make(2, 16, 4, 4, TQ_F32);
    int cell[6];
    for (int p = 0; p < 6; p++) {
        cell[p] = put1(kv, p, 0);
        *(float *)kv_k_row(kv, 1, cell[p]) = (float)(100 + p);
    }
    kv_seq_cp(kv, 0, 1, -1, 4);              /* positions 0..3 */
    CHECK_EQ_INT(kv_used(kv), 6);            /* no new cells */
    CHECK_EQ_INT(kv_seq_cells(kv, 1), 4);
    CHECK_EQ_INT(kv_seq_owned(kv, 1), 0);
    CHECK_EQ_INT(kv_seq_owned(kv, 0), 6);
    CHECK_EQ_INT(kv_seq_pos_max(kv, 1), 3);
    kv_seq_cp(kv, 0, 1, -1, 4);              /* again: idempotent */
    CHECK_EQ_INT(kv_seq_cells(kv, 1), 4);
    kv_seq_cp(kv, 0, 0, -1, -1);             /* onto itself: nothing */
    CHECK_EQ_INT(kv_seq_cells(kv, 0), 6);
    kv_seq_cp(kv, 1, 2, 2, -1);              /* chained share: 2 gets 2..3 */
    CHECK_EQ_INT(kv_seq_cells(kv, 2), 2);
    CHECK_EQ_INT(kv_seq_pos_min(kv, 2), 2);
    int32_t excl[KV_MAX_SEQ];
    kv_excl_counts(kv, excl);                /* 0 alone holds 4..5 */
    CHECK_EQ_INT(excl[0], 2);
    CHECK_EQ_INT(excl[1], 0);
    CHECK_EQ_INT(excl[2], 0);

    /* The owner leaves: shared cells survive, charge goes to the lowest
     * remaining member; unshared ones are freed. */
    kv_seq_rm(kv, 0, -1, -1);
    CHECK_EQ_INT(kv_used(kv), 4);
    CHECK_EQ_INT(kv_seq_cells(kv, 0), 0);
    CHECK_EQ_INT(kv_seq_owned(kv, 0), 0);
    CHECK_EQ_INT(kv_seq_owned(kv, 1), 4);
    CHECK_EQ_INT(kv_cell_owner(kv, cell[3]), 1);
    CHECK_EQ_INT(kv_cell_pos(kv, cell[4]), -1);
    for (int p = 0; p < 4; p++) {
        CHECK_EQ_INT(kv_cell_pos(kv, cell[p]), p);
        CHECK(*(float *)kv_k_row(kv, 1, cell[p]) == (float)(100 + p));
    }
    CHECK_EQ_INT(kv_cells_end(kv), 4);

    /* 1 leaves: 0..1 freed (1 was the last member), 2..3 move to 2. */
    kv_seq_rm(kv, 1, -1, -1);
    CHECK_EQ_INT(kv_used(kv), 2);
    CHECK_EQ_INT(kv_seq_owned(kv, 2), 2);
    CHECK_EQ_INT(kv_cell_owner(kv, cell[2]), 2);
    CHECK_EQ_INT(kv_cell_pos(kv, cell[0]), -1);
    kv_seq_rm(kv, 2, -1, -1);
    CHECK_EQ_INT(kv_used(kv), 0);
    CHECK_EQ_INT(kv_cells_end(kv), 0);
    CHECK(kv_check(kv));

    /* Reference counting by membership: a cell held by k sequences is freed
     * exactly when the k-th leaves, whatever the order. */
    kv_seq members[5] = { 9, 200, 64, 63, 0 };
    int c = put(kv, 7, members, 5);
    CHECK_EQ_INT(kv_cell_owner(kv, c), 9);
    kv_seq order[5] = { 64, 9, 0, 200, 63 };
    kv_seq heir[5]  = { 9, 0, 63, 63, -1 };
    for (int j = 0; j < 5; j++) {
        kv_seq_rm(kv, order[j], 7, 8);
        CHECK_EQ_INT(kv_cell_owner(kv, c), heir[j]);
        CHECK_EQ_INT(kv_used(kv), j < 4 ? 1 : 0);
        CHECK_EQ_INT(owned_sum(kv), kv_used(kv));
        CHECK(kv_check(kv));
    }
    kv_free(kv);
}

static void test_keep(void)
{
    kv_cache *kv = make(1, 16, 4, 4, TQ_F16);
    kv_seq ab[2] = { 0, 1 }, ba[2] = { 1, 0 }, c2[1] = { 2 };
    put(kv, 0, ab, 2);
    put(kv, 1, ba, 2);
    put(kv, 2, c2, 1);
    int last = put(kv, 3, ab, 2);
    put(kv, 4, c2, 1);
    CHECK_EQ_INT(kv_cells_end(kv), 5);
    kv_seq_keep(kv, 1);
    CHECK_EQ_INT(kv_used(kv), 3);
    CHECK_EQ_INT(kv_seq_cells(kv, 0), 0);
    CHECK_EQ_INT(kv_seq_cells(kv, 2), 0);
    CHECK_EQ_INT(kv_seq_cells(kv, 1), 3);
    CHECK_EQ_INT(kv_seq_owned(kv, 1), 3);
    CHECK_EQ_INT(kv_seq_owned(kv, 0), 0);
    CHECK_EQ_INT(kv_cell_owner(kv, last), 1);
    CHECK_EQ_INT(kv_cells_end(kv), 4);
    kv_seq_keep(kv, 5);                      /* not present: empties */
    CHECK_EQ_INT(kv_used(kv), 0);
    CHECK_EQ_INT(kv_cells_end(kv), 0);
    CHECK(kv_check(kv));
    kv_free(kv);
}

static void test_add(void)
{
    kv_cache *kv = make(1, 16, 4, 4, TQ_F16);
    int cell[8];
    for (int p = 0; p < 8; p++) cell[p] = put1(kv, p, 0);
    CHECK_EQ_INT(kv_seq_add(kv, 0, 4, -1, 10), PK_OK);       /* 4..7 -> 14..17 */
    CHECK_EQ_INT(kv_cell_pos(kv, cell[3]), 3);
    CHECK_EQ_INT(kv_cell_pos(kv, cell[4]), 14);
    CHECK_EQ_INT(kv_seq_pos_max(kv, 0), 17);
    CHECK_EQ_INT(kv_seq_add(kv, 0, 14, 16, -2), PK_OK);      /* 14,15 -> 12,13 */
    CHECK_EQ_INT(kv_cell_pos(kv, cell[5]), 13);
    CHECK_EQ_INT(kv_cell_pos(kv, cell[6]), 16);
    /* Context shift: drop below 0 leaves (and frees, sole member). */
    CHECK_EQ_INT(kv_seq_add(kv, 0, -1, -1, -3), PK_OK);
    CHECK_EQ_INT(kv_used(kv), 5);
    CHECK_EQ_INT(kv_cell_pos(kv, cell[0]), -1);
    CHECK_EQ_INT(kv_cell_pos(kv, cell[3]), 0);
    CHECK_EQ_INT(kv_seq_pos_min(kv, 0), 0);
    CHECK_EQ_INT(kv_seq_cells(kv, 0), 5);
    CHECK_EQ_INT(kv_seq_owned(kv, 0), 5);
    CHECK(kv_check(kv));

    /* A shared cell in range: refused, nothing changed. */
    kv_seq_cp(kv, 0, 1, 9, 10);              /* share pos 9 (was cell[4]) */
    kv_pos before[16];
    for (int i = 0; i < 16; i++) before[i] = kv_cell_pos(kv, i);
    int used = kv_used(kv), end = kv_cells_end(kv), c0 = kv_seq_cells(kv, 0), c1 = kv_seq_cells(kv, 1);
    CHECK_EQ_INT(kv_seq_add(kv, 0, -1, -1, -5), PK_EINVAL);
    CHECK_EQ_INT(kv_seq_add(kv, 0, 0, 10, 1), PK_EINVAL);
    CHECK_EQ_INT(kv_seq_add(kv, 1, -1, -1, 1), PK_EINVAL);
    CHECK_EQ_INT(kv_seq_add(kv, 0, 9, 10, 0), PK_EINVAL);
    int same = 1;
    for (int i = 0; i < 16; i++) same &= before[i] == kv_cell_pos(kv, i);
    CHECK(same);
    CHECK_EQ_INT(kv_used(kv), used);
    CHECK_EQ_INT(kv_cells_end(kv), end);
    CHECK_EQ_INT(kv_seq_cells(kv, 0), c0);
    CHECK_EQ_INT(kv_seq_cells(kv, 1), c1);
    /* Ranges that avoid the shared cell still work. */
    CHECK_EQ_INT(kv_seq_add(kv, 0, 10, -1, 100), PK_OK);
    CHECK_EQ_INT(kv_seq_pos_max(kv, 0), 114);
    CHECK_EQ_INT(kv_seq_add(kv, 0, 0, 1, 0), PK_OK);
    /* Overflow past INT32_MAX is refused too. */
    CHECK_EQ_INT(kv_seq_add(kv, 0, 100, -1, INT32_MAX - 50), PK_EINVAL);
    CHECK_EQ_INT(kv_seq_pos_max(kv, 0), 114);
    /* Another sequence's unshared cells move independently. */
    kv_seq_rm(kv, 0, 9, 10);
    CHECK_EQ_INT(kv_seq_add(kv, 1, -1, -1, 1), PK_OK);
    CHECK_EQ_INT(kv_seq_pos_min(kv, 1), 10);
    CHECK(kv_check(kv));
    kv_free(kv);
}

static void test_clear(void)
{
    kv_cache *kv = make(1, 8, 4, 4, TQ_F16);
    kv_seq m[3] = { 255, 3, 128 };
    for (int p = 0; p < 5; p++) put(kv, p, m, 1 + p % 3);
    kv_clear(kv);
    CHECK_EQ_INT(kv_used(kv), 0);
    CHECK_EQ_INT(kv_cells_end(kv), 0);
    CHECK_EQ_INT(kv_seq_cells(kv, 255), 0);
    CHECK_EQ_INT(kv_seq_owned(kv, 255), 0);
    CHECK_EQ_INT(kv_seq_pos_max(kv, 3), -1);
    int cells[8];
    CHECK_EQ_INT(kv_find_slot(kv, 8, cells), PK_OK);
    CHECK_EQ_INT(cells[7], 7);
    CHECK(kv_check(kv));
    kv_free(kv);
}

/* ---- randomized comparison against a naive model ---------------------- */

#define R_CTX 48

typedef struct ref_model {
    kv_pos pos[R_CTX];
    bool mem[R_CTX][KV_MAX_SEQ];
    kv_seq owner[R_CTX];
} ref_model;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)((rng_state >> 11) % n);
}

/* Sequence ids straddling the bitset's word boundaries. */
static const kv_seq pool_ids[] = { 0, 1, 2, 3, 5, 63, 64, 65, 127, 128, 200, 255 };
#define N_POOL ((int)ARRAY_LEN(pool_ids))

static kv_seq pick_seq(void) { return pool_ids[rnd(N_POOL)]; }
static kv_pos pick_pos(void) { return rnd(8) == 0 ? -1 : (kv_pos)rnd(40); }

static bool ref_free(const ref_model *r, int i) { return r->pos[i] < 0; }

static void ref_leave(ref_model *r, int i, kv_seq s)
{
    r->mem[i][s] = false;
    if (r->owner[i] != s) return;
    r->owner[i] = -1;
    for (kv_seq t = 0; t < KV_MAX_SEQ; t++)
        if (r->mem[i][t]) { r->owner[i] = t; break; }
    if (r->owner[i] < 0) r->pos[i] = -1;
}

static void ref_clear_cell(ref_model *r, int i)
{
    memset(r->mem[i], 0, sizeof(r->mem[i]));
    r->pos[i] = -1;
    r->owner[i] = -1;
}

static bool ref_in(kv_pos p, kv_pos p0, kv_pos p1)
{
    return p >= (p0 < 0 ? 0 : p0) && (p1 < 0 || p < p1);
}

static int ref_members(const ref_model *r, int i)
{
    int n = 0;
    for (kv_seq t = 0; t < KV_MAX_SEQ; t++) n += r->mem[i][t];
    return n;
}

/* Compares the cache with the model in every observable; returns false on
 * the first difference so the caller can report the step. */
static bool same_as_ref(const kv_cache *kv, const ref_model *r)
{
    int used = 0, end = 0;
    for (int i = 0; i < R_CTX; i++) {
        if (kv_cell_pos(kv, i) != r->pos[i] || kv_cell_owner(kv, i) != r->owner[i]) return false;
        const kv_seqset *set = kv_cell_seqs(kv, i);
        for (int k = 0; k < N_POOL; k++)
            if (kv_seqset_has(set, pool_ids[k]) != r->mem[i][pool_ids[k]]) return false;
        if (!ref_free(r, i)) { used++; end = i + 1; }
    }
    if (kv_used(kv) != used || kv_cells_end(kv) != end) return false;
    for (int k = 0; k < N_POOL; k++) {
        kv_seq s = pool_ids[k];
        int cells = 0, owned = 0;
        kv_pos lo = -1, hi = -1;
        for (int i = 0; i < R_CTX; i++) {
            if (!r->mem[i][s]) continue;
            cells++;
            owned += r->owner[i] == s;
            if (lo < 0 || r->pos[i] < lo) lo = r->pos[i];
            if (r->pos[i] > hi) hi = r->pos[i];
        }
        if (kv_seq_cells(kv, s) != cells || kv_seq_owned(kv, s) != owned) return false;
        if (kv_seq_pos_min(kv, s) != lo || kv_seq_pos_max(kv, s) != hi) return false;
    }
    return owned_sum(kv) == used && kv_check(kv);
}

static void test_random(int n_ops)
{
    kv_cache *kv = make(1, R_CTX, 2, 2, TQ_F16);
    static ref_model r;
    memset(&r, 0, sizeof(r));
    for (int i = 0; i < R_CTX; i++) { r.pos[i] = -1; r.owner[i] = -1; }

    int n_full = 0, n_refused = 0, n_shared_max = 0, fails = 0;
    for (int step = 0; step < n_ops && fails == 0; step++) {
        uint32_t op = rnd(100);
        if (op < 40) {                                   /* batch insert */
            int n = 1 + (int)rnd(6), cells[6], want[6], got = 0;
            for (int i = 0; i < R_CTX && got < n; i++)
                if (ref_free(&r, i)) want[got++] = i;
            pk_status st = kv_find_slot(kv, n, cells);
            if (got < n) {
                n_full++;
                if (st != PK_EFULL) fails++;
                continue;
            }
            if (st != PK_OK || memcmp(cells, want, (size_t)n * sizeof(int)) != 0) { fails++; continue; }
            for (int j = 0; j < n; j++) {
                kv_seq seqs[4];
                int ns = 1 + (int)rnd(4);
                for (int k = 0; k < ns; k++) seqs[k] = pick_seq();
                kv_pos p = (kv_pos)rnd(40);
                kv_cell_set(kv, cells[j], p, seqs, ns);
                r.pos[cells[j]] = p;
                r.owner[cells[j]] = seqs[0];
                for (int k = 0; k < ns; k++) r.mem[cells[j]][seqs[k]] = true;
            }
        } else if (op < 62) {                            /* remove a range */
            kv_seq s = rnd(10) == 0 ? -1 : pick_seq();
            kv_pos p0 = pick_pos(), p1 = pick_pos();
            kv_seq_rm(kv, s, p0, p1);
            for (int i = 0; i < R_CTX; i++) {
                if (ref_free(&r, i) || !ref_in(r.pos[i], p0, p1)) continue;
                if (s < 0) ref_clear_cell(&r, i);
                else if (r.mem[i][s]) ref_leave(&r, i, s);
            }
        } else if (op < 84) {                            /* share a range */
            kv_seq a = pick_seq(), b = pick_seq();
            kv_pos p0 = pick_pos(), p1 = pick_pos();
            kv_seq_cp(kv, a, b, p0, p1);
            for (int i = 0; i < R_CTX; i++)
                if (!ref_free(&r, i) && r.mem[i][a] && ref_in(r.pos[i], p0, p1)) r.mem[i][b] = true;
        } else if (op < 97) {                            /* shift a range */
            kv_seq s = pick_seq();
            kv_pos p0 = pick_pos(), p1 = pick_pos(), d = (kv_pos)rnd(21) - 10;
            bool shared = false;
            for (int i = 0; i < R_CTX; i++)
                if (!ref_free(&r, i) && r.mem[i][s] && ref_in(r.pos[i], p0, p1) && ref_members(&r, i) > 1)
                    shared = true;
            pk_status st = kv_seq_add(kv, s, p0, p1, d);
            if (st != (shared ? PK_EINVAL : PK_OK)) fails++;
            if (shared) { n_refused++; continue; }
            for (int i = 0; i < R_CTX; i++) {
                if (ref_free(&r, i) || !r.mem[i][s] || !ref_in(r.pos[i], p0, p1)) continue;
                if (r.pos[i] + d < 0) ref_leave(&r, i, s);
                else r.pos[i] += d;
            }
        } else if (op < 99) {                            /* keep one */
            kv_seq s = pick_seq();
            kv_seq_keep(kv, s);
            for (int i = 0; i < R_CTX; i++) {
                if (ref_free(&r, i)) continue;
                if (!r.mem[i][s]) { ref_clear_cell(&r, i); continue; }
                memset(r.mem[i], 0, sizeof(r.mem[i]));
                r.mem[i][s] = true;
                r.owner[i] = s;
            }
        } else {
            kv_clear(kv);
            for (int i = 0; i < R_CTX; i++) ref_clear_cell(&r, i);
        }
        for (int i = 0; i < R_CTX; i++)
            if (!ref_free(&r, i) && ref_members(&r, i) > n_shared_max) n_shared_max = ref_members(&r, i);
        if (!same_as_ref(kv, &r)) {
            fprintf(stderr, "random: mismatch after step %d (op %u)\n", step, op);
            fails++;
        }
    }
    CHECK_EQ_INT(fails, 0);
    /* The mix must actually exercise the interesting paths. */
    CHECK(n_full > 100);
    CHECK(n_refused > 100);
    CHECK(n_shared_max >= 4);
    printf("random: %d ops, %d full, %d shift refusals, max members %d\n",
           n_ops, n_full, n_refused, n_shared_max);
    kv_free(kv);
}

/* kv_seq_take moves charges, never membership; kv_seq_common counts cells
 * two sequences both hold. */
static void test_take_and_common(void)
{
    kv_cache *kv = make(1, 16, 4, 4, TQ_F16);
    for (int p = 0; p < 6; p++) put1(kv, p, 3);       /* seq 3 materializes 0..5 */
    kv_seq_cp(kv, 3, 9, 2, 6);                         /* 9 joins 2..5 */
    CHECK_EQ_INT(kv_seq_common(kv, 3, 9, -1, -1), 4);
    CHECK_EQ_INT(kv_seq_common(kv, 3, 9, 0, 4), 2);
    CHECK_EQ_INT(kv_seq_common(kv, 9, 8, -1, -1), 0);
    kv_seq_take(kv, 9, 3, 5);
    CHECK_EQ_INT(kv_seq_owned(kv, 9), 2);
    CHECK_EQ_INT(kv_seq_owned(kv, 3), 4);
    CHECK_EQ_INT(kv_seq_cells(kv, 3), 6);
    CHECK_EQ_INT(owned_sum(kv), kv_used(kv));
    kv_seq_take(kv, 9, -1, -1);                        /* only cells 9 holds */
    CHECK_EQ_INT(kv_seq_owned(kv, 9), 4);
    kv_seq_rm(kv, 9, -1, -1);                          /* charges go back to a member */
    CHECK_EQ_INT(kv_seq_owned(kv, 3), 6);
    CHECK_EQ_INT(kv_used(kv), 6);
    CHECK(kv_check(kv));
    kv_free(kv);
}

int main(int argc, char **argv)
{
    test_select(argc, argv);
    TEST_RUN(test_params);
    TEST_RUN(test_storage, TQ_F16, TQ_F16, 13, 7, 26, 14);
    TEST_RUN(test_storage, TQ_F32, TQ_F32, 13, 7, 52, 28);
    TEST_RUN(test_storage, TQ_BF16, TQ_F16, 13, 7, 26, 14);
    /* a block format's rows: 34 bytes per 32 values (Q8_0), 18 (Q4_0) */
    TEST_RUN(test_storage, TQ_Q8_0, TQ_Q8_0, 64, 96, 68, 102);
    TEST_RUN(test_storage, TQ_Q8_0, TQ_Q4_0, 64, 32, 68, 18);
    TEST_RUN(test_empty);
    TEST_RUN(test_find_slot_and_set);
    TEST_RUN(test_rm_ranges);
    TEST_RUN(test_sharing);
    TEST_RUN(test_keep);
    TEST_RUN(test_add);
    TEST_RUN(test_clear);
    TEST_RUN(test_take_and_common);
    TEST_RUN(test_random, 100000);
    return test_finish();
}
