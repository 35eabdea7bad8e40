/*
 * fuzz_postings.c -- fuzz target for the decoders of the stored index
 * (index/idx_block.c): arbitrary bytes as a record read from postings.db,
 * doclens.db or meta.db.  STYLE.md §4: bytes read from disk are untrusted,
 * so every decoder must refuse damage with KVFTS_ECORRUPT and never read or
 * write out of bounds, whatever the bytes.
 *
 * Input layout: the first four bytes are the block's first doc id, big-
 * endian, as the record's key holds it (shorter inputs: id 1 and all bytes
 * are the record); the rest is the record.  The committed corpus holds real
 * blocks written by idx_block_encode() in that layout.
 *
 * Per input:
 *   1. The record is decoded as a postings block in stages, as a reader
 *      does (ids, then term frequencies, then positions), and again in one
 *      call up to positions into a second block; the outcome must be the
 *      same.  A decoded block must hold what idx_block.c promises: ids
 *      strictly ascending from the key's id, tf >= 1 with max_tf the
 *      largest, positions ascending within a document and poff the running
 *      sum of the tfs.
 *   2. A fully decoded block is encoded again (whole, and split in two as
 *      the writer splits blocks) and decoded into the first block, reused:
 *      the round trip must reproduce every id, tf and position.
 *   3. The record is also decoded as a term header (and a header that
 *      decodes must survive encode/decode unchanged), a document-lengths
 *      record and a field record, and walked as varints.
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
static void check_block(const idx_block *b, uint32_t first)
{
    CHECK(b->n >= 1 && b->n <= IDX_BLOCK_MAX);
    CHECK(b->ids[0] == first);
    uint32_t mtf = 0;
    uint64_t npos = 0;
    for (uint32_t i = 0; i < b->n; i++) {
        CHECK(i == 0 || b->ids[i] > b->ids[i - 1]);
        CHECK(b->tfs[i] >= 1);
        if (b->tfs[i] > mtf)
            mtf = b->tfs[i];
        npos += b->tfs[i];
    }
    CHECK(mtf == b->max_tf);
    if (!b->positions)
        return;
    CHECK(b->npos == npos && b->poff[0] == 0);
    for (uint32_t i = 0; i < b->n; i++) {
        CHECK(b->poff[i + 1] == b->poff[i] + b->tfs[i]);
        for (uint32_t j = b->poff[i] + 1; j < b->poff[i + 1]; j++)
            CHECK(b->pos[j] > b->pos[j - 1]);
    }
}

/* Documents [from, to) of a must equal documents [0, to - from) of b. */
static void check_same(const idx_block *a, uint32_t from, uint32_t to,
                       const idx_block *b)
{
    CHECK(b->n == to - from && b->positions == a->positions);
    for (uint32_t i = from; i < to; i++) {
        uint32_t k = i - from;
        CHECK(a->ids[i] == b->ids[k] && a->tfs[i] == b->tfs[k]);
        if (a->positions)
            CHECK(memcmp(a->pos + a->poff[i], b->pos + b->poff[k],
                         (size_t)a->tfs[i] * 4) == 0);
    }
}

/* Encode [from, to) of @p src and decode it into @p dst (reused). */
static void round_trip(const idx_block *src, uint32_t from, uint32_t to,
                       idx_block *dst, kv_buf *enc)
{
    kv_err err = KV_ERR_INIT;
    if (idx_block_encode(src, from, to, enc, &err) != KVFTS_OK)
        return;   /* out of memory only */
    int rc = idx_block_decode(dst, src->ids[from], enc->data, enc->len,
                              IDX_DECODE_POSITIONS, &err);
    if (rc == KVFTS_ENOMEM)
        return;
    CHECK(rc == KVFTS_OK);
    check_block(dst, src->ids[from]);
    check_same(src, from, to, dst);
}

static void fuzz_block(uint32_t first, const char *rec, size_t len)
{
    kv_err err = KV_ERR_INIT;
    idx_block staged, whole;
    kv_buf enc = KV_BUF_INIT;
    idx_block_init(&staged);
    idx_block_init(&whole);

    int rc = idx_block_decode(&staged, first, rec, len, IDX_DECODE_IDS, &err);
    if (rc == KVFTS_OK) {
        CHECK(staged.n >= 1 && staged.ids[0] == first);
        for (uint32_t i = 1; i < staged.n; i++)
            CHECK(staged.ids[i] > staged.ids[i - 1]);
        rc = idx_block_need(&staged, IDX_DECODE_TFS, &err);
        if (rc == KVFTS_OK)
            rc = idx_block_need(&staged, IDX_DECODE_POSITIONS, &err);
    }
    CHECK(rc == KVFTS_OK || rc == KVFTS_ECORRUPT || rc == KVFTS_ENOMEM);
    if (rc)
        CHECK(err.code == rc && err.msg[0] != '\0');

    int rc2 = idx_block_decode(&whole, first, rec, len, IDX_DECODE_POSITIONS,
                               &err);
    if (rc != KVFTS_ENOMEM && rc2 != KVFTS_ENOMEM)
        CHECK(rc2 == rc);
    if (rc == KVFTS_OK && rc2 == KVFTS_OK) {
        check_block(&whole, first);
        check_same(&staged, 0, staged.n, &whole);
        round_trip(&whole, 0, whole.n, &staged, &enc);
        if (whole.n >= 2) {
            uint32_t mid = whole.n / 2;
            round_trip(&whole, 0, mid, &staged, &enc);
            round_trip(&whole, mid, whole.n, &staged, &enc);
        }
    }
    kv_buf_free(&enc);
    idx_block_free(&staged);
    idx_block_free(&whole);
}

static void fuzz_records(uint32_t first, const char *rec, size_t len)
{
    kv_err err = KV_ERR_INIT;
    idx_header h, h2;
    int rc = idx_header_decode(rec, len, &h, &err);
    CHECK(rc == KVFTS_OK || rc == KVFTS_ECORRUPT);
    if (rc == KVFTS_OK) {
        CHECK(h.df >= 1 && h.cf >= h.df && h.blocks >= 1);
        CHECK(h.lastblk >= 1 && h.lastblk <= h.last);
        kv_buf enc = KV_BUF_INIT;
        if (idx_header_encode(&h, &enc, &err) == KVFTS_OK) {
            CHECK(idx_header_decode(enc.data, enc.len, &h2, &err) == KVFTS_OK);
            CHECK(h2.df == h.df && h2.cf == h.cf && h2.blocks == h.blocks &&
                  h2.last == h.last && h2.lastblk == h.lastblk &&
                  h2.positions == h.positions);
        }
        kv_buf_free(&enc);
    }

    uint32_t flen = 0;
    rc = idx_lens_find(rec, len, first, &flen, &err);
    CHECK(rc == KVFTS_OK || rc == KVFTS_ECORRUPT);

    idx_field f;
    rc = idx_field_decode(rec, len, &f, &err);
    CHECK(rc == KVFTS_OK || rc == KVFTS_ECORRUPT);
    if (rc == KVFTS_OK)
        CHECK(f.id >= 1);

    const unsigned char *p = (const unsigned char *)rec, *end = p + len;
    uint64_t v;
    while (idx_varint_get(&p, end, &v))
        CHECK(p <= end);
    CHECK(p <= end);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint32_t first = 1;
    const char *rec = (const char *)data;
    size_t len = size;
    if (size >= 4) {
        first = kv_get_be32(data);
        rec += 4;
        len -= 4;
    }
    fuzz_block(first, rec, len);
    fuzz_records(first, rec, len);
    return 0;
}
