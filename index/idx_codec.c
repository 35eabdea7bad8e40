/*
 * idx_codec.c -- the on-disk format of the inverted index, with its
 * encoders and bounds-checked decoders.  Index format 2 (database format
 * "kvfts 6": segments in files of their own, their list in segs.db;
 * document lengths by spans of 64 ids); this comment changes in the
 * same commit as the format.
 *
 * Model.  One postings list per term, whatever the fields it occurs in,
 * as SQLite FTS5 keeps one doclist per term with column markers: a posting
 * is one (term, document) pair, and it carries the document's *views* of
 * the term, one per column it occurs in.  A column is a field's own terms
 * (kind 1), the `_all` terms taken from a field (kind 2), or both at once
 * (kind 3, the usual case: the field's analyzer is `_all`'s, so the two
 * are the same terms at the same positions and are stored once):
 *
 *     column = field_id << 2 | kinds
 *
 * A view holds the term's frequency in the column and its positions there
 * (field-local; values of a field are TOK_VALUE_GAP apart, so a phrase
 * never crosses two values).  fts::FIELD::TERM is the postings with a view
 * of kind 1 in one of FIELD's columns; fts::_all::TERM those with a view
 * of kind 2; `_all` is not a second copy of the postings.
 *
 * Segments.  Immutable segments, each a file of its own,
 * DIR/seg-XXXXXXXX.db (lib/kv/kv_part.c), with its dictionary (space
 * KV_TERMS) and its blocks (KV_POSTINGS): every key starts with the
 * segment's id (sequence "seg" in segs.db), which names the file.  A
 * segment is written front to back into its new file, filling its pages,
 * and its transaction changes no page of an older one; a merge's inputs
 * are removed as whole files:
 *
 *   terms:
 *   be32(SEG) 'D' TERM                  a dictionary chunk: the entries of
 *                                       the terms from TERM (the chunk's
 *                                       first term) to the next chunk's
 *   postings:
 *   be32(SEG) 'B' be32(ORD) be32(FIRST) a postings block of the segment's
 *                                       ORD-th term (its rank in the
 *                                       segment's term order), first doc
 *                                       id FIRST
 *
 * segs.db "segments" lists them oldest first (idx_segs); a merge replaces
 * a run of neighbours by one segment in the run's place.  segs.db holds
 * only what merges write (the list, "merge", "dropq", "seq::seg"), so that
 * a merge on a thread of its own never waits for the page locks a batch
 * holds on meta.db from its first document to its commit.
 *
 * A document keeps its internal id through replacements.  A segment made
 * by a batch holds, per term, the postings of the batch's new versions and
 * the *deletions* of the stored versions it replaced or deleted (re-
 * analysed: the old version is read before it is overwritten): a deletion
 * of id X in segment k cancels the posting of X in the newest older
 * segment that has one.  A term unchanged between two versions of a
 * document (same views, tfs, positions) writes neither: the older posting
 * stays the current one.  So the live postings of a term are, per id, the
 * newest posting with no newer deletion, and its exact count is
 * sum(postings) - sum(deletions) over the segments, read from the entries
 * alone.  A merge drops a posting together with the deletion that cancels
 * it, keeping deletions whose postings are older than the merged run.
 *
 * Dictionary chunk (closed once past IDX_CHUNK_BYTES: one 4 KiB overflow
 * page):
 *   u8 version (2) | varint n entries | varint ordinal of the first
 *   n x (varint shared prefix with the previous term | varint suffix
 *        length | suffix | varint entry length | entry)
 *
 * Term entry (for a term of one posting, see the compact form below):
 *   varint flags       IDX_E_POSITIONS, _EXTERNAL, _DELS, _ONECOL
 *   varint ncols       the term's columns in this segment (those of its
 *   ncols x varint     postings and its deletions), ascending, as gaps
 *   varint ndocs       postings
 *   varint df_all      postings with a view of kind 2
 *   ncols x varint     per column: postings with a view in it
 *   [DELS] varint ndel, varint ndel_all, ncols x varint (per column
 *          deletions), ndel x varint (ids as gaps, ascending)
 *   [ndocs > 0] varint first id, varint last id - first, varint max_tf,
 *          then inline: varint block length, the block (FIRST = first id);
 *          external: varint number of block records
 *
 * Compact entry (IDX_E_SMALL): a term of 1 to IDX_SMALL_DOCS postings,
 * each of one view of its one column with tf at most IDX_SMALL_TF, and no
 * deletion -- most of the terms of a large vocabulary (largevocab: 92%),
 * which the form above stores in 25-30 bytes besides the term, the
 * block's header and the entry's counts saying again what the postings
 * say:
 *   varint flags (IDX_E_SMALL | ONECOL [| POSITIONS] | (n - 1) << 5)
 *   varint column << 1 | (df_all == n; it is 0 or n with one column)
 *   n x varint ids as gaps (the first from 0)
 *   n x (varint tf - 1 [POSITIONS: tf x varint positions as gaps])
 * Decoding makes the ONECOL entry and the block they stand for
 * (idx_entry.sblk), byte for byte what idx_block_encode makes of them, so
 * no reader knows the difference.
 *
 * Postings block (at most IDX_BLOCK_DOCS documents, ascending ids):
 *   u8 version (2) | u8 flags (IDX_B_POSITIONS, IDX_B_ONEVIEW)
 *   varint n         documents, >= 1
 *   varint span      last id - FIRST (skip data: the block's last id)
 *   varint max_tf    largest sum of a document's view tfs (block-max
 *                    pruning: it bounds the tf of any column choice)
 *   varint colmask   bit (c & 63) per column index c present (63: >= 63),
 *                    so a field-scoped reader skips blocks without it
 *   varint idbytes, vcbytes, vxbytes, tfbytes, posbytes
 *   ids     StreamVByte delta coding of the n - 1 ids after FIRST
 *   vc      StreamVByte 0124 of (views - 1) per document   } absent with
 *   vx      StreamVByte of each view's column index        } ONEVIEW
 *   tf      StreamVByte 0124 of (tf - 1) per view (tf 1 costs 2 bits)
 *   pos     StreamVByte of, per view, its tf positions as gaps (first
 *           from 0)
 *
 * doclens.db: a record per IDX_LENS_SPAN (64) documents, keyed by the be32
 *   id of the span's first, for the documents of the span that have one:
 *   u8 version (2), then per document, in id order:
 *     varint gap << 1 | same   gap: ids skipped since the last document
 *                              (from the span's first); same: its field ids
 *                              are the last document's (none before the
 *                              first)
 *     [varint n, n varint field ids]   unless same
 *     n varint lengths in terms        ("_all" is a field of its own)
 *   A record per document, as before format 6, cost 28 bytes a document
 *   in a B-tree (key, item headers, page fill): 2.9 MB of largevocab's
 *   63.6 MB; a span costs about 5, and a load puts 64x fewer items.
 * meta.db "field::NAME" -> varint id, varint documents having the field,
 *   varint sum of their lengths (BM25); ids from sequence "field".
 * segs.db "segments" -> u8 version (2), varint n, n x (varint id, level,
 *   docs, dels, terms, bytes, min id, max id - min id).
 *
 * varint = unsigned LEB128, at most 10 bytes.  StreamVByte (the format of
 * libstreamvbyte) codes arrays of u32; idx_svb.c encodes, checks and
 * decodes the streams, reading from buffers with IDX_SLACK spare bytes.  Every decoder
 * takes (buffer, length) and refuses damage with KVFTS_ECORRUPT
 * (tests/fuzz/fuzz_postings.c feeds them arbitrary bytes).
 */
#include "idx_int.h"

#include <string.h>

/* ---- varints ------------------------------------------------------------ */

int idx_buf_varint(kv_buf *b, uint64_t v, kv_err *err)
{
    int rc = kv_buf_reserve(b, 10, err);
    if (rc)
        return rc;
    b->len += idx_varint_put((unsigned char *)b->data + b->len, v);
    return KVFTS_OK;
}

/* A varint into *out bounded by max; false if absent or larger. */
static bool get_u32(const unsigned char **p, const unsigned char *end,
                    uint32_t max, uint32_t *out)
{
    uint64_t v;
    if (!idx_varint_get(p, end, &v) || v > max)
        return false;
    *out = (uint32_t)v;
    return true;
}

/* ---- keys --------------------------------------------------------------- */

int idx_key_chunk(kv_buf *key, uint32_t seg, const char *term, size_t tlen,
                  kv_err *err)
{
    unsigned char h[5];
    kv_put_be32(h, seg);
    h[4] = 'D';
    kv_buf_reset(key);
    int rc = kv_buf_append(key, h, 5, err);
    return rc ? rc : kv_buf_append(key, term, tlen, err);
}

void idx_key_block(unsigned char key[13], uint32_t seg, uint32_t ord,
                   uint32_t first)
{
    kv_put_be32(key, seg);
    key[4] = 'B';
    kv_put_be32(key + 5, ord);
    kv_put_be32(key + 9, first);
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

/* ---- postings lists ----------------------------------------------------- */

void idx_plist_init(idx_plist *l)
{
    memset(l, 0, sizeof *l);
}

void idx_plist_free(idx_plist *l)
{
    kv_free(l->ids);
    kv_free(l->vstart);
    kv_free(l->vcol);
    kv_free(l->vtf);
    kv_free(l->poff);
    kv_free(l->pos);
    memset(l, 0, sizeof *l);
}

void idx_plist_reset(idx_plist *l, bool positions)
{
    l->n = l->nv = l->np = 0;
    l->positions = positions;
    if (l->vstart)
        l->vstart[0] = 0;
    if (l->poff)
        l->poff[0] = 0;
}

int idx_plist_reserve(idx_plist *l, uint32_t docs, uint64_t views,
                      uint64_t npos, kv_err *err)
{
    uint64_t nd = (uint64_t)l->n + docs + 1, nv = l->nv + views + 1;
    uint64_t np = l->np + npos + 1;
    if (nd > UINT32_MAX / 8 || nv > UINT32_MAX / 8 || np > UINT32_MAX / 8)
        return kv_seterr(err, KVFTS_ENOMEM, "postings list too large");
    uint32_t dc = l->cap, vc = l->vcap;
    int rc = KVFTS_OK;
    if (nd > l->cap) {
        rc = idx__grow(&l->ids, &dc, nd, 4, err);
        dc = l->cap;
        if (!rc)
            rc = idx__grow(&l->vstart, &dc, nd, 4, err);
        if (!rc)
            l->cap = dc;
    }
    if (!rc && nv > l->vcap) {
        rc = idx__grow(&l->vcol, &vc, nv, 4, err);
        vc = l->vcap;
        if (!rc)
            rc = idx__grow(&l->vtf, &vc, nv, 4, err);
        vc = l->vcap;
        if (!rc)
            rc = idx__grow(&l->poff, &vc, nv, 4, err);
        if (!rc)
            l->vcap = vc;
    }
    if (!rc && np > l->pcap)
        rc = idx__grow(&l->pos, &l->pcap, np, 4, err);
    if (!rc && l->n == 0) {
        l->vstart[0] = 0;
        l->poff[0] = 0;
    }
    return rc;
}

int idx_plist_add(idx_plist *l, uint32_t id, uint32_t nv,
                  const uint32_t *cols, const uint32_t *tfs,
                  const uint32_t *pos, kv_err *err)
{
    uint64_t npos = 0;
    for (uint32_t i = 0; i < nv; i++)
        npos += tfs[i];
    int rc = idx_plist_reserve(l, 1, nv, l->positions ? npos : 0, err);
    if (rc)
        return rc;
    l->ids[l->n] = id;
    for (uint32_t i = 0; i < nv; i++) {
        uint32_t v = l->nv++;
        l->vcol[v] = cols[i];
        l->vtf[v] = tfs[i];
        if (l->positions) {
            memcpy(l->pos + l->np, pos, (size_t)tfs[i] * 4);
            pos += tfs[i];
            l->np += tfs[i];
        }
        l->poff[v + 1] = l->np;
    }
    l->n++;
    l->vstart[l->n] = l->nv;
    return KVFTS_OK;
}

int idx_plist_copy_range(idx_plist *to, const idx_plist *from, uint32_t i,
                         uint32_t j, const uint32_t *colmap, kv_err *err)
{
    if (i >= j)
        return KVFTS_OK;
    uint32_t v0 = from->vstart[i], v1 = from->vstart[j], nd = j - i;
    bool pos = to->positions && from->positions;
    uint64_t npos = from->positions ? (uint64_t)from->poff[v1] -
                                      from->poff[v0] : 0;
    int rc = idx_plist_reserve(to, nd, v1 - v0, npos, err);
    if (rc)
        return rc;
    memcpy(to->ids + to->n, from->ids + i, (size_t)nd * 4);
    for (uint32_t k = 1; k <= nd; k++)
        to->vstart[to->n + k] = to->nv + (from->vstart[i + k] - v0);
    uint32_t w0 = to->nv;
    if (colmap) {
        for (uint32_t v = v0; v < v1; v++)
            to->vcol[w0 + (v - v0)] = colmap[from->vcol[v]];
    } else {
        memcpy(to->vcol + w0, from->vcol + v0, (size_t)(v1 - v0) * 4);
    }
    memcpy(to->vtf + w0, from->vtf + v0, (size_t)(v1 - v0) * 4);
    for (uint32_t v = v0; v < v1; v++) {
        if (pos) {
            memcpy(to->pos + to->np, from->pos + from->poff[v],
                   (size_t)from->vtf[v] * 4);
            to->np += from->vtf[v];
        }
        to->poff[w0 + (v - v0) + 1] = to->np;
    }
    to->nv += v1 - v0;
    to->n += nd;
    return KVFTS_OK;
}

int idx_plist_copy_doc(idx_plist *to, const idx_plist *from, uint32_t i,
                       const uint32_t *colmap, kv_err *err)
{
    return idx_plist_copy_range(to, from, i, i + 1, colmap, err);
}

/* ---- blocks ------------------------------------------------------------- */

void idx_block_init(idx_block *b)
{
    memset(b, 0, sizeof *b);
    idx_plist_init(&b->l);
}

void idx_block_recycle(idx_block *b)
{
    idx_block k = *b;
    idx_block_init(b);
    b->l.ids = k.l.ids;
    b->l.vstart = k.l.vstart;
    b->l.vcol = k.l.vcol;
    b->l.vtf = k.l.vtf;
    b->l.poff = k.l.poff;
    b->l.pos = k.l.pos;
    b->l.cap = k.l.cap;
    b->l.vcap = k.l.vcap;
    b->l.pcap = k.l.pcap;
    b->tmp = k.tmp;
    b->tmpcap = k.tmpcap;
    b->scratch = k.scratch;
    b->scap = k.scap;
    b->pconv = k.pconv;
    b->pccap = k.pccap;
    b->first = k.first;
    b->fcap = k.fcap;
}

size_t idx_block_bytes(const idx_block *b)
{
    return (size_t)b->l.cap * 8 + (size_t)b->l.vcap * 12 +
           (size_t)b->l.pcap * 4 + b->tmpcap + (size_t)b->scap * 4 +
           b->pccap + b->fcap;
}

void idx_block_free(idx_block *b)
{
    idx_plist_free(&b->l);
    kv_free(b->tmp);
    kv_free(b->scratch);
    kv_free(b->pconv);
    kv_free(b->first);
    memset(b, 0, sizeof *b);
}

/* The fixed part of a block header; *p is left at the streams. */
typedef struct blk_head {
    unsigned flags;
    uint32_t n, span, max_tf;
    uint64_t colmask;
    uint64_t idb, vcb, vxb, tfb, posb;
} blk_head;

static bool head_read(const unsigned char **p, const unsigned char *end,
                      blk_head *h)
{
    if (end - *p < 2 || (*p)[0] != IDX_VERSION ||
        ((*p)[1] & ~(IDX_B_POSITIONS | IDX_B_ONEVIEW)))
        return false;
    h->flags = (*p)[1];
    *p += 2;
    return get_u32(p, end, IDX_BLOCK_MAX, &h->n) && h->n > 0 &&
           get_u32(p, end, UINT32_MAX, &h->span) &&
           get_u32(p, end, UINT32_MAX, &h->max_tf) && h->max_tf > 0 &&
           idx_varint_get(p, end, &h->colmask) &&
           idx_varint_get(p, end, &h->idb) &&
           idx_varint_get(p, end, &h->vcb) &&
           idx_varint_get(p, end, &h->vxb) &&
           idx_varint_get(p, end, &h->tfb) &&
           idx_varint_get(p, end, &h->posb);
}

bool idx_block_peek(const char *buf, size_t len, uint32_t *span,
                    uint32_t *max_tf, uint64_t *colmask)
{
    const unsigned char *p = (const unsigned char *)buf, *end = p + len;
    blk_head h;
    if (!head_read(&p, end, &h))
        return false;
    *span = h.span;
    *max_tf = h.max_tf;
    *colmask = h.colmask;
    return true;
}

static int corrupt_block(const idx_block *b, const char *what, kv_err *err)
{
    return kv_seterr(err, KVFTS_ECORRUPT, "corrupt postings block (%s, "
                     "first id %u)", what, b->l.n ? b->l.ids[0] : 0);
}

/* The streams of a block, for idx_block.checked. */
enum { CK_IDS = 1, CK_VC = 2, CK_VX = 4, CK_TF = 8, CK_POS = 16,
       CK_VIEWS = 32 /* decode_views' checks passed */ };

/* Whether the stream at s, len bytes, holds count values as its control
 * bytes say (idx_svb_size).  A block decoded trusted (its bytes' streams
 * all checked before: a cached block read again) is not checked again --
 * about 5% of a phrase count's time went to these checks, repeated at
 * every decode of a common word's cached blocks. */
static bool svb_ok(idx_block *b, unsigned ck, const unsigned char *s,
                   size_t len, uint32_t count, bool is0124)
{
    if (b->trusted)
        return true;
    if (idx_svb_size(s, len, count, is0124) != len)
        return false;
    b->checked |= (uint8_t)ck;
    return true;
}

int idx_block_trust(const idx_block *b)
{
    unsigned need = CK_IDS | CK_TF | (b->oneview ? 0 : CK_VC | CK_VX) |
                    (b->l.positions ? CK_POS : 0);
    if (!b->l.n || (!b->trusted && (b->checked & need) != need))
        return 0;
    return b->trusted_views || (b->checked & CK_VIEWS)
           ? IDX_DEC_TRUSTED | IDX_DEC_TRUSTED_VIEWS : IDX_DEC_TRUSTED;
}

/* Stage 2, the view counts: l.vstart, and the number of views (l.nv), with
 * room for that many; the count and column streams checked for their
 * size (a count of ids reads neither). */
static int decode_counts(idx_block *b, uint32_t ncols, kv_err *err)
{
    idx_plist *l = &b->l;
    uint32_t n = l->n;
    const unsigned char *vc = b->tmp + b->idb, *vx = vc + b->vcb;
    uint64_t nv = n;
    if (b->oneview) {
        if (b->vcb || b->vxb || ncols < 1)
            return corrupt_block(b, "views", err);
        for (uint32_t i = 0; i <= n; i++)
            l->vstart[i] = i;
    } else {
        if (!svb_ok(b, CK_VC, vc, b->vcb, n, true))
            return corrupt_block(b, "view counts", err);
        if (b->scap < n + 1 &&
            idx__grow(&b->scratch, &b->scap, (uint64_t)n + 1, 4, err))
            return KVFTS_ENOMEM;
        idx_svb_decode_0124(vc, b->scratch, n);
        /* vstart is as long as ids (the document count is reserved) */
        nv = 0;
        for (uint32_t i = 0; i < n; i++) {
            l->vstart[i] = (uint32_t)nv;
            nv += (uint64_t)b->scratch[i] + 1;
        }
        l->vstart[n] = (uint32_t)nv;
        if (nv > (uint64_t)n * (ncols ? ncols : 1) || nv > UINT32_MAX / 8 ||
            !svb_ok(b, CK_VX, vx, b->vxb, (uint32_t)nv, false))
            return corrupt_block(b, "views", err);
    }
    l->nv = 0;
    int rc = idx_plist_reserve(l, 0, nv, 0, err);
    if (!rc)
        l->nv = (uint32_t)nv;
    return rc;
}

/* Stage 2, first half: view counts and columns, what a field's filter
 * reads (doc_selected in idx_read.c): the tfs stay undecoded. */
static int decode_cols(idx_block *b, uint32_t ncols, kv_err *err)
{
    idx_plist *l = &b->l;
    int rc = decode_counts(b, ncols, err);
    if (rc)
        return rc;
    uint32_t nv = l->nv;
    if (b->oneview)
        memset(l->vcol, 0, (size_t)nv * 4);
    else
        idx_svb_decode(b->tmp + b->idb + b->vcb, l->vcol, nv);
    b->cols = b->trusted_views;   /* checked at an earlier decode */
    if (b->cols)
        return KVFTS_OK;
    const uint32_t *restrict vcol = l->vcol;
    bool bad = false;
    uint64_t mask = 0;
    if (nv < 64) {
        for (uint32_t v = 0; v < nv; v++) {
            bad |= vcol[v] >= ncols;
            mask |= 1ull << (vcol[v] < 63 ? vcol[v] : 63);
        }
    } else {
        /* Many views: the mask by a flag byte per column, not a shift and
         * an OR per view (a shift by a count in a register is three
         * micro-ops without BMI2, and the ORs were a chain). */
        uint8_t seen[64] = { 0 };
        for (uint32_t v = 0; v < nv; v++) {
            bad |= vcol[v] >= ncols;
            seen[vcol[v] < 63 ? vcol[v] : 63] = 1;
        }
        for (uint32_t c = 0; c < 64; c++)
            mask |= (uint64_t)seen[c] << c;
    }
    if (bad)
        return corrupt_block(b, "view columns", err);
    if (mask != b->colmask)
        return corrupt_block(b, "block summary", err);
    b->cols = true;
    return KVFTS_OK;
}

/* Stage 2: view counts, columns and tfs. */
static int decode_views(idx_block *b, uint32_t ncols, kv_err *err)
{
    idx_plist *l = &b->l;
    uint32_t n = l->n;
    int rc = b->cols ? KVFTS_OK : decode_cols(b, ncols, err);
    if (rc)
        return rc;
    const unsigned char *tf = b->tmp + b->idb + b->vcb + b->vxb;
    uint32_t nv = l->nv;
    if (!svb_ok(b, CK_TF, tf, b->tfb, nv, true))
        return corrupt_block(b, "term frequencies", err);
    idx_svb_decode_0124(tf, l->vtf, nv);
    /* Checks and summaries in branch-free passes over local pointers
     * (the compiler cannot keep l->... in registers across the stores),
     * which also sum the tfs: each view's offset in the position stream
     * (poff, for decode_gaps) and the positions' count. */
    const uint32_t *restrict vs = l->vstart, *restrict vcol = l->vcol;
    uint32_t *restrict vtf = l->vtf, *restrict poff = l->poff;
    bool bad = false;
    uint64_t npos = 0, most = 0;
    uint32_t top = 0;                      /* the largest view tf */
    for (uint32_t v = 0; v < nv; v++) {
        uint32_t t = vtf[v] + 1;
        bad |= vtf[v] >= UINT32_MAX / 8;    /* t 0 (wrapped) or huge */
        vtf[v] = t;
        top = t > top ? t : top;
        poff[v] = (uint32_t)npos;
        npos += t;
    }
    poff[nv] = (uint32_t)npos;
    bad |= npos > UINT32_MAX / 8;          /* then poff wrapped */
    if (b->trusted_views) {
        most = b->max_tf;  /* checked at an earlier decode of these bytes */
    } else if (nv == n) {
        most = top;        /* one view a document: its tf is the document's */
    } else {
        /* Over the views, not a loop per document (whose unpredictable
         * lengths made this the hot part of decoding a phrase's blocks):
         * first[v] marks a document's first view, and columns ascend
         * within a document; a document's tf is the span of its views'
         * offsets, the largest of them the block's max tf. */
        if (b->fcap < nv && idx__grow(&b->first, &b->fcap, nv, 1, err))
            return KVFTS_ENOMEM;
        uint8_t *restrict first = b->first;
        memset(first, 0, (size_t)nv);
        for (uint32_t i = 0; i < n; i++)
            first[vs[i]] = 1;
        for (uint32_t v = 1; v < nv; v++)
            bad |= !first[v] & (vcol[v] <= vcol[v - 1]);
        for (uint32_t i = 0; i < n; i++) {
            uint32_t t = poff[vs[i + 1]] - poff[vs[i]];
            most = t > most ? t : most;
        }
    }
    bad |= most > UINT32_MAX / 8 || npos > UINT32_MAX / 8;
    if (bad)
        return corrupt_block(b, "view columns or term frequencies", err);
    uint32_t mtf = (uint32_t)most;
    b->npos = (uint32_t)npos;
    if (mtf != b->max_tf)
        return corrupt_block(b, "block summary", err);
    b->checked |= CK_VIEWS;
    b->decoded = IDX_DEC_VIEWS;
    return KVFTS_OK;
}

int idx_block_need_cols(idx_block *b, kv_err *err)
{
    return b->cols || b->decoded >= IDX_DEC_VIEWS
           ? KVFTS_OK : decode_cols(b, b->ncols, err);
}

/* Stage 3, first half: the position stream decoded as it is (gaps, each
 * view's first from 0) and each view's offset in it.  The gaps become
 * positions per document (doc_positions), so that a phrase pays the
 * prefix sums only for the documents it looks at. */
static int decode_gaps(idx_block *b, kv_err *err)
{
    idx_plist *l = &b->l;
    const uint32_t n = l->n;
    uint64_t npos = b->npos;     /* the tfs' sum (decode_views) */
    const unsigned char *ps = b->tmp + b->idb + b->vcb + b->vxb + b->tfb;
    if (npos > UINT32_MAX / 8 ||
        !svb_ok(b, CK_POS, ps, b->posb, (uint32_t)npos, false))
        return corrupt_block(b, "positions", err);
    l->np = 0;
    int rc = idx_plist_reserve(l, 0, 0, npos, err);
    if (!rc && b->pccap < n)
        rc = idx__grow(&b->pconv, &b->pccap, n, 1, err);
    if (rc)
        return rc;
    idx_svb_decode(ps, l->pos, (uint32_t)npos);
    l->np = (uint32_t)npos;      /* poff: decode_views */
    memset(b->pconv, 0, n);
    b->gaps = true;
    return KVFTS_OK;
}

/* Stage 3, second half: document i's gaps turned into positions.  They
 * ascend strictly within a view: a zero gap after the first, or a sum
 * past 2^32 (it wraps to <= the previous), is damage.  The arrays go
 * through local pointers: stores to pos[] could alias poff[] for the
 * compiler, which then reloaded it on every position. */
static int doc_positions(idx_block *b, uint32_t i, kv_err *err)
{
    idx_plist *l = &b->l;
    uint32_t *restrict pos = l->pos;
    const uint32_t *restrict poff = l->poff;
    bool bad = false;
    for (uint32_t v = l->vstart[i]; v < l->vstart[i + 1]; v++) {
        uint32_t k = poff[v], end = poff[v + 1], acc = pos[k];
        for (k++; k < end; k++) {
            uint32_t next = acc + pos[k];
            bad |= next <= acc;
            acc = next;
            pos[k] = acc;
        }
    }
    if (bad)
        return corrupt_block(b, "positions", err);
    b->pconv[i] = 1;
    return KVFTS_OK;
}

/* Stage 3: every document's positions. */
static int decode_positions(idx_block *b, kv_err *err)
{
    int rc = b->gaps ? KVFTS_OK : decode_gaps(b, err);
    for (uint32_t i = 0; !rc && i < b->l.n; i++)
        if (!b->pconv[i])
            rc = doc_positions(b, i, err);
    if (!rc)
        b->decoded = IDX_DEC_POS;
    return rc;
}

/* A document at a time (a phrase's candidates, a few of the block's):
 * every document's view counts (vstart), every view's tf and its offset in
 * the position stream (poff) -- small streams, decoded whole -- but no
 * columns (unless a field's filter decoded them) and no positions yet.
 * The block's summaries (max tf, column mask) are checked by the whole
 * decode only; what is read here is bounds-checked as it is read. */
static int bydoc_index(idx_block *b, kv_err *err)
{
    idx_plist *l = &b->l;
    const uint32_t n = l->n;
    int rc = KVFTS_OK;
    if (b->oneview && !b->cols)
        rc = decode_cols(b, b->ncols, err);  /* no column stream: cheap */
    if (rc)
        return rc;
    if (!b->cols && (rc = decode_counts(b, b->ncols, err)))
        return rc;
    uint64_t nv = l->nv;
    const unsigned char *tf = b->tmp + b->idb + b->vcb + b->vxb;
    if (!svb_ok(b, CK_TF, tf, b->tfb, (uint32_t)nv, true))
        return corrupt_block(b, "term frequencies", err);
    idx_svb_decode_0124(tf, l->vtf, (uint32_t)nv);
    uint32_t *restrict vtf = l->vtf, *restrict poff = l->poff;
    uint64_t npos = 0;
    for (uint32_t v = 0; v < (uint32_t)nv; v++) {
        vtf[v]++;
        poff[v] = (uint32_t)npos;
        npos += vtf[v];
    }
    if (npos > UINT32_MAX / 8 || (npos + 3) / 4 > b->posb ||
        (b->cached && !svb_ok(b, CK_POS, b->tmp + b->idb + b->vcb + b->vxb +
                              b->tfb, b->posb, (uint32_t)npos, false)))
        return corrupt_block(b, "positions", err);
    poff[nv] = (uint32_t)npos;
    l->np = 0;
    rc = idx_plist_reserve(l, 0, 0, npos, err);
    if (!rc && b->pccap < n)
        rc = idx__grow(&b->pconv, &b->pccap, n, 1, err);
    if (rc)
        return rc;
    l->np = (uint32_t)npos;
    memset(b->pconv, 0, n);
    b->bydoc = true;
    b->ndoc = b->vk = b->pk = 0;
    b->vat = b->pat = 0;
    return KVFTS_OK;
}

/* Values [from, to) of the standard stream at s (nval values, len bytes)
 * into out, walked on from value *k at data byte *at (or from the start,
 * for an earlier value): its control bytes give where they start and how
 * long they are, checked against the stream before anything is read. */
static bool walk_range(const unsigned char *s, size_t len, uint32_t nval,
                       uint32_t *k, size_t *at, uint32_t from, uint32_t to,
                       uint32_t *out)
{
    size_t nctrl = ((size_t)nval + 3) / 4, dlen = len - nctrl;
    if (from < *k) {
        *k = 0;
        *at = 0;
    }
    size_t a = *at + idx_svb_span(s, *k, from);
    size_t d = idx_svb_span(s, from, to);
    if (a > dlen || d > dlen - a)
        return false;
    idx_svb_decode_range(s, s + nctrl + a, out, from, to);
    *k = to;
    *at = a + d;
    return true;
}

/* Document i's columns (unless decoded) and positions, by document. */
static int bydoc_decode(idx_block *b, uint32_t i, kv_err *err)
{
    idx_plist *l = &b->l;
    uint32_t v0 = l->vstart[i], v1 = l->vstart[i + 1];
    if (!b->cols) {
        const unsigned char *vx = b->tmp + b->idb + b->vcb;
        if (!walk_range(vx, b->vxb, l->nv, &b->vk, &b->vat, v0, v1, l->vcol))
            return corrupt_block(b, "views", err);
        bool bad = false;
        for (uint32_t v = v0; v < v1; v++)
            bad |= l->vcol[v] >= b->ncols ||
                   (v > v0 && l->vcol[v] <= l->vcol[v - 1]);
        if (bad)
            return corrupt_block(b, "view columns", err);
    }
    const unsigned char *ps = b->tmp + b->idb + b->vcb + b->vxb + b->tfb;
    if (!walk_range(ps, b->posb, l->np, &b->pk, &b->pat, l->poff[v0],
                    l->poff[v1], l->pos))
        return corrupt_block(b, "positions", err);
    b->ndoc++;
    return doc_positions(b, i, err);
}

/* Document i's positions: a document at a time while the block is asked
 * for few of its documents, as a phrase's candidates of a rare word are
 * in a common word's blocks; past BYDOC_MAX of them, the whole block (one
 * load and shuffle per four values, where by document decodes a byte at a
 * time), and so from the start for the cursor's next block (dense: the
 * last one was asked for that many). */
#define BYDOC_MAX(n) ((n) / IDX_BLOCK_WHOLE + 1)
int idx_block_need_doc(idx_block *b, uint32_t i, kv_err *err)
{
    int rc = KVFTS_OK;
    if (b->decoded >= IDX_DEC_POS || !b->l.positions)
        return idx_block_need(b, IDX_DEC_VIEWS, err);
    if (b->bydoc && b->pconv[i])
        return KVFTS_OK;
    if (b->decoded < IDX_DEC_VIEWS && !b->dense && b->l.n >= 32 &&
        (!b->bydoc || b->ndoc < BYDOC_MAX(b->l.n))) {
        if (!b->bydoc)
            rc = bydoc_index(b, err);
        return rc ? rc : bydoc_decode(b, i, err);
    }
    rc = idx_block_need_gaps(b, err);
    return rc ? rc : idx_block_doc_positions(b, i, err);
}

int idx_block_need_gaps(idx_block *b, kv_err *err)
{
    if (b->decoded >= IDX_DEC_POS || !b->l.positions)
        return idx_block_need(b, IDX_DEC_VIEWS, err);
    b->bydoc = false;
    int rc = b->decoded < IDX_DEC_VIEWS ? decode_views(b, b->ncols, err)
                                        : KVFTS_OK;
    return rc || b->gaps ? rc : decode_gaps(b, err);
}

int idx_block_doc_positions(idx_block *b, uint32_t i, kv_err *err)
{
    if (b->decoded >= IDX_DEC_POS || !b->l.positions || b->pconv[i])
        return KVFTS_OK;
    b->ndoc++;
    return doc_positions(b, i, err);
}

/* ---- a phrase in candidates' blocks ------------------------------------- */

/* Start the walk of view v (of document i) of t's block: from the gaps as
 * stored, or from positions a document at a time made (pconv). */
static void pwalk_start(idx_phrase_term *t, uint32_t i, uint32_t v)
{
    const idx_block *b = t->b;
    t->ws = t->wk = b->l.poff[v];
    t->we = b->l.poff[v + 1];
    t->wval = 0;
    t->wconv = b->decoded >= IDX_DEC_POS || b->pconv[i];
}

/* The walk's next position into t->wval; false at the view's end.  A
 * position not above the last (a zero gap after the first, or a sum that
 * wrapped) is damage, noted in t->bad. */
static inline bool pwalk_next(idx_phrase_term *t)
{
    if (t->wk == t->we)
        return false;
    uint32_t g = t->b->l.pos[t->wk];
    uint32_t next = t->wconv ? g : t->wval + g;
    t->bad |= t->wk != t->ws && next <= t->wval;
    t->wval = next;
    t->wk++;
    return true;
}

/* Whether the views being walked hold the phrase: every start of the
 * first term's, each other term's walked once, in step (the position
 * wanted of it only grows). */
static bool pwalk_phrase(idx_phrase_term *t, size_t n)
{
    for (size_t i = 1; i < n; i++)
        if (!pwalk_next(&t[i]))
            return false;
    while (pwalk_next(&t[0])) {
        uint64_t s = t[0].wval;
        bool match = true;
        for (size_t i = 1; match && i < n; i++) {
            uint64_t want = s + t[i].off - t[0].off;
            while (t[i].wval < want)
                if (!pwalk_next(&t[i]))
                    return false;       /* no later start can match */
            match = t[i].wval == want;
        }
        if (match)
            return true;
    }
    return false;
}

/* How many start positions of the view at pa[ka..ea) (positions if ca,
 * else gaps) plus d are positions of the view at pb[kb..eb): all of them,
 * or (all false) whether one is.  Both walked once, in step.  Damage
 * (positions not increasing) is ORed into *bada, *badb. */
static inline uint32_t pair_hit(const uint32_t *pa, uint32_t ka, uint32_t ea,
                                bool ca, const uint32_t *pb, uint32_t kb,
                                uint32_t eb, bool cb, uint64_t d, bool all,
                                bool *bada, bool *badb)
{
    const uint32_t sa = ka;
    bool ba = false, bb = false;
    uint32_t hits = 0;
    if (kb == eb)
        return 0;
    uint32_t va = 0, vb = pb[kb++];     /* a first gap is a position */
    while ((all || !hits) && ka < ea) {
        uint32_t g = pa[ka], next = ca ? g : va + g;
        ba |= ka != sa && next <= va;
        va = next;
        ka++;
        uint64_t want = va + d;
        while (vb < want && kb < eb) {
            g = pb[kb];
            next = cb ? g : vb + g;
            bb |= next <= vb;
            vb = next;
            kb++;
        }
        if (vb < want)
            break;                       /* no later start can match */
        hits += vb == want;
    }
    *bada |= ba;
    *badb |= bb;
    return hits;
}

/* pair_hit of a word with itself (a phrase that says it twice, d apart):
 * the view's own positions.  At d 1, an occurrence is a gap of 1 after the
 * first position, counted in one pass; otherwise the two walks. */
static inline uint32_t self_hit(const uint32_t *p, uint32_t k, uint32_t e,
                                bool conv, uint64_t d, bool all, bool *bad)
{
    if (d != 1)
        return pair_hit(p, k, e, conv, p, k, e, conv, d, all, bad, bad);
    uint32_t hits = 0;
    bool b = false;
    for (uint32_t i = k + 1; i < e && (all || !hits); i++) {
        uint32_t g = conv ? p[i] - p[i - 1] : p[i];
        b |= g == 0;                      /* not increasing */
        hits += g == 1;
    }
    *bad |= b;
    return hits;
}

/* Whether the documents the terms are at (t[i].at) hold the phrase: per
 * field of the first term's views that every term has a view in, a walk
 * of their positions.  For phrases of more than IDX_PHRASE_LOCAL terms
 * (blocks_pair and blocks_multi take the others). */
static bool doc_phrase(idx_phrase_term *t, size_t n)
{
    const idx_plist *l0 = &t[0].b->l;
    for (size_t i = 1; i < n; i++)
        t[i].vat = t[i].b->l.vstart[t[i].at];
    for (uint32_t a = l0->vstart[t[0].at]; a < l0->vstart[t[0].at + 1];
         a++) {
        uint32_t f = t[0].fid[l0->vcol[a]];
        if (!f)
            continue;                            /* not selected */
        bool every = true;
        for (size_t i = 1; every && i < n; i++) {
            /* the term's view of field f: past the smaller fields' and
             * the columns not selected (fid 0) */
            const uint32_t *vcol = t[i].b->l.vcol, *fid = t[i].fid;
            uint32_t k = t[i].vat, e = t[i].b->l.vstart[t[i].at + 1];
            while (k < e && fid[vcol[k]] < f)
                k++;
            t[i].vat = k;
            every = k < e && fid[vcol[k]] == f;
        }
        if (!every)
            continue;
        pwalk_start(&t[0], t[0].at, a);
        for (size_t i = 1; i < n; i++)
            pwalk_start(&t[i], t[i].at, t[i].vat);
        if (pwalk_phrase(t, n))
            return true;
    }
    return false;
}

uint32_t idx_blocks_common(idx_phrase_term *t, size_t n, uint32_t *cand,
                           uint32_t m, uint32_t *keep, uint16_t *map)
{
    for (size_t i = 0; i < n && m; i++) {
        if (t[i].dup)
            continue;
        const uint32_t *ids = t[i].b->l.ids;
        uint32_t nb = t[i].b->l.n, *idx = t[i].idx, o = 0, j = 0;
        uint32_t k = idx_gallop(ids, 0, nb, cand[0]);
        uint32_t lo = cand[0], span = cand[m - 1] - lo;
        uint64_t reach = (uint64_t)k + 4 * (uint64_t)m;
        if ((uint64_t)k + m <= nb &&
            memcmp(ids + k, cand, (size_t)m * sizeof *cand) == 0) {
            /* the block's own run (the lead's): all kept */
            for (; j < m; j++)
                idx[j] = k + j;
            o = m;
        } else if (span < IDX_PHRASE_MAP) {
            /* a map of the block's ids in the candidates' range to their
             * indexes (+ 1; 0: none), then a look-up per candidate: no
             * step waits on the one before, as a merge's do */
            memset(map, 0, ((size_t)span + 1) * sizeof *map);
            for (; k < nb && ids[k] - lo <= span; k++)
                map[ids[k] - lo] = (uint16_t)(k + 1);
            for (; j < m; j++) {
                uint32_t e = map[cand[j] - lo];
                keep[o] = j;
                idx[o] = e - 1;
                cand[o] = cand[j];
                o += e != 0;
            }
        } else if (k < nb &&
                   ids[reach < nb ? reach : nb - 1] >= cand[m - 1]) {
            /* the block's ids in the candidates' range are about as many
             * as they: merged, without branches */
            while (j < m && k < nb) {
                uint32_t x = cand[j], y = ids[k];
                keep[o] = j;
                idx[o] = k;
                cand[o] = x;
                o += x == y;
                j += x <= y;
                k += y <= x;
            }
        } else {
            /* many more: a gallop to each candidate */
            for (; j < m && k < nb; j++) {
                k = idx_gallop(ids, k, nb, cand[j]);
                keep[o] = j;
                idx[o] = k;
                cand[o] = cand[j];
                o += k < nb && ids[k] == cand[j];
            }
        }
        for (size_t e = 0; o < m && e < i; e++)   /* the earlier terms' */
            for (uint32_t x = 0; !t[e].dup && x < o; x++)  /* indexes */
                t[e].idx[x] = t[e].idx[keep[x]];         /* follow */
        m = o;
    }
    return m;
}

/* blocks_pair of a word said twice in a row (t[0].scr set: distance 1, the
 * block's positions still gaps): an occurrence is a gap of 1 after a
 * view's first position.  Counted for the whole block at once, without a
 * branch per document or view: s[] counts the gaps of 1 up to each
 * position; h[], over the views, those inside each view whose field is
 * selected; a candidate's count is h's rise over its views.  (blocks_pair
 * spent its time on "ka ka" in the loops per document: over its views, to
 * each walk's end; largevocab's count went 3.17 -> 1.32 ms, its top-10
 * 4.28 -> 2.38.)  A document whose positions were made (pconv) goes
 * through self_hit.  Damage: a gap of 0 other than a view's first. */
static uint64_t blocks_self1(idx_phrase_term *t, uint32_t m, uint32_t *pf)
{
    const idx_block *b = t[0].b;
    const uint32_t nv = b->l.nv, *po = b->l.poff, *p = b->l.pos;
    const uint32_t *vs = b->l.vstart, *vc = b->l.vcol, *fid = t[0].fid;
    const uint32_t *ix = t[0].idx, np = po[nv];
    const uint8_t *cv = b->pconv;
    uint32_t *s = t[0].scr, *h = s + np + 1;
    uint32_t ones = 0, zeros = 0, firsts = 0, acc = 0;
    s[0] = 0;
    for (uint32_t i = 0; i < np; i++) {
        ones += p[i] == 1;
        zeros += p[i] == 0;
        s[i + 1] = ones;
    }
    h[0] = 0;
    for (uint32_t a = 0; a < nv; a++) {
        uint32_t k = po[a], e = po[a + 1];
        uint32_t k1 = k < e ? k + 1 : e;
        firsts += k < e && p[k] == 0;
        acc += fid[vc[a]] ? s[e] - s[k1] : 0;
        h[a + 1] = acc;
    }
    bool bad = zeros != firsts;
    uint64_t found = 0;
    for (uint32_t j = 0; j < m; j++) {
        uint32_t x = ix[j], hits = h[vs[x + 1]] - h[vs[x]];
        if (cv[x]) {
            hits = 0;
            for (uint32_t a = vs[x]; a < vs[x + 1]; a++)
                if (fid[vc[a]])
                    hits += self_hit(p, po[a], po[a + 1], true, 1, true,
                                     &bad);
        }
        if (pf)
            pf[j] = hits;
        found += hits != 0;
    }
    t[0].bad |= bad;
    return found;
}

/* idx_blocks_phrase of two terms (doc_phrase's walk) with the
 * blocks' arrays in locals: through t[] every step reloaded them, a chain
 * of loads per view matched (on largevocab's "ka ka", most of the time
 * went to matching the second term's view to the first's). */
static uint64_t blocks_pair(idx_phrase_term *t, uint32_t m, uint32_t *pf)
{
    const idx_block *ba = t[0].b, *bb = t[1].b;
    const uint32_t *vsa = ba->l.vstart, *vca = ba->l.vcol, *fa = t[0].fid;
    const uint32_t *vsb = bb->l.vstart, *vcb = bb->l.vcol, *fb = t[1].fid;
    const uint32_t *poa = ba->l.poff, *pob = bb->l.poff;
    const uint32_t *pa = ba->l.pos, *pb = bb->l.pos;
    const uint32_t *ia = t[0].idx, *ib = t[1].idx;
    const uint8_t *cva = ba->pconv, *cvb = bb->pconv;
    const bool alla = ba->decoded >= IDX_DEC_POS,
               allb = bb->decoded >= IDX_DEC_POS;
    const uint64_t d = (uint64_t)t[1].off - t[0].off;
    const bool self = ia == ib;   /* a word said twice: the same views */
    bool bada = false, badb = false;
    uint64_t found = 0;
    for (uint32_t j = 0; j < m; j++) {
        uint32_t x = ia[j], y = ib[j];
        uint32_t k = vsb[y], e = vsb[y + 1];
        bool ca = alla || cva[x], cb = allb || cvb[y];
        uint32_t hits = 0;
        for (uint32_t a = vsa[x]; (pf || !hits) && a < vsa[x + 1]; a++) {
            uint32_t f = fa[vca[a]];
            if (!f)
                continue;                        /* not selected */
            if (self) {
                hits += self_hit(pa, poa[a], poa[a + 1], ca, d, pf != NULL,
                                 &bada);
                continue;
            }
            while (k < e && fb[vcb[k]] < f)
                k++;
            if (k == e)
                break;
            if (fb[vcb[k]] == f)
                hits += pair_hit(pa, poa[a], poa[a + 1], ca, pb, pob[k],
                                 pob[k + 1], cb, d, pf != NULL, &bada, &badb);
        }
        if (pf)
            pf[j] = hits;
        found += hits != 0;
    }
    t[0].bad |= bada;
    t[1].bad |= badb;
    return found;
}

/* The walk of pwalk_phrase over views whose state is in local arrays:
 * term i's positions at ps[i][wk[i]..we[i]) (positions if cv[i], else
 * gaps), wanted at the first term's start plus d[i].  How many starts
 * match: all, or (all false) whether one does. */
static uint32_t multi_hit(size_t n, const uint32_t *const *ps, uint32_t *wk,
                          const uint32_t *we, const bool *cv,
                          const uint64_t *d, bool all, bool *bad)
{
    uint32_t val[IDX_PHRASE_LOCAL], hits = 0;
    for (size_t i = 1; i < n; i++) {
        if (wk[i] == we[i])
            return 0;
        val[i] = ps[i][wk[i]++];        /* a first gap is a position */
    }
    const uint32_t *p0 = ps[0];
    uint32_t k = wk[0], s = k, va = 0;
    while ((all || !hits) && k < we[0]) {
        uint32_t g = p0[k], next = cv[0] ? g : va + g;
        bad[0] |= k != s && next <= va;
        va = next;
        k++;
        bool match = true;
        for (size_t i = 1; match && i < n; i++) {
            uint64_t want = va + d[i];
            while (val[i] < want) {
                if (wk[i] == we[i])
                    return hits;        /* no later start can match */
                g = ps[i][wk[i]++];
                next = cv[i] ? g : val[i] + g;
                bad[i] |= next <= val[i];
                val[i] = next;
            }
            match = val[i] == want;
        }
        hits += match;
    }
    return hits;
}

/* blocks_pair for 3 to IDX_PHRASE_LOCAL terms. */
static uint64_t blocks_multi(idx_phrase_term *t, size_t n, uint32_t m,
                             uint32_t *pf)
{
    enum { L = IDX_PHRASE_LOCAL };
    const uint32_t *vs[L], *vc[L], *fd[L], *po[L], *ps[L], *ix[L];
    const uint8_t *cvt[L];
    bool all[L], bad[L], cv[L];
    uint64_t d[L], found = 0;
    for (size_t i = 0; i < n; i++) {
        const idx_block *b = t[i].b;
        vs[i] = b->l.vstart;
        vc[i] = b->l.vcol;
        fd[i] = t[i].fid;
        po[i] = b->l.poff;
        ps[i] = b->l.pos;
        ix[i] = t[i].idx;
        cvt[i] = b->pconv;
        all[i] = b->decoded >= IDX_DEC_POS;
        bad[i] = false;
        d[i] = (uint64_t)t[i].off - t[0].off;
    }
    for (uint32_t j = 0; j < m; j++) {
        uint32_t at[L], k[L], e[L], wk[L], we[L];
        for (size_t i = 0; i < n; i++) {
            at[i] = ix[i][j];
            k[i] = vs[i][at[i]];
            e[i] = vs[i][at[i] + 1];
            cv[i] = all[i] || cvt[i][at[i]];
        }
        uint32_t hits = 0;
        bool left = true;
        for (uint32_t a = k[0]; (pf || !hits) && left && a < e[0]; a++) {
            uint32_t f = fd[0][vc[0][a]];
            if (!f)
                continue;                        /* not selected */
            bool every = true;
            for (size_t i = 1; every && i < n; i++) {
                while (k[i] < e[i] && fd[i][vc[i][k[i]]] < f)
                    k[i]++;
                left = k[i] < e[i];
                every = left && fd[i][vc[i][k[i]]] == f;
            }
            if (!every)
                continue;
            wk[0] = po[0][a];
            we[0] = po[0][a + 1];
            for (size_t i = 1; i < n; i++) {
                wk[i] = po[i][k[i]];
                we[i] = po[i][k[i] + 1];
            }
            hits += multi_hit(n, ps, wk, we, cv, d, pf != NULL, bad);
        }
        if (pf)
            pf[j] = hits;
        found += hits != 0;
    }
    for (size_t i = 0; i < n; i++)
        t[i].bad |= bad[i];
    return found;
}

int idx_blocks_phrase(idx_phrase_term *t, size_t n, uint32_t m,
                      uint32_t *pf, uint64_t *count, kv_err *err)
{
    uint64_t found = 0;
    for (size_t i = 0; i < n; i++)
        t[i].bad = false;
    bool local = n >= 2 && n <= IDX_PHRASE_LOCAL;
    if (pf && !local)
        return kv_seterr(err, KVFTS_ERROR, "phrase frequencies of %zu "
                         "terms from blocks", n);
    if (local)
        found = n > 2     ? blocks_multi(t, n, m, pf)
                : t[0].scr ? blocks_self1(t, m, pf)
                           : blocks_pair(t, m, pf);
    for (uint32_t j = 0; !local && j < m; j++) {
        for (size_t i = 0; i < n; i++)
            t[i].at = t[i].idx[j];
        found += doc_phrase(t, n);
    }
    for (size_t i = 0; i < n; i++)
        if (t[i].bad)
            return corrupt_block(t[i].b, "positions", err);
    *count += found;
    return KVFTS_OK;
}

bool idx_block_has_positions(const idx_block *b, uint32_t i)
{
    return b->decoded >= IDX_DEC_POS ||
           ((b->gaps || b->bydoc) && b->pconv[i]);
}

bool idx_block_has_views(const idx_block *b, uint32_t i)
{
    return b->decoded >= IDX_DEC_VIEWS || (b->bydoc && b->pconv[i]);
}

int idx_block_need(idx_block *b, int level, kv_err *err)
{
    int rc = KVFTS_OK;
    if (level >= IDX_DEC_VIEWS && b->decoded < IDX_DEC_VIEWS)
        rc = decode_views(b, b->ncols, err);
    if (!rc && level >= IDX_DEC_POS && b->l.positions &&
        b->decoded < IDX_DEC_POS)
        rc = decode_positions(b, err);
    return rc;
}

int idx_block_decode(idx_block *b, uint32_t first, const char *buf,
                     size_t len, uint32_t ncols, int level, kv_err *err)
{
    const unsigned char *p = (const unsigned char *)buf, *end = p + len;
    blk_head h;
    idx_plist *l = &b->l;
    b->dense = l->n && b->ndoc >= BYDOC_MAX(l->n);
    b->ndoc = 0;
    b->trusted = (level & IDX_DEC_TRUSTED) != 0;
    b->trusted_views = b->trusted && (level & IDX_DEC_TRUSTED_VIEWS);
    b->cached = (level & IDX_DEC_CACHED) != 0;
    b->checked = 0;
    level &= ~(IDX_DEC_TRUSTED | IDX_DEC_TRUSTED_VIEWS | IDX_DEC_CACHED);
    l->n = 0;
    if (!head_read(&p, end, &h))
        goto bad;
    size_t avail = (size_t)(end - p);
    if (h.span > UINT32_MAX - first || (h.n == 1 && h.span != 0) ||
        (h.n > 1 && h.span < h.n - 1) || h.idb > avail ||
        h.vcb > avail - h.idb || h.vxb > avail - h.idb - h.vcb ||
        h.tfb > avail - h.idb - h.vcb - h.vxb ||
        h.posb != avail - h.idb - h.vcb - h.vxb - h.tfb ||
        (!(h.flags & IDX_B_POSITIONS) && h.posb) ||
        !svb_ok(b, CK_IDS, p, h.idb, h.n - 1, false))
        goto bad;          /* (the view counts: when they are decoded) */
    int rc = idx_plist_reserve(l, h.n, 0, 0, err);
    if (rc)
        return rc;
    /* The decoder may load past the end of a stream: decode from a copy
     * with slack, kept by the block so that the later stages (views,
     * positions) decode from it when they are first needed. */
    size_t need = avail + IDX_SLACK;
    if (need > b->tmpcap) {
        unsigned char *t = kv_realloc(b->tmp, need * 2);
        if (!t)
            return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        b->tmp = t;
        b->tmpcap = need * 2;
    }
    memcpy(b->tmp, p, avail);
    b->idb = (size_t)h.idb;
    b->vcb = (size_t)h.vcb;
    b->vxb = (size_t)h.vxb;
    b->tfb = (size_t)h.tfb;
    b->posb = (size_t)h.posb;
    l->ids[0] = first;
    if (h.n > 1)
        idx_svb_delta_decode(b->tmp, l->ids + 1, h.n - 1, first);
    bool down = false;
    for (uint32_t i = 1; i < h.n; i++)
        down |= l->ids[i] <= l->ids[i - 1];
    if (down || l->ids[h.n - 1] != first + h.span)
        goto bad;
    l->n = h.n;
    l->nv = l->np = 0;
    l->positions = h.flags & IDX_B_POSITIONS;
    b->oneview = h.flags & IDX_B_ONEVIEW;
    b->max_tf = h.max_tf;
    b->colmask = h.colmask;
    b->ncols = ncols;
    b->decoded = IDX_DEC_IDS;
    b->gaps = b->cols = b->bydoc = false;
    return idx_block_need(b, level, err);
bad:
    l->n = 0;
    return kv_seterr(err, KVFTS_ECORRUPT, "corrupt postings block (%zu "
                     "bytes, first id %u)", len, first);
}

int idx_block_encode(const idx_plist *l, uint32_t from, uint32_t to,
                     kv_buf *out, kv_buf *scratch, kv_err *err)
{
    uint32_t n = to - from, first = l->ids[from];
    uint32_t v0 = l->vstart[from], v1 = l->vstart[to], nv = v1 - v0;
    uint64_t npos = l->positions ? (uint64_t)l->poff[v1] - l->poff[v0] : 0;
    bool oneview = nv == n;
    uint32_t max_tf = 0;
    uint64_t mask = 0;
    for (uint32_t i = from; i < to; i++) {
        uint64_t sum = 0;
        for (uint32_t v = l->vstart[i]; v < l->vstart[i + 1]; v++) {
            sum += l->vtf[v];
            mask |= 1ull << (l->vcol[v] < 63 ? l->vcol[v] : 63);
            if (l->vcol[v] != 0)
                oneview = false;
        }
        if (sum > max_tf)
            max_tf = sum > UINT32_MAX ? UINT32_MAX : (uint32_t)sum;
    }
    /* Scratch: u32 values for each stream, then the streams. */
    uint64_t vals = (uint64_t)n + nv + nv + npos + 4;
    size_t sbytes = idx_svb_max_bytes(n) * 2 + idx_svb_max_bytes(nv) * 2 +
                    idx_svb_max_bytes((uint32_t)npos) + 64;
    kv_buf_reset(scratch);
    int rc = kv_buf_reserve(scratch, vals * 4 + sbytes, err);
    if (rc)
        return rc;
    uint32_t *tmp = (uint32_t *)(void *)scratch->data;
    unsigned char *st = (unsigned char *)scratch->data + vals * 4;
    size_t idb = n > 1 ? idx_svb_delta_encode(l->ids + from + 1, n - 1,
                                              first, st) : 0;
    size_t vcb = 0, vxb = 0;
    if (!oneview) {
        for (uint32_t i = 0; i < n; i++)
            tmp[i] = l->vstart[from + i + 1] - l->vstart[from + i] - 1;
        vcb = idx_svb_encode_0124(tmp, n, st + idb);
        vxb = idx_svb_encode(l->vcol + v0, nv, st + idb + vcb);
    }
    for (uint32_t v = 0; v < nv; v++)
        tmp[v] = l->vtf[v0 + v] - 1;
    size_t tfb = idx_svb_encode_0124(tmp, nv, st + idb + vcb + vxb);
    size_t posb = 0;
    if (npos) {
        uint32_t k = 0;
        for (uint32_t v = v0; v < v1; v++) {
            uint32_t prev = 0;
            for (uint32_t j = l->poff[v]; j < l->poff[v] + l->vtf[v]; j++) {
                tmp[k++] = l->pos[j] - prev;
                prev = l->pos[j];
            }
        }
        posb = idx_svb_encode(tmp, (uint32_t)npos,
                              st + idb + vcb + vxb + tfb);
    }
    size_t body = idb + vcb + vxb + tfb + posb;
    rc = kv_buf_reserve(out, 2 + 10 * 9 + body, err);
    if (rc)
        return rc;
    unsigned char *p = (unsigned char *)out->data + out->len;
    size_t k = 0;
    p[k++] = IDX_VERSION;
    p[k++] = (unsigned char)((l->positions ? IDX_B_POSITIONS : 0) |
                             (oneview ? IDX_B_ONEVIEW : 0));
    k += idx_varint_put(p + k, n);
    k += idx_varint_put(p + k, l->ids[to - 1] - first);
    k += idx_varint_put(p + k, max_tf);
    k += idx_varint_put(p + k, mask);
    k += idx_varint_put(p + k, idb);
    k += idx_varint_put(p + k, vcb);
    k += idx_varint_put(p + k, vxb);
    k += idx_varint_put(p + k, tfb);
    k += idx_varint_put(p + k, posb);
    memcpy(p + k, st, body);
    out->len += k + body;
    return KVFTS_OK;
}

/* ---- term entries -------------------------------------------------------- */

void idx_entry_init(idx_entry *e)
{
    memset(e, 0, sizeof *e);
}

void idx_entry_free(idx_entry *e)
{
    kv_free(e->cols);
    kv_free(e->df);
    kv_free(e->ndelc);
    memset(e, 0, sizeof *e);
}

static int entry_reserve(idx_entry *e, uint32_t ncols, kv_err *err)
{
    if (ncols <= e->ccap)
        return KVFTS_OK;
    uint32_t c = e->ccap;
    int rc = idx__grow(&e->cols, &c, ncols, 4, err);
    c = e->ccap;
    if (!rc)
        rc = idx__grow(&e->df, &c, ncols, 8, err);
    c = e->ccap;
    if (!rc)
        rc = idx__grow(&e->ndelc, &c, ncols, 8, err);
    if (!rc)
        e->ccap = c;
    return rc;
}

/* A compact entry's postings: ids, tfs and position gaps. */
typedef struct small_post {
    uint32_t n;
    uint32_t ids[IDX_SMALL_DOCS];
    uint32_t tf[IDX_SMALL_DOCS];
    uint32_t npos;
    uint32_t gaps[IDX_SMALL_DOCS * IDX_SMALL_TF];
} small_post;

/* The block a compact entry stands for (its postings and max_tf set in
 * e), into e->sblk: byte for byte what idx_block_encode makes of the same
 * postings. */
static void small_block(idx_entry *e)
{
    unsigned char st[IDX_SMALL_BLK];
    uint32_t v[IDX_SMALL_DOCS] = { 0 };
    uint32_t n = e->nsmall;
    bool positions = e->flags & IDX_E_POSITIONS;
    for (uint32_t i = 1; i < n; i++)
        v[i - 1] = e->sids[i] - e->sids[i - 1];
    size_t idb = idx_svb_encode(v, n - 1, st);
    for (uint32_t i = 0; i < n; i++)
        v[i] = e->stf[i] - 1;
    size_t tfb = idx_svb_encode_0124(v, n, st + idb);
    size_t posb = positions ? idx_svb_encode(e->sgaps, e->snpos,
                                             st + idb + tfb) : 0;
    unsigned char *p = e->sblk;
    size_t k = 0;
    p[k++] = IDX_VERSION;
    p[k++] = (unsigned char)((positions ? IDX_B_POSITIONS : 0) |
                             IDX_B_ONEVIEW);
    k += idx_varint_put(p + k, n);
    k += idx_varint_put(p + k, e->sids[n - 1] - e->sids[0]);  /* span */
    k += idx_varint_put(p + k, e->max_tf);
    k += idx_varint_put(p + k, 1);          /* colmask: column index 0 */
    k += idx_varint_put(p + k, idb);
    k += idx_varint_put(p + k, 0);          /* view counts */
    k += idx_varint_put(p + k, 0);          /* view columns */
    k += idx_varint_put(p + k, tfb);
    k += idx_varint_put(p + k, posb);
    memcpy(p + k, st, idb + tfb + posb);
    e->blk = (const char *)e->sblk;
    e->blk_len = k + idb + tfb + posb;
}

void idx_entry_block(idx_entry *e)
{
    if (e->nsmall && !e->blk)
        small_block(e);
}

/* A compact entry's postings, parsed straight into e->sids, stf and sgaps
 * (e->nsmall stays 0 unless the whole record is good). */
static int small_decode(idx_entry *e, uint64_t flags,
                        const unsigned char *p, const unsigned char *end,
                        size_t len, bool block, kv_err *err)
{
    uint64_t cd, v;
    bool positions = flags & IDX_E_POSITIONS;
    uint32_t n = (uint32_t)(flags >> IDX_E_SMALL_SHIFT) + 1;
    e->nsmall = 0;
    e->snpos = 0;
    if ((flags & ~(uint64_t)(IDX_E_POSITIONS | IDX_E_ONECOL | IDX_E_SMALL |
                             (uint64_t)(IDX_SMALL_DOCS - 1)
                                 << IDX_E_SMALL_SHIFT)) ||
        !(flags & IDX_E_ONECOL) ||
        !idx_varint_get(&p, end, &cd) || (cd >> 1) > UINT32_MAX)
        goto bad;
    uint64_t id = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!idx_varint_get(&p, end, &v) || v == 0 || v > UINT32_MAX - id)
            goto bad;
        id += v;
        e->sids[i] = (uint32_t)id;
    }
    uint32_t max_tf = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!idx_varint_get(&p, end, &v) || v >= IDX_SMALL_TF)
            goto bad;
        e->stf[i] = (uint32_t)v + 1;
        max_tf = e->stf[i] > max_tf ? e->stf[i] : max_tf;
        uint64_t at = 0;
        for (uint32_t j = 0; positions && j < e->stf[i]; j++) {
            if (!idx_varint_get(&p, end, &v) || v > UINT32_MAX - at)
                goto bad;
            e->sgaps[e->snpos++] = (uint32_t)v;
            at += v;
        }
    }
    if (p != end)
        goto bad;
    int rc = entry_reserve(e, 1, err);
    if (rc)
        return rc;
    e->flags = (uint32_t)(flags & (IDX_E_POSITIONS | IDX_E_ONECOL));
    e->ncols = 1;
    e->cols[0] = (uint32_t)(cd >> 1);
    e->ndocs = n;
    e->df_all = (cd & 1) ? n : 0;
    e->df[0] = n;
    e->ndel = e->ndel_all = 0;
    e->ndelc[0] = 0;
    e->dels = NULL;
    e->dels_len = 0;
    e->first = e->sids[0];
    e->last = e->sids[n - 1];
    e->max_tf = max_tf;
    e->nblocks = 0;
    e->nsmall = n;
    e->blk = NULL;
    e->blk_len = 0;
    if (block)
        small_block(e);
    return KVFTS_OK;
bad:
    return kv_seterr(err, KVFTS_ECORRUPT, "corrupt term entry (%zu bytes)",
                     len);
}

/* Whether @p e can be stored compact: then its postings in *sp. */
static bool small_fits(const idx_entry *e, small_post *sp)
{
    if (e->ndocs == 0 || e->ndocs > IDX_SMALL_DOCS || e->ncols != 1 ||
        e->df[0] != e->ndocs || (e->df_all != 0 && e->df_all != e->ndocs) ||
        (e->flags & (IDX_E_DELS | IDX_E_EXTERNAL)) || !e->blk ||
        e->max_tf > IDX_SMALL_TF)
        return false;
    const unsigned char *p = (const unsigned char *)e->blk,
                        *end = p + e->blk_len;
    blk_head h;
    if (!head_read(&p, end, &h) || h.n != e->ndocs ||
        h.span != e->last - e->first || !(h.flags & IDX_B_ONEVIEW) ||
        h.colmask != 1 || h.vcb || h.vxb || h.max_tf != e->max_tf ||
        ((h.flags & IDX_B_POSITIONS) != 0) !=
            ((e->flags & IDX_E_POSITIONS) != 0) ||
        h.idb + h.tfb + h.posb != (uint64_t)(end - p) ||
        h.idb > 1 + 4 * IDX_SMALL_DOCS || h.tfb > 1 + 4 * IDX_SMALL_DOCS ||
        h.posb > 2 * IDX_SMALL_DOCS + 4 * IDX_SMALL_DOCS * IDX_SMALL_TF)
        return false;
    unsigned char tmp[16 + 8 * IDX_SMALL_DOCS +
                      (2 + 4 * IDX_SMALL_TF) * IDX_SMALL_DOCS + IDX_SLACK];
    memset(tmp, 0, sizeof tmp);
    memcpy(tmp, p, (size_t)(h.idb + h.tfb + h.posb));
    sp->n = h.n;
    sp->ids[0] = e->first;
    if (h.n > 1) {
        if (idx_svb_size(tmp, h.idb, h.n - 1, false) != h.idb)
            return false;
        idx_svb_delta_decode(tmp, sp->ids + 1, h.n - 1, e->first);
    }
    uint32_t tfm1[IDX_SMALL_DOCS];
    if (idx_svb_size(tmp + h.idb, h.tfb, h.n, true) != h.tfb)
        return false;
    idx_svb_decode_0124(tmp + h.idb, tfm1, h.n);
    sp->npos = 0;
    for (uint32_t i = 0; i < h.n; i++) {
        if (tfm1[i] >= IDX_SMALL_TF ||
            (i && sp->ids[i] <= sp->ids[i - 1]))
            return false;
        sp->tf[i] = tfm1[i] + 1;
        sp->npos += sp->tf[i];
    }
    if (sp->ids[h.n - 1] != e->last)
        return false;
    if (!(h.flags & IDX_B_POSITIONS))
        return h.posb == 0;
    if (idx_svb_size(tmp + h.idb + h.tfb, h.posb, sp->npos, false) != h.posb)
        return false;
    idx_svb_decode(tmp + h.idb + h.tfb, sp->gaps, sp->npos);
    return true;
}

static int entry_decode(idx_entry *e, const char *buf, size_t len,
                        bool block, kv_err *err)
{
    const unsigned char *p = (const unsigned char *)buf, *end = p + len;
    uint64_t flags, ncols;
    if (!idx_varint_get(&p, end, &flags))
        goto bad;
    if (flags & IDX_E_SMALL)
        return small_decode(e, flags, p, end, len, block, err);
    if ((flags & ~(uint64_t)(IDX_E_POSITIONS | IDX_E_EXTERNAL | IDX_E_DELS |
                             IDX_E_ONECOL)) ||
        !idx_varint_get(&p, end, &ncols) || ncols == 0 || ncols > len)
        goto bad;
    int rc = entry_reserve(e, (uint32_t)ncols, err);
    if (rc)
        return rc;
    e->flags = (uint32_t)flags;
    e->ncols = (uint32_t)ncols;
    uint64_t col = 0;
    for (uint32_t i = 0; i < e->ncols; i++) {
        uint64_t g;
        if (!idx_varint_get(&p, end, &g) || (i && g == 0) ||
            g > UINT32_MAX - col)
            goto bad;
        col += g;
        e->cols[i] = (uint32_t)col;
    }
    if ((flags & IDX_E_ONECOL) && e->ncols != 1)
        goto bad;
    if (!idx_varint_get(&p, end, &e->ndocs) ||
        !idx_varint_get(&p, end, &e->df_all) || e->df_all > e->ndocs)
        goto bad;
    for (uint32_t i = 0; i < e->ncols; i++)
        if (!idx_varint_get(&p, end, &e->df[i]) || e->df[i] > e->ndocs)
            goto bad;
    e->ndel = e->ndel_all = 0;
    e->dels = NULL;
    e->dels_len = 0;
    memset(e->ndelc, 0, (size_t)e->ncols * 8);
    if (flags & IDX_E_DELS) {
        if (!idx_varint_get(&p, end, &e->ndel) || e->ndel == 0 ||
            e->ndel > len || !idx_varint_get(&p, end, &e->ndel_all) ||
            e->ndel_all > e->ndel)
            goto bad;
        for (uint32_t i = 0; i < e->ncols; i++)
            if (!idx_varint_get(&p, end, &e->ndelc[i]) ||
                e->ndelc[i] > e->ndel)
                goto bad;
        e->dels = p;
        uint64_t id = 0, g;
        for (uint64_t k = 0; k < e->ndel; k++)
            if (!idx_varint_get(&p, end, &g) || (k && g == 0) ||
                g > UINT32_MAX - id)
                goto bad;
            else
                id += g;
        e->dels_len = (size_t)(p - e->dels);
    }
    e->blk = NULL;
    e->blk_len = 0;
    e->nblocks = 0;
    e->nsmall = 0;
    e->first = e->last = e->max_tf = 0;
    if (e->ndocs == 0) {
        if ((flags & IDX_E_EXTERNAL) || !(flags & IDX_E_DELS) || p != end)
            goto bad;
        return KVFTS_OK;
    }
    uint32_t span;
    if (!get_u32(&p, end, UINT32_MAX, &e->first) || e->first == 0 ||
        !get_u32(&p, end, UINT32_MAX - e->first, &span) ||
        !get_u32(&p, end, UINT32_MAX, &e->max_tf) || e->max_tf == 0 ||
        (uint64_t)span + 1 < e->ndocs)
        goto bad;
    e->last = e->first + span;
    if (flags & IDX_E_EXTERNAL) {
        if (!get_u32(&p, end, UINT32_MAX, &e->nblocks) || e->nblocks == 0 ||
            e->nblocks > e->ndocs || p != end)
            goto bad;
    } else {
        uint64_t bl;
        if (!idx_varint_get(&p, end, &bl) || bl != (uint64_t)(end - p) ||
            e->ndocs > IDX_BLOCK_MAX)
            goto bad;
        e->blk = (const char *)p;
        e->blk_len = (size_t)bl;
    }
    return KVFTS_OK;
bad:
    return kv_seterr(err, KVFTS_ECORRUPT, "corrupt term entry (%zu bytes)",
                     len);
}

int idx_entry_decode(idx_entry *e, const char *buf, size_t len, kv_err *err)
{
    return entry_decode(e, buf, len, true, err);
}

int idx_entry_decode_lazy(idx_entry *e, const char *buf, size_t len,
                          kv_err *err)
{
    return entry_decode(e, buf, len, false, err);
}

int idx_entry_encode(const idx_entry *e, kv_buf *out, kv_err *err)
{
    small_post sp;
    if (e->ndocs && !(e->flags & IDX_E_EXTERNAL) && !e->blk)
        return kv_seterr(err, KVFTS_ERROR, "term entry to encode without "
                         "its block (idx_entry_block not called)");
    if (small_fits(e, &sp)) {
        bool pos = e->flags & IDX_E_POSITIONS;
        int rc = idx_buf_varint(out, IDX_E_SMALL | IDX_E_ONECOL |
                                (pos ? IDX_E_POSITIONS : 0) |
                                (uint64_t)(sp.n - 1) << IDX_E_SMALL_SHIFT,
                                err);
        if (!rc)
            rc = idx_buf_varint(out, (uint64_t)e->cols[0] << 1 |
                                (e->df_all != 0), err);
        for (uint32_t i = 0; !rc && i < sp.n; i++)
            rc = idx_buf_varint(out, sp.ids[i] - (i ? sp.ids[i - 1] : 0),
                                err);
        for (uint32_t i = 0, k = 0; !rc && i < sp.n; i++) {
            rc = idx_buf_varint(out, sp.tf[i] - 1, err);
            for (uint32_t j = 0; !rc && pos && j < sp.tf[i]; j++)
                rc = idx_buf_varint(out, sp.gaps[k++], err);
        }
        return rc;
    }
    int rc = idx_buf_varint(out, e->flags, err);
    if (!rc)
        rc = idx_buf_varint(out, e->ncols, err);
    for (uint32_t i = 0; !rc && i < e->ncols; i++)
        rc = idx_buf_varint(out, e->cols[i] - (i ? e->cols[i - 1] : 0), err);
    if (!rc)
        rc = idx_buf_varint(out, e->ndocs, err);
    if (!rc)
        rc = idx_buf_varint(out, e->df_all, err);
    for (uint32_t i = 0; !rc && i < e->ncols; i++)
        rc = idx_buf_varint(out, e->df[i], err);
    if (!rc && (e->flags & IDX_E_DELS)) {
        rc = idx_buf_varint(out, e->ndel, err);
        if (!rc)
            rc = idx_buf_varint(out, e->ndel_all, err);
        for (uint32_t i = 0; !rc && i < e->ncols; i++)
            rc = idx_buf_varint(out, e->ndelc[i], err);
        if (!rc)
            rc = kv_buf_append(out, e->dels, e->dels_len, err);
    }
    if (rc || e->ndocs == 0)
        return rc;
    rc = idx_buf_varint(out, e->first, err);
    if (!rc)
        rc = idx_buf_varint(out, e->last - e->first, err);
    if (!rc)
        rc = idx_buf_varint(out, e->max_tf, err);
    if (!rc && (e->flags & IDX_E_EXTERNAL))
        return idx_buf_varint(out, e->nblocks, err);
    if (!rc)
        rc = idx_buf_varint(out, e->blk_len, err);
    if (!rc)
        rc = kv_buf_append(out, e->blk, e->blk_len, err);
    return rc;
}

long idx_entry_col(const idx_entry *e, uint32_t col)
{
    uint32_t lo = 0, hi = e->ncols;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (e->cols[mid] < col)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < e->ncols && e->cols[lo] == col ? (long)lo : -1;
}

int idx_entry_dels(const idx_entry *e, uint32_t **ids, uint32_t *cap,
                   kv_err *err)
{
    if (e->ndel == 0)
        return KVFTS_OK;
    int rc = idx__grow(ids, cap, e->ndel, 4, err);
    if (rc)
        return rc;
    const unsigned char *p = e->dels, *end = p + e->dels_len;
    uint64_t id = 0, g;
    for (uint64_t k = 0; k < e->ndel; k++) {
        if (!idx_varint_get(&p, end, &g))     /* checked by the decoder */
            return kv_seterr(err, KVFTS_ECORRUPT, "corrupt deletions");
        id += g;
        (*ids)[k] = (uint32_t)id;
    }
    return KVFTS_OK;
}

/* ---- dictionary chunks --------------------------------------------------- */

void idx_chunk_it_init(idx_chunk_it *it)
{
    memset(it, 0, sizeof *it);
}

void idx_chunk_it_free(idx_chunk_it *it)
{
    kv_buf_free(&it->term);
    memset(it, 0, sizeof *it);
}

int idx_chunk_open(idx_chunk_it *it, const char *buf, size_t len,
                   kv_err *err)
{
    const unsigned char *p = (const unsigned char *)buf, *end = p + len;
    uint32_t n, ord;
    if (len < 1 || p[0] != IDX_VERSION)
        goto bad;
    p++;
    if (!get_u32(&p, end, (uint32_t)len, &n) || n == 0 ||
        !get_u32(&p, end, UINT32_MAX - n, &ord))
        goto bad;
    it->p = p;
    it->end = end;
    it->left = n;
    it->ord = ord - 1;     /* the first next() makes it ord */
    kv_buf_reset(&it->term);
    return KVFTS_OK;
bad:
    return kv_seterr(err, KVFTS_ECORRUPT, "corrupt dictionary chunk (%zu "
                     "bytes)", len);
}

int idx_chunk_next(idx_chunk_it *it, kv_err *err)
{
    if (it->left == 0)
        return it->p == it->end ? KVFTS_ITEROVER
                                : kv_seterr(err, KVFTS_ECORRUPT, "corrupt "
                                            "dictionary chunk (trailing "
                                            "bytes)");
    uint64_t shared, sl, bl;
    const unsigned char *p = it->p;
    if (!idx_varint_get(&p, it->end, &shared) || shared > it->term.len ||
        !idx_varint_get(&p, it->end, &sl) ||
        sl > (uint64_t)(it->end - p) || shared + sl == 0)
        goto bad;
    it->term.len = (size_t)shared;
    it->shared = (size_t)shared;
    int rc = kv_buf_append(&it->term, p, (size_t)sl, err);
    if (rc)
        return rc;
    p += sl;
    if (!idx_varint_get(&p, it->end, &bl) || bl > (uint64_t)(it->end - p))
        goto bad;
    it->body = (const char *)p;
    it->body_len = (size_t)bl;
    it->p = p + bl;
    it->left--;
    it->ord++;
    return KVFTS_OK;
bad:
    return kv_seterr(err, KVFTS_ECORRUPT, "corrupt dictionary chunk (entry "
                     "%u)", it->ord + 1);
}

void idx_chunk_w_init(idx_chunk_w *c)
{
    memset(c, 0, sizeof *c);
}

void idx_chunk_w_free(idx_chunk_w *c)
{
    kv_buf_free(&c->buf);
    kv_buf_free(&c->first);
    kv_buf_free(&c->last);
    memset(c, 0, sizeof *c);
}

void idx_chunk_w_reset(idx_chunk_w *c, uint32_t ord0)
{
    kv_buf_reset(&c->buf);
    kv_buf_reset(&c->first);
    kv_buf_reset(&c->last);
    c->n = 0;
    c->ord0 = ord0;
}

int idx_chunk_w_add(idx_chunk_w *c, const char *term, size_t tlen,
                    const char *body, size_t blen, kv_err *err)
{
    size_t shared = 0, m = tlen < c->last.len ? tlen : c->last.len;
    while (shared < m && c->last.data[shared] == term[shared])
        shared++;
    int rc = KVFTS_OK;
    if (c->n == 0) {
        shared = 0;
        kv_buf_reset(&c->first);
        rc = kv_buf_append(&c->first, term, tlen, err);
    }
    if (!rc)
        rc = idx_buf_varint(&c->buf, shared, err);
    if (!rc)
        rc = idx_buf_varint(&c->buf, tlen - shared, err);
    if (!rc)
        rc = kv_buf_append(&c->buf, term + shared, tlen - shared, err);
    if (!rc)
        rc = idx_buf_varint(&c->buf, blen, err);
    if (!rc)
        rc = kv_buf_append(&c->buf, body, blen, err);
    if (!rc) {
        kv_buf_reset(&c->last);
        rc = kv_buf_append(&c->last, term, tlen, err);
    }
    if (!rc)
        c->n++;
    return rc;
}

int idx_chunk_w_finish(idx_chunk_w *c, kv_buf *out, kv_err *err)
{
    kv_buf_reset(out);
    int rc = kv_buf_reserve(out, 1 + 20 + c->buf.len, err);
    if (rc)
        return rc;
    out->data[0] = IDX_VERSION;
    out->len = 1;
    rc = idx_buf_varint(out, c->n, err);
    if (!rc)
        rc = idx_buf_varint(out, c->ord0, err);
    if (!rc)
        rc = kv_buf_append(out, c->buf.data, c->buf.len, err);
    return rc;
}

/* ---- the segment list ---------------------------------------------------- */

void idx_segs_free(idx_segs *s)
{
    kv_free(s->v);
    memset(s, 0, sizeof *s);
}

int idx_segs_push(idx_segs *s, const idx_seg *g, kv_err *err)
{
    int rc = idx__grow(&s->v, &s->cap, (uint64_t)s->n + 1, sizeof *s->v,
                       err);
    if (!rc)
        s->v[s->n++] = *g;
    return rc;
}

/* Ids come from a sequence (segs.db, beside the list), so every own file
 * is new; age is the segment list's order, never the id's. */
int idx_seg_new_id(kv_txn *txn, bool own, uint32_t *id, kv_err *err)
{
    uint64_t n;
    int rc = kv_seq_next_in(txn, KV_SEGS, IDX_SEG_SEQ, UINT64_MAX, &n, err);
    if (!rc && (n == 0 || n >= KV_PART_OWN))
        rc = kv_seterr(err, KVFTS_ERROR, "segment ids exhausted");
    if (!rc)
        *id = (uint32_t)n | (own ? KV_PART_OWN : 0);
    return rc;
}

int idx_segs_decode(idx_segs *s, const char *buf, size_t len, kv_err *err)
{
    const unsigned char *p = (const unsigned char *)buf, *end = p + len;
    uint32_t n;
    s->n = 0;
    if (len < 1 || p[0] != IDX_VERSION)
        goto bad;
    p++;
    if (!get_u32(&p, end, (uint32_t)len, &n))
        goto bad;
    for (uint32_t i = 0; i < n; i++) {
        idx_seg g;
        uint32_t span;
        if (!get_u32(&p, end, UINT32_MAX, &g.id) || g.id == 0 ||
            !get_u32(&p, end, 64, &g.level) ||
            !idx_varint_get(&p, end, &g.docs) ||
            !idx_varint_get(&p, end, &g.dels) ||
            !idx_varint_get(&p, end, &g.terms) ||
            !idx_varint_get(&p, end, &g.bytes) ||
            !get_u32(&p, end, UINT32_MAX, &g.min_id) ||
            !get_u32(&p, end, UINT32_MAX - g.min_id, &span))
            goto bad;
        g.max_id = g.min_id + span;
        for (uint32_t j = 0; j < s->n; j++)
            if (s->v[j].id == g.id)
                goto bad;
        int rc = idx_segs_push(s, &g, err);
        if (rc)
            return rc;
    }
    if (p != end)
        goto bad;
    return KVFTS_OK;
bad:
    s->n = 0;
    return kv_seterr(err, KVFTS_ECORRUPT, "corrupt segment list (%zu bytes)",
                     len);
}

int idx_segs_encode(const idx_segs *s, kv_buf *out, kv_err *err)
{
    kv_buf_reset(out);
    int rc = kv_buf_append(out, "\x02", 1, err);
    if (!rc)
        rc = idx_buf_varint(out, s->n, err);
    for (uint32_t i = 0; !rc && i < s->n; i++) {
        const idx_seg *g = &s->v[i];
        uint64_t v[8] = { g->id, g->level, g->docs, g->dels, g->terms,
                          g->bytes, g->min_id, g->max_id - g->min_id };
        for (int k = 0; !rc && k < 8; k++)
            rc = idx_buf_varint(out, v[k], err);
    }
    return rc;
}

int idx_segs_read(idx_segs *s, kv_txn *txn, bool for_update, kv_err *err)
{
    kv_buf v = KV_BUF_INIT;
    int rc = kv_get(txn, KV_SEGS, IDX_SEGS_KEY, strlen(IDX_SEGS_KEY), &v,
                    for_update, err);
    if (rc == KVFTS_ENOTFOUND) {
        s->n = 0;
        rc = KVFTS_OK;
    } else if (!rc) {
        rc = idx_segs_decode(s, v.data, v.len, err);
    }
    kv_buf_free(&v);
    if (!rc) {
        /* This process may let go of the files of segments no longer
         * listed, so that their removal can proceed. */
        uint32_t stack[64];
        uint32_t *ids = s->n <= 64 ? stack : kv_malloc(s->n * sizeof *ids);
        if (!ids)
            return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        for (uint32_t i = 0; i < s->n; i++)
            ids[i] = s->v[i].id;
        kv_parts_retain(txn, ids, s->n);
        if (ids != stack)
            kv_free(ids);
    }
    return rc;
}

int idx_segs_write(const idx_segs *s, kv_txn *txn, kv_err *err)
{
    kv_buf v = KV_BUF_INIT;
    int rc = idx_segs_encode(s, &v, err);
    if (!rc)
        rc = kv_put(txn, KV_SEGS, IDX_SEGS_KEY, strlen(IDX_SEGS_KEY), v.data,
                    v.len, err);
    kv_buf_free(&v);
    return rc;
}

/* ---- segments to remove (segs.db "dropq") -------------------------------- */

/* version 1 | varint count | varint ids */
int idx_dropq_read(kv_txn *txn, bool for_update, uint32_t **ids,
                   uint32_t *n, kv_err *err)
{
    *ids = NULL;
    *n = 0;
    kv_buf v = KV_BUF_INIT;
    int rc = kv_get(txn, KV_SEGS, IDX_DROPQ_KEY, strlen(IDX_DROPQ_KEY), &v,
                    for_update, err);
    if (rc == KVFTS_ENOTFOUND) {
        kv_buf_free(&v);
        return KVFTS_OK;
    }
    const unsigned char *p = (const unsigned char *)v.data, *end = p + v.len;
    uint64_t cnt = 0;
    if (!rc && (v.len < 1 || *p++ != 1 || !idx_varint_get(&p, end, &cnt) ||
                cnt > v.len))
        rc = kv_seterr(err, KVFTS_ECORRUPT, "corrupt list of segments to "
                       "remove (%zu bytes)", v.len);
    if (!rc && cnt && !(*ids = kv_calloc(cnt, sizeof **ids)))
        rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    for (uint64_t i = 0; !rc && i < cnt; i++) {
        uint64_t id;
        if (!idx_varint_get(&p, end, &id) || id == 0 || id > UINT32_MAX)
            rc = kv_seterr(err, KVFTS_ECORRUPT, "corrupt list of segments "
                           "to remove");
        else
            (*ids)[(*n)++] = (uint32_t)id;
    }
    kv_buf_free(&v);
    if (rc) {
        kv_free(*ids);
        *ids = NULL;
        *n = 0;
    }
    return rc;
}

static int dropq_write(kv_txn *txn, const uint32_t *ids, uint32_t n,
                       kv_err *err)
{
    if (!n) {
        int rc = kv_del(txn, KV_SEGS, IDX_DROPQ_KEY, strlen(IDX_DROPQ_KEY),
                        err);
        return rc == KVFTS_ENOTFOUND ? KVFTS_OK : rc;
    }
    kv_buf v = KV_BUF_INIT;
    int rc = kv_buf_append(&v, "\x01", 1, err);
    if (!rc)
        rc = idx_buf_varint(&v, n, err);
    for (uint32_t i = 0; !rc && i < n; i++)
        rc = idx_buf_varint(&v, ids[i], err);
    if (!rc)
        rc = kv_put(txn, KV_SEGS, IDX_DROPQ_KEY, strlen(IDX_DROPQ_KEY),
                    v.data, v.len, err);
    kv_buf_free(&v);
    return rc;
}

static int dropq_add(kv_txn *txn, const uint32_t *add, uint32_t nadd,
                     kv_err *err)
{
    uint32_t *ids, n;
    int rc = idx_dropq_read(txn, true, &ids, &n, err);
    uint32_t *all = NULL;
    if (!rc && !(all = kv_calloc((size_t)n + nadd + 1, sizeof *all)))
        rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    if (!rc) {
        if (n)
            memcpy(all, ids, n * sizeof *all);
        if (nadd)
            memcpy(all + n, add, nadd * sizeof *all);
        rc = dropq_write(txn, all, n + nadd, err);
    }
    kv_free(all);
    kv_free(ids);
    return rc;
}

int idx_seg_remove(kv_txn *txn, uint32_t seg, kv_err *err)
{
    if (seg & KV_PART_OWN)
        return dropq_add(txn, &seg, 1, err);
    unsigned char pfx[4];     /* a small one shares its file */
    kv_put_be32(pfx, seg);
    int rc = kv_del_prefix(txn, KV_POSTINGS, pfx, 4, err);
    if (!rc)
        rc = kv_del_prefix(txn, KV_TERMS, pfx, 4, err);
    return rc;
}

typedef struct sweep {
    uint32_t *ids, n;        /* read: the list; forget: the ones gone */
} sweep;

static int sweep_read(kv_txn *txn, void *payload, kv_err *err)
{
    sweep *w = payload;
    kv_free(w->ids);
    return idx_dropq_read(txn, false, &w->ids, &w->n, err);
}

static int sweep_forget(kv_txn *txn, void *payload, kv_err *err)
{
    const sweep *gone = payload;
    uint32_t *ids, n, k = 0;
    int rc = idx_dropq_read(txn, true, &ids, &n, err);
    for (uint32_t i = 0; !rc && i < n; i++) {
        bool g = false;
        for (uint32_t j = 0; j < gone->n && !g; j++)
            g = gone->ids[j] == ids[i];
        if (!g)
            ids[k++] = ids[i];
    }
    if (!rc && k != n)
        rc = dropq_write(txn, ids, k, err);
    kv_free(ids);
    return rc;
}

int idx_drop_sweep(kv_env *env, uint32_t *left, kv_err *err)
{
    sweep w = { NULL, 0 }, gone = { NULL, 0 };
    *left = 0;
    int rc = kv_txn_run(env, false, sweep_read, &w, err);
    if (!rc && w.n && !(gone.ids = kv_calloc(w.n, sizeof *gone.ids)))
        rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    for (uint32_t i = 0; !rc && i < w.n; i++) {
        kv_err e2 = KV_ERR_INIT;
        int r = kv_part_remove(env, w.ids[i], &e2);
        if (r == KVFTS_OK)
            gone.ids[gone.n++] = w.ids[i];
        else if (r == KVFTS_EBUSY)
            ++*left;                 /* a reader has it open: later */
        else
            rc = kv_seterr(err, r, "%s", e2.msg);
    }
    if (gone.n) {
        kv_err e2 = KV_ERR_INIT;
        int r = kv_txn_run(env, true, sweep_forget, &gone, &e2);
        if (r && !rc)
            rc = kv_seterr(err, r, "%s", e2.msg);
    }
    kv_free(w.ids);
    kv_free(gone.ids);
    return rc;
}

/* ---- document lengths and field records --------------------------------- */

/* A record's documents share a shape (their field ids) with the one
 * before when they can: a corpus's documents mostly have the same fields,
 * so a document costs its id gap and its lengths, about a byte each. */
static bool same_shape(const idx_len *a, uint32_t na, const idx_len *b,
                       uint32_t nb)
{
    if (na != nb)
        return false;
    for (uint32_t i = 0; i < na; i++)
        if (a[i].field_id != b[i].field_id)
            return false;
    return true;
}

int idx_lens_encode(uint32_t base, const idx_doclen *docs, uint32_t n,
                    const idx_len *lens, kv_buf *out, kv_err *err)
{
    kv_buf_reset(out);
    size_t need = 1;
    for (uint32_t i = 0; i < n; i++)
        need += 5 + 5 + (size_t)docs[i].n * 10;
    int rc = kv_buf_reserve(out, need, err);
    if (rc)
        return rc;
    unsigned char *p = (unsigned char *)out->data;
    size_t k = 0;
    p[k++] = IDX_LENS_VERSION;
    uint32_t next = base;
    const idx_len *shape = NULL;
    uint32_t nshape = 0;
    for (uint32_t i = 0; i < n; i++) {
        const idx_len *l = lens + docs[i].off;
        if (docs[i].docid < next || docs[i].docid - base >= IDX_LENS_SPAN)
            return kv_seterr(err, KVFTS_ERROR, "length record of %u: id %u "
                             "out of order", base, docs[i].docid);
        bool same = same_shape(shape, nshape, l, docs[i].n);
        k += idx_varint_put(p + k, (uint64_t)(docs[i].docid - next) << 1 |
                                   same);
        if (!same) {
            k += idx_varint_put(p + k, docs[i].n);
            for (uint32_t j = 0; j < docs[i].n; j++)
                k += idx_varint_put(p + k, l[j].field_id);
        }
        for (uint32_t j = 0; j < docs[i].n; j++)
            k += idx_varint_put(p + k, l[j].len);
        shape = l;
        nshape = docs[i].n;
        next = docs[i].docid + 1;
    }
    out->len = k;
    return KVFTS_OK;
}

int idx_lens_open(idx_lens_it *it, const char *buf, size_t len, uint32_t base,
                  kv_err *err)
{
    memset(it, 0, sizeof *it);
    if (len < 1 || (unsigned char)buf[0] != IDX_LENS_VERSION ||
        base % IDX_LENS_SPAN)
        return kv_seterr(err, KVFTS_ECORRUPT, "corrupt document lengths "
                         "record %u", base);
    it->p = (const unsigned char *)buf + 1;
    it->end = (const unsigned char *)buf + len;
    it->base = it->next = base;
    return KVFTS_OK;
}

/* Skip n varints of at most 32 bits. */
static bool skip_u32s(const unsigned char **p, const unsigned char *end,
                      uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        uint32_t v;
        if (!get_u32(p, end, UINT32_MAX, &v))
            return false;
    }
    return true;
}

int idx_lens_next(idx_lens_it *it, bool *more, kv_err *err)
{
    *more = false;
    if (it->p == it->end)
        return KVFTS_OK;
    uint64_t h;
    if (!idx_varint_get(&it->p, it->end, &h) ||
        (h >> 1) >= IDX_LENS_SPAN - (it->next - it->base))
        goto bad;
    it->docid = it->next + (uint32_t)(h >> 1);
    if (!(h & 1)) {               /* a shape of its own */
        if (!get_u32(&it->p, it->end, UINT32_MAX, &it->n) ||
            it->n > (size_t)(it->end - it->p))
            goto bad;
        it->ids = it->p;
        if (!skip_u32s(&it->p, it->end, it->n))
            goto bad;
    }
    it->lens = it->p;
    if (!skip_u32s(&it->p, it->end, it->n))
        goto bad;
    it->next = it->docid + 1;
    *more = true;
    return KVFTS_OK;
bad:
    return kv_seterr(err, KVFTS_ECORRUPT, "corrupt document lengths record "
                     "%u", it->base);
}

int idx_lens_seek(idx_lens_it *it, uint32_t docid, bool *found, kv_err *err)
{
    bool more = true;
    int rc = KVFTS_OK;
    *found = false;
    while (more && !(rc = idx_lens_next(it, &more, err)) && more &&
           it->docid <= docid)
        if (it->docid == docid) {
            *found = true;
            break;
        }
    return rc;
}

/* A varint idx_lens_next has read once already, so it ends in the buffer. */
static uint32_t read_checked(const unsigned char **p)
{
    uint32_t v = 0;
    for (unsigned s = 0;; s += 7) {
        unsigned char c = *(*p)++;
        v |= (uint32_t)(c & 0x7f) << (s & 31);
        if (!(c & 0x80))
            return v;
    }
}

uint32_t idx_lens_field(const unsigned char *ids, const unsigned char *lens,
                        uint32_t n, uint32_t field_id)
{
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id = read_checked(&ids), l = read_checked(&lens);
        if (id == field_id)
            return l;
    }
    return 0;
}

int idx_lens_pairs(const idx_lens_it *it, idx_len **out, uint32_t *n,
                   uint32_t *cap, kv_err *err)
{
    *n = 0;
    int rc = idx__grow(out, cap, (uint64_t)it->n + 1, sizeof **out, err);
    if (rc)
        return rc;
    const unsigned char *ids = it->ids, *lens = it->lens;
    for (uint32_t i = 0; i < it->n; i++) {
        uint32_t id = read_checked(&ids);
        (*out)[i] = (idx_len){ id, read_checked(&lens) };
    }
    *n = it->n;
    return KVFTS_OK;
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
    if (!idx_varint_get(&p, end, &id) || id == 0 || id > (UINT32_MAX >> 2) ||
        !idx_varint_get(&p, end, &f->docs) ||
        !idx_varint_get(&p, end, &f->total_len) || p != end)
        return kv_seterr(err, KVFTS_ECORRUPT, "corrupt field record");
    f->id = (uint32_t)id;
    return KVFTS_OK;
}
