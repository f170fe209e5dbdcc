/* Berkeley DB as a peer of the B+-tree benchmarks: a transactional
 * B-tree with synchronous commit, behind plain functions (BDB's API is
 * function pointers in structs, which Rust would have to mirror field by
 * field). Keys are byte strings, compared by their bytes (BDB's default);
 * the caller passes a u64 key as its 8 big-endian bytes, so byte order is
 * numeric order. Values are opaque bytes.
 *
 * Each put or del outside a batch is its own transaction, committed with
 * the environment's default: the log is written and synced at commit.
 * Lookups outside a batch read without a transaction (BDB's cheapest
 * consistent read for a single thread). A batch is one transaction for
 * many operations, then committed or aborted. Every function returns 0
 * or BDB's error number (bdb_strerror names it). */
#include <db.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct bdb {
    DB_ENV *env;
    DB *db;
    DB_TXN *batch;
};

const char *bdb_strerror(int err) { return db_strerror(err); }

static int env_open(const char *dir, uint64_t cache, uint32_t extra, DB_ENV **out) {
    DB_ENV *env;
    int rc = db_env_create(&env, 0);
    if (rc != 0)
        return rc;
    rc = env->set_cachesize(env, (uint32_t)(cache >> 30), (uint32_t)(cache & ((1u << 30) - 1)), 1);
    /* One transaction may touch every page of the tree (the rollback
     * benchmark's large transactions): room for that many locks. */
    if (rc == 0)
        rc = env->set_lk_max_locks(env, 1000000);
    if (rc == 0)
        rc = env->set_lk_max_objects(env, 1000000);
    if (rc == 0)
        rc = env->open(env, dir,
                       DB_CREATE | DB_INIT_TXN | DB_INIT_LOCK | DB_INIT_LOG | DB_INIT_MPOOL | extra,
                       0600);
    if (rc != 0) {
        env->close(env, 0);
        return rc;
    }
    *out = env;
    return 0;
}

/* Opens (creating) the environment in `dir` and the tree `tree.db`. */
int bdb_open(const char *dir, uint64_t cache, struct bdb **out) {
    struct bdb *b = calloc(1, sizeof *b);
    if (b == NULL)
        return ENOMEM;
    int rc = env_open(dir, cache, 0, &b->env);
    if (rc != 0) {
        free(b);
        return rc;
    }
    rc = db_create(&b->db, b->env, 0);
    if (rc == 0)
        rc = b->db->open(b->db, NULL, "tree.db", NULL, DB_BTREE, DB_CREATE | DB_AUTO_COMMIT, 0600);
    if (rc != 0) {
        if (b->db != NULL)
            b->db->close(b->db, 0);
        b->env->close(b->env, 0);
        free(b);
        return rc;
    }
    *out = b;
    return 0;
}

/* Runs normal recovery on the environment in `dir` (DB_RECOVER: replays
 * the log from the last checkpoint, undoes what did not commit), then
 * closes it. */
int bdb_recover(const char *dir, uint64_t cache) {
    DB_ENV *env;
    int rc = env_open(dir, cache, DB_RECOVER, &env);
    if (rc != 0)
        return rc;
    return env->close(env, 0);
}

int bdb_close(struct bdb *b) {
    int rc = 0;
    if (b->batch != NULL)
        rc = b->batch->abort(b->batch);
    int rc2 = b->db->close(b->db, 0);
    int rc3 = b->env->close(b->env, 0);
    free(b);
    return rc != 0 ? rc : (rc2 != 0 ? rc2 : rc3);
}

/* The transaction `op` runs in: the batch's, or a new one in `*own`. */
static int txn_for(struct bdb *b, DB_TXN **own, DB_TXN **txn) {
    *own = NULL;
    if (b->batch != NULL) {
        *txn = b->batch;
        return 0;
    }
    int rc = b->env->txn_begin(b->env, NULL, own, 0);
    *txn = *own;
    return rc;
}

static int txn_end(DB_TXN *own, int rc) {
    if (own == NULL)
        return rc;
    if (rc != 0 && rc != DB_NOTFOUND) {
        own->abort(own);
        return rc;
    }
    int c = own->commit(own, 0);
    return c != 0 ? c : rc;
}

/* A DBT of `size` bytes at `data`, its other fields zero. */
static DBT dbt(const void *data, uint32_t size) {
    DBT d;
    memset(&d, 0, sizeof d);
    d.data = (void *)data;
    d.size = size;
    return d;
}

/* Inserts `key` unless present: `*inserted` is 1, or 0 if it was there. */
int bdb_put(struct bdb *b, const void *key, uint32_t klen, const void *val, uint32_t len,
            int *inserted) {
    DBT k = dbt(key, klen), v = dbt(val, len);
    DB_TXN *own, *txn;
    int rc = txn_for(b, &own, &txn);
    if (rc != 0)
        return rc;
    rc = b->db->put(b->db, txn, &k, &v, DB_NOOVERWRITE);
    *inserted = rc == 0;
    if (rc == DB_KEYEXIST)
        rc = 0;
    return txn_end(own, rc);
}

/* `*found` is 1 and `val` holds up to `len` bytes of the value, or 0. */
int bdb_get(struct bdb *b, const void *key, uint32_t klen, void *val, uint32_t len, int *found) {
    DBT k = dbt(key, klen), v = dbt(val, 0);
    v.ulen = len;
    v.flags = DB_DBT_USERMEM;
    int rc = b->db->get(b->db, b->batch, &k, &v, 0);
    *found = rc == 0;
    return rc == DB_NOTFOUND ? 0 : rc;
}

int bdb_del(struct bdb *b, const void *key, uint32_t klen, int *found) {
    DBT k = dbt(key, klen);
    DB_TXN *own, *txn;
    int rc = txn_for(b, &own, &txn);
    if (rc != 0)
        return rc;
    rc = txn_end(own, b->db->del(b->db, txn, &k, 0));
    *found = rc == 0;
    return rc == DB_NOTFOUND ? 0 : rc;
}

int bdb_begin(struct bdb *b) {
    if (b->batch != NULL)
        return EINVAL;
    return b->env->txn_begin(b->env, NULL, &b->batch, 0);
}

int bdb_commit(struct bdb *b) {
    if (b->batch == NULL)
        return EINVAL;
    int rc = b->batch->commit(b->batch, 0);
    b->batch = NULL;
    return rc;
}

int bdb_abort(struct bdb *b) {
    if (b->batch == NULL)
        return EINVAL;
    int rc = b->batch->abort(b->batch);
    b->batch = NULL;
    return rc;
}
