/* LMDB as a peer of the B+-tree benchmarks: its copy-on-write B+-tree
 * with the default durability (each write transaction's commit syncs),
 * behind plain functions. Keys are byte strings, compared by their bytes
 * (LMDB's default); the caller passes a u64 key as its 8 big-endian bytes,
 * so byte order is numeric order.
 *
 * Each put or del outside a batch is its own write transaction. Lookups
 * outside a batch use one read-only transaction, reset after each lookup
 * and renewed before the next (LMDB's fast path for repeated reads). A
 * batch is one write transaction for many operations, then committed or
 * aborted. Every function returns 0 or LMDB's error number (lm_strerror
 * names it). */
#include <lmdb.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct lm {
    MDB_env *env;
    MDB_dbi dbi;
    MDB_txn *read;  /* reset between lookups */
    MDB_txn *batch; /* open batch, or NULL */
};

const char *lm_strerror(int err) { return mdb_strerror(err); }

/* Opens (creating) the environment in the existing directory `dir`, its
 * map `mapsize` bytes. */
int lm_open(const char *dir, uint64_t mapsize, struct lm **out) {
    struct lm *l = calloc(1, sizeof *l);
    if (l == NULL)
        return ENOMEM;
    int rc = mdb_env_create(&l->env);
    if (rc != 0) {
        free(l);
        return rc;
    }
    rc = mdb_env_set_mapsize(l->env, (size_t)mapsize);
    if (rc == 0)
        rc = mdb_env_open(l->env, dir, 0, 0600);
    MDB_txn *t = NULL;
    if (rc == 0)
        rc = mdb_txn_begin(l->env, NULL, 0, &t);
    if (rc == 0)
        rc = mdb_dbi_open(t, NULL, 0, &l->dbi);
    if (rc == 0) {
        rc = mdb_txn_commit(t);
        t = NULL;
    }
    if (rc != 0) {
        if (t != NULL)
            mdb_txn_abort(t);
        mdb_env_close(l->env);
        free(l);
        return rc;
    }
    *out = l;
    return 0;
}

int lm_close(struct lm *l) {
    if (l->batch != NULL)
        mdb_txn_abort(l->batch);
    if (l->read != NULL)
        mdb_txn_abort(l->read);
    mdb_env_close(l->env);
    free(l);
    return 0;
}

static int write_op(struct lm *l, const void *key, uint32_t klen, const void *val, uint32_t len,
                    int del, int *found) {
    MDB_val k = {klen, (void *)key};
    MDB_val v = {len, (void *)val};
    MDB_txn *t = l->batch;
    int rc;
    if (t == NULL && (rc = mdb_txn_begin(l->env, NULL, 0, &t)) != 0)
        return rc;
    rc = del ? mdb_del(t, l->dbi, &k, NULL) : mdb_put(t, l->dbi, &k, &v, MDB_NOOVERWRITE);
    *found = rc == 0;
    if (rc == MDB_NOTFOUND || rc == MDB_KEYEXIST)
        rc = 0;
    if (l->batch == NULL) {
        if (rc != 0)
            mdb_txn_abort(t);
        else
            rc = mdb_txn_commit(t);
    }
    return rc;
}

/* Inserts `key` unless present: `*inserted` is 1, or 0 if it was there. */
int lm_put(struct lm *l, const void *key, uint32_t klen, const void *val, uint32_t len,
           int *inserted) {
    return write_op(l, key, klen, val, len, 0, inserted);
}

int lm_del(struct lm *l, const void *key, uint32_t klen, int *found) {
    return write_op(l, key, klen, NULL, 0, 1, found);
}

/* `*found` is 1 and `val` holds up to `len` bytes of the value, or 0. */
int lm_get(struct lm *l, const void *key, uint32_t klen, void *val, uint32_t len, int *found) {
    MDB_val k = {klen, (void *)key};
    MDB_val v;
    MDB_txn *t = l->batch;
    int rc;
    if (t == NULL) {
        rc = l->read == NULL ? mdb_txn_begin(l->env, NULL, MDB_RDONLY, &l->read)
                             : mdb_txn_renew(l->read);
        if (rc != 0)
            return rc;
        t = l->read;
    }
    rc = mdb_get(t, l->dbi, &k, &v);
    *found = rc == 0;
    if (rc == 0)
        memcpy(val, v.mv_data, v.mv_size < len ? v.mv_size : len);
    if (t == l->read)
        mdb_txn_reset(l->read);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

int lm_begin(struct lm *l) {
    if (l->batch != NULL)
        return EINVAL;
    return mdb_txn_begin(l->env, NULL, 0, &l->batch);
}

int lm_commit(struct lm *l) {
    if (l->batch == NULL)
        return EINVAL;
    int rc = mdb_txn_commit(l->batch);
    l->batch = NULL;
    return rc;
}

int lm_abort(struct lm *l) {
    if (l->batch == NULL)
        return EINVAL;
    mdb_txn_abort(l->batch);
    l->batch = NULL;
    return 0;
}
