/*
 * kv_config.c -- the database configuration: one JSON object stored in
 * meta.db under "config" (logical key "meta::config") by `kvfts init --config`
 * and read by every handle on open.  This file parses the members that lib/
 * owns and checks the whole object's top level; members owned by other
 * modules ("analysis", parsed by tokenizer/) are only checked to be objects.
 *
 *   {
 *     "lookups": [ {"name": "customer_ref", "path": "customer_id",
 *                   "unique": true}, ... ],
 *     "analysis": { ... see tokenizer/ ... }
 *   }
 *
 * Lookup rules: a name is 1..128 bytes without spaces or control characters,
 * is not "fts", "count" or "meta", contains no "::", and is declared once;
 * a path is a non-empty dotted path ("address.city").  "unique" defaults to
 * false.  The config is small, so YAJL's tree parser suits it.
 */
#include "kv.h"

#include <string.h>
#include <yajl/yajl_tree.h>

void kv_config_clear(kv_config *c)
{
    for (size_t i = 0; i < c->nlookups; i++) {
        kv_free(c->lookups[i].name);
        kv_free(c->lookups[i].path);
    }
    memset(c, 0, sizeof *c);
}

const kv_lookup_def *kv_config_lookup(const kv_config *c, const char *name,
                                      size_t nlen)
{
    for (size_t i = 0; i < c->nlookups; i++)
        if (strlen(c->lookups[i].name) == nlen &&
            memcmp(c->lookups[i].name, name, nlen) == 0)
            return &c->lookups[i];
    return NULL;
}

static int parse_lookup(kv_config *c, yajl_val v, size_t idx, kv_err *err)
{
    if (!YAJL_IS_OBJECT(v))
        return kv_seterr(err, KVFTS_EINVAL,
                         "config: lookups[%zu] must be an object", idx);
    const char *name = NULL, *path = NULL;
    bool unique = false;
    for (size_t i = 0; i < v->u.object.len; i++) {
        const char *k = v->u.object.keys[i];
        yajl_val x = v->u.object.values[i];
        if (strcmp(k, "name") == 0 && YAJL_IS_STRING(x))
            name = x->u.string;
        else if (strcmp(k, "path") == 0 && YAJL_IS_STRING(x))
            path = x->u.string;
        else if (strcmp(k, "unique") == 0 && (YAJL_IS_TRUE(x) ||
                                              YAJL_IS_FALSE(x)))
            unique = YAJL_IS_TRUE(x);
        else
            return kv_seterr(err, KVFTS_EINVAL,
                             "config: lookups[%zu]: unexpected member '%s' "
                             "(expected \"name\": string, \"path\": string, "
                             "\"unique\": true|false)", idx, k);
    }
    if (!name || !path)
        return kv_seterr(err, KVFTS_EINVAL,
                         "config: lookups[%zu]: \"name\" and \"path\" are "
                         "required", idx);
    int rc = kv_name_check("lookup", name, strlen(name), err);
    if (rc)
        return kv_err_prefix(err, "config: lookups[%zu]", idx);
    if (strstr(name, KV_SEP) || strcmp(name, "fts") == 0 ||
        strcmp(name, "count") == 0 || strcmp(name, "meta") == 0)
        return kv_seterr(err, KVFTS_EINVAL,
                         "config: lookups[%zu]: name '%s' is reserved or "
                         "contains '::'", idx, name);
    if (kv_config_lookup(c, name, strlen(name)))
        return kv_seterr(err, KVFTS_EINVAL,
                         "config: lookups[%zu]: lookup '%s' declared twice",
                         idx, name);
    if (!path[0] || path[0] == '.' || path[strlen(path) - 1] == '.')
        return kv_seterr(err, KVFTS_EINVAL,
                         "config: lookups[%zu]: bad path '%s'", idx, path);
    if (c->nlookups >= KV_MAX_LOOKUPS)
        return kv_seterr(err, KVFTS_EINVAL,
                         "config: more than %d lookups", KV_MAX_LOOKUPS);
    kv_lookup_def *d = &c->lookups[c->nlookups];
    d->name = kv_strndup(name, strlen(name));
    d->path = kv_strndup(path, strlen(path));
    d->unique = unique;
    if (!d->name || !d->path) {
        kv_free(d->name);
        kv_free(d->path);
        d->name = d->path = NULL;
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    }
    c->lookup_names[c->nlookups] = d->name;
    c->nlookups++;
    return KVFTS_OK;
}

int kv_config_parse(kv_config *out, const char *json, size_t len, kv_err *err)
{
    memset(out, 0, sizeof *out);
    if (len == 0)
        return KVFTS_OK;
    /* Validate with the same rules as documents first: exact offsets. */
    int rc = kv_json_walk(json, len, NULL, NULL, NULL, err);
    if (rc)
        return kv_err_prefix(err, "config");
    char *text = kv_strndup(json, len);
    if (!text)
        return kv_seterr(err, KVFTS_ENOMEM, "out of memory");
    char ebuf[256] = "";
    yajl_val root = yajl_tree_parse(text, ebuf, sizeof ebuf);
    kv_free(text);
    if (!root)
        return kv_seterr(err, KVFTS_EINVAL, "config: %s",
                         ebuf[0] ? ebuf : "cannot parse");
    for (size_t i = 0; !rc && i < root->u.object.len; i++) {
        const char *k = root->u.object.keys[i];
        yajl_val v = root->u.object.values[i];
        if (strcmp(k, "lookups") == 0) {
            if (!YAJL_IS_ARRAY(v)) {
                rc = kv_seterr(err, KVFTS_EINVAL,
                               "config: \"lookups\" must be an array");
                break;
            }
            for (size_t j = 0; !rc && j < v->u.array.len; j++)
                rc = parse_lookup(out, v->u.array.values[j], j, err);
        } else if (strcmp(k, "analysis") == 0) {
            if (!YAJL_IS_OBJECT(v))
                rc = kv_seterr(err, KVFTS_EINVAL,
                               "config: \"analysis\" must be an object");
        } else {
            rc = kv_seterr(err, KVFTS_EINVAL,
                           "config: unknown member '%s' (valid: \"lookups\", "
                           "\"analysis\")", k);
        }
    }
    yajl_tree_free(root);
    if (rc)
        kv_config_clear(out);
    return rc;
}
