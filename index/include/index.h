/*
 * index/include/index.h -- the inverted index of kvfts: the one header other
 * modules (query/, the API glue in lib/) include from index/.
 *
 * What it stores (the seeds' "fts::<field>::<term>" : {count, refs}, built
 * to scale; the byte format is documented in index/idx_codec.c):
 *   - one postings list per term, whatever the fields it occurs in: a
 *     posting is one (term, document) pair with the document's views of the
 *     term, one per column (a field's own terms, the `_all` terms taken from
 *     a field, or both at once); fts::FIELD::TERM and fts::_all::TERM are
 *     selections of it, `_all` is not a second copy;
 *   - in immutable segments: a batch adds one, with postings for the new
 *     versions of its documents and deletions for the old versions it
 *     replaced; merges (idx_merge.c) combine neighbouring segments in
 *     bounded, resumable steps;
 *   - per document: its internal id's field lengths (BM25);
 *   - per field: the number of documents with the field and the sum of their
 *     lengths; and the dictionary of field ids.
 *
 * Writing: an idx_writer belongs to one database handle and is used by one
 * thread at a time.  idx_doc_write() takes a document's old and new version
 * (either may be absent) and buffers the change; analysis runs in the
 * caller's thread, or in the writer's worker threads when a batch started
 * them (idx_writer_workers).  idx_flush() waits for the workers and writes
 * what is buffered as one segment, with lengths and field statistics, in
 * the caller's transaction; after an abort, idx_discard() drops it.
 *
 * Reading: an idx_reader is one snapshot's view of the index (the segment
 * list of its transaction); idx_postings iterates one (field, term)'s live
 * postings in doc-id order across segments with next / skip_to, giving tf
 * and, when stored, the positions of each view.  Exact counts come from the
 * entries alone (postings minus deletions per segment).  Everything read
 * from disk is checked; damage is KVFTS_ECORRUPT, never a read out of
 * bounds, and a reader keeps the first error it meets (sticky).
 *
 * Thread rules: every object of this header is used by one thread at a
 * time; readers of one transaction belong to its thread.
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

/** The first index i in [@p from, @p n) with a[i] >= @p x (n if none), in
 *  ascending a: galloping from @p from, then a binary search. */
uint32_t idx_gallop(const uint32_t *a, uint32_t from, uint32_t n,
                    uint32_t x);

/** Kinds of a column: a field's own terms, `_all`'s terms from the field. */
enum { IDX_KIND_FIELD = 1, IDX_KIND_ALL = 2 };

/* ------------------------------------------------------------------------ */
/* Writing (idx_write.c)                                                     */

typedef struct idx_writer idx_writer;

/** A writer analyzing documents under the database config @p config_json
 *  (the "analysis" member; copied).  @p mem_limit bounds the buffer
 *  (0 = 128 MiB). */
int idx_writer_new(idx_writer **out, const char *config_json, size_t len,
                   size_t mem_limit, kv_err *err);
void idx_writer_free(idx_writer *w);          /* NULL: no-op */
void idx_writer_set_mem(idx_writer *w, size_t mem_limit);
/** Analyze in @p n worker threads from now on (0: in the caller's).  The
 *  buffer must be empty (flushed or discarded). */
int idx_writer_workers(idx_writer *w, unsigned n, kv_err *err);

/** Buffer the change of document @p docid: its old version as stored
 *  (NULL if new) and its new version (NULL if it is being deleted), both
 *  compact JSON (copied).  With workers, analysis happens later: its
 *  failures (out of memory; a stored version that no longer analyzes,
 *  KVFTS_ECORRUPT) are returned by the next idx_doc_write() or idx_flush().
 *  The new version must have passed tok_check_field() for every path, so
 *  that analysis does not refuse it.  A document whose change is buffered
 *  must not be changed again before a flush (idx_doc_buffered()).
 *  @p leaves: the new version's leaves as the writer's check of its JSON
 *  kept them (kv_leaves_add(), nulls aside; copied), which analysis then
 *  reads instead of parsing the JSON again; NULL: none kept. */
int idx_doc_write(idx_writer *w, uint32_t docid, const char *old_json,
                  size_t old_len, const char *new_json, size_t new_len,
                  const char *leaves, size_t leaves_len, kv_err *err);
/** A document record for the writer's threads to encode (kv_doc_encode())
 *  and the flush to store, so that compression leaves the caller's thread.
 *  @p key is copied. */
typedef struct idx_docrec {
    const char *key;
    size_t klen;
    uint64_t cas;
    kv_doc_coder coder;
} idx_docrec;
/** True if the writer has analysis threads to encode records. */
bool idx_writer_defers_records(const idx_writer *w);
/** idx_doc_write() of a new version whose document record @p dr the flush
 *  stores (until then the record is not in KV_DOCS: the caller asks
 *  idx_doc_buffered() before reading the document). */
int idx_doc_write_rec(idx_writer *w, uint32_t docid, const char *old_json,
                      size_t old_len, const char *new_json, size_t new_len,
                      const char *leaves, size_t leaves_len,
                      const idx_docrec *dr, kv_err *err);
/** True if a change of @p docid is in the buffer. */
bool idx_doc_buffered(const idx_writer *w, uint32_t docid);
/** Write the buffer as one segment (with document lengths, field
 *  statistics and the new segment list) in @p txn; empties it. */
int idx_flush(idx_writer *w, kv_txn *txn, kv_err *err);
/** True when the buffer has passed its memory bound. */
bool idx_flush_due(const idx_writer *w);
/** Bytes held by the buffer now. */
size_t idx_buffered_bytes(const idx_writer *w);
/** Documents buffered since the last flush. */
uint64_t idx_buffered_docs(const idx_writer *w);
/** Drop the buffer (after the transaction it belonged to aborted). */
void idx_discard(idx_writer *w);

/** Delete every index record (for a rebuild), in @p txn: the segments'
 *  files go later (idx_drop_sweep()). */
int idx_clear(kv_txn *txn, kv_err *err);

/** Progress of a long operation: documents (or steps) done so far. */
typedef void (*idx_progress_fn)(void *payload, uint64_t done);

/* ------------------------------------------------------------------------ */
/* Merging segments (idx_merge.c)                                            */

typedef struct idx_merge_stats {
    uint32_t segments;     /* segments now */
    uint64_t bytes;        /* their records */
    bool merging;          /* a merge is under way (resumable) */
    uint32_t inputs;       /* its input segments */
    uint64_t done, total;  /* its progress, input bytes */
    uint32_t dropping;     /* segment files waiting for idx_drop_sweep() */
} idx_merge_stats;

/** How idx_merge_step works. */
typedef struct idx_merge_opts {
    bool all;              /* every segment into one (`kvfts optimize`) */
    uint64_t step_bytes;   /* a step writes about this much at most */
    /* A merge the policy starts whose inputs hold at most once_bytes
     * (0: none) and whose output is a file of its own is done whole in
     * the step instead: its file is then written without log records, in
     * term ranges of about range_bytes of input (0: 4 MiB) merged by this
     * thread and up to `helpers` threads of the process's (at most 7),
     * when either is given.  Those read the inputs in snapshots of their
     * own: a transaction that made any of them passes neither.  A
     * range_bytes given (tests) makes every such output a file of its
     * own. */
    uint64_t once_bytes, range_bytes;
    unsigned helpers;
} idx_merge_opts;

/** One bounded step of merge work in @p txn: start a merge the policy
 *  asks for, or go on with the one under way (@p o).  *@p more tells
 *  whether work is left.  The state is kept in meta.db, so a step
 *  interrupted (abort, crash) is done again from the last commit. */
int idx_merge_step(kv_txn *txn, const idx_merge_opts *o, bool *more,
                   kv_err *err);
int idx_merge_stats_get(kv_txn *txn, idx_merge_stats *out, kv_err *err);
/** Remove the files of segments a merge or a rebuild replaced (each in a
 *  transaction of its own, after the one that replaced them committed).
 *  A file some process still reads stays listed for a later sweep;
 *  *@p left counts them. */
int idx_drop_sweep(kv_env *env, uint32_t *left, kv_err *err);

/* ------------------------------------------------------------------------ */
/* Checking and rebuilding (idx_check.c)                                     */

/** Called once per difference idx_check() finds; @p what is one line. */
typedef int (*idx_report_fn)(void *payload, const char *what);

/** Clear the index and build it again from every stored document, in
 *  @p txn, under config @p config_json. */
int idx_rebuild(kv_txn *txn, const char *config_json, size_t len,
                size_t mem_limit, idx_progress_fn progress, void *payload,
                kv_err *err);
/** Compare the live index (every term's postings across segments, with
 *  views, tfs and positions; exact counts; document lengths; field
 *  statistics) with a fresh analysis of every stored document, reporting
 *  each difference.  *@p differences = the number found (reports stop
 *  after 1,000; the count does not). */
int idx_check(kv_txn *txn, const char *config_json, size_t len,
              idx_report_fn report, void *payload, uint64_t *differences,
              kv_err *err);

/* ------------------------------------------------------------------------ */
/* Reading (idx_read.c)                                                      */

typedef struct idx_reader idx_reader;

/** The index as @p txn sees it (reads its segment list). */
int idx_reader_open(idx_reader **out, kv_txn *txn, kv_err *err);
void idx_reader_close(idx_reader *r);         /* NULL: no-op */
kv_txn *idx_reader_txn(const idx_reader *r);
/** A handle's decoded dictionary chunks, kept across its searches (the
 *  segments they come from never change), up to @p max_bytes; one thread
 *  at a time, as the handle. */
typedef struct idx_dict_cache idx_dict_cache;
int idx_dict_cache_new(idx_dict_cache **out, size_t max_bytes, kv_err *err);
void idx_dict_cache_free(idx_dict_cache *d);          /* NULL: no-op */
size_t idx_dict_cache_bytes(const idx_dict_cache *d);  /* held now */
/** As idx_reader_open(), finding terms through @p d (NULL: a cache of the
 *  reader's own) and taking the segment list from it when @p txn's commit
 *  stamp is the one it was read at (kv_txn_stamp; @p txn then must see
 *  committed state only, as a read transaction does).  Drops from @p d the
 *  segments the snapshot no longer lists. */
int idx_reader_open_dict(idx_reader **out, kv_txn *txn, idx_dict_cache *d,
                         kv_err *err);
/** The largest doc id any posting of the snapshot has (0: none). */
uint32_t idx_reader_max_docid(const idx_reader *r);

typedef struct idx_term_info {
    uint64_t df;          /* live documents holding the term in the field */
    bool positions;       /* postings carry positions */
} idx_term_info;

/** Exact live count of (field, term) from the entries alone ("_all": the
 *  catch-all field).  KVFTS_ENOTFOUND when it is 0. */
int idx_term_get(idx_reader *r, const char *field, size_t flen,
                 const char *term, size_t tlen, idx_term_info *out,
                 kv_err *err);

typedef struct idx_postings idx_postings;

/* How much of a block to decode: ids only (counting, intersecting), ids and
 * term frequencies (scoring), or everything (phrases). */
enum { IDX_DECODE_IDS = 0, IDX_DECODE_TFS = 1, IDX_DECODE_POSITIONS = 2 };

/** Iterate the live postings of (field, term), positioned before the
 *  first.  @return KVFTS_OK, KVFTS_ENOTFOUND (none), ... */
int idx_postings_open(idx_postings **out, idx_reader *r, const char *field,
                      size_t flen, const char *term, size_t tlen,
                      kv_err *err);
void idx_postings_close(idx_postings *p);     /* NULL: no-op */
/** Advance to the next posting.  @return KVFTS_OK, KVFTS_ITEROVER, or an
 *  error (KVFTS_ECORRUPT, ...), which is sticky: later calls return it. */
int idx_postings_next(idx_postings *p, kv_err *err);
/** Advance to the first posting with doc id >= @p docid (never
 *  backwards); skips whole blocks by their keys and headers. */
int idx_postings_skip_to(idx_postings *p, uint32_t docid, kv_err *err);
/** The live doc ids from the current posting on (*@p ids[0] is it), as
 *  many as the blocks already loaded tell, for intersecting arrays: with
 *  one segment holding the term, no deletions and no other field's
 *  documents in its blocks, the rest of the current block without a copy.
 *  The iterator does not move; skip_to past ids[*n - 1] goes on after the
 *  run.  Borrowed until the iterator moves.  *@p n = 0 before the first
 *  move and at the end.  @return KVFTS_OK or a (sticky) error. */
int idx_postings_run(idx_postings *p, const uint32_t **ids, uint32_t *n,
                     kv_err *err);
uint32_t idx_postings_docid(const idx_postings *p);
/** True when the live ids in [@p first, @p last] (first at or before the
 *  current posting's id) are the current block's ids in that range (one
 *  segment holds ids there, none of them is deleted, and the block has no
 *  other field's documents): then being in the block is being live, and a
 *  phrase's candidates need not be checked against the term's run. */
bool idx_postings_plain(const idx_postings *p, uint32_t first,
                        uint32_t last);
/** Decode the current block up to @p level (IDX_DECODE_TFS or _POSITIONS):
 *  views and positions are decoded on first use, so this is where damage
 *  to those streams is reported; tf and views are valid after it. */
int idx_postings_need(idx_postings *p, int level, kv_err *err);
/** The term's frequency in the selected field (sum over its views). */
uint32_t idx_postings_tf(const idx_postings *p);
/** One view of the current posting: a column and its positions. */
typedef struct idx_view {
    uint32_t col;
    uint32_t tf;
    const uint32_t *pos;  /* tf positions, ascending; NULL without them */
} idx_view;
/** The current posting's views in the selected field (ascending column),
 *  after idx_postings_need(IDX_DECODE_POSITIONS).  Borrowed until the
 *  iterator moves. */
const idx_view *idx_postings_views(idx_postings *p, uint32_t *n);
/** Count the documents of cand[0..*m) that hold the phrase of terms
 *  p[0..n) (term i at offset offs[i] from the first; a repeated word's
 *  terms share the cursor of its first term, first[i] < i) in one field,
 *  from the cursors' current blocks.  The candidates ascend, lie at or
 *  past every cursor and up to the smallest idx_postings_block_last, and
 *  are live ids of each term, or
 *  of its block where idx_postings_plain says that is the same.  First
 *  they are cut, in place, to those every block has (*@p m: how many);
 *  those holding the phrase are added to *@p count.  No cursor moves, and
 *  positions are read as stored, only as far as a candidate needs them.
 *  With @p pf (room for *@p m), also each kept candidate's phrase
 *  frequency, 0 when it does not hold the phrase (as a ranking needs it).
 *  *@p ok false (nothing counted; the caller goes by posting,
 *  idx_postings_need) when a block has no positions, or for pf when the
 *  phrase has more than 8 terms. */
int idx_postings_phrase(idx_postings *const *p, const size_t *first,
                        const uint32_t *offs, size_t n, uint32_t *cand,
                        uint32_t *m, uint32_t *pf, uint64_t *count, bool *ok,
                        kv_err *err);
/** Upper bound of the tf in the current block (block-max pruning), and
 *  the block's last doc id. */
uint32_t idx_postings_block_max_tf(const idx_postings *p);
uint32_t idx_postings_block_last(const idx_postings *p);
const idx_term_info *idx_postings_info(const idx_postings *p);

/** Called per term of a field with live postings, in byte order.
 *  Non-zero stops the scan. */
typedef int (*idx_term_fn)(void *payload, const char *term, size_t tlen,
                           const idx_term_info *info);
/** Every term of @p field that starts with @p prefix (may be empty); field
 *  lists' terms (TOK_LIST_MARK + a term) only when the prefix begins with
 *  the mark. */
int idx_terms_scan(idx_reader *r, const char *field, size_t flen,
                   const char *prefix, size_t plen, idx_term_fn fn,
                   void *payload, kv_err *err);

/** Called per live posting idx_prefix_postings() finds: the term's number
 *  (0, 1, ... in byte order), the term's live count, the doc id and its
 *  tf.  Non-zero stops the walk. */
typedef int (*idx_posting_fn)(void *payload, uint32_t term, uint64_t df,
                              uint32_t docid, uint32_t tf);
/** Every live posting of every term of @p field starting with @p prefix,
 *  read in one walk of each segment's key range.  Postings come grouped by
 *  term, terms in byte order.  Without @p tf, every posting's tf is given
 *  as 1 (a count needs none, and a block's views are then decoded only
 *  where the field takes some of its columns and not others).
 *  @return 1 (and nothing more is read) past @p max_terms terms;
 *  KVFTS_OK, or an error, or fn's. */
int idx_prefix_postings(idx_reader *r, const char *field, size_t flen,
                        const char *prefix, size_t plen, uint32_t max_terms,
                        bool tf, idx_posting_fn fn, void *payload,
                        kv_err *err);

/** Statistics of a field for BM25: documents having it, sum of lengths;
 *  and its id as idx_field_id() gives it, if @p id is not NULL (one read
 *  for both). */
int idx_field_stats(kv_txn *txn, const char *field, size_t flen,
                    uint64_t *docs, uint64_t *total_len, uint32_t *id,
                    kv_err *err);
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
    uint64_t terms;           /* distinct terms with live postings */
    uint64_t postings;        /* live (term, document) pairs */
    uint64_t blocks;          /* postings block records */
    uint64_t postings_bytes;  /* bytes of the index records */
    uint64_t fields;          /* fields with an id */
    uint64_t segments;        /* segments */
    uint64_t skipped_tokens;  /* tokens over TOK_MAX_TERM left out, ever */
    uint64_t list_postings;   /* live postings of field lists' terms
                                 (TOK_LIST_MARK + a term: not in terms
                                 and postings) */
} idx_stats;
int idx_get_stats(kv_txn *txn, idx_stats *out, kv_err *err);

#endif /* KVFTS_INDEX_H */
