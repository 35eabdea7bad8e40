/*
 * idx_buffer.c -- the bulk buffer: new postings held in memory until a
 * flush merges them into the stored index (idx_write.c) or a check compares
 * them with it (idx_check.c).
 *
 * Each buffered term (a "field\0term" key in w->bterms, id t) owns a chain
 * of chunks in one arena, and its postings are appended to the chain as
 * bytes, the way SQLite FTS5's pending-terms hash and Lucene's byte-block
 * pool keep theirs:
 *
 *   posting  = zigzag-varint(doc id - previous doc id of the term)
 *              varint(tf)
 *              tf varints: the first position, then gaps   (positions on)
 *   chunk    = u32 next chunk's offset (0: none) | payload
 *
 * Chunks start at 32 bytes and grow four times each step up to 2 KiB, so a
 * term seen once costs 32 bytes and a long list wastes little.  A posting
 * is about 4-6 bytes where the former arrays of (term, doc, tf, position
 * offset) records took 20-30, so one flush covers five times as many
 * documents; a fresh load of the Debian catalog is one flush, which writes
 * the B-tree front to back with full pages.
 *
 * Doc ids of a term are usually ascending (new documents get new ids); a
 * replaced document keeps its id, so the signed gap allows any order and
 * the decoder sorts a term that came out of order.
 */
#include "idx_int.h"

#include <stdlib.h>
#include <string.h>

#define CHUNK_MIN 32u
#define CHUNK_MAX 2048u
#define ARENA_MAX (3u * 1024u * 1024u * 1024u)   /* offsets are 32 bits */

static uint32_t chunk_size(uint8_t cls)
{
    uint32_t s = CHUNK_MIN << (2 * cls);
    return s > CHUNK_MAX ? CHUNK_MAX : s;
}

/* A new chunk of class cls at the end of the arena; *off gets its offset. */
static int chunk_new(idx_writer *w, uint8_t cls, uint32_t *off, kv_err *err)
{
    kv_buf *a = &w->arena;
    size_t base = a->len ? a->len : 8;    /* offset 0 means "no chunk" */
    size_t sz = chunk_size(cls);
    if (base + sz > ARENA_MAX)
        return kv_seterr(err, KVFTS_ENOMEM, "index buffer over %u MiB; "
                         "commit more often", ARENA_MAX >> 20);
    if (base + sz + 1 > a->cap) {
        size_t keep = a->len;
        a->len = 0;
        int rc = kv_buf_reserve(a, base + sz, err);
        a->len = keep;
        if (rc)
            return rc;
    }
    a->len = base;
    *off = (uint32_t)a->len;
    memset(a->data + a->len, 0, 4);
    a->len += sz;
    return KVFTS_OK;
}

/* Append n bytes to term t's chain. */
static int chain_append(idx_writer *w, idx_tbuf *tb, const unsigned char *p,
                        size_t n, kv_err *err)
{
    while (n) {
        uint32_t room = chunk_size(tb->cls) - 4 - tb->used;
        if (room == 0) {
            uint8_t cls = (uint8_t)(tb->cls + (chunk_size(tb->cls) <
                                               CHUNK_MAX));
            uint32_t off = 0;
            int rc = chunk_new(w, cls, &off, err);
            if (rc)
                return rc;
            memcpy(w->arena.data + tb->tail, &off, 4);
            tb->tail = off;
            tb->cls = cls;
            tb->used = 0;
            continue;
        }
        uint32_t k = n < room ? (uint32_t)n : room;
        memcpy(w->arena.data + tb->tail + 4 + tb->used, p, k);
        tb->used += k;
        p += k;
        n -= k;
    }
    return KVFTS_OK;
}

int idx__buf_add(idx_writer *w, const char *key, size_t klen, uint32_t doc,
                 uint32_t tf, const uint32_t *pos, kv_err *err)
{
    uint32_t t;
    bool added;
    int rc = idx__strtab_put(&w->bterms, key, klen, &t, &added, err);
    if (rc)
        return rc;
    if (added) {
        if ((rc = idx__grow(&w->tb, &w->tbcap, (uint64_t)t + 1,
                            sizeof *w->tb, err)) != 0)
            return rc;
        uint32_t off = 0;
        if ((rc = chunk_new(w, 0, &off, err)) != 0)
            return rc;
        w->tb[t] = (idx_tbuf){ off, off, 0, 0, 0, 0, false };
    }
    idx_tbuf *tb = &w->tb[t];
    uint32_t np = w->positions ? tf : 0;
    kv_buf *e = &w->enc;
    e->len = 0;
    if ((rc = kv_buf_reserve(e, 20 + (size_t)np * 5, err)) != 0)
        return rc;
    unsigned char *p = (unsigned char *)e->data;
    size_t k = 0;
    int64_t gap = (int64_t)doc - (int64_t)tb->last;
    k += idx_varint_put(p + k, ((uint64_t)gap << 1) ^ (uint64_t)(gap >> 63));
    k += idx_varint_put(p + k, tf);
    for (uint32_t j = 0; j < np; j++)
        k += idx_varint_put(p + k, j ? pos[j] - pos[j - 1] : pos[0]);
    if ((rc = chain_append(w, tb, p, k, err)) != 0)
        return rc;
    if (tb->n && doc <= tb->last)
        tb->unsorted = true;
    tb->last = doc;
    tb->n++;
    w->npost++;
    return KVFTS_OK;
}

size_t idx__buf_bytes(const idx_writer *w)
{
    /* The arena counts by use: its unused capacity is never touched, so
     * it is not resident.  A flush adds one sorted array of the terms. */
    return w->arena.len + (size_t)w->tbcap * sizeof *w->tb +
           (size_t)w->bterms.n * sizeof(keyref);
}

void idx__buf_reset(idx_writer *w)
{
    w->arena.len = 0;
    w->npost = 0;
}

void idx__buf_free(idx_writer *w)
{
    kv_buf_free(&w->arena);
    kv_buf_free(&w->enc);
    kv_free(w->tb);
    w->tb = NULL;
    w->tbcap = 0;
    idx__tpost_free(&w->tp);
}

int idx__buf_terms(idx_writer *w, keyref **order, kv_err *err)
{
    uint32_t nt = w->bterms.n;
    *order = kv_malloc(((size_t)nt + 1) * sizeof **order);
    if (!*order)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    for (uint32_t t = 0; t < nt; t++) {
        uint32_t l;
        (*order)[t].s = idx__strtab_str(&w->bterms, t, &l);
        (*order)[t].len = l;
        (*order)[t].id = t;
    }
    if (nt > 1)
        qsort(*order, nt, sizeof **order, idx__keyref_cmp);
    return KVFTS_OK;
}

void idx__tpost_free(idx_tpost *tp)
{
    kv_free(tp->ids);
    kv_free(tp->tfs);
    kv_free(tp->poff);
    kv_free(tp->pos);
    kv_free(tp->perm);
    kv_free(tp->tmp);
    kv_buf_free(&tp->bytes);
    memset(tp, 0, sizeof *tp);
}

static const idx_tpost *sort_tp;

static int perm_cmp(const void *a, const void *b)
{
    uint32_t x = sort_tp->ids[*(const uint32_t *)a];
    uint32_t y = sort_tp->ids[*(const uint32_t *)b];
    return x < y ? -1 : x > y;
}

/* Put the postings of tp in doc id order (rare: a replaced document). */
static int tpost_sort(idx_tpost *tp, kv_err *err)
{
    uint32_t n = tp->n;
    int rc;
    if ((rc = idx__grow(&tp->perm, &tp->permcap, n, 4, err)) != 0 ||
        (rc = idx__grow(&tp->tmp, &tp->tmpcap, (uint64_t)n + 1, 4, err)) != 0)
        return rc;
    for (uint32_t i = 0; i < n; i++)
        tp->perm[i] = i;
    sort_tp = tp;          /* qsort has no payload; a flush is one thread */
    qsort(tp->perm, n, 4, perm_cmp);
    sort_tp = NULL;
    /* ids and tfs through tmp; positions stay where they are and poff
     * points into them (offsets need not ascend). */
    uint32_t *arrays[] = { tp->ids, tp->tfs, tp->poff };
    for (size_t a = 0; a < 3; a++) {
        for (uint32_t i = 0; i < n; i++)
            tp->tmp[i] = arrays[a][tp->perm[i]];
        memcpy(arrays[a], tp->tmp, (size_t)n * 4);
    }
    return KVFTS_OK;
}

int idx__buf_decode(idx_writer *w, uint32_t t, idx_tpost *tp, kv_err *err)
{
    const idx_tbuf *tb = &w->tb[t];
    kv_buf *by = &tp->bytes;
    by->len = 0;
    /* Gather the chain into one run of bytes (chunk sizes follow the
     * classes: 32, 128, 512, then 2 KiB). */
    uint8_t cls = 0;
    for (uint32_t off = tb->head; off; cls += cls < 3) {
        uint32_t next;
        memcpy(&next, w->arena.data + off, 4);
        uint32_t sz = next ? chunk_size(cls) - 4 : tb->used;
        int rc = kv_buf_append(by, w->arena.data + off + 4, sz, err);
        if (rc)
            return rc;
        off = next;
    }
    uint32_t n = tb->n;
    int rc;
    if ((rc = idx__grow(&tp->ids, &tp->idcap, n, 4, err)) != 0 ||
        (rc = idx__grow(&tp->tfs, &tp->tfcap, n, 4, err)) != 0 ||
        (rc = idx__grow(&tp->poff, &tp->poffcap, (uint64_t)n + 1, 4, err)))
        return rc;
    const unsigned char *p = (const unsigned char *)by->data;
    const unsigned char *end = p + by->len;
    uint64_t v, npos = 0;
    uint32_t last = 0;
    tp->n = n;
    tp->cf = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!idx_varint_get(&p, end, &v))
            goto bad;
        int64_t gap = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
        last = (uint32_t)((int64_t)last + gap);
        tp->ids[i] = last;
        if (!idx_varint_get(&p, end, &v) || v == 0 || v > UINT32_MAX)
            goto bad;
        tp->tfs[i] = (uint32_t)v;
        tp->cf += v;
        tp->poff[i] = (uint32_t)npos;
        if (!w->positions)
            continue;
        if ((rc = idx__grow(&tp->pos, &tp->poscap, npos + v, 4, err)) != 0)
            return rc;
        uint64_t acc = 0;
        for (uint64_t j = 0; j < v; j++) {
            uint64_t d;
            if (!idx_varint_get(&p, end, &d))
                goto bad;
            acc += d;
            tp->pos[npos++] = (uint32_t)acc;
        }
    }
    tp->poff[n] = (uint32_t)npos;
    if (tb->unsorted)
        return tpost_sort(tp, err);
    return KVFTS_OK;
bad:
    return kv_seterr(err, KVFTS_ERROR, "index buffer damaged (term %u)", t);
}
