/*
 * fuzz_postings.c -- fuzz target for the decoders of the stored index
 * (index/idx_codec.c): arbitrary bytes as a record read from postings.db,
 * terms.db, doclens.db or meta.db.  Bytes read from disk are
 * untrusted, so every decoder must refuse damage with KVFTS_ECORRUPT and
 * never read or write out of bounds, whatever the bytes.
 *
 * Input layout: be32 first doc id (what a block record's key holds) | u8
 * size of the term's column table (what its entry holds) | the record.
 * Shorter inputs: id 1, 3 columns, and all bytes are the record.  The
 * committed corpus holds real records written by idx_codec.c's encoders
 * (tests/fuzz/gen_postings.c) in that layout.
 *
 * Per input, the record is decoded as each kind of record:
 *   1. A postings block, in stages as a reader decodes it (ids, then views
 *      and tfs, then positions) and at once into a second block: the same
 *      outcome.  A decoded block holds what idx_codec.c promises (ids
 *      ascending from the key's, views on ascending columns inside the
 *      table, tf >= 1, max_tf and the column mask its header's, positions
 *      ascending per view), and what idx_block_peek() reads of its header.
 *      It is decoded a third time a document at a time, as a phrase does
 *      (fuzz_bydoc): the same views and positions, no damage where the
 *      whole decode found none.  And its word is counted as a phrase
 *      with itself, 1 and 2 words apart, as a phrase's count reads a block
 *      (fuzz_phrase): the whole decode's count.
 *      It is encoded again, whole and in two halves as the segment writer
 *      cuts a list, and decoded into the first block, reused: every id,
 *      view, tf and position must come back.
 *   2. A term entry: one that decodes obeys the entry's invariants,
 *      encodes and decodes to the same, gives ascending deletions, and its
 *      inline block is decoded as in 1 with the entry's first id and
 *      column table.
 *   3. A dictionary chunk: walked to its end, every entry's body decoded
 *      as in 2.
 *   4. A segment list: one that decodes has distinct non-zero ids, levels
 *      up to 64 and id ranges in order, and survives encode/decode.
 *   5. A lengths record (decode and find agree), a field record (encode/
 *      decode), and a walk of varints.
 *
 * A broken invariant aborts; everything is freed before returning, so
 * LeakSanitizer reports any leak.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "idx_int.h"
#include "kv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c) do { if (!(c)) abort(); } while (0)

/* The invariants of a block decoded up to positions. */
static void check_block(const idx_block *b, uint32_t first, uint32_t ncols)
{
    const idx_plist *l = &b->l;
    CHECK(l->n >= 1 && l->n <= IDX_BLOCK_MAX);
    CHECK(l->ids[0] == first);
    CHECK(l->vstart[0] == 0 && l->vstart[l->n] == l->nv);
    uint32_t mtf = 0;
    uint64_t mask = 0;
    for (uint32_t i = 0; i < l->n; i++) {
        CHECK(i == 0 || l->ids[i] > l->ids[i - 1]);
        CHECK(l->vstart[i + 1] > l->vstart[i]);
        uint64_t sum = 0;
        for (uint32_t v = l->vstart[i]; v < l->vstart[i + 1]; v++) {
            CHECK(l->vcol[v] < ncols);
            CHECK(v == l->vstart[i] || l->vcol[v] > l->vcol[v - 1]);
            CHECK(l->vtf[v] >= 1);
            sum += l->vtf[v];
            mask |= 1ull << (l->vcol[v] < 63 ? l->vcol[v] : 63);
            if (!l->positions)
                continue;
            CHECK(l->poff[v + 1] - l->poff[v] == l->vtf[v]);
            for (uint32_t j = l->poff[v] + 1; j < l->poff[v + 1]; j++)
                CHECK(l->pos[j] > l->pos[j - 1]);
        }
        if (sum > mtf)
            mtf = (uint32_t)sum;
    }
    CHECK(mtf == b->max_tf && mask == b->colmask);
    CHECK(!b->oneview || l->nv == l->n);
    if (l->positions)
        CHECK(l->poff[0] == 0 && l->poff[l->nv] == l->np);
}

/* Documents [from, to) of a must equal documents [0, to - from) of b. */
static void check_same(const idx_plist *a, uint32_t from, uint32_t to,
                       const idx_plist *b)
{
    CHECK(b->n == to - from && b->positions == a->positions);
    for (uint32_t i = from; i < to; i++) {
        uint32_t k = i - from, va = a->vstart[i], vb = b->vstart[k];
        uint32_t nv = a->vstart[i + 1] - va;
        CHECK(a->ids[i] == b->ids[k] && b->vstart[k + 1] - vb == nv);
        for (uint32_t j = 0; j < nv; j++) {
            CHECK(a->vcol[va + j] == b->vcol[vb + j]);
            CHECK(a->vtf[va + j] == b->vtf[vb + j]);
            if (a->positions)
                CHECK(memcmp(a->pos + a->poff[va + j],
                             b->pos + b->poff[vb + j],
                             (size_t)a->vtf[va + j] * 4) == 0);
        }
    }
}

/* Encode [from, to) of @p src and decode it into @p dst (reused). */
static void round_trip(const idx_plist *src, uint32_t from, uint32_t to,
                       uint32_t ncols, idx_block *dst, kv_buf *enc,
                       kv_buf *scratch)
{
    kv_err err = KV_ERR_INIT;
    kv_buf_reset(enc);
    if (idx_block_encode(src, from, to, enc, scratch, &err) != KVFTS_OK)
        return;   /* out of memory only */
    int rc = idx_block_decode(dst, src->ids[from], enc->data, enc->len,
                              ncols, IDX_DEC_POS, &err);
    if (rc == KVFTS_ENOMEM)
        return;
    CHECK(rc == KVFTS_OK);
    check_block(dst, src->ids[from], ncols);
    check_same(src, from, to, &dst->l);
}

/* A phrase's decode, a document at a time (every third, ascending: by
 * document for the first ones, then the whole block): never out of
 * bounds; on a block that decodes whole, no damage reported and every
 * document asked for holds what the whole decode gives (whole NULL: the
 * whole decode refused the block, which this one may not notice). */
static void fuzz_bydoc(uint32_t first, uint32_t ncols, const char *rec,
                       size_t len, const idx_block *whole)
{
    kv_err err = KV_ERR_INIT;
    idx_block b;
    idx_block_init(&b);
    int rc = idx_block_decode(&b, first, rec, len, ncols, IDX_DEC_IDS, &err);
    for (uint32_t i = 0; rc == KVFTS_OK && i < b.l.n; i += 3) {
        rc = idx_block_need_doc(&b, i, &err);
        if (rc != KVFTS_OK || !whole || !b.l.positions)
            continue;
        CHECK(idx_block_has_views(&b, i) && idx_block_has_positions(&b, i));
        const idx_plist *x = &b.l, *w = &whole->l;
        CHECK(x->vstart[i + 1] - x->vstart[i] ==
              w->vstart[i + 1] - w->vstart[i]);
        for (uint32_t k = 0; k < x->vstart[i + 1] - x->vstart[i]; k++) {
            uint32_t v = x->vstart[i] + k, u = w->vstart[i] + k;
            CHECK(x->vcol[v] == w->vcol[u] && x->vtf[v] == w->vtf[u]);
            CHECK(memcmp(x->pos + x->poff[v], w->pos + w->poff[u],
                         (size_t)w->vtf[u] * 4) == 0);
        }
    }
    CHECK(rc == KVFTS_OK || rc == KVFTS_ECORRUPT || rc == KVFTS_ENOMEM);
    if (whole)
        CHECK(rc != KVFTS_ECORRUPT);
    idx_block_free(&b);
}

/* Documents of a block decoded whole with positions p and p + d in one
 * view: what the phrase of its word said twice, d words apart, matches. */
static uint64_t phrase_ref(const idx_plist *l, uint32_t d)
{
    uint64_t count = 0;
    for (uint32_t i = 0; i < l->n; i++) {
        bool hit = false;
        for (uint32_t v = l->vstart[i]; v < l->vstart[i + 1]; v++)
            for (uint32_t x = l->poff[v]; x < l->poff[v + 1]; x++)
                for (uint32_t y = x + 1; y < l->poff[v + 1]; y++)
                    hit |= (uint64_t)l->pos[x] + d == l->pos[y];
        count += hit;
    }
    return count;
}

/* That phrase counted as a phrase's count reads a block (its ids, then its
 * views and gaps, idx_blocks_common and idx_blocks_phrase): the whole
 * decode's answer where that found no damage; else a refusal or a count,
 * never a read out of bounds. */
static void fuzz_phrase(uint32_t first, uint32_t ncols, const char *rec,
                        size_t len, const idx_block *whole)
{
    kv_err err = KV_ERR_INIT;
    static uint32_t fid[256];      /* column c: field c, selected */
    idx_block b;
    idx_block_init(&b);
    for (uint32_t c = 0; c < 256; c++)
        fid[c] = c + 1;
    int rc = idx_block_decode(&b, first, rec, len, ncols, IDX_DEC_IDS, &err);
    if (rc == KVFTS_OK && b.l.positions)
        rc = idx_block_need_gaps(&b, &err);
    if (rc == KVFTS_OK && b.l.positions) {
        uint32_t m = b.l.n;
        uint32_t *cand = malloc((size_t)m * 4), *idx = malloc((size_t)m * 4);
        uint32_t *keep = malloc((size_t)m * 4);
        uint16_t *map = malloc(IDX_PHRASE_MAP * sizeof *map);
        for (uint32_t d = 1; cand && idx && keep && map && d <= 2; d++) {
            idx_phrase_term t[2] = {
                { .b = &b, .fid = fid, .off = 0, .idx = idx },
                { .b = &b, .fid = fid, .off = d, .idx = idx,
                  .dup = true },
            };
            uint64_t count = 0;
            memcpy(cand, b.l.ids, (size_t)m * 4);
            CHECK(idx_blocks_common(t, 2, cand, m, keep, map) == m);
            rc = idx_blocks_phrase(t, 2, m, NULL, &count, &err);
            CHECK(rc == KVFTS_OK || rc == KVFTS_ECORRUPT);
            if (whole) {
                CHECK(rc == KVFTS_OK);
                CHECK(count == phrase_ref(&whole->l, d));
            }
            if (d == 1 && b.gaps && b.decoded < IDX_DEC_POS) {
                /* counted for the block at once (blocks_self1): the same,
                 * or damage it saw where the walk did not look */
                uint32_t *scr = malloc(((size_t)b.l.poff[b.l.nv] + b.l.nv +
                                        2) * 4);
                uint64_t count2 = 0;
                kv_err err2 = KV_ERR_INIT;
                t[0].scr = scr;
                int rc2 = scr ? idx_blocks_phrase(t, 2, m, NULL, &count2,
                                                  &err2)
                              : rc;
                CHECK(rc2 == KVFTS_OK || rc2 == KVFTS_ECORRUPT);
                CHECK(rc2 != KVFTS_OK || rc != KVFTS_OK || count2 == count);
                if (whole)
                    CHECK(rc2 == KVFTS_OK && count2 == count);
                free(scr);
            }
        }
        free(cand);
        free(idx);
        free(keep);
        free(map);
    }
    CHECK(rc == KVFTS_OK || rc == KVFTS_ECORRUPT || rc == KVFTS_ENOMEM);
    if (whole)
        CHECK(rc != KVFTS_ECORRUPT);
    idx_block_free(&b);
}

static void fuzz_block(uint32_t first, uint32_t ncols, const char *rec,
                       size_t len)
{
    kv_err err = KV_ERR_INIT;
    idx_block staged, whole;
    kv_buf enc = KV_BUF_INIT, scratch = KV_BUF_INIT;
    idx_block_init(&staged);
    idx_block_init(&whole);

    int rc = idx_block_decode(&staged, first, rec, len, ncols, IDX_DEC_IDS,
                              &err);
    if (rc == KVFTS_OK) {
        CHECK(staged.l.n >= 1 && staged.l.ids[0] == first);
        for (uint32_t i = 1; i < staged.l.n; i++)
            CHECK(staged.l.ids[i] > staged.l.ids[i - 1]);
        uint32_t span, mtf;
        uint64_t mask;
        CHECK(idx_block_peek(rec, len, &span, &mtf, &mask));
        CHECK(span == staged.l.ids[staged.l.n - 1] - first);
        CHECK(mtf == staged.max_tf && mask == staged.colmask);
        rc = idx_block_need(&staged, IDX_DEC_VIEWS, &err);
        if (rc == KVFTS_OK)
            rc = idx_block_need(&staged, IDX_DEC_POS, &err);
    }
    CHECK(rc == KVFTS_OK || rc == KVFTS_ECORRUPT || rc == KVFTS_ENOMEM);
    if (rc)
        CHECK(err.code == rc && err.msg[0] != '\0');

    int rc2 = idx_block_decode(&whole, first, rec, len, ncols, IDX_DEC_POS,
                               &err);
    if (rc != KVFTS_ENOMEM && rc2 != KVFTS_ENOMEM)
        CHECK(rc2 == rc);
    if (rc == KVFTS_OK && rc2 == KVFTS_OK) {
        check_block(&staged, first, ncols);
        check_block(&whole, first, ncols);
        check_same(&staged.l, 0, staged.l.n, &whole.l);
        round_trip(&whole.l, 0, whole.l.n, ncols, &staged, &enc, &scratch);
        if (whole.l.n >= 2) {
            uint32_t mid = whole.l.n / 2;
            round_trip(&whole.l, 0, mid, ncols, &staged, &enc, &scratch);
            round_trip(&whole.l, mid, whole.l.n, ncols, &staged, &enc,
                       &scratch);
        }
    }
    if (rc2 != KVFTS_ENOMEM) {
        fuzz_bydoc(first, ncols, rec, len, rc2 == KVFTS_OK ? &whole : NULL);
        fuzz_phrase(first, ncols, rec, len, rc2 == KVFTS_OK ? &whole : NULL);
    }
    kv_buf_free(&enc);
    kv_buf_free(&scratch);
    idx_block_free(&staged);
    idx_block_free(&whole);
}

/* An entry's fields, compared after a round trip. */
static void check_same_entry(const idx_entry *a, const idx_entry *b)
{
    CHECK(a->flags == b->flags && a->ncols == b->ncols);
    CHECK(memcmp(a->cols, b->cols, (size_t)a->ncols * 4) == 0);
    CHECK(memcmp(a->df, b->df, (size_t)a->ncols * 8) == 0);
    CHECK(memcmp(a->ndelc, b->ndelc, (size_t)a->ncols * 8) == 0);
    CHECK(a->df_all == b->df_all && a->ndocs == b->ndocs);
    CHECK(a->ndel == b->ndel && a->ndel_all == b->ndel_all);
    CHECK(a->dels_len == b->dels_len &&
          (a->dels_len == 0 || memcmp(a->dels, b->dels, a->dels_len) == 0));
    CHECK(a->first == b->first && a->last == b->last);
    CHECK(a->max_tf == b->max_tf && a->nblocks == b->nblocks);
    CHECK(a->blk_len == b->blk_len &&
          (a->blk_len == 0 || memcmp(a->blk, b->blk, a->blk_len) == 0));
}

static void fuzz_entry(idx_entry *e, const char *rec, size_t len)
{
    kv_err err = KV_ERR_INIT;
    int rc = idx_entry_decode(e, rec, len, &err);
    CHECK(rc == KVFTS_OK || rc == KVFTS_ECORRUPT || rc == KVFTS_ENOMEM);
    if (rc)
        return;
    CHECK(e->ncols >= 1);
    for (uint32_t i = 0; i < e->ncols; i++) {
        CHECK(i == 0 || e->cols[i] > e->cols[i - 1]);
        CHECK(e->df[i] <= e->ndocs && e->ndelc[i] <= e->ndel);
        CHECK(idx_entry_col(e, e->cols[i]) == (long)i);
    }
    CHECK(e->df_all <= e->ndocs && e->ndel_all <= e->ndel);
    CHECK(e->ndocs > 0 || e->ndel > 0);
    CHECK(!(e->flags & IDX_E_ONECOL) || e->ncols == 1);
    uint32_t *ids = NULL, cap = 0;
    rc = idx_entry_dels(e, &ids, &cap, &err);
    CHECK(rc == KVFTS_OK || rc == KVFTS_ENOMEM);
    for (uint64_t k = 1; !rc && k < e->ndel; k++)
        CHECK(ids[k] > ids[k - 1]);
    kv_free(ids);
    if (e->ndocs) {
        CHECK(e->first >= 1 && e->last >= e->first && e->max_tf >= 1);
        CHECK((uint64_t)e->last - e->first + 1 >= e->ndocs);
        if (e->flags & IDX_E_EXTERNAL) {
            CHECK(e->nblocks >= 1 && e->nblocks <= e->ndocs);
            CHECK(e->blk == NULL);
        } else {
            CHECK(e->ndocs <= IDX_BLOCK_MAX);
            if (e->nsmall) {
                /* a compact entry: its block is made by the decode */
                CHECK(e->nsmall == e->ndocs && e->nsmall <= IDX_SMALL_DOCS);
                CHECK(e->blk == (const char *)e->sblk &&
                      e->blk_len <= IDX_SMALL_BLK);
                for (uint32_t k = 1; k < e->nsmall; k++)
                    CHECK(e->sids[k] > e->sids[k - 1]);
                CHECK(e->sids[0] == e->first &&
                      e->sids[e->nsmall - 1] == e->last);
            } else {
                CHECK(e->blk >= rec && e->blk + e->blk_len == rec + len);
            }
        }
    }
    /* Decoded lazily, the same entry once its block is made. */
    idx_entry lazy;
    idx_entry_init(&lazy);
    rc = idx_entry_decode_lazy(&lazy, rec, len, &err);
    CHECK(rc == KVFTS_OK || rc == KVFTS_ENOMEM);
    if (!rc) {
        CHECK(lazy.nsmall == e->nsmall);
        idx_entry_block(&lazy);
        check_same_entry(e, &lazy);
    }
    idx_entry_free(&lazy);
    /* The same after encode and decode. */
    kv_buf enc = KV_BUF_INIT;
    idx_entry again;
    idx_entry_init(&again);
    if (idx_entry_encode(e, &enc, &err) == KVFTS_OK) {
        rc = idx_entry_decode(&again, enc.data, enc.len, &err);
        CHECK(rc == KVFTS_OK || rc == KVFTS_ENOMEM);
        if (!rc)
            check_same_entry(e, &again);
    }
    idx_entry_free(&again);
    kv_buf_free(&enc);
    /* Its inline block, as a reader decodes it. */
    if (e->ndocs && !(e->flags & IDX_E_EXTERNAL))
        fuzz_block(e->first, e->ncols, e->blk, e->blk_len);
}

static void fuzz_chunk(const char *rec, size_t len)
{
    kv_err err = KV_ERR_INIT;
    idx_chunk_it it;
    idx_entry e;
    idx_chunk_it_init(&it);
    idx_entry_init(&e);
    int rc = idx_chunk_open(&it, rec, len, &err);
    uint32_t prev_ord = 0, n = 0;
    while (rc == KVFTS_OK) {
        rc = idx_chunk_next(&it, &err);
        if (rc != KVFTS_OK)
            break;
        CHECK(it.term.len >= 1);
        CHECK(it.body >= rec && it.body + it.body_len <= rec + len);
        CHECK(n == 0 || it.ord == prev_ord + 1);
        prev_ord = it.ord;
        n++;
        fuzz_entry(&e, it.body, it.body_len);
    }
    CHECK(rc == KVFTS_ITEROVER || rc == KVFTS_ECORRUPT ||
          rc == KVFTS_ENOMEM);
    if (rc == KVFTS_ITEROVER)   /* and stays over */
        CHECK(idx_chunk_next(&it, &err) == KVFTS_ITEROVER);
    idx_entry_free(&e);
    idx_chunk_it_free(&it);
}

static void fuzz_segs(const char *rec, size_t len)
{
    kv_err err = KV_ERR_INIT;
    idx_segs s, t;
    memset(&s, 0, sizeof s);
    memset(&t, 0, sizeof t);
    int rc = idx_segs_decode(&s, rec, len, &err);
    CHECK(rc == KVFTS_OK || rc == KVFTS_ECORRUPT || rc == KVFTS_ENOMEM);
    if (rc) {
        CHECK(s.n == 0 || rc == KVFTS_ENOMEM);
    } else {
        for (uint32_t i = 0; i < s.n; i++) {
            CHECK(s.v[i].id != 0 && s.v[i].level <= 64);
            CHECK(s.v[i].max_id >= s.v[i].min_id);
            for (uint32_t j = 0; j < i; j++)
                CHECK(s.v[j].id != s.v[i].id);
        }
        kv_buf enc = KV_BUF_INIT;
        if (idx_segs_encode(&s, &enc, &err) == KVFTS_OK &&
            idx_segs_decode(&t, enc.data, enc.len, &err) == KVFTS_OK) {
            CHECK(t.n == s.n);
            for (uint32_t i = 0; i < s.n; i++) {
                const idx_seg *a = &s.v[i], *b = &t.v[i];
                CHECK(a->id == b->id && a->level == b->level &&
                      a->docs == b->docs && a->dels == b->dels &&
                      a->terms == b->terms && a->bytes == b->bytes &&
                      a->min_id == b->min_id && a->max_id == b->max_id);
            }
        }
        kv_buf_free(&enc);
    }
    idx_segs_free(&s);
    idx_segs_free(&t);
}

static void fuzz_records(uint32_t first, const char *rec, size_t len)
{
    kv_err err = KV_ERR_INIT;
    /* A span record: every document read is checked (ids ascending, in the
     * span; a field's length the first of its pairs), and what reads whole
     * is encoded again and reads the same. */
    uint32_t base = idx_lens_base(first), fid = first & 0xff;
    idx_len *pairs = NULL, *all = NULL;
    idx_doclen *docs = NULL;
    uint32_t n = 0, cap = 0, acap = 0, dcap = 0, na = 0, nd = 0;
    idx_lens_it it;
    bool more = true, whole = false;
    int rc = idx_lens_open(&it, rec, len, base, &err);
    CHECK(rc == KVFTS_OK || rc == KVFTS_ECORRUPT);
    uint32_t last = 0;
    while (!rc && more && !(rc = idx_lens_next(&it, &more, &err)) && more) {
        CHECK(it.docid >= base && it.docid - base < IDX_LENS_SPAN);
        CHECK(nd == 0 || it.docid > last);
        last = it.docid;
        rc = idx_lens_pairs(&it, &pairs, &n, &cap, &err);
        if (rc)
            break;
        uint32_t want = 0;
        for (uint32_t i = 0; i < n; i++)
            if (pairs[i].field_id == fid) {
                want = pairs[i].len;
                break;
            }
        CHECK(idx_lens_field(it.ids, it.lens, it.n, fid) == want);
        if (idx__grow(&docs, &dcap, (uint64_t)nd + 1, sizeof *docs,
                      &err) ||
            idx__grow(&all, &acap, (uint64_t)na + n + 1, sizeof *all, &err))
            break;
        docs[nd++] = (idx_doclen){ it.docid, na, n };
        memcpy(all + na, pairs, n * sizeof *pairs);
        na += n;
        whole = true;
    }
    CHECK(rc == KVFTS_OK || rc == KVFTS_ECORRUPT || rc == KVFTS_ENOMEM);
    kv_buf enc = KV_BUF_INIT;
    if (!rc && whole &&
        idx_lens_encode(base, docs, nd, all, &enc, &err) == KVFTS_OK) {
        CHECK(idx_lens_open(&it, enc.data, enc.len, base, &err) == KVFTS_OK);
        for (uint32_t d = 0; d < nd; d++) {
            CHECK(idx_lens_next(&it, &more, &err) == KVFTS_OK && more &&
                  it.docid == docs[d].docid);
            CHECK(idx_lens_pairs(&it, &pairs, &n, &cap, &err) == KVFTS_OK &&
                  n == docs[d].n);
            CHECK(memcmp(pairs, all + docs[d].off, n * sizeof *pairs) == 0);
        }
        CHECK(idx_lens_next(&it, &more, &err) == KVFTS_OK && !more);
    }
    kv_free(pairs);
    kv_free(all);
    kv_free(docs);

    idx_field f, g;
    rc = idx_field_decode(rec, len, &f, &err);
    CHECK(rc == KVFTS_OK || rc == KVFTS_ECORRUPT);
    if (rc == KVFTS_OK) {
        CHECK(f.id >= 1 && f.id <= (UINT32_MAX >> 2));
        if (idx_field_encode(&f, &enc, &err) == KVFTS_OK) {
            CHECK(idx_field_decode(enc.data, enc.len, &g, &err) == KVFTS_OK);
            CHECK(g.id == f.id && g.docs == f.docs &&
                  g.total_len == f.total_len);
        }
    }
    kv_buf_free(&enc);

    const unsigned char *p = (const unsigned char *)rec, *end = p + len;
    uint64_t v;
    while (idx_varint_get(&p, end, &v))
        CHECK(p <= end);
    CHECK(p <= end);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint32_t first = 1, ncols = 3;
    const char *rec = (const char *)data;
    size_t len = size;
    if (size >= 5) {
        first = kv_get_be32(data);
        ncols = data[4];
        rec += 5;
        len -= 5;
    }
    fuzz_block(first, ncols, rec, len);
    idx_entry e;
    idx_entry_init(&e);
    fuzz_entry(&e, rec, len);
    idx_entry_free(&e);
    fuzz_chunk(rec, len);
    fuzz_segs(rec, len);
    fuzz_records(first, rec, len);
    return 0;
}
