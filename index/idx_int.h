/*
 * index/idx_int.h -- private to index/: the on-disk format (idx_codec.c),
 * the in-memory buffer of a batch (idx_buffer.c), the segment writer
 * (idx_segw.c) and the segment list, shared by the module's files.  Other
 * modules cannot include it: only index/include/ is on their include path.
 *
 * Thread rules: every object here belongs to one thread at a time, but for
 * the shards of the bulk buffer, each owned by one analysis worker while a
 * batch runs and handed back to the writer's thread for a flush
 * (idx_write.c says how).
 */
#ifndef KVFTS_IDX_INT_H
#define KVFTS_IDX_INT_H

#include "index.h"

/* ------------------------------------------------------------------------ */
/* Format constants and keys (idx_codec.c has the essay)                     */

#define IDX_VERSION 2              /* of blocks, entries, chunks, lists */
/** Largest block a decoder accepts (writers keep to IDX_BLOCK_DOCS). */
#define IDX_BLOCK_MAX 4096
/** Spare bytes after every buffer StreamVByte decodes from or into. */
#define IDX_SLACK 32
/** A dictionary chunk is closed once it passes this many bytes: one
 *  overflow page of a segment's terms (4 KiB pages) holds it. */
#define IDX_CHUNK_BYTES 4000
/** A postings block record holds at most this many bytes (unless one
 *  document's postings are larger): Berkeley DB keeps records up to about
 *  1,000 bytes on the B-tree's 4 KiB pages, and gives each larger one
 *  overflow pages of its own, mostly empty for a 1-2 KB block. */
#define IDX_BLOCK_BYTES 1000
/** A term's postings are kept inline in its entry up to this many bytes
 *  (and one block); longer lists go to block records. */
#define IDX_INLINE_MAX 512
/** The longest term: an analyzed one, or a field list's (TOK_LIST_MARK +
 *  an analyzed one). */
#define IDX_TERM_MAX (TOK_MAX_TERM + 1)
#define IDX_FIELD_PREFIX "field::"
#define IDX_LENS_GEN "lensgen"      /* sequence meta "seq::lensgen" */
#define IDX_SEG_SEQ "seg"           /* sequence segs "seq::seg" */
#define IDX_SKIPPED_KEY "stat::skipped_tokens"
#define IDX_SEGS_KEY "segments"     /* segs: the segment list */
#define IDX_MERGE_KEY "merge"       /* segs: a merge under way */
#define IDX_DROPQ_KEY "dropq"       /* segs: segments whose files must go */

/* Term entry flags. */
enum {
    IDX_E_POSITIONS = 1,   /* postings carry positions */
    IDX_E_EXTERNAL = 2,    /* postings in block records, not inline */
    IDX_E_DELS = 4,        /* deletions are recorded */
    IDX_E_ONECOL = 8,      /* one column, every posting one view of it */
    IDX_E_SMALL = 16       /* stored only: 1 to IDX_SMALL_DOCS postings
                              of one view with at most IDX_SMALL_TF
                              positions, in a compact form (idx_codec.c;
                              the count - 1 in the bits from
                              IDX_E_SMALL_SHIFT); decoded as ONECOL with
                              an inline block made from it */
};
#define IDX_E_SMALL_SHIFT 5
/** The most postings an IDX_E_SMALL entry holds. */
#define IDX_SMALL_DOCS 4
/** The largest tf of a posting stored in an IDX_E_SMALL entry. */
#define IDX_SMALL_TF 8
/** Room for the block an IDX_E_SMALL entry decodes to. */
#define IDX_SMALL_BLK 256

/* Block flags. */
enum {
    IDX_B_POSITIONS = 1,
    IDX_B_ONEVIEW = 2      /* every doc has one view, of column index 0 */
};

/* Varints (LEB128: 7 bits a byte, low first).  Inline: the buffer, the
 * segment writer and the decoders read and write several per posting. */
static inline size_t idx_varint_put(unsigned char *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (unsigned char)v;
    return n;
}

/** Read a varint at *p (before end) into *out and step past it; false if
 *  it runs past end or over 64 bits. */
static inline bool idx_varint_get(const unsigned char **p,
                                  const unsigned char *end, uint64_t *out)
{
    if (*p < end && !(**p & 0x80)) {     /* most are one byte */
        *out = *(*p)++;
        return true;
    }
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
/** Append a varint to b. */
int idx_buf_varint(kv_buf *b, uint64_t v, kv_err *err);

/** be32(seg) 'D' TERM: a dictionary chunk's key (first term TERM). */
int idx_key_chunk(kv_buf *key, uint32_t seg, const char *term, size_t tlen,
                  kv_err *err);
/** be32(seg) 'B' be32(ord) be32(first): a postings block's key. */
void idx_key_block(unsigned char key[13], uint32_t seg, uint32_t ord,
                   uint32_t first);
/** "field::NAME" (meta.db) into key. */
int idx_key_field(kv_buf *key, const char *field, size_t flen, kv_err *err);

/* ------------------------------------------------------------------------ */
/* Postings lists and blocks (idx_codec.c)                                   */

/** A list of postings: documents, each with its views (column index in
 *  the term's column table, tf, positions).  Parallel arrays. */
typedef struct idx_plist {
    uint32_t n, cap;       /* documents */
    uint32_t *ids;
    uint32_t *vstart;      /* doc i's views: [vstart[i], vstart[i + 1]) */
    uint32_t nv, vcap;     /* views */
    uint32_t *vcol;        /* column index of each view */
    uint32_t *vtf;         /* its tf */
    uint32_t *poff;        /* its positions: pos[poff[v] .. + vtf[v]) */
    uint32_t np, pcap;
    uint32_t *pos;
    bool positions;
} idx_plist;

void idx_plist_init(idx_plist *l);
void idx_plist_free(idx_plist *l);
void idx_plist_reset(idx_plist *l, bool positions);
/** Room for @p docs more documents, @p views views, @p npos positions. */
int idx_plist_reserve(idx_plist *l, uint32_t docs, uint64_t views,
                      uint64_t npos, kv_err *err);
/** Append document @p id of @p nv views (cols, tfs, positions back to
 *  back, tfs[i] of them each; pos may be NULL without positions). */
int idx_plist_add(idx_plist *l, uint32_t id, uint32_t nv,
                  const uint32_t *cols, const uint32_t *tfs,
                  const uint32_t *pos, kv_err *err);
/** Append document i of @p from, its columns mapped through @p colmap
 *  (NULL: as they are). */
int idx_plist_copy_doc(idx_plist *to, const idx_plist *from, uint32_t i,
                       const uint32_t *colmap, kv_err *err);
/** Append documents [i, j) of @p from, as idx_plist_copy_doc each, in one
 *  reservation and a few copies (idx_plist_copy_doc is its one-document
 *  case). */
int idx_plist_copy_range(idx_plist *to, const idx_plist *from, uint32_t i,
                         uint32_t j, const uint32_t *colmap, kv_err *err);

/* How much of a block is decoded: ids; views and tfs; positions. */
enum { IDX_DEC_IDS = 0, IDX_DEC_VIEWS = 1, IDX_DEC_POS = 2 };
/* OR'ed into idx_block_decode's level (what idx_block_trust said of an
 * earlier decode of the same bytes): every stream's size was checked, so
 * this decode does not check them (TRUSTED); the views' checks passed too
 * (columns in range and ascending, the block's summaries), so it skips
 * those (TRUSTED_VIEWS, with TRUSTED). */
#define IDX_DEC_TRUSTED 0x100
#define IDX_DEC_TRUSTED_VIEWS 0x200
/* OR'ed into it: the bytes are kept (a cache's), so that a decode a
 * document at a time checks the position stream's size whole as well,
 * for the later decodes to be trusted. */
#define IDX_DEC_CACHED 0x400
/* A block is decoded whole, positions included, once a reader looks at
 * one in IDX_BLOCK_WHOLE of its documents (fewer: a document at a time). */
#define IDX_BLOCK_WHOLE 16

/** A decoded block: a plist plus the state of a lazy decode. */
typedef struct idx_block {   /* its buffers: see idx_block_recycle() */
    idx_plist l;
    uint32_t max_tf;       /* largest sum of a document's view tfs */
    uint64_t colmask;      /* bit c & 63 for each column index c present
                              (bit 63: an index >= 63) */
    bool oneview;
    uint32_t ncols;        /* the term's column table size */
    int decoded;           /* IDX_DEC_* */
    unsigned char *tmp;    /* the streams (+ slack) decoded from */
    size_t tmpcap;
    size_t idb, vcb, vxb, tfb, posb;
    uint32_t *scratch;     /* view counts */
    uint32_t scap;
    bool cols;             /* l.vstart and l.vcol are decoded (l.nv set),
                              maybe not the tfs yet */
    bool bydoc;            /* a document at a time: l.vstart, l.vtf and
                              l.poff are decoded for every document, the
                              columns and positions of those with pconv[i]
                              (the phrase's candidates) */
    uint32_t ndoc;         /* documents asked for their positions */
    bool dense;            /* the cursor's last block was asked for many:
                              this one is decoded whole */
    uint32_t vk, pk;       /* where the walks of the column and position
                              streams are: at value vk (pk), whose data
                              starts at byte vat (pat) */
    size_t vat, pat;
    bool gaps;             /* l.pos holds the position stream and l.poff
                              its views' offsets; documents with pconv[i]
                              have positions, the others still gaps */
    uint8_t *pconv;
    uint32_t pccap;
    uint8_t *first;        /* per view: a document's first (decode_views) */
    uint32_t fcap;
    uint32_t npos;         /* the views' tfs summed (decode_views) */
    bool trusted;          /* decoded with IDX_DEC_TRUSTED */
    bool trusted_views;    /* and IDX_DEC_TRUSTED_VIEWS */
    bool cached;           /* decoded with IDX_DEC_CACHED */
    uint8_t checked;       /* the streams whose sizes were checked (bits of
                              idx_codec.c's CK_*) */
} idx_block;

void idx_block_init(idx_block *b);
void idx_block_free(idx_block *b);
/** As a new block, its buffers kept for the next use (a buffer added to
 *  idx_block must be named there, or a recycled block drops it). */
void idx_block_recycle(idx_block *b);
/** The bytes its buffers hold. */
size_t idx_block_bytes(const idx_block *b);
/** The trust (IDX_DEC_TRUSTED, with IDX_DEC_TRUSTED_VIEWS, or 0) a later
 *  decode of the same bytes may be given after this one: TRUSTED once
 *  every stream's size was checked (by this decode or, trusted, an earlier
 *  one), TRUSTED_VIEWS once the views' checks passed as well. */
int idx_block_trust(const idx_block *b);
/** The span (last id - first id), max_tf and column mask of a stored
 *  block from its header alone; false if the header is damaged. */
bool idx_block_peek(const char *buf, size_t len, uint32_t *span,
                    uint32_t *max_tf, uint64_t *colmask);
/** Decode a stored block whose first id is @p first, up to @p level (and
 *  the IDX_DEC_TRUSTED* flags: the checks they name are skipped); @p ncols:
 *  the term's column table size (views must index it).  KVFTS_ECORRUPT on
 *  any inconsistency. */
int idx_block_decode(idx_block *b, uint32_t first, const char *buf,
                     size_t len, uint32_t ncols, int level, kv_err *err);
/** Decode the views' columns (l.vstart, l.vcol) of the last decoded
 *  block, if not yet: what a field's filter needs, without the tfs. */
int idx_block_need_cols(idx_block *b, kv_err *err);
/** Decode more of the last decoded block. */
int idx_block_need(idx_block *b, int level, kv_err *err);
/** Decode document @p i's positions (and every document's views) only:
 *  a phrase looks at few documents of a block. */
int idx_block_need_doc(idx_block *b, uint32_t i, kv_err *err);
/** Decode every document's views and the position stream, leaving each
 *  document's positions as gaps until idx_block_doc_positions: a phrase
 *  that looks at many of a block's documents, but not all. */
int idx_block_need_gaps(idx_block *b, kv_err *err);
int idx_block_doc_positions(idx_block *b, uint32_t i, kv_err *err);
/** One term of a phrase checked in its block (idx_blocks_phrase); a
 *  repeated word's terms may share a block. */
typedef struct idx_phrase_term {
    const idx_block *b;    /* views and gaps decoded (idx_block_need_gaps) */
    const uint32_t *fid;   /* per column index: its field + 1, 0 when the
                              column is not selected */
    uint32_t off;          /* its offset in the phrase */
    uint32_t *idx;         /* per candidate kept: its index in b */
    bool dup;              /* an earlier term's word: the same idx */
    uint32_t *scr;         /* a word said twice in a row: room for its
                              block's positions + views + 2 (blocks_self1),
                              else NULL */
    /* the walk's state */
    uint32_t at, vat;      /* the document, the view */
    uint32_t ws, wk, we, wval;  /* the view's positions: first, next, end;
                                   the last read */
    bool wconv, bad;
} idx_phrase_term;
/** Keep of cand[0..m) (ascending) the ids every term's block has, in
 *  place (their ids alone are read), and their indexes in each block in
 *  t[i].idx (a dup's is its first term's); returns how many.  @p keep:
 *  room for m; @p map: for IDX_PHRASE_MAP.  A block has fewer than 2^16
 *  documents (IDX_BLOCK_MAX). */
#define IDX_PHRASE_MAP 8192
uint32_t idx_blocks_common(idx_phrase_term *t, size_t n, uint32_t *cand,
                           uint32_t m, uint32_t *keep, uint16_t *map);
/** Add to *@p count the m documents kept by idx_blocks_common that hold
 *  the phrase in one field; with @p pf, also each one's phrase frequency
 *  (pf[j]: occurrences in all its fields, 0 if none), which needs 2 to
 *  IDX_PHRASE_LOCAL terms.  The blocks have their views and gaps decoded
 *  (idx_block_need_gaps). */
#define IDX_PHRASE_LOCAL 8
int idx_blocks_phrase(idx_phrase_term *t, size_t n, uint32_t m,
                      uint32_t *pf, uint64_t *count, kv_err *err);
/** True when document @p i's positions are decoded. */
bool idx_block_has_positions(const idx_block *b, uint32_t i);
/** True when document @p i's views (columns, tfs) are decoded. */
bool idx_block_has_views(const idx_block *b, uint32_t i);
/** Encode documents [from, to) of @p l as a block (appended to @p out);
 *  @p scratch is reused between calls. */
int idx_block_encode(const idx_plist *l, uint32_t from, uint32_t to,
                     kv_buf *out, kv_buf *scratch, kv_err *err);

/* StreamVByte (idx_svb.c): decode @p count values of a standard (1234)
 * stream, as they are, or (delta) as gaps added up from @p prev.  Reads up
 * to 16 bytes past the stream: @p in needs IDX_SLACK spare bytes.  Check
 * the stream with idx_svb_size() first. */
void idx_svb_decode(const unsigned char *in, uint32_t *out, uint32_t count);
void idx_svb_delta_decode(const unsigned char *in, uint32_t *out,
                          uint32_t count, uint32_t prev);
/** The same for a 0124-coded stream (term frequencies). */
void idx_svb_decode_0124(const unsigned char *in, uint32_t *out,
                         uint32_t count);
/** The plain C decoder alone (what runs without SSSE3), for tests. */
void idx__svb_decode_c(const unsigned char *in, uint32_t *out,
                       uint32_t count, bool delta, uint32_t prev);
/** Data bytes of values [@p from, @p to) of a standard stream whose
 *  control bytes start at @p ctrl.  Reads the control bytes a word (8) at
 *  a time: up to 7 bytes past them (the stream's data, or IDX_SLACK). */
size_t idx_svb_span(const unsigned char *ctrl, uint32_t from, uint32_t to);
/** Values [@p from, @p to) of a standard stream into out[from .. to),
 *  their data starting at @p data: reads idx_svb_span() bytes exactly. */
void idx_svb_decode_range(const unsigned char *ctrl,
                          const unsigned char *data, uint32_t *out,
                          uint32_t from, uint32_t to);
/** Encode @p count values as a standard (1234) stream at @p out, as
 *  libstreamvbyte's streamvbyte_encode() does (byte for byte); the delta
 *  form encodes gaps from @p prev, the 0124 form term frequencies.  Each
 *  returns the stream's bytes; @p out needs idx_svb_max_bytes(count). */
size_t idx_svb_encode(const uint32_t *in, uint32_t count, unsigned char *out);
size_t idx_svb_delta_encode(const uint32_t *in, uint32_t count,
                            uint32_t prev, unsigned char *out);
size_t idx_svb_encode_0124(const uint32_t *in, uint32_t count,
                           unsigned char *out);
/** The most bytes a stream of @p count values takes. */
size_t idx_svb_max_bytes(uint32_t count);
/** Size of a StreamVByte stream of @p count values from its control bytes,
 *  or SIZE_MAX if the control bytes are not all in @p avail. */
size_t idx_svb_size(const unsigned char *in, size_t avail, uint32_t count,
                    bool is0124);

/* ------------------------------------------------------------------------ */
/* Term entries and dictionary chunks (idx_codec.c)                          */

/** A term's entry in one segment, decoded.  Arrays are owned and reused
 *  across decodes; pointers into the record are borrowed from it. */
typedef struct idx_entry {
    uint32_t flags;        /* IDX_E_* */
    uint32_t ncols, ccap;
    uint32_t *cols;        /* the term's columns (global ids), ascending */
    uint64_t *df;          /* per column: postings with a view in it */
    uint64_t *ndelc;       /* per column: deletions with a view in it */
    uint64_t df_all;       /* postings with a view in an `_all` column */
    uint64_t ndocs;        /* postings (documents) */
    uint64_t ndel;         /* deletions */
    uint64_t ndel_all;     /* deletions of `_all` documents */
    const unsigned char *dels;  /* ndel ids as gaps (varints) */
    size_t dels_len;
    uint32_t first, last;  /* id range of the postings (ndocs > 0) */
    uint32_t max_tf;       /* largest block max_tf */
    uint32_t nblocks;      /* external: block records */
    const char *blk;       /* inline: the block */
    size_t blk_len;
    unsigned char sblk[IDX_SMALL_BLK];  /* blk of an IDX_E_SMALL entry */
    /* An IDX_E_SMALL entry's postings as stored (nsmall 0: another),
     * for readers that want ids and tfs alone without decoding blk. */
    uint32_t nsmall;
    uint32_t sids[IDX_SMALL_DOCS], stf[IDX_SMALL_DOCS];
    uint32_t snpos;        /* and its position gaps, from which */
    uint32_t sgaps[IDX_SMALL_DOCS * IDX_SMALL_TF];  /* idx_entry_block
                                                       makes its blk */
} idx_entry;

void idx_entry_init(idx_entry *e);
void idx_entry_free(idx_entry *e);
int idx_entry_decode(idx_entry *e, const char *buf, size_t len, kv_err *err);
/** The same, but a compact entry's block is not made (blk NULL) until
 *  idx_entry_block: for readers of nsmall/sids/stf (a prefix's expansion,
 *  counts of a dictionary walk). */
int idx_entry_decode_lazy(idx_entry *e, const char *buf, size_t len,
                          kv_err *err);
/** Make a lazily decoded compact entry's blk (no-op otherwise). */
void idx_entry_block(idx_entry *e);
/** Encode @p e (cols, df, ndelc, counts, dels, inline block or external
 *  summary) appended to @p out. */
int idx_entry_encode(const idx_entry *e, kv_buf *out, kv_err *err);
/** Index of global column @p col in e's table, or -1. */
long idx_entry_col(const idx_entry *e, uint32_t col);
/** Decode the deletion ids of @p e into @p ids (reset first). */
int idx_entry_dels(const idx_entry *e, uint32_t **ids, uint32_t *cap,
                   kv_err *err);

/** Walks the entries of a dictionary chunk in term order. */
typedef struct idx_chunk_it {
    const unsigned char *p, *end;
    uint32_t left;         /* entries not read yet */
    uint32_t ord;          /* ordinal of the current entry */
    size_t shared;         /* bytes it shares with the previous term */
    kv_buf term;           /* the current term */
    const char *body;      /* the current entry */
    size_t body_len;
} idx_chunk_it;

void idx_chunk_it_init(idx_chunk_it *it);
void idx_chunk_it_free(idx_chunk_it *it);
/** Start walking chunk @p buf (borrowed while walking). */
int idx_chunk_open(idx_chunk_it *it, const char *buf, size_t len,
                   kv_err *err);
/** The next entry; KVFTS_ITEROVER after the last. */
int idx_chunk_next(idx_chunk_it *it, kv_err *err);

/** Builds chunks: entries appended in term order. */
typedef struct idx_chunk_w {
    kv_buf buf;            /* header is written at the end */
    kv_buf first;          /* first term */
    kv_buf last;           /* last term, for prefix sharing */
    uint32_t n, ord0;
} idx_chunk_w;

void idx_chunk_w_init(idx_chunk_w *c);
void idx_chunk_w_free(idx_chunk_w *c);
void idx_chunk_w_reset(idx_chunk_w *c, uint32_t ord0);
int idx_chunk_w_add(idx_chunk_w *c, const char *term, size_t tlen,
                    const char *body, size_t blen, kv_err *err);
/** The finished chunk (version, count, first ordinal, entries) into out. */
int idx_chunk_w_finish(idx_chunk_w *c, kv_buf *out, kv_err *err);

/* ------------------------------------------------------------------------ */
/* The segment list (idx_codec.c)                                            */

enum { IDX_SEG_ONE = 1 };  /* flags: nothing */

typedef struct idx_seg {
    uint32_t id;
    uint32_t level;        /* merge tier it was made at */
    uint64_t docs;         /* postings-bearing documents added */
    uint64_t dels;         /* deletion records */
    uint64_t terms;        /* entries */
    uint64_t bytes;        /* size of its records */
    uint32_t min_id, max_id;  /* ids it adds postings for (docs > 0) */
} idx_seg;

/** The segments of the index, oldest first. */
typedef struct idx_segs {
    uint32_t n, cap;
    idx_seg *v;
} idx_segs;

void idx_segs_free(idx_segs *s);
int idx_segs_decode(idx_segs *s, const char *buf, size_t len, kv_err *err);
int idx_segs_encode(const idx_segs *s, kv_buf *out, kv_err *err);
/** Read the list in txn (empty when there is none). */
int idx_segs_read(idx_segs *s, kv_txn *txn, bool for_update, kv_err *err);
int idx_segs_write(const idx_segs *s, kv_txn *txn, kv_err *err);
int idx_segs_push(idx_segs *s, const idx_seg *g, kv_err *err);
/** A segment of about this many bytes or more is a file of its own
 *  (KV_PART_OWN), removed whole when a merge replaces it; a smaller one
 *  shares a file with the others, and its records are deleted: at most a
 *  merge's MERGE_FACTOR inputs' worth (2.5 MB) in one transaction.  (At 1 MB,
 *  once compact entries made 32k-document segments of single-document
 *  writes smaller than that, a merge deleted 7 MB of the shared file at
 *  once, and under MVCC with a 4 MiB cache the page versions it left kept
 *  a third more mutexes in use from then on: unit.commits.) */
#define IDX_OWN_BYTES (1u << 18)
/** The merge level of a batch's new segment of @p bytes, to be added at
 *  the young end of @p list, whose younger segments of lower levels are
 *  raised to it (idx_merge.c). */
uint32_t idx_seg_level(idx_segs *list, uint64_t bytes);
/** The id of a new segment (a merge's or a flush's); @p own: a file of its
 *  own. */
int idx_seg_new_id(kv_txn *txn, bool own, uint32_t *id, kv_err *err);
/** Segment @p seg is no longer listed as of @p txn: delete its records
 *  now (a small segment) or put its file on the list of those
 *  idx_drop_sweep() removes. */
int idx_seg_remove(kv_txn *txn, uint32_t seg, kv_err *err);
/** Give up a merge under way (idx_merge.c): its output's file is put on
 *  the list of those to remove. */
int idx_merge_cancel(kv_txn *txn, kv_err *err);
/** Keep, of the segment files @p files (*@p n of them, kv_parts_list()),
 *  those that belong to no segment: not listed in @p s, not a merge's
 *  output under way, not waiting for removal, and made before @p txn's
 *  snapshot (idx_merge.c).  *@p n becomes their number. */
int idx_seg_strays(kv_txn *txn, const idx_segs *s, uint32_t *files,
                   size_t *n, kv_err *err);
/** The segments whose files are still to be removed (meta "dropq";
 *  kv_free() *@p ids). */
int idx_dropq_read(kv_txn *txn, bool for_update, uint32_t **ids,
                   uint32_t *n, kv_err *err);

/* ------------------------------------------------------------------------ */
/* Lengths and field records (idx_codec.c)                                   */

typedef struct idx_len {
    uint32_t field_id;
    uint32_t len;
} idx_len;
/* doclens.db holds a record per span of IDX_LENS_SPAN document ids (the
 * layout is in idx_codec.c). */
#define IDX_LENS_SPAN 64u
#define IDX_LENS_VERSION 2
static inline uint32_t idx_lens_base(uint32_t docid)
{
    return docid & ~(IDX_LENS_SPAN - 1);
}
typedef struct idx_doclen idx_doclen;
/** The record of span @p base: docs[0..n) in ascending id order, each
 *  with its pairs lens[off .. off + n). */
int idx_lens_encode(uint32_t base, const idx_doclen *docs, uint32_t n,
                    const idx_len *lens, kv_buf *out, kv_err *err);
/** A span record's documents, read one by one (idx_lens_next checks each;
 *  the pointers are into the record). */
typedef struct idx_lens_it {
    const unsigned char *p, *end;
    uint32_t base, next;  /* the span; the smallest id the next can have */
    uint32_t docid, n;    /* the current document; its fields */
    const unsigned char *ids;   /* their ids: n varints (its own, or an
                                   earlier document's) */
    const unsigned char *lens;  /* their lengths: n varints */
} idx_lens_it;
int idx_lens_open(idx_lens_it *it, const char *buf, size_t len, uint32_t base,
                  kv_err *err);
/** The next document (*more false after the last). */
int idx_lens_next(idx_lens_it *it, bool *more, kv_err *err);
/** On to document docid (*found false: the record has none). */
int idx_lens_seek(idx_lens_it *it, uint32_t docid, bool *found, kv_err *err);
/** Length of field_id in a document idx_lens_next has read (0 if absent). */
uint32_t idx_lens_field(const unsigned char *ids, const unsigned char *lens,
                        uint32_t n, uint32_t field_id);
/** Document docid's entry, *it on it (*found false: none).  *span holds
 *  the record of span *span_base, read again only when docid is in another
 *  (a *span_base of 1 is no span's: read). */
int idx_lens_lookup(kv_txn *txn, uint32_t docid, kv_buf *span,
                    uint32_t *span_base, idx_lens_it *it, bool *found,
                    kv_err *err);
/** Call fn on every stored document's lengths, in id order: of the whole
 *  space (idx_lens_walk), or of one record (key k, value v). */
typedef int (*idx_lens_fn)(void *arg, const idx_lens_it *it, kv_err *err);
int idx_lens_walk(kv_txn *txn, idx_lens_fn fn, void *arg, kv_err *err);
int idx_lens_span(const char *k, size_t kl, const char *v, size_t vl,
                  idx_lens_fn fn, void *arg, kv_err *err);
/** The current document's (field id, length) pairs into out (reset). */
int idx_lens_pairs(const idx_lens_it *it, idx_len **out, uint32_t *n,
                   uint32_t *cap, kv_err *err);

typedef struct idx_field {
    uint32_t id;
    uint64_t docs;
    uint64_t total_len;
} idx_field;
int idx_field_encode(const idx_field *f, kv_buf *out, kv_err *err);
int idx_field_decode(const char *buf, size_t len, idx_field *f, kv_err *err);

/* ------------------------------------------------------------------------ */
/* Containers (idx_util.c)                                                   */

typedef struct strtab {
    kv_buf arena;        /* the strings back to back */
    struct strtab_ent {
        uint32_t off, len; /* in arena */
        uint32_t hash;     /* low bits of the string's hash */
    } *ent;              /* per id */
    uint32_t n, cap;
    uint64_t *slots;     /* open addressing: hash << 32 | id + 1; 0 = empty */
    uint32_t nslots;     /* a power of two, > 2 n */
} strtab;

/** Grow array *pp (elements of @p elem bytes) to hold @p need: the
 *  reallocation, when it has too few. */
int idx__grow_to(void *pp, uint32_t *cap, uint64_t need, size_t elem,
                 kv_err *err);
/** Grow array *pp (elements of @p elem bytes) to hold @p need.  Inline:
 *  analysis asks several times per term, and almost always has room. */
static inline int idx__grow(void *pp, uint32_t *cap, uint64_t need,
                            size_t elem, kv_err *err)
{
    return need <= *cap ? KVFTS_OK : idx__grow_to(pp, cap, need, elem, err);
}
/** A set of doc ids: a bit each, in pages of IDX_IDSET_PAGE_BITS ids
 *  made as ids fall in them (a batch's ids are mostly a dense run of new
 *  ones); zeroed is empty. */
#define IDX_IDSET_PAGE_BITS 65536u
typedef struct idx_idset {
    uint64_t **page;       /* by id / IDX_IDSET_PAGE_BITS; NULL: empty */
    uint32_t npages;       /* entries of page[] */
    uint32_t made;         /* pages made */
} idx_idset;
/** Add @p id; *added tells whether it was new. */
int idx__idset_add(idx_idset *s, uint32_t id, bool *added, kv_err *err);
bool idx__idset_has(const idx_idset *s, uint32_t id);
/** Empty it (its pages freed), and free it. */
void idx__idset_reset(idx_idset *s);
void idx__idset_free(idx_idset *s);
/** Bytes it holds. */
size_t idx__idset_bytes(const idx_idset *s);
/** qsort order of uint32_t values. */
int idx__u32_cmp(const void *a, const void *b);
bool idx__strtab_has(const strtab *t, const char *s, size_t n);
/** The id of s, if present. */
bool idx__strtab_get(const strtab *t, const char *s, size_t n, uint32_t *id);
void idx__strtab_free(strtab *t);
void idx__strtab_reset(strtab *t);
/** Find s, adding it if absent (*added tells which). */
int idx__strtab_put(strtab *t, const char *s, size_t n, uint32_t *id,
                    bool *added, kv_err *err);
const char *idx__strtab_str(const strtab *t, uint32_t id, uint32_t *len);
/** The hash a table keeps of a string (the same in every table), and the
 *  one it keeps of its string @p id. */
uint32_t idx__strtab_hash(const char *s, size_t n);
uint32_t idx__strtab_hash_of(const strtab *t, uint32_t id);
/** idx__strtab_put with the string's hash given. */
int idx__strtab_put_h(strtab *t, const char *s, size_t n, uint32_t h,
                      uint32_t *id, bool *added, kv_err *err);
/** Lookups ahead of time, in three steps a few strings apart, so that a
 *  big table's cache misses overlap: fetch hash h's home slot; then read
 *  it (the id of the first string of hash h, UINT32_MAX if none) and fetch
 *  that string's entry; then fetch its bytes.  Hints only: the lookup
 *  itself is idx__strtab_put_h's. */
void idx__strtab_prefetch(const strtab *t, uint32_t h);
uint32_t idx__strtab_guess(const strtab *t, uint32_t h);
void idx__strtab_prefetch_str(const strtab *t, uint32_t id);
size_t idx__strtab_bytes(const strtab *t);
/** a[0..n) == b[0..n): inline, eight bytes a step, for the few bytes of
 *  a term or field name (memcmp's call was 3% of a load, comparing each
 *  term with the table's and each term's field with the last one's). */
static inline bool idx__bytes_eq(const char *a, const char *b, size_t n)
{
    for (; n >= 8; a += 8, b += 8, n -= 8) {
        uint64_t x, y;
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        if (x != y)
            return false;
    }
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return false;
    return true;
}
/** Compare two byte strings (memcmp order, shorter first on a tie). */
int idx__bytes_cmp(const char *a, size_t al, const char *b, size_t bl);
/** Sort the ids [0, n) of @p t by their strings (idx__bytes_cmp order)
 *  into @p order (allocated by the caller, n entries), and when @p pre is
 *  not NULL each one's idx__prefix8() into pre[i].  qsort(3) of (string,
 *  prefix, id) records, no comparator context: safe with any number of
 *  threads. */
int idx__strtab_sorted(const strtab *t, uint32_t *order, uint64_t *pre,
                       kv_err *err);
/** A string's first eight bytes as a big-endian number, zeros past its
 *  end: strings whose prefixes differ compare as their prefixes do. */
uint64_t idx__prefix8(const char *s, uint32_t len);

/* ------------------------------------------------------------------------ */
/* The bulk buffer (idx_buffer.c): one shard per analysis thread             */

/** One version of a document, analyzed: its terms, each with its views
 *  (column, tf, positions), in first-seen order, and its field lengths.
 *  Columns here use the shard's local field numbers (lf << 2 | kinds). */
typedef struct idx_dterms {
    strtab terms;          /* term -> entry */
    uint32_t *vhead;       /* per entry: first view (-1: none) */
    uint32_t ecap;
    /* views, linked per entry */
    uint32_t nview, vcap;
    uint32_t *vnext, *vcol, *vtf, *vpos;  /* vpos: first of its positions */
    uint8_t *vlist;        /* a field list's view (its term TOK_LIST_MARK +
                              a term of the field): no length of its own */
    /* occurrences before grouping: (view, position) */
    uint32_t nocc, ocap;
    uint32_t *occ_v, *occ_p;
    uint32_t *pos;         /* grouped positions */
    uint32_t pcap;
    /* field lengths by local field ("_all" is one) */
    uint32_t *flen;        /* per local field: its length in terms */
    uint32_t fcap;
    uint32_t *ftouched;    /* local fields with a length in this doc */
    uint32_t nft, ftcap;
    uint64_t skipped;      /* over-long tokens */
    kv_err *err;
    void *shard;           /* the shard whose field table is used */
    /* the field of the last term (in this document): terms come a field
     * at a time */
    char lastf[64];
    uint32_t lastf_len;    /* 0: none */
    uint32_t lastf_lf;
} idx_dterms;

typedef struct idx_shard idx_shard;

int idx_shard_new(idx_shard **out, const char *config_json, size_t len,
                  kv_err *err);
void idx_shard_free(idx_shard *s);
/** Analyze the change of document @p docid (old version -> new; either may
 *  be absent) into the shard: deletions for the terms of the old version,
 *  postings for the new, lengths.  EINVAL: the new version does not
 *  analyze; ECORRUPT: the old one does not. */
int idx_shard_doc(idx_shard *s, uint32_t docid, const char *old_json,
                  size_t old_len, const char *new_json, size_t new_len,
                  const char *leaves, size_t leaves_len, kv_err *err);
size_t idx_shard_bytes(const idx_shard *s);
void idx_shard_reset(idx_shard *s);
uint64_t idx_shard_docs(const idx_shard *s);

/** What a shard holds, for the segment writer: its terms in byte order,
 *  and per term the postings and deletions decoded. */
typedef struct idx_shard_terms {
    uint32_t *order;       /* term ids in byte order */
    uint32_t n, cap;
} idx_shard_terms;

/** The shard's local field names, for mapping to field ids. */
uint32_t idx_shard_nfields(const idx_shard *s);
const char *idx_shard_field(const idx_shard *s, uint32_t lf, uint32_t *len);
/** Sort the shard's terms (in the shard's own thread). */
int idx_shard_sort(idx_shard *s, kv_err *err);
uint32_t idx_shard_nterms(const idx_shard *s);
/** Term number i of the sorted order. */
const char *idx_shard_term(const idx_shard *s, uint32_t i, uint32_t *len);
/** Its idx__prefix8(). */
uint64_t idx_shard_term_prefix(const idx_shard *s, uint32_t i);
/** Hints, as term @p i of the sorted order is read: fetch the buffer
 *  and string table entries of the terms a few ahead, and the first
 *  records and the strings of those nearer (each a cache miss: the order
 *  visits them at random). */
void idx_shard_term_prefetch(const idx_shard *s, uint32_t i);
/** Deletions of a term: ids ascending, each with its columns. */
typedef struct idx_dels {
    uint32_t n, cap;
    uint32_t *ids;
    uint32_t *cstart;      /* deletion k's columns: cols[cstart[k] ..
                              cstart[k + 1]) */
    uint32_t nc, ccap;
    uint32_t *cols;
} idx_dels;

void idx_dels_init(idx_dels *d);
void idx_dels_free(idx_dels *d);
void idx_dels_reset(idx_dels *d);
int idx_dels_add(idx_dels *d, uint32_t id, const uint32_t *cols,
                 uint32_t ncols, kv_err *err);

/** Scratch of idx_shard_term_lists(): one per thread reading shards. */
typedef struct idx_tl_scratch {
    kv_buf bytes;
    struct idx_srt { uint32_t id, at; } *perm;
    uint32_t permcap;
} idx_tl_scratch;
void idx_tl_scratch_free(idx_tl_scratch *sc);
/** Postings and deletions of sorted term i, with the shard's local
 *  columns: adds into @p adds (reset; doc id order), deletions into
 *  @p dels (reset; id order).  Reads the shard only: threads may read one
 *  sorted shard at once, each with its own scratch. */
int idx_shard_term_lists(const idx_shard *s, uint32_t i, idx_tl_scratch *sc,
                         idx_plist *adds, idx_dels *dels, kv_err *err);
/** Records (postings and deletions) of sorted term i. */
uint32_t idx_shard_term_postings(const idx_shard *s, uint32_t i);
/** The first sorted term >= @p term (nterms if none). */
uint32_t idx_shard_term_lower(const idx_shard *s, const char *term,
                              size_t tlen);
/** The documents whose lengths changed: (docid, local field, len) for the
 *  new versions, and the ids deleted; and the per local field statistic
 *  deltas. */
struct idx_doclen {
    uint32_t docid;
    uint32_t off, n;       /* into lens */
};
void idx_shard_lengths(const idx_shard *s, const idx_doclen **docs,
                       uint32_t *ndocs, const idx_len **lens,
                       const uint32_t **deleted, uint32_t *ndeleted);
void idx_shard_field_deltas(const idx_shard *s, const int64_t **ddocs,
                            const int64_t **dlen);
uint64_t idx_shard_skipped(const idx_shard *s);

/* ------------------------------------------------------------------------ */
/* Writing segments (idx_segw.c)                                             */

/** Threads to lend a segment writer: spawn() starts fn(arg) on one of
 *  @p helpers threads (false: it cannot); fn returns when its work is
 *  done. */
typedef struct idx_runner {
    bool (*spawn)(void *ctx, void (*fn)(void *), void *arg);
    void *ctx;
    unsigned helpers;
} idx_runner;

/** Work of the caller's in the same transaction, done while the segment's
 *  shards are sorted, counted and written into memory elsewhere (none of
 *  which uses the transaction), before the segment's first record is put:
 *  a batch's document records, so that their puts overlap the segment's
 *  encoding.  It runs on the calling thread, as every Berkeley DB call of
 *  a flush does (a thread that calls Berkeley DB takes a slot of the
 *  environment's thread table for the life of the process). */
typedef struct idx_side {
    int (*fn)(void *arg, kv_txn *txn, kv_err *err);
    void *arg;
} idx_side;

/** Write one segment from @p n shards (sorted here), in txn: its dictionary
 *  chunks and blocks, with columns mapped to field ids through
 *  @p colmaps[shard] (local column -> global).  *@p seg gets its list
 *  record (not yet added to the list).  @p side (may be NULL) runs first
 *  on this thread, beside the segment's encoding; its failure is the
 *  call's. */
int idx_segw_shards(kv_txn *txn, idx_shard **shards, uint32_t n,
                    uint32_t *const *colmaps, bool positions,
                    const idx_runner *run, const idx_side *side,
                    idx_seg *seg, kv_err *err);
/** Put the records a segment writer without a transaction collected. */
int idx_segw_replay(kv_txn *txn, const kv_buf *sink, kv_err *err);
/** The same through @p pw, a segment file the transaction makes. */
int idx_segw_replay_pw(kv_partw *pw, const kv_buf *sink, kv_err *err);

/** A segment writer fed term by term (merges). */
typedef struct idx_segw idx_segw;
int idx_segw_open(idx_segw **out, kv_txn *txn, uint32_t seg_id,
                  kv_err *err);
/** One that appends its records to @p sink (for idx_segw_replay*), used
 *  by any one thread. */
int idx_segw_open_sink(idx_segw **out, uint32_t seg_id, kv_buf *sink,
                       kv_err *err);
/** Go on in another transaction (a merge spreads a segment over many). */
void idx_segw_set_txn(idx_segw *w, kv_txn *txn);
/** The next term's ordinal (a segment continued in a new writer). */
void idx_segw_set_ord(idx_segw *w, uint32_t ord);
uint32_t idx_segw_ord(const idx_segw *w);
/** Begin a term (terms come in byte order): its columns (global ids,
 *  ascending); postings follow with views indexing this table. */
int idx_segw_term_begin(idx_segw *w, const char *term, size_t tlen,
                        const uint32_t *cols, uint32_t ncols, bool positions,
                        kv_err *err);
/** Postings [from, to) of @p l, after the term's earlier ones. */
int idx_segw_term_add(idx_segw *w, const idx_plist *l, uint32_t from,
                      uint32_t to, kv_err *err);
/** Add a block record of another segment as it is (@p rec, @p len), its
 *  ids and columns decoded in @p b (idx_block_need_cols): its column
 *  indexes must be this term's, its ids after the term's so far.  The
 *  pending postings are written as a block first.  A merge copies the
 *  blocks that nothing in the run changes so (idx_merge.c). */
int idx_segw_term_add_block(idx_segw *w, const idx_block *b,
                            const char *rec, size_t len, kv_err *err);
/** Test hook: @p on false makes this thread's merges merge every block
 *  posting by posting, as they did before copying blocks (default true). */
void idx_test_merge_copy(bool on);
/** End the term with its deletions (ids ascending; per column counts,
 *  `_all` count). */
int idx_segw_term_end(idx_segw *w, const uint32_t *dels, uint32_t ndel,
                      const uint64_t *ndelc, uint64_t ndel_all, kv_err *err);
/** Write the last chunk; the segment's list record into *seg. */
int idx_segw_close(idx_segw *w, idx_seg *seg, kv_err *err);
/** Bytes written so far (for bounding a merge step). */
uint64_t idx_segw_bytes(const idx_segw *w);
void idx_segw_free(idx_segw *w);

/* ------------------------------------------------------------------------ */
/* Reading a segment (idx_read.c), for merges and checks                     */

/** Walks every entry of one segment in term order (bulk reads). */
typedef struct idx_seg_walk idx_seg_walk;
int idx_seg_walk_open(idx_seg_walk **out, kv_txn *txn, uint32_t seg,
                      const char *from, size_t flen, kv_err *err);
/** The next entry: its term and decoded entry (borrowed until the next
 *  call); KVFTS_ITEROVER after the last. */
int idx_seg_walk_next(idx_seg_walk *w, const char **term, size_t *tlen,
                      const idx_entry **e, uint32_t *ord, kv_err *err);
/** Every posting of the current entry into @p l (reset). */
int idx_seg_walk_postings(idx_seg_walk *w, idx_plist *l, kv_err *err);
void idx_seg_walk_close(idx_seg_walk *w);

/** A term's live postings with every view (any column): field NULL to
 *  idx_postings_open() means this; views then carry global columns. */


#endif /* KVFTS_IDX_INT_H */
