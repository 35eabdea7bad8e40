/*
 * idx_write.c -- keeping the inverted index equal to the stored documents:
 * the writer of one database handle.
 *
 * A write of a document hands the writer both its versions (the old one as
 * stored, or none; the new one, or none for a delete): idx_doc_write().
 * The change is analyzed into a shard of the bulk buffer (idx_buffer.c):
 * deletions for the terms the old version had, postings for the new one's,
 * nothing for terms that did not change.  idx_flush(), which the database
 * handle calls before every commit (and a batch when the buffer passes its
 * memory bound), turns the buffer into one new segment (idx_segw.c),
 * writes the new versions' field lengths, adds the changes of the field
 * statistics, and appends the segment to the list -- all in the caller's
 * transaction, whose write set is that segment and those records, however
 * large the index.
 *
 * Both cores.  A batch may start worker threads (idx_writer_workers): each
 * owns a shard, with its own analysis (tokenizers and stemmers are not
 * shared), and takes groups of documents from a bounded queue; the
 * handle's thread goes on with its own work (JSON checks, keys, document
 * records, compression, Berkeley DB) meanwhile.  The queue is bounded
 * (QUEUE_JOBS groups), so a fast producer waits instead of holding a corpus
 * in memory.  A worker's failure (out of memory; a stored version that no
 * longer analyzes) is kept and returned by the next call, and the batch
 * rolls back.  A flush first waits for the queue to empty; the shards are
 * then the flushing thread's until it returns.  Without workers, the one
 * shard is analyzed in the caller's thread.
 *
 * Field ids: shards number fields locally (analysis touches no database);
 * the flush maps local numbers to the database's field ids ("field::NAME"
 * in meta.db, from sequence "field"), creating them in its transaction.
 * Ids handed out in an aborted transaction are forgotten with it: nothing
 * is cached across flushes.
 */
#include "idx_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MEM (128u * 1024u * 1024u)
#define QUEUE_JOBS 16     /* groups of documents, or lent flush work */

/* Documents go to the workers in groups of up to GROUP_DOCS (or
 * GROUP_BYTES of JSON): a queue hand-off per document cost two context
 * switches each (24k of them for the Debian catalog), and on a busy machine
 * every hand-off waits for a time slice. */
#define GROUP_DOCS 64
#define GROUP_BYTES (512u * 1024u)

typedef struct gdoc {
    uint32_t docid;
    size_t old_off, old_len;   /* in the job's data; SIZE_MAX: none */
    size_t new_off, new_len;
    size_t leaves_off, leaves_len;  /* the new version's kept leaves */
    /* the document record to encode, when rec */
    bool rec;
    size_t key_off, key_len;
    uint64_t cas;
    kv_doc_coder coder;
} gdoc;

typedef struct job {
    void (*fn)(void *);    /* a flush's work lent to the worker (no docs) */
    void *arg;
    unsigned n;
    gdoc doc[GROUP_DOCS];
    kv_buf data;           /* the documents' JSON, NUL-terminated each */
} job;

static void job_free(job *j)
{
    if (!j)
        return;
    kv_buf_free(&j->data);
    kv_free(j);
}

typedef struct worker {
    pthread_t th;
    bool started;
    idx_shard *shard;
    /* document records encoded here, stored by the flush: (be32 docid,
     * u32 length, record) back to back */
    kv_buf recs;
    kv_buf scratch;
    kv_doc_cctx *cx;
    struct idx_writer *w;
    atomic_size_t bytes;   /* the shard's size after its last job */
} worker;

struct idx_writer {
    char *config;
    size_t config_len;
    size_t mem_limit;
    bool positions;
    idx_shard *local;      /* the caller's shard, without workers */
    /* workers */
    worker *wk;
    unsigned nwk;
    pthread_mutex_t mu;
    pthread_cond_t not_empty, not_full, idle;
    job *queue[QUEUE_JOBS];
    job *group;            /* documents not handed to the workers yet */
    job *spare[QUEUE_JOBS];/* done jobs kept for reuse (mu): a group's
                              buffer, fresh each time, page-faulted in */
    unsigned nspare;
    unsigned qhead, qlen;
    unsigned pending;      /* jobs queued or being analyzed */
    bool stop;
    bool failed;
    kv_err werr;           /* the first worker failure */
    /* documents with a change in the buffer */
    idx_idset bdocs;
    uint64_t ndocs;
    /* flush scratch */
    kv_buf key, val;
};

/* Encode g's document record and keep it for the flush. */
static int encode_rec(worker *me, const gdoc *g, const char *d, kv_err *err)
{
    int rc = kv_doc_encode(&me->cx, &g->coder, d + g->key_off, g->key_len,
                           g->cas, d + g->new_off, g->new_len, &me->scratch,
                           err);
    unsigned char h[8];
    kv_put_be32(h, g->docid);
    uint32_t n = (uint32_t)me->scratch.len;
    memcpy(h + 4, &n, 4);
    if (!rc)
        rc = kv_buf_append(&me->recs, h, 8, err);
    if (!rc)
        rc = kv_buf_append(&me->recs, me->scratch.data, me->scratch.len, err);
    return rc;
}

static void *worker_main(void *arg)
{
    worker *me = arg;
    idx_writer *w = me->w;
    kv_err err = KV_ERR_INIT;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        while (!w->stop && w->qlen == 0)
            pthread_cond_wait(&w->not_empty, &w->mu);
        if (w->qlen == 0) {
            pthread_mutex_unlock(&w->mu);
            break;
        }
        job *j = w->queue[w->qhead];
        w->qhead = (w->qhead + 1) % QUEUE_JOBS;
        w->qlen--;
        bool skip = w->failed;
        pthread_cond_signal(&w->not_full);
        pthread_mutex_unlock(&w->mu);
        int rc = KVFTS_OK;
        bool analysis = !j->fn;
        if (j->fn)
            j->fn(j->arg);       /* reports through its own state */
        for (unsigned i = 0; !skip && !rc && i < j->n; i++) {
            const gdoc *g = &j->doc[i];
            const char *d = j->data.data;
            rc = idx_shard_doc(me->shard, g->docid,
                               g->old_off == SIZE_MAX ? NULL
                                                      : d + g->old_off,
                               g->old_len,
                               g->new_off == SIZE_MAX ? NULL
                                                      : d + g->new_off,
                               g->new_len,
                               g->leaves_off == SIZE_MAX ? NULL
                                                         : d + g->leaves_off,
                               g->leaves_len, &err);
            if (!rc && g->rec)
                rc = encode_rec(me, g, d, &err);
        }
        /* Only after its own analysis: a flush's job (fn) is waited for
         * through its own state, so once it returns the caller may reset
         * this shard -- reading it then was a data race (ThreadSanitizer,
         * unit.threads), and stored a stale size over the reset's 0. */
        if (analysis)
            atomic_store(&me->bytes,
                         idx_shard_bytes(me->shard) + me->recs.len);
        pthread_mutex_lock(&w->mu);
        if (w->nspare < QUEUE_JOBS && j->data.cap <= 4 * GROUP_BYTES) {
            j->fn = NULL;
            j->arg = NULL;
            j->n = 0;
            kv_buf_reset(&j->data);
            w->spare[w->nspare++] = j;
            j = NULL;
        }
        if (rc && !w->failed) {
            w->failed = true;
            w->werr = err;
        }
        if (--w->pending == 0)
            pthread_cond_broadcast(&w->idle);
        pthread_mutex_unlock(&w->mu);
        job_free(j);
    }
    return NULL;
}

/* A job to fill: a spare one, or a new one (NULL: out of memory). */
static job *job_get(idx_writer *w)
{
    pthread_mutex_lock(&w->mu);
    job *j = w->nspare ? w->spare[--w->nspare] : NULL;
    pthread_mutex_unlock(&w->mu);
    return j ? j : kv_calloc(1, sizeof *j);
}

static void stop_workers(idx_writer *w)
{
    if (!w->nwk)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_broadcast(&w->not_empty);
    pthread_mutex_unlock(&w->mu);
    for (unsigned i = 0; i < w->nwk; i++) {
        if (w->wk[i].started)
            pthread_join(w->wk[i].th, NULL);
        idx_shard_free(w->wk[i].shard);
        kv_buf_free(&w->wk[i].recs);
        kv_buf_free(&w->wk[i].scratch);
        kv_doc_cctx_free(w->wk[i].cx);
    }
    kv_free(w->wk);
    w->wk = NULL;
    w->nwk = 0;
    w->stop = false;
}

int idx_writer_new(idx_writer **out, const char *config_json, size_t len,
                   size_t mem_limit, kv_err *err)
{
    *out = NULL;
    idx_writer *w = kv_calloc(1, sizeof *w);
    if (!w)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->not_empty, NULL);
    pthread_cond_init(&w->not_full, NULL);
    pthread_cond_init(&w->idle, NULL);
    w->mem_limit = mem_limit ? mem_limit : DEFAULT_MEM;
    w->config = kv_strndup(config_json ? config_json : "", len);
    w->config_len = len;
    int rc = w->config ? KVFTS_OK
                       : kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    if (!rc)
        rc = idx_shard_new(&w->local, w->config, len, err);
    if (rc) {
        idx_writer_free(w);
        return rc;
    }
    tok_analysis *a = NULL;
    if (tok_analysis_new(&a, w->config, len, NULL) == KVFTS_OK)
        w->positions = tok_analysis_positions(a);
    tok_analysis_free(a);
    *out = w;
    return KVFTS_OK;
}

void idx_writer_free(idx_writer *w)
{
    if (!w)
        return;
    stop_workers(w);
    pthread_mutex_lock(&w->mu);
    for (unsigned i = 0; i < w->qlen; i++)
        job_free(w->queue[(w->qhead + i) % QUEUE_JOBS]);
    w->qlen = 0;
    pthread_mutex_unlock(&w->mu);
    job_free(w->group);
    for (unsigned i = 0; i < w->nspare; i++)
        job_free(w->spare[i]);
    idx_shard_free(w->local);
    idx__idset_free(&w->bdocs);
    kv_buf_free(&w->key);
    kv_buf_free(&w->val);
    kv_free(w->config);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->not_empty);
    pthread_cond_destroy(&w->not_full);
    pthread_cond_destroy(&w->idle);
    kv_free(w);
}

void idx_writer_set_mem(idx_writer *w, size_t mem_limit)
{
    w->mem_limit = mem_limit ? mem_limit : DEFAULT_MEM;
}

int idx_writer_workers(idx_writer *w, unsigned n, kv_err *err)
{
    if (n == w->nwk)
        return KVFTS_OK;
    stop_workers(w);
    w->failed = false;
    if (n == 0)
        return KVFTS_OK;
    w->wk = kv_calloc(n, sizeof *w->wk);
    if (!w->wk)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    w->nwk = n;
    int rc = KVFTS_OK;
    for (unsigned i = 0; !rc && i < n; i++) {
        worker *k = &w->wk[i];
        k->w = w;
        atomic_init(&k->bytes, 0);
        rc = idx_shard_new(&k->shard, w->config, w->config_len, err);
        if (!rc && pthread_create(&k->th, NULL, worker_main, k) != 0)
            rc = kv_seterr(err, KVFTS_ERROR, "cannot start an analysis "
                           "thread");
        if (!rc)
            k->started = true;
    }
    if (rc)
        stop_workers(w);
    return rc;
}

/* The first failure of a worker, or OK. */
static int worker_failure(idx_writer *w, kv_err *err)
{
    pthread_mutex_lock(&w->mu);
    int rc = KVFTS_OK;
    if (w->failed) {
        if (err)
            *err = w->werr;
        rc = w->werr.code ? w->werr.code : KVFTS_ERROR;
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

static void enqueue(idx_writer *w, job *j);

/* Hand the documents grouped so far to the workers. */
static void submit_group(idx_writer *w)
{
    if (w->group && w->group->n) {
        enqueue(w, w->group);
        w->group = NULL;
    }
}

/* Wait until the workers have analyzed everything queued. */
static void wait_idle(idx_writer *w)
{
    submit_group(w);
    pthread_mutex_lock(&w->mu);
    while (w->pending > 0)
        pthread_cond_wait(&w->idle, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

static void enqueue(idx_writer *w, job *j)
{
    pthread_mutex_lock(&w->mu);
    while (w->qlen == QUEUE_JOBS)
        pthread_cond_wait(&w->not_full, &w->mu);
    w->queue[(w->qhead + w->qlen) % QUEUE_JOBS] = j;
    w->qlen++;
    w->pending++;
    pthread_cond_signal(&w->not_empty);
    pthread_mutex_unlock(&w->mu);
}

/* idx_runner's spawn: fn(arg) as a job of the (idle) workers. */
static bool spawn_job(void *ctx, void (*fn)(void *), void *arg)
{
    idx_writer *w = ctx;
    job *j = job_get(w);
    if (!j)
        return false;
    j->fn = fn;
    j->arg = arg;
    enqueue(w, j);
    return true;
}

static int doc_write(idx_writer *w, uint32_t docid, const char *old_json,
                     size_t old_len, const char *new_json, size_t new_len,
                     const char *leaves, size_t leaves_len,
                     const idx_docrec *dr, kv_err *err)
{
    if (!new_json)
        leaves = NULL;
    bool added;
    int rc = idx__idset_add(&w->bdocs, docid, &added, err);
    if (rc)
        return rc;
    w->ndocs++;
    if (!w->nwk)
        return idx_shard_doc(w->local, docid, old_json, old_len, new_json,
                             new_len, leaves, leaves_len, err);
    if ((rc = worker_failure(w, err)))
        return rc;
    if (!w->group && !(w->group = job_get(w)))
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    job *j = w->group;
    gdoc *g = &j->doc[j->n];
    g->docid = docid;
    g->old_off = g->new_off = g->leaves_off = SIZE_MAX;
    g->old_len = old_len;
    g->new_len = new_len;
    g->leaves_len = leaves_len;
    if (old_json) {
        g->old_off = j->data.len;
        if ((rc = kv_buf_append(&j->data, old_json, old_len, err)) ||
            (rc = kv_buf_append(&j->data, "", 1, err)))
            return rc;
    }
    if (new_json) {
        g->new_off = j->data.len;
        if ((rc = kv_buf_append(&j->data, new_json, new_len, err)) ||
            (rc = kv_buf_append(&j->data, "", 1, err)))
            return rc;
    }
    if (leaves) {
        g->leaves_off = j->data.len;
        if ((rc = kv_buf_append(&j->data, leaves, leaves_len, err)))
            return rc;
    }
    g->rec = dr && new_json;
    if (g->rec) {
        g->key_off = j->data.len;
        g->key_len = dr->klen;
        g->cas = dr->cas;
        g->coder = dr->coder;
        if ((rc = kv_buf_append(&j->data, dr->key, dr->klen, err)))
            return rc;
    }
    if (++j->n == GROUP_DOCS || j->data.len >= GROUP_BYTES)
        submit_group(w);
    return KVFTS_OK;
}

int idx_doc_write(idx_writer *w, uint32_t docid, const char *old_json,
                  size_t old_len, const char *new_json, size_t new_len,
                  const char *leaves, size_t leaves_len, kv_err *err)
{
    return doc_write(w, docid, old_json, old_len, new_json, new_len, leaves,
                     leaves_len, NULL, err);
}

bool idx_writer_defers_records(const idx_writer *w)
{
    return w->nwk > 0;
}

int idx_doc_write_rec(idx_writer *w, uint32_t docid, const char *old_json,
                      size_t old_len, const char *new_json, size_t new_len,
                      const char *leaves, size_t leaves_len,
                      const idx_docrec *dr, kv_err *err)
{
    if (!w->nwk)
        return kv_seterr(err, KVFTS_ERROR, "document records are deferred "
                         "only to analysis threads");
    return doc_write(w, docid, old_json, old_len, new_json, new_len, leaves,
                     leaves_len, dr, err);
}

bool idx_doc_buffered(const idx_writer *w, uint32_t docid)
{
    return idx__idset_has(&w->bdocs, docid);
}

size_t idx_buffered_bytes(const idx_writer *w)
{
    size_t n = idx__idset_bytes(&w->bdocs);
    if (!w->nwk)
        return n + idx_shard_bytes(w->local);
    for (unsigned i = 0; i < w->nwk; i++)
        n += atomic_load(&w->wk[i].bytes);
    return n;
}

bool idx_flush_due(const idx_writer *w)
{
    return idx_buffered_bytes(w) >= w->mem_limit;
}

uint64_t idx_buffered_docs(const idx_writer *w)
{
    return w->ndocs;
}

static void buffer_reset(idx_writer *w)
{
    idx_shard_reset(w->local);
    for (unsigned i = 0; i < w->nwk; i++) {
        idx_shard_reset(w->wk[i].shard);
        kv_buf_reset(&w->wk[i].recs);
        atomic_store(&w->wk[i].bytes, 0);
    }
    idx__idset_reset(&w->bdocs);
    w->ndocs = 0;
}

void idx_discard(idx_writer *w)
{
    wait_idle(w);
    pthread_mutex_lock(&w->mu);
    w->failed = false;
    w->werr.code = 0;
    pthread_mutex_unlock(&w->mu);
    buffer_reset(w);
}

/* ---- the flush ------------------------------------------------------------ */

/* The id of field @p name (created in txn when new). */
static int field_id(idx_writer *w, kv_txn *txn, const char *name,
                    size_t nlen, uint32_t *out, kv_err *err)
{
    int rc = idx_key_field(&w->key, name, nlen, err);
    if (!rc)
        rc = kv_get(txn, KV_META, w->key.data, w->key.len, &w->val, false,
                    err);
    idx_field rec = { 0, 0, 0 };
    if (rc == KVFTS_OK) {
        rc = idx_field_decode(w->val.data, w->val.len, &rec, err);
    } else if (rc == KVFTS_ENOTFOUND) {
        uint64_t id;
        rc = kv_seq_next(txn, "field", &id, err);
        if (!rc && id > (UINT32_MAX >> 2))
            rc = kv_seterr(err, KVFTS_ERROR, "field ids exhausted");
        rec.id = (uint32_t)id;
        if (!rc)
            rc = idx_field_encode(&rec, &w->val, err);
        if (!rc)
            rc = kv_put(txn, KV_META, w->key.data, w->key.len, w->val.data,
                        w->val.len, err);
    }
    if (!rc)
        *out = rec.id;
    return rc;
}

/* Add (ddocs, dlen) to field fid's statistics. */
static int field_stats_add(idx_writer *w, kv_txn *txn, const char *name,
                           size_t nlen, int64_t ddocs, int64_t dlen,
                           kv_err *err)
{
    idx_field rec;
    int rc = idx_key_field(&w->key, name, nlen, err);
    if (!rc)
        rc = kv_get(txn, KV_META, w->key.data, w->key.len, &w->val, true,
                    err);
    if (!rc)
        rc = idx_field_decode(w->val.data, w->val.len, &rec, err);
    if (rc == KVFTS_ENOTFOUND)
        rc = kv_seterr(err, KVFTS_ECORRUPT, "field record '%.*s' missing",
                       (int)nlen, name);
    if (rc)
        return rc;
    if ((ddocs < 0 && (uint64_t)-ddocs > rec.docs) ||
        (dlen < 0 && (uint64_t)-dlen > rec.total_len))
        return kv_seterr(err, KVFTS_ECORRUPT, "field statistics of '%.*s' "
                         "would go negative", (int)nlen, name);
    rec.docs = (uint64_t)((int64_t)rec.docs + ddocs);
    rec.total_len = (uint64_t)((int64_t)rec.total_len + dlen);
    rc = idx_field_encode(&rec, &w->val, err);
    if (!rc)
        rc = kv_put(txn, KV_META, w->key.data, w->key.len, w->val.data,
                    w->val.len, err);
    return rc;
}

/* Add n to meta.db's "stat::skipped_tokens" (big-endian u64). */
static int skipped_add(kv_txn *txn, uint64_t n, kv_err *err)
{
    static const char key[] = IDX_SKIPPED_KEY;
    kv_buf v = KV_BUF_INIT;
    uint64_t have = 0;
    int rc = kv_get(txn, KV_META, key, sizeof key - 1, &v, true, err);
    if (rc == KVFTS_OK && v.len == 8)
        have = kv_get_be64((const unsigned char *)v.data);
    else if (rc == KVFTS_OK || rc == KVFTS_ENOTFOUND)
        rc = KVFTS_OK;
    kv_buf_free(&v);
    if (rc)
        return rc;
    unsigned char b[8];
    kv_put_be64(b, have + n);
    return kv_put(txn, KV_META, key, sizeof key - 1, b, 8, err);
}

typedef struct recref {
    uint32_t docid, len;
    const char *rec;
} recref;

static int recref_cmp(const void *a, const void *b)
{
    uint32_t x = ((const recref *)a)->docid, y = ((const recref *)b)->docid;
    return x < y ? -1 : x > y;
}

/* Store the document records the workers encoded, in doc id order (the
 * B-tree's appends; a new document's id is the largest yet): part of the
 * flush's side_job, done while the segment is encoded. */
static int put_records(idx_writer *w, kv_txn *txn, kv_err *err)
{
    size_t n = 0;
    for (unsigned i = 0; i < w->nwk; i++)
        for (size_t off = 0; off + 8 <= w->wk[i].recs.len; n++) {
            uint32_t len;
            memcpy(&len, w->wk[i].recs.data + off + 4, 4);
            off += 8 + len;
        }
    if (n == 0)
        return KVFTS_OK;
    recref *v = kv_malloc(n * sizeof *v);
    if (!v)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    n = 0;
    for (unsigned i = 0; i < w->nwk; i++)
        for (size_t off = 0; off + 8 <= w->wk[i].recs.len; n++) {
            const char *p = w->wk[i].recs.data + off;
            v[n].docid = kv_get_be32((const unsigned char *)p);
            memcpy(&v[n].len, p + 4, 4);
            v[n].rec = p + 8;
            off += 8 + v[n].len;
        }
    qsort(v, n, sizeof *v, recref_cmp);
    int rc = KVFTS_OK;
    for (size_t i = 0; !rc && i < n; i++)
        rc = kv_doc_put_record(txn, v[i].docid, v[i].rec, v[i].len, err);
    kv_free(v);
    return rc;
}

/* ---- document lengths ---------------------------------------------------- */

typedef struct lens_flush {
    idx_doclen *add;      /* the new versions, ascending by id once sorted */
    idx_len *pairs;       /* their (field id, length) pairs */
    uint32_t *del;        /* the ids deleted, ascending once sorted */
    uint32_t nadd, acap, npairs, pcap, ndel, dcap;
    idx_doclen *out;      /* one span's documents */
    idx_len *opairs;      /* and their pairs */
    uint32_t nout, ocap, nop, opcap;
    idx_len *pairs_scratch;   /* a stored document's pairs */
    uint32_t scap;
} lens_flush;

/* By id, then by where the pairs are (a new version's come after its
 * stored record's). */
static int doclen_cmp(const void *a, const void *b)
{
    const idx_doclen *x = a, *y = b;
    if (x->docid != y->docid)
        return x->docid < y->docid ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Document docid with pairs l[0..n) onto the span's list. */
static int span_push(lens_flush *f, uint32_t docid, const idx_len *l,
                     uint32_t n, kv_err *err)
{
    int rc = idx__grow(&f->out, &f->ocap, (uint64_t)f->nout + 1,
                       sizeof *f->out, err);
    if (!rc)
        rc = idx__grow(&f->opairs, &f->opcap, (uint64_t)f->nop + n + 1,
                       sizeof *f->opairs, err);
    if (rc)
        return rc;
    f->out[f->nout++] = (idx_doclen){ docid, f->nop, n };
    if (n)
        memcpy(f->opairs + f->nop, l, n * sizeof *l);
    f->nop += n;
    return KVFTS_OK;
}

static int missing(uint32_t docid, kv_err *err)
{
    return kv_seterr(err, KVFTS_ECORRUPT, "length record of document %u "
                     "missing", docid);
}

/* Span base's record: its stored documents but those deleted (f->del from
 * *id on), and the new versions in it (f->add from *ia on). */
static int span_write(idx_writer *w, kv_txn *txn, lens_flush *f,
                      uint32_t base, uint32_t *ia, uint32_t *id, kv_err *err)
{
    unsigned char key[4];
    kv_put_be32(key, base);
    f->nout = f->nop = 0;
    int rc = kv_get(txn, KV_DOCLENS, key, 4, &w->val, true, err);
    bool stored = rc == KVFTS_OK;
    if (rc == KVFTS_ENOTFOUND) {
        kv_err_clear(err);
        rc = KVFTS_OK;
    }
    idx_lens_it it;
    bool more = stored;
    if (stored)
        rc = idx_lens_open(&it, w->val.data, w->val.len, base, err);
    while (!rc && more && !(rc = idx_lens_next(&it, &more, err)) && more) {
        if (*id < f->ndel && f->del[*id] < it.docid &&
            idx_lens_base(f->del[*id]) == base)
            return missing(f->del[*id], err);
        if (*id < f->ndel && f->del[*id] == it.docid) {
            ++*id;
            continue;
        }
        uint32_t np;
        rc = idx_lens_pairs(&it, &f->pairs_scratch, &np, &f->scap, err);
        if (!rc)
            rc = span_push(f, it.docid, f->pairs_scratch, np, err);
    }
    if (rc)
        return rc;
    if (*id < f->ndel && idx_lens_base(f->del[*id]) == base)
        return missing(f->del[*id], err);
    /* The new versions, after the stored documents: a document written
     * again under its id (kvfts_put of the same key) replaces its record. */
    bool sorted = true;
    for (; !rc && *ia < f->nadd && idx_lens_base(f->add[*ia].docid) == base;
         ++*ia) {
        const idx_doclen *d = &f->add[*ia];
        sorted &= !f->nout || f->out[f->nout - 1].docid < d->docid;
        rc = span_push(f, d->docid, f->pairs + d->off, d->n, err);
    }
    if (rc)
        return rc;
    if (!sorted) {
        qsort(f->out, f->nout, sizeof *f->out, doclen_cmp);
        uint32_t k = 0;
        for (uint32_t i = 0; i < f->nout; i++) {
            if (k && f->out[k - 1].docid == f->out[i].docid)
                k--;
            f->out[k++] = f->out[i];
        }
        f->nout = k;
    }
    if (f->nout == 0)
        return stored ? kv_del(txn, KV_DOCLENS, key, 4, err) : KVFTS_OK;
    rc = idx_lens_encode(base, f->out, f->nout, f->opairs, &w->val, err);
    return rc ? rc : kv_put(txn, KV_DOCLENS, key, 4, w->val.data, w->val.len,
                            err);
}

/* The lengths of a flush's documents: the new versions' records and the
 * deleted ids' removal, span by span (each span's record read, changed and
 * written once; a load appends to the last). */
static int lens_write(idx_writer *w, kv_txn *txn, idx_shard **shards,
                      uint32_t n, uint32_t **fids, kv_err *err)
{
    lens_flush f;
    memset(&f, 0, sizeof f);
    int rc = KVFTS_OK;
    for (uint32_t s = 0; !rc && s < n; s++) {
        const idx_doclen *d;
        const idx_len *l;
        const uint32_t *del;
        uint32_t nd, ndel;
        idx_shard_lengths(shards[s], &d, &nd, &l, &del, &ndel);
        for (uint32_t i = 0; !rc && i < nd; i++) {
            rc = idx__grow(&f.add, &f.acap, (uint64_t)f.nadd + 1,
                           sizeof *f.add, err);
            if (!rc)
                rc = idx__grow(&f.pairs, &f.pcap,
                               (uint64_t)f.npairs + d[i].n + 1,
                               sizeof *f.pairs, err);
            if (rc)
                break;
            f.add[f.nadd++] = (idx_doclen){ d[i].docid, f.npairs, d[i].n };
            for (uint32_t j = 0; j < d[i].n; j++)
                f.pairs[f.npairs++] = (idx_len){
                    fids[s][l[d[i].off + j].field_id], l[d[i].off + j].len };
        }
        if (!rc && ndel)
            rc = idx__grow(&f.del, &f.dcap, (uint64_t)f.ndel + ndel,
                           sizeof *f.del, err);
        if (!rc && ndel) {
            memcpy(f.del + f.ndel, del, ndel * sizeof *del);
            f.ndel += ndel;
        }
    }
    if (!rc && f.nadd > 1)
        qsort(f.add, f.nadd, sizeof *f.add, doclen_cmp);
    if (!rc && f.ndel > 1)
        qsort(f.del, f.ndel, sizeof *f.del, idx__u32_cmp);
    uint32_t ia = 0, id = 0;
    while (!rc && (ia < f.nadd || id < f.ndel)) {
        uint32_t base = UINT32_MAX;
        if (ia < f.nadd)
            base = idx_lens_base(f.add[ia].docid);
        if (id < f.ndel && idx_lens_base(f.del[id]) < base)
            base = idx_lens_base(f.del[id]);
        rc = span_write(w, txn, &f, base, &ia, &id, err);
    }
    kv_free(f.add);
    kv_free(f.pairs);
    kv_free(f.del);
    kv_free(f.out);
    kv_free(f.opairs);
    kv_free(f.pairs_scratch);
    return rc;
}

/* What this thread writes of a flush while the segment is encoded (the
 * idx_side job): the documents' records and lengths; then it writes the
 * pages they dirtied to the files (kv_txn_trickle), which the commit's
 * checkpoint would otherwise do with every other thread idle. */
typedef struct side_ctx {
    idx_writer *w;
    idx_shard **shards;
    uint32_t n;
    uint32_t **fids;
} side_ctx;

static int side_job(void *arg, kv_txn *txn, kv_err *err)
{
    side_ctx *c = arg;
    int rc = put_records(c->w, txn, err);
    if (!rc)
        rc = lens_write(c->w, txn, c->shards, c->n, c->fids, err);
    if (!rc)
        kv_txn_trickle(txn);
    return rc;
}

int idx_flush(idx_writer *w, kv_txn *txn, kv_err *err)
{
    wait_idle(w);
    int rc = worker_failure(w, err);
    if (rc || w->ndocs == 0)
        return rc;
    uint32_t n = w->nwk ? w->nwk : 1;
    idx_shard *sh[64];
    idx_shard **shards = n <= 64 ? sh : kv_malloc(n * sizeof *shards);
    uint32_t **maps = kv_calloc(n, sizeof *maps);
    uint32_t **fids = kv_calloc(n, sizeof *fids);
    if (!shards || !maps || !fids) {
        rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        goto done;
    }
    for (uint32_t s = 0; s < n; s++)
        shards[s] = w->nwk ? w->wk[s].shard : w->local;
    /* Local fields -> field ids; local columns -> global. */
    for (uint32_t s = 0; !rc && s < n; s++) {
        uint32_t nf = idx_shard_nfields(shards[s]);
        fids[s] = kv_calloc(nf + 1, sizeof **fids);
        maps[s] = kv_calloc((size_t)nf * 4 + 1, sizeof **maps);
        if (!fids[s] || !maps[s]) {
            rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory");
            break;
        }
        for (uint32_t lf = 0; !rc && lf < nf; lf++) {
            uint32_t l;
            const char *name = idx_shard_field(shards[s], lf, &l);
            rc = field_id(w, txn, name, l, &fids[s][lf], err);
            for (uint32_t k = 1; !rc && k < 4; k++)
                maps[s][lf << 2 | k] = fids[s][lf] << 2 | k;
        }
    }
    /* The segment, encoded by the (idle) workers while this thread puts
     * the documents' records and lengths (side_job), then its ranges. */
    bool any_terms = false;
    for (uint32_t s = 0; s < n; s++)
        any_terms |= idx_shard_nterms(shards[s]) > 0;
    side_ctx sc = { w, shards, n, fids };
    if (!rc && !any_terms)
        rc = side_job(&sc, txn, err);
    if (!rc && any_terms) {
        idx_seg seg;
        idx_segs list;
        memset(&list, 0, sizeof list);
        idx_runner run = { spawn_job, w, w->nwk };
        idx_side side = { side_job, &sc };
        rc = idx_segw_shards(txn, shards, n, maps, w->positions, &run, &side,
                             &seg, err);
        if (!rc)
            rc = idx_segs_read(&list, txn, true, err);
        if (!rc) {
            seg.level = idx_seg_level(&list, seg.bytes);
            rc = idx_segs_push(&list, &seg, err);
        }
        if (!rc)
            rc = idx_segs_write(&list, txn, err);
        idx_segs_free(&list);
    }
    /* Field statistics and over-long tokens. */
    uint64_t skipped = 0;
    for (uint32_t s = 0; !rc && s < n; s++) {
        const int64_t *dd, *dl;
        idx_shard_field_deltas(shards[s], &dd, &dl);
        uint32_t nf = idx_shard_nfields(shards[s]);
        for (uint32_t lf = 0; !rc && lf < nf; lf++) {
            if (!dd[lf] && !dl[lf])
                continue;
            uint32_t l;
            const char *name = idx_shard_field(shards[s], lf, &l);
            rc = field_stats_add(w, txn, name, l, dd[lf], dl[lf], err);
        }
        skipped += idx_shard_skipped(shards[s]);
    }
    if (!rc && skipped)
        rc = skipped_add(txn, skipped, err);
    if (!rc) {
        uint64_t gen;   /* cached length columns are stale from the commit */
        rc = kv_seq_next(txn, IDX_LENS_GEN, &gen, err);
    }
    if (!rc)
        buffer_reset(w);
done:
    for (uint32_t s = 0; s < n && maps; s++)
        kv_free(maps[s]);
    for (uint32_t s = 0; s < n && fids; s++)
        kv_free(fids[s]);
    kv_free(maps);
    kv_free(fids);
    if (shards != sh)
        kv_free(shards);
    return rc;
}

/* ---- clearing ------------------------------------------------------------- */

int idx_clear(kv_txn *txn, kv_err *err)
{
    /* Every segment goes (large ones' files after the commit), and so
     * does any file that belongs to none (kvfts check reports them). */
    idx_segs s;
    memset(&s, 0, sizeof s);
    uint32_t *files = NULL;
    size_t nstray = 0;
    int rc = idx_segs_read(&s, txn, true, err);
    if (!rc)
        rc = kv_parts_list(txn, &files, &nstray, err);
    if (!rc)
        rc = idx_seg_strays(txn, &s, files, &nstray, err);
    for (uint32_t i = 0; !rc && i < s.n; i++)
        rc = idx_seg_remove(txn, s.v[i].id, err);
    for (size_t i = 0; !rc && i < nstray; i++)
        rc = idx_seg_remove(txn, files[i], err);
    if (!rc)
        rc = idx_merge_cancel(txn, err);
    kv_free(files);
    idx_segs_free(&s);
    if (!rc)
        rc = kv_del_prefix(txn, KV_DOCLENS, "", 0, err);
    if (!rc)
        rc = kv_del_prefix(txn, KV_META, IDX_FIELD_PREFIX,
                         strlen(IDX_FIELD_PREFIX), err);
    const struct { kv_space s; const char *key; } gone[] = {
        { KV_META, "seq::field" }, { KV_SEGS, IDX_SEGS_KEY } };
    for (size_t i = 0; !rc && i < 2; i++) {
        rc = kv_del(txn, gone[i].s, gone[i].key, strlen(gone[i].key), err);
        if (rc == KVFTS_ENOTFOUND)
            rc = KVFTS_OK;
    }
    if (!rc) {
        uint64_t gen;
        rc = kv_seq_next(txn, IDX_LENS_GEN, &gen, err);
    }
    return rc;
}
