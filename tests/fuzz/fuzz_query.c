/*
 * fuzz_query.c -- fuzz target for the query parser (query/qry_parse.c):
 * arbitrary bytes as the text of a search.
 *
 * The first byte picks one of three analysis configurations (defaults;
 * stemmed, keyword, excluded and "none" fields with stop words; positions
 * off), so that every branch of the analysis of query words is reachable:
 * phrases refused without positions, fields that can never match, numbers
 * and booleans looked up as keyword terms, stop words dropping out.  The
 * rest is the query.  (An empty input is parsed under the defaults.)
 *
 * qry_parse() must either build a plan or refuse with KVFTS_EINVAL naming a
 * byte offset inside the query (or KVFTS_ENOMEM), leaving *out NULL.  A
 * plan is checked node by node against query.h's description of it (terms
 * non-empty and NUL-terminated; a phrase has >= 2 terms at ascending
 * offsets from 0; AND and OR have kids, only AND kids are negated) and
 * printed with qry_node_dump(), which walks every node once more.
 *
 * Only the parser runs: evaluating a plan needs a Berkeley DB environment,
 * and the iterators over stored postings are covered by the postings
 * decoder target and the unit tests.  A broken invariant aborts;
 * everything is freed before returning, so LeakSanitizer reports any leak.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "query.h"
#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c) do { if (!(c)) abort(); } while (0)

static const char *const configs[] = {
    "",
    ("{\"analysis\":{\"fields\":{\"body\":\"english\",\"pkg\":\"keyword\","
     "\"raw\":\"none\",\"title\":\"german\"},\"exclude\":[\"secret\"],"
     "\"stopwords\":[\"the\",\"a\",\"und\"]}}"),
    ("{\"analysis\":{\"default\":\"english\",\"positions\":false,"
     "\"stopwords\":[\"the\"]}}"),
};

static void check_node(const qry_node *n, bool under_and, unsigned depth)
{
    CHECK(depth <= 4 * QRY_MAX_DEPTH + 16);
    CHECK(!n->neg || under_and);
    switch (n->kind) {
    case QRY_EMPTY:
        break;
    case QRY_TERM:
    case QRY_PREFIX:
    case QRY_PHRASE:
        CHECK(n->field && n->flen >= 1 && n->field[n->flen] == '\0');
        CHECK(n->kind == QRY_PHRASE ? n->nterms >= 2 : n->nterms == 1);
        for (size_t i = 0; i < n->nterms; i++) {
            CHECK(n->terms[i][n->tlens[i]] == '\0');
            CHECK(n->tlens[i] >= 1 && n->tlens[i] <= TOK_MAX_TERM);
        }
        if (n->kind == QRY_PHRASE) {
            CHECK(n->offs[0] == 0);
            for (size_t i = 1; i < n->nterms; i++)
                CHECK(n->offs[i] > n->offs[i - 1]);
        }
        break;
    case QRY_AND:
    case QRY_OR:
        CHECK(n->nkids >= 1 && n->kids);
        for (size_t i = 0; i < n->nkids; i++)
            check_node(n->kids[i], n->kind == QRY_AND, depth + 1);
        break;
    default:
        CHECK(0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *cfg = configs[0];
    const char *q = (const char *)data;
    size_t len = size;
    if (size > 0) {
        cfg = configs[data[0] % (sizeof configs / sizeof *configs)];
        q++;
        len--;
    }
    kv_err err = KV_ERR_INIT;
    tok_analysis *a = NULL;
    if (tok_analysis_new(&a, cfg, strlen(cfg), &err))
        return 0;   /* out of memory only: the configurations are valid */
    qry_node *plan = (qry_node *)&err;   /* must be set to NULL on failure */
    int rc = qry_parse(&plan, a, q, len, &err);
    if (rc == KVFTS_OK) {
        CHECK(plan != NULL);
        check_node(plan, false, 0);
        kv_buf dump = KV_BUF_INIT;
        if (qry_node_dump(plan, &dump, &err) == KVFTS_OK)
            CHECK(dump.len > 0 && dump.data[dump.len] == '\0');
        kv_buf_free(&dump);
        qry_node_free(plan);
    } else {
        CHECK(rc == KVFTS_EINVAL || rc == KVFTS_ENOMEM);
        CHECK(plan == NULL && err.code == rc && err.msg[0] != '\0');
        if (rc == KVFTS_EINVAL && err.pos >= 0)
            CHECK((size_t)err.pos <= len);
    }
    tok_analysis_free(a);
    return 0;
}
