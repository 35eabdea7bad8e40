/*
 * test_index.c -- unit tests of the inverted index's formats
 * (index/idx_codec.c, through index/idx_int.h) and of the index through
 * the public API.  tests/unit/test_index_model.c drives the writer, the
 * readers and merges against a model of the documents.
 *
 * Codecs, without a database: postings blocks round trip (whole and sub-
 * ranges, decoded in stages or at once: ids, views with their columns and
 * tfs, positions; the header's summary: span, max_tf, column mask, the
 * one-view form), our StreamVByte decoder against the library's encoder,
 * and damage: every truncation and byte flip of a block, a term entry, a
 * dictionary chunk, the segment list, a lengths or field record is refused
 * with KVFTS_ECORRUPT or decodes to something that obeys every invariant
 * (ASan checks that nothing is read out of bounds); values no writer
 * produces (counts past their totals, an entry with neither postings nor
 * deletions, a repeated deletion, ...) are refused.
 *
 * Through the public API: the seeds' example, the length reader against
 * per-document lookups, damaged records on disk (a block whose ids decode
 * but not its views, a block cut short, a dictionary chunk, the segment
 * list: KVFTS_ECORRUPT, sticky in an iterator; a consistent but wrong
 * segment list: differences `check` finds; reindex repairs), and rebuild
 * equivalence: after random puts, replaces, deletes and optimizes (single
 * writes and batches), the index equals a fresh load of the survivors.
 *
 * KVFTS_TEST_ONLY=PATTERN runs the tests whose names match.
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
#include <streamvbytedelta.h>
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

static char *xstrndup(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    assert_non_null(p);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

/* ---- postings lists and blocks ------------------------------------------ */

/* A random list of n documents from id first, over a column table of
 * ncols: each document 1..4 views (one of column 0 with oneview), on
 * distinct ascending columns, tf mostly 1, positions ascending per view. */
static void random_plist(idx_plist *l, uint32_t n, uint32_t ncols,
                         bool positions, bool oneview, uint32_t first)
{
    kv_err err = KV_ERR_INIT;
    static uint32_t pos[4 * 300];
    idx_plist_reset(l, positions);
    uint32_t id = first;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t cols[4], tfs[4], k = 0;
        uint32_t maxv = ncols < 4 ? ncols : 4;
        uint32_t nv = oneview ? 1 : 1 + rnd(maxv);
        uint32_t c = oneview ? 0 : rnd(ncols - nv + 1);
        for (uint32_t v = 0; v < nv; v++) {
            cols[v] = c;
            if (v + 1 < nv) {      /* room for the nv - v - 1 after it */
                uint32_t hi = ncols - (nv - v - 1);
                c = c + 1 + rnd(hi - c);
            }
            tfs[v] = rnd(5) ? 1 : 1 + rnd(rnd(8) ? 7 : 299);
            uint32_t p = rnd(50);
            for (uint32_t j = 0; j < tfs[v]; j++) {
                pos[k++] = p;
                p += 1 + rnd(rnd(10) ? 20 : 70000);
            }
        }
        assert_int_equal(idx_plist_add(l, id, nv, cols, tfs, pos, &err), 0);
        id += 1 + (rnd(4) ? rnd(3) : rnd(100000));
    }
}

/* What a block of documents [from, to) of l must say about itself. */
static void plist_summary(const idx_plist *l, uint32_t from, uint32_t to,
                          uint32_t *max_tf, uint64_t *mask, bool *oneview,
                          uint32_t *maxcol)
{
    *max_tf = 0;
    *mask = 0;
    *oneview = true;
    *maxcol = 0;
    for (uint32_t i = from; i < to; i++) {
        uint32_t sum = 0;
        if (l->vstart[i + 1] - l->vstart[i] != 1)
            *oneview = false;
        for (uint32_t v = l->vstart[i]; v < l->vstart[i + 1]; v++) {
            sum += l->vtf[v];
            *mask |= 1ull << (l->vcol[v] < 63 ? l->vcol[v] : 63);
            if (l->vcol[v] != 0)
                *oneview = false;
            if (l->vcol[v] > *maxcol)
                *maxcol = l->vcol[v];
        }
        if (sum > *max_tf)
            *max_tf = sum;
    }
}

/* Documents [from, to) of a equal documents [0, to - from) of b, up to
 * decode level `level` (IDX_DEC_*). */
static void assert_same_docs(const idx_plist *a, uint32_t from, uint32_t to,
                             const idx_plist *b, int level)
{
    assert_int_equal(b->n, to - from);
    for (uint32_t i = from; i < to; i++)
        assert_int_equal(b->ids[i - from], a->ids[i]);
    if (level < IDX_DEC_VIEWS)
        return;
    for (uint32_t i = from; i < to; i++) {
        uint32_t k = i - from, va = a->vstart[i], vb = b->vstart[k];
        assert_int_equal(b->vstart[k + 1] - vb, a->vstart[i + 1] - va);
        for (uint32_t j = 0; j < a->vstart[i + 1] - va; j++) {
            assert_int_equal(b->vcol[vb + j], a->vcol[va + j]);
            assert_int_equal(b->vtf[vb + j], a->vtf[va + j]);
            if (level >= IDX_DEC_POS && a->positions) {
                assert_int_equal(b->poff[vb + j + 1] - b->poff[vb + j],
                                 a->vtf[va + j]);
                assert_memory_equal(b->pos + b->poff[vb + j],
                                    a->pos + a->poff[va + j],
                                    (size_t)a->vtf[va + j] * 4);
            }
        }
    }
}

/* The invariants of a block decoded in full, whatever its bytes were. */
static void check_block(const idx_block *b, uint32_t first, uint32_t ncols)
{
    const idx_plist *l = &b->l;
    assert_true(l->n >= 1 && l->n <= IDX_BLOCK_MAX);
    assert_int_equal(l->ids[0], first);
    assert_int_equal(l->vstart[0], 0);
    assert_int_equal(l->vstart[l->n], l->nv);
    uint32_t mtf = 0;
    uint64_t mask = 0;
    for (uint32_t i = 0; i < l->n; i++) {
        assert_true(i == 0 || l->ids[i] > l->ids[i - 1]);
        assert_true(l->vstart[i + 1] > l->vstart[i]);
        uint64_t sum = 0;
        for (uint32_t v = l->vstart[i]; v < l->vstart[i + 1]; v++) {
            assert_true(l->vcol[v] < ncols);
            assert_true(v == l->vstart[i] || l->vcol[v] > l->vcol[v - 1]);
            assert_true(l->vtf[v] >= 1);
            sum += l->vtf[v];
            mask |= 1ull << (l->vcol[v] < 63 ? l->vcol[v] : 63);
            if (l->positions) {
                assert_int_equal(l->poff[v + 1] - l->poff[v], l->vtf[v]);
                for (uint32_t j = l->poff[v] + 1; j < l->poff[v + 1]; j++)
                    assert_true(l->pos[j] > l->pos[j - 1]);
            }
        }
        if (sum > mtf)
            mtf = (uint32_t)sum;
    }
    assert_int_equal(mtf, b->max_tf);
    assert_true(mask == b->colmask);
}

static const uint32_t ncols_choice[] = { 1, 2, 5, 70 };

static void test_block_roundtrip(void **state)
{
    (void)state;
    idx_plist l;
    idx_block d, w;
    idx_plist_init(&l);
    idx_block_init(&d);
    idx_block_init(&w);
    kv_buf buf = KV_BUF_INIT, scratch = KV_BUF_INIT;
    kv_err err = KV_ERR_INIT;
    for (int iter = 0; iter < 300; iter++) {
        uint32_t n = 1 + rnd(IDX_BLOCK_DOCS);
        uint32_t ncols = ncols_choice[rnd(4)];
        bool positions = rnd(2), oneview = ncols == 1 || rnd(4) == 0;
        random_plist(&l, n, ncols, positions, oneview, 1 + rnd(1000));
        /* The whole list, or a sub-range of it as the writer cuts one. */
        uint32_t from = rnd(3) ? 0 : rnd(n);
        uint32_t to = rnd(3) ? n : from + 1 + rnd(n - from);
        uint32_t first = l.ids[from];
        /* Encoding appends to what the buffer holds. */
        kv_buf_reset(&buf);
        assert_int_equal(kv_buf_append(&buf, "xyz", 3, &err), 0);
        assert_int_equal(idx_block_encode(&l, from, to, &buf, &scratch,
                                          &err), 0);
        assert_memory_equal(buf.data, "xyz", 3);
        const char *rec = buf.data + 3;
        size_t len = buf.len - 3;
        uint32_t mtf, maxcol;
        uint64_t mask;
        bool one;
        plist_summary(&l, from, to, &mtf, &mask, &one, &maxcol);
        assert_int_equal(rec[1] & IDX_B_POSITIONS ? 1 : 0, positions);
        assert_int_equal(rec[1] & IDX_B_ONEVIEW ? 1 : 0, one);
        uint32_t span, ptf;
        uint64_t pmask;
        assert_true(idx_block_peek(rec, len, &span, &ptf, &pmask));
        assert_int_equal(span, l.ids[to - 1] - first);
        assert_int_equal(ptf, mtf);
        assert_true(pmask == mask);
        /* In stages, as a reader decodes: ids, then views, then
         * positions. */
        assert_int_equal(idx_block_decode(&d, first, rec, len, ncols,
                                          IDX_DEC_IDS, &err), 0);
        assert_int_equal(d.decoded, IDX_DEC_IDS);
        assert_same_docs(&l, from, to, &d.l, IDX_DEC_IDS);
        assert_int_equal(idx_block_need(&d, IDX_DEC_VIEWS, &err), 0);
        assert_same_docs(&l, from, to, &d.l, IDX_DEC_VIEWS);
        assert_int_equal(d.max_tf, mtf);
        assert_true(d.colmask == mask);
        assert_int_equal(d.oneview, one);
        assert_int_equal(idx_block_need(&d, IDX_DEC_POS, &err), 0);
        assert_int_equal(d.l.positions, positions);
        assert_same_docs(&l, from, to, &d.l, IDX_DEC_POS);
        check_block(&d, first, ncols);
        /* At once, into a block that held another. */
        assert_int_equal(idx_block_decode(&w, first, rec, len, ncols,
                                          IDX_DEC_POS, &err), 0);
        assert_same_docs(&l, from, to, &w.l, IDX_DEC_POS);
        /* Views must index the term's column table. */
        assert_int_equal(idx_block_decode(&w, first, rec, len, maxcol,
                                          IDX_DEC_VIEWS, &err),
                         KVFTS_ECORRUPT);
        /* The last id must fit in 32 bits. */
        if (span)
            assert_int_equal(idx_block_decode(&w, UINT32_MAX - span + 1, rec,
                                              len, ncols, IDX_DEC_IDS, &err),
                             KVFTS_ECORRUPT);
    }
    /* tf 1 costs two bits a view: with tf 2 everywhere the tf stream holds
     * a byte a view more (and its size's varint one more byte). */
    random_plist(&l, IDX_BLOCK_DOCS, 1, false, true, 5);
    for (uint32_t v = 0; v < l.nv; v++)
        l.vtf[v] = 1;
    kv_buf_reset(&buf);
    assert_int_equal(idx_block_encode(&l, 0, l.n, &buf, &scratch, &err), 0);
    size_t len1 = buf.len;
    for (uint32_t v = 0; v < l.nv; v++)
        l.vtf[v] = 2;
    kv_buf_reset(&buf);
    assert_int_equal(idx_block_encode(&l, 0, l.n, &buf, &scratch, &err), 0);
    assert_true(buf.len - len1 >= IDX_BLOCK_DOCS &&
                buf.len - len1 <= IDX_BLOCK_DOCS + 2);
    /* One view of column 0 per document: no view streams.  The same
     * documents on column 1 of two carry them. */
    assert_true(buf.data[1] & IDX_B_ONEVIEW);
    size_t one_len = buf.len;
    for (uint32_t v = 0; v < l.nv; v++)
        l.vcol[v] = 1;
    kv_buf_reset(&buf);
    assert_int_equal(idx_block_encode(&l, 0, l.n, &buf, &scratch, &err), 0);
    assert_false(buf.data[1] & IDX_B_ONEVIEW);
    assert_true(buf.len >= one_len + IDX_BLOCK_DOCS);
    assert_int_equal(idx_block_decode(&d, l.ids[0], buf.data, buf.len, 2,
                                      IDX_DEC_POS, &err), 0);
    assert_same_docs(&l, 0, l.n, &d.l, IDX_DEC_POS);
    idx_plist_free(&l);
    idx_block_free(&d);
    idx_block_free(&w);
    kv_buf_free(&buf);
    kv_buf_free(&scratch);
}

/* ---- a phrase's count from blocks --------------------------------------- */

/* Documents of a and b with, in one column, a position p in a and p + d in
 * b: what the phrase "a .. b" (b d words after a) matches. */
static bool doc_phrase(const idx_plist *a, uint32_t i, const idx_plist *b,
                       uint32_t k, uint32_t d)
{
    bool hit = false;
    for (uint32_t v = a->vstart[i]; !hit && v < a->vstart[i + 1]; v++)
        for (uint32_t w = b->vstart[k]; w < b->vstart[k + 1]; w++)
            for (uint32_t x = a->poff[v];
                 a->vcol[v] == b->vcol[w] && x < a->poff[v + 1]; x++)
                for (uint32_t y = b->poff[w]; y < b->poff[w + 1]; y++)
                    hit |= (uint64_t)a->pos[x] + d == b->pos[y];
    return hit;
}

static uint32_t plist_phrase(const idx_plist *a, const idx_plist *b,
                             uint32_t d)
{
    uint32_t count = 0, k = 0;
    for (uint32_t i = 0; i < a->n; i++) {
        while (k < b->n && b->ids[k] < a->ids[i])
            k++;
        count += k < b->n && b->ids[k] == a->ids[i] &&
                 doc_phrase(a, i, b, k, d);
    }
    return count;
}

/* The same from blocks ba and bb, decoded to their ids, as a phrase's
 * count reads them (idx_blocks_common, idx_blocks_phrase) over candidates
 * cand[0..m); bb NULL: the phrase "a .. a" (a word repeated: one block, a
 * dup).  *kept: the candidates both blocks hold. */
static int blocks_phrase(idx_block *ba, idx_block *bb, uint32_t ncols,
                         uint32_t d, uint32_t *cand, uint32_t m,
                         uint32_t *kept, uint64_t *count)
{
    kv_err err = KV_ERR_INIT;
    static uint32_t fid[80];       /* column c: field c, selected */
    for (uint32_t c = 0; c < ncols; c++)
        fid[c] = c + 1;
    uint32_t *ia = malloc((size_t)m * 4 + 4), *ib = malloc((size_t)m * 4 + 4);
    uint32_t *keep = malloc((size_t)m * 4 + 4);
    uint16_t *map = malloc(IDX_PHRASE_MAP * sizeof *map);
    idx_phrase_term t[2] = {
        { .b = ba, .fid = fid, .off = 0, .idx = ia },
        { .b = bb ? bb : ba, .fid = fid, .off = d,
          .idx = bb ? ib : ia, .dup = !bb },
    };
    *count = 0;
    int rc = idx_block_need_gaps(ba, &err);
    if (!rc && bb)
        rc = idx_block_need_gaps(bb, &err);
    if (!rc) {
        *kept = idx_blocks_common(t, 2, cand, m, keep, map);
        rc = idx_blocks_phrase(t, 2, *kept, NULL, count, &err);
    }
    if (!rc && !bb && d == 1 && ba->gaps && ba->decoded < IDX_DEC_POS) {
        /* A word said twice in a row, counted for the block at once
         * (scr: blocks_self1): as the walk, with every field selected and
         * with one not, and each candidate's frequency too. */
        uint32_t *scr = malloc(((size_t)ba->l.poff[ba->l.nv] + ba->l.nv +
                                2) * 4);
        uint32_t *pf1 = malloc((size_t)m * 4 + 4);
        uint32_t *pf2 = malloc((size_t)m * 4 + 4);
        static uint32_t fsel[80];
        uint64_t c1 = 0, c2 = 0;
        kv_err e1 = KV_ERR_INIT, e2 = KV_ERR_INIT;
        t[0].scr = scr;
        assert_int_equal(idx_blocks_phrase(t, 2, *kept, NULL, &c1, &e1), 0);
        assert_int_equal(c1, *count);
        memcpy(fsel, fid, sizeof fsel);
        if (ncols > 1)
            fsel[rnd(ncols)] = 0;
        t[0].fid = t[1].fid = fsel;
        c1 = 0;
        assert_int_equal(idx_blocks_phrase(t, 2, *kept, pf1, &c1, &e1), 0);
        t[0].scr = NULL;
        assert_int_equal(idx_blocks_phrase(t, 2, *kept, pf2, &c2, &e2), 0);
        assert_int_equal(c1, c2);
        assert_memory_equal(pf1, pf2, (size_t)*kept * 4);
        free(scr);
        free(pf1);
        free(pf2);
    }
    if (rc) {
        assert_int_equal(rc, KVFTS_ECORRUPT);
        assert_non_null(strstr(err.msg, "corrupt postings block"));
    }
    free(ia);
    free(ib);
    free(keep);
    free(map);
    return rc;
}

/* Encode all of l as a block and decode its ids into b. */
static void block_of(idx_block *b, const idx_plist *l, uint32_t ncols,
                     kv_buf *buf, kv_buf *scratch)
{
    kv_err err = KV_ERR_INIT;
    kv_buf_reset(buf);
    assert_int_equal(idx_block_encode(l, 0, l->n, buf, scratch, &err), 0);
    assert_int_equal(idx_block_decode(b, l->ids[0], buf->data, buf->len,
                                      ncols, IDX_DEC_IDS, &err), 0);
}

/* A phrase's count from two terms' blocks (and from one, a word repeated)
 * against a walk of their lists: the candidates cut to the ids both hold,
 * by a merge or by gallops (lists of like or unlike density), the fields
 * matched view by view, positions read from the gaps as stored. */
static void test_block_phrase(void **state)
{
    (void)state;
    idx_plist a, b;
    idx_block ba, bb;
    idx_plist_init(&a);
    idx_plist_init(&b);
    idx_block_init(&ba);
    idx_block_init(&bb);
    kv_buf buf = KV_BUF_INIT, scratch = KV_BUF_INIT;
    uint32_t *cand = malloc(2 * IDX_BLOCK_DOCS * sizeof *cand);
    uint64_t matched = 0;
    for (int iter = 0; iter < 400; iter++) {
        uint32_t ncols = ncols_choice[rnd(4)];
        uint32_t first = 1 + rnd(1000), d = 1 + rnd(rnd(4) ? 3 : 20);
        random_plist(&a, 1 + rnd(IDX_BLOCK_DOCS), ncols, true,
                     ncols == 1 || rnd(4) == 0, first);
        random_plist(&b, 1 + rnd(rnd(2) ? IDX_BLOCK_DOCS : 8), ncols, true,
                     ncols == 1 || rnd(4) == 0, first);
        if (rnd(2)) {      /* ids close together: their map, not a merge */
            for (uint32_t x = 0; x < a.n; x++)
                a.ids[x] = first + 2 * x;
            for (uint32_t x = 0; x < b.n; x++)
                b.ids[x] = first + 3 * x;
        }
        block_of(&ba, &a, ncols, &buf, &scratch);
        block_of(&bb, &b, ncols, &buf, &scratch);
        /* candidates: a's ids and b's, as a run cut to neither would */
        uint32_t m = 0, both = 0, i = 0, k = 0;
        while (i < a.n || k < b.n) {
            uint32_t x = i < a.n ? a.ids[i] : UINT32_MAX;
            uint32_t y = k < b.n ? b.ids[k] : UINT32_MAX;
            cand[m++] = x < y ? x : y;
            both += x == y;
            i += x <= y;
            k += y <= x;
        }
        uint32_t kept;
        uint64_t count;
        assert_int_equal(blocks_phrase(&ba, &bb, ncols, d, cand, m, &kept,
                                       &count), 0);
        assert_int_equal(kept, both);
        for (uint32_t j = 1; j < kept; j++)
            assert_true(cand[j] > cand[j - 1]);
        assert_int_equal(count, plist_phrase(&a, &b, d));
        matched += count;
        /* "a .. a", over a's ids */
        memcpy(cand, a.ids, (size_t)a.n * sizeof *cand);
        assert_int_equal(blocks_phrase(&ba, NULL, ncols, d, cand, a.n,
                                       &kept, &count), 0);
        assert_int_equal(kept, a.n);
        assert_int_equal(count, plist_phrase(&a, &a, d));
        /* over one id in six of a's: the block galloped to each */
        uint64_t want = 0;
        m = 0;
        for (i = rnd(6); i < a.n; i += 6) {
            cand[m++] = a.ids[i];
            want += doc_phrase(&a, i, &a, i, d);
        }
        if (m) {
            assert_int_equal(blocks_phrase(&ba, NULL, ncols, d, cand, m,
                                           &kept, &count), 0);
            assert_int_equal(kept, m);
            assert_int_equal(count, want);
        }
    }
    assert_true(matched > 0);
    free(cand);
    idx_plist_free(&a);
    idx_plist_free(&b);
    idx_block_free(&ba);
    idx_block_free(&bb);
    kv_buf_free(&buf);
    kv_buf_free(&scratch);
}

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
            if (len)     /* the control bytes must be there */
                assert_true(idx_svb_size(enc, (n + 3) / 4 - 1, n, false) ==
                            SIZE_MAX);
            memset(out, 0, sizeof out);
            idx_svb_decode(enc, out, n);
            assert_memory_equal(out, in, (size_t)n * 4);
            memset(out, 0, sizeof out);
            idx__svb_decode_c(enc, out, n, false, 0);
            assert_memory_equal(out, in, (size_t)n * 4);
            /* The data bytes of values [from, to), against each value's
             * width, for spans that start and end anywhere in a group. */
            for (uint32_t from = 0; from <= n; from += 1 + from / 3)
                for (uint32_t to = from; to <= n; to += 1 + (to - from) / 2) {
                    size_t want = 0;
                    for (uint32_t i = from; i < to; i++)
                        want += in[i] < 1u << 8 ? 1 : in[i] < 1u << 16 ? 2
                                : in[i] < 1u << 24 ? 3 : 4;
                    assert_int_equal(idx_svb_span(enc, from, to), want);
                }
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

/* Our StreamVByte encoders against the library's, byte for byte, on
 * values of every byte width (zeros for the 0124 coding), every tail
 * length and deltas that wrap around; none writes past
 * idx_svb_max_bytes(). */
static void test_svb_encoder(void **state)
{
    (void)state;
    enum { MAX = 300, GUARD = 16 };
    uint32_t in[MAX], sums[MAX];
    unsigned char want[MAX * 5 + 64], got[MAX * 5 + 64];
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (uint32_t n = 0; n <= MAX; n += (n < 40 ? 1 : 29)) {
        for (int round = 0; round < 4; round++) {
            uint32_t acc = UINT32_MAX - 5;
            for (uint32_t i = 0; i < n; i++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                unsigned width = (unsigned)(x >> 61);     /* 0..7 */
                uint32_t v = (uint32_t)(x >> 8);
                in[i] = width >= 4 ? v & 0xFFu                /* common */
                        : width == 3 ? v
                        : width == 0 && round % 2 ? 0
                        : v & ((1u << (8 * (width + 1))) - 1);
                sums[i] = acc += in[i];
            }
            size_t max = idx_svb_max_bytes(n);
            for (int form = 0; form < 3; form++) {
                memset(got, 0xA5, sizeof got);
                memset(want, 0xA5, sizeof want);
                size_t a = form == 0 ? idx_svb_encode(in, n, got)
                         : form == 1 ? idx_svb_encode_0124(in, n, got)
                         : idx_svb_delta_encode(sums, n, UINT32_MAX - 5, got);
                size_t b = form == 0 ? streamvbyte_encode(in, n, want)
                         : form == 1 ? streamvbyte_encode_0124(in, n, want)
                         : streamvbyte_delta_encode(sums, n, want,
                                                    UINT32_MAX - 5);
                assert_int_equal(a, b);
                assert_memory_equal(got, want, a);
                assert_true(a <= max);
                for (size_t k = max; k < max + GUARD; k++)
                    assert_int_equal(got[k], 0xA5);
            }
        }
    }
}

/* A doc id set holds what was added, across pages and at the ends of
 * the id range, tells a repeat, and is empty after a reset. */
static void test_idset(void **state)
{
    (void)state;
    idx_idset s;
    memset(&s, 0, sizeof s);
    kv_err err = KV_ERR_INIT;
    static const uint32_t ids[] = { 0, 1, 63, 64, 65535, 65536, 700001,
                                    UINT32_MAX - 1, UINT32_MAX };
    enum { N = sizeof ids / sizeof ids[0] };
    for (int round = 0; round < 2; round++) {
        for (size_t i = 0; i < N; i++) {
            bool added;
            assert_false(idx__idset_has(&s, ids[i]));
            assert_int_equal(idx__idset_add(&s, ids[i], &added, &err), 0);
            assert_true(added);
            assert_int_equal(idx__idset_add(&s, ids[i], &added, &err), 0);
            assert_false(added);
            assert_true(idx__idset_has(&s, ids[i]));
        }
        for (uint32_t x = 2; x < 200000; x += 997)   /* neighbours: absent */
            if (x != 63 && x != 64 && x != 65535 && x != 65536)
                assert_false(idx__idset_has(&s, x));
        assert_true(idx__idset_bytes(&s) >= 4 * (IDX_IDSET_PAGE_BITS / 8));
        idx__idset_reset(&s);
        for (size_t i = 0; i < N; i++)
            assert_false(idx__idset_has(&s, ids[i]));
        assert_int_equal(idx__idset_bytes(&s),        /* no page left */
                         (size_t)s.npages * sizeof *s.page);
    }
    idx__idset_free(&s);
}

/* idx__bytes_eq tells a difference at every offset of strings of every
 * length up to 40, across its eight-byte steps. */
static void test_bytes_eq(void **state)
{
    (void)state;
    char a[40], b[40];
    for (size_t i = 0; i < sizeof a; i++)
        a[i] = b[i] = (char)('a' + i % 26);
    for (size_t n = 0; n <= sizeof a; n++) {
        assert_true(idx__bytes_eq(a, b, n));
        for (size_t at = 0; at < n; at++) {
            b[at] ^= 0x40;
            assert_false(idx__bytes_eq(a, b, n));
            assert_false(idx__bytes_eq(b, a, n));
            b[at] ^= 0x40;
        }
    }
}

/* A string table finds its strings again, and its sorted order is
 * idx__bytes_cmp's, strictly rising, for strings that share prefixes of
 * eight bytes and more, hold zero and 0xFF bytes, and are prefixes of one
 * another. */
static void test_strtab_sorted(void **state)
{
    (void)state;
    static const char alpha[] = { 0, 'a', 'b', (char)0xFF };
    strtab t;
    memset(&t, 0, sizeof t);
    kv_err err = KV_ERR_INIT;
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (int i = 0; i < 3000; i++) {
        char s[16];
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t n = (size_t)(x % 14);
        for (size_t k = 0; k < n; k++)   /* long shared runs of 'a' */
            s[k] = k < (x >> 8) % 11 ? 'a' : alpha[(x >> (16 + 2 * k)) & 3];
        uint32_t id;
        bool added;
        assert_int_equal(idx__strtab_put(&t, s, n, &id, &added, &err), 0);
    }
    assert_true(t.n > 500);
    /* Each string is found again as itself; with its last byte changed,
     * as another string or none. */
    for (uint32_t i = 0; i < t.n; i++) {
        uint32_t l, id;
        bool added;
        const char *str = idx__strtab_str(&t, i, &l);
        char s[16];
        memcpy(s, str, l);
        assert_int_equal(idx__strtab_put(&t, s, l, &id, &added, &err), 0);
        assert_false(added);
        assert_int_equal(id, i);
        if (l == 0)
            continue;
        s[l - 1] ^= 1;
        assert_true(!idx__strtab_get(&t, s, l, &id) || id != i);
    }
    uint32_t *order = calloc(t.n, sizeof *order);
    uint64_t *pre = calloc(t.n, sizeof *pre);
    bool *seen = calloc(t.n, sizeof *seen);
    assert_int_equal(idx__strtab_sorted(&t, order, pre, &err), 0);
    for (uint32_t i = 0; i < t.n; i++) {
        assert_true(order[i] < t.n && !seen[order[i]]);
        seen[order[i]] = true;
        uint32_t la, lb;
        const char *b = idx__strtab_str(&t, order[i], &lb);
        assert_true(pre[i] == idx__prefix8(b, lb));
        if (i == 0)
            continue;
        const char *a = idx__strtab_str(&t, order[i - 1], &la);
        assert_true(idx__bytes_cmp(a, la, b, lb) < 0);
        assert_true(pre[i - 1] <= pre[i]);
    }
    free(order);
    free(pre);
    free(seen);
    idx__strtab_free(&t);
}

/* Decode in stages (stopping at the first failure) and at once: the same
 * outcome, and a block that decodes obeys every invariant. */
static int decode_both(idx_block *staged, idx_block *whole, uint32_t first,
                       const char *rec, size_t len, uint32_t ncols)
{
    kv_err err = KV_ERR_INIT;
    int rc = idx_block_decode(staged, first, rec, len, ncols, IDX_DEC_IDS,
                              &err);
    if (!rc) {
        assert_int_equal(staged->l.ids[0], first);
        for (uint32_t i = 1; i < staged->l.n; i++)
            assert_true(staged->l.ids[i] > staged->l.ids[i - 1]);
        rc = idx_block_need(staged, IDX_DEC_VIEWS, &err);
    }
    if (!rc)
        rc = idx_block_need(staged, IDX_DEC_POS, &err);
    kv_err err2 = KV_ERR_INIT;
    int rc2 = idx_block_decode(whole, first, rec, len, ncols, IDX_DEC_POS,
                               &err2);
    assert_int_equal(rc, rc2);
    if (rc) {
        assert_int_equal(rc, KVFTS_ECORRUPT);
        assert_int_equal(err.code, KVFTS_ECORRUPT);
        assert_non_null(strstr(err.msg, "corrupt postings block"));
        return rc;
    }
    check_block(staged, first, ncols);
    check_block(whole, first, ncols);
    assert_same_docs(&staged->l, 0, staged->l.n, &whole->l, IDX_DEC_POS);
    return rc;
}

static void test_block_corruption(void **state)
{
    (void)state;
    idx_plist l;
    idx_block d, w, t;
    idx_plist_init(&l);
    idx_block_init(&d);
    idx_block_init(&w);
    idx_block_init(&t);
    kv_buf buf = KV_BUF_INIT, scratch = KV_BUF_INIT;
    kv_err err = KV_ERR_INIT;
    unsigned accepted = 0, refused = 0, trusted[2] = { 0, 0 }, bydoc = 0;
    for (int iter = 0; iter < 60; iter++) {
        uint32_t n = 1 + rnd(IDX_BLOCK_DOCS);
        uint32_t ncols = ncols_choice[rnd(4)];
        random_plist(&l, n, ncols, rnd(2), ncols == 1 || rnd(4) == 0,
                     1 + rnd(1000));
        kv_buf_reset(&buf);
        assert_int_equal(idx_block_encode(&l, 0, n, &buf, &scratch, &err),
                         0);
        size_t len = buf.len;
        /* Every truncation is corrupt at once (a block's sizes add up
         * exactly), whatever the level asked for. */
        for (size_t cut = 0; cut < len; cut++) {
            char *copy = malloc(cut + 1);
            memcpy(copy, buf.data, cut);
            assert_int_equal(idx_block_decode(&d, l.ids[0], copy, cut, ncols,
                                              IDX_DEC_IDS, &err),
                             KVFTS_ECORRUPT);
            assert_int_equal(d.l.n, 0);
            free(copy);
        }
        /* Byte flips: never a read out of bounds; if accepted, a
         * consistent block, the same in stages and at once. */
        for (int f = 0; f < 60; f++) {
            char *copy = malloc(len);
            memcpy(copy, buf.data, len);
            copy[rnd((uint32_t)len)] ^= (char)(1 + rnd(255));
            int rc = decode_both(&d, &w, l.ids[0], copy, len, ncols);
            if (rc)
                refused++;
            else
                accepted++;
            assert_true(rc || idx_block_trust(&w) ==
                                  (IDX_DEC_TRUSTED | IDX_DEC_TRUSTED_VIEWS));
            /* Decoded from a cache's bytes a document at a time, or whole:
             * what idx_block_trust then grants, a decode of the
             * same bytes given it (those checks skipped) ends as the
             * checked whole decode did, with the same lists, within
             * bounds. */
            for (int how = 0; how < 2; how++) {
                uint32_t i = rnd(d.l.n ? d.l.n : 1);
                idx_block_recycle(&d);     /* not dense: by document */
                int drc = idx_block_decode(&d, l.ids[0], copy, len, ncols,
                                           (how ? IDX_DEC_POS : IDX_DEC_IDS) |
                                           IDX_DEC_CACHED, &err);
                if (!drc && how == 0)
                    (void)idx_block_need_doc(&d, i < d.l.n ? i : 0, &err);
                /* (as the reader marks a block: failed or not) */
                int trust = idx_block_trust(&d);
                if (!trust)
                    continue;
                trusted[how]++;
                bydoc += d.bydoc;
                int trc = idx_block_decode(&t, l.ids[0], copy, len, ncols,
                                           IDX_DEC_POS | trust, &err);
                assert_int_equal(trc, rc);
                if (!rc)
                    assert_same_docs(&t.l, 0, t.l.n, &w.l, IDX_DEC_POS);
            }
            /* As a phrase's count reads it ("a a"): never out of bounds;
             * the whole decode's answer if that took it.  (It reads only
             * what a candidate needs: damage elsewhere may pass.) */
            if (ncols < 80 &&
                idx_block_decode(&d, l.ids[0], copy, len, ncols,
                                 IDX_DEC_IDS, &err) == KVFTS_OK &&
                d.l.positions) {
                uint32_t *cand = malloc((size_t)d.l.n * sizeof *cand + 4);
                uint32_t kept, dist = 1 + rnd(3);
                uint64_t count;
                memcpy(cand, d.l.ids, (size_t)d.l.n * sizeof *cand);
                int prc = blocks_phrase(&d, NULL, ncols, dist, cand, d.l.n,
                                        &kept, &count);
                if (!rc) {
                    assert_int_equal(prc, 0);
                    assert_int_equal(count, plist_phrase(&w.l, &w.l, dist));
                }
                free(cand);
            }
            free(copy);
        }
        /* Trailing garbage is corrupt too. */
        assert_int_equal(kv_buf_append(&buf, "x", 1, &err), 0);
        assert_int_equal(idx_block_decode(&d, l.ids[0], buf.data, buf.len,
                                          ncols, IDX_DEC_IDS, &err),
                         KVFTS_ECORRUPT);
    }
    assert_true(refused > 0 && accepted > 0 && trusted[0] > 0 &&
                trusted[1] > 0 && bydoc > 0);
    idx_plist_free(&l);
    idx_block_free(&d);
    idx_block_free(&w);
    idx_block_free(&t);
    kv_buf_free(&buf);
    kv_buf_free(&scratch);
}

/* ---- term entries ---------------------------------------------------------- */

static void assert_same_entry(const idx_entry *a, const idx_entry *b)
{
    assert_int_equal(a->flags, b->flags);
    assert_int_equal(a->ncols, b->ncols);
    assert_memory_equal(a->cols, b->cols, (size_t)a->ncols * 4);
    assert_memory_equal(a->df, b->df, (size_t)a->ncols * 8);
    assert_true(a->df_all == b->df_all && a->ndocs == b->ndocs);
    assert_true(a->ndel == b->ndel && a->ndel_all == b->ndel_all);
    if (a->ndel)
        assert_memory_equal(a->ndelc, b->ndelc, (size_t)a->ncols * 8);
    assert_int_equal(a->dels_len, b->dels_len);
    if (a->dels_len)
        assert_memory_equal(a->dels, b->dels, a->dels_len);
    if (a->ndocs) {
        assert_int_equal(a->first, b->first);
        assert_int_equal(a->last, b->last);
        assert_int_equal(a->max_tf, b->max_tf);
        assert_int_equal(a->nblocks, b->nblocks);
        assert_int_equal(a->blk_len, b->blk_len);
        if (a->blk_len)
            assert_memory_equal(a->blk, b->blk, a->blk_len);
    }
}

/* The invariants of an entry that decoded, and its round trip. */
static void check_entry(const idx_entry *e, const char *buf, size_t len,
                        bool exact)
{
    kv_err err = KV_ERR_INIT;
    assert_true(e->ncols >= 1);
    for (uint32_t i = 0; i < e->ncols; i++) {
        assert_true(i == 0 || e->cols[i] > e->cols[i - 1]);
        assert_true(e->df[i] <= e->ndocs);
        assert_true(e->ndelc[i] <= e->ndel);
        assert_int_equal(idx_entry_col(e, e->cols[i]), i);
    }
    assert_true(e->df_all <= e->ndocs && e->ndel_all <= e->ndel);
    assert_true(e->ndocs > 0 || e->ndel > 0);
    uint32_t *ids = NULL, cap = 0;
    assert_int_equal(idx_entry_dels(e, &ids, &cap, &err), 0);
    for (uint64_t k = 1; k < e->ndel; k++)
        assert_true(ids[k] > ids[k - 1]);
    free(ids);
    if (e->ndocs) {
        assert_true(e->first >= 1 && e->last >= e->first);
        assert_true((uint64_t)e->last - e->first + 1 >= e->ndocs);
        if (e->flags & IDX_E_EXTERNAL) {
            assert_true(e->nblocks >= 1 && e->nblocks <= e->ndocs);
        } else {
            assert_true(e->ndocs <= IDX_BLOCK_MAX);
            /* the block is the entry's tail, or made from a compact one */
            assert_true((e->blk >= buf && e->blk + e->blk_len == buf + len) ||
                        (e->blk == (const char *)e->sblk &&
                         e->ndocs <= IDX_SMALL_DOCS &&
                         (((const unsigned char *)buf)[0] & IDX_E_SMALL)));
        }
    }
    kv_buf enc = KV_BUF_INIT;
    idx_entry again;
    idx_entry_init(&again);
    assert_int_equal(idx_entry_encode(e, &enc, &err), 0);
    if (exact) {          /* damaged bytes may hold longer varints */
        assert_int_equal(enc.len, len);
        assert_memory_equal(enc.data, buf, len);
    }
    assert_int_equal(idx_entry_decode(&again, enc.data, enc.len, &err), 0);
    assert_same_entry(e, &again);
    idx_entry_free(&again);
    kv_buf_free(&enc);
}

/* Encode e, check the round trip, every truncation and trailing byte, and
 * byte flips; *accepted counts flips that still decoded. */
static void entry_case(const idx_entry *e, unsigned *accepted)
{
    kv_err err = KV_ERR_INIT;
    kv_buf enc = KV_BUF_INIT;
    idx_entry d;
    idx_entry_init(&d);
    assert_int_equal(idx_entry_encode(e, &enc, &err), 0);
    assert_int_equal(idx_entry_decode(&d, enc.data, enc.len, &err), 0);
    assert_same_entry(e, &d);
    check_entry(&d, enc.data, enc.len, true);
    for (size_t cut = 0; cut < enc.len; cut++) {
        char *copy = malloc(cut + 1);
        memcpy(copy, enc.data, cut);
        assert_int_equal(idx_entry_decode(&d, copy, cut, &err),
                         KVFTS_ECORRUPT);
        free(copy);
    }
    char *longer = malloc(enc.len + 1);
    memcpy(longer, enc.data, enc.len);
    longer[enc.len] = 0;
    assert_int_equal(idx_entry_decode(&d, longer, enc.len + 1, &err),
                     KVFTS_ECORRUPT);
    free(longer);
    for (int f = 0; f < 300; f++) {
        char *copy = malloc(enc.len);
        memcpy(copy, enc.data, enc.len);
        copy[rnd((uint32_t)enc.len)] ^= (char)(1 + rnd(255));
        int rc = idx_entry_decode(&d, copy, enc.len, &err);
        if (rc == KVFTS_OK) {
            check_entry(&d, copy, enc.len, false);
            (*accepted)++;
        } else {
            assert_int_equal(rc, KVFTS_ECORRUPT);
            assert_non_null(strstr(err.msg, "corrupt term entry"));
        }
        free(copy);
    }
    idx_entry_free(&d);
    kv_buf_free(&enc);
}

/* e encodes to something the decoder refuses. */
static void entry_refused(const idx_entry *e)
{
    kv_err err = KV_ERR_INIT;
    kv_buf enc = KV_BUF_INIT;
    idx_entry d;
    idx_entry_init(&d);
    assert_int_equal(idx_entry_encode(e, &enc, &err), 0);
    assert_int_equal(idx_entry_decode(&d, enc.data, enc.len, &err),
                     KVFTS_ECORRUPT);
    idx_entry_free(&d);
    kv_buf_free(&enc);
}

static void test_entry_codec(void **state)
{
    (void)state;
    kv_err err = KV_ERR_INIT;
    idx_plist l;
    idx_plist_init(&l);
    kv_buf blk = KV_BUF_INIT, scratch = KV_BUF_INIT, dels = KV_BUF_INIT;
    random_plist(&l, 40, 3, true, false, 100);
    assert_int_equal(idx_block_encode(&l, 0, l.n, &blk, &scratch, &err), 0);
    uint32_t cols[3] = { 1u << 2 | 3, 2u << 2 | 1, 7u << 2 | 2 };
    uint64_t df[3] = { 0, 0, 0 }, ndelc[3] = { 2, 1, 3 };
    uint64_t df_all = 0;
    for (uint32_t i = 0; i < l.n; i++) {
        bool all = false;
        for (uint32_t v = l.vstart[i]; v < l.vstart[i + 1]; v++) {
            df[l.vcol[v]]++;
            all |= (cols[l.vcol[v]] & IDX_KIND_ALL) != 0;
        }
        df_all += all;
    }
    const uint32_t del_ids[4] = { 3, 50, 51, 4000000 };
    for (int k = 0; k < 4; k++)
        assert_int_equal(idx_buf_varint(&dels, del_ids[k] -
                                        (k ? del_ids[k - 1] : 0), &err), 0);
    uint32_t mtf, maxcol;
    uint64_t mask;
    bool one;
    plist_summary(&l, 0, l.n, &mtf, &mask, &one, &maxcol);

    /* Inline postings with deletions. */
    idx_entry e;
    memset(&e, 0, sizeof e);
    e.flags = IDX_E_POSITIONS | IDX_E_DELS;
    e.ncols = 3;
    e.cols = cols;
    e.df = df;
    e.ndelc = ndelc;
    e.df_all = df_all;
    e.ndocs = l.n;
    e.ndel = 4;
    e.ndel_all = 3;
    e.dels = (const unsigned char *)dels.data;
    e.dels_len = dels.len;
    e.first = l.ids[0];
    e.last = l.ids[l.n - 1];
    e.max_tf = mtf;
    e.blk = blk.data;
    e.blk_len = blk.len;
    unsigned accepted = 0;
    entry_case(&e, &accepted);
    /* What it decodes to: columns found, deletion ids, the inline block. */
    {
        kv_buf enc = KV_BUF_INIT;
        idx_entry d;
        idx_entry_init(&d);
        assert_int_equal(idx_entry_encode(&e, &enc, &err), 0);
        assert_int_equal(idx_entry_decode(&d, enc.data, enc.len, &err), 0);
        assert_int_equal(idx_entry_col(&d, 2u << 2 | 1), 1);
        assert_int_equal(idx_entry_col(&d, 7u << 2 | 2), 2);
        assert_int_equal(idx_entry_col(&d, 2u << 2 | 2), -1);
        assert_int_equal(idx_entry_col(&d, 0), -1);
        assert_int_equal(idx_entry_col(&d, 1000), -1);
        uint32_t *ids = NULL, cap = 0;
        assert_int_equal(idx_entry_dels(&d, &ids, &cap, &err), 0);
        assert_memory_equal(ids, del_ids, sizeof del_ids);
        free(ids);
        idx_block b;
        idx_block_init(&b);
        assert_int_equal(idx_block_decode(&b, d.first, d.blk, d.blk_len,
                                          d.ncols, IDX_DEC_POS, &err), 0);
        assert_same_docs(&l, 0, l.n, &b.l, IDX_DEC_POS);
        idx_block_free(&b);
        idx_entry_free(&d);
        kv_buf_free(&enc);
    }
    /* External postings, no deletions. */
    idx_entry x = e;
    x.flags = IDX_E_POSITIONS | IDX_E_EXTERNAL;
    x.ndel = x.ndel_all = 0;
    x.dels = NULL;
    x.dels_len = 0;
    x.blk = NULL;
    x.blk_len = 0;
    x.nblocks = 2;
    entry_case(&x, &accepted);
    /* Deletions only. */
    idx_entry o = e;
    o.flags = IDX_E_DELS;
    o.ndocs = o.df_all = 0;
    uint64_t zero[3] = { 0, 0, 0 };
    o.df = zero;
    entry_case(&o, &accepted);
    /* One column. */
    idx_entry c1 = e;
    uint32_t onecol = 9u << 2 | 3;
    uint64_t df1 = l.n, ndelc1 = 4;
    c1.flags = IDX_E_ONECOL | IDX_E_DELS;
    c1.ncols = 1;
    c1.cols = &onecol;
    c1.df = &df1;
    c1.ndelc = &ndelc1;
    c1.df_all = l.n;
    c1.ndel_all = 4;
    entry_case(&c1, &accepted);
    assert_true(accepted > 0);

    /* Values no writer produces are refused. */
    idx_entry bad;
    uint64_t dfbad[3] = { df[0], l.n + 1, df[2] };
    bad = e;
    bad.df = dfbad;                            /* df > ndocs */
    entry_refused(&bad);
    bad = e;
    bad.df_all = l.n + 1;
    entry_refused(&bad);
    bad = e;
    bad.ndel_all = 5;                          /* > ndel */
    entry_refused(&bad);
    bad = e;
    uint64_t ndelbad[3] = { 5, 0, 0 };
    bad.ndelc = ndelbad;                       /* > ndel */
    entry_refused(&bad);
    bad = e;
    uint32_t same[3] = { 5, 5, 9 };            /* columns not ascending */
    bad.cols = same;
    entry_refused(&bad);
    bad = e;
    bad.flags |= IDX_E_ONECOL;                 /* ONECOL with 3 columns */
    entry_refused(&bad);
    bad = e;
    bad.flags |= 32;                           /* an unknown flag */
    entry_refused(&bad);
    bad = e;
    bad.ncols = 0;
    entry_refused(&bad);
    bad = o;
    bad.flags = 0;                             /* nothing in it */
    bad.ndel = 0;
    entry_refused(&bad);
    bad = x;
    bad.first = 0;                             /* ids start at 1 */
    bad.last = l.ids[l.n - 1] - l.ids[0];
    entry_refused(&bad);
    bad = x;
    bad.last = bad.first + (uint32_t)l.n - 2;  /* ndocs ids do not fit */
    entry_refused(&bad);
    bad = x;
    bad.nblocks = 0;
    entry_refused(&bad);
    bad = x;
    bad.nblocks = (uint32_t)l.n + 1;           /* more blocks than docs */
    entry_refused(&bad);
    bad = e;
    bad.ndocs = IDX_BLOCK_MAX + 1;             /* too many for one block */
    bad.last = bad.first + IDX_BLOCK_MAX * 2;
    entry_refused(&bad);
    {
        kv_buf dup = KV_BUF_INIT;              /* a repeated deletion */
        const uint32_t gaps[4] = { 3, 47, 0, 5 };
        for (int k = 0; k < 4; k++)
            assert_int_equal(idx_buf_varint(&dup, gaps[k], &err), 0);
        bad = e;
        bad.dels = (const unsigned char *)dup.data;
        bad.dels_len = dup.len;
        entry_refused(&bad);
        kv_buf_free(&dup);
    }
    idx_plist_free(&l);
    kv_buf_free(&blk);
    kv_buf_free(&scratch);
    kv_buf_free(&dels);
}

/* A term of 1 to IDX_SMALL_DOCS postings (most of a large vocabulary's) is
 * stored in the compact form when each is one view of its one column with
 * tf <= IDX_SMALL_TF and it has no deletion, and decodes to what the full
 * form says, block and all. */
static void test_entry_small(void **state)
{
    (void)state;
    kv_err err = KV_ERR_INIT;
    idx_plist l;
    idx_plist_init(&l);
    kv_buf blk = KV_BUF_INIT, scratch = KV_BUF_INIT, enc = KV_BUF_INIT;
    unsigned accepted = 0;
    const uint32_t cols[3] = { 5u << 2 | 1, 5u << 2 | 3, 0x3fffffffu };
    const uint32_t last_tf[4] = { 1, 3, IDX_SMALL_TF, IDX_SMALL_TF + 1 };
    for (uint32_t n = 1; n <= IDX_SMALL_DOCS + 1; n++)
        for (int t = 0; t < 4; t++)
            for (int pos = 0; pos < 2; pos++)
                for (int c = 0; c < 3; c++) {
                    /* the last document has tf last_tf[t], the others 1..3 */
                    idx_plist_reset(&l, pos);
                    uint32_t id = c == 2 ? UINT32_MAX - 200000 * n : 1 + (uint32_t)t;
                    for (uint32_t i = 0; i < n; i++) {
                        uint32_t ps[IDX_SMALL_TF + 1], col0 = 0;
                        uint32_t tf = i + 1 == n ? last_tf[t] : 1 + i % 3;
                        uint32_t at = tf == 3 ? 1u << 30 : (uint32_t)c;
                        for (uint32_t j = 0; j < tf; j++, at += 1 + j * 1000)
                            ps[j] = at;
                        assert_int_equal(idx_plist_add(&l, id, 1, &col0,
                                                       &tf, ps, &err), 0);
                        id += 1 + i * 65000;
                    }
                    kv_buf_reset(&blk);
                    assert_int_equal(idx_block_encode(&l, 0, n, &blk,
                                                      &scratch, &err), 0);
                    uint32_t col = cols[c], mtf;
                    uint64_t df = n, mask;
                    bool one;
                    uint32_t maxcol;
                    plist_summary(&l, 0, n, &mtf, &mask, &one, &maxcol);
                    idx_entry e;
                    memset(&e, 0, sizeof e);
                    e.flags = IDX_E_ONECOL | (pos ? IDX_E_POSITIONS : 0);
                    e.ncols = 1;
                    e.cols = &col;
                    e.df = &df;
                    e.df_all = (col & IDX_KIND_ALL) ? n : 0;
                    e.ndocs = n;
                    e.first = l.ids[0];
                    e.last = l.ids[n - 1];
                    e.max_tf = mtf;
                    e.blk = blk.data;
                    e.blk_len = blk.len;
                    kv_buf_reset(&enc);
                    assert_int_equal(idx_entry_encode(&e, &enc, &err), 0);
                    bool compact = (enc.data[0] & IDX_E_SMALL) != 0;
                    assert_int_equal(compact, n <= IDX_SMALL_DOCS &&
                                     last_tf[t] <= IDX_SMALL_TF);
                    /* the full form is the block and 10 bytes or more */
                    if (compact)
                        assert_true(enc.len <= blk.len + 2);
                    idx_entry d;
                    idx_entry_init(&d);
                    if (idx_entry_decode(&d, enc.data, enc.len, &err))
                        fail_msg("n %u tf %u pos %d col %d: %s", n,
                                 last_tf[t], pos, c, err.msg);
                    assert_same_entry(&e, &d);  /* the block, byte for byte */
                    idx_block b;
                    idx_block_init(&b);
                    assert_int_equal(idx_block_decode(&b, d.first, d.blk,
                                                      d.blk_len, 1,
                                                      IDX_DEC_POS, &err), 0);
                    assert_same_docs(&l, 0, n, &b.l, IDX_DEC_POS);
                    idx_block_free(&b);
                    /* Decoded lazily: the postings at once, the block
                     * (the same bytes) when asked; no encode before. */
                    idx_entry z;
                    idx_entry_init(&z);
                    assert_int_equal(idx_entry_decode_lazy(&z, enc.data,
                                                           enc.len, &err), 0);
                    assert_int_equal(z.nsmall, compact ? n : 0);
                    for (uint32_t i = 0; i < z.nsmall; i++)
                        assert_int_equal(z.sids[i], l.ids[i]);
                    if (compact) {
                        assert_null(z.blk);
                        kv_buf_reset(&scratch);
                        assert_int_equal(idx_entry_encode(&z, &scratch,
                                                          &err), KVFTS_ERROR);
                    }
                    idx_entry_block(&z);
                    assert_same_entry(&d, &z);
                    idx_entry_free(&z);
                    idx_entry_free(&d);
                    if (c != 1 || t == 1)     /* (each is slow) */
                        entry_case(&e, &accepted);
                }
    assert_true(accepted > 0);
    /* With a deletion, or a second view, the full form. */
    {
        uint32_t col = 5u << 2 | 3, vcols[2] = { 0, 1 }, tfs[2] = { 1, 1 };
        uint32_t ps[2] = { 3, 4 }, two[2] = { col, col + 4 };
        uint64_t df = 1, df2[2] = { 1, 1 }, ndelc = 1;
        kv_buf dels = KV_BUF_INIT;
        assert_int_equal(idx_buf_varint(&dels, 7, &err), 0);
        idx_plist_reset(&l, true);
        assert_int_equal(idx_plist_add(&l, 9, 1, vcols, tfs, ps, &err), 0);
        kv_buf_reset(&blk);
        assert_int_equal(idx_block_encode(&l, 0, 1, &blk, &scratch, &err),
                         0);
        idx_entry e;
        memset(&e, 0, sizeof e);
        e.flags = IDX_E_ONECOL | IDX_E_POSITIONS | IDX_E_DELS;
        e.ncols = 1;
        e.cols = &col;
        e.df = &df;
        e.ndelc = &ndelc;
        e.df_all = 1;
        e.ndocs = 1;
        e.ndel = e.ndel_all = 1;
        e.dels = (const unsigned char *)dels.data;
        e.dels_len = dels.len;
        e.first = e.last = 9;
        e.max_tf = 1;
        e.blk = blk.data;
        e.blk_len = blk.len;
        kv_buf_reset(&enc);
        assert_int_equal(idx_entry_encode(&e, &enc, &err), 0);
        assert_false(enc.data[0] & IDX_E_SMALL);
        entry_case(&e, &accepted);
        idx_plist_reset(&l, true);
        assert_int_equal(idx_plist_add(&l, 9, 2, vcols, tfs, ps, &err), 0);
        kv_buf_reset(&blk);
        assert_int_equal(idx_block_encode(&l, 0, 1, &blk, &scratch, &err),
                         0);
        e.flags = IDX_E_POSITIONS;
        e.ncols = 2;
        e.cols = two;
        e.df = df2;
        e.ndel = e.ndel_all = 0;
        e.dels = NULL;
        e.dels_len = 0;
        e.max_tf = 2;
        e.blk = blk.data;
        e.blk_len = blk.len;
        kv_buf_reset(&enc);
        assert_int_equal(idx_entry_encode(&e, &enc, &err), 0);
        assert_false(enc.data[0] & IDX_E_SMALL);
        entry_case(&e, &accepted);
        kv_buf_free(&dels);
    }
    /* Compact entries no writer makes are refused. */
    static const struct { const char *b; size_t n; } bad[] = {
        { "\x18\x0a\x05\x08", 4 },         /* tf 9 */
        { "\x18\x0a\x00\x00", 4 },         /* id 0 */
        { "\x1a\x0a\x05\x00", 4 },         /* EXTERNAL */
        { "\x1c\x0a\x05\x00", 4 },         /* DELS */
        { "\x10\x0a\x05\x00", 4 },         /* not ONECOL */
        { "\x19\x0a\x05\x01\x03", 5 },    /* two positions, one given */
        { "\x18\x0a\x05\x00\x00", 5 },    /* a byte too many */
        { "\x18\x0a\x05", 3 },             /* no tf */
        { "\x38\x0a\x05\x00\x00\x00", 6 },  /* two ids, one the same */
        { "\x98\x01\x0a\x05\x01\x00\x00\x00\x00\x00", 10 },
                                              /* five postings */
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        idx_entry d;
        idx_entry_init(&d);
        assert_int_equal(idx_entry_decode(&d, bad[k].b, bad[k].n, &err),
                         KVFTS_ECORRUPT);
        idx_entry_free(&d);
    }
    idx_plist_free(&l);
    kv_buf_free(&blk);
    kv_buf_free(&scratch);
    kv_buf_free(&enc);
}

/* ---- dictionary chunks ------------------------------------------------------ */

static int term_cmp(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    return idx__bytes_cmp(x, strlen(x), y, strlen(y));
}

/* Walk chunk buf: its final status (KVFTS_ITEROVER when it is whole). */
static int chunk_walk(const char *buf, size_t len, uint32_t *entries)
{
    kv_err err = KV_ERR_INIT;
    idx_chunk_it it;
    idx_chunk_it_init(&it);
    *entries = 0;
    int rc = idx_chunk_open(&it, buf, len, &err);
    while (rc == KVFTS_OK) {
        rc = idx_chunk_next(&it, &err);
        if (rc == KVFTS_OK) {
            assert_true(it.term.len >= 1 && it.term.len <= len);
            assert_true(it.body >= buf && it.body + it.body_len <= buf + len);
            (*entries)++;
        }
    }
    if (rc != KVFTS_ITEROVER) {
        assert_int_equal(rc, KVFTS_ECORRUPT);
        assert_non_null(strstr(err.msg, "corrupt dictionary chunk"));
    }
    idx_chunk_it_free(&it);
    return rc;
}

static void test_chunk_codec(void **state)
{
    (void)state;
    kv_err err = KV_ERR_INIT;
    enum { NT = 200 };
    char *terms[NT];
    uint32_t nt = 0;
    for (uint32_t i = 0; i < NT; i++) {
        char t[TOK_MAX_TERM + 1];
        uint32_t n = 1 + (rnd(10) ? rnd(6) : rnd(TOK_MAX_TERM));
        for (uint32_t k = 0; k < n; k++)
            t[k] = "abc\xc3\xa9"[rnd(5)];
        terms[nt++] = xstrndup(t, n);
    }
    qsort(terms, nt, sizeof *terms, term_cmp);
    uint32_t u = 0;
    for (uint32_t i = 0; i < nt; i++)
        if (u && strcmp(terms[u - 1], terms[i]) == 0)
            free(terms[i]);
        else
            terms[u++] = terms[i];
    nt = u;
    char bodies[NT][64];
    uint32_t blen[NT];
    idx_chunk_w cw;
    idx_chunk_w_init(&cw);
    idx_chunk_w_reset(&cw, 17);
    for (uint32_t i = 0; i < nt; i++) {
        blen[i] = rnd(64);
        for (uint32_t k = 0; k < blen[i]; k++)
            bodies[i][k] = (char)rnd(256);
        assert_int_equal(idx_chunk_w_add(&cw, terms[i], strlen(terms[i]),
                                         bodies[i], blen[i], &err), 0);
    }
    kv_buf out = KV_BUF_INIT;
    assert_int_equal(idx_chunk_w_finish(&cw, &out, &err), 0);
    assert_int_equal(cw.first.len, strlen(terms[0]));
    assert_memory_equal(cw.first.data, terms[0], cw.first.len);
    /* Prefixes are shared: smaller than the terms back to back. */
    size_t raw = 0;
    for (uint32_t i = 0; i < nt; i++)
        raw += strlen(terms[i]) + blen[i] + 2;
    assert_true(out.len < raw);
    idx_chunk_it it;
    idx_chunk_it_init(&it);
    assert_int_equal(idx_chunk_open(&it, out.data, out.len, &err), 0);
    for (uint32_t i = 0; i < nt; i++) {
        assert_int_equal(idx_chunk_next(&it, &err), 0);
        assert_int_equal(it.term.len, strlen(terms[i]));
        assert_memory_equal(it.term.data, terms[i], it.term.len);
        assert_int_equal(it.body_len, blen[i]);
        if (blen[i])
            assert_memory_equal(it.body, bodies[i], blen[i]);
        assert_int_equal(it.ord, 17 + i);
    }
    assert_int_equal(idx_chunk_next(&it, &err), KVFTS_ITEROVER);
    assert_int_equal(idx_chunk_next(&it, &err), KVFTS_ITEROVER);
    /* Every truncation is found out, at the opening or by a walk. */
    uint32_t got;
    assert_int_equal(chunk_walk(out.data, out.len, &got), KVFTS_ITEROVER);
    assert_int_equal(got, nt);
    for (size_t cut = 0; cut < out.len; cut++) {
        char *copy = malloc(cut + 1);
        memcpy(copy, out.data, cut);
        assert_int_equal(chunk_walk(copy, cut, &got), KVFTS_ECORRUPT);
        free(copy);
    }
    assert_int_equal(kv_buf_append(&out, "", 1, &err), 0);
    assert_int_equal(chunk_walk(out.data, out.len, &got), KVFTS_ECORRUPT);
    assert_int_equal(got, nt);
    out.len--;
    for (int f = 0; f < 500; f++) {
        char *copy = malloc(out.len);
        memcpy(copy, out.data, out.len);
        copy[rnd((uint32_t)out.len)] ^= (char)(1 + rnd(255));
        chunk_walk(copy, out.len, &got);
        free(copy);
    }
    /* An empty chunk and another version are refused. */
    idx_chunk_w_reset(&cw, 0);
    assert_int_equal(idx_chunk_w_finish(&cw, &out, &err), 0);
    assert_int_equal(idx_chunk_open(&it, out.data, out.len, &err),
                     KVFTS_ECORRUPT);
    assert_int_equal(idx_chunk_w_add(&cw, S("t"), "b", 1, &err), 0);
    assert_int_equal(idx_chunk_w_finish(&cw, &out, &err), 0);
    assert_int_equal(chunk_walk(out.data, out.len, &got), KVFTS_ITEROVER);
    assert_int_equal(got, 1);
    out.data[0] = 1;
    assert_int_equal(idx_chunk_open(&it, out.data, out.len, &err),
                     KVFTS_ECORRUPT);
    idx_chunk_it_free(&it);
    idx_chunk_w_free(&cw);
    kv_buf_free(&out);
    for (uint32_t i = 0; i < nt; i++)
        free(terms[i]);
}

/* ---- the segment list, lengths and field records -------------------------- */

static void test_segs_codec(void **state)
{
    (void)state;
    kv_err err = KV_ERR_INIT;
    idx_segs s, t;
    memset(&s, 0, sizeof s);
    memset(&t, 0, sizeof t);
    kv_buf enc = KV_BUF_INIT;
    /* An empty list. */
    assert_int_equal(idx_segs_encode(&s, &enc, &err), 0);
    assert_int_equal(idx_segs_decode(&t, enc.data, enc.len, &err), 0);
    assert_int_equal(t.n, 0);
    for (uint32_t i = 0; i < 6; i++) {
        idx_seg g = { i == 3 ? 0x80000000u | 77 : 5 + i * 1000, i % 4,
                      rnd(100000), rnd(300), rnd(70000),
                      (uint64_t)rnd(1u << 31) << 4, 1 + rnd(1000), 0 };
        g.max_id = g.min_id + rnd(UINT32_MAX - g.min_id);
        assert_int_equal(idx_segs_push(&s, &g, &err), 0);
    }
    assert_int_equal(idx_segs_encode(&s, &enc, &err), 0);
    assert_int_equal(idx_segs_decode(&t, enc.data, enc.len, &err), 0);
    assert_int_equal(t.n, s.n);
    for (uint32_t i = 0; i < s.n; i++) {
        const idx_seg *a = &s.v[i], *b = &t.v[i];
        assert_true(a->id == b->id && a->level == b->level &&
                    a->docs == b->docs && a->dels == b->dels &&
                    a->terms == b->terms && a->bytes == b->bytes &&
                    a->min_id == b->min_id && a->max_id == b->max_id);
    }
    for (size_t cut = 0; cut < enc.len; cut++) {
        char *copy = malloc(cut + 1);
        memcpy(copy, enc.data, cut);
        assert_int_equal(idx_segs_decode(&t, copy, cut, &err),
                         KVFTS_ECORRUPT);
        assert_int_equal(t.n, 0);
        free(copy);
    }
    assert_int_equal(kv_buf_append(&enc, "", 1, &err), 0);
    assert_int_equal(idx_segs_decode(&t, enc.data, enc.len, &err),
                     KVFTS_ECORRUPT);
    /* A repeated id, id 0, a level past 64, a max id below the min. */
    for (int bad = 0; bad < 4; bad++) {
        idx_segs b;
        memset(&b, 0, sizeof b);
        for (uint32_t i = 0; i < s.n; i++)
            assert_int_equal(idx_segs_push(&b, &s.v[i], &err), 0);
        if (bad == 0)
            b.v[4].id = b.v[1].id;
        else if (bad == 1)
            b.v[2].id = 0;
        else if (bad == 2)
            b.v[5].level = 65;
        else
            b.v[0].max_id = b.v[0].min_id - 1;
        assert_int_equal(idx_segs_encode(&b, &enc, &err), 0);
        assert_int_equal(idx_segs_decode(&t, enc.data, enc.len, &err),
                         KVFTS_ECORRUPT);
        idx_segs_free(&b);
    }
    assert_int_equal(idx_segs_encode(&s, &enc, &err), 0);
    enc.data[0] = 1;
    assert_int_equal(idx_segs_decode(&t, enc.data, enc.len, &err),
                     KVFTS_ECORRUPT);
    idx_segs_free(&s);
    idx_segs_free(&t);
    kv_buf_free(&enc);
}

static void test_lens_codec(void **state)
{
    (void)state;
    kv_err err = KV_ERR_INIT;
    kv_buf enc = KV_BUF_INIT;
    /* A span of 64 ids from 128: a document of 5 fields, one of the same
     * fields (its shape shared), one of other fields, one of none. */
    idx_len lens[12] = { { 1, 12 }, { 2, 300 }, { 7, 1 }, { 300, 70000 },
                         { 4, UINT32_MAX },
                         { 1, 3 }, { 2, 0 }, { 7, 9 }, { 300, 1 }, { 4, 2 },
                         { 9, 5 }, { 1, 6 } };
    idx_doclen docs[4] = { { 128, 0, 5 }, { 130, 5, 5 }, { 140, 10, 2 },
                           { 191, 12, 0 } };
    idx_len *out = NULL;
    uint32_t n, cap = 0;
    assert_int_equal(idx_lens_encode(128, docs, 4, lens, &enc, &err), 0);
    /* shared shape: the second document costs its gap and 5 lengths */
    assert_true(enc.len < 40);
    idx_lens_it it;
    bool more;
    assert_int_equal(idx_lens_open(&it, enc.data, enc.len, 128, &err), 0);
    for (uint32_t d = 0; d < 4; d++) {
        assert_int_equal(idx_lens_next(&it, &more, &err), 0);
        assert_true(more);
        assert_int_equal(it.docid, docs[d].docid);
        assert_int_equal(idx_lens_pairs(&it, &out, &n, &cap, &err), 0);
        assert_int_equal(n, docs[d].n);
        for (uint32_t i = 0; i < n; i++) {
            const idx_len *l = &lens[docs[d].off + i];
            assert_true(out[i].field_id == l->field_id && out[i].len == l->len);
            assert_int_equal(idx_lens_field(it.ids, it.lens, it.n,
                                            l->field_id), l->len);
        }
        assert_int_equal(idx_lens_field(it.ids, it.lens, it.n, 3), 0);
    }
    assert_int_equal(idx_lens_next(&it, &more, &err), 0);
    assert_false(more);
    /* A cut record is refused, or (cut between documents) reads as the
     * first documents, unchanged. */
    for (size_t cut = 0; cut < enc.len; cut++) {
        int rc = idx_lens_open(&it, enc.data, cut, 128, &err);
        uint32_t d = 0;
        more = true;
        while (!rc && more && !(rc = idx_lens_next(&it, &more, &err)) &&
               more) {
            assert_true(d < 4);
            assert_int_equal(it.docid, docs[d].docid);
            assert_int_equal(idx_lens_pairs(&it, &out, &n, &cap, &err), 0);
            assert_int_equal(n, docs[d].n);
            for (uint32_t i = 0; i < n; i++)
                assert_int_equal(out[i].len, lens[docs[d].off + i].len);
            d++;
        }
        assert_true(rc == KVFTS_ECORRUPT || (rc == KVFTS_OK && d < 4));
    }
    /* The record is its span's: at another base its ids are refused or
     * moved, never past the span. */
    assert_int_equal(idx_lens_open(&it, enc.data, enc.len, 100, &err),
                     KVFTS_ECORRUPT);
    /* A gap past the span's end, and an unknown version. */
    const char past[] = { IDX_LENS_VERSION, (char)(64 << 1), 0 };
    assert_int_equal(idx_lens_open(&it, past, sizeof past, 0, &err), 0);
    assert_int_equal(idx_lens_next(&it, &more, &err), KVFTS_ECORRUPT);
    const char v1[] = { 1, 1, 1 };
    assert_int_equal(idx_lens_open(&it, v1, sizeof v1, 0, &err),
                     KVFTS_ECORRUPT);
    /* The encoder takes ids in order, inside the span. */
    idx_doclen back[2] = { { 140, 0, 1 }, { 130, 0, 1 } };
    assert_int_equal(idx_lens_encode(128, back, 2, lens, &enc, &err),
                     KVFTS_ERROR);
    idx_doclen out_of_span[1] = { { 192, 0, 1 } };
    assert_int_equal(idx_lens_encode(128, out_of_span, 1, lens, &enc, &err),
                     KVFTS_ERROR);
    free(out);
    /* Field records. */
    idx_field f = { 3, 63000, 4000000000ull }, g;
    assert_int_equal(idx_field_encode(&f, &enc, &err), 0);
    assert_int_equal(idx_field_decode(enc.data, enc.len, &g, &err), 0);
    assert_true(g.id == f.id && g.docs == f.docs &&
                g.total_len == f.total_len);
    for (size_t cut = 0; cut < enc.len; cut++)
        assert_int_equal(idx_field_decode(enc.data, cut, &g, &err),
                         KVFTS_ECORRUPT);
    assert_int_equal(kv_buf_append(&enc, "", 1, &err), 0);
    assert_int_equal(idx_field_decode(enc.data, enc.len, &g, &err),
                     KVFTS_ECORRUPT);
    f.id = 0;
    assert_int_equal(idx_field_encode(&f, &enc, &err), 0);
    assert_int_equal(idx_field_decode(enc.data, enc.len, &g, &err),
                     KVFTS_ECORRUPT);
    f.id = (UINT32_MAX >> 2) + 1;     /* a column must hold id << 2 */
    assert_int_equal(idx_field_encode(&f, &enc, &err), 0);
    assert_int_equal(idx_field_decode(enc.data, enc.len, &g, &err),
                     KVFTS_ECORRUPT);
    kv_buf_free(&enc);
}

/* ---- through the public API ----------------------------------------------- */

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
    assert_term(db, "nosuch", "fox", NULL);
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
    assert_term(db, "text", "cat", "{\"count\":1,\"refs\":[\"the_cat\"]}");
    /* Deleting a term's last document removes the entry. */
    assert_int_equal(kvfts_del(db, S("the_cat"), 0), 0);
    assert_term(db, "_all", "sleepy", NULL);
    assert_term(db, "_all", "cat", NULL);
    kvfts_stats st;
    assert_int_equal(kvfts_get_stats(&st, db), 0);
    assert_int_equal(st.documents, 1);
    assert_int_equal(st.terms, 8);       /* the 8 distinct words left */
    assert_int_equal(st.postings, 8);
    assert_consistent(db);
    /* One segment after an optimize, with the same answers. */
    assert_int_equal(kvfts_optimize(db, NULL, NULL), 0);
    assert_int_equal(kvfts_get_stats(&st, db), 0);
    assert_int_equal(st.segments, 1);
    assert_int_equal(st.terms, 8);
    assert_term(db, "_all", "fox", "{\"count\":1,\"refs\":[\"the_fox\"]}");
    assert_term(db, "_all", "cat", NULL);
    assert_consistent(db);
}

/* Documents deleted: runs with holes, and longer ones. */
static bool lens_hole(int i)
{
    return i % 11 == 0 && (i <= 1100 || i % 7 == 0);
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
        if (!lens_hole(i))
            continue;
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
            /* and what the document says: ids are load order */
            uint32_t doclen = id <= 6000 && !lens_hole((int)id) && id % 5
                              ? 1 + id % 37 : 0;
            assert_int_equal(got, doclen);
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
    /* A whole column, as ranking caches it. */
    idx_lens_cache *lc;
    const uint32_t *col;
    uint32_t ncol;
    assert_int_equal(idx_lens_cache_new(&lc, &err), 0);
    assert_int_equal(idx_lens_cache_sync(lc, t, &err), 0);
    assert_int_equal(idx_lens_cache_column(lc, t, fid, false, &col, &ncol,
                                           &err), 0);
    assert_null(col);
    assert_int_equal(idx_lens_cache_column(lc, t, fid, true, &col, &ncol,
                                           &err), 0);
    assert_non_null(col);
    for (uint32_t id = 1; id < ncol; id++) {
        uint32_t want;
        assert_int_equal(idx_doc_len(t, id, fid, &scratch, &want, &err), 0);
        assert_int_equal(col[id], want);
    }
    idx_lens_cache_free(lc);
    kv_buf_free(&scratch);
    kv_txn_abort(t);
    kv_env_close(env);
}

/* ---- the handle's cache of terms' blocks ---------------------------------- */

static int count_posting(void *payload, uint32_t term, uint64_t df,
                         uint32_t docid, uint32_t tf)
{
    (void)term, (void)df, (void)docid, (void)tf;
    ++*(uint64_t *)payload;
    return 0;
}

/* A rare term ANDed with a common one, walked by readers that share a
 * dictionary cache: the walk seeks a few of the common term's blocks (1 in
 * 8 here), and from the third reader on they all come from the cache
 * (bt_note, bt_admit: a walk reading a sixteenth of them or more makes the
 * term a candidate, the next walk reads it whole), and the answers stay
 * the same.  A rare term that reads 1 in 313 leaves them where they are.
 * A prefix's walk reads them through the cache too. */
static void test_block_cache_admission(void **state)
{
    fx *f = *state;
    kvfts_batch *b;
    assert_int_equal(kvfts_batch_begin(&b, f->db), 0);
    const int ndocs = 40000;
    for (int i = 1; i <= ndocs; i++) {
        char k[32], j[96];
        snprintf(k, sizeof k, "d%05d", i);
        snprintf(j, sizeof j, "{\"t\":\"common w%d%s%s\"}", i % 7,
                 i % 1024 == 0 ? " rare" : "", i == 20000 ? " once" : "");
        assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S(k), S(j)), 0);
    }
    assert_int_equal(kvfts_batch_commit(b), 0);
    kvfts_batch_free(b);
    kv_env *env;
    kv_err err = KV_ERR_INIT;
    assert_int_equal(kv_env_open(&env, f->dir, NULL, &err), 0);
    kv_txn *t;
    assert_int_equal(kv_txn_begin(&t, env, false, &err), 0);
    idx_dict_cache *d;
    assert_int_equal(idx_dict_cache_new(&d, 8u << 20, &err), 0);
    const char *rare[] = { "once", "rare" };
    for (int w = 0; w < 2; w++) {
        size_t held[5];
        for (int round = 0; round < 5; round++) {
            idx_reader *r;
            assert_int_equal(idx_reader_open_dict(&r, t, d, &err), 0);
            idx_postings *pr, *pc;
            assert_int_equal(idx_postings_open(&pr, r, S("_all"),
                                               S(rare[w]), &err), 0);
            assert_int_equal(idx_postings_open(&pc, r, S("_all"),
                                               S("common"), &err), 0);
            int both = 0, rc;
            while ((rc = idx_postings_next(pr, &err)) == KVFTS_OK) {
                uint32_t id = idx_postings_docid(pr);
                assert_int_equal(idx_postings_skip_to(pc, id, &err), 0);
                both += idx_postings_docid(pc) == id;
            }
            assert_int_equal(rc, KVFTS_ITEROVER);
            assert_int_equal(both, w ? ndocs / 1024 : 1);
            idx_postings_close(pr);
            idx_postings_close(pc);
            idx_reader_close(r);
            held[round] = idx_dict_cache_bytes(d);
        }
        /* common's 40,000 postings take more than 40 KB */
        if (w == 1 && held[4] < held[0] + 40000)
            fail_msg("the cache holds %zu bytes after the first walk and "
                     "%zu after the fifth: common's blocks not kept",
                     held[0], held[4]);
        if (w == 0 && held[4] != held[0])
            fail_msg("one seek of 313 blocks read them whole (%zu -> %zu "
                     "bytes)", held[0], held[4]);
        assert_int_equal(held[4], held[2]);     /* kept, not read again */
    }
    idx_dict_cache_free(d);
    /* A prefix's expansion reads its terms' blocks whole: from the second
     * walk on, through a fresh cache, they are the cache's to read. */
    assert_int_equal(idx_dict_cache_new(&d, 8u << 20, &err), 0);
    size_t held[4];
    for (int round = 0; round < 4; round++) {
        idx_reader *r;
        assert_int_equal(idx_reader_open_dict(&r, t, d, &err), 0);
        uint64_t n = 0;
        assert_int_equal(idx_prefix_postings(r, S("_all"), S("comm"), 100,
                                             false, count_posting, &n, &err),
                         0);
        assert_int_equal(n, ndocs);
        idx_reader_close(r);
        held[round] = idx_dict_cache_bytes(d);
    }
    if (held[3] < held[0] + 40000)
        fail_msg("comm*: the cache holds %zu bytes after the first walk "
                 "and %zu after the fourth", held[0], held[3]);
    assert_int_equal(held[3], held[2]);
    idx_dict_cache_free(d);
    kv_txn_abort(t);
    kv_env_close(env);
}

/* ---- damaged records on disk -------------------------------------------- */

/* The entry of term in the newest segment. */
static void newest_entry(kv_txn *txn, const char *term, idx_entry *out,
                         uint32_t *seg, uint32_t *ord)
{
    kv_err err = KV_ERR_INIT;
    idx_segs s;
    memset(&s, 0, sizeof s);
    assert_int_equal(idx_segs_read(&s, txn, false, &err), 0);
    assert_true(s.n > 0);
    *seg = s.v[s.n - 1].id;
    idx_seg_walk *w;
    assert_int_equal(idx_seg_walk_open(&w, txn, *seg, term, strlen(term),
                                       &err), 0);
    const char *t;
    size_t tl;
    const idx_entry *e;
    assert_int_equal(idx_seg_walk_next(w, &t, &tl, &e, ord, &err), 0);
    assert_int_equal(tl, strlen(term));
    assert_memory_equal(t, term, tl);
    *out = *e;              /* counts and flags only */
    out->cols = NULL;
    out->df = out->ndelc = NULL;
    out->dels = NULL;
    out->blk = NULL;
    idx_seg_walk_close(w);
    idx_segs_free(&s);
}

/* Replace the value of key in space s (kept in *saved first when given). */
static void poke(kv_env *env, kv_space s, const void *key, size_t klen,
                 const void *val, size_t vlen, kv_buf *saved)
{
    kv_err err = KV_ERR_INIT;
    kv_txn *t;
    assert_int_equal(kv_txn_begin(&t, env, true, &err), 0);
    if (saved)
        assert_int_equal(kv_get(t, s, key, klen, saved, false, &err), 0);
    assert_int_equal(kv_put(t, s, key, klen, val, vlen, &err), 0);
    assert_int_equal(kv_txn_commit(t, &err), 0);
}

/* Read (field, term) to its end with tfs: its status. */
static int read_all(kv_env *env, const char *field, const char *term,
                    uint32_t *read, kv_err *err)
{
    kv_txn *t;
    idx_reader *r;
    idx_postings *p = NULL;
    *read = 0;
    assert_int_equal(kv_txn_begin(&t, env, false, err), 0);
    int rc = idx_reader_open(&r, t, err);
    if (!rc)
        rc = idx_postings_open(&p, r, field, strlen(field), term,
                               strlen(term), err);
    while (!rc && (rc = idx_postings_next(p, err)) == KVFTS_OK) {
        rc = idx_postings_need(p, IDX_DECODE_POSITIONS, err);
        if (!rc)
            (*read)++;
    }
    if (rc && rc != KVFTS_ITEROVER && p) {
        /* sticky: the iterator keeps its error */
        kv_err e2 = KV_ERR_INIT;
        assert_int_equal(idx_postings_next(p, &e2), rc);
        assert_int_equal(idx_postings_skip_to(p, UINT32_MAX, &e2), rc);
        assert_int_equal(idx_postings_need(p, IDX_DECODE_TFS, &e2), rc);
        assert_string_equal(e2.msg, err->msg);
    }
    idx_postings_close(p);
    idx_reader_close(r);
    kv_txn_abort(t);
    return rc == KVFTS_ITEROVER ? KVFTS_OK : rc;
}

static int check_count(kvfts_db *db, uint64_t *diffs)
{
    *diffs = 0;
    return kvfts_check(diffs, db, NULL, NULL);
}

/* A damaged block, dictionary chunk or segment list is reported as
 * corruption (never read out of bounds); a consistent lie (a segment
 * dropped from the list) is a difference `check` finds; reindex repairs
 * both. */
static void test_corrupt_records(void **state)
{
    fx *f = *state;
    kvfts_db *db = f->db;
    kvfts_batch *b;
    assert_int_equal(kvfts_batch_begin(&b, db), 0);
    for (int i = 0; i < 300; i++) {
        char k[32], j[64];
        snprintf(k, sizeof k, "d%03d", i);
        snprintf(j, sizeof j, "{\"t\":\"word w%d word\"}", i);
        assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S(k), S(j)), 0);
    }
    assert_int_equal(kvfts_batch_commit(b), 0);
    kvfts_batch_free(b);
    assert_consistent(db);
    kv_env *env;
    kv_err err = KV_ERR_INIT;
    assert_int_equal(kv_env_open(&env, f->dir, NULL, &err), 0);
    /* Where "word" is: its segment, ordinal, chunk and blocks. */
    kv_txn *t;
    assert_int_equal(kv_txn_begin(&t, env, false, &err), 0);
    idx_entry e;
    uint32_t seg, ord;
    newest_entry(t, "word", &e, &seg, &ord);
    assert_true((e.flags & IDX_E_EXTERNAL) && e.nblocks >= 3);
    unsigned char bkey[13];
    idx_key_block(bkey, seg, ord, 0);
    kv_cursor *c;
    const char *k, *v;
    size_t kl, vl;
    assert_int_equal(kv_cursor_open(&c, t, KV_POSTINGS, &err), 0);
    assert_int_equal(kv_cursor_seek(c, bkey, 9, &err), 0);
    /* the documents of the first block (read whole before damage) */
    uint32_t first_docs;
    {
        idx_block b1;
        idx_block_init(&b1);
        kv_cursor_key(c, &k, &kl);
        kv_cursor_val(c, &v, &vl);
        assert_int_equal(idx_block_decode(&b1, kv_get_be32((const unsigned
                                                            char *)k + 9),
                                          v, vl, e.ncols, IDX_DEC_IDS, &err),
                         0);
        first_docs = b1.l.n;
        idx_block_free(&b1);
    }
    assert_int_equal(kv_cursor_next(c, &err), 0);   /* the second block */
    kv_cursor_key(c, &k, &kl);
    kv_cursor_val(c, &v, &vl);
    assert_int_equal(kl, 13);
    assert_memory_equal(k, bkey, 9);
    memcpy(bkey, k, 13);
    kv_buf blk = KV_BUF_INIT;
    assert_int_equal(kv_buf_append(&blk, v, vl, &err), 0);
    kv_cursor_close(c);
    /* The chunk holding "word": the last one whose first term is not
     * after it. */
    kv_buf ckey = KV_BUF_INIT;
    assert_int_equal(idx_key_chunk(&ckey, seg, S("word"), &err), 0);
    assert_int_equal(kv_cursor_open(&c, t, KV_TERMS, &err), 0);
    int rc = kv_cursor_seek(c, ckey.data, ckey.len, &err);
    kv_cursor_key(c, &k, &kl);
    if (rc || kl != ckey.len || memcmp(k, ckey.data, kl) != 0) {
        rc = rc == KVFTS_ITEROVER ? kv_cursor_last(c, &err)
                                  : kv_cursor_prev(c, &err);
        assert_int_equal(rc, 0);
        kv_cursor_key(c, &k, &kl);
    }
    kv_buf_reset(&ckey);
    assert_int_equal(kv_buf_append(&ckey, k, kl, &err), 0);
    kv_cursor_close(c);
    kv_txn_abort(t);
    uint32_t read;
    assert_int_equal(read_all(env, "t", "word", &read, &err), 0);
    assert_int_equal(read, 300);

    /* 1. The block's max_tf one more than its views say: its ids decode
     *    (a reader skips to it), its views do not. */
    kv_buf bad = KV_BUF_INIT;
    assert_int_equal(kv_buf_append(&bad, blk.data, blk.len, &err), 0);
    const unsigned char *p = (const unsigned char *)bad.data + 2, *end =
        (const unsigned char *)bad.data + bad.len;
    uint64_t x;
    assert_true(idx_varint_get(&p, end, &x));       /* n */
    assert_true(idx_varint_get(&p, end, &x));       /* span */
    assert_true(*p < 0x7f);                         /* max_tf, one byte */
    bad.data[p - (const unsigned char *)bad.data]++;
    poke(env, KV_POSTINGS, bkey, 13, bad.data, bad.len, NULL);
    err = (kv_err)KV_ERR_INIT;
    assert_int_equal(read_all(env, "t", "word", &read, &err),
                     KVFTS_ECORRUPT);
    assert_non_null(strstr(err.msg, "corrupt postings block"));
    assert_int_equal(read, first_docs);   /* the first block's */
    {
        /* skip_to lands in it: ids are fine, tfs are not */
        kv_txn *rt;
        idx_reader *r;
        idx_postings *pp;
        uint32_t first = kv_get_be32(bkey + 9);
        assert_int_equal(kv_txn_begin(&rt, env, false, &err), 0);
        assert_int_equal(idx_reader_open(&r, rt, &err), 0);
        assert_int_equal(idx_postings_open(&pp, r, S("t"), S("word"), &err),
                         0);
        assert_int_equal(idx_postings_skip_to(pp, first + 1, &err), 0);
        assert_int_equal(idx_postings_docid(pp), first + 1);
        assert_int_equal(idx_postings_need(pp, IDX_DECODE_TFS, &err),
                         KVFTS_ECORRUPT);
        assert_int_equal(idx_postings_next(pp, &err), KVFTS_ECORRUPT);
        idx_postings_close(pp);
        idx_reader_close(r);
        kv_txn_abort(rt);
    }
    uint64_t diffs;
    assert_int_equal(check_count(db, &diffs), KVFTS_ECORRUPT);
    poke(env, KV_POSTINGS, bkey, 13, blk.data, blk.len, NULL);
    assert_consistent(db);

    /* 2. A block cut short: the move onto it fails, and so do the
     *    library's reads. */
    poke(env, KV_POSTINGS, bkey, 13, blk.data, 3, NULL);
    assert_int_equal(read_all(env, "t", "word", &read, &err),
                     KVFTS_ECORRUPT);
    assert_int_equal(read, first_docs);
    char *j;
    size_t jn;
    assert_int_equal(kvfts_term_get(&j, &jn, db, S("t"), S("word"), 0),
                     KVFTS_ECORRUPT);
    assert_non_null(strstr(kvfts_errmsg(db), "corrupt postings block"));
    assert_int_equal(check_count(db, &diffs), KVFTS_ECORRUPT);
    poke(env, KV_POSTINGS, bkey, 13, blk.data, blk.len, NULL);

    /* 3. The dictionary chunk. */
    kv_buf chunk = KV_BUF_INIT;
    poke(env, KV_TERMS, ckey.data, ckey.len, "\x02\x05\x00\x01", 4, &chunk);
    assert_int_equal(kvfts_term_get(&j, &jn, db, S("t"), S("word"), 0),
                     KVFTS_ECORRUPT);
    assert_non_null(strstr(kvfts_errmsg(db), "corrupt dictionary chunk"));
    assert_int_equal(read_all(env, "_all", "word", &read, &err),
                     KVFTS_ECORRUPT);
    assert_int_equal(check_count(db, &diffs), KVFTS_ECORRUPT);
    poke(env, KV_TERMS, ckey.data, ckey.len, chunk.data, chunk.len, NULL);
    assert_consistent(db);

    /* 4. The segment list. */
    kv_buf list = KV_BUF_INIT;
    poke(env, KV_SEGS, S(IDX_SEGS_KEY), "\x02\x01\x00", 3, &list);
    assert_int_equal(read_all(env, "t", "word", &read, &err),
                     KVFTS_ECORRUPT);
    assert_non_null(strstr(err.msg, "corrupt segment list"));
    assert_int_equal(check_count(db, &diffs), KVFTS_ECORRUPT);

    /* 5. A list without the segment: consistent bytes, a wrong index. */
    poke(env, KV_SEGS, S(IDX_SEGS_KEY), "\x02\x00", 2, NULL);
    assert_int_equal(check_count(db, &diffs), 0);
    assert_true(diffs >= 300);
    assert_term(db, "t", "word", NULL);
    /* reindex repairs it */
    assert_int_equal(kvfts_reindex(db, NULL, NULL), 0);
    assert_consistent(db);
    assert_int_equal(read_all(env, "t", "word", &read, &err), 0);
    assert_int_equal(read, 300);
    kv_buf_free(&list);
    kv_buf_free(&chunk);
    kv_buf_free(&bad);
    kv_buf_free(&blk);
    kv_buf_free(&ckey);
    kv_env_close(env);
}

/* ---- rebuild equivalence through the API ---------------------------------- */

static const char *const vocab[] = {
    "common", "alpha", "beta", "gamma", "delta", "Epsilon", "zeta", "eta",
    "theta", "iota", "kappa", "caf\xc3\xa9", "STRASSE", "rare"
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
        if (!b && rnd(20) == 0)
            assert_int_equal(kvfts_optimize(db, NULL, NULL), 0);
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
    int n = env ? atoi(env) : 12;
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

/* ---- merges copy the blocks nothing changes ------------------------------ */

/* Batch s of 1,100 documents item::K, K from s * 1100 + 1 on (a segment
 * each); with replace, every 37th of them is replaced by a new text, and
 * then every 41st of batch s + 1 is deleted (blocks whose only change in
 * the run is a deletion). */
static void merge_batch(kvfts_db *db, int s, bool replace)
{
    kvfts_batch *b;
    char key[32], json[96];
    assert_int_equal(kvfts_batch_begin(&b, db), 0);
    for (int i = 0; i < 1100; i++) {
        int k = s * 1100 + i + 1;
        snprintf(key, sizeof key, "item::%d", k);
        if (replace && i % 37 != 0)
            continue;
        snprintf(json, sizeof json, "{\"text\":\"%s alpha w%d n%d\"}",
                 replace ? "beta common" : "common", k % 2, k % 50);
        assert_int_equal(kvfts_batch_write(b, KVFTS_UPSERT, S(key), S(json)),
                         0);
    }
    assert_int_equal(kvfts_batch_commit(b), 0);
    kvfts_batch_free(b);
    for (int i = 0; replace && i < 1100; i += 41) {   /* the next batch's */
        snprintf(key, sizeof key, "item::%d", (s + 1) * 1100 + i + 1);
        assert_int_equal(kvfts_del(db, S(key), 0), 0);
    }
}

/* What db answers, as one string: term entries with all their refs, and
 * counts of searches (phrases read the copied blocks' positions). */
static char *merge_answers(kvfts_db *db)
{
    kvfts_stats st;
    assert_int_equal(kvfts_get_stats(&st, db), 0);
    char docs[32];
    snprintf(docs, sizeof docs, "docs=%llu ",
             (unsigned long long)st.documents);
    static const char *terms[][2] = {
        { "_all", "common" }, { "_all", "alpha" }, { "text", "w0" },
        { "_all", "w1" }, { "_all", "beta" }, { "text", "n7" },
    };
    static const char *queries[] = {
        "\"common alpha\"", "\"alpha w1\"", "beta alpha", "common -w0",
        "text:\"alpha w0 n10\"", "n1*",
    };
    kv_buf out = KV_BUF_INIT;
    kv_err e = KV_ERR_INIT;
    assert_int_equal(kv_buf_append(&out, docs, strlen(docs), &e), 0);
    for (size_t i = 0; i < sizeof terms / sizeof *terms; i++) {
        char *j = NULL;
        size_t n;
        int rc = kvfts_term_get(&j, &n, db, S(terms[i][0]), S(terms[i][1]),
                                0);
        assert_int_equal(kv_buf_append(&out, rc ? "none" : j,
                                       rc ? 4 : n, &e), 0);
        kvfts_free(j);
    }
    for (size_t i = 0; i < sizeof queries / sizeof *queries; i++) {
        kvfts_search_options o = KVFTS_SEARCH_OPTIONS_INIT;
        o.count_only = true;
        kvfts_results *r;
        assert_int_equal(kvfts_search(&r, db, S(queries[i]), &o), 0);
        char t[48];
        snprintf(t, sizeof t, " %s=%llu", queries[i],
                 (unsigned long long)kvfts_results_total(r));
        kvfts_results_free(r);
        assert_int_equal(kv_buf_append(&out, t, strlen(t) + 1, &e), 0);
    }
    return out.data;
}

/* A merge copies the blocks nothing in its run changes as they are
 * (idx_merge.c, copy_block): it answers as a merge of every posting does
 * (the hook idx_test_merge_copy(false)), `check` finds nothing, and it
 * keeps the inputs' last, short blocks, so it has more blocks than a merge
 * that re-blocks the postings.  First three segments of consecutive
 * batches; then two more batches and one that replaces and deletes
 * documents of the first, so that blocks holding them must be merged
 * posting by posting while the others are copied. */
static void test_merge_copies_blocks(void **state)
{
    (void)state;
    kvfts_db *db[2];
    char *dir[2];
    kvfts_stats st[2];
    char *ans[2];
    for (int d = 0; d < 2; d++) {
        dir[d] = tu_tmpdir();
        assert_non_null(dir[d]);
        kvfts_open_options o = KVFTS_OPEN_OPTIONS_INIT;
        o.create = true;
        assert_int_equal(kvfts_open(&db[d], dir[d], &o), 0);
    }
    for (int round = 0; round < 2; round++) {
        for (int d = 0; d < 2; d++) {
            for (int s = 0; s < 3; s++)
                merge_batch(db[d], round * 3 + s, false);
            if (round)
                merge_batch(db[d], 0, true);
            assert_int_equal(kvfts_get_stats(&st[d], db[d]), 0);
            assert_true(st[d].segments >= 3);
            idx_test_merge_copy(d == 0);
            assert_int_equal(kvfts_optimize(db[d], NULL, NULL), 0);
            idx_test_merge_copy(true);
            assert_int_equal(kvfts_get_stats(&st[d], db[d]), 0);
            assert_int_equal(st[d].segments, 1);
            assert_consistent(db[d]);
            ans[d] = merge_answers(db[d]);
        }
        assert_string_equal(ans[0], ans[1]);
        assert_int_equal(st[0].postings, st[1].postings);
        assert_int_equal(st[0].documents, st[1].documents);
        if (st[0].blocks <= st[1].blocks)
            fail_msg("round %d: %llu blocks copying, %llu re-blocking: no "
                     "block was copied", round,
                     (unsigned long long)st[0].blocks,
                     (unsigned long long)st[1].blocks);
        free(ans[0]);
        free(ans[1]);
    }
    /* beta is only in the replaced documents: their new postings count */
    char *j = NULL;
    size_t n;
    assert_int_equal(kvfts_term_get(&j, &n, db[0], S("_all"), S("beta"), 1),
                     0);
    int want = 0;
    for (int i = 0; i < 1100; i++)
        want += i % 37 == 0;
    char head[32];
    snprintf(head, sizeof head, "{\"count\":%d,", want);
    assert_true(strncmp(j, head, strlen(head)) == 0);
    kvfts_free(j);
    for (int d = 0; d < 2; d++) {
        kvfts_close(db[d]);
        tu_rmtree(dir[d]);
        free(dir[d]);
    }
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_roundtrip),
        cmocka_unit_test(test_svb_decoder),
        cmocka_unit_test(test_svb_encoder),
        cmocka_unit_test(test_bytes_eq),
        cmocka_unit_test(test_idset),
        cmocka_unit_test(test_strtab_sorted),
        cmocka_unit_test(test_block_corruption),
        cmocka_unit_test(test_block_phrase),
        cmocka_unit_test(test_entry_codec),
        cmocka_unit_test(test_entry_small),
        cmocka_unit_test(test_chunk_codec),
        cmocka_unit_test(test_segs_codec),
        cmocka_unit_test(test_lens_codec),
        T(test_seed_example),
        T(test_lens_reader),
        T(test_block_cache_admission),
        T(test_corrupt_records),
        cmocka_unit_test(test_rebuild_equivalence),
        cmocka_unit_test(test_merge_copies_blocks),
    };
    const char *only = getenv("KVFTS_TEST_ONLY");   /* e.g. "test_model*" */
    if (only && *only)
        cmocka_set_test_filter(only);
    return cmocka_run_group_tests_name("unit.index", tests, NULL, NULL);
}
