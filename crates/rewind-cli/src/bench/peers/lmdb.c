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
 * names it).
 *
 * LMDB forbids opening one environment twice in a process: closing either
 * handle drops the process's advisory locks on the lock file, and the next
 * open may then reinitialize the lock file's mutexes while other handles
 * hold them (seen as a segfault in glibc's robust-mutex unlock, with a
 * handle per thread in `bench group-commit`). So handles opened on the same
 * directory share one environment, counted, closed with the last handle;
 * each handle keeps its own write and read transactions, read transactions
 * not tied to threads (MDB_NOTLS), so a handle per thread is LMDB's own
 * multi-threaded use. */
#include <lmdb.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* An environment open in this process, and the handles that use it. */
struct shared_env {
    char *dir;
    MDB_env *env;
    MDB_dbi dbi;
    int handles;
    struct shared_env *next;
};

static pthread_mutex_t envs_latch = PTHREAD_MUTEX_INITIALIZER;
static struct shared_env *envs; /* under envs_latch */

struct lm {
    struct shared_env *shared;
    MDB_env *env;
    MDB_dbi dbi;
    MDB_txn *read;  /* reset between lookups */
    MDB_txn *batch; /* open batch, or NULL */
};

const char *lm_strerror(int err) { return mdb_strerror(err); }

/* Opens (creating) the environment in the existing directory `dir`, its
 * map `mapsize` bytes: a new environment, or the one this process has
 * open on `dir` already (its map size kept). */
static int env_open(const char *dir, uint64_t mapsize, struct shared_env **out) {
    for (struct shared_env *e = envs; e != NULL; e = e->next) {
        if (strcmp(e->dir, dir) == 0) {
            e->handles++;
            *out = e;
            return 0;
        }
    }
    struct shared_env *e = calloc(1, sizeof *e);
    if (e == NULL || (e->dir = strdup(dir)) == NULL) {
        free(e);
        return ENOMEM;
    }
    int rc = mdb_env_create(&e->env);
    if (rc != 0) {
        free(e->dir);
        free(e);
        return rc;
    }
    rc = mdb_env_set_mapsize(e->env, (size_t)mapsize);
    if (rc == 0)
        rc = mdb_env_open(e->env, dir, MDB_NOTLS, 0600);
    MDB_txn *t = NULL;
    if (rc == 0)
        rc = mdb_txn_begin(e->env, NULL, 0, &t);
    if (rc == 0)
        rc = mdb_dbi_open(t, NULL, 0, &e->dbi);
    if (rc == 0) {
        rc = mdb_txn_commit(t);
        t = NULL;
    }
    if (rc != 0) {
        if (t != NULL)
            mdb_txn_abort(t);
        mdb_env_close(e->env);
        free(e->dir);
        free(e);
        return rc;
    }
    e->handles = 1;
    e->next = envs;
    envs = e;
    *out = e;
    return 0;
}

/* One handle fewer on `e`: closed with its last. */
static void env_close(struct shared_env *e) {
    if (--e->handles > 0)
        return;
    for (struct shared_env **p = &envs; *p != NULL; p = &(*p)->next) {
        if (*p == e) {
            *p = e->next;
            break;
        }
    }
    mdb_env_close(e->env);
    free(e->dir);
    free(e);
}

/* A handle on the environment in the existing directory `dir` (see
 * env_open). */
int lm_open(const char *dir, uint64_t mapsize, struct lm **out) {
    struct lm *l = calloc(1, sizeof *l);
    if (l == NULL)
        return ENOMEM;
    pthread_mutex_lock(&envs_latch);
    int rc = env_open(dir, mapsize, &l->shared);
    pthread_mutex_unlock(&envs_latch);
    if (rc != 0) {
        free(l);
        return rc;
    }
    l->env = l->shared->env;
    l->dbi = l->shared->dbi;
    *out = l;
    return 0;
}

int lm_close(struct lm *l) {
    if (l->batch != NULL)
        mdb_txn_abort(l->batch);
    if (l->read != NULL)
        mdb_txn_abort(l->read);
    pthread_mutex_lock(&envs_latch);
    env_close(l->shared);
    pthread_mutex_unlock(&envs_latch);
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
