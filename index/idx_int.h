/*
 * index/idx_int.h -- private to index/: the on-disk format (idx_block.c)
 * and the writer's internals shared by its files.  Other modules cannot
 * include it: only index/include/ is on their include path.
 */
#ifndef KVFTS_IDX_INT_H
#define KVFTS_IDX_INT_H

#include "index.h"

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
void idx__strtab_free(strtab *t);
void idx__strtab_reset(strtab *t);
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


#endif /* KVFTS_IDX_INT_H */
