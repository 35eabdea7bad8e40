/*
 * lib/kvfts_int.h -- private to the glue layer of lib/ (lib/kvfts_*.c, which
 * implement include/kvfts.h).  Other modules never include it: lib/ is on
 * no include path but the glue's.  It exists so that the public API can be
 * split into files of a reasonable size; the glue is the one place that
 * sees every module.  The glue's files call down into kvfts_core.c (and
 * kvfts_db.c into kvfts_write.c, to free a handle's batch), never back.
 */
#ifndef KVFTS_INT_H
#define KVFTS_INT_H

#include "index.h"
#include "kv.h"
#include "tokenizer.h"

struct kvfts_db {
    kv_env *env;
    kv_config cfg;           /* parsed from cfg_json */
    kv_buf cfg_json;         /* the stored config ("" if none) */
    kv_err err;              /* last failure; kvfts_errmsg() */
    char warning[KV_ERRMSG_MAX + 128]; /* latest warning; kvfts_warning() */
    kvfts_batch *batch;      /* the open batch, if any */
    size_t batch_mem;        /* its memory bound */
    unsigned batch_workers;  /* its analysis threads */
    kv_buf old_rec;          /* scratch: old document record */
    kv_buf leaves;           /* the leaves of the JSON last checked ... */
    const char *leaves_of;   /* ... in its compact form here (NULL: none;
                                every public call clears it) */
    size_t leaves_of_len;
    kv_buf doc_rec;          /* scratch: a search's document records */
    kv_lookup_vals old_lv;   /* scratch: lookup values of the old version */
    kv_lookup_vals new_lv;   /* scratch: lookup values of the new version */
    tok_analysis *an;        /* the config's analysis */
    idx_writer *iw;          /* keeps the index in step with writes */
    idx_lens_cache *lens;    /* length columns for ranking, or NULL */
    idx_dict_cache *dict;    /* dictionary chunks searches read, or NULL */
    uint64_t cfg_stamp;      /* commit stamp cfg_json was read at (0: none) */
};

/* Results of a multi-get: offsets into one arena while being built, turned
 * into pointers once the arena stops moving. */
struct kvfts_docs {
    size_t n, cap;
    kvfts_doc *docs;
    kv_buf arena;
};

/** Start of every public call on db: clears the last error. */
void api_begin(kvfts_db *db);
/** End of a public call: records rc (KV_RETRY becomes KVFTS_EBUSY), makes
 *  sure a failure has a message, and returns rc. */
int api_finish(kvfts_db *db, int rc);
/** KVFTS_EINVAL (with a message) if db is read-only. */
int api_check_writable(kvfts_db *db);
/** KVFTS_EINVAL (with a message) if a batch is open on db. */
int api_check_no_batch(kvfts_db *db);
/** The meta.db key of the stored configuration. */
#define API_CONFIG_KEY "config"
/** The stored config JSON, borrowed from @p db until the next call on it
 *  ("" if none). */
int api_config_json(const char **json, size_t *len, kvfts_db *db);
/** Load the stored config into db if it changed (rebuilding the analysis and
 *  index writer), inside txn. */
int api_refresh_config(kvfts_db *db, kv_txn *txn, kv_err *err);
/** Bytes of dictionary chunks a handle keeps for its searches. */
#define API_DICT_CACHE_BYTES (8u * 1024u * 1024u)
/** Index bytes one merge step writes at most (its transaction's size). */
#define API_MERGE_STEP_BYTES (8u * 1024u * 1024u)
/** The step of kvfts_optimize() and of the merging after a batch:
 *  API_MERGE_STEP_BYTES, or KVFTS_MERGE_STEP_KB kilobytes if that is set
 *  in the environment (the crash tests: a small index merged in many
 *  steps, so that a kill lands between steps as well as in one). */
uint64_t api_merge_step_bytes(void);
/** A merge after a batch whose inputs hold at most this many bytes is done
 *  in one transaction, its file unlogged (idx_merge_opts.once_bytes):
 *  API_MERGE_ONCE_BYTES; 0 when KVFTS_MERGE_STEP_KB is set (the crash
 *  tests' merges in many steps), unless KVFTS_MERGE_RANGE_KB is set too:
 *  then every one (their crash tests: merges done whole, in ranges of that
 *  many kilobytes of input). */
#define API_MERGE_ONCE_BYTES (384u * 1024u * 1024u)
uint64_t api_merge_once_bytes(void);
/** After a commit that replaced segments (a merge, a rebuild): remove the
 *  files of those no process reads any more (idx_drop_sweep). */
int api_drop_sweep(kvfts_db *db, kv_err *err);
/** The same after a write whose status is its commit's: a failure is the
 *  handle's warning. */
void api_drop_sweep_warn(kvfts_db *db);
/** One bounded step of merge work (idx_merge_step) in a transaction of
 *  its own; *more: work is left.  @p all: toward one segment.  @p once:
 *  idx_merge_opts.once_bytes.  @p st (may be NULL): the merge figures
 *  after the step. */
int api_merge_step(kvfts_db *db, bool all, uint64_t bytes, uint64_t once,
                   int *more, idx_merge_stats *st, kv_err *err);
/** kv_txn_fn form of api_refresh_config (payload = db). */
int api_load_config_fn(kv_txn *txn, void *payload, kv_err *err);

/** Add a result to a multi-get set (pointers fixed by api_docs_fix). */
int api_docs_add(kvfts_docs *d, const char *key, size_t klen, int status,
                 const char *json, size_t jlen, uint64_t cas, kv_err *err);
void api_docs_fix(kvfts_docs *d);
/** Read one key into d; a missing one is recorded, or skipped. */
int api_get_into(kv_txn *txn, kvfts_docs *d, kv_buf *rec, const char *key,
                 size_t klen, bool skip_missing, kv_err *err);

/** Rebuild lookups and index from the documents, in txn (lib/kvfts_index.c),
 *  under db's current config. */
int api_rebuild(kvfts_db *db, kv_txn *txn, kvfts_progress_fn progress,
                void *payload, kv_err *err);

#endif /* KVFTS_INT_H */
