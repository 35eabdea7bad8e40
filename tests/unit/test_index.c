/*
 * test_index.c -- unit tests of the inverted index (index/include/index.h) and its
 * public face: the block and header codecs (round trips; every truncation
 * and byte flip is either rejected as corrupt or decodes to a consistent
 * block, never read out of bounds), block boundaries (one block, one block
 * plus one, emptied blocks, a term's last document), skip_to across blocks,
 * the seeds' example, corrupt records on disk, and the rebuild-equivalence
 * property: after random puts, replaces and deletes (single writes and
 * batches), the index equals a fresh load of the surviving documents.
 */
#include "testutil.h"

#include <sys/stat.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "idx_int.h"
#include <streamvbyte.h>
#include <string.h>
#include "kvfts.h"

#define S(x) x, strlen(x)

/* A small deterministic PRNG (xorshift64*), so failures reproduce. */
static uint64_t rng_state = 88172645463325252ull;
static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 2685821657736338717ull) >> 33) % n;
}

/* ---- codecs ------------------------------------------------------------- */

static void random_block(idx_block *b, uint32_t n, bool positions)
{
    kv_err err = KV_ERR_INIT;
    assert_int_equal(idx_block_reserve(b, n + 1, (uint64_t)n * 8 + 1, &err), 0);
    b->n = n;
    b->positions = positions;
    uint32_t id = 1 + rnd(1000), k = 0;
    for (uint32_t i = 0; i < n; i++) {
        b->ids[i] = id;
        id += 1 + (rnd(4) ? rnd(3) : rnd(100000));
        b->tfs[i] = rnd(5) ? 1 : 1 + rnd(7);
        b->poff[i] = k;
        uint32_t p = rnd(50);
        for (uint32_t j = 0; j < b->tfs[i]; j++) {
            b->pos[k++] = p;
            p += 1 + rnd(rnd(10) ? 20 : 70000);
        }
    }
    b->poff[n] = k;
    b->npos = k;
}

static void assert_same_block(const idx_block *a, const idx_block *b)
{
    assert_int_equal(a->n, b->n);
    assert_memory_equal(a->ids, b->ids, (size_t)a->n * 4);
    assert_memory_equal(a->tfs, b->tfs, (size_t)a->n * 4);
    if (a->positions) {
        assert_int_equal(a->npos, b->npos);
        assert_memory_equal(a->pos, b->pos, (size_t)a->npos * 4);
    }
}

static void test_block_roundtrip(void **state)
{
    (void)state;
    idx_block b, d;
    idx_block_init(&b);
    idx_block_init(&d);
    kv_buf buf = KV_BUF_INIT;
    kv_err err = KV_ERR_INIT;
    for (int iter = 0; iter < 400; iter++) {
        uint32_t n = 1 + rnd(IDX_BLOCK_DOCS);
        bool pos = rnd(2);
        random_block(&b, n, pos);
        assert_int_equal(idx_block_encode(&b, 0, n, &buf, &err), 0);
        assert_int_equal(idx_block_decode(&d, b.ids[0], buf.data, buf.len,
                                          IDX_DECODE_POSITIONS, &err), 0);
        assert_true(d.positions == pos);
        assert_same_block(&b, &d);
        uint32_t max_tf = 0;
        for (uint32_t i = 0; i < n; i++)
            if (b.tfs[i] > max_tf)
                max_tf = b.tfs[i];
        assert_int_equal(d.max_tf, max_tf);
        /* Without positions, ids and tfs still decode. */
        assert_int_equal(idx_block_decode(&d, b.ids[0], buf.data, buf.len,
                                          IDX_DECODE_IDS, &err), 0);
        assert_memory_equal(d.ids, b.ids, (size_t)n * 4);
        /* A sub-range encodes as its own block. */
        if (n > 2) {
            uint32_t from = 1 + rnd(n - 2);
            assert_int_equal(idx_block_encode(&b, from, n, &buf, &err), 0);
            assert_int_equal(idx_block_decode(&d, b.ids[from], buf.data,
                                              buf.len, IDX_DECODE_POSITIONS, &err), 0);
            assert_int_equal(d.n, n - from);
            assert_memory_equal(d.ids, b.ids + from, (size_t)(n - from) * 4);
        }
    }
    /* tf 1 everywhere costs 2 bits a document in the tf stream. */
    random_block(&b, 128, false);
    for (uint32_t i = 0; i < 128; i++)
        b.tfs[i] = 1;
    assert_int_equal(idx_block_encode(&b, 0, 128, &buf, &err), 0);
    assert_true(buf.len < 2 + 14 + 32 + 127 * 4 + 40);
    idx_block_free(&b);
    idx_block_free(&d);
    kv_buf_free(&buf);
}

/* Damaged bytes: ECORRUPT, or (a flip that keeps the stream well formed) a
 * block that still obeys every invariant.  ASan checks the reads. */
/* Our StreamVByte decoder (SSSE3 and plain C) against the library's
 * encoder, on values of every byte width, every tail length and deltas
 * that wrap around. */
static void test_svb_decoder(void **state)
{
    (void)state;
    enum { MAX = 300 };
    uint32_t in[MAX], out[MAX + 8];
    unsigned char enc[MAX * 5 + 64];
    uint64_t x = 88172645463325252ull;
    for (uint32_t n = 0; n <= MAX; n += (n < 40 ? 1 : 37)) {
        for (int round = 0; round < 4; round++) {
            for (uint32_t i = 0; i < n; i++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                unsigned width = (unsigned)(x >> 62);     /* 1..4 bytes */
                uint32_t v = (uint32_t)(x >> 8);
                in[i] = width == 3 ? v : v & ((1u << (8 * (width + 1))) - 1);
            }
            memset(enc, 0xA5, sizeof enc);   /* garbage past the stream */
            size_t len = streamvbyte_encode(in, n, enc);
            assert_int_equal(idx_svb_size(enc, len, n, false), len);
            memset(out, 0, sizeof out);
            idx_svb_decode(enc, out, n);
            assert_memory_equal(out, in, (size_t)n * 4);
            memset(out, 0, sizeof out);
            idx__svb_decode_c(enc, out, n, false, 0);
            assert_memory_equal(out, in, (size_t)n * 4);
            /* The 0124 coding (term frequencies): 0, 1, 2 or 4 bytes. */
            for (uint32_t i = 0; i < n; i++)
                if (i % 3 == 0)
                    in[i] = 0;
            memset(enc, 0xA5, sizeof enc);
            len = streamvbyte_encode_0124(in, n, enc);
            assert_int_equal(idx_svb_size(enc, len, n, true), len);
            memset(out, 0xFF, sizeof out);
            idx_svb_decode_0124(enc, out, n);
            assert_memory_equal(out, in, (size_t)n * 4);
            len = streamvbyte_encode(in, n, enc);
            /* As deltas from a start: the running sums (mod 2^32). */
            uint32_t sums[MAX], acc = 7;
            for (uint32_t i = 0; i < n; i++)
                sums[i] = acc += in[i];
            idx_svb_delta_decode(enc, out, n, 7);
            assert_memory_equal(out, sums, (size_t)n * 4);
            memset(out, 0, sizeof out);
            idx__svb_decode_c(enc, out, n, true, 7);
            assert_memory_equal(out, sums, (size_t)n * 4);
        }
    }
}

static void test_block_corruption(void **state)
{
    (void)state;
    idx_block b, d;
    idx_block_init(&b);
    idx_block_init(&d);
    kv_buf buf = KV_BUF_INIT;
    kv_err err = KV_ERR_INIT;
    for (int iter = 0; iter < 60; iter++) {
        uint32_t n = 1 + rnd(IDX_BLOCK_DOCS);
        random_block(&b, n, rnd(2));
        assert_int_equal(idx_block_encode(&b, 0, n, &buf, &err), 0);
        size_t len = buf.len;
        /* Every truncation is corrupt (a block's sizes add up exactly). */
        for (size_t cut = 0; cut < len; cut++) {
            char *copy = malloc(cut + 1);
            memcpy(copy, buf.data, cut);
            assert_int_equal(idx_block_decode(&d, b.ids[0], copy, cut, IDX_DECODE_POSITIONS,
                                              &err), KVFTS_ECORRUPT);
            free(copy);
        }
        /* Byte flips: never a crash; if accepted, consistent. */
        for (int f = 0; f < 40; f++) {
            char *copy = malloc(len);
            memcpy(copy, buf.data, len);
            copy[rnd((uint32_t)len)] ^= (char)(1 + rnd(255));
            int rc = idx_block_decode(&d, b.ids[0], copy, len, IDX_DECODE_POSITIONS, &err);
            if (rc == KVFTS_OK) {
                for (uint32_t i = 1; i < d.n; i++)
                    assert_true(d.ids[i] > d.ids[i - 1]);
                for (uint32_t i = 0; i < d.n; i++)
                    assert_true(d.tfs[i] >= 1 && d.tfs[i] <= d.max_tf);
            } else {
                assert_int_equal(rc, KVFTS_ECORRUPT);
            }
            free(copy);
        }
    }
    /* Trailing garbage is corrupt too. */
    random_block(&b, 10, true);
    assert_int_equal(idx_block_encode(&b, 0, 10, &buf, &err), 0);
    assert_int_equal(kv_buf_append(&buf, "x", 1, &err), 0);
    assert_int_equal(idx_block_decode(&d, b.ids[0], buf.data, buf.len, IDX_DECODE_POSITIONS,
                                      &err), KVFTS_ECORRUPT);
    idx_block_free(&b);
    idx_block_free(&d);
    kv_buf_free(&buf);
}

static void test_header_codec(void **state)
{
    (void)state;
    kv_buf buf = KV_BUF_INIT;
    kv_err err = KV_ERR_INIT;
    idx_header h = { 300, 1000, 3, 5000, 4000, true }, g;
    assert_int_equal(idx_header_encode(&h, &buf, &err), 0);
    assert_int_equal(idx_header_decode(buf.data, buf.len, &g, &err), 0);
    assert_true(g.df == 300 && g.cf == 1000 && g.blocks == 3 &&
                g.last == 5000 && g.lastblk == 4000 && g.positions);
    for (size_t cut = 0; cut < buf.len; cut++)
        assert_int_equal(idx_header_decode(buf.data, cut, &g, &err),
                         KVFTS_ECORRUPT);
    /* Inconsistent values are corrupt: cf < df, more blocks than docs. */
    idx_header bad = { 5, 4, 1, 9, 9, false };
    assert_int_equal(idx_header_encode(&bad, &buf, &err), 0);
    assert_int_equal(idx_header_decode(buf.data, buf.len, &g, &err),
                     KVFTS_ECORRUPT);
    bad = (idx_header){ 2, 2, 3, 9, 9, false };
    assert_int_equal(idx_header_encode(&bad, &buf, &err), 0);
    assert_int_equal(idx_header_decode(buf.data, buf.len, &g, &err),
                     KVFTS_ECORRUPT);
    kv_buf_free(&buf);
}

/* ---- a database --------------------------------------------------------- */

typedef struct fx {
    char *dir;
    kvfts_db *db;
} fx;

static int fx_setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    f->dir = tu_tmpdir();
    kvfts_open_options o = KVFTS_OPEN_OPTIONS_INIT;
    o.create = true;
    if (!f->dir || kvfts_open(&f->db, f->dir, &o) != KVFTS_OK)
        return -1;
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fx *f = *state;
    kvfts_close(f->db);
    tu_rmtree(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

static void assert_term(kvfts_db *db, const char *field, const char *term,
                        const char *want)
{
    char *got = NULL;
    size_t n;
    int rc = kvfts_term_get(&got, &n, db, S(field), S(term), 0);
    if (!want) {
        if (rc != KVFTS_ENOTFOUND)
            fail_msg("fts::%s::%s: expected none, got %s", field, term,
                     rc ? kvfts_errmsg(db) : got);
        return;
    }
    if (rc)
        fail_msg("fts::%s::%s: %s", field, term, kvfts_errmsg(db));
    assert_string_equal(got, want);
    kvfts_free(got);
}

static void assert_consistent(kvfts_db *db)
{
    uint64_t diffs = 99;
    assert_int_equal(kvfts_check(&diffs, db, NULL, NULL), 0);
    assert_int_equal(diffs, 0);
}

static void test_seed_example(void **state)
{
    fx *f = *state;
    kvfts_db *db = f->db;
    assert_int_equal(kvfts_put(NULL, db, S("the_fox"),
                               S("{\"text\":\"The quick brown fox jumps over "
                                 "the lazy dog\"}"), 0), 0);
    assert_int_equal(kvfts_put(NULL, db, S("the_cat"),
                               S("{\"text\":\"The quick brown fox jumps over "
                                 "the lazy cat\"}"), 0), 0);
    assert_term(db, "_all", "fox", "{\"count\":2,\"refs\":[\"the_cat\","
                                   "\"the_fox\"]}");
    assert_term(db, "_all", "cat", "{\"count\":1,\"refs\":[\"the_cat\"]}");
    assert_term(db, "text", "dog", "{\"count\":1,\"refs\":[\"the_fox\"]}");
    assert_term(db, "_all", "The", NULL);       /* stored terms are folded */
    char *j;
    size_t n;
    assert_int_equal(kvfts_term_get(&j, &n, db, S("_all"), S("the"), 1), 0);
    assert_string_equal(j, "{\"count\":2,\"refs\":[\"the_cat\"]}");
    kvfts_free(j);
    /* Replace the_cat: its old terms go, the new ones come. */
    assert_int_equal(kvfts_put(NULL, db, S("the_cat"),
                               S("{\"text\":\"a sleepy cat\"}"), 0), 0);
    assert_term(db, "_all", "fox", "{\"count\":1,\"refs\":[\"the_fox\"]}");
    assert_term(db, "_all", "sleepy", "{\"count\":1,\"refs\":[\"the_cat\"]}");
    /* Deleting a term's last document removes the entry. */
    assert_int_equal(kvfts_del(db, S("the_cat"), 0), 0);
    assert_term(db, "_all", "sleepy", NULL);
    assert_term(db, "_all", "cat", NULL);
    kvfts_stats st;
    assert_int_equal(kvfts_get_stats(&st, db), 0);
    assert_int_equal(st.documents, 1);
    assert_int_equal(st.terms, 16);      /* 8 distinct words, text and _all */
    assert_consistent(db);
}

/* Documents doc::1..doc::N each holding "common" once. */
static void put_range(kvfts_db *db, int from, int to)
{
    for (int i = from; i <= to; i++) {
        char k[32], j[64];
        snprintf(k, sizeof k, "doc::%04d", i);
        snprintf(j, sizeof j, "{\"t\":\"common w%d\"}", i);
        assert_int_equal(kvfts_put(NULL, db, S(k), S(j), 0), 0);
    }
}

static uint64_t term_count(kvfts_db *db, const char *term)
{
    char *j;
    size_t n;
    if (kvfts_term_get(&j, &n, db, S("t"), S(term), 0) != KVFTS_OK)
        return 0;
    unsigned long long c = 0;
    sscanf(j, "{\"count\":%llu", &c);
    kvfts_free(j);
    return c;
}

static void test_block_boundaries(void **state)
{
    fx *f = *state;
    kvfts_db *db = f->db;
    kvfts_stats st;
    /* Exactly one full block. */
    put_range(db, 1, IDX_BLOCK_DOCS);
    assert_int_equal(term_count(db, "common"), IDX_BLOCK_DOCS);
    assert_int_equal(kvfts_get_stats(&st, db), 0);
    uint64_t blocks_one = st.blocks;
    assert_consistent(db);
    /* One more document: "common" splits into two blocks in each of its
     * two fields (t and _all). */
    put_range(db, IDX_BLOCK_DOCS + 1, IDX_BLOCK_DOCS + 1);
    assert_int_equal(kvfts_get_stats(&st, db), 0);
    assert_int_equal(st.blocks, blocks_one + 2 /* splits */ + 2 /* w129 */);
    assert_consistent(db);
    /* Delete the first half: the first block empties and goes. */
    for (int i = 1; i <= IDX_BLOCK_DOCS / 2 + 1; i++) {
        char k[32];
        snprintf(k, sizeof k, "doc::%04d", i);
        assert_int_equal(kvfts_del(db, S(k), 0), 0);
    }
    assert_int_equal(term_count(db, "common"),
                     IDX_BLOCK_DOCS + 1 - (IDX_BLOCK_DOCS / 2 + 1));
    assert_consistent(db);
    /* Delete everything: the entry disappears. */
    for (int i = IDX_BLOCK_DOCS / 2 + 2; i <= IDX_BLOCK_DOCS + 1; i++) {
        char k[32];
        snprintf(k, sizeof k, "doc::%04d", i);
        assert_int_equal(kvfts_del(db, S(k), 0), 0);
    }
    assert_term(db, "t", "common", NULL);
    assert_int_equal(kvfts_get_stats(&st, db), 0);
    assert_int_equal(st.terms, 0);
    assert_int_equal(st.blocks, 0);
    assert_consistent(db);
}

/* skip_to and next across many blocks, against the ids written. */
static void test_skip_to(void **state)
{
    fx *f = *state;
    kvfts_db *db = f->db;
    kvfts_batch *b;
    assert_int_equal(kvfts_batch_begin(&b, db), 0);
    for (int i = 1; i <= 1000; i++) {
        char k[32];
        snprintf(k, sizeof k, "d%04d", i);
        /* every third document has "x" */
        const char *j = i % 3 ? "{\"t\":\"y\"}" : "{\"t\":\"x y\"}";
        assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S(k), S(j)), 0);
    }
    assert_int_equal(kvfts_batch_commit(b), 0);
    kvfts_batch_free(b);
    kv_env *env;
    kv_err err = KV_ERR_INIT;
    assert_int_equal(kv_env_open(&env, f->dir, NULL, &err), 0);
    kv_txn *t;
    assert_int_equal(kv_txn_begin(&t, env, false, &err), 0);
    idx_postings *p;
    assert_int_equal(idx_postings_open(&p, t, S("t"), S("x"), &err), 0);
    assert_int_equal(idx_postings_info(p)->df, 333);
    assert_true(idx_postings_info(p)->blocks >= 3);
    /* Doc ids are 1..1000 in load order, so "x" has ids 3, 6, 9, ... */
    uint32_t targets[] = { 1, 3, 4, 200, 201, 390, 391, 700, 999 };
    for (size_t i = 0; i < sizeof targets / sizeof *targets; i++) {
        assert_int_equal(idx_postings_skip_to(p, targets[i], &err), 0);
        uint32_t want = (targets[i] + 2) / 3 * 3;
        assert_int_equal(idx_postings_docid(p), want);
        const uint32_t *pos = idx_postings_positions(p);
        assert_non_null(pos);
        assert_int_equal(pos[0], 0);
    }
    assert_int_equal(idx_postings_skip_to(p, 1000, &err), KVFTS_ITEROVER);
    idx_postings_close(p);
    /* next() visits each posting once, in order. */
    assert_int_equal(idx_postings_open(&p, t, S("t"), S("y"), &err), 0);
    uint32_t seen = 0, prev = 0;
    int rc;
    while ((rc = idx_postings_next(p, &err)) == KVFTS_OK) {
        assert_true(idx_postings_docid(p) > prev);
        prev = idx_postings_docid(p);
        seen++;
    }
    assert_int_equal(rc, KVFTS_ITEROVER);
    assert_int_equal(seen, 1000);
    idx_postings_close(p);
    assert_int_equal(idx_postings_open(&p, t, S("t"), S("zz"), &err),
                     KVFTS_ENOTFOUND);
    kv_txn_abort(t);
    kv_env_close(env);
}

/* The length reader (bulk runs, steps, seeks) answers exactly what a
 * lookup per document answers, whatever the order and stride of the ids,
 * across missing records and runs of many pages. */
static void test_lens_reader(void **state)
{
    fx *f = *state;
    kvfts_db *db = f->db;
    kvfts_batch *b;
    assert_int_equal(kvfts_batch_begin(&b, db), 0);
    char j[512];
    for (int i = 1; i <= 6000; i++) {
        char k[32];
        snprintf(k, sizeof k, "d%05d", i);
        size_t n = 0;
        /* every 5th document lacks field t; lengths 1..37 */
        n += (size_t)snprintf(j + n, sizeof j - n, "{\"%s\":\"",
                              i % 5 ? "t" : "u");
        for (int w = 0; w <= i % 37; w++)
            n += (size_t)snprintf(j + n, sizeof j - n, "w%d ", w);
        snprintf(j + n, sizeof j - n, "\"}");
        assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S(k), S(j)), 0);
    }
    assert_int_equal(kvfts_batch_commit(b), 0);
    kvfts_batch_free(b);
    for (int i = 11; i <= 6000; i += 11) {      /* holes in the records */
        char k[32];
        snprintf(k, sizeof k, "d%05d", i);
        assert_int_equal(kvfts_del(db, S(k), 0), 0);
    }
    kv_env *env;
    kv_err err = KV_ERR_INIT;
    assert_int_equal(kv_env_open(&env, f->dir, NULL, &err), 0);
    kv_txn *t;
    assert_int_equal(kv_txn_begin(&t, env, false, &err), 0);
    uint32_t fid;
    assert_int_equal(idx_field_id(t, S("t"), &fid, &err), 0);
    assert_true(fid > 0);
    kv_buf scratch = KV_BUF_INIT;
    const uint32_t strides[] = { 1, 2, 3, 7, 50, 63, 64, 65, 300, 2500 };
    size_t checked = 0, nonzero = 0;
    for (size_t s = 0; s < sizeof strides / sizeof *strides; s++) {
        idx_lens_reader *r;
        assert_int_equal(idx_lens_reader_open(&r, t, &err), 0);
        for (uint32_t id = 1 + (uint32_t)s; id <= 6010; id += strides[s]) {
            uint32_t got, want;
            assert_int_equal(idx_lens_reader_get(r, id, fid, &got, &err), 0);
            assert_int_equal(idx_doc_len(t, id, fid, &scratch, &want, &err),
                             0);
            if (got != want)
                fail_msg("stride %u id %u: %u, lookup says %u", strides[s],
                         id, got, want);
            checked++;
            nonzero += want > 0;
        }
        /* Backwards and jumping: seeks. */
        for (uint32_t id = 6005; id > 97; id -= 97) {
            uint32_t got, want;
            assert_int_equal(idx_lens_reader_get(r, id, fid, &got, &err), 0);
            assert_int_equal(idx_doc_len(t, id, fid, &scratch, &want, &err),
                             0);
            assert_int_equal(got, want);
        }
        idx_lens_reader_close(r);
    }
    assert_true(checked > 10000);
    assert_true(nonzero > checked / 2);
    kv_buf_free(&scratch);
    kv_txn_abort(t);
    kv_env_close(env);
}

/* A damaged block or header on disk is reported as corruption. */
static void test_corrupt_postings(void **state)
{
    fx *f = *state;
    kvfts_db *db = f->db;
    assert_int_equal(kvfts_put(NULL, db, S("a"), S("{\"t\":\"word\"}"), 0), 0);
    kv_env *env;
    kv_err err = KV_ERR_INIT;
    assert_int_equal(kv_env_open(&env, f->dir, NULL, &err), 0);
    kv_txn *t;
    kv_buf key = KV_BUF_INIT;
    assert_int_equal(kv_txn_begin(&t, env, true, &err), 0);
    assert_int_equal(idx_key_term(&key, S("t"), S("word"), &err), 0);
    size_t tkl = key.len;
    assert_int_equal(idx_key_block(&key, tkl, 1, &err), 0);
    assert_int_equal(kv_put(t, KV_POSTINGS, key.data, key.len, "\x01\x00\x05",
                            3, &err), 0);
    assert_int_equal(kv_txn_commit(t, &err), 0);
    char *j;
    size_t n;
    assert_int_equal(kvfts_term_get(&j, &n, db, S("t"), S("word"), 0),
                     KVFTS_ECORRUPT);
    assert_non_null(strstr(kvfts_errmsg(db), "corrupt postings block"));
    uint64_t diffs;
    assert_int_equal(kvfts_check(&diffs, db, NULL, NULL), KVFTS_ECORRUPT);
    /* A write touching the term refuses to build on it. */
    assert_int_equal(kvfts_put(NULL, db, S("b"), S("{\"t\":\"word\"}"), 0),
                     KVFTS_ECORRUPT);
    /* The header too. */
    assert_int_equal(kv_txn_begin(&t, env, true, &err), 0);
    assert_int_equal(kv_put(t, KV_POSTINGS, key.data, tkl, "\x01", 1, &err),
                     0);
    assert_int_equal(kv_txn_commit(t, &err), 0);
    assert_int_equal(kvfts_term_get(&j, &n, db, S("t"), S("word"), 0),
                     KVFTS_ECORRUPT);
    /* reindex repairs it. */
    assert_int_equal(kvfts_reindex(db, NULL, NULL), 0);
    assert_term(db, "t", "word", "{\"count\":1,\"refs\":[\"a\"]}");
    assert_consistent(db);
    kv_buf_free(&key);
    kv_env_close(env);
}

/* ---- rebuild equivalence ------------------------------------------------ */

static const char *const vocab[] = {
    "common", "alpha", "beta", "gamma", "delta", "Epsilon", "zeta", "eta",
    "theta", "iota", "kappa", "café", "STRASSE", "rare"
};
#define NVOCAB (sizeof vocab / sizeof *vocab)
#define NKEYS 24

static void random_doc(char *out, size_t cap)
{
    size_t k = (size_t)snprintf(out, cap, "{\"title\":\"");
    for (uint32_t i = 0, n = 1 + rnd(4); i < n; i++)
        k += (size_t)snprintf(out + k, cap - k, "%s%s", i ? " " : "",
                              vocab[rnd(6)]);
    k += (size_t)snprintf(out + k, cap - k, "\",\"body\":\"common");
    for (uint32_t i = 0, n = rnd(12); i < n; i++)
        k += (size_t)snprintf(out + k, cap - k, " %s",
                              vocab[rnd(8) ? rnd(NVOCAB - 1) : NVOCAB - 1]);
    k += (size_t)snprintf(out + k, cap - k, "\",\"tags\":[");
    for (uint32_t i = 0, n = rnd(3); i < n; i++)
        k += (size_t)snprintf(out + k, cap - k, "%s\"%s\"", i ? "," : "",
                              vocab[rnd(NVOCAB)]);
    snprintf(out + k, cap - k, "],\"n\":%u}", rnd(5));
}

typedef struct term_dump {
    kv_buf text;
    kvfts_db *db;
    const char *field;
} term_dump;

static int dump_term(void *payload, const char *term, size_t len,
                     uint64_t count)
{
    term_dump *d = payload;
    char *j;
    size_t n;
    assert_int_equal(kvfts_term_get(&j, &n, d->db, d->field, strlen(d->field),
                                    term, len, 0), 0);
    kv_buf_appendf(&d->text, NULL, "%s %.*s %llu %s\n", d->field, (int)len,
                   term, (unsigned long long)count, j);
    kvfts_free(j);
    return 0;
}

/* Every entry of every field, with refs, as text. */
static char *dump_index(kvfts_db *db)
{
    static const char *const fields[] = { "_all", "title", "body", "tags",
                                          "n" };
    term_dump d = { KV_BUF_INIT, db, NULL };
    for (size_t i = 0; i < 5; i++) {
        d.field = fields[i];
        assert_int_equal(kvfts_term_list(db, S(fields[i]), "", 0, dump_term,
                                         &d), 0);
    }
    kvfts_stats st;
    assert_int_equal(kvfts_get_stats(&st, db), 0);
    kv_buf_appendf(&d.text, NULL, "docs %llu terms %llu postings %llu\n",
                   (unsigned long long)st.documents,
                   (unsigned long long)st.terms,
                   (unsigned long long)st.postings);
    return d.text.data ? d.text.data : strdup("");
}

static void one_sequence(const char *base, int seq, bool batched)
{
    char dir[4096], fresh[4096];
    snprintf(dir, sizeof dir, "%s/m%d", base, seq);
    snprintf(fresh, sizeof fresh, "%s/f%d", base, seq);
    kvfts_open_options o = KVFTS_OPEN_OPTIONS_INIT;
    o.create = true;
    kvfts_db *db, *fdb;
    assert_int_equal(kvfts_open(&db, dir, &o), 0);
    kvfts_batch *b = NULL;
    if (batched)
        assert_int_equal(kvfts_batch_begin(&b, db), 0);
    char key[32], doc[512];
    uint32_t nops = 10 + rnd(50);
    for (uint32_t i = 0; i < nops; i++) {
        snprintf(key, sizeof key, "k%02u", rnd(NKEYS));
        uint32_t op = rnd(10);
        int rc;
        if (op < 6) {
            random_doc(doc, sizeof doc);
            rc = b ? kvfts_batch_write(b, KVFTS_UPSERT, S(key), S(doc))
                   : kvfts_put(NULL, db, S(key), S(doc), 0);
            assert_int_equal(rc, 0);
        } else if (op < 8) {
            random_doc(doc, sizeof doc);
            rc = b ? kvfts_batch_write(b, KVFTS_REPLACE, S(key), S(doc))
                   : kvfts_replace(NULL, db, S(key), S(doc), 0);
            assert_true(rc == KVFTS_OK || rc == KVFTS_ENOTFOUND);
        } else if (!b) {
            rc = kvfts_del(db, S(key), 0);
            assert_true(rc == KVFTS_OK || rc == KVFTS_ENOTFOUND);
        } else {
            /* Batches have no delete: commit, delete, go on batching. */
            assert_int_equal(kvfts_batch_commit(b), 0);
            kvfts_batch_free(b);
            rc = kvfts_del(db, S(key), 0);
            assert_true(rc == KVFTS_OK || rc == KVFTS_ENOTFOUND);
            assert_int_equal(kvfts_batch_begin(&b, db), 0);
        }
        if (b && rnd(8) == 0)
            assert_int_equal(kvfts_batch_commit(b), 0);
    }
    if (b) {
        assert_int_equal(kvfts_batch_commit(b), 0);
        kvfts_batch_free(b);
    }
    assert_consistent(db);
    /* A fresh database with the survivors, in one batch. */
    assert_int_equal(kvfts_open(&fdb, fresh, &o), 0);
    assert_int_equal(kvfts_batch_begin(&b, fdb), 0);
    for (int i = 0; i < NKEYS; i++) {
        char *j;
        size_t n;
        snprintf(key, sizeof key, "k%02d", i);
        if (kvfts_get(&j, &n, NULL, db, S(key)) == KVFTS_OK) {
            assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S(key), j, n),
                             0);
            kvfts_free(j);
        }
    }
    assert_int_equal(kvfts_batch_commit(b), 0);
    kvfts_batch_free(b);
    char *a = dump_index(db), *f = dump_index(fdb);
    if (strcmp(a, f) != 0)
        fail_msg("sequence %d (%s): index differs from a fresh load\n"
                 "--- mutated\n%s--- fresh\n%s", seq,
                 batched ? "batched" : "single", a, f);
    free(a);
    free(f);
    kvfts_close(db);
    kvfts_close(fdb);
}

static void test_rebuild_equivalence(void **state)
{
    (void)state;
    char *base = tu_tmpdir();
    const char *env = getenv("KVFTS_PROPERTY_SEQUENCES");
    int n = env ? atoi(env) : 60;
    for (int seq = 0; seq < n; seq++) {
        one_sequence(base, seq, seq % 2 == 1);
        if (seq % 10 == 9) {     /* keep the disk use small */
            tu_rmtree(base);
            mkdir(base, 0700);
        }
    }
    tu_rmtree(base);
    free(base);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_roundtrip),
        cmocka_unit_test(test_svb_decoder),
        cmocka_unit_test(test_block_corruption),
        cmocka_unit_test(test_header_codec),
        T(test_seed_example),
        T(test_block_boundaries),
        T(test_skip_to),
        T(test_lens_reader),
        T(test_corrupt_postings),
        cmocka_unit_test(test_rebuild_equivalence),
    };
    return cmocka_run_group_tests_name("unit.index", tests, NULL, NULL);
}
