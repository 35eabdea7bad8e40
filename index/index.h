/*
 * index/index.h -- the inverted index of kvfts: the one header other modules
 * (query/, lib/kvfts_api.c) include from index/.
 *
 * What it stores (the seeds' "fts::<field>::<term>" : {count, refs}, built
 * to scale; the byte format is documented in idx_block.c):
 *   - per (field, term): a header with the exact number of live documents
 *     holding the term (df) and their total occurrences (cf), and the
 *     postings in blocks of at most IDX_BLOCK_DOCS documents, one Berkeley DB
 *     record per block, keyed by the block's first doc id: adding or removing
 *     one document rewrites one block of each of its terms, never a list;
 *   - per document: its internal id's field lengths (for BM25);
 *   - per field: the number of documents with the field and the sum of their
 *     lengths; and the dictionary of field ids.
 *
 * Writing: an idx_writer is owned by one database handle.  idx_doc_update()
 * takes the old and the new version of a document (either may be absent) and
 * changes the index by the difference, inside the caller's transaction.
 * With buffering on (bulk loads), the postings of new documents are gathered
 * in memory and merged into the stored entries, in key order, by
 * idx_flush(), which the batch calls before it commits (and when the buffer
 * passes its memory bound).  After an abort, idx_discard() drops the buffer.
 *
 * Reading: idx_postings iterates one term's postings in doc-id order with
 * next / skip_to (block skipping by the first ids in the keys), giving tf
 * and, when stored, positions.  Everything read from disk is checked;
 * damage is KVFTS_ECORRUPT, never a read out of bounds.
 */
#ifndef KVFTS_INDEX_H
#define KVFTS_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kv.h"
#include "tokenizer.h"

/** Documents per postings block at most. */
#define IDX_BLOCK_DOCS 128
/** Most index entries (distinct terms of each field, _all included) one
 *  document may have: a write that changes more entries than the cache
 *  holds pages fails in Berkeley DB (out of cache), and deleting a document
 *  with a million distinct terms did; 200,000 entries is 100,000 distinct
 *  words, more than any natural text (a dictionary's headwords). */
#define IDX_MAX_DOC_ENTRIES 200000

/* ------------------------------------------------------------------------ */
/* Writing (idx_write.c)                                                     */

typedef struct idx_writer idx_writer;

/** A writer that analyzes documents with @p a (borrowed: must outlive the
 *  writer).  @p mem_limit bounds the bulk buffer (0 = 256 MiB). */
int idx_writer_new(idx_writer **out, tok_analysis *a, size_t mem_limit,
                   kv_err *err);
void idx_writer_free(idx_writer *w);          /* NULL: no-op */

/** Change the memory bound of the bulk buffer (0 = 256 MiB). */
void idx_writer_set_mem(idx_writer *w, size_t mem_limit);

/** Switch buffering of new postings on (bulk loads) or off. */
void idx_writer_buffering(idx_writer *w, bool on);

/** Analyze the old version (@p old_json, NULL if the document is new) and
 *  the new one (@p new_json, NULL if it is being deleted) of a document, as
 *  stored (compact JSON), and work out the index changes.  Writes nothing:
 *  this is the check a write runs before it changes anything.
 *  @return KVFTS_OK, KVFTS_EINVAL (the new version does not analyze: invalid
 *          UTF-8, a field named "_all" or with a NUL; err->pos is set),
 *          KVFTS_ENOMEM, KVFTS_ECORRUPT (the stored old version does not). */
int idx_doc_prepare(idx_writer *w, const char *old_json, size_t old_len,
                    const char *new_json, size_t new_len, kv_err *err);

/** Write the changes prepared by the last idx_doc_prepare() for document
 *  @p docid in @p txn (buffering new postings if buffering is on).
 *  Never KVFTS_EINVAL: after a failure the transaction must abort.
 *  @return KVFTS_OK, KVFTS_ENOMEM, KVFTS_ECORRUPT, KV_RETRY, KVFTS_ERROR. */
int idx_doc_apply(idx_writer *w, kv_txn *txn, uint32_t docid, kv_err *err);

/** Merge the buffered postings into the stored entries, in @p txn. */
int idx_flush(idx_writer *w, kv_txn *txn, kv_err *err);
/** True when the buffer has passed its memory bound (idx_buffered_bytes()
 *  >= the bound). */
bool idx_flush_due(const idx_writer *w);
/** Bytes held by the buffer now. */
size_t idx_buffered_bytes(const idx_writer *w);
/** Drop the buffer (after the transaction it belonged to aborted). */
void idx_discard(idx_writer *w);

/** Delete every index record (for a rebuild), in @p txn. */
int idx_clear(kv_txn *txn, kv_err *err);

/** Progress of a long operation: documents done so far. */
typedef void (*idx_progress_fn)(void *payload, uint64_t docs);

/** Clear the index and build it again from every stored document, in
 *  @p txn, merging through a bulk buffer of @p mem_limit bytes (0: default).
 *  @p progress (may be NULL) is called every 1,000 documents. */
int idx_rebuild(kv_txn *txn, tok_analysis *a, size_t mem_limit,
                idx_progress_fn progress, void *payload, kv_err *err);

/** Called once per difference idx_check() finds; @p what is one line. */
typedef int (*idx_report_fn)(void *payload, const char *what);

/** Compare the whole stored index (term headers and postings, document
 *  lengths, field statistics) with a fresh analysis of every stored
 *  document, reporting each difference.  Holds the fresh analysis of the
 *  whole corpus in memory.  *@p differences = the number found (reports
 *  stop after 1,000; the count does not). */
int idx_check(kv_txn *txn, tok_analysis *a, idx_report_fn report,
              void *payload, uint64_t *differences, kv_err *err);

/* ------------------------------------------------------------------------ */
/* Reading (idx_read.c)                                                      */

typedef struct idx_term_info {
    uint64_t df;          /* live documents holding the term */
    uint64_t cf;          /* occurrences in them */
    uint32_t blocks;      /* postings blocks */
    uint32_t last;        /* largest doc id */
    bool positions;       /* blocks carry positions */
} idx_term_info;

/** Header of (field, term).  @return KVFTS_OK, KVFTS_ENOTFOUND, ... */
int idx_term_get(kv_txn *txn, const char *field, size_t flen,
                 const char *term, size_t tlen, idx_term_info *out,
                 kv_err *err);

typedef struct idx_postings idx_postings;

/** Iterate the postings of (field, term), positioned before the first.
 *  @return KVFTS_OK, KVFTS_ENOTFOUND (no such term), ... */
int idx_postings_open(idx_postings **out, kv_txn *txn, const char *field,
                      size_t flen, const char *term, size_t tlen,
                      kv_err *err);
void idx_postings_close(idx_postings *p);     /* NULL: no-op */
/** Advance to the next posting.  @return KVFTS_OK, KVFTS_ITEROVER, or an
 *  error (KVFTS_ECORRUPT, ...). */
int idx_postings_next(idx_postings *p, kv_err *err);
/** Advance to the first posting with doc id >= @p docid (never backwards);
 *  skips whole blocks by their keys. */
int idx_postings_skip_to(idx_postings *p, uint32_t docid, kv_err *err);
uint32_t idx_postings_docid(const idx_postings *p);
/** Decode the current block up to @p level (IDX_DECODE_TFS or
 *  IDX_DECODE_POSITIONS, below): tf and positions are decoded on first use,
 *  so this is where damage to those streams is reported (KVFTS_ECORRUPT).
 *  Without it, idx_postings_tf() gives 0 and idx_postings_positions() NULL
 *  for a damaged block. */
int idx_postings_need(idx_postings *p, int level, kv_err *err);
uint32_t idx_postings_tf(const idx_postings *p);
/** Positions of the current posting (tf of them, ascending); NULL if the
 *  term has none stored.  Borrowed until the iterator moves. */
const uint32_t *idx_postings_positions(const idx_postings *p);
/** Largest tf in the current block, and the block's last doc id. */
uint32_t idx_postings_block_max_tf(const idx_postings *p);
uint32_t idx_postings_block_last(const idx_postings *p);
const idx_term_info *idx_postings_info(const idx_postings *p);

/** Called per term of a field, in byte order.  Non-zero stops the scan. */
typedef int (*idx_term_fn)(void *payload, const char *term, size_t tlen,
                           const idx_term_info *info);
/** Every term of @p field that starts with @p prefix (may be empty). */
int idx_terms_scan(kv_txn *txn, const char *field, size_t flen,
                   const char *prefix, size_t plen, idx_term_fn fn,
                   void *payload, kv_err *err);

/** Called per postings block of each term idx_prefix_postings() walks:
 *  the term's number (0, 1, ... in byte order), its header, and the
 *  block's doc ids and term frequencies.  Non-zero stops the walk. */
typedef int (*idx_block_fn)(void *payload, uint32_t term,
                            const idx_term_info *info, const uint32_t *ids,
                            const uint32_t *tfs, uint32_t n);
/** Every posting of every term of @p field starting with @p prefix, in one
 *  walk of the key range (a term's blocks follow its header).
 *  @return 1 (and nothing more is read) past @p max_terms terms;
 *          KVFTS_OK, KVFTS_ECORRUPT, KV_RETRY, KVFTS_ERROR, or fn's. */
int idx_prefix_postings(kv_txn *txn, const char *field, size_t flen,
                        const char *prefix, size_t plen, uint32_t max_terms,
                        idx_block_fn fn, void *payload, kv_err *err);

/** Statistics of a field for BM25: documents having it, sum of lengths. */
int idx_field_stats(kv_txn *txn, const char *field, size_t flen,
                    uint64_t *docs, uint64_t *total_len, kv_err *err);
/** The id of field @p field in the length records; 0 if it was never
 *  indexed.  Look it up once, then use idx_doc_len() per document. */
int idx_field_id(kv_txn *txn, const char *field, size_t flen, uint32_t *id,
                 kv_err *err);
/** Length (terms) of field @p field_id in document @p docid (0 if none),
 *  reading through @p scratch (reused: no allocation once it is grown). */
int idx_doc_len(kv_txn *txn, uint32_t docid, uint32_t field_id,
                kv_buf *scratch, uint32_t *len, kv_err *err);
/** Reads length records through one cursor: asked in ascending doc id
 *  order (as scoring does), each costs a step rather than a lookup. */
typedef struct idx_lens_reader idx_lens_reader;
int idx_lens_reader_open(idx_lens_reader **out, kv_txn *txn, kv_err *err);
/** Length of field @p field_id in document @p docid (0 if none). */
int idx_lens_reader_get(idx_lens_reader *r, uint32_t docid,
                        uint32_t field_id, uint32_t *len, kv_err *err);
void idx_lens_reader_close(idx_lens_reader *r);
/** A handle's copy of whole length columns (one field's length of every
 *  document, by doc id), for ranked searches that visit many documents.
 *  Valid while the lengths generation (meta "seq::lensgen", bumped by every
 *  transaction that changes a length record) stays the same. */
typedef struct idx_lens_cache idx_lens_cache;
int idx_lens_cache_new(idx_lens_cache **out, kv_err *err);
void idx_lens_cache_free(idx_lens_cache *c);          /* NULL: no-op */
/** Drop the columns if the lengths changed since they were read (as seen
 *  by @p txn).  Call once per search, before idx_lens_cache_column(). */
int idx_lens_cache_sync(idx_lens_cache *c, kv_txn *txn, kv_err *err);
/** The column of @p field_id: *@p col[docid] for docid < *@p n (0: no
 *  length), or *@p col NULL if it is not cached and @p build is false.
 *  Building reads every length record once.  The column lives until the
 *  next idx_lens_cache_sync() or _free(). */
int idx_lens_cache_column(idx_lens_cache *c, kv_txn *txn, uint32_t field_id,
                          bool build, const uint32_t **col, uint32_t *n,
                          kv_err *err);
/** Length (terms) of field @p field in document @p docid; 0 if none. */
int idx_doc_field_len(kv_txn *txn, uint32_t docid, const char *field,
                      size_t flen, uint32_t *len, kv_err *err);

/** Index-wide figures for `kvfts stats`. */
typedef struct idx_stats {
    uint64_t terms;           /* (field, term) entries */
    uint64_t postings;        /* sum of df */
    uint64_t blocks;          /* postings blocks */
    uint64_t postings_bytes;  /* bytes of headers and blocks */
    uint64_t fields;          /* fields with an id */
} idx_stats;
int idx_get_stats(kv_txn *txn, idx_stats *out, kv_err *err);

/* ------------------------------------------------------------------------ */
/* Inside index/ only: the on-disk format (idx_block.c).  Other modules must
 * not call these.                                                           */

#define IDX_FORMAT 1
#define IDX_F_POSITIONS 1
/** Largest block a decoder accepts (writers keep to IDX_BLOCK_DOCS). */
#define IDX_BLOCK_MAX 4096
/** Spare bytes after every buffer StreamVByte decodes from or into. */
#define IDX_SLACK 32
#define IDX_FIELD_PREFIX "field::"
#define IDX_LENS_GEN "lensgen"   /* sequence meta "seq::lensgen" */
#define IDX_SKIPPED_KEY "stat::skipped_tokens"

size_t idx_varint_put(unsigned char *p, uint64_t v);
bool idx_varint_get(const unsigned char **p, const unsigned char *end,
                    uint64_t *out);

/** FIELD 0x00 TERM into key (reset first). */
int idx_key_term(kv_buf *key, const char *field, size_t flen,
                 const char *term, size_t tlen, kv_err *err);
/** Cut key to its first term_key_len bytes and add 0x00 be32(first). */
int idx_key_block(kv_buf *key, size_t term_key_len, uint32_t first,
                  kv_err *err);
/** True if k is a block key of the term whose key is term_key. */
bool idx_key_is_block_of(const char *k, size_t klen, const char *term_key,
                         size_t tklen, uint32_t *first);
/** "field::NAME" (meta.db) into key. */
int idx_key_field(kv_buf *key, const char *field, size_t flen, kv_err *err);

typedef struct idx_header {
    uint64_t df, cf;
    uint32_t blocks;
    uint32_t last;       /* largest doc id */
    uint32_t lastblk;    /* first id of the last block */
    bool positions;
} idx_header;

int idx_header_encode(const idx_header *h, kv_buf *out, kv_err *err);
int idx_header_decode(const char *buf, size_t len, idx_header *h,
                      kv_err *err);

/** A decoded block (or a list being built): parallel arrays. */
typedef struct idx_block {
    uint32_t n, cap;
    uint32_t *ids;
    uint32_t *tfs;
    uint32_t *poff;      /* positions of doc i: pos[poff[i] .. + tfs[i]) */
    uint32_t *pos;
    uint32_t npos, pcap;
    uint32_t max_tf;
    bool positions;      /* the block carries positions */
    int decoded;         /* IDX_DECODE_*: what ids/tfs/pos hold so far */
    unsigned char *tmp;  /* the block's streams (+ slack) as decoded from */
    size_t tmpcap;
    size_t idb, tfb, posb;  /* stream sizes in tmp */
    uint32_t npos_expected; /* sum of tfs, once they are decoded */
} idx_block;

/* How much of a block to decode: ids only (counting, intersecting), ids and
 * term frequencies (scoring), or everything (phrases, writers). */
enum { IDX_DECODE_IDS = 0, IDX_DECODE_TFS = 1, IDX_DECODE_POSITIONS = 2 };

void idx_block_init(idx_block *b);
void idx_block_free(idx_block *b);
int idx_block_reserve(idx_block *b, uint32_t ndocs, uint64_t npos,
                      kv_err *err);
/** Decode a stored block whose key says @p first, up to @p level
 *  (IDX_DECODE_*).  KVFTS_ECORRUPT on any inconsistency found. */
/** The span (last id - first id) of a stored block, read from its header
 *  alone; false if the header is damaged (idx_block_decode() says how). */
bool idx_block_peek(const char *buf, size_t len, uint32_t *span);
int idx_block_decode(idx_block *b, uint32_t first, const char *buf,
                     size_t len, int level, kv_err *err);
/** Decode more of the last decoded block, up to @p level. */
int idx_block_need(idx_block *b, int level, kv_err *err);
/** Encode documents [from, to) of @p b (its first id goes in the key). */
int idx_block_encode(const idx_block *b, uint32_t from, uint32_t to,
                     kv_buf *out, kv_err *err);
/** Decode @p count values of a standard (1234) StreamVByte stream, as they
 *  are, or (delta) as gaps added up from @p prev.  Reads up to 16 bytes
 *  past the stream: @p in needs IDX_SLACK spare bytes.  Check the stream
 *  with idx_svb_size() first. */
void idx_svb_decode(const unsigned char *in, uint32_t *out, uint32_t count);
void idx_svb_delta_decode(const unsigned char *in, uint32_t *out,
                          uint32_t count, uint32_t prev);
/** The same for a 0124-coded stream (term frequencies). */
void idx_svb_decode_0124(const unsigned char *in, uint32_t *out,
                         uint32_t count);
/** The plain C decoder alone (what runs without SSSE3), for tests. */
void idx__svb_decode_c(const unsigned char *in, uint32_t *out,
                       uint32_t count, bool delta, uint32_t prev);
/** Size of a StreamVByte stream of @p count values from its control bytes,
 *  or SIZE_MAX if the control bytes are not all in @p avail. */
size_t idx_svb_size(const unsigned char *in, size_t avail, uint32_t count,
                    bool is0124);

typedef struct idx_len {
    uint32_t field_id;
    uint32_t len;
} idx_len;
int idx_lens_encode(const idx_len *lens, size_t n, kv_buf *out, kv_err *err);
/** Length of field_id in a doclens record (0 if absent). */
int idx_lens_find(const char *buf, size_t len, uint32_t field_id,
                  uint32_t *out, kv_err *err);

typedef struct idx_field {
    uint32_t id;
    uint64_t docs;
    uint64_t total_len;
} idx_field;
int idx_field_encode(const idx_field *f, kv_buf *out, kv_err *err);
int idx_field_decode(const char *buf, size_t len, idx_field *f, kv_err *err);

/* The writer's internals, shared by idx_write.c and idx_check.c only. */

typedef struct strtab {
    kv_buf arena;        /* the strings back to back */
    uint32_t *off;       /* per id: offset in arena */
    uint32_t *len;       /* per id: length */
    uint32_t *hash;      /* per id: low bits of the hash */
    uint32_t n, cap;
    uint32_t *slots;     /* open addressing: id + 1; 0 = empty */
    uint32_t nslots;     /* a power of two, > 2 n */
} strtab;

/** Grow array *pp (elements of @p elem bytes) to hold @p need. */
int idx__grow(void *pp, uint32_t *cap, uint64_t need, size_t elem,
              kv_err *err);
bool idx__strtab_has(const strtab *t, const char *s, size_t n);
/** Find s, adding it if absent (*added tells which). */
int idx__strtab_put(strtab *t, const char *s, size_t n, uint32_t *id,
                    bool *added, kv_err *err);
const char *idx__strtab_str(const strtab *t, uint32_t id, uint32_t *len);

/* Sorting ids by their strings (qsort has no context argument). */
typedef struct keyref {
    const char *s;
    uint32_t len;
    uint32_t id;
} keyref;

typedef struct dterms {
    bool present;
    strtab keys;          /* "field\0term" -> entry */
    uint32_t *tf, *flen;  /* per entry */
    uint32_t ecap, fcap;
    uint32_t *occ_e, *occ_p;  /* occurrences, in emission order */
    uint32_t nocc, ocap_e, ocap_p, pcap;
    uint32_t *pstart;     /* per entry (+1): start in pos */
    uint32_t *pos;        /* positions grouped by entry */
    uint32_t scap;
    keyref *order;        /* entries, sorted by key when sorted */
    bool sorted;
    uint32_t kcap;
    kv_buf scratch;       /* key being built */
    kv_err *err;
} dterms;

/* One buffered term: a chain of chunks holding its encoded postings. */
typedef struct idx_tbuf {
    uint32_t head, tail;  /* arena offsets of its first and last chunk */
    uint32_t used;        /* payload bytes used in the last chunk */
    uint32_t last;        /* doc id of the last posting added */
    uint32_t n;           /* postings */
    uint8_t cls;          /* size class of the last chunk */
    bool unsorted;        /* a doc id came after a larger one */
} idx_tbuf;

/* One term's buffered postings, decoded and in doc id order: posting i is
 * ids[i], tfs[i], positions pos[poff[i]] .. (tfs[i] of them). */
typedef struct idx_tpost {
    uint32_t n;
    uint64_t cf;
    uint32_t *ids, *tfs, *poff, *pos;
    uint32_t idcap, tfcap, poffcap, poscap;
    uint32_t *perm, *tmp;
    uint32_t permcap, tmpcap;
    kv_buf bytes;
} idx_tpost;

typedef struct field_state {
    uint32_t id;          /* 0 = not known yet */
    int64_t ddocs;        /* pending change of the field statistics */
    int64_t dlen;
} field_state;

struct idx_writer {
    tok_analysis *a;
    size_t mem_limit;
    bool buffering;
    bool positions;
    bool dry;             /* check mode: analyze into memory, write nothing */
    bool lens_changed;    /* a length record was written since the flush */
    struct exp_len { uint32_t docid, field, len; } *exp;  /* dry: lengths */
    uint32_t nexp, expcap;
    uint64_t skipped;     /* too-long tokens of new versions, not yet saved */
    dterms old, neu;      /* the last prepared change */
    /* the bulk buffer */
    strtab bterms;        /* buffered term keys -> term id */
    idx_tbuf *tb;         /* per term id: its chain (idx_buffer.c) */
    uint32_t tbcap;
    kv_buf arena;         /* the chains' chunks */
    kv_buf enc;           /* one posting being encoded */
    uint64_t npost;       /* postings buffered */
    strtab bdocs;         /* doc ids (4 bytes) with buffered postings */
    /* fields */
    strtab fnames;        /* field name -> index in fs */
    field_state *fs;
    uint32_t fscap;
    /* scratch */
    kv_buf key, val, val2;
    idx_tpost tp;         /* the term being flushed or checked */
    idx_block blk, out;
    idx_len *lens;        /* the document's field lengths being built */
    uint32_t nlens, lcap;
};

int idx__keyref_cmp(const void *a, const void *b);

/* ---- the bulk buffer (idx_buffer.c) ---- */

/** Append a posting of key "field\0term" (adding the term). */
int idx__buf_add(idx_writer *w, const char *key, size_t klen, uint32_t doc,
                 uint32_t tf, const uint32_t *pos, kv_err *err);
/** Memory the buffer takes. */
size_t idx__buf_bytes(const idx_writer *w);
/** Empty the chains (the term and doc tables are reset by the caller). */
void idx__buf_reset(idx_writer *w);
void idx__buf_free(idx_writer *w);
/** The buffered terms in key order (id = term id); caller frees. */
int idx__buf_terms(idx_writer *w, keyref **order, kv_err *err);
/** Decode term @p t's postings into @p tp (reused). */
int idx__buf_decode(idx_writer *w, uint32_t t, idx_tpost *tp, kv_err *err);
void idx__tpost_free(idx_tpost *tp);

#endif /* KVFTS_INDEX_H */
