/*
 * idx_merge.c -- merging segments: the policy, and merges done in bounded,
 * resumable steps.
 *
 * Policy (tiered by level, as SQLite FTS5's automerge and Lucene's tiered
 * policy): a batch's segment starts at the level of its size,
 * log10(bytes / 2 KiB) rounded down, and younger segments of lower levels
 * are raised to it; when MERGE_FACTOR (10) segments of one level stand
 * side by side, the oldest ten of them are merged into one segment of the
 * next level, in their place.  (By size, so that a large load's segment is
 * not rewritten with the next nine small batches: one document's segment,
 * about 2 KB, is level 0, a 1,000-document batch's 0.5 MB level 2, the
 * catalog's 25 MB level 4.  2 KiB, about one document, so that a merge's
 * output, one level above its inputs, is about as large as a batch's
 * segment of that level: ten single writes merged are level 1, 10,000
 * level 4 (about 5 MB).  With 64 KiB, 100 single writes merged (150 KB)
 * were level 2 like the catalog's whole load, and the merge of ten such
 * neighbours took in the 25 MB segment, in 8 MB steps after each single
 * write: library replaces in `--incremental`'s sequence took 1.4 ms
 * instead of 0.5.  Raised, so that the small segment of a load's last,
 * partial batch joins the next load's batches: when the new segment's
 * level was capped at the youngest's instead, such a tail held every later
 * batch of a growing database a level down, and merges of unequal inputs,
 * 400 to 700 MB, came at random steps of a 5M-document growth run.  A
 * database whose segments got their levels on the older scale has them
 * raised so by its next batch.)  Levels never increase
 * towards the young end, so the segments of a level are always neighbours,
 * and a merge keeps the list in age order, which deletions depend on (a
 * deletion cancels postings in older segments only).  A posting is
 * rewritten about log10(documents / batch) times, and the index has at
 * most 9 segments a level between merges.  Ten, as Lucene's
 * segmentsPerTier: with 8, the growth benchmark's steps of a million
 * documents (eleven 25 MB batches each) held one or two merges, 85k or
 * 95k documents/s by turns; with 10 each holds one, a fifth less merging,
 * and searches of the 5M-document database ran as fast.  `kvfts optimize`
 * merges every segment into one.
 *
 * Steps.  A merge is spread over transactions that each write at most
 * about max_bytes, so that no transaction's write set (and no cache) has to
 * hold a whole segment, and readers and writers go on in between.  Its
 * state is one record in segs.db ("merge"): the input segments, the output
 * segment's id, the last term written, and counts; a step continues after
 * that term, and a crash loses at most the step under way.  The first step
 * makes the output's file, and a transaction writes a file it makes
 * without log records (lib/kv/kv_part.c): it syncs the file and renames it
 * into place as it commits.  So a merge the policy starts after a batch
 * whose inputs hold at most the caller's once_bytes (the API: 384 MiB, ten
 * batches of 25-35 MB) is done in that one step, written once instead of
 * twice (the log, then the file): a quarter less time for the load's
 * eight-segment merges of 180 MB; and it is merged by term ranges on every
 * core (below).  Such a
 * merge holds the segment list until it commits, a second or two, where a
 * step holds it for a tenth of one; single writes and `kvfts optimize`
 * (once_bytes 0) merge in steps.  The output
 * segment is listed only by the step that writes its last term, which
 * replaces the inputs in the segment list in the same transaction and
 * removes them (idx_seg_remove): a small input's records are deleted
 * there, a large one's file (lib/kv/kv_part.c) goes on the list of files
 * to remove (segs.db "dropq"), removed whole by idx_drop_sweep() once no
 * reader of any process has it open.  Until then readers of older
 * snapshots read the inputs.
 *
 * Per term, the inputs' postings are merged by doc id: for a document
 * with postings in several inputs the newest survives, and a deletion in
 * the run cancels the posting it was made for (the newest older one in the
 * run) together with itself; deletions whose posting is older than the run
 * are kept.  Postings stream through one block of each input at a time, so
 * a term of millions of postings never sits in memory whole.
 */
#include "idx_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MERGE_FACTOR 10
/* A batch's segment of LEVEL_BYTES * 10^k bytes or more starts at level k
 * (idx_seg_level). */
#define LEVEL_BYTES (2u * 1024u)
#define OUT_CHUNK 1024     /* postings handed to the writer at a time */

/* ---- the merge state (segs.db "merge") ------------------------------------ */

typedef struct mstate {
    uint32_t out;          /* output segment id */
    uint32_t level;        /* its level */
    uint32_t nin;
    uint32_t *in;          /* input segment ids, oldest first */
    uint32_t ord;          /* next term ordinal of the output */
    kv_buf last;           /* last term written ("" before the first) */
    bool started;          /* a term was written */
    idx_seg acc;           /* the output's counts so far */
    uint64_t total;        /* input bytes */
    uint64_t done;         /* bytes of terms written so far (approx.) */
} mstate;

static void mstate_free(mstate *m)
{
    kv_free(m->in);
    kv_buf_free(&m->last);
    memset(m, 0, sizeof *m);
}

static int mstate_encode(const mstate *m, kv_buf *out, kv_err *err)
{
    kv_buf_reset(out);
    int rc = kv_buf_append(out, "\x03", 1, err);
    uint64_t head[] = { m->out, m->level, m->nin, m->ord, m->started,
                        m->acc.docs, m->acc.dels, m->acc.terms, m->acc.bytes,
                        m->acc.min_id, m->acc.max_id, m->total, m->done };
    for (size_t i = 0; !rc && i < sizeof head / sizeof head[0]; i++)
        rc = idx_buf_varint(out, head[i], err);
    for (uint32_t i = 0; !rc && i < m->nin; i++)
        rc = idx_buf_varint(out, m->in[i], err);
    if (!rc)
        rc = idx_buf_varint(out, m->last.len, err);
    if (!rc)
        rc = kv_buf_append(out, m->last.data ? m->last.data : "",
                           m->last.len, err);
    return rc;
}

static int mstate_decode(mstate *m, const char *buf, size_t len, kv_err *err)
{
    const unsigned char *p = (const unsigned char *)buf, *end = p + len;
    uint64_t v[13];
    if (len < 1 || p[0] != 3)
        goto bad;
    p++;
    for (size_t i = 0; i < 13; i++)
        if (!idx_varint_get(&p, end, &v[i]))
            goto bad;
    if (v[0] == 0 || v[0] > UINT32_MAX || v[2] == 0 || v[2] > len ||
        v[3] > UINT32_MAX || v[9] > UINT32_MAX || v[10] > UINT32_MAX)
        goto bad;
    m->out = (uint32_t)v[0];
    m->level = (uint32_t)v[1];
    m->nin = (uint32_t)v[2];
    m->ord = (uint32_t)v[3];
    m->started = v[4] != 0;
    m->acc = (idx_seg){ m->out, m->level, v[5], v[6], v[7], v[8],
                        (uint32_t)v[9], (uint32_t)v[10] };
    m->total = v[11];
    m->done = v[12];
    m->in = kv_calloc(m->nin, sizeof *m->in);
    if (!m->in)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    for (uint32_t i = 0; i < m->nin; i++) {
        uint64_t id;
        if (!idx_varint_get(&p, end, &id) || id == 0 || id > UINT32_MAX)
            goto bad;
        m->in[i] = (uint32_t)id;
    }
    uint64_t tl;
    if (!idx_varint_get(&p, end, &tl) || tl != (uint64_t)(end - p))
        goto bad;
    kv_buf_reset(&m->last);
    return kv_buf_append(&m->last, p, (size_t)tl, err);
bad:
    return kv_seterr(err, KVFTS_ECORRUPT, "corrupt merge state (%zu bytes)",
                     len);
}

static int mstate_read(mstate *m, kv_txn *txn, bool for_update, bool *have,
                       kv_err *err)
{
    kv_buf v = KV_BUF_INIT;
    int rc = kv_get(txn, KV_SEGS, IDX_MERGE_KEY, strlen(IDX_MERGE_KEY), &v,
                    for_update, err);
    *have = rc == KVFTS_OK;
    if (rc == KVFTS_ENOTFOUND)
        rc = KVFTS_OK;
    else if (!rc)
        rc = mstate_decode(m, v.data, v.len, err);
    kv_buf_free(&v);
    return rc;
}

static int mstate_write(const mstate *m, kv_txn *txn, kv_err *err)
{
    kv_buf v = KV_BUF_INIT;
    int rc = mstate_encode(m, &v, err);
    if (!rc)
        rc = kv_put(txn, KV_SEGS, IDX_MERGE_KEY, strlen(IDX_MERGE_KEY),
                    v.data, v.len, err);
    kv_buf_free(&v);
    return rc;
}

/* ---- the policy --------------------------------------------------------- */

uint32_t idx_seg_level(idx_segs *list, uint64_t bytes)
{
    uint32_t level = 0;
    for (uint64_t b = bytes / LEVEL_BYTES; b >= MERGE_FACTOR;
         b /= MERGE_FACTOR)
        level++;
    /* Younger segments of lower levels (a load's last, partial batch, single
     * writes) join this one's level, so that levels never increase towards
     * the young end without capping this one and every batch after it. */
    for (uint32_t i = list->n; i > 0 && list->v[i - 1].level < level; i--)
        list->v[i - 1].level = level;
    return level;
}

/* The run to merge: *start, *n (0: nothing to do). */
static void choose_run(const idx_segs *s, bool all, uint32_t *start,
                       uint32_t *n)
{
    *start = *n = 0;
    if (all) {
        bool dels = false;
        for (uint32_t i = 0; i < s->n; i++)
            dels |= s->v[i].dels > 0;
        if (s->n > 1 || (s->n == 1 && dels))
            *n = s->n;
        return;
    }
    /* From the young end: the first level with MERGE_FACTOR neighbours. */
    uint32_t i = s->n;
    while (i > 0) {
        uint32_t j = i - 1, level = s->v[j].level;
        while (j > 0 && s->v[j - 1].level == level)
            j--;
        if (i - j >= MERGE_FACTOR) {   /* the oldest: levels stay ordered */
            *start = j;
            *n = MERGE_FACTOR;
            return;
        }
        i = j;
    }
}

/* ---- per term: the inputs' postings merged ------------------------------- */

/* One input's postings of the current term, a block at a time. */
typedef struct input {
    uint32_t seg, rank;
    idx_seg_walk *w;
    bool have;             /* w is on an entry of the current term */
    const idx_entry *e;
    uint32_t ord;
    const char *term;
    size_t tlen;
    bool done;             /* the segment has no more terms */
    /* streaming the entry's postings */
    kv_cursor *bc;
    idx_block blk;
    uint32_t i;            /* next doc in blk */
    const char *raw;       /* blk's record (the cursor's), if external */
    size_t rawlen;
    bool blk_have;
    bool ended;            /* no more postings for this term */
    uint32_t *map;         /* entry column index -> output index */
    uint32_t mcap;
} input;

typedef struct merger {
    kv_txn *txn;           /* the inputs are read in it */
    input *in;
    uint32_t nin;
    idx_segw *w;
    /* the current term */
    uint32_t *table;
    uint32_t ntab, tcap;
    uint32_t *dels;        /* all the inputs' deletions: ids */
    uint32_t *drank;       /* and ranks */
    uint32_t ndel, dcap, rcap;
    uint32_t *keep;        /* deletions kept */
    uint32_t nkeep, kcap;
    uint64_t *ndelc;       /* per output column */
    uint32_t ndcap;
    uint64_t ndel_all;
    bool positions;        /* the output term has positions */
    idx_plist out;         /* postings on their way to the writer */
    uint32_t *idbuf;
    uint32_t idcap;
} merger;

static void input_free(input *x)
{
    idx_seg_walk_close(x->w);
    kv_cursor_close(x->bc);
    idx_block_free(&x->blk);
    kv_free(x->map);
}

/* Move x's walker to its next entry. */
static int input_advance(input *x, kv_err *err)
{
    int rc = idx_seg_walk_next(x->w, &x->term, &x->tlen, &x->e, &x->ord,
                               err);
    if (rc == KVFTS_ITEROVER) {
        x->done = true;
        return KVFTS_OK;
    }
    return rc;
}

static uint32_t out_index(const merger *g, uint32_t col)
{
    uint32_t lo = 0, hi = g->ntab;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (g->table[mid] < col)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Load x's next block of the term (x->ended when none is left). */
static int input_block(input *x, kv_txn *txn, kv_err *err)
{
    const idx_entry *e = x->e;
    x->i = 0;
    if (!(e->flags & IDX_E_EXTERNAL)) {
        if (x->blk_have) {
            x->ended = true;
            return KVFTS_OK;
        }
        x->blk_have = true;
        x->raw = NULL;
        return idx_block_decode(&x->blk, e->first, e->blk, e->blk_len,
                                e->ncols, IDX_DEC_POS, err);
    }
    int rc;
    if (!x->blk_have) {
        x->blk_have = true;
        if (!x->bc && (rc = kv_cursor_open(&x->bc, txn, KV_POSTINGS, err)))
            return rc;
        unsigned char key[13];
        idx_key_block(key, x->seg, x->ord, 0);
        rc = kv_cursor_seek(x->bc, key, sizeof key, err);
    } else {
        rc = kv_cursor_next(x->bc, err);
    }
    if (rc == KVFTS_ITEROVER) {
        x->ended = true;
        return KVFTS_OK;
    }
    if (rc)
        return rc;
    const char *k, *v;
    size_t kl, vl;
    kv_cursor_key(x->bc, &k, &kl);
    unsigned char pfx[9];
    kv_put_be32(pfx, x->seg);
    pfx[4] = 'B';
    kv_put_be32(pfx + 5, x->ord);
    if (kl != 13 || memcmp(k, pfx, 9) != 0) {
        x->ended = true;
        return KVFTS_OK;
    }
    kv_cursor_val(x->bc, &v, &vl);
    /* ids only: a block copied as it is (merge_term) needs no more */
    x->raw = v;
    x->rawlen = vl;
    return idx_block_decode(&x->blk, kv_get_be32((const unsigned char *)k +
                                                 9), v, vl, e->ncols,
                            IDX_DEC_IDS, err);
}

/* x's current posting id (UINT32_MAX when it has none left). */
static uint32_t input_id(const input *x)
{
    return x->have && !x->ended ? x->blk.l.ids[x->i] : UINT32_MAX;
}

static int input_step(input *x, kv_txn *txn, kv_err *err)
{
    if (++x->i < x->blk.l.n)
        return KVFTS_OK;
    int rc = input_block(x, txn, err);
    while (!rc && !x->ended && x->blk.l.n == 0)
        rc = input_block(x, txn, err);
    return rc;
}

typedef struct dref {
    uint32_t id, rank;
} dref;

static int dref_cmp(const void *a, const void *b)
{
    const dref *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

static int out_flush(merger *g, kv_err *err)
{
    if (g->out.n == 0)
        return KVFTS_OK;
    int rc = idx_segw_term_add(g->w, &g->out, 0, g->out.n, err);
    idx_plist_reset(&g->out, g->out.positions);
    return rc;
}

/* A deletion of id in the run meets *live, the newest posting of id so far
 * (or none): it cancels that posting, and both go (the counts of its
 * deletions drop); with none, the posting it was made for is older than the
 * run, so it is kept. */
static int apply_del(merger *g, input **live, uint32_t id, kv_err *err)
{
    if (*live) {
        int rc = idx_block_need(&(*live)->blk, IDX_DEC_VIEWS, err);
        if (rc)
            return rc;
        const idx_plist *l = &(*live)->blk.l;
        bool all = false;
        for (uint32_t v = l->vstart[(*live)->i];
             v < l->vstart[(*live)->i + 1]; v++) {
            uint32_t oc = (*live)->map[l->vcol[v]];
            if (g->ndelc[oc])
                g->ndelc[oc]--;
            all |= (g->table[oc] & IDX_KIND_ALL) != 0;
        }
        if (all && g->ndel_all)
            g->ndel_all--;
        *live = NULL;
        return KVFTS_OK;
    }
    int rc = idx__grow(&g->keep, &g->kcap, (uint64_t)g->nkeep + 1, 4, err);
    if (!rc)
        g->keep[g->nkeep++] = id;
    return rc;
}

/* Test hook: idx_test_merge_copy. */
static _Thread_local bool tls_no_copy;

void idx_test_merge_copy(bool on)
{
    tls_no_copy = !on;
}

/* The block input x starts at its id (the run's smallest; @p next: the
 * other inputs' smallest), copied to the output as it is, when
 * nothing in the run changes it: it is a block record of its own, no
 * other input has a posting in its id range and no deletion of the run
 * falls in it (dels from dat on are at id or after), and its column
 * indexes are the output's.  Then its ids and columns are all that is
 * decoded, and it is not encoded again (segments of consecutive batches
 * hold id ranges apart, so most blocks of a merge are so).  *copied: it
 * was, and the input is on its next block. */
static int copy_block(merger *g, input *x, uint32_t next, uint32_t dat,
                      bool *copied, kv_err *err)
{
    if (!x || x->i != 0 || !x->raw || x->blk.decoded != IDX_DEC_IDS ||
        tls_no_copy)
        return KVFTS_OK;
    const idx_plist *l = &x->blk.l;
    uint32_t last = l->ids[l->n - 1];
    if (last >= next || (dat < g->ndel && g->dels[dat] <= last) ||
        l->positions != g->positions)
        return KVFTS_OK;
    for (uint32_t c = 0; c < x->e->ncols; c++)
        if (x->map[c] != c)
            return KVFTS_OK;
    int rc = out_flush(g, err);
    if (!rc)
        rc = idx_block_need_cols(&x->blk, err);
    if (!rc)
        rc = idx_segw_term_add_block(g->w, &x->blk, x->raw, x->rawlen, err);
    if (rc)
        return rc;
    *copied = true;
    x->i = l->n - 1;
    return input_step(x, g->txn, err);
}

/* Merge the term the inputs in `have` are on. */
static int merge_term(merger *g, const char *term, size_t tlen, kv_err *err)
{
    int rc = KVFTS_OK;
    bool positions = false;
    /* The output's columns: the union of the inputs'. */
    g->ntab = 0;
    for (uint32_t i = 0; i < g->nin; i++) {
        input *x = &g->in[i];
        if (!x->have)
            continue;
        positions |= (x->e->flags & IDX_E_POSITIONS) != 0;
        if ((rc = idx__grow(&g->table, &g->tcap,
                            (uint64_t)g->ntab + x->e->ncols, 4, err)))
            return rc;
        for (uint32_t c = 0; c < x->e->ncols; c++) {
            uint32_t col = x->e->cols[c], k = out_index(g, col);
            if (k < g->ntab && g->table[k] == col)
                continue;
            memmove(g->table + k + 1, g->table + k,
                    (size_t)(g->ntab - k) * 4);
            g->table[k] = col;
            g->ntab++;
        }
    }
    if ((rc = idx__grow(&g->ndelc, &g->ndcap, (uint64_t)g->ntab + 1, 8,
                        err)))
        return rc;
    memset(g->ndelc, 0, (size_t)g->ntab * 8);
    g->ndel_all = 0;
    /* Deletions of the run, with their ranks; counts to start from. */
    g->ndel = 0;
    for (uint32_t i = 0; !rc && i < g->nin; i++) {
        input *x = &g->in[i];
        if (!x->have)
            continue;
        if ((rc = idx__grow(&x->map, &x->mcap, (uint64_t)x->e->ncols + 1, 4,
                            err)))
            return rc;
        for (uint32_t c = 0; c < x->e->ncols; c++) {
            x->map[c] = out_index(g, x->e->cols[c]);
            g->ndelc[x->map[c]] += x->e->ndelc[c];
        }
        g->ndel_all += x->e->ndel_all;
        if (!x->e->ndel)
            continue;
        rc = idx_entry_dels(x->e, &g->idbuf, &g->idcap, err);
        uint64_t need = (uint64_t)g->ndel + x->e->ndel;
        if (!rc)
            rc = idx__grow(&g->dels, &g->dcap, need, 4, err);
        if (!rc)
            rc = idx__grow(&g->drank, &g->rcap, need, 4, err);
        for (uint64_t k = 0; !rc && k < x->e->ndel; k++) {
            g->dels[g->ndel] = g->idbuf[k];
            g->drank[g->ndel++] = x->rank;
        }
    }
    if (!rc && g->ndel > 1) {
        dref *d = kv_malloc((size_t)g->ndel * sizeof *d);
        if (!d)
            return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        for (uint32_t k = 0; k < g->ndel; k++)
            d[k] = (dref){ g->dels[k], g->drank[k] };
        qsort(d, g->ndel, sizeof *d, dref_cmp);
        for (uint32_t k = 0; k < g->ndel; k++) {
            g->dels[k] = d[k].id;
            g->drank[k] = d[k].rank;
        }
        kv_free(d);
    }
    if (rc)
        return rc;
    g->positions = positions;
    rc = idx_segw_term_begin(g->w, term, tlen, g->table, g->ntab, positions,
                             err);
    idx_plist_reset(&g->out, positions);
    g->nkeep = 0;
    /* Start each input's postings. */
    for (uint32_t i = 0; !rc && i < g->nin; i++) {
        input *x = &g->in[i];
        x->blk_have = x->ended = false;
        x->blk.l.n = 0;
        if (!x->have)
            continue;
        if (x->e->ndocs == 0) {
            x->ended = true;
            continue;
        }
        rc = input_block(x, g->txn, err);
    }
    uint32_t dat = 0;
    while (!rc) {
        /* The smallest id, the first input at it, and the next id of the
         * others (id again if another input is at it too). */
        uint32_t id = UINT32_MAX, next = UINT32_MAX;
        input *first = NULL;
        for (uint32_t i = 0; i < g->nin; i++) {
            uint32_t y = input_id(&g->in[i]);
            if (y < id) {
                next = id;
                id = y;
                first = &g->in[i];
            } else if (y < next) {
                next = y;
            }
        }
        /* Deletions of ids before this posting (or all, at the end): no
         * posting of theirs is in the run: kept. */
        while (dat < g->ndel && g->dels[dat] < id) {
            if ((rc = idx__grow(&g->keep, &g->kcap, (uint64_t)g->nkeep + 1,
                                4, err)))
                return rc;
            g->keep[g->nkeep++] = g->dels[dat];
            dat++;
        }
        if (id == UINT32_MAX)
            break;
        bool copied = false;
        if ((rc = copy_block(g, first, next, dat, &copied, err)))
            return rc;
        if (copied)
            continue;
        /* The inputs with a posting of id, oldest first, and the run's
         * deletions of it: replay them in rank order. */
        input *live = NULL;
        uint32_t dk = dat;
        for (uint32_t i = 0; i < g->nin; i++) {
            input *x = &g->in[i];
            if (input_id(x) != id)
                continue;
            /* deletions at ranks up to x's apply before x's posting */
            while (dk < g->ndel && g->dels[dk] == id &&
                   g->drank[dk] <= x->rank) {
                if ((rc = apply_del(g, &live, id, err)))
                    return rc;
                dk++;
            }
            live = x;
        }
        while (dk < g->ndel && g->dels[dk] == id) {   /* after the last */
            if ((rc = apply_del(g, &live, id, err)))
                return rc;
            dk++;
        }
        dat = dk;
        if (live) {
            rc = idx_block_need(&live->blk, IDX_DEC_POS, err);
            if (!rc)
                rc = idx_plist_copy_doc(&g->out, &live->blk.l, live->i,
                                        live->map, err);
            if (!rc && g->out.n >= OUT_CHUNK)
                rc = out_flush(g, err);
        }
        for (uint32_t i = 0; !rc && i < g->nin; i++)
            if (input_id(&g->in[i]) == id)
                rc = input_step(&g->in[i], g->txn, err);
    }
    if (!rc)
        rc = out_flush(g, err);
    /* The kept deletions' counts: what was left after the cancellations
     * (ndelc and ndel_all were decreased as pairs went). */
    if (!rc)
        rc = idx_segw_term_end(g->w, g->keep, g->nkeep, g->ndelc,
                               g->ndel_all, err);
    return rc;
}

static void merger_free(merger *g)
{
    for (uint32_t i = 0; i < g->nin; i++)
        input_free(&g->in[i]);
    kv_free(g->in);
    idx_segw_free(g->w);
    kv_free(g->table);
    kv_free(g->dels);
    kv_free(g->drank);
    kv_free(g->keep);
    kv_free(g->ndelc);
    idx_plist_free(&g->out);
    kv_free(g->idbuf);
}

/* Open g's walkers on m's inputs, in txn, at the first term from on
 * (from NULL: the first of all); past it when @p skip (it is written). */
static int inputs_open(merger *g, const mstate *m, kv_txn *txn,
                       const char *from, size_t flen, bool skip,
                       kv_err *err)
{
    g->txn = txn;
    g->in = kv_calloc(m->nin, sizeof *g->in);
    if (!g->in)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    int rc = KVFTS_OK;
    for (uint32_t i = 0; !rc && i < m->nin; i++) {
        input *x = &g->in[i];
        g->nin = i + 1;
        idx_block_init(&x->blk);
        x->seg = m->in[i];
        x->rank = i;
        rc = idx_seg_walk_open(&x->w, txn, x->seg, from, flen, err);
        if (!rc)
            rc = input_advance(x, err);
        if (!rc && skip && !x->done &&
            idx__bytes_cmp(x->term, x->tlen, from, flen) == 0)
            rc = input_advance(x, err);
    }
    return rc;
}

/* Merge terms until the inputs end or reach @p hi (NULL: no end), which
 * *finished says, or until about max_bytes are written.  @p last (may be
 * NULL) gets the last term written. */
static int merge_terms(merger *g, const kv_buf *hi, uint64_t max_bytes,
                       kv_buf *last, bool *finished, kv_err *err)
{
    int rc = KVFTS_OK;
    kv_buf t = KV_BUF_INIT;
    *finished = false;
    while (!rc) {
        const char *best = NULL;
        size_t bl = 0;
        for (uint32_t i = 0; i < g->nin; i++) {
            input *x = &g->in[i];
            if (x->done)
                continue;
            if (!best || idx__bytes_cmp(x->term, x->tlen, best, bl) < 0) {
                best = x->term;
                bl = x->tlen;
            }
        }
        if (!best || (hi && idx__bytes_cmp(best, bl, hi->data,
                                           hi->len) >= 0)) {
            *finished = true;
            break;
        }
        if (idx_segw_bytes(g->w) >= max_bytes)
            break;
        kv_buf_reset(&t);
        if ((rc = kv_buf_append(&t, best, bl, err)))
            break;
        for (uint32_t i = 0; i < g->nin; i++) {
            input *x = &g->in[i];
            x->have = !x->done &&
                      idx__bytes_cmp(x->term, x->tlen, t.data, t.len) == 0;
        }
        rc = merge_term(g, t.data, t.len, err);
        for (uint32_t i = 0; !rc && i < g->nin; i++)
            if (g->in[i].have)
                rc = input_advance(&g->in[i], err);
        if (!rc && last) {
            kv_buf_reset(last);
            rc = kv_buf_append(last, t.data, t.len, err);
        }
    }
    kv_buf_free(&t);
    return rc;
}

/* A part of the output written (a step's, a range's) into m's figures. */
static void acc_part(mstate *m, const idx_seg *part)
{
    m->done += part->bytes;
    if (!m->acc.terms || (part->terms && part->min_id < m->acc.min_id))
        m->acc.min_id = part->terms ? part->min_id : m->acc.min_id;
    if (part->max_id > m->acc.max_id)
        m->acc.max_id = part->max_id;
    if (part->docs > m->acc.docs)
        m->acc.docs = part->docs;
    m->acc.dels += part->dels;
    m->acc.terms += part->terms;
    m->acc.bytes += part->bytes;
}

/* Write terms after m->last until about max_bytes are written or the
 * inputs end (*finished). */
static int write_step(kv_txn *txn, mstate *m, uint64_t max_bytes,
                      bool *finished, kv_err *err)
{
    merger g;
    memset(&g, 0, sizeof g);
    idx_plist_init(&g.out);
    *finished = false;
    int rc = idx_segw_open(&g.w, txn, m->out, err);
    if (!rc) {
        idx_segw_set_ord(g.w, m->ord);
        /* the walk starts at the last term written: step past it */
        rc = m->started ? inputs_open(&g, m, txn, m->last.data, m->last.len,
                                      true, err)
                        : inputs_open(&g, m, txn, NULL, 0, false, err);
    }
    if (!rc)
        rc = merge_terms(&g, NULL, max_bytes, &m->last, finished, err);
    if (!rc && m->last.len)
        m->started = true;
    idx_seg part;
    if (!rc)
        rc = idx_segw_close(g.w, &part, err);
    if (!rc) {
        m->ord = idx_segw_ord(g.w);
        acc_part(m, &part);
    }
    merger_free(&g);
    return rc;
}

/* ---- a merge done whole, by term ranges, on several threads -------------- */

/* A merge done in one transaction (once_bytes) whose output's file that
 * transaction makes is cut into term ranges at the dictionary chunks of
 * its largest input: the ranges are merged into memory by this thread and
 * helper threads (the pool below), each reading the inputs in a snapshot
 * of its own (they are not changed until the merge replaces them), and this
 * thread puts them into the file in order (kv_partw), at most a window of
 * ranges ahead of it in memory.  Range k numbers its terms from k * stride,
 * stride the inputs' terms together: a range's terms are numbered in
 * order, as a chunk needs, and no two ranges share a number. */
#define RANGE_BYTES (4u << 20)     /* input bytes per range: the default */
#define RANGES_MAX 256
#define LANES_MAX 8

typedef struct mrange {
    kv_buf lo;             /* its first term (empty in the first range) */
    kv_buf sink;           /* its records, until put */
    idx_seg seg;           /* its figures */
    bool done;
    int rc;
    kv_err err;
} mrange;

typedef struct mpar {
    const mstate *m;
    uint32_t stride;
    mrange *r;
    uint32_t nr;
    kv_txn *snap[LANES_MAX];   /* per thread: snap[0] this one's */
    uint32_t lanes;            /* lanes handed out */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t next;             /* the first range not claimed */
    uint32_t put;              /* ranges put so far */
    uint32_t window;
    bool stop;
    unsigned active;           /* helpers running */
} mpar;

static void mpar_free(mpar *p)
{
    for (uint32_t k = 0; k < p->nr; k++) {
        kv_buf_free(&p->r[k].lo);
        kv_buf_free(&p->r[k].sink);
    }
    kv_free(p->r);
    for (uint32_t i = 0; i < LANES_MAX; i++)
        kv_txn_abort(p->snap[i]);
}

/* Range k merged into its sink, reading in snap. */
static void range_merge(mpar *p, uint32_t k, kv_txn *snap)
{
    mrange *r = &p->r[k];
    merger g;
    memset(&g, 0, sizeof g);
    idx_plist_init(&g.out);
    int rc = idx_segw_open_sink(&g.w, p->m->out, &r->sink, &r->err);
    if (!rc) {
        idx_segw_set_ord(g.w, k * p->stride);
        rc = inputs_open(&g, p->m, snap, k ? r->lo.data : NULL, r->lo.len,
                         false, &r->err);
    }
    bool finished;
    if (!rc)
        rc = merge_terms(&g, k + 1 < p->nr ? &p->r[k + 1].lo : NULL,
                         UINT64_MAX, NULL, &finished, &r->err);
    if (!rc)
        rc = idx_segw_close(g.w, &r->seg, &r->err);
    merger_free(&g);
    r->rc = rc;
}

/* The helpers: threads of the process's own, started as merges first need
 * them and kept for its life.  (A batch's analysis workers come and go
 * with the batch, and a thread that has called Berkeley DB keeps a slot of
 * the environment's thread table, 256 for every process, until its
 * process ends: a service would run out of slots after some hundred
 * batches.)  A child of fork() starts its own. */
typedef struct pool_job {
    void (*fn)(void *);
    void *arg;
} pool_job;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pid_t pid;                 /* the process the threads are of */
    unsigned n, idle;          /* threads; of them waiting for a job */
    pool_job q[LANES_MAX];
    unsigned qn;
} pool = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0,
           { { NULL, NULL } }, 0 };

static void *pool_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        pool.idle++;
        while (pool.qn == 0)
            pthread_cond_wait(&pool.cv, &pool.mu);
        pool.idle--;
        pool_job j = pool.q[--pool.qn];
        pthread_mutex_unlock(&pool.mu);
        j.fn(j.arg);
        pthread_mutex_lock(&pool.mu);
    }
    return NULL;
}

/* fn(arg) on a thread of the pool, one started if none is idle (false:
 * none could be, and none runs). */
static bool pool_spawn(void (*fn)(void *), void *arg)
{
    pthread_mutex_lock(&pool.mu);
    if (pool.pid != getpid()) {
        pool.pid = getpid();
        pool.n = pool.idle = pool.qn = 0;
    }
    bool ok = pool.qn < LANES_MAX;
    if (ok && pool.idle <= pool.qn && pool.n < LANES_MAX - 1) {
        pthread_t th;
        if (kv_thread_start(&th, pool_main, NULL)) {
            pthread_detach(th);
            pool.n++;
        }
    }
    ok = ok && pool.n > 0;
    if (ok) {
        pool.q[pool.qn++] = (pool_job){ fn, arg };
        pthread_cond_signal(&pool.cv);
    }
    pthread_mutex_unlock(&pool.mu);
    return ok;
}

/* Claim a range within the window (mu held): nr if none.  Ranges are
 * claimed in order: those below next are claimed. */
static uint32_t range_claim(mpar *p)
{
    if (p->stop || p->next >= p->nr || p->next >= p->put + p->window)
        return p->nr;
    return p->next++;
}

static void range_done(mpar *p, uint32_t k)
{
    pthread_mutex_lock(&p->mu);
    p->r[k].done = true;
    if (p->r[k].rc)
        p->stop = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static void range_helper(void *arg)
{
    mpar *p = arg;
    pthread_mutex_lock(&p->mu);
    kv_txn *snap = p->snap[p->lanes++];
    for (;;) {
        uint32_t k = range_claim(p);
        if (k < p->nr) {
            pthread_mutex_unlock(&p->mu);
            range_merge(p, k, snap);
            range_done(p, k);
            pthread_mutex_lock(&p->mu);
        } else if (p->stop || p->next >= p->nr) {
            break;
        } else {
            pthread_cond_wait(&p->cv, &p->mu);
        }
    }
    p->active--;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* Cut m's terms into about @p want ranges: the first terms of evenly
 * spaced dictionary chunks of input @p seg. */
static int ranges_cut(mpar *p, kv_txn *txn, uint32_t seg, uint32_t want,
                      kv_err *err)
{
    kv_buf firsts = KV_BUF_INIT, key = KV_BUF_INIT;
    size_t *at = NULL;
    uint32_t n = 0, cap = 0;
    kv_cursor *c = NULL;
    int rc = kv_cursor_open(&c, txn, KV_TERMS, err);
    if (!rc)
        rc = idx_key_chunk(&key, seg, "", 0, err);
    if (!rc)
        rc = kv_cursor_seek(c, key.data, key.len, err);
    /* (keys alone after the first: a chunk's value is most of its 4 KB) */
    while (!rc) {
        const char *k;
        size_t kl;
        kv_cursor_key(c, &k, &kl);
        if (kl < 5 || memcmp(k, key.data, 5) != 0)
            break;
        if (n == cap && (rc = idx__grow(&at, &cap, (uint64_t)n + 1,
                                        sizeof *at, err)))
            break;
        at[n++] = firsts.len;
        rc = kv_buf_append(&firsts, k + 5, kl - 5, err);
        if (!rc)
            rc = kv_cursor_next_key(c, err);
    }
    if (rc == KVFTS_ITEROVER)
        rc = KVFTS_OK;
    kv_cursor_close(c);
    kv_buf_free(&key);
    if (want > n)
        want = n;
    if (!rc && want >= 2) {
        p->r = kv_calloc(want, sizeof *p->r);
        if (!p->r)
            rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    }
    for (uint32_t i = 0; !rc && p->r && i < want; i++) {
        mrange *r = &p->r[p->nr];
        if (i > 0) {
            uint32_t j = (uint32_t)((uint64_t)i * n / want);
            size_t end = j + 1 < n ? at[j + 1] : firsts.len;
            rc = kv_buf_append(&r->lo, firsts.data + at[j], end - at[j],
                               err);
            /* a chunk's first term, so ranges are never empty of terms;
             * equal ones cannot be (chunk keys are distinct) */
        }
        if (!rc)
            p->nr++;
    }
    kv_free(at);
    kv_buf_free(&firsts);
    return rc;
}

/* Merge m whole into its file, which txn makes (*done), by ranges of about
 * @p range_bytes of input on this thread and up to @p helpers of the pool;
 * *done false (and nothing written) when that does not apply: one range,
 * the file not txn's to make. */
static int write_ranges(kv_txn *txn, mstate *m, const idx_segs *segs,
                        unsigned helpers, uint64_t range_bytes, bool *done,
                        kv_err *err)
{
    *done = false;
    /* the largest input, and the terms of all */
    uint64_t terms = 0, big = 0;
    uint32_t bigseg = m->in[0];
    for (uint32_t i = 0; i < m->nin; i++)
        for (uint32_t j = 0; j < segs->n; j++)
            if (segs->v[j].id == m->in[i]) {
                terms += segs->v[j].terms;
                if (segs->v[j].bytes > big) {
                    big = segs->v[j].bytes;
                    bigseg = m->in[i];
                }
            }
    uint64_t want = m->total / range_bytes;
    if (want > RANGES_MAX)
        want = RANGES_MAX;
    if (terms + 1 > UINT32_MAX / 2)
        return KVFTS_OK;
    uint32_t stride = (uint32_t)terms + 1;
    if (want > UINT32_MAX / stride)
        want = UINT32_MAX / stride;
    if (want < 2)
        return KVFTS_OK;
    kv_partw *pw = NULL;
    int rc = kv_partw_open(&pw, txn, m->out, err);
    if (rc || !pw)
        return rc;
    mpar p;
    memset(&p, 0, sizeof p);
    p.m = m;
    p.stride = stride;
    rc = ranges_cut(&p, txn, bigseg, (uint32_t)want, err);
    if (rc || p.nr < 2) {
        kv_partw_free(pw);
        mpar_free(&p);
        return rc;
    }
    if (helpers > LANES_MAX - 1)
        helpers = LANES_MAX - 1;
    if (helpers > p.nr - 1)
        helpers = p.nr - 1;
    for (uint32_t i = 0; !rc && i <= helpers; i++)
        rc = kv_txn_begin(&p.snap[i], kv_txn_env(txn), false, err);
    if (rc) {
        kv_partw_free(pw);
        mpar_free(&p);
        return rc;
    }
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    p.window = 2 * (helpers + 1);
    p.lanes = 1;
    for (uint32_t h = 0; h < helpers; h++) {
        pthread_mutex_lock(&p.mu);
        p.active++;
        pthread_mutex_unlock(&p.mu);
        if (!pool_spawn(range_helper, &p)) {
            pthread_mutex_lock(&p.mu);
            p.active--;
            pthread_mutex_unlock(&p.mu);
            break;
        }
    }
    /* Put the ranges in order; merge one while the next is not ready. */
    for (uint32_t k = 0; !rc && k < p.nr; k++) {
        pthread_mutex_lock(&p.mu);
        while (!p.r[k].done) {
            uint32_t j = range_claim(&p);
            if (j < p.nr) {
                pthread_mutex_unlock(&p.mu);
                range_merge(&p, j, p.snap[0]);
                range_done(&p, j);
                pthread_mutex_lock(&p.mu);
            } else if (p.stop && k >= p.next) {     /* not claimed */
                break;
            } else {
                pthread_cond_wait(&p.cv, &p.mu);
            }
        }
        pthread_mutex_unlock(&p.mu);
        mrange *r = &p.r[k];
        if (!r->done) {
            rc = kv_seterr(err, KVFTS_ERROR, "merge stopped");
        } else if (r->rc) {
            rc = r->rc;
            *err = r->err;
        } else {
            rc = idx_segw_replay_pw(pw, &r->sink, err);
            kv_buf_free(&r->sink);
            if (!rc)
                acc_part(m, &r->seg);
        }
        pthread_mutex_lock(&p.mu);
        if (rc)
            p.stop = true;
        p.put = k + 1;
        pthread_cond_broadcast(&p.cv);
        pthread_mutex_unlock(&p.mu);
    }
    pthread_mutex_lock(&p.mu);
    p.stop = true;
    pthread_cond_broadcast(&p.cv);
    while (p.active > 0)
        pthread_cond_wait(&p.cv, &p.mu);
    pthread_mutex_unlock(&p.mu);
    pthread_cond_destroy(&p.cv);
    pthread_mutex_destroy(&p.mu);
    kv_partw_free(pw);
    mpar_free(&p);
    *done = rc == KVFTS_OK;
    return rc;
}

/* The inputs are replaced by the output in the list, in their place. */
static int switch_segments(kv_txn *txn, mstate *m, kv_err *err)
{
    idx_segs s;
    memset(&s, 0, sizeof s);
    int rc = idx_segs_read(&s, txn, true, err);
    uint32_t at = 0;
    if (!rc) {
        while (at < s.n && s.v[at].id != m->in[0])
            at++;
        bool ok = at + m->nin <= s.n;
        for (uint32_t i = 0; ok && i < m->nin; i++)
            ok = s.v[at + i].id == m->in[i];
        if (!ok)
            rc = kv_seterr(err, KVFTS_ECORRUPT, "merge inputs are not "
                           "neighbours in the segment list");
    }
    if (!rc) {
        idx_seg out = m->acc;
        out.id = m->out;
        out.level = m->level;
        s.v[at] = out;
        memmove(s.v + at + 1, s.v + at + m->nin,
                (size_t)(s.n - at - m->nin) * sizeof *s.v);
        s.n -= m->nin - 1;
        rc = idx_segs_write(&s, txn, err);
    }
    idx_segs_free(&s);
    return rc;
}

int idx_merge_step(kv_txn *txn, const idx_merge_opts *o, bool *more,
                   kv_err *err)
{
    bool all = o->all, once = false;
    uint64_t max_bytes = o->step_bytes;
    *more = false;
    if (max_bytes < 4096)
        max_bytes = 4096;
    mstate m;
    memset(&m, 0, sizeof m);
    bool have;
    idx_segs segs;
    memset(&segs, 0, sizeof segs);
    int rc = mstate_read(&m, txn, true, &have, err);
    if (!rc && !have) {
        /* Start one, if the policy (or `all`) asks for it. */
        rc = idx_segs_read(&segs, txn, true, err);
        uint32_t start, n;
        if (!rc)
            choose_run(&segs, all, &start, &n);
        if (!rc && n) {
            m.nin = n;
            m.in = kv_calloc(n, sizeof *m.in);
            if (!rc && !m.in)
                rc = kv_seterr(err, KVFTS_ENOMEM, "out of memory");
            uint32_t level = 0;
            for (uint32_t i = 0; !rc && i < n; i++) {
                m.in[i] = segs.v[start + i].id;
                m.total += segs.v[start + i].bytes;
                if (segs.v[start + i].level > level)
                    level = segs.v[start + i].level;
            }
            m.level = level + 1 > 64 ? 64 : level + 1;
            /* Whole in this transaction, which makes the output's file:
             * unlogged (see the top of this file). */
            bool own = m.total >= IDX_OWN_BYTES ||
                       (!all && m.total <= o->once_bytes && o->range_bytes);
            if (!rc)
                rc = idx_seg_new_id(txn, own, &m.out, err);
            have = !rc;
            once = !all && own && m.total <= o->once_bytes;
            if (once)
                max_bytes = UINT64_MAX;
        }
    }
    if (!rc && have) {
        bool finished = false, whole = false;
        if (once && (o->helpers > 0 || o->range_bytes)) {
            rc = write_ranges(txn, &m, &segs, o->helpers,
                              o->range_bytes ? o->range_bytes : RANGE_BYTES,
                              &whole, err);
            finished = whole;
        }
        if (!rc && !whole)
            rc = write_step(txn, &m, max_bytes, &finished, err);
        if (!rc && !finished) {
            rc = mstate_write(&m, txn, err);
            *more = true;
        } else if (!rc) {
            /* The output replaces the inputs; their files go once no
             * reader has them open (idx_drop_sweep, after the commit). */
            rc = switch_segments(txn, &m, err);
            for (uint32_t i = 0; !rc && i < m.nin; i++)
                rc = idx_seg_remove(txn, m.in[i], err);
            if (!rc) {   /* a merge done in one step wrote no state */
                rc = kv_del(txn, KV_SEGS, IDX_MERGE_KEY,
                            strlen(IDX_MERGE_KEY), err);
                if (rc == KVFTS_ENOTFOUND)
                    rc = KVFTS_OK;
            }
            /* another merge may be due at once */
            idx_segs s2;
            memset(&s2, 0, sizeof s2);
            if (!rc)
                rc = idx_segs_read(&s2, txn, false, err);
            uint32_t start, n;
            if (!rc) {
                choose_run(&s2, all, &start, &n);
                *more = n > 0;
            }
            idx_segs_free(&s2);
        }
    }
    mstate_free(&m);
    idx_segs_free(&segs);
    return rc;
}

int idx_seg_strays(kv_txn *txn, const idx_segs *s, uint32_t *files,
                   size_t *n, kv_err *err)
{
    mstate m;
    memset(&m, 0, sizeof m);
    uint32_t *drop = NULL, ndrop = 0;
    uint64_t last = 0;
    bool merging;
    int rc = mstate_read(&m, txn, false, &merging, err);
    if (!rc)
        rc = idx_dropq_read(txn, false, &drop, &ndrop, err);
    /* A file made after this snapshot (a flush or a merge under way in
     * another process) has a later id: it is nobody's stray. */
    if (!rc)
        rc = kv_seq_get_in(txn, KV_SEGS, IDX_SEG_SEQ, false, &last, err);
    size_t k = 0;
    for (size_t i = 0; !rc && i < *n; i++) {
        uint32_t id = files[i];
        bool known = id == 0 || (id & ~KV_PART_OWN) > last ||
                     (merging && id == m.out);
        for (uint32_t j = 0; !known && j < ndrop; j++)
            known = drop[j] == id;
        for (uint32_t j = 0; !known && j < s->n; j++)
            known = s->v[j].id == id;
        if (!known)
            files[k++] = id;
    }
    *n = rc ? 0 : k;
    kv_free(drop);
    mstate_free(&m);
    return rc;
}

int idx_merge_cancel(kv_txn *txn, kv_err *err)
{
    mstate m;
    memset(&m, 0, sizeof m);
    bool have;
    int rc = mstate_read(&m, txn, true, &have, err);
    if (!rc && have)
        rc = idx_seg_remove(txn, m.out, err);
    if (!rc && have)
        rc = kv_del(txn, KV_SEGS, IDX_MERGE_KEY, strlen(IDX_MERGE_KEY), err);
    mstate_free(&m);
    return rc;
}

int idx_merge_stats_get(kv_txn *txn, idx_merge_stats *out, kv_err *err)
{
    memset(out, 0, sizeof *out);
    idx_segs s;
    memset(&s, 0, sizeof s);
    uint32_t *drop = NULL;
    int rc = idx_dropq_read(txn, false, &drop, &out->dropping, err);
    kv_free(drop);
    if (!rc)
        rc = idx_segs_read(&s, txn, false, err);
    if (!rc) {
        out->segments = s.n;
        for (uint32_t i = 0; i < s.n; i++)
            out->bytes += s.v[i].bytes;
    }
    idx_segs_free(&s);
    mstate m;
    memset(&m, 0, sizeof m);
    if (!rc)
        rc = mstate_read(&m, txn, false, &out->merging, err);
    if (!rc && out->merging) {
        out->inputs = m.nin;
        out->total = m.total;
        out->done = m.done;
    }
    mstate_free(&m);
    return rc;
}
