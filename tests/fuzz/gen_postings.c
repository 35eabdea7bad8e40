/*
 * gen_postings.c -- writes the seed corpus of fuzz_postings: real records
 * made by index/idx_codec.c's encoders, each prefixed as the fuzz target
 * reads its input: the four-byte big-endian first doc id of a block and
 * the one-byte size of the term's column table.
 *
 *   fuzz_gen_postings DIR
 *
 * Blocks cover the shapes the segment writer produces and the edges of the
 * format: one document, two, a full block of IDX_BLOCK_DOCS, with and
 * without positions, one view of column 0 per document (no view streams),
 * several views on a table of 5 and of 70 columns (column indexes past 63
 * share the column mask's last bit), tf 1 everywhere (the 2-bit case of
 * the tf stream) and large tfs, id gaps of every StreamVByte width,
 * positions past 2^16 and 2^24, and ids near UINT32_MAX.  Then term
 * entries (inline postings with deletions, external postings, deletions
 * only, one column), dictionary chunks of such entries, segment lists,
 * document-lengths records and a field record (the target decodes every
 * input as each of those).  The output is deterministic, so running it
 * again reproduces the committed seeds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idx_int.h"
#include "kv.h"

static const char *outdir;

static int write_seed(const char *name, uint32_t first, uint32_t ncols,
                      const kv_buf *rec)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", outdir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return -1;
    }
    unsigned char head[5];
    kv_put_be32(head, first);
    head[4] = (unsigned char)(ncols > 255 ? 255 : ncols);
    int bad = fwrite(head, 1, 5, f) != 5 ||
              (rec->len && fwrite(rec->data, 1, rec->len, f) != rec->len);
    if (fclose(f) || bad) {
        perror(path);
        return -1;
    }
    return 0;
}

/* Deterministic pseudo-random numbers (xorshift64*). */
static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (uint32_t)((rng * 2685821657736338717ull) >> 33) % n;
}

/* A list of @p n documents from @p first, ids @p gap apart (+ noise when
 * @p noisy), 1..maxv views on a table of @p ncols (one view of column 0
 * when maxv is 1), tf up to @p maxtf, positions @p pgap apart. */
static int make_list(idx_plist *l, uint32_t n, uint32_t first, uint32_t gap,
                     bool noisy, uint32_t ncols, uint32_t maxv,
                     uint32_t maxtf, bool positions, uint32_t pgap,
                     kv_err *err)
{
    uint32_t *pos = malloc((size_t)4 * maxtf * 4 + 4);
    if (!pos)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    idx_plist_reset(l, positions);
    uint32_t id = first;
    int rc = KVFTS_OK;
    for (uint32_t i = 0; !rc && i < n; i++) {
        uint32_t cols[4], tfs[4], k = 0;
        uint32_t nv = maxv <= 1 ? 1 : 1 + rnd(maxv < ncols ? maxv : ncols);
        uint32_t c = maxv <= 1 ? 0 : rnd(ncols - nv + 1);
        for (uint32_t v = 0; v < nv; v++) {
            cols[v] = c;
            if (v + 1 < nv)
                c = c + 1 + rnd(ncols - (nv - v - 1) - c);
            tfs[v] = maxtf == 1 ? 1 : 1 + rnd(maxtf);
            if (i == 0 && v == 0)
                tfs[v] = maxtf;
            uint32_t p = rnd(8);
            for (uint32_t j = 0; j < tfs[v]; j++) {
                pos[k++] = p;
                p += 1 + rnd(pgap);
            }
        }
        rc = idx_plist_add(l, id, nv, cols, tfs, pos, err);
        id += gap + (noisy ? rnd(gap) : 0);
    }
    free(pos);
    return rc;
}

static int block_seed(const char *name, uint32_t n, uint32_t first,
                      uint32_t gap, bool noisy, uint32_t ncols, uint32_t maxv,
                      uint32_t maxtf, bool positions, uint32_t pgap)
{
    kv_err err = KV_ERR_INIT;
    idx_plist l;
    kv_buf out = KV_BUF_INIT, scratch = KV_BUF_INIT;
    idx_plist_init(&l);
    int rc = make_list(&l, n, first, gap, noisy, ncols, maxv, maxtf,
                       positions, pgap, &err);
    if (!rc)
        rc = idx_block_encode(&l, 0, n, &out, &scratch, &err);
    if (!rc)
        rc = write_seed(name, first, ncols, &out);
    if (rc)
        fprintf(stderr, "%s: %s\n", name, err.msg);
    kv_buf_free(&out);
    kv_buf_free(&scratch);
    idx_plist_free(&l);
    return rc;
}

/* A term entry over a table of ncols columns: n postings (inline when
 * external is false), ndel deletions. */
static int make_entry(kv_buf *out, uint32_t n, uint32_t ncols, bool external,
                      uint32_t ndel, kv_err *err)
{
    idx_plist l;
    idx_plist_init(&l);
    kv_buf blk = KV_BUF_INIT, scratch = KV_BUF_INIT, dels = KV_BUF_INIT;
    uint32_t cols[8];
    uint64_t df[8] = { 0 }, ndelc[8] = { 0 }, df_all = 0;
    for (uint32_t c = 0; c < ncols; c++)
        cols[c] = (3 + 2 * c) << 2 | (c % 3 + 1);
    int rc = KVFTS_OK;
    if (n)
        rc = make_list(&l, n, 10 + rnd(100), 3, true, ncols,
                       ncols > 1 ? 3 : 1, 3, true, 5, err);
    for (uint32_t i = 0; i < l.n; i++) {
        int all = 0;
        for (uint32_t v = l.vstart[i]; v < l.vstart[i + 1]; v++) {
            df[l.vcol[v]]++;
            all |= (cols[l.vcol[v]] & IDX_KIND_ALL) != 0;
        }
        df_all += all;
    }
    uint32_t mtf = 0;
    for (uint32_t i = 0; i < l.n; i++) {
        uint32_t sum = 0;
        for (uint32_t v = l.vstart[i]; v < l.vstart[i + 1]; v++)
            sum += l.vtf[v];
        if (sum > mtf)
            mtf = sum;
    }
    if (!rc && n && !external)
        rc = idx_block_encode(&l, 0, n, &blk, &scratch, err);
    uint64_t ndel_all = 0;
    for (uint32_t k = 0; !rc && k < ndel; k++) {
        uint32_t gap = 1 + rnd(k % 2 ? 5 : 5000);
        rc = idx_buf_varint(&dels, gap, err);
        ndelc[k % ncols]++;
        ndel_all += (cols[k % ncols] & IDX_KIND_ALL) != 0;
    }
    idx_entry e;
    memset(&e, 0, sizeof e);
    e.flags = IDX_E_POSITIONS | (external ? IDX_E_EXTERNAL : 0) |
              (ndel ? IDX_E_DELS : 0) | (ncols == 1 ? IDX_E_ONECOL : 0);
    e.ncols = ncols;
    e.cols = cols;
    e.df = df;
    e.ndelc = ndelc;
    e.df_all = df_all;
    e.ndocs = l.n;
    e.ndel = ndel;
    e.ndel_all = ndel_all;
    e.dels = (const unsigned char *)dels.data;
    e.dels_len = dels.len;
    if (l.n) {
        e.first = l.ids[0];
        e.last = l.ids[l.n - 1];
        e.max_tf = mtf;
        e.nblocks = external ? 1 + (l.n - 1) / IDX_BLOCK_DOCS : 0;
        e.blk = blk.data;
        e.blk_len = external ? 0 : blk.len;
    }
    if (!rc)
        rc = idx_entry_encode(&e, out, err);
    idx_plist_free(&l);
    kv_buf_free(&blk);
    kv_buf_free(&scratch);
    kv_buf_free(&dels);
    return rc;
}

static int entry_seed(const char *name, uint32_t n, uint32_t ncols,
                      bool external, uint32_t ndel)
{
    kv_err err = KV_ERR_INIT;
    kv_buf out = KV_BUF_INIT;
    int rc = make_entry(&out, n, ncols, external, ndel, &err);
    if (!rc)
        rc = write_seed(name, 1, ncols, &out);
    if (rc)
        fprintf(stderr, "%s: %s\n", name, err.msg);
    kv_buf_free(&out);
    return rc;
}

/* A dictionary chunk of n terms sharing prefixes, each with an entry. */
static int chunk_seed(const char *name, uint32_t n, uint32_t ord0,
                      bool long_terms)
{
    kv_err err = KV_ERR_INIT;
    idx_chunk_w c;
    idx_chunk_w_init(&c);
    idx_chunk_w_reset(&c, ord0);
    kv_buf ent = KV_BUF_INIT, out = KV_BUF_INIT;
    int rc = KVFTS_OK;
    char term[TOK_MAX_TERM + 16];
    for (uint32_t i = 0; !rc && i < n; i++) {
        int tl = snprintf(term, sizeof term, "%s%03u",
                          long_terms ? "a-rather-long-shared-prefix-of-"
                                       "many-terms-" : "t", i);
        kv_buf_reset(&ent);
        rc = make_entry(&ent, 1 + rnd(i % 4 ? 3 : 20), 1 + rnd(3),
                        false, i % 5 == 0 ? 2 : 0, &err);
        if (!rc)
            rc = idx_chunk_w_add(&c, term, (size_t)tl, ent.data, ent.len,
                                 &err);
    }
    if (!rc)
        rc = idx_chunk_w_finish(&c, &out, &err);
    if (!rc)
        rc = write_seed(name, 1, 3, &out);
    if (rc)
        fprintf(stderr, "%s: %s\n", name, err.msg);
    idx_chunk_w_free(&c);
    kv_buf_free(&ent);
    kv_buf_free(&out);
    return rc;
}

static int segs_seed(const char *name, uint32_t n)
{
    kv_err err = KV_ERR_INIT;
    idx_segs s;
    memset(&s, 0, sizeof s);
    kv_buf out = KV_BUF_INIT;
    int rc = KVFTS_OK;
    for (uint32_t i = 0; !rc && i < n; i++) {
        idx_seg g = { i % 2 ? 0x80000000u | (7 + i) : 7 + i, n - 1 - i,
                      1000 >> i, i * 3, 5000 >> i, 400000 >> i, 1 + i * 10,
                      0 };
        g.max_id = g.min_id + 60000 - i;
        rc = idx_segs_push(&s, &g, &err);
    }
    if (!rc)
        rc = idx_segs_encode(&s, &out, &err);
    if (!rc)
        rc = write_seed(name, 1, 3, &out);
    idx_segs_free(&s);
    kv_buf_free(&out);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    outdir = argv[1];
    int rc = 0;
    rc |= block_seed("block-1doc", 1, 42, 1, false, 1, 1, 1, false, 1);
    rc |= block_seed("block-1doc-pos", 1, 42, 1, false, 1, 1, 3, true, 4);
    rc |= block_seed("block-2docs-pos", 2, 7, 3, false, 2, 2, 2, true, 2);
    rc |= block_seed("block-dense-tf1", IDX_BLOCK_DOCS, 1, 1, false, 1, 1, 1,
                     false, 1);
    rc |= block_seed("block-dense-tf1-pos", IDX_BLOCK_DOCS, 1, 1, false, 1,
                     1, 1, true, 30);
    rc |= block_seed("block-views", 60, 1000, 300, true, 5, 4, 4, true, 20);
    rc |= block_seed("block-views-nopos", IDX_BLOCK_DOCS, 9, 2, true, 5, 3, 4,
                     false, 1);
    rc |= block_seed("block-70cols", 30, 5, 70000, true, 70, 4, 3, true, 300);
    rc |= block_seed("block-wide-gaps", 40, 3, 20000000, true, 2, 2, 2, true,
                     70000);
    rc |= block_seed("block-big-tf", 8, 9, 2, false, 1, 1, 300, true, 3);
    rc |= block_seed("block-far-pos", 4, 11, 5, false, 3, 2, 5, true,
                     20000000);
    rc |= block_seed("block-near-max", 3, UINT32_MAX - 10, 3, false, 2, 2, 2,
                     true, 1);
    rc |= block_seed("block-last-id", 1, UINT32_MAX, 1, false, 1, 1, 1, true,
                     1);
    rc |= entry_seed("entry-inline-dels", 12, 3, false, 4);
    rc |= entry_seed("entry-inline-onecol", 5, 1, false, 0);
    rc |= entry_seed("entry-external", 300, 2, true, 0);
    rc |= entry_seed("entry-external-dels", 200, 4, true, 7);
    rc |= entry_seed("entry-dels-only", 0, 2, false, 3);
    rc |= chunk_seed("chunk-small", 3, 0, false);
    rc |= chunk_seed("chunk-many", 40, 1000, false);
    rc |= chunk_seed("chunk-long-terms", 12, 77, true);
    rc |= segs_seed("segs-empty", 0);
    rc |= segs_seed("segs-5", 5);

    kv_err err = KV_ERR_INIT;
    kv_buf out = KV_BUF_INIT;
    idx_len lens[3] = { { 1, 12 }, { 2, 300 }, { 7, 1 } };
    idx_doclen docs[3] = { { 0, 0, 3 }, { 1, 0, 3 }, { 9, 1, 2 } };
    if (idx_lens_encode(0, docs, 3, lens, &out, &err) == KVFTS_OK)
        rc |= write_seed("lens-3fields", 2, 3, &out);
    idx_field f = { 3, 63000, 4000000 };
    if (idx_field_encode(&f, &out, &err) == KVFTS_OK)
        rc |= write_seed("field", 3, 3, &out);
    kv_buf_free(&out);
    return rc ? 1 : 0;
}
