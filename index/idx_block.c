/*
 * idx_block.c -- the on-disk format of the inverted index: keys, term
 * headers, postings blocks, document lengths and field records, with their
 * encoders and bounds-checked decoders.  Format version 1; this comment
 * changes in the same commit as the format.
 *
 * Logical key "fts::<field>::<term>" is stored in postings.db as records
 * whose keys start with  FIELD 0x00 TERM  (fields and terms never contain
 * 0x00: the index refuses such fields and the analyzers never emit it):
 *
 *   FIELD 0x00 TERM                   term header
 *   FIELD 0x00 TERM 0x00 be32(FIRST)  a postings block whose first doc id is
 *                                     FIRST
 *
 * The header sorts just before its blocks, and all records of a term sort
 * before those of any longer term it prefixes, so one cursor walk reads a
 * term's header and then its blocks in doc-id order, and a range scan from
 * FIELD 0x00 PREFIX enumerates terms (prefix queries).
 *
 * Term header:
 *   u8 version (1) | u8 flags (bit 0: blocks carry positions)
 *   varint df        live documents holding the term (the seeds' "count")
 *   varint cf        total occurrences in them
 *   varint blocks    number of block records
 *   varint last      the largest doc id (bulk appends go after it)
 *   varint lastblk   FIRST of the last block (where appends go)
 *
 * Postings block (at most IDX_BLOCK_DOCS documents, ascending ids):
 *   u8 version (1) | u8 flags (bit 0: positions)
 *   varint n         documents in the block, >= 1
 *   varint span      last id - FIRST (skip data: the block's last id)
 *   varint max_tf    largest tf in the block (for top-k pruning)
 *   varint idbytes   size of the id stream
 *   varint tfbytes   size of the tf stream
 *   varint posbytes  size of the position stream (0 without positions)
 *   id stream        StreamVByte delta coding of the n - 1 ids after FIRST
 *   tf stream        StreamVByte 0124 coding of tf - 1 for each document
 *                    (tf 1, the usual case, costs 2 bits)
 *   pos stream       StreamVByte of, per document, its tf positions as
 *                    gaps (first from 0)
 *
 * doclens.db: be32 doc id -> u8 version (1), varint count, then count pairs
 * of varints (field id, length in terms).
 *
 * meta.db: "field::NAME" -> varint id, varint docs having the field, varint
 * sum of their lengths (BM25's statistics); ids come from sequence "field".
 *
 * varint = unsigned LEB128, at most 10 bytes.  StreamVByte (Debian's
 * libstreamvbyte) encodes arrays of u32; idx_svb.c checks and decodes the
 * streams (see there why), reading from buffers with IDX_SLACK spare bytes
 * because its decoder loads 16 bytes at a time.
 */
#include "idx_int.h"

#include <streamvbyte.h>
#include <streamvbytedelta.h>
#include <string.h>

/* ---- varints ------------------------------------------------------------ */

size_t idx_varint_put(unsigned char *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (unsigned char)v;
    return n;
}

bool idx_varint_get(const unsigned char **p, const unsigned char *end,
                    uint64_t *out)
{
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (*p >= end)
            return false;
        unsigned char b = *(*p)++;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return true;
        }
    }
    return false;
}

/* ---- keys --------------------------------------------------------------- */

int idx_key_term(kv_buf *key, const char *field, size_t flen, const char *term,
                 size_t tlen, kv_err *err)
{
    kv_buf_reset(key);
    int rc = kv_buf_append(key, field, flen, err);
    if (!rc)
        rc = kv_buf_append(key, "", 1, err);
    if (!rc)
        rc = kv_buf_append(key, term, tlen, err);
    return rc;
}

int idx_key_block(kv_buf *key, size_t term_key_len, uint32_t first,
                  kv_err *err)
{
    key->len = term_key_len;
    unsigned char b[5] = { 0 };
    kv_put_be32(b + 1, first);
    return kv_buf_append(key, b, 5, err);
}

bool idx_key_is_block_of(const char *k, size_t klen, const char *term_key,
                         size_t tklen, uint32_t *first)
{
    if (klen != tklen + 5 || memcmp(k, term_key, tklen) != 0 ||
        k[tklen] != '\0')
        return false;
    *first = kv_get_be32((const unsigned char *)k + tklen + 1);
    return true;
}

/* ---- term headers ------------------------------------------------------- */

int idx_header_encode(const idx_header *h, kv_buf *out, kv_err *err)
{
    kv_buf_reset(out);
    int rc = kv_buf_reserve(out, 2 + 5 * 10, err);
    if (rc)
        return rc;
    unsigned char *p = (unsigned char *)out->data;
    size_t n = 0;
    p[n++] = IDX_FORMAT;
    p[n++] = h->positions ? IDX_F_POSITIONS : 0;
    n += idx_varint_put(p + n, h->df);
    n += idx_varint_put(p + n, h->cf);
    n += idx_varint_put(p + n, h->blocks);
    n += idx_varint_put(p + n, h->last);
    n += idx_varint_put(p + n, h->lastblk);
    out->len = n;
    return KVFTS_OK;
}

int idx_header_decode(const char *buf, size_t len, idx_header *h, kv_err *err)
{
    const unsigned char *p = (const unsigned char *)buf, *end = p + len;
    uint64_t blocks, last, lastblk;
    if (len < 2 || p[0] != IDX_FORMAT || (p[1] & ~IDX_F_POSITIONS))
        goto bad;
    h->positions = p[1] & IDX_F_POSITIONS;
    p += 2;
    if (!idx_varint_get(&p, end, &h->df) || !idx_varint_get(&p, end, &h->cf) ||
        !idx_varint_get(&p, end, &blocks) ||
        !idx_varint_get(&p, end, &last) ||
        !idx_varint_get(&p, end, &lastblk) || p != end)
        goto bad;
    if (h->df == 0 || h->cf < h->df || blocks == 0 || blocks > h->df ||
        last > UINT32_MAX || lastblk > last || lastblk == 0)
        goto bad;
    h->blocks = (uint32_t)blocks;
    h->last = (uint32_t)last;
    h->lastblk = (uint32_t)lastblk;
    return KVFTS_OK;
bad:
    return kv_seterr(err, KVFTS_ECORRUPT, "corrupt term header (%zu bytes)",
                     len);
}

/* ---- blocks ------------------------------------------------------------- */

void idx_block_init(idx_block *b)
{
    memset(b, 0, sizeof *b);
}

void idx_block_free(idx_block *b)
{
    kv_free(b->ids);
    kv_free(b->tfs);
    kv_free(b->poff);
    kv_free(b->pos);
    kv_free(b->tmp);
    memset(b, 0, sizeof *b);
}

int idx_block_reserve(idx_block *b, uint32_t ndocs, uint64_t npos,
                      kv_err *err)
{
    if (ndocs > b->cap) {
        uint32_t cap = b->cap ? b->cap : 16;
        while (cap < ndocs)
            cap *= 2;
        uint32_t *ids = kv_realloc(b->ids, (size_t)cap * 4 + IDX_SLACK);
        if (!ids)
            return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        b->ids = ids;
        uint32_t *tfs = kv_realloc(b->tfs, (size_t)cap * 4 + IDX_SLACK);
        if (!tfs)
            return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        b->tfs = tfs;
        uint32_t *po = kv_realloc(b->poff, ((size_t)cap + 1) * 4 + IDX_SLACK);
        if (!po)
            return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        b->poff = po;
        b->cap = cap;
    }
    if (npos > b->pcap) {
        if (npos > UINT32_MAX / 8)
            return kv_seterr(err, KVFTS_ENOMEM, "block too large");
        uint64_t cap = b->pcap ? b->pcap : 64;
        while (cap < npos)
            cap *= 2;
        uint32_t *pos = kv_realloc(b->pos, (size_t)cap * 4 + IDX_SLACK);
        if (!pos)
            return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        b->pos = pos;
        b->pcap = (uint32_t)cap;
    }
    return KVFTS_OK;
}

/* Stage 2 of a decode: the term frequencies (checked against max_tf). */
static int decode_tfs(idx_block *b, kv_err *err)
{
    idx_svb_decode_0124(b->tmp + b->idb, b->tfs, b->n);
    uint64_t npos = 0;
    uint32_t mtf = 0;
    for (uint32_t i = 0; i < b->n; i++) {
        b->tfs[i] += 1;
        if (b->tfs[i] == 0)
            goto bad;
        if (b->tfs[i] > mtf)
            mtf = b->tfs[i];
        npos += b->tfs[i];
    }
    if (mtf != b->max_tf || npos > UINT32_MAX / 8)
        goto bad;
    b->npos_expected = (uint32_t)npos;
    b->decoded = IDX_DECODE_TFS;
    return KVFTS_OK;
bad:
    return kv_seterr(err, KVFTS_ECORRUPT, "corrupt postings block (term "
                     "frequencies, first id %u)", b->ids[0]);
}

/* Stage 3: positions, as gaps per document turned into positions. */
static int decode_positions(idx_block *b, kv_err *err)
{
    uint32_t npos = b->npos_expected;
    if (idx_svb_size(b->tmp + b->idb + b->tfb, b->posb, npos, false) !=
        b->posb)
        goto bad;
    int rc = idx_block_reserve(b, b->n, npos, err);
    if (rc)
        return rc;
    idx_svb_decode(b->tmp + b->idb + b->tfb, b->pos, npos);
    uint32_t k = 0;
    for (uint32_t i = 0; i < b->n; i++) {
        b->poff[i] = k;
        uint64_t acc = 0;
        for (uint32_t j = 0; j < b->tfs[i]; j++, k++) {
            acc += b->pos[k];
            if (acc > UINT32_MAX || (j > 0 && b->pos[k] == 0))
                goto bad;
            b->pos[k] = (uint32_t)acc;
        }
    }
    b->poff[b->n] = k;
    b->npos = k;
    b->decoded = IDX_DECODE_POSITIONS;
    return KVFTS_OK;
bad:
    return kv_seterr(err, KVFTS_ECORRUPT, "corrupt postings block "
                     "(positions, first id %u)", b->ids[0]);
}

int idx_block_need(idx_block *b, int level, kv_err *err)
{
    int rc = KVFTS_OK;
    if (level >= IDX_DECODE_TFS && b->decoded < IDX_DECODE_TFS)
        rc = decode_tfs(b, err);
    if (!rc && level >= IDX_DECODE_POSITIONS && b->positions &&
        b->decoded < IDX_DECODE_POSITIONS)
        rc = decode_positions(b, err);
    return rc;
}

bool idx_block_peek(const char *buf, size_t len, uint32_t *span)
{
    const unsigned char *p = (const unsigned char *)buf, *end = p + len;
    uint64_t n, s;
    if (len < 2 || p[0] != IDX_FORMAT)
        return false;
    p += 2;
    if (!idx_varint_get(&p, end, &n) || !idx_varint_get(&p, end, &s) ||
        s > UINT32_MAX)
        return false;
    *span = (uint32_t)s;
    return true;
}

int idx_block_decode(idx_block *b, uint32_t first, const char *buf,
                     size_t len, int level, kv_err *err)
{
    const unsigned char *p = (const unsigned char *)buf, *end = p + len;
    uint64_t n, span, max_tf, idb, tfb, posb;
    if (len < 2 || p[0] != IDX_FORMAT || (p[1] & ~IDX_F_POSITIONS))
        goto bad;
    b->positions = p[1] & IDX_F_POSITIONS;
    p += 2;
    if (!idx_varint_get(&p, end, &n) || !idx_varint_get(&p, end, &span) ||
        !idx_varint_get(&p, end, &max_tf) || !idx_varint_get(&p, end, &idb) ||
        !idx_varint_get(&p, end, &tfb) || !idx_varint_get(&p, end, &posb))
        goto bad;
    if (n == 0 || n > IDX_BLOCK_MAX || span > UINT32_MAX - first ||
        (n == 1 && span != 0) || (n > 1 && span < n - 1) || max_tf == 0 ||
        max_tf > UINT32_MAX || (!b->positions && posb) ||
        idb > (size_t)(end - p) || tfb > (size_t)(end - p) - idb ||
        posb != (size_t)(end - p) - idb - tfb)
        goto bad;
    uint32_t cnt = (uint32_t)n;
    const unsigned char *ids = p, *tfs = p + idb;
    if (idx_svb_size(ids, idb, cnt - 1, false) != idb ||
        idx_svb_size(tfs, tfb, cnt, true) != tfb)
        goto bad;
    int rc = idx_block_reserve(b, cnt, 0, err);
    if (rc)
        return rc;
    /* The decoder may load past the end of a stream: decode from a copy
     * with slack, kept by the block so that the later stages (tfs,
     * positions) decode from it when they are first needed. */
    size_t need = (size_t)(idb + tfb + posb) + IDX_SLACK;
    if (need > b->tmpcap) {
        unsigned char *t = kv_realloc(b->tmp, need * 2);
        if (!t)
            return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        b->tmp = t;
        b->tmpcap = need * 2;
    }
    memcpy(b->tmp, p, (size_t)(idb + tfb + posb));
    b->idb = (size_t)idb;
    b->tfb = (size_t)tfb;
    b->posb = (size_t)posb;
    b->ids[0] = first;
    if (cnt > 1)
        idx_svb_delta_decode(b->tmp, b->ids + 1, cnt - 1, first);
    for (uint32_t i = 1; i < cnt; i++)
        if (b->ids[i] <= b->ids[i - 1])
            goto bad;
    if (b->ids[cnt - 1] != first + span)
        goto bad;
    b->n = cnt;
    b->max_tf = (uint32_t)max_tf;
    b->npos = 0;
    b->decoded = IDX_DECODE_IDS;
    return idx_block_need(b, level, err);
bad:
    return kv_seterr(err, KVFTS_ECORRUPT, "corrupt postings block (%zu "
                     "bytes, first id %u)", len, first);
}

int idx_block_encode(const idx_block *b, uint32_t from, uint32_t to,
                     kv_buf *out, kv_err *err)
{
    uint32_t n = to - from;
    uint32_t first = b->ids[from];
    uint64_t npos = 0;
    uint32_t max_tf = 0;
    for (uint32_t i = from; i < to; i++) {
        npos += b->tfs[i];
        if (b->tfs[i] > max_tf)
            max_tf = b->tfs[i];
    }
    if (!b->positions)
        npos = 0;
    size_t bound = 2 + 6 * 10 + streamvbyte_max_compressedbytes(n) * 2 +
                   streamvbyte_max_compressedbytes((uint32_t)npos);
    kv_buf_reset(out);
    int rc = kv_buf_reserve(out, bound + IDX_SLACK, err);
    if (rc)
        return rc;
    /* Scratch: tf - 1, and position gaps, in one allocation. */
    uint32_t *tmp = kv_malloc(((size_t)n + (size_t)npos + 1) * 4);
    if (!tmp)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    unsigned char *streams = kv_malloc(bound);
    if (!streams) {
        kv_free(tmp);
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    }
    size_t idb = n > 1 ? streamvbyte_delta_encode(b->ids + from + 1, n - 1,
                                                  streams, first)
                       : 0;
    for (uint32_t i = 0; i < n; i++)
        tmp[i] = b->tfs[from + i] - 1;
    size_t tfb = streamvbyte_encode_0124(tmp, n, streams + idb);
    size_t posb = 0;
    if (b->positions && npos) {
        uint32_t k = 0;
        for (uint32_t i = from; i < to; i++) {
            uint32_t prev = 0;
            for (uint32_t j = b->poff[i]; j < b->poff[i] + b->tfs[i]; j++) {
                tmp[n + k++] = b->pos[j] - prev;
                prev = b->pos[j];
            }
        }
        posb = streamvbyte_encode(tmp + n, (uint32_t)npos,
                                  streams + idb + tfb);
    }
    unsigned char *p = (unsigned char *)out->data;
    size_t k = 0;
    p[k++] = IDX_FORMAT;
    p[k++] = b->positions ? IDX_F_POSITIONS : 0;
    k += idx_varint_put(p + k, n);
    k += idx_varint_put(p + k, b->ids[to - 1] - first);
    k += idx_varint_put(p + k, max_tf);
    k += idx_varint_put(p + k, idb);
    k += idx_varint_put(p + k, tfb);
    k += idx_varint_put(p + k, posb);
    memcpy(p + k, streams, idb + tfb + posb);
    out->len = k + idb + tfb + posb;
    kv_free(tmp);
    kv_free(streams);
    return KVFTS_OK;
}

/* ---- document lengths and field records --------------------------------- */

int idx_lens_encode(const idx_len *lens, size_t n, kv_buf *out, kv_err *err)
{
    kv_buf_reset(out);
    int rc = kv_buf_reserve(out, 1 + 10 + n * 20, err);
    if (rc)
        return rc;
    unsigned char *p = (unsigned char *)out->data;
    size_t k = 0;
    p[k++] = IDX_FORMAT;
    k += idx_varint_put(p + k, n);
    for (size_t i = 0; i < n; i++) {
        k += idx_varint_put(p + k, lens[i].field_id);
        k += idx_varint_put(p + k, lens[i].len);
    }
    out->len = k;
    return KVFTS_OK;
}

int idx_lens_find(const char *buf, size_t len, uint32_t field_id,
                  uint32_t *out, kv_err *err)
{
    const unsigned char *p = (const unsigned char *)buf, *end = p + len;
    uint64_t n, id, l;
    *out = 0;
    if (len < 1 || p[0] != IDX_FORMAT)
        goto bad;
    p++;
    if (!idx_varint_get(&p, end, &n) || n > len)
        goto bad;
    /* Ranking asks for one field's length per matching document: stop at
     * it.  The pairs before it are checked; the record's end is checked
     * when the field is absent. */
    for (uint64_t i = 0; i < n; i++) {
        if (!idx_varint_get(&p, end, &id) || !idx_varint_get(&p, end, &l) ||
            l > UINT32_MAX)
            goto bad;
        if (id == field_id) {
            *out = (uint32_t)l;
            return KVFTS_OK;
        }
    }
    if (p != end)
        goto bad;
    return KVFTS_OK;
bad:
    return kv_seterr(err, KVFTS_ECORRUPT, "corrupt document lengths record");
}

int idx_field_encode(const idx_field *f, kv_buf *out, kv_err *err)
{
    kv_buf_reset(out);
    int rc = kv_buf_reserve(out, 30, err);
    if (rc)
        return rc;
    unsigned char *p = (unsigned char *)out->data;
    size_t k = idx_varint_put(p, f->id);
    k += idx_varint_put(p + k, f->docs);
    k += idx_varint_put(p + k, f->total_len);
    out->len = k;
    return KVFTS_OK;
}

int idx_field_decode(const char *buf, size_t len, idx_field *f, kv_err *err)
{
    const unsigned char *p = (const unsigned char *)buf, *end = p + len;
    uint64_t id;
    if (!idx_varint_get(&p, end, &id) || id == 0 || id > UINT32_MAX ||
        !idx_varint_get(&p, end, &f->docs) ||
        !idx_varint_get(&p, end, &f->total_len) || p != end)
        return kv_seterr(err, KVFTS_ECORRUPT, "corrupt field record");
    f->id = (uint32_t)id;
    return KVFTS_OK;
}

int idx_key_field(kv_buf *key, const char *field, size_t flen, kv_err *err)
{
    kv_buf_reset(key);
    int rc = kv_buf_append(key, IDX_FIELD_PREFIX, strlen(IDX_FIELD_PREFIX),
                           err);
    if (!rc)
        rc = kv_buf_append(key, field, flen, err);
    return rc;
}
