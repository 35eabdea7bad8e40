/*
 * gen_postings.c -- writes the seed corpus of fuzz_postings: real records
 * made by index/idx_block.c's encoders, each prefixed by the four-byte big-
 * endian first doc id the fuzz target reads before the record.
 *
 *   fuzz_gen_postings DIR
 *
 * Blocks cover the shapes the writer produces and the edges of the format:
 * one document, two, a full block of IDX_BLOCK_DOCS, with and without
 * positions, tf 1 everywhere (the 2-bit case of the tf stream) and large tfs,
 * id gaps of every StreamVByte width, positions past 2^16 and 2^24, and ids
 * near UINT32_MAX.  Term headers, document-lengths records and field
 * records follow (the target decodes the bytes as those too).  The output
 * is deterministic, so running it again reproduces the committed seeds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idx_int.h"
#include "kv.h"

static const char *outdir;

static int write_seed(const char *name, uint32_t first, const kv_buf *rec)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", outdir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return -1;
    }
    unsigned char id[4];
    kv_put_be32(id, first);
    int bad = fwrite(id, 1, 4, f) != 4 ||
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

/* A block of @p n documents from @p first, ids @p gap apart (+ noise when
 * @p noisy), tf up to @p maxtf, positions @p pgap apart. */
static int block_seed(const char *name, uint32_t n, uint32_t first,
                      uint32_t gap, bool noisy, uint32_t maxtf, bool positions,
                      uint32_t pgap)
{
    kv_err err = KV_ERR_INIT;
    idx_block b;
    kv_buf out = KV_BUF_INIT;
    idx_block_init(&b);
    int rc = idx_block_reserve(&b, n + 1, (uint64_t)n * maxtf + 1, &err);
    if (rc)
        goto done;
    b.n = n;
    b.positions = positions;
    uint32_t id = first, k = 0;
    for (uint32_t i = 0; i < n; i++) {
        b.ids[i] = id;
        id += gap + (noisy ? rnd(gap) : 0);
        b.tfs[i] = maxtf == 1 ? 1 : 1 + rnd(maxtf);
        if (i == 0)
            b.tfs[i] = maxtf;
        b.poff[i] = k;
        uint32_t p = rnd(8);
        for (uint32_t j = 0; j < b.tfs[i]; j++) {
            b.pos[k++] = p;
            p += 1 + rnd(pgap);
        }
    }
    b.poff[n] = k;
    b.npos = k;
    rc = idx_block_encode(&b, 0, n, &out, &err);
    if (!rc)
        rc = write_seed(name, first, &out);
done:
    if (rc)
        fprintf(stderr, "%s: %s\n", name, err.msg);
    kv_buf_free(&out);
    idx_block_free(&b);
    return rc;
}

static int header_seed(const char *name, uint64_t df, uint64_t cf,
                       uint32_t blocks, uint32_t last, uint32_t lastblk,
                       bool positions)
{
    kv_err err = KV_ERR_INIT;
    kv_buf out = KV_BUF_INIT;
    idx_header h = { df, cf, blocks, last, lastblk, positions };
    int rc = idx_header_encode(&h, &out, &err);
    if (!rc)
        rc = write_seed(name, 1, &out);
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
    rc |= block_seed("block-1doc", 1, 42, 1, false, 1, false, 1);
    rc |= block_seed("block-1doc-pos", 1, 42, 1, false, 3, true, 4);
    rc |= block_seed("block-2docs-pos", 2, 7, 3, false, 2, true, 2);
    rc |= block_seed("block-dense-tf1", 128, 1, 1, false, 1, false, 1);
    rc |= block_seed("block-dense-tf1-pos", 128, 1, 1, false, 1, true, 30);
    rc |= block_seed("block-sparse", 128, 1000, 300, true, 4, false, 1);
    rc |= block_seed("block-sparse-pos", 100, 5, 70000, true, 6, true, 300);
    rc |= block_seed("block-wide-gaps", 40, 3, 20000000, true, 2, true,
                     70000);
    rc |= block_seed("block-big-tf", 8, 9, 2, false, 300, true, 3);
    rc |= block_seed("block-far-pos", 4, 11, 5, false, 5, true, 20000000);
    rc |= block_seed("block-near-max", 3, UINT32_MAX - 10, 3, false, 2, true,
                     1);
    rc |= block_seed("block-last-id", 1, UINT32_MAX, 1, false, 1, true, 1);
    rc |= header_seed("header-small", 1, 1, 1, 42, 42, true);
    rc |= header_seed("header-big", 63000, 250000, 500, 63700, 63600, false);

    kv_err err = KV_ERR_INIT;
    kv_buf out = KV_BUF_INIT;
    idx_len lens[3] = { { 1, 12 }, { 2, 300 }, { 7, 1 } };
    if (idx_lens_encode(lens, 3, &out, &err) == KVFTS_OK)
        rc |= write_seed("lens-3fields", 2, &out);
    idx_field f = { 3, 63000, 4000000 };
    if (idx_field_encode(&f, &out, &err) == KVFTS_OK)
        rc |= write_seed("field", 3, &out);
    kv_buf_free(&out);
    return rc ? 1 : 0;
}
