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

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* ---- growable arrays ---------------------------------------------------- */

int idx__u32_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

uint32_t idx_gallop(const uint32_t *a, uint32_t from, uint32_t n,
                    uint32_t x)
{
    uint32_t lo = from, hi = from, step = 1;
    while (hi < n && a[hi] < x) {
        lo = hi + 1;
        hi += step;
        step *= 2;
    }
    if (hi > n)
        hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (a[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int idx__grow_to(void *pp, uint32_t *cap, uint64_t need, size_t elem,
                 kv_err *err)
{
    if (need > UINT32_MAX / 2)
        return kv_seterr(err, KVFTS_ENOMEM, "index buffer too large");
    /* At first 64 elements, but no more than about 256 bytes of wide
     * ones: a search makes many small buffers, and the allocator keeps
     * blocks this small in its per-thread cache (glibc's tcache serves up
     * to 1 KB; a larger block costs several times as much to get and
     * free). */
    uint64_t c = *cap ? *cap : elem <= 4 ? 64 : elem >= 64 ? 4 : 256 / elem;
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

/* ---- doc id sets ----------------------------------------------------------
 *
 * Which documents have a change in a batch's buffer, asked of every write:
 * two loads, where the string table it replaces hashed each id and probed
 * a table of a hundred thousand (5% of a load's writing thread). */

int idx__idset_add(idx_idset *s, uint32_t id, bool *added, kv_err *err)
{
    uint32_t p = id / IDX_IDSET_PAGE_BITS, b = id % IDX_IDSET_PAGE_BITS;
    if (p >= s->npages) {
        uint32_t n = s->npages ? s->npages : 16;
        while (n <= p)
            n *= 2;
        uint64_t **q = kv_realloc(s->page, (size_t)n * sizeof *q);
        if (!q)
            return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        memset(q + s->npages, 0, (size_t)(n - s->npages) * sizeof *q);
        s->page = q;
        s->npages = n;
    }
    if (!s->page[p]) {
        s->page[p] = kv_calloc_written(1, IDX_IDSET_PAGE_BITS / 8);
        if (!s->page[p])
            return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        s->made++;
    }
    uint64_t *w = &s->page[p][b / 64], m = 1ull << (b % 64);
    *added = !(*w & m);
    *w |= m;
    return KVFTS_OK;
}

bool idx__idset_has(const idx_idset *s, uint32_t id)
{
    uint32_t p = id / IDX_IDSET_PAGE_BITS, b = id % IDX_IDSET_PAGE_BITS;
    return p < s->npages && s->page[p] &&
           (s->page[p][b / 64] >> (b % 64) & 1);
}

void idx__idset_reset(idx_idset *s)
{
    for (uint32_t p = 0; p < s->npages && s->made; p++)
        if (s->page[p]) {
            kv_free(s->page[p]);
            s->page[p] = NULL;
            s->made--;
        }
}

void idx__idset_free(idx_idset *s)
{
    idx__idset_reset(s);
    kv_free(s->page);
    memset(s, 0, sizeof *s);
}

size_t idx__idset_bytes(const idx_idset *s)
{
    return (size_t)s->npages * sizeof *s->page +
           (size_t)s->made * (IDX_IDSET_PAGE_BITS / 8);
}

/* ---- string table: byte strings -> dense ids ----------------------------
 *
 * Open addressing with linear probing; a slot holds the string's 32-bit
 * hash beside its id, so that a probe reads one slot and, only when the
 * hashes agree, the string: a lookup in a table of a million terms costs
 * about two cache misses, not five.  Reset clears only the slots in use
 * when they are few (a table of one document's terms, reset per document,
 * may have grown for one big document). */

#define SLOT(h, id) ((uint64_t)(h) << 32 | ((uint64_t)(id) + 1))
#define SLOT_ID(x) ((uint32_t)(x) - 1)
#define SLOT_HASH(x) ((uint32_t)((x) >> 32))

void idx__strtab_free(strtab *t)
{
    kv_buf_free(&t->arena);
    kv_free(t->ent);
    kv_free(t->slots);
    memset(t, 0, sizeof *t);
}

void idx__strtab_reset(strtab *t)
{
    kv_buf_reset(&t->arena);
    if (t->slots && (uint64_t)t->n * 16 < t->nslots) {
        /* Newest first: then each id's probe meets no slot emptied before
         * its own (the table is as it was when the id went in; a rehash
         * puts ids back in id order, the same). */
        for (uint32_t id = t->n; id-- > 0;) {
            uint32_t i = t->ent[id].hash & (t->nslots - 1);
            while (t->slots[i] && SLOT_ID(t->slots[i]) != id)
                i = (i + 1) & (t->nslots - 1);
            t->slots[i] = 0;
        }
    } else if (t->slots) {
        memset(t->slots, 0, (size_t)t->nslots * sizeof *t->slots);
    }
    t->n = 0;
}

const char *idx__strtab_str(const strtab *t, uint32_t id, uint32_t *len)
{
    *len = t->ent[id].len;
    return t->arena.data + t->ent[id].off;
}

static int strtab_rehash(strtab *t, uint32_t nslots, kv_err *err)
{
    uint64_t *s = kv_calloc_written(nslots, sizeof *s);   /* probed next */
    if (!s)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    for (uint32_t id = 0; id < t->n; id++) {
        uint32_t h = t->ent[id].hash, i = h & (nslots - 1);
        while (s[i])
            i = (i + 1) & (nslots - 1);
        s[i] = SLOT(h, id);
    }
    kv_free(t->slots);
    t->slots = s;
    t->nslots = nslots;
    return KVFTS_OK;
}

/* The slot of s (hash h): its id's, or the empty one where it would go. */
static uint32_t strtab_find(const strtab *t, const char *s, size_t n,
                            uint32_t h)
{
    uint32_t i = h & (t->nslots - 1);
    for (;; i = (i + 1) & (t->nslots - 1)) {
        uint64_t x = t->slots[i];
        if (!x)
            return i;
        if (SLOT_HASH(x) != h)
            continue;
        const struct strtab_ent *e = &t->ent[SLOT_ID(x)];
        if (e->len == n && idx__bytes_eq(t->arena.data + e->off, s, n))
            return i;
    }
}

bool idx__strtab_get(const strtab *t, const char *s, size_t n, uint32_t *id)
{
    if (!t->n)
        return false;
    uint32_t h = idx__strtab_hash(s, n);
    uint64_t x = t->slots[strtab_find(t, s, n, h)];
    if (!x)
        return false;
    *id = SLOT_ID(x);
    return true;
}

bool idx__strtab_has(const strtab *t, const char *s, size_t n)
{
    uint32_t id;
    return idx__strtab_get(t, s, n, &id);
}

uint32_t idx__strtab_hash(const char *s, size_t n)
{
    return (uint32_t)XXH3_64bits(s, n);
}

uint32_t idx__strtab_hash_of(const strtab *t, uint32_t id)
{
    return t->ent[id].hash;
}

void idx__strtab_prefetch(const strtab *t, uint32_t h)
{
    if (t->nslots)
        __builtin_prefetch(&t->slots[h & (t->nslots - 1)]);
}

uint32_t idx__strtab_guess(const strtab *t, uint32_t h)
{
    if (!t->nslots)
        return UINT32_MAX;
    for (uint32_t i = h & (t->nslots - 1);; i = (i + 1) & (t->nslots - 1)) {
        uint64_t x = t->slots[i];
        if (!x)
            return UINT32_MAX;
        if (SLOT_HASH(x) == h) {
            uint32_t id = SLOT_ID(x);
            __builtin_prefetch(&t->ent[id]);
            return id;
        }
    }
}

void idx__strtab_prefetch_str(const strtab *t, uint32_t id)
{
    if (id < t->n)
        __builtin_prefetch(t->arena.data + t->ent[id].off);
}

/* Find s, adding it if absent.  *added tells which. */
int idx__strtab_put(strtab *t, const char *s, size_t n, uint32_t *id,
                      bool *added, kv_err *err)
{
    return idx__strtab_put_h(t, s, n, idx__strtab_hash(s, n), id, added,
                             err);
}

int idx__strtab_put_h(strtab *t, const char *s, size_t n, uint32_t h,
                      uint32_t *id, bool *added, kv_err *err)
{
    int rc;
    if ((uint64_t)(t->n + 1) * 2 >= t->nslots) {
        rc = strtab_rehash(t, t->nslots ? t->nslots * 2 : 1024, err);
        if (rc)
            return rc;
    }
    uint32_t i = strtab_find(t, s, n, h);
    if (t->slots[i]) {
        *id = SLOT_ID(t->slots[i]);
        *added = false;
        return KVFTS_OK;
    }
    if (t->arena.len + n > UINT32_MAX - 1)
        return kv_seterr(err, KVFTS_ENOMEM, "index buffer too large");
    if (t->n == t->cap) {
        uint32_t cap = t->cap ? t->cap * 2 : 256;
        struct strtab_ent *e = kv_realloc(t->ent, (size_t)cap * sizeof *e);
        if (!e)
            return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
        t->ent = e;
        t->cap = cap;
    }
    size_t at = t->arena.len;
    if ((rc = kv_buf_append(&t->arena, s, n, err)) != 0)
        return rc;
    uint32_t e = t->n++;
    t->ent[e].off = (uint32_t)at;
    t->ent[e].len = (uint32_t)n;
    t->ent[e].hash = h;
    t->slots[i] = SLOT(h, e);
    *id = e;
    *added = true;
    return KVFTS_OK;
}


size_t idx__strtab_bytes(const strtab *t)
{
    return t->arena.cap + (size_t)t->cap * sizeof *t->ent +
           (size_t)t->nslots * sizeof *t->slots;
}

int idx__bytes_cmp(const char *a, size_t al, const char *b, size_t bl)
{
    size_t n = al < bl ? al : bl;
    int c = memcmp(a, b, n);
    if (c)
        return c;
    return al < bl ? -1 : al > bl;
}

/* A string and its id, sorted without a comparator context: qsort(3) has
 * no context argument, and a global one would be shared by every thread.
 * pre is the string's first eight bytes as a big-endian number (zeros
 * past its end): two strings whose prefixes differ compare as they do,
 * so most comparisons of a buffer's terms never reach memcmp (they were
 * 2% of a Linux docs load). */
typedef struct keyref {
    const char *s;
    uint64_t pre;
    uint32_t len;
    uint32_t id;
} keyref;

static int keyref_cmp(const void *a, const void *b)
{
    const keyref *x = a, *y = b;
    if (x->pre != y->pre)
        return x->pre < y->pre ? -1 : 1;
    return idx__bytes_cmp(x->s, x->len, y->s, y->len);
}

uint64_t idx__prefix8(const char *s, uint32_t len)
{
    uint64_t v = 0;
    for (uint32_t i = 0; i < 8; i++)
        v = v << 8 | (i < len ? (unsigned char)s[i] : 0u);
    return v;
}

int idx__strtab_sorted(const strtab *t, uint32_t *order, uint64_t *pre,
                       kv_err *err)
{
    if (t->n == 0)
        return KVFTS_OK;
    keyref *k = kv_malloc((size_t)t->n * sizeof *k);
    if (!k)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    for (uint32_t i = 0; i < t->n; i++) {
        uint32_t l;
        k[i].s = idx__strtab_str(t, i, &l);
        k[i].len = l;
        k[i].pre = idx__prefix8(k[i].s, l);
        k[i].id = i;
    }
    qsort(k, t->n, sizeof *k, keyref_cmp);
    for (uint32_t i = 0; i < t->n; i++) {
        order[i] = k[i].id;
        if (pre)
            pre[i] = k[i].pre;
    }
    kv_free(k);
    return KVFTS_OK;
}
