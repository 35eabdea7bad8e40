/*
 * idx_util.c -- the index's small containers: growable arrays and the
 * string table (byte strings -> dense ids) that the writer, the bulk buffer
 * and the checker share.
 *
 * The string table is written here because none of Debian's C libraries
 * fits: GLib's tables abort on out-of-memory (our rule is to report it),
 * and hsearch(3) is one table per process.  Hashing is xxHash.
 */
#include "idx_int.h"

#include <string.h>
#include <xxhash.h>

/* ---- growable arrays ---------------------------------------------------- */

int idx__grow(void *pp, uint32_t *cap, uint64_t need, size_t elem,
                kv_err *err)
{
    if (need <= *cap)
        return KVFTS_OK;
    if (need > UINT32_MAX / 2)
        return kv_seterr(err, KVFTS_ENOMEM, "index buffer too large");
    uint64_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void **p = pp;
    void *q = kv_realloc(*p, (size_t)c * elem + IDX_SLACK);
    if (!q)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    *p = q;
    *cap = (uint32_t)c;
    return KVFTS_OK;
}

/* ---- string table: byte strings -> dense ids ---------------------------- */


void idx__strtab_free(strtab *t)
{
    kv_buf_free(&t->arena);
    kv_free(t->off);
    kv_free(t->len);
    kv_free(t->hash);
    kv_free(t->slots);
    memset(t, 0, sizeof *t);
}

void idx__strtab_reset(strtab *t)
{
    kv_buf_reset(&t->arena);
    t->n = 0;
    if (t->slots)
        memset(t->slots, 0, (size_t)t->nslots * sizeof *t->slots);
}

const char *idx__strtab_str(const strtab *t, uint32_t id, uint32_t *len)
{
    *len = t->len[id];
    return t->arena.data + t->off[id];
}

static int strtab_rehash(strtab *t, uint32_t nslots, kv_err *err)
{
    uint32_t *s = kv_calloc(nslots, sizeof *s);
    if (!s)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    for (uint32_t id = 0; id < t->n; id++) {
        uint32_t i = t->hash[id] & (nslots - 1);
        while (s[i])
            i = (i + 1) & (nslots - 1);
        s[i] = id + 1;
    }
    kv_free(t->slots);
    t->slots = s;
    t->nslots = nslots;
    return KVFTS_OK;
}

/* True if s is in the table. */
bool idx__strtab_has(const strtab *t, const char *s, size_t n)
{
    if (!t->n)
        return false;
    uint32_t h = (uint32_t)XXH3_64bits(s, n);
    for (uint32_t i = h & (t->nslots - 1); t->slots[i];
         i = (i + 1) & (t->nslots - 1)) {
        uint32_t e = t->slots[i] - 1;
        if (t->hash[e] == h && t->len[e] == n &&
            memcmp(t->arena.data + t->off[e], s, n) == 0)
            return true;
    }
    return false;
}

/* Find s, adding it if absent.  *added tells which. */
int idx__strtab_put(strtab *t, const char *s, size_t n, uint32_t *id,
                      bool *added, kv_err *err)
{
    int rc;
    if ((uint64_t)(t->n + 1) * 2 >= t->nslots) {
        rc = strtab_rehash(t, t->nslots ? t->nslots * 2 : 1024, err);
        if (rc)
            return rc;
    }
    uint32_t h = (uint32_t)XXH3_64bits(s, n);
    uint32_t i = h & (t->nslots - 1);
    while (t->slots[i]) {
        uint32_t e = t->slots[i] - 1;
        if (t->hash[e] == h && t->len[e] == n &&
            memcmp(t->arena.data + t->off[e], s, n) == 0) {
            *id = e;
            *added = false;
            return KVFTS_OK;
        }
        i = (i + 1) & (t->nslots - 1);
    }
    if (t->arena.len + n > UINT32_MAX - 1)
        return kv_seterr(err, KVFTS_ENOMEM, "index buffer too large");
    if (t->n == t->cap) {     /* off, len and hash share one capacity */
        uint32_t cap = t->cap ? t->cap * 2 : 256;
        uint32_t *o = kv_realloc(t->off, (size_t)cap * 4);
        if (o)
            t->off = o;
        uint32_t *l = o ? kv_realloc(t->len, (size_t)cap * 4) : NULL;
        if (l)
            t->len = l;
        uint32_t *hh = l ? kv_realloc(t->hash, (size_t)cap * 4) : NULL;
        if (!hh)
            return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        t->hash = hh;
        t->cap = cap;
    }
    size_t at = t->arena.len;
    if ((rc = kv_buf_append(&t->arena, s, n, err)) != 0)
        return rc;
    uint32_t e = t->n++;
    t->off[e] = (uint32_t)at;
    t->len[e] = (uint32_t)n;
    t->hash[e] = h;
    t->slots[i] = e + 1;
    *id = e;
    *added = true;
    return KVFTS_OK;
}


int idx__keyref_cmp(const void *a, const void *b)
{
    const keyref *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, n);
    if (c)
        return c;
    return x->len < y->len ? -1 : x->len > y->len;
}

