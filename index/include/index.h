/*
 * index/include/index.h -- the inverted index of kvfts: the one header other modules
 * (query/, the API glue in lib/) include from index/.
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

/* How much of a block to decode: ids only (counting, intersecting), ids and
 * term frequencies (scoring), or everything (phrases, writers). */
enum { IDX_DECODE_IDS = 0, IDX_DECODE_TFS = 1, IDX_DECODE_POSITIONS = 2 };

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
    uint64_t skipped_tokens;  /* tokens over TOK_MAX_TERM left out, ever */
} idx_stats;
int idx_get_stats(kv_txn *txn, idx_stats *out, kv_err *err);

#endif /* KVFTS_INDEX_H */
