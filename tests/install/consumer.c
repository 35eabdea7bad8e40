/* A program outside the kvfts tree, built against an installed kvfts. */
#include <kvfts.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    kvfts_db *db = NULL;
    kvfts_open_options o = KVFTS_OPEN_OPTIONS_INIT;
    o.create = true;
    if (kvfts_open(&db, argv[1], &o) != KVFTS_OK) {
        fprintf(stderr, "%s\n", kvfts_errmsg(db));
        kvfts_close(db);
        return 1;
    }
    uint64_t cas = 0;
    int rc = kvfts_put(&cas, db, "k", 1, "{\"a\":1}", 7, 0);
    char *json = NULL;
    size_t n = 0;
    if (rc == KVFTS_OK)
        rc = kvfts_get(&json, &n, NULL, db, "k", 1);
    if (rc == KVFTS_OK)
        printf("%s\n", json);
    kvfts_free(json);
    kvfts_close(db);
    return rc == KVFTS_OK ? 0 : 1;
}
