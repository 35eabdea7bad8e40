/*
 * peer_xapian.cc -- the Xapian peer of kvfts-bench behind the C API of
 * peer_xapian.h (which says how Xapian is set up, and why).  The only C++
 * of the project: every Xapian call is inside a try block and every
 * exception becomes -1 and a message in the handle, so that nothing
 * unwinds into C.
 *
 * Terms: TermGenerator lower-cases (Unicode), keeps accents, and splits
 * text into words its own way (runs of word characters, where "_" is one,
 * an apostrophe or a "." or "," between digits joins, "C++"-style suffixes
 * stay on); kvfts and FTS5 fold accents and split on every punctuation.
 * Where those differ the match sets differ: kvfts-bench compares them
 * and reports each difference.
 */
#include "peer_xapian.h"

#include <xapian.h>

#include <cctype>
#include <cstring>
#include <new>
#include <string>
#include <vector>

struct xap_db {
    Xapian::Database rdb;            /* the database queries read */
    Xapian::WritableDatabase wdb;    /* xap_create() only */
    Xapian::TermGenerator tg;
    Xapian::QueryParser qp;
    std::vector<std::string> prefixes;   /* "X" + FIELD, per field */
    std::string data;                /* scratch: a document's data */
    std::string err = "no error";
};

static const Xapian::valueno KEY_SLOT = 0;
static const Xapian::termcount FIELD_GAP = 100;

static std::string field_prefix(const char *field)
{
    std::string p = "X";
    for (const char *c = field; *c; c++)
        p += (char)std::toupper((unsigned char)*c);
    return p;
}

static void set_fields(xap_db *db, const char *const *fields, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        db->prefixes.push_back(field_prefix(fields[i]));
        db->qp.add_prefix(fields[i], db->prefixes.back());
    }
    db->qp.set_default_op(Xapian::Query::OP_AND);
}

static int fail(xap_db *db, const char *what, const Xapian::Error &e)
{
    db->err = std::string(what) + ": " + e.get_description();
    return -1;
}

static int fail_std(xap_db *db, const char *what, const std::exception &e)
{
    db->err = std::string(what) + ": " + e.what();
    return -1;
}

/* Parse @p q; throws what the parser throws. */
static Xapian::Query parse(xap_db *db, const char *q)
{
    unsigned flags = Xapian::QueryParser::FLAG_BOOLEAN |
                     Xapian::QueryParser::FLAG_PHRASE |
                     Xapian::QueryParser::FLAG_LOVEHATE |
                     Xapian::QueryParser::FLAG_WILDCARD;
    return db->qp.parse_query(q, flags);
}

extern "C" {

bool xap_available(void)
{
    return true;
}

const char *xap_version(void)
{
    return Xapian::version_string();
}

static int create(xap_db **out, const char *dir, const char *const *fields,
                  size_t nfields, int action)
{
    xap_db *db = *out = new (std::nothrow) xap_db;
    if (!db)
        return -1;
    try {
        db->wdb = Xapian::WritableDatabase(dir, action);
        set_fields(db, fields, nfields);
        return 0;
    } catch (const Xapian::Error &e) {
        return fail(db, dir, e);
    } catch (const std::exception &e) {
        return fail_std(db, dir, e);
    }
}

int xap_create(xap_db **out, const char *dir, const char *const *fields,
               size_t nfields)
{
    return create(out, dir, fields, nfields, Xapian::DB_CREATE_OR_OVERWRITE);
}

int xap_append(xap_db **out, const char *dir, const char *const *fields,
               size_t nfields)
{
    return create(out, dir, fields, nfields, Xapian::DB_CREATE_OR_OPEN);
}

int xap_add(xap_db *db, const char *key, size_t key_len,
            const char *const *vals, const size_t *lens)
{
    try {
        Xapian::Document doc;
        db->tg.set_document(doc);
        db->data.assign(key, key_len);
        for (size_t i = 0; i < db->prefixes.size(); i++) {
            db->data += '\x1f';
            if (!vals[i])
                continue;
            std::string text(vals[i], lens[i]);
            db->tg.index_text(text, 1, db->prefixes[i]);
            db->tg.increase_termpos(FIELD_GAP);
            db->tg.index_text(text);
            db->tg.increase_termpos(FIELD_GAP);
            db->data += text;
        }
        std::string id = "Q" + std::string(key, key_len);
        doc.add_boolean_term(id);
        doc.add_value(KEY_SLOT, std::string(key, key_len));
        doc.set_data(db->data);
        db->wdb.replace_document(id, doc);
        return 0;
    } catch (const Xapian::Error &e) {
        return fail(db, "add", e);
    } catch (const std::exception &e) {
        return fail_std(db, "add", e);
    }
}

int xap_commit(xap_db *db)
{
    try {
        db->wdb.commit();
        return 0;
    } catch (const Xapian::Error &e) {
        return fail(db, "commit", e);
    }
}

int xap_open(xap_db **out, const char *dir, const char *const *fields,
             size_t nfields)
{
    xap_db *db = *out = new (std::nothrow) xap_db;
    if (!db)
        return -1;
    try {
        db->rdb = Xapian::Database(dir);
        db->qp.set_database(db->rdb);  /* wildcards expand over its terms */
        set_fields(db, fields, nfields);
        return 0;
    } catch (const Xapian::Error &e) {
        return fail(db, dir, e);
    } catch (const std::exception &e) {
        return fail_std(db, dir, e);
    }
}

int xap_stats(xap_db *db, uint64_t *docs, uint64_t *terms,
              uint64_t *postings)
{
    try {
        *docs = db->rdb.get_doccount();
        *terms = *postings = 0;
        for (Xapian::TermIterator t = db->rdb.allterms_begin();
             t != db->rdb.allterms_end(); ++t) {
            if ((*t)[0] == 'Q')
                continue;
            ++*terms;
            *postings += t.get_termfreq();
        }
        return 0;
    } catch (const Xapian::Error &e) {
        return fail(db, "stats", e);
    }
}

int xap_top(xap_db *db, const char *query, size_t *hits, size_t *bytes)
{
    try {
        Xapian::Enquire enq(db->rdb);
        enq.set_query(parse(db, query));
        enq.set_weighting_scheme(Xapian::BM25Weight());
        Xapian::MSet m = enq.get_mset(0, 10);
        size_t n = 0, b = 0;
        for (Xapian::MSetIterator i = m.begin(); i != m.end(); ++i) {
            std::string d = i.get_document().get_data();
            b += d.size() + (d.empty() ? 0 : (unsigned char)d[0]);
            n++;
        }
        *hits = n;
        *bytes = b;
        return 0;
    } catch (const Xapian::Error &e) {
        return fail(db, "top-10", e);
    } catch (const std::exception &e) {
        return fail_std(db, "top-10", e);
    }
}

int xap_count(xap_db *db, const char *query, uint64_t *count)
{
    try {
        Xapian::Enquire enq(db->rdb);
        enq.set_query(parse(db, query));
        enq.set_weighting_scheme(Xapian::BoolWeight());
        Xapian::MSet m = enq.get_mset(0, 0, db->rdb.get_doccount());
        if (m.get_matches_lower_bound() != m.get_matches_upper_bound()) {
            db->err = "count: not exact (" +
                      std::to_string(m.get_matches_lower_bound()) + " to " +
                      std::to_string(m.get_matches_upper_bound()) + ")";
            return -1;
        }
        *count = m.get_matches_estimated();
        return 0;
    } catch (const Xapian::Error &e) {
        return fail(db, "count", e);
    } catch (const std::exception &e) {
        return fail_std(db, "count", e);
    }
}

int xap_keys(xap_db *db, const char *query,
             int (*fn)(void *payload, const char *key), void *payload)
{
    try {
        Xapian::Enquire enq(db->rdb);
        enq.set_query(parse(db, query));
        enq.set_weighting_scheme(Xapian::BoolWeight());
        enq.set_docid_order(Xapian::Enquire::ASCENDING);
        Xapian::MSet m = enq.get_mset(0, db->rdb.get_doccount());
        for (Xapian::MSetIterator i = m.begin(); i != m.end(); ++i) {
            std::string k = i.get_document().get_value(KEY_SLOT);
            int rc = fn(payload, k.c_str());
            if (rc)
                return rc;
        }
        return 0;
    } catch (const Xapian::Error &e) {
        return fail(db, "match set", e);
    } catch (const std::exception &e) {
        return fail_std(db, "match set", e);
    }
}

const char *xap_errmsg(const xap_db *db)
{
    return db ? db->err.c_str() : "out of memory";
}

void xap_close(xap_db *db)
{
    delete db;
}

} /* extern "C" */
