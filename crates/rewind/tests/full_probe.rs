//! Full pools and full logs, in every log variant × policy, on small pools
//! so exhaustion comes quickly: a transaction that fails for want of space
//! returns a typed error, leaves nothing of itself visible, the pool stays
//! usable (a smaller transaction commits), no space leaks across many
//! failing transactions, and a reopened pool holds exactly the committed
//! state and checks consistent.

mod common;
use common::{configs, SmallFs};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{Backend, Error, LogVariant, PPtr, Policy, Pool, PoolConfig};

const LAYOUT: &str = "full-probe";
/// Slots of the root table: each holds a block's offset, or 0.
const SLOTS: usize = 256;

type Table = [u64; SLOTS];

fn cfg(v: LogVariant, p: Policy) -> PoolConfig {
    PoolConfig::default().log(v).policy(p)
}

fn sim(v: LogVariant, p: Policy, size: u64) -> Pool {
    Pool::create_sim(LAYOUT, size, &cfg(v, p).backend(Backend::Sim)).unwrap()
}

/// The pool a process kill now would leave, recovered.
fn reopen_sim(pool: &Pool) -> Pool {
    let img = pool.domain().with_sim(|s| s.image_all_pending()).unwrap();
    Pool::open_image(img, LAYOUT).unwrap()
}

fn is_full(e: &Error) -> bool {
    matches!(e, Error::OutOfMemory { .. } | Error::LogFull { .. })
}

/// What the model knows of a block: its size and a fill byte (the whole
/// block holds it).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Block {
    off: u64,
    size: u64,
    fill: u8,
}

/// Every slot's block as the pool shows it, checked whole against the
/// model.
fn check_model(pool: &Pool, root: PPtr<Table>, model: &[Option<Block>], who: &str) {
    let table = pool
        .read(root)
        .unwrap_or_else(|e| panic!("{who}: root: {e}"));
    for (i, m) in model.iter().enumerate() {
        match m {
            None => assert_eq!(table[i], 0, "{who}: slot {i}"),
            Some(b) => {
                assert_eq!(table[i], b.off, "{who}: slot {i}");
                let mut buf = vec![0u8; b.size as usize];
                pool.read_bytes(b.off, &mut buf)
                    .unwrap_or_else(|e| panic!("{who}: slot {i}: {e}"));
                if let Some(at) = buf.iter().position(|&x| x != b.fill) {
                    panic!(
                        "{who}: slot {i} block {} of {}: byte {at} is {} not {}",
                        b.off, b.size, buf[at], b.fill
                    );
                }
            }
        }
    }
}

/// A random transaction over the table: allocate, rewrite or free blocks
/// (sizes up to `max`), a few to many operations. Returns the model as the
/// transaction leaves it if it commits.
fn random_tx(
    tx: &mut rewind::Tx<'_>,
    root: PPtr<Table>,
    model: &[Option<Block>],
    rng: &mut SmallRng,
    max: u64,
    ops: usize,
) -> Result<Vec<Option<Block>>, Error> {
    let mut m = model.to_vec();
    for _ in 0..ops {
        let i = rng.gen_range(0..SLOTS);
        let slot = root.cast::<u64>().at(i as u64);
        match m[i] {
            None => {
                let size = rng.gen_range(8..=max) & !7;
                let off = tx.alloc_bytes(size)?;
                let fill = rng.gen::<u8>() | 1;
                tx.write_bytes(off, &vec![fill; size as usize])?;
                tx.write(slot, &off)?;
                m[i] = Some(Block { off, size, fill });
            }
            Some(b) if rng.gen_bool(0.5) => {
                tx.free(PPtr::<u8>::from_offset(b.off))?;
                tx.write(slot, &0u64)?;
                m[i] = None;
            }
            Some(b) => {
                let fill = rng.gen::<u8>() | 1;
                tx.write_bytes(b.off, &vec![fill; b.size as usize])?;
                m[i] = Some(Block { fill, ..b });
            }
        }
    }
    Ok(m)
}

/// Random transactions on a small pool until it has been full many
/// times: every commit is in the model, every failure is a typed space
/// error and leaves the model's state; the pool checks consistent and a
/// reopened pool shows the model.
#[test]
fn random_transactions_on_a_small_pool_keep_exactly_the_committed_state() {
    let cases: u64 = std::env::var("REWIND_PROBE_CASES")
        .ok()
        .map_or(150, |s| s.parse().unwrap());
    for (v, p) in configs() {
        let who = format!("{v}-{p}");
        let pool = sim(v, p, 1 << 20);
        let root = pool.transaction(|tx| tx.root::<Table>()).unwrap();
        let mut model: Vec<Option<Block>> = vec![None; SLOTS];
        let mut rng = SmallRng::seed_from_u64(7);
        let (mut commits, mut full) = (0, 0);
        for n in 0..cases {
            let max = if n % 10 == 9 { 200_000 } else { 4096 };
            let ops = rng.gen_range(1..40);
            let r = pool.transaction(|tx| random_tx(tx, root, &model, &mut rng, max, ops));
            match r {
                Ok(m) => {
                    model = m;
                    commits += 1;
                }
                Err(e) => {
                    assert!(is_full(&e), "{who}: transaction {n}: {e}");
                    full += 1;
                }
            }
            check_model(&pool, root, &model, &format!("{who} after {n}"));
        }
        assert!(
            commits > 0 && full > 0,
            "{who}: {commits} commits, {full} full"
        );
        let c = rewind::inspect::check_pool(&pool);
        assert!(c.is_ok(), "{who}: {c}");
        let again = reopen_sim(&pool);
        check_model(&again, root, &model, &format!("{who} reopened"));
        let c = rewind::inspect::check_pool(&again);
        assert!(c.is_ok(), "{who} reopened: {c}");
    }
}

/// Redo-async: values committed to a block wait in the write cache; the
/// block is freed, its chunk goes back to the heap and the log grows into
/// it. Write-back must not then store the stale values over the log's
/// records (found by the collections' probe: a hash map's freed table
/// written back over a log chunk, the log list broken, an entry pointer
/// into a log block).
#[test]
fn values_waiting_for_write_back_never_land_on_a_log_chunk_that_reused_their_block() {
    for v in LogVariant::ALL {
        let who = format!("{v}-redo-async");
        let cfg = cfg(v, Policy::RedoAsync)
            .backend(Backend::Sim)
            .log_size(64 << 10);
        let pool = Pool::create_sim(LAYOUT, 2 << 20, &cfg).unwrap();
        let root = pool.transaction(|tx| tx.root::<Table>()).unwrap();
        // Every chunk the heap can give but two (for the log to commit
        // the writes below), as 200,000-byte blocks.
        let mut big = Vec::new();
        while pool.alloc_stats().free_chunks > 2 {
            big.push(pool.transaction(|tx| tx.alloc_bytes(200_000)).unwrap());
        }
        assert!(big.len() >= 2, "{who}: {} blocks", big.len());
        // A logged word in every line of them: committed, waiting in the
        // write cache (the simulated domain has no write-back thread).
        for &b in &big {
            pool.transaction(|tx| {
                for at in (0..200_000 - 8).step_by(2048) {
                    tx.write_bytes(b + at, &u64::MAX.to_le_bytes())?;
                }
                Ok::<_, Error>(())
            })
            .unwrap();
        }
        pool.transaction(|tx| {
            for &b in &big {
                tx.free(PPtr::<u8>::from_offset(b))?;
            }
            Ok::<_, Error>(())
        })
        .unwrap();
        // Small transactions until the log has grown into the freed chunks.
        let slot = root.cast::<u64>();
        for n in 0..4000u64 {
            pool.transaction(|tx| tx.write(slot.at(n % SLOTS as u64), &n))
                .unwrap_or_else(|e| panic!("{who}: transaction {n}: {e}"));
        }
        pool.sync().unwrap();
        let c = rewind::inspect::check_pool(&pool);
        assert!(c.is_ok(), "{who}: {c}");
        for n in 0..SLOTS as u64 {
            let want = (0..4000u64)
                .filter(|k| k % SLOTS as u64 == n)
                .max()
                .unwrap();
            assert_eq!(pool.read(slot.at(n)).unwrap(), want, "{who}: slot {n}");
        }
        let img = pool.domain().with_sim(|s| s.image_all_pending()).unwrap();
        let again = Pool::open_image(img, LAYOUT).unwrap_or_else(|e| panic!("{who}: reopen: {e}"));
        let c = rewind::inspect::check_pool(&again);
        assert!(c.is_ok(), "{who} reopened: {c}");
        again.transaction(|tx| tx.alloc_bytes(200_000)).unwrap();
    }
}

/// Many small transactions, each allocating a block, filling it and
/// linking it into a root table: under redo-async on the simulated domain
/// (write-back runs only when the log or the cache is full) the log grows
/// into most of the heap before a commit drains it.
#[test]
fn a_log_grown_into_the_heap_and_drained_mid_transaction_keeps_every_block() {
    for (v, p) in configs() {
        let who = format!("{v}-{p}");
        let pool = sim(v, p, 8 << 20);
        let root = pool.transaction(|tx| tx.root::<Table>()).unwrap();
        let slots = root.cast::<u64>();
        let mut model: Vec<Option<Block>> = vec![None; SLOTS];
        for n in 0..3000u64 {
            let i = (n % SLOTS as u64) as usize;
            let fill = (n % 251) as u8 | 1;
            let r = pool.transaction(|tx| {
                let off = tx.alloc_bytes(64)?;
                tx.write_bytes(off, &[fill; 64])?;
                if let Some(b) = model[i] {
                    tx.free(PPtr::<u8>::from_offset(b.off))?;
                }
                tx.write(slots.at(i as u64), &off)?;
                Ok::<_, Error>(off)
            });
            let off = r.unwrap_or_else(|e| panic!("{who}: transaction {n}: {e}"));
            model[i] = Some(Block {
                off,
                size: 64,
                fill,
            });
            check_model(&pool, root, &model, &format!("{who} after {n}"));
            if n % 50 == 0 || p == Policy::RedoAsync {
                let c = rewind::inspect::check_pool(&pool);
                assert!(c.is_ok(), "{who} after {n}: {c}");
            }
        }
        check_model(&reopen_sim(&pool), root, &model, &format!("{who} reopened"));
    }
}

/// Fills the heap with 64 KiB blocks, returning how many.
fn fill_heap(pool: &Pool) -> Vec<u64> {
    let mut blocks = Vec::new();
    loop {
        match pool.transaction(|tx| tx.alloc_bytes(64 << 10)) {
            Ok(b) => blocks.push(b),
            Err(e) => {
                assert!(is_full(&e), "{e}");
                return blocks;
            }
        }
    }
}

fn space(pool: &Pool) -> (u64, u64, u64, u64) {
    let s = pool.alloc_stats();
    (s.bytes_used, s.bytes_free, s.free_chunks, s.total_chunks)
}

/// Thousands of transactions that fail for want of space, in every way a
/// program may meet it (an allocation too large, a run of allocations, a
/// write set too large for the log, a failure inside a savepoint, after a
/// `rollback_to`, inside a nested top action, the error swallowed or
/// returned), on a file pool whose heap is full: each returns a typed
/// error, leaves the committed state, and no space leaks (bytes used and
/// free, free chunks, log blocks the same after all of them); a small
/// transaction and an `atomic_write` then commit; closed and reopened, the
/// pool holds exactly the committed state and checks consistent.
#[test]
fn failing_transactions_on_a_full_file_pool_leak_nothing_and_leave_the_committed_state() {
    let rounds: u64 = std::env::var("REWIND_PROBE_CASES")
        .ok()
        .map_or(150, |s| s.parse().unwrap());
    for (v, p) in configs() {
        let who = format!("{v}-{p}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("full.pool");
        let pool = Pool::create(&path, LAYOUT, 2 << 20, &cfg(v, p)).unwrap();
        let root = pool.transaction(|tx| tx.root::<Table>()).unwrap();
        let slots = root.cast::<u64>();
        pool.transaction(|tx| tx.write(root, &[5u64; SLOTS]))
            .unwrap();
        let big = fill_heap(&pool);
        assert!(!big.is_empty(), "{who}");
        let keep = big[0];
        pool.transaction(|tx| tx.write(slots, &keep)).unwrap();
        pool.sync().unwrap();
        let before = space(&pool);
        let log_before = pool.log_stats().blocks_total;
        let mut want = [5u64; SLOTS];
        want[0] = keep;
        let kinds = 7;
        let mut log_full = 0;
        for n in 0..rounds * kinds {
            let r = pool.transaction(|tx| -> Result<(), Error> {
                tx.write(slots.at(1), &n)?;
                match n % kinds {
                    // One allocation larger than the heap has room for.
                    0 => tx.alloc_bytes(1 << 20).map(|_| ()),
                    // Allocations until one fails, the error returned.
                    1 => loop {
                        let b = tx.alloc_bytes(4096)?;
                        tx.write(PPtr::<u64>::from_offset(b), &n)?;
                    },
                    // The same, the error swallowed: the closure returns Ok
                    // and the allocations made before it commit... so free
                    // them to keep the state, then fail on purpose.
                    2 => {
                        let mut got = Vec::new();
                        while let Ok(b) = tx.alloc_bytes(4096) {
                            got.push(b);
                        }
                        for b in got {
                            tx.free(PPtr::<u8>::from_offset(b))?;
                        }
                        Err(Error::Aborted)
                    }
                    // Writes until the log is full: every word of every
                    // block once (under redo a word written again edits
                    // the write set), then give up.
                    3 => {
                        for &b in &big {
                            for k in 0..(64 << 10) / 8 {
                                tx.write_bytes(b + k * 8, &(k + n).to_le_bytes())?;
                            }
                        }
                        Err(Error::Aborted)
                    }
                    // Inside a savepoint: the failure, then a rollback to it,
                    // then the error returned.
                    4 => {
                        let sp = tx.savepoint()?;
                        tx.write(slots.at(2), &n)?;
                        let e = tx.alloc_bytes(1 << 20).unwrap_err();
                        tx.rollback_to(sp)?;
                        Err(e)
                    }
                    // Inside a nested top action.
                    5 => tx.nested_top_action(|tx| {
                        tx.write(slots.at(3), &n)?;
                        tx.alloc_bytes(1 << 20).map(|_| ())
                    }),
                    // Huge single writes, a whole block each, then give up.
                    _ => {
                        for (k, &b) in big.iter().enumerate() {
                            tx.write_bytes(b, &vec![(k % 255) as u8 + 1; 64 << 10])?;
                        }
                        Err(Error::Aborted)
                    }
                }
            });
            let e = match r {
                Ok(()) => panic!("{who}: transaction {n} committed"),
                Err(e) => e,
            };
            if matches!(e, Error::LogFull { .. }) {
                log_full += 1;
            }
            assert!(
                is_full(&e) || matches!(e, Error::Aborted),
                "{who}: transaction {n} (kind {}): {e}",
                n % kinds
            );
            if n % 50 == 0 {
                assert_eq!(pool.read(root).unwrap(), want, "{who}: after {n}");
            }
        }
        assert_eq!(pool.read(root).unwrap(), want, "{who}");
        // Every configuration met a full log.
        assert!(log_full > 0, "{who}: no LogFull");
        pool.sync().unwrap();
        if p == Policy::NoForce {
            pool.checkpoint().unwrap();
        }
        assert_eq!(space(&pool), before, "{who}: space leaked");
        assert!(
            pool.log_stats().blocks_total <= log_before,
            "{who}: the log kept {} blocks, {log_before} before",
            pool.log_stats().blocks_total
        );
        // The pool goes on: a small transaction, an atomic write, and a
        // freed block allocated again.
        pool.transaction(|tx| tx.write(slots.at(4), &44u64))
            .unwrap_or_else(|e| panic!("{who}: small transaction: {e}"));
        pool.atomic_write(slots.at(5), &55u64)
            .unwrap_or_else(|e| panic!("{who}: atomic_write: {e}"));
        let last = *big.last().unwrap();
        pool.transaction(|tx| tx.free(PPtr::<u8>::from_offset(last)))
            .unwrap();
        let again = pool.transaction(|tx| tx.alloc_bytes(64 << 10)).unwrap();
        pool.transaction(|tx| tx.write(slots.at(6), &again))
            .unwrap();
        (want[4], want[5], want[6]) = (44, 55, again);
        assert_eq!(pool.read(root).unwrap(), want, "{who}");
        pool.close().unwrap();
        let pool = Pool::open(&path, LAYOUT, &rewind::OpenOptions::default()).unwrap();
        assert_eq!(pool.read(root).unwrap(), want, "{who}: reopened");
        let c = rewind::inspect::check_pool(&pool);
        assert!(c.is_ok(), "{who}: {c}");
    }
}

/// On a real file system that fills up (a 6 MiB tmpfs, the Msync
/// backend): a pool larger than the free space is `NoSpace` and leaves no
/// file; a pool that grows until the file system is full gets
/// `NoSpaceToGrow` (or `OutOfMemory` from its last chunk), never a panic
/// or a `SIGBUS`; it stays usable with the file system full (commits of
/// what exists, frees and allocations of freed space), and reopens with
/// exactly the committed state.
#[test]
fn a_pool_on_a_full_file_system_gets_typed_errors_and_stays_usable() {
    let Some(fs) = SmallFs::mount(6) else {
        return;
    };
    for (v, p) in [
        (LogVariant::Batch, Policy::Redo),
        (LogVariant::Simple, Policy::Force),
        (LogVariant::TwoLayer, Policy::NoForce),
        (LogVariant::Optimized, Policy::RedoAsync),
    ] {
        let who = format!("{v}-{p}");
        let grow_cfg = cfg(v, p).backend(Backend::Msync).max_size(64 << 20);
        let path = fs.path().join("grow.pool");
        // Larger than the file system: refused, nothing left behind.
        let e = Pool::create(fs.path().join("huge.pool"), LAYOUT, 32 << 20, &cfg(v, p))
            .err()
            .unwrap_or_else(|| panic!("{who}: a 32 MiB pool on a 6 MiB file system"));
        assert!(matches!(e, Error::NoSpace { .. }), "{who}: {e}");
        assert_eq!(std::fs::read_dir(fs.path()).unwrap().count(), 0, "{who}");
        let pool = Pool::create(&path, LAYOUT, 1 << 20, &grow_cfg).unwrap();
        let root = pool.transaction(|tx| tx.root::<Table>()).unwrap();
        let slots = root.cast::<u64>();
        // Allocate 64 KiB blocks until the file system is full.
        let mut blocks = Vec::new();
        let e = loop {
            match pool.transaction(|tx| {
                let b = tx.alloc_bytes(64 << 10)?;
                tx.write_bytes(b, &[0xab; 64])?;
                Ok::<_, Error>(b)
            }) {
                Ok(b) => blocks.push(b),
                Err(e) => break e,
            }
            assert!(blocks.len() < 1024, "{who}: the file system never filled");
        };
        assert!(
            matches!(
                e,
                Error::NoSpaceToGrow { .. } | Error::OutOfMemory { .. } | Error::LogFull { .. }
            ),
            "{who}: {e}"
        );
        assert!(blocks.len() > 16, "{who}: only {} blocks", blocks.len());
        let e = pool.grow(4 << 20).unwrap_err();
        assert!(matches!(e, Error::NoSpaceToGrow { .. }), "{who}: {e}");
        // Still usable on the full file system.
        for (i, &b) in blocks.iter().enumerate().take(SLOTS) {
            pool.transaction(|tx| tx.write(slots.at(i as u64), &b))
                .unwrap_or_else(|e| panic!("{who}: commit on a full file system: {e}"));
        }
        let last = *blocks.last().unwrap();
        pool.transaction(|tx| tx.free(PPtr::<u8>::from_offset(last)))
            .unwrap();
        let again = pool
            .transaction(|tx| tx.alloc_bytes(64 << 10))
            .unwrap_or_else(|e| panic!("{who}: reuse of a freed block: {e}"));
        pool.atomic_write(slots.at(SLOTS as u64 - 1), &again)
            .unwrap();
        let want = pool.read(root).unwrap();
        pool.close().unwrap();
        let pool = Pool::open(&path, LAYOUT, &rewind::OpenOptions::default())
            .unwrap_or_else(|e| panic!("{who}: reopen on a full file system: {e}"));
        assert_eq!(pool.read(root).unwrap(), want, "{who}");
        // (The last block was freed and allocated again, zeroed.)
        for &b in &blocks[..blocks.len() - 1] {
            assert_eq!(
                pool.read(PPtr::<u8>::from_offset(b)).unwrap(),
                0xab,
                "{who}"
            );
        }
        let c = rewind::inspect::check_pool(&pool);
        assert!(c.is_ok(), "{who}: {c}");
        drop(pool);
        std::fs::remove_file(&path).unwrap();
    }
}
