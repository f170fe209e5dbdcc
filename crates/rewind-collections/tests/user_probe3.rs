//! A user's third round: the list and the blob shared by threads with no
//! lock of their own (cursors included), closures that panic inside the
//! collections' own calls, and cursors kept across the changes of other
//! transactions.

mod common;

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{PPtr, Policy, Pool, PoolConfig};
use rewind_collections::{BTreeMap, Blob, Error, FixedBytes, HashMap, List};

/// A blob record: a value and its complement, so a torn read shows.
fn record(v: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&v.to_le_bytes());
    b[8..].copy_from_slice(&(!v).to_le_bytes());
    b
}

fn records_whole(b: &[u8]) -> bool {
    b.len().is_multiple_of(16)
        && b.chunks(16).all(|r| {
            let v = u64::from_le_bytes(r[..8].try_into().unwrap());
            let w = u64::from_le_bytes(r[8..].try_into().unwrap());
            w == !v
        })
}

#[derive(Clone, Debug, PartialEq)]
enum Op {
    PushBack(u64),
    PushFront(u64),
    PopFront,
    PopBack,
    RemoveIndex(u64),
    RemoveCursor(u64),
    Append(std::vec::Vec<u64>),
    WriteAt(u64, u64),
    Truncate(u64),
    Shrink,
    Replace(std::vec::Vec<u64>),
}

#[derive(Clone, Copy)]
struct Shared {
    list: List<u64>,
    blob: Blob,
    seq: PPtr<u64>,
}

/// One committed transaction: its sequence number and each operation with
/// what it returned.
struct Done {
    seq: u64,
    ops: std::vec::Vec<(Op, String)>,
}

fn gen(rng: &mut SmallRng, t: u64, n: &mut u64) -> Op {
    let mut fresh = || {
        *n += 1;
        (t << 32) | *n
    };
    match rng.gen_range(0..14) {
        0 | 1 => Op::PushBack(fresh()),
        2 => Op::PushFront(fresh()),
        3 => Op::PopFront,
        4 => Op::PopBack,
        5 => Op::RemoveIndex(rng.gen_range(0..40)),
        6 => Op::RemoveCursor(rng.gen_range(0..40)),
        7 | 8 => Op::Append((0..rng.gen_range(0..5)).map(|_| fresh()).collect()),
        9 => Op::WriteAt(rng.gen_range(0..40), fresh()),
        10 => Op::Truncate(rng.gen_range(0..40)),
        11 => Op::Shrink,
        12 => Op::Replace((0..rng.gen_range(0..6)).map(|_| fresh()).collect()),
        _ => Op::PushBack(fresh()),
    }
}

fn apply_pool(s: &Shared, tx: &mut rewind::Tx<'_>, op: &Op) -> Result<String, Error> {
    let (l, b) = (s.list, s.blob);
    Ok(match op {
        Op::PushBack(v) => format!("{:?}", l.push_back(tx, *v)?),
        Op::PushFront(v) => format!("{:?}", l.push_front(tx, *v)?),
        Op::PopFront => format!("{:?}", l.pop_front(tx)?),
        Op::PopBack => format!("{:?}", l.pop_back(tx)?),
        Op::RemoveIndex(i) => match l.remove(tx, *i) {
            Ok(v) => format!("{v}"),
            Err(Error::IndexOutOfBounds { index, len, .. }) => format!("oob {index} {len}"),
            Err(e) => return Err(e),
        },
        Op::RemoveCursor(i) => match l.cursor_tx(tx, *i)? {
            Some(c) => format!("{}", l.remove_at(tx, c)?),
            None => "none".into(),
        },
        Op::Append(vs) => {
            let bytes: std::vec::Vec<u8> = vs.iter().flat_map(|v| record(*v)).collect();
            b.append(tx, &bytes)?;
            "()".into()
        }
        Op::WriteAt(i, v) => {
            // A record in two halves: a reader that saw one would fail.
            let r = record(*v);
            match b.write_at(tx, i * 16, &r[..8]) {
                Ok(()) => {
                    b.write_at(tx, i * 16 + 8, &r[8..])?;
                    "()".into()
                }
                Err(Error::IndexOutOfBounds { index, len, .. }) => format!("oob {index} {len}"),
                Err(e) => return Err(e),
            }
        }
        Op::Truncate(i) => {
            b.truncate(tx, i * 16)?;
            format!("{}", b.len_tx(tx)?)
        }
        Op::Shrink => {
            b.shrink_to_fit(tx)?;
            format!("{}", b.len_tx(tx)?)
        }
        Op::Replace(vs) => {
            let bytes: std::vec::Vec<u8> = vs.iter().flat_map(|v| record(*v)).collect();
            b.replace(tx, &bytes)?;
            "()".into()
        }
    })
}

fn apply_model(l: &mut VecDeque<u64>, b: &mut std::vec::Vec<u8>, op: &Op) -> String {
    match op {
        Op::PushBack(v) => {
            l.push_back(*v);
            "()".into()
        }
        Op::PushFront(v) => {
            l.push_front(*v);
            "()".into()
        }
        Op::PopFront => format!("{:?}", l.pop_front()),
        Op::PopBack => format!("{:?}", l.pop_back()),
        Op::RemoveIndex(i) => match l.remove(*i as usize) {
            Some(v) => format!("{v}"),
            None => format!("oob {i} {}", l.len()),
        },
        Op::RemoveCursor(i) => match l.remove(*i as usize) {
            Some(v) => format!("{v}"),
            None => "none".into(),
        },
        Op::Append(vs) => {
            b.extend(vs.iter().flat_map(|v| record(*v)));
            "()".into()
        }
        Op::WriteAt(i, v) => {
            let at = (*i * 16) as usize;
            if at + 8 <= b.len() {
                b[at..at + 16].copy_from_slice(&record(*v));
                "()".into()
            } else {
                format!("oob {} {}", at + 8, b.len())
            }
        }
        Op::Truncate(i) => {
            b.truncate((*i * 16) as usize);
            format!("{}", b.len())
        }
        Op::Shrink => format!("{}", b.len()),
        Op::Replace(vs) => {
            *b = vs.iter().flat_map(|v| record(*v)).collect();
            "()".into()
        }
    }
}

fn retryable(e: &Error) -> bool {
    matches!(
        e,
        Error::Pool(rewind::Error::Deadlock { .. } | rewind::Error::LockTimeout { .. })
    )
}

/// One writer: `txs` transactions of one to four operations, some
/// returning an error or panicking after their changes; deadlocks
/// retried. Returns the committed ones.
fn writer(pool: &Pool, s: Shared, seed: u64, t: u64, txs: u64) -> std::vec::Vec<Done> {
    let mut rng = SmallRng::seed_from_u64(seed ^ (t * 0x9e37_79b9));
    let mut n = 0;
    let mut done = std::vec::Vec::new();
    for _ in 0..txs {
        let ops: std::vec::Vec<Op> = (0..rng.gen_range(1..=4))
            .map(|_| gen(&mut rng, t, &mut n))
            .collect();
        let ending = rng.gen_range(0..10);
        loop {
            let mut results = std::vec::Vec::new();
            let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
                pool.transaction(|tx| {
                    results.clear();
                    for op in &ops {
                        let got = apply_pool(&s, tx, op)?;
                        results.push((op.clone(), got));
                    }
                    match ending {
                        0 => return Err(common::aborted()),
                        1 => panic!("a writer's panic"),
                        _ => {}
                    }
                    tx.lock(s.seq)?;
                    let q = tx.read(s.seq)?;
                    tx.write(s.seq, &(q + 1))?;
                    Ok::<_, Error>(q)
                })
            }));
            match r {
                Err(_) => break, // the panic: rolled back
                Ok(Ok(seq)) => {
                    done.push(Done { seq, ops: results });
                    break;
                }
                Ok(Err(e)) if retryable(&e) => continue,
                Ok(Err(Error::Pool(rewind::Error::Aborted))) => break,
                Ok(Err(e)) => panic!("writer {t}: {e:?} in {ops:?}"),
            }
        }
    }
    done
}

fn run_shared_list_and_blob(cfg: &PoolConfig, seed: u64) {
    let what = common::name(cfg);
    let pool = Pool::create_sim("lb", 16 << 20, cfg).unwrap();
    let s = pool
        .transaction(|tx| {
            let list = List::<u64>::create(tx)?;
            let blob = Blob::create(tx)?;
            let seq = tx.root::<u64>()?;
            Ok::<_, Error>(Shared { list, blob, seq })
        })
        .unwrap();
    let stop = AtomicBool::new(false);
    const THREADS: u64 = 6;
    let (logs, reads) = std::thread::scope(|sc| {
        let reader = sc.spawn(|| {
            let mut reads = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let b = s.blob.read(&pool).unwrap();
                assert!(records_whole(&b), "{what}: a torn blob of {}", b.len());
                let len = s.list.len(&pool).unwrap();
                if let Some(c) = s.list.cursor(&pool, len / 2).unwrap() {
                    // The cursor's element may be gone by now: a value or
                    // InvalidCursor, nothing else.
                    match s.list.value(&pool, c) {
                        Ok(_) | Err(Error::InvalidCursor { .. }) => {}
                        Err(e) => panic!("{what}: {e:?}"),
                    }
                }
                reads += 1;
            }
            reads
        });
        let handles: std::vec::Vec<_> = (0..THREADS)
            .map(|t| {
                let pool = &pool;
                sc.spawn(move || writer(pool, s, seed, t, 250))
            })
            .collect();
        let logs: std::vec::Vec<_> = handles
            .into_iter()
            .map(|h| h.join())
            .collect::<std::vec::Vec<_>>();
        stop.store(true, Ordering::Relaxed);
        let reads = reader.join();
        (logs, reads)
    });
    reads.expect("the reader");
    let mut all: std::vec::Vec<Done> = logs
        .into_iter()
        .flat_map(|l| l.expect("a writer panicked beyond its planned panic"))
        .collect();
    all.sort_by_key(|d| d.seq);
    assert!(
        all.iter().enumerate().all(|(i, d)| d.seq == i as u64),
        "{what}: sequence numbers 0..n"
    );
    let (mut l, mut b) = (VecDeque::new(), std::vec::Vec::new());
    for d in &all {
        for (op, got) in &d.ops {
            let want = apply_model(&mut l, &mut b, op);
            assert_eq!(got, &want, "{what}: seq {} {op:?}", d.seq);
        }
    }
    let got: std::vec::Vec<u64> = s.list.iter(&pool).unwrap().map(|e| e.unwrap()).collect();
    assert_eq!(
        got,
        l.iter().copied().collect::<std::vec::Vec<_>>(),
        "{what}"
    );
    assert_eq!(s.blob.read(&pool).unwrap(), b, "{what}");
    s.list.check_invariants(&pool).unwrap();
    // Every allocated block is the root's, the list's or the blob's.
    let mut mine = s.list.blocks(&pool).unwrap();
    mine.extend(s.blob.blocks(&pool).unwrap());
    mine.push(s.seq.offset());
    mine.sort_unstable();
    let mut alloc = common::allocated(&pool);
    alloc.sort_unstable();
    assert_eq!(alloc, mine, "{what}: allocated blocks");
}

/// Six threads share a list and a blob with no lock of their own: pushes,
/// pops, removals at an index and at a cursor, appends, writes of a record
/// in two halves, truncations, shrinks and replacements, some transactions
/// rolled back or panicking, deadlocks retried. The committed ones,
/// replayed in the order of a sequence word each locks last, give every
/// answer and the contents; a reader through `&Pool` never sees a torn
/// record; no block leaks.
#[test]
fn threads_sharing_a_list_and_a_blob_are_serializable() {
    for (i, cfg) in common::configs().iter().enumerate() {
        run_shared_list_and_blob(cfg, 7 + i as u64);
    }
}

/// Closures the collections call (`update`, `retain`) that panic: the
/// transaction rolls back whole, the map is as it was, the pool goes on.
#[test]
fn a_panic_inside_update_or_retain_rolls_the_transaction_back() {
    for cfg in [
        PoolConfig::default(),
        PoolConfig::default().policy(Policy::Force),
        PoolConfig::default().policy(Policy::NoForce),
    ] {
        let what = common::name(&cfg);
        let pool = Pool::create_sim("panic", 8 << 20, &cfg).unwrap();
        let (m, h) = pool
            .transaction(|tx| {
                let m = BTreeMap::<String, u64>::create_with_fanout(tx, 4)?;
                let h = HashMap::<u64, u64>::create(tx)?;
                for k in 0..200u64 {
                    m.insert(tx, format!("key-{k:04}-{}", "x".repeat(40)), k)?;
                    h.insert(tx, k, k)?;
                }
                Ok::<_, Error>((m, h))
            })
            .unwrap();
        let before: std::vec::Vec<_> = m.iter(&pool).unwrap().map(|e| e.unwrap()).collect();
        let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
            pool.transaction(|tx| {
                h.insert(tx, 1000, 1)?;
                let mut n = 0;
                m.retain(tx, |_, _| {
                    n += 1;
                    if n == 150 {
                        panic!("in retain");
                    }
                    n % 3 == 0
                })?;
                Ok::<_, Error>(())
            })
        }));
        assert!(r.is_err(), "{what}");
        let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
            pool.transaction(|tx| {
                m.remove(tx, &before[0].0)?;
                m.update(tx, &before[5].0, |v| {
                    *v = 99;
                    panic!("in update")
                })?;
                Ok::<_, Error>(())
            })
        }));
        assert!(r.is_err(), "{what}");
        let after: std::vec::Vec<_> = m.iter(&pool).unwrap().map(|e| e.unwrap()).collect();
        assert_eq!(after, before, "{what}");
        assert_eq!(h.get(&pool, &1000).unwrap(), None, "{what}");
        assert_eq!(h.len(&pool).unwrap(), 200, "{what}");
        m.check_invariants(&pool).unwrap();
        h.check_invariants(&pool).unwrap();
        let mut mine = m.blocks(&pool).unwrap();
        mine.extend(h.blocks(&pool).unwrap());
        mine.sort_unstable();
        let mut alloc = common::allocated(&pool);
        alloc.sort_unstable();
        assert_eq!(alloc, mine, "{what}: allocated blocks");
        // And the pool goes on.
        pool.transaction(|tx| m.update(tx, &before[5].0, |v| *v = 7))
            .unwrap();
        assert_eq!(m.get(&pool, &before[5].0).unwrap(), Some(7));
    }
}

/// A cursor kept after its element was removed, its block since reused by
/// another collection's bytes (here a blob's, words that lead outside the
/// heap, into the header, or nowhere): `value` and `remove_at` are
/// `InvalidCursor`, as the cursor's documentation says, not a pool error
/// about an offset the program never gave (it was `NotInHeap`, met by a
/// reader beside writers of a list and a blob).
#[test]
fn a_stale_cursor_whose_block_was_reused_is_invalid() {
    for fill in [0xabu8, 0x00, 0x01, 0x40] {
        for cfg in [
            PoolConfig::default(),
            PoolConfig::default().policy(Policy::Force),
        ] {
            let what = format!("{} fill {fill:#x}", common::name(&cfg));
            let pool = Pool::create_sim("stale", 8 << 20, &cfg).unwrap();
            let list = pool
                .transaction(|tx| {
                    let l = List::<u64>::create(tx)?;
                    for v in 0..4 {
                        l.push_back(tx, v)?;
                    }
                    Ok::<_, Error>(l)
                })
                .unwrap();
            let c = list.cursor(&pool, 1).unwrap().unwrap();
            assert_eq!(list.value(&pool, c).unwrap(), 1);
            pool.transaction(|tx| list.remove(tx, 1)).unwrap();
            // Blobs of 64 bytes until one of them holds the node's block.
            let mut reused = false;
            for _ in 0..2000 {
                let b = pool
                    .transaction(|tx| Blob::create_from(tx, &[fill; 64]))
                    .unwrap();
                if b.blocks(&pool).unwrap().contains(&c.offset()) {
                    reused = true;
                    break;
                }
            }
            assert!(reused, "{what}: the node's block was never reused");
            let r = list.value(&pool, c);
            assert!(
                matches!(r, Err(Error::InvalidCursor { .. })),
                "{what}: {r:?}"
            );
            let r = pool.transaction(|tx| list.remove_at(tx, c));
            assert!(
                matches!(r, Err(Error::InvalidCursor { .. })),
                "{what}: {r:?}"
            );
            let all: std::vec::Vec<u64> = list.iter(&pool).unwrap().map(|e| e.unwrap()).collect();
            assert_eq!(all, [0, 2, 3], "{what}");
            list.check_invariants(&pool).unwrap();
        }
    }
}

/// `next` and `prev` of a cursor whose element was removed: its block
/// freed, or reused by another collection's bytes. They gave a cursor to
/// whatever offset the stale words held (or a pool error), which `value`
/// then refused; now `InvalidCursor` at once. A live cursor walks the
/// list both ways as before.
#[test]
fn next_and_prev_of_a_removed_element_are_invalid() {
    let pool = Pool::create_sim("stale", 8 << 20, &PoolConfig::default()).unwrap();
    let list = pool
        .transaction(|tx| {
            let l = List::<u64>::create(tx)?;
            for v in 0..6 {
                l.push_back(tx, v)?;
            }
            Ok::<_, Error>(l)
        })
        .unwrap();
    // A walk both ways.
    let mut c = list.cursor(&pool, 0).unwrap();
    let mut seen = std::vec::Vec::new();
    while let Some(at) = c {
        seen.push(list.value(&pool, at).unwrap());
        c = list.next(&pool, at).unwrap();
    }
    assert_eq!(seen, [0, 1, 2, 3, 4, 5]);
    let mut c = list.cursor(&pool, 5).unwrap();
    seen.clear();
    while let Some(at) = c {
        seen.push(list.value(&pool, at).unwrap());
        c = list.prev(&pool, at).unwrap();
    }
    assert_eq!(seen, [5, 4, 3, 2, 1, 0]);
    let c2 = list.cursor(&pool, 2).unwrap().unwrap();
    let c3 = list.cursor(&pool, 3).unwrap().unwrap();
    pool.transaction(|tx| list.remove(tx, 2)).unwrap();
    for r in [list.next(&pool, c2), list.prev(&pool, c2)] {
        assert!(matches!(r, Err(Error::InvalidCursor { .. })), "{r:?}");
    }
    // The neighbour's cursor skips the removed one.
    let p = list.prev(&pool, c3).unwrap().unwrap();
    assert_eq!(list.value(&pool, p).unwrap(), 1);
    // Its block reused by a blob of words that point into the list.
    let words: std::vec::Vec<u8> = [c3.offset(), c3.offset()]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .chain([0u8; 48])
        .collect();
    let mut reused = false;
    for _ in 0..2000 {
        let b = pool
            .transaction(|tx| Blob::create_from(tx, &words))
            .unwrap();
        if b.blocks(&pool).unwrap().contains(&c2.offset()) {
            reused = true;
            break;
        }
    }
    assert!(reused);
    for r in [list.next(&pool, c2), list.prev(&pool, c2)] {
        assert!(matches!(r, Err(Error::InvalidCursor { .. })), "{r:?}");
    }
}

fn is_full(e: &Error) -> bool {
    matches!(
        e,
        Error::Pool(rewind::Error::OutOfMemory { .. } | rewind::Error::LogFull { .. })
    )
}

/// Four threads fill a small pool at once, each its own B+-tree of long
/// values and all one hash map, until each has met the full pool many
/// times in a row (`OutOfMemory` or `LogFull`, the transaction rolled
/// back); then each empties part of its tree and fills again. Every
/// committed insert is there, no refused one is, the trees and the map
/// hold their invariants, and the pool's blocks are exactly theirs.
#[test]
fn threads_filling_a_pool_at_once_keep_exactly_their_commits() {
    for cfg in common::configs() {
        let what = common::name(&cfg);
        let pool = Pool::create_sim("full", 4 << 20, &cfg).unwrap();
        const T: u64 = 4;
        let (maps, shared) = pool
            .transaction(|tx| {
                let maps: std::vec::Vec<BTreeMap<u64, std::vec::Vec<u8>>> = (0..T)
                    .map(|_| BTreeMap::create_with_fanout(tx, 8))
                    .collect::<Result<_, _>>()?;
                Ok::<_, Error>((maps, HashMap::<u64, u64>::create(tx)?))
            })
            .unwrap();
        let fill = |t: u64, from: u64, models: &mut std::collections::BTreeMap<u64, usize>| {
            let m = maps[t as usize];
            let mut k = from;
            let mut refused = 0;
            while refused < 20 {
                let len = 100 + (k as usize * 37) % 900;
                let r = pool.transaction(|tx| {
                    m.insert(tx, k, vec![t as u8; len])?;
                    shared.insert(tx, (t << 40) | k, len as u64)?;
                    Ok::<_, Error>(())
                });
                match r {
                    Ok(()) => {
                        models.insert(k, len);
                        refused = 0;
                    }
                    Err(e) if is_full(&e) => refused += 1,
                    Err(e) if retryable(&e) => {}
                    Err(e) => panic!("{what} thread {t}: {e:?}"),
                }
                k += 1;
            }
            k
        };
        let models: std::vec::Vec<std::collections::BTreeMap<u64, usize>> =
            std::thread::scope(|sc| {
                let hs: std::vec::Vec<_> = (0..T)
                    .map(|t| {
                        let fill = &fill;
                        let pool = &pool;
                        let maps = &maps;
                        let what = &what;
                        sc.spawn(move || {
                            let mut model = std::collections::BTreeMap::new();
                            let next = fill(t, 0, &mut model);
                            // Half of it removed, a key at a time.
                            let m = maps[t as usize];
                            let gone: std::vec::Vec<u64> =
                                model.keys().copied().step_by(2).collect();
                            for k in gone {
                                let mut full = 0u64;
                                loop {
                                    let r = pool.transaction(|tx| {
                                        m.remove(tx, &k)?;
                                        shared.remove(tx, &((t << 40) | k))?;
                                        Ok::<_, Error>(())
                                    });
                                    match r {
                                        Ok(()) => break,
                                        Err(e) if retryable(&e) => {}
                                        // Beside inserters that keep the pool
                                        // full, a removal's log may find no
                                        // room for a moment (documented:
                                        // LogFull, rolled back); it must
                                        // pass once they are refused too.
                                        Err(e) if is_full(&e) && full < 100_000 => {
                                            full += 1;
                                            std::thread::yield_now();
                                        }
                                        Err(e) => panic!("{what} {t}: removing {k}: {e:?}"),
                                    }
                                }
                                model.remove(&k);
                            }
                            let before = model.len();
                            fill(t, next, &mut model);
                            let again = model.len() > before;
                            (model, again)
                        })
                    })
                    .collect();
                let done: std::vec::Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
                // (The space one thread freed may go to another's inserts.)
                assert!(
                    done.iter().any(|d| d.1),
                    "{what}: no insert after the removals"
                );
                done.into_iter().map(|d| d.0).collect()
            });
        let mut blocks = vec![];
        let mut shared_len = 0;
        for (t, model) in models.iter().enumerate() {
            let m = maps[t];
            m.check_invariants(&pool).unwrap();
            let got: std::vec::Vec<(u64, usize)> = m
                .iter(&pool)
                .unwrap()
                .map(|e| e.map(|(k, v)| (k, v.len())).unwrap())
                .collect();
            let want: std::vec::Vec<(u64, usize)> = model.iter().map(|(k, v)| (*k, *v)).collect();
            assert_eq!(got, want, "{what} thread {t}");
            for (k, len) in model {
                assert_eq!(
                    shared.get(&pool, &((t as u64) << 40 | k)).unwrap(),
                    Some(*len as u64),
                    "{what}"
                );
            }
            shared_len += model.len() as u64;
            blocks.extend(m.blocks(&pool).unwrap());
        }
        assert_eq!(shared.len(&pool).unwrap(), shared_len, "{what}");
        shared.check_invariants(&pool).unwrap();
        blocks.extend(shared.blocks(&pool).unwrap());
        blocks.sort_unstable();
        let mut alloc = common::allocated(&pool);
        alloc.sort_unstable();
        assert_eq!(alloc, blocks, "{what}: allocated blocks");
    }
}

/// Three hundred collections of five kinds under named roots, made in
/// several transactions (one rolled back), found again after a reopen by
/// name, each with its contents; looked up with the types of another kind
/// or other element types, each is `TypeMismatch`; a handle of one kind
/// made from another kind's pointer is `WrongMagic`.
#[test]
fn many_collections_as_named_roots_survive_a_reopen_typed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("roots.pool");
    const N: u64 = 300;
    let name = |i: u64| format!("coll/{i:04}/{}", "n".repeat((i % 38) as usize));
    {
        let pool = Pool::create(&path, "roots", 16 << 20, &PoolConfig::default()).unwrap();
        for chunk in 0..(N / 50) {
            let r = pool.transaction(|tx| {
                for i in chunk * 50..(chunk + 1) * 50 {
                    let n = name(i);
                    match i % 5 {
                        0 => {
                            let m = BTreeMap::<String, u64>::create(tx)?;
                            m.insert(tx, n.clone(), i)?;
                            let r = tx.root_named::<PPtr<BTreeMap<String, u64>>>(&n)?;
                            tx.write(r, &m.as_ptr())?;
                        }
                        1 => {
                            let m = HashMap::<u64, u64>::create(tx)?;
                            m.insert(tx, i, i)?;
                            let r = tx.root_named::<PPtr<HashMap<u64, u64>>>(&n)?;
                            tx.write(r, &m.as_ptr())?;
                        }
                        2 => {
                            let v = rewind_collections::Vec::<u64>::create(tx)?;
                            v.push(tx, i)?;
                            let r = tx.root_named::<PPtr<rewind_collections::Vec<u64>>>(&n)?;
                            tx.write(r, &v.as_ptr())?;
                        }
                        3 => {
                            let l = List::<u64>::create(tx)?;
                            l.push_back(tx, i)?;
                            let r = tx.root_named::<PPtr<List<u64>>>(&n)?;
                            tx.write(r, &l.as_ptr())?;
                        }
                        _ => {
                            let b = Blob::create_from(tx, &i.to_le_bytes())?;
                            let r = tx.root_named::<PPtr<Blob>>(&n)?;
                            tx.write(r, &b.as_ptr())?;
                        }
                    }
                }
                if chunk == 2 {
                    return Err(common::aborted());
                }
                Ok::<_, Error>(())
            });
            assert_eq!(r.is_ok(), chunk != 2, "{r:?}");
        }
        pool.close().unwrap();
    }
    let pool = Pool::open(&path, "roots", &rewind::OpenOptions::default()).unwrap();
    let mismatch = |r: Result<Option<PPtr<PPtr<List<u32>>>>, rewind::Error>| {
        assert!(
            matches!(r, Err(rewind::Error::TypeMismatch { .. })),
            "{r:?}"
        );
    };
    for i in 0..N {
        let n = name(i);
        let rolled_back = (100..150).contains(&i);
        if rolled_back {
            assert!(
                pool.root_named::<PPtr<Blob>>(&n)
                    .map(|r| r.is_none())
                    .unwrap_or(true),
                "{n}: rolled back"
            );
            continue;
        }
        mismatch(pool.root_named::<PPtr<List<u32>>>(&n));
        match i % 5 {
            0 => {
                let r = pool
                    .root_named::<PPtr<BTreeMap<String, u64>>>(&n)
                    .unwrap()
                    .unwrap();
                let m = BTreeMap::from_ptr(pool.read(r).unwrap());
                assert_eq!(m.get(&pool, n.as_str()).unwrap(), Some(i));
                let wrong = pool.root_named::<PPtr<BTreeMap<Vec<u8>, u64>>>(&n);
                assert!(
                    matches!(wrong, Err(rewind::Error::TypeMismatch { .. })),
                    "{wrong:?}"
                );
                // A hash map's handle on the tree's header.
                let h = HashMap::<u64, u64>::from_ptr(PPtr::from_offset(
                    pool.read(r).unwrap().offset(),
                ));
                let e = h.get(&pool, &1);
                assert!(matches!(e, Err(Error::WrongMagic { .. })), "{e:?}");
            }
            1 => {
                let r = pool
                    .root_named::<PPtr<HashMap<u64, u64>>>(&n)
                    .unwrap()
                    .unwrap();
                let m = HashMap::from_ptr(pool.read(r).unwrap());
                assert_eq!(m.get(&pool, &i).unwrap(), Some(i));
                let wrong = pool.root_named::<PPtr<HashMap<u64, i64>>>(&n);
                assert!(
                    matches!(wrong, Err(rewind::Error::TypeMismatch { .. })),
                    "{wrong:?}"
                );
            }
            2 => {
                let r = pool
                    .root_named::<PPtr<rewind_collections::Vec<u64>>>(&n)
                    .unwrap()
                    .unwrap();
                let v = rewind_collections::Vec::from_ptr(pool.read(r).unwrap());
                assert_eq!(v.to_vec(&pool).unwrap(), [i]);
                let wrong = pool.root_named::<PPtr<List<u64>>>(&n);
                assert!(
                    matches!(wrong, Err(rewind::Error::TypeMismatch { .. })),
                    "{wrong:?}"
                );
                let l = List::<u64>::from_ptr(PPtr::from_offset(pool.read(r).unwrap().offset()));
                let e = l.len(&pool);
                assert!(matches!(e, Err(Error::WrongMagic { .. })), "{e:?}");
            }
            3 => {
                let r = pool.root_named::<PPtr<List<u64>>>(&n).unwrap().unwrap();
                let l = List::from_ptr(pool.read(r).unwrap());
                assert_eq!(l.front(&pool).unwrap(), Some(i));
            }
            _ => {
                let r = pool.root_named::<PPtr<Blob>>(&n).unwrap().unwrap();
                let b = Blob::from_ptr(pool.read(r).unwrap());
                assert_eq!(b.read(&pool).unwrap(), i.to_le_bytes());
                let v = rewind_collections::Vec::<u8>::from_ptr(PPtr::from_offset(
                    pool.read(r).unwrap().offset(),
                ));
                let e = v.len(&pool);
                assert!(matches!(e, Err(Error::WrongMagic { .. })), "{e:?}");
            }
        }
    }
}

/// A blob of megabytes in an 8 MiB pool, under every configuration:
/// replaced, appended to, overwritten in one call of 1 MiB, rolled back to
/// a savepoint, truncated and shrunk; a change too large for the pool is a
/// typed error (`OutOfMemory` or `LogFull`) that rolls back, and the blob
/// is as it was and usable.
#[test]
fn a_blob_of_megabytes_in_a_small_pool() {
    for cfg in common::configs() {
        let what = common::name(&cfg);
        let pool = Pool::create_sim("big", 8 << 20, &cfg).unwrap();
        let b = pool.transaction(Blob::create).unwrap();
        let mut model: std::vec::Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
        pool.transaction(|tx| b.replace(tx, &model)).unwrap();
        let patch = vec![0x5a; 1 << 20];
        // A megabyte overwritten and one appended (a buffer of 4 MiB)
        // after a savepoint, rolled back to it: where the pool has room
        // for that, only the changes around it commit; where not, a typed
        // error and nothing.
        let r = pool.transaction(|tx| {
            b.append(tx, &patch[..1000])?;
            let sp = tx.savepoint()?;
            b.write_at(tx, 0, &patch)?;
            b.append(tx, &patch)?;
            tx.rollback_to(sp)?;
            b.write_at(tx, 1000, &patch[..5000])
        });
        match r {
            Ok(()) => {
                model.extend_from_slice(&patch[..1000]);
                model[1000..6000].copy_from_slice(&patch[..5000]);
            }
            Err(e) => assert!(is_full(&e), "{what}: {e:?}"),
        }
        assert_eq!(b.read(&pool).unwrap(), model, "{what}");
        pool.transaction(|tx| {
            let sp = tx.savepoint()?;
            b.append(tx, &patch[..3000])?;
            tx.rollback_to(sp)?;
            b.append(tx, &patch[..1000])?;
            b.write_at(tx, 1000, &patch[..5000])
        })
        .unwrap();
        model.extend_from_slice(&patch[..1000]);
        model[1000..6000].copy_from_slice(&patch[..5000]);
        assert_eq!(b.read(&pool).unwrap(), model, "{what}");
        // Too large: four copies of the pool's size.
        let r = pool.transaction(|tx| b.append(tx, &vec![1u8; 32 << 20]));
        assert!(r.as_ref().is_err_and(is_full), "{what}: {r:?}");
        // A megabyte overwritten in one call: logged whole, or too large
        // for the log; either way whole or not at all.
        match pool.transaction(|tx| b.write_at(tx, 0, &patch)) {
            Ok(()) => model[..1 << 20].copy_from_slice(&patch),
            Err(e) => assert!(is_full(&e), "{what}: {e:?}"),
        }
        assert_eq!(b.read(&pool).unwrap(), model, "{what}");
        let mut buf = vec![0u8; 1000];
        b.read_at(&pool, (1 << 20) - 100, &mut buf).unwrap();
        assert_eq!(buf[..], model[(1 << 20) - 100..(1 << 20) + 900], "{what}");
        let r = b.read_at(&pool, model.len() as u64 - 10, &mut buf);
        assert!(matches!(r, Err(Error::IndexOutOfBounds { .. })), "{what}");
        pool.transaction(|tx| {
            b.truncate(tx, 10)?;
            b.shrink_to_fit(tx)
        })
        .unwrap();
        model.truncate(10);
        assert_eq!(b.read(&pool).unwrap(), model, "{what}");
        assert_eq!(b.capacity(&pool).unwrap(), 16, "{what}");
        let mut alloc = common::allocated(&pool);
        alloc.sort_unstable();
        assert_eq!(alloc, b.blocks(&pool).unwrap(), "{what}");
        // The space serves a new megabyte.
        pool.transaction(|tx| b.append(tx, &patch)).unwrap();
        assert_eq!(b.len(&pool).unwrap(), 10 + (1 << 20), "{what}");
    }
}

/// Two threads call `open_or_create` on one new path at once, many times:
/// one creates the pool, the other opens it or is refused as in use; never
/// another error, never two pools.
#[test]
fn two_threads_open_or_create_one_path_at_once() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..40 {
        let path = dir.path().join(format!("race-{round}.pool"));
        let barrier = std::sync::Barrier::new(2);
        let results: std::vec::Vec<Result<(bool, u64), rewind::Error>> = std::thread::scope(|sc| {
            let hs: std::vec::Vec<_> = (0..2u64)
                .map(|t| {
                    let (path, barrier) = (&path, &barrier);
                    sc.spawn(move || {
                        barrier.wait();
                        let pool =
                            Pool::open_or_create(path, "race", 4 << 20, &PoolConfig::default())?;
                        let created = pool.created();
                        let m = pool
                            .transaction(|tx| {
                                let r = tx.root_named::<PPtr<HashMap<u64, u64>>>("m")?;
                                let mut p = tx.read(r)?;
                                if p.is_null() {
                                    p = HashMap::<u64, u64>::create(tx)?.as_ptr();
                                    tx.write(r, &p)?;
                                }
                                let m = HashMap::from_ptr(p);
                                m.insert(tx, t, t)?;
                                Ok::<_, Error>(m)
                            })
                            .map_err(|e| match e {
                                Error::Pool(e) => e,
                                e => panic!("{e:?}"),
                            })?;
                        let n = m.len(&pool).map_err(|e| panic!("{e:?}")).unwrap();
                        pool.close()?;
                        Ok((created, n))
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let created = results
            .iter()
            .filter(|r| matches!(r, Ok((true, _))))
            .count();
        assert_eq!(created, 1, "round {round}: {results:?}");
        for r in &results {
            match r {
                Ok(_) | Err(rewind::Error::PoolInUse { .. }) => {}
                Err(e) => panic!("round {round}: {e:?} ({results:?})"),
            }
        }
        let pool = Pool::open(&path, "race", &rewind::OpenOptions::default()).unwrap();
        let r = pool
            .root_named::<PPtr<HashMap<u64, u64>>>("m")
            .unwrap()
            .unwrap();
        let m = HashMap::<u64, u64>::from_ptr(pool.read(r).unwrap());
        let ok = results.iter().filter(|r| r.is_ok()).count() as u64;
        assert_eq!(m.len(&pool).unwrap(), ok, "round {round}");
    }
}

/// A handle used after `destroy` in the same transaction (each kind of
/// collection, each operation kind): a typed error, never a panic or a
/// change; the transaction then commits the destroy alone, or rolls it
/// back, and the pool's blocks are exactly what remains.
#[test]
fn a_collection_used_after_destroy_in_its_transaction_is_an_error() {
    for cfg in [
        PoolConfig::default(),
        PoolConfig::default().policy(Policy::Force),
        PoolConfig::default().policy(Policy::NoForce),
    ] {
        let what = common::name(&cfg);
        let pool = Pool::create_sim("destroyed", 8 << 20, &cfg).unwrap();
        for commit in [false, true] {
            let (m, h, v, l, b) = pool
                .transaction(|tx| {
                    let m = BTreeMap::<String, u64>::create_with_fanout(tx, 4)?;
                    let h = HashMap::<u64, u64>::create(tx)?;
                    let v = rewind_collections::Vec::<u64>::create(tx)?;
                    let l = List::<u64>::create(tx)?;
                    let b = Blob::create_from(tx, &[1; 100])?;
                    for k in 0..50u64 {
                        m.insert(tx, format!("{k:040}"), k)?;
                        h.insert(tx, k, k)?;
                        v.push(tx, k)?;
                        l.push_back(tx, k)?;
                    }
                    Ok::<_, Error>((m, h, v, l, b))
                })
                .unwrap();
            let before = common::allocated(&pool);
            let r = pool.transaction(|tx| {
                m.destroy(tx)?;
                h.destroy(tx)?;
                v.destroy(tx)?;
                l.destroy(tx)?;
                b.destroy(tx)?;
                let errs = [
                    m.insert(tx, "a".into(), 1).map(|_| ()),
                    m.get_tx(tx, "a").map(|_| ()),
                    m.iter_tx(tx).map(|_| ()),
                    m.clear(tx),
                    m.destroy(tx),
                    h.insert(tx, 1, 1).map(|_| ()),
                    h.remove(tx, &1).map(|_| ()),
                    h.iter_tx(tx).map(|_| ()),
                    h.destroy(tx),
                    v.push(tx, 1),
                    v.pop(tx).map(|_| ()),
                    v.destroy(tx),
                    l.push_front(tx, 1),
                    l.pop_back(tx).map(|_| ()),
                    l.destroy(tx),
                    b.append(tx, &[1]),
                    b.read_tx(tx).map(|_| ()),
                    b.destroy(tx),
                ];
                for (i, e) in errs.into_iter().enumerate() {
                    assert!(
                        matches!(
                            e,
                            Err(Error::Pool(
                                rewind::Error::NotAllocated { .. }
                                    | rewind::Error::InvalidFree { .. }
                            ))
                        ),
                        "{what}: call {i}: {e:?}"
                    );
                }
                if commit {
                    Ok(())
                } else {
                    Err(common::aborted())
                }
            });
            assert_eq!(r.is_ok(), commit, "{what}: {r:?}");
            let after = common::allocated(&pool);
            if commit {
                assert!(after.len() < before.len(), "{what}");
                let mine: std::collections::BTreeSet<u64> = [
                    m.blocks(&pool).ok(),
                    h.blocks(&pool).ok(),
                    v.blocks(&pool).ok(),
                    l.blocks(&pool).ok(),
                    b.blocks(&pool).ok(),
                ]
                .into_iter()
                .flatten()
                .flatten()
                .collect();
                assert!(
                    mine.is_empty(),
                    "{what}: a destroyed collection still reads"
                );
            } else {
                assert_eq!(after, before, "{what}");
                m.check_invariants(&pool).unwrap();
                assert_eq!(m.len(&pool).unwrap(), 50);
                assert_eq!(l.len(&pool).unwrap(), 50);
                assert_eq!(b.len(&pool).unwrap(), 100);
                pool.transaction(|tx| {
                    m.destroy(tx)?;
                    h.destroy(tx)?;
                    v.destroy(tx)?;
                    l.destroy(tx)?;
                    b.destroy(tx)
                })
                .unwrap();
            }
            assert!(common::allocated(&pool).is_empty(), "{what}: leaked");
        }
    }
}

/// One transaction that inserts until the pool or its log is full (tens
/// of thousands of entries in a 4 MiB pool, through splits that run as
/// nested top actions under the undo policies), under every
/// configuration: the typed error rolls it back whole; the maps are as
/// they were, their invariants hold, the pool's blocks are exactly theirs
/// (splits an abort keeps under undo included), and a smaller
/// transaction then commits.
#[test]
fn one_transaction_too_large_for_the_pool_rolls_back_whole() {
    for cfg in common::configs() {
        let what = common::name(&cfg);
        let pool = Pool::create_sim("huge", 4 << 20, &cfg).unwrap();
        let (m, s, h) = pool
            .transaction(|tx| {
                let m = BTreeMap::<u64, u64>::create_with_fanout(tx, 8)?;
                let s = BTreeMap::<String, String>::create_with_fanout(tx, 6)?;
                let h = HashMap::<u64, u64>::create(tx)?;
                Ok::<_, Error>((m, s, h))
            })
            .unwrap();
        for part in 0..4u64 {
            pool.transaction(|tx| {
                for k in part * 50..(part + 1) * 50 {
                    m.insert(tx, k * 1000, k)?;
                    s.insert(tx, format!("{k:060}"), "v".repeat(50))?;
                    h.insert(tx, k, k)?;
                }
                Ok::<_, Error>(())
            })
            .unwrap_or_else(|e| panic!("{what}: {e:?}"));
        }
        let snap = |pool: &Pool| {
            (
                m.iter(pool)
                    .unwrap()
                    .map(|e| e.unwrap())
                    .collect::<std::vec::Vec<_>>(),
                s.iter(pool)
                    .unwrap()
                    .map(|e| e.unwrap())
                    .collect::<std::vec::Vec<_>>(),
                h.entries(pool).unwrap().len(),
            )
        };
        let before = snap(&pool);
        let r = pool.transaction(|tx| {
            for k in 0..1_000_000u64 {
                m.insert(tx, k * 1000 + 1 + k % 999, k)?;
                if k % 3 == 0 {
                    s.insert(
                        tx,
                        format!("{k:050}-{}", "x".repeat((k % 40) as usize)),
                        "w".repeat(45),
                    )?;
                }
                if k % 5 == 0 {
                    h.insert(tx, 1_000_000 + k, k)?;
                }
                if k % 7 == 0 {
                    m.remove(tx, &((k % 200) * 1000))?;
                }
            }
            Ok::<_, Error>(())
        });
        let e = r.expect_err("a million entries do not fit 4 MiB");
        assert!(is_full(&e), "{what}: {e:?}");
        assert_eq!(snap(&pool), before, "{what}");
        m.check_invariants(&pool).unwrap();
        s.check_invariants(&pool).unwrap();
        h.check_invariants(&pool).unwrap();
        let mut mine = m.blocks(&pool).unwrap();
        mine.extend(s.blocks(&pool).unwrap());
        mine.extend(h.blocks(&pool).unwrap());
        mine.sort_unstable();
        let mut alloc = common::allocated(&pool);
        alloc.sort_unstable();
        assert_eq!(alloc, mine, "{what}: allocated blocks");
        pool.transaction(|tx| {
            for k in 0..100u64 {
                m.insert(tx, k * 1000 + 7, k)?;
                s.insert(tx, format!("new-{k}"), String::new())?;
                h.insert(tx, 5_000_000 + k, k)?;
            }
            Ok::<_, Error>(())
        })
        .unwrap_or_else(|e| panic!("{what}: after the rollback: {e:?}"));
        assert_eq!(m.len(&pool).unwrap(), 300, "{what}");
        m.check_invariants(&pool).unwrap();
        s.check_invariants(&pool).unwrap();
    }
}

/// Seeded programs of savepoints and partial rollbacks over every kind of
/// collection at once (a hash map doubling its table, a vector and a blob
/// moving their buffers, a list, a string tree splitting and merging),
/// under every configuration: after each transaction every collection
/// equals a model that dropped what was rolled back to, their invariants
/// hold, and the pool's blocks are exactly theirs (no buffer, table, node
/// or string block of a rolled-back part leaked or freed twice).
#[test]
fn savepoints_over_every_collection_leak_nothing() {
    use std::collections::{BTreeMap as StdMap, HashMap as StdHash};
    type Models = (
        StdHash<u64, u64>,
        std::vec::Vec<u64>,
        std::vec::Vec<u8>,
        VecDeque<u64>,
        StdMap<String, String>,
    );
    for (ci, cfg) in common::configs().into_iter().enumerate() {
        let what = common::name(&cfg);
        let pool = Pool::create_sim("sp", 16 << 20, &cfg).unwrap();
        let (h, v, b, l, s) = pool
            .transaction(|tx| {
                Ok::<_, Error>((
                    HashMap::<u64, u64>::create(tx)?,
                    rewind_collections::Vec::<u64>::create(tx)?,
                    Blob::create(tx)?,
                    List::<u64>::create(tx)?,
                    BTreeMap::<String, String>::create_with_fanout(tx, 4)?,
                ))
            })
            .unwrap();
        let mut rng = SmallRng::seed_from_u64(0x5eed + ci as u64);
        let mut model: Models = Default::default();
        let mut next = 0u64;
        for round in 0..60 {
            let mut m = model.clone();
            let r = pool.transaction(|tx| {
                m = model.clone();
                let mut stack: std::vec::Vec<(rewind::Savepoint, Models)> = vec![];
                for _ in 0..rng.gen_range(20..120) {
                    match rng.gen_range(0..16) {
                        0 => stack.push((tx.savepoint()?, m.clone())),
                        1 if !stack.is_empty() => {
                            // Back to any of them: the newer ones go too.
                            let d = rng.gen_range(0..stack.len());
                            stack.truncate(d + 1);
                            let (sp, old) = stack.pop().unwrap();
                            tx.rollback_to(sp)?;
                            m = old;
                        }
                        2 | 3 => {
                            next += 1;
                            h.insert(tx, next, next)?;
                            m.0.insert(next, next);
                        }
                        4 => {
                            let k = rng.gen_range(0..=next);
                            assert_eq!(h.remove(tx, &k)?, m.0.remove(&k));
                        }
                        5 | 6 => {
                            next += 1;
                            v.push(tx, next)?;
                            m.1.push(next);
                        }
                        7 => assert_eq!(v.pop(tx)?, m.1.pop()),
                        8 => {
                            let n = rng.gen_range(0..300);
                            let bytes = vec![(next % 251) as u8; n];
                            b.append(tx, &bytes)?;
                            m.2.extend_from_slice(&bytes);
                        }
                        9 => {
                            let n = rng.gen_range(0..=m.2.len() as u64);
                            b.truncate(tx, n)?;
                            m.2.truncate(n as usize);
                            if rng.gen_bool(0.5) {
                                b.shrink_to_fit(tx)?;
                            }
                        }
                        10 => {
                            next += 1;
                            l.push_back(tx, next)?;
                            m.3.push_back(next);
                        }
                        11 => assert_eq!(l.pop_front(tx)?, m.3.pop_front()),
                        12 | 13 => {
                            next += 1;
                            let k = format!("{:040}", next % 97 * 1_000_003);
                            let val = "v".repeat((next % 70) as usize);
                            assert_eq!(s.insert(tx, k.clone(), val.clone())?, m.4.insert(k, val));
                        }
                        14 => {
                            let k = format!("{:040}", rng.gen_range(0..97u64) * 1_000_003);
                            assert_eq!(s.remove(tx, &k)?, m.4.remove(&k));
                        }
                        _ => {
                            let n = rng.gen_range(0..300);
                            let bytes = vec![7u8; n];
                            b.replace(tx, &bytes)?;
                            m.2 = bytes;
                        }
                    }
                }
                // The transaction's own view, through its scans.
                let mut own: std::vec::Vec<(u64, u64)> =
                    h.iter_tx(tx)?.collect::<Result<_, _>>()?;
                own.sort_unstable();
                let mut want: std::vec::Vec<(u64, u64)> =
                    m.0.iter().map(|(k, v)| (*k, *v)).collect();
                want.sort_unstable();
                assert_eq!(own, want);
                assert_eq!(h.len_tx(tx)?, m.0.len() as u64);
                let own: std::vec::Vec<u64> = l.iter_tx(tx)?.rev().collect::<Result<_, _>>()?;
                assert_eq!(own, m.3.iter().rev().copied().collect::<std::vec::Vec<_>>());
                let own: std::vec::Vec<(String, String)> =
                    s.iter_tx(tx)?.rev().collect::<Result<_, _>>()?;
                assert_eq!(
                    own,
                    m.4.clone().into_iter().rev().collect::<std::vec::Vec<_>>()
                );
                assert_eq!(b.read_tx(tx)?, m.2);
                for i in [0, m.1.len() / 2, m.1.len().saturating_sub(1)] {
                    assert_eq!(v.get_tx(tx, i as u64)?, m.1.get(i).copied());
                }
                if round % 7 == 3 {
                    return Err(common::aborted());
                }
                Ok(())
            });
            match r {
                Ok(()) => model = m,
                Err(Error::Pool(rewind::Error::Aborted)) => {}
                Err(e) => panic!("{what} round {round}: {e:?}"),
            }
            let mut got_h = h.entries(&pool).unwrap();
            got_h.sort_unstable();
            let mut want_h: std::vec::Vec<_> = model.0.iter().map(|(k, v)| (*k, *v)).collect();
            want_h.sort_unstable();
            assert_eq!(got_h, want_h, "{what} round {round}");
            assert_eq!(v.to_vec(&pool).unwrap(), model.1, "{what} round {round}");
            assert_eq!(b.read(&pool).unwrap(), model.2, "{what} round {round}");
            let got_l: std::vec::Vec<u64> = l.iter(&pool).unwrap().map(|e| e.unwrap()).collect();
            assert_eq!(
                got_l,
                model.3.iter().copied().collect::<std::vec::Vec<_>>(),
                "{what}"
            );
            let got_s: std::vec::Vec<(String, String)> =
                s.iter(&pool).unwrap().map(|e| e.unwrap()).collect();
            assert_eq!(
                got_s,
                model.4.clone().into_iter().collect::<std::vec::Vec<_>>(),
                "{what}"
            );
            h.check_invariants(&pool).unwrap();
            l.check_invariants(&pool).unwrap();
            s.check_invariants(&pool).unwrap();
            let mut mine = h.blocks(&pool).unwrap();
            mine.extend(v.blocks(&pool).unwrap());
            mine.extend(b.blocks(&pool).unwrap());
            mine.extend(l.blocks(&pool).unwrap());
            mine.extend(s.blocks(&pool).unwrap());
            mine.sort_unstable();
            let mut alloc = common::allocated(&pool);
            alloc.sort_unstable();
            assert_eq!(alloc, mine, "{what} round {round}: allocated blocks");
        }
    }
}

/// A file pool created at 4 MiB that may grow to 128 MiB: four threads
/// insert long values into trees and a shared hash map until the heap has
/// grown several times by itself, while a reader scans and looks up
/// through `&Pool`; every commit is there after a reopen, with the
/// invariants, under redo, force and no-force.
#[test]
fn collections_grow_their_pool_beside_readers() {
    let dir = tempfile::tempdir().unwrap();
    for (ci, cfg) in [
        PoolConfig::default(),
        PoolConfig::default().policy(Policy::Force),
        PoolConfig::default().policy(Policy::NoForce),
    ]
    .into_iter()
    .enumerate()
    {
        let what = common::name(&cfg);
        let path = dir.path().join(format!("grow-{ci}.pool"));
        let cfg = cfg.max_size(128 << 20);
        let pool = Pool::create(&path, "grow", 4 << 20, &cfg).unwrap();
        let start = pool.size();
        const T: u64 = 4;
        const PER: u64 = 200;
        let (maps, shared) = pool
            .transaction(|tx| {
                let maps: std::vec::Vec<BTreeMap<u64, std::vec::Vec<u8>>> = (0..T)
                    .map(|_| BTreeMap::create_with_fanout(tx, 8))
                    .collect::<Result<_, _>>()?;
                let shared = HashMap::<u64, u64>::create(tx)?;
                let r = tx.root_named::<[u64; T as usize + 1]>("colls")?;
                let mut w = [0u64; T as usize + 1];
                for (i, m) in maps.iter().enumerate() {
                    w[i] = m.as_ptr().offset();
                }
                w[T as usize] = shared.as_ptr().offset();
                tx.write(r, &w)?;
                Ok::<_, Error>((maps, shared))
            })
            .unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|sc| {
            let reader = sc.spawn(|| {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for m in &maps {
                        for e in m.iter(&pool).unwrap() {
                            match e {
                                Ok((k, v)) => assert_eq!(v.len() as u64, 20_000 + k % 7, "{what}"),
                                Err(Error::Changed { .. }) => break,
                                Err(e) => panic!("{what}: {e:?}"),
                            }
                        }
                        let _ = m.get(&pool, &(n % PER)).unwrap();
                    }
                    let _ = shared.len(&pool).unwrap();
                    n += 1;
                }
            });
            let writers: std::vec::Vec<_> = (0..T)
                .map(|t| {
                    let (pool, m) = (&pool, maps[t as usize]);
                    sc.spawn(move || {
                        for k in 0..PER {
                            loop {
                                let r = pool.transaction(|tx| {
                                    m.insert(tx, k, vec![t as u8; (20_000 + k % 7) as usize])?;
                                    shared.insert(tx, t << 32 | k, k)?;
                                    Ok::<_, Error>(())
                                });
                                match r {
                                    Ok(()) => break,
                                    Err(e) if retryable(&e) => {}
                                    Err(e) => panic!("writer {t}: {e:?}"),
                                }
                            }
                        }
                    })
                })
                .collect();
            for w in writers {
                w.join().unwrap();
            }
            stop.store(true, Ordering::Relaxed);
            reader.join().unwrap();
        });
        assert!(pool.size() > 3 * start, "{what}: grew to {}", pool.size());
        pool.close().unwrap();
        let pool = Pool::open(&path, "grow", &rewind::OpenOptions::default()).unwrap();
        let r = pool
            .root_named::<[u64; T as usize + 1]>("colls")
            .unwrap()
            .unwrap();
        let w = pool.read(r).unwrap();
        let shared = HashMap::<u64, u64>::from_ptr(PPtr::from_offset(w[T as usize]));
        assert_eq!(shared.len(&pool).unwrap(), T * PER, "{what}");
        shared.check_invariants(&pool).unwrap();
        for t in 0..T {
            let m = BTreeMap::<u64, std::vec::Vec<u8>>::from_ptr(PPtr::from_offset(w[t as usize]));
            assert_eq!(m.len(&pool).unwrap(), PER, "{what}");
            m.check_invariants(&pool).unwrap();
            for e in m.iter(&pool).unwrap() {
                let (k, v) = e.unwrap();
                assert_eq!(v, vec![t as u8; (20_000 + k % 7) as usize], "{what}");
            }
        }
    }
}

/// Scans through `&Pool` held while this thread's transactions destroy
/// the collection and fill its freed blocks with a blob's hostile bytes
/// (words pointing at the header, at each other, all ones, a huge
/// length): each scan yields entries or ends with `Changed`, never
/// another error, a panic or a hang.
#[test]
fn scans_held_while_their_blocks_become_hostile_bytes_end_changed() {
    fn mix(i: usize, salt: u64) -> u64 {
        let mut z = (i as u64)
            .wrapping_add(salt)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 31)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z ^ (z >> 29)
    }
    let patterns: [fn(usize, u64) -> u64; 8] = [
        |_, hdr| hdr,
        |i, hdr| hdr + 64 * (i as u64 % 7),
        |_, _| u64::MAX,
        |i, _| {
            if i % 2 == 0 {
                1 << 40
            } else {
                0x0000_0001_0000_0001
            }
        },
        |i, _| mix(i, 1),
        // Offsets in the heap, 8-aligned: links that lead somewhere.
        |i, hdr| hdr + (mix(i, 2) % (4 << 20)) / 8 * 8,
        |i, hdr| hdr + (mix(i, 3) % (1 << 16)) / 64 * 64,
        |i, _| mix(i, 4) % 300,
    ];
    for cfg in [
        PoolConfig::default(),
        PoolConfig::default().policy(Policy::Force),
        PoolConfig::default().policy(Policy::NoForce),
    ] {
        let what = common::name(&cfg);
        for (pi, pat) in patterns.iter().enumerate() {
            let pool = Pool::create_sim("hostile", 8 << 20, &cfg).unwrap();
            let (m, s, h, l) = pool
                .transaction(|tx| {
                    let m = BTreeMap::<u64, u64>::create_with_fanout(tx, 8)?;
                    let s = BTreeMap::<String, String>::create_with_fanout(tx, 4)?;
                    let h = HashMap::<u64, u64>::create(tx)?;
                    let l = List::<u64>::create(tx)?;
                    for k in 0..400u64 {
                        m.insert(tx, k, k)?;
                        s.insert(tx, format!("{k:050}"), "s".repeat(60))?;
                        h.insert(tx, k, k)?;
                        l.push_back(tx, k)?;
                    }
                    Ok::<_, Error>((m, s, h, l))
                })
                .unwrap();
            let mut im = m.iter(&pool).unwrap();
            let mut ims = m.iter(&pool).unwrap().rev();
            let mut is = s.iter(&pool).unwrap();
            let mut ih = h.iter(&pool).unwrap();
            let mut il = l.iter(&pool).unwrap();
            assert!(im.next().unwrap().is_ok());
            assert!(ims.next().unwrap().is_ok());
            assert!(is.next().unwrap().is_ok());
            assert!(ih.next().unwrap().is_ok());
            assert!(il.next().unwrap().is_ok());
            pool.transaction(|tx| {
                if pi % 2 == 0 {
                    m.destroy(tx)?;
                    s.destroy(tx)?;
                    h.destroy(tx)?;
                    l.destroy(tx)
                } else {
                    // The headers stay: emptied, their nodes freed.
                    m.clear(tx)?;
                    s.clear(tx)?;
                    for k in 0..400u64 {
                        h.remove(tx, &k)?;
                    }
                    while l.pop_front(tx)?.is_some() {}
                    Ok(())
                }
            })
            .unwrap();
            // Blobs of every small size class until the space is refilled.
            let hdr = m.as_ptr().offset();
            for size in [64usize, 128, 256, 512, 1024, 2048] {
                let words: std::vec::Vec<u8> = (0..size / 8)
                    .flat_map(|i| pat(i, hdr).to_le_bytes())
                    .collect();
                for _ in 0..(2 << 20) / size / 6 {
                    if pool
                        .transaction(|tx| Blob::create_from(tx, &words))
                        .is_err()
                    {
                        break;
                    }
                }
            }
            let ok = |e: &Error| matches!(e, Error::Changed { .. });
            let tag = format!("{what} pattern {pi}");
            for (name, errs) in [
                (
                    "map",
                    im.filter_map(|e| e.err()).collect::<std::vec::Vec<_>>(),
                ),
                ("map rev", ims.filter_map(|e| e.err()).collect()),
                ("strings", is.filter_map(|e| e.err()).collect()),
                ("hash", ih.filter_map(|e| e.err()).collect()),
                ("list", il.filter_map(|e| e.err()).collect()),
            ] {
                assert!(errs.iter().all(ok), "{tag} {name}: {errs:?}");
                assert!(errs.len() <= 1, "{tag} {name}: {errs:?}");
            }
        }
    }
}

/// `blocks(&pool)` of a vector and a blob read beside a writer that
/// grows, moves and empties them: each call gives blocks or `Changed`,
/// as the checks' documentation says, never another error.
#[test]
fn blocks_beside_a_writer_are_blocks_or_changed() {
    for cfg in [
        PoolConfig::default().policy(Policy::Force),
        PoolConfig::default().policy(Policy::NoForce),
        PoolConfig::default(),
        PoolConfig::default().policy(Policy::RedoAsync),
    ] {
        let what = common::name(&cfg);
        let pool = Pool::create_sim("blocks", 16 << 20, &cfg).unwrap();
        let (v, b) = pool
            .transaction(|tx| {
                Ok::<_, Error>((
                    rewind_collections::Vec::<[u64; 4]>::create(tx)?,
                    Blob::create(tx)?,
                ))
            })
            .unwrap();
        const ROUNDS: u64 = 400;
        let done = AtomicBool::new(false);
        let bad = std::thread::scope(|sc| {
            let reader = sc.spawn(|| {
                let mut bad = vec![];
                let mut calls = 0u64;
                // Until the writer is done, and at least a count of calls.
                while !done.load(Ordering::Acquire) || calls < 2000 {
                    for r in [v.blocks(&pool), b.blocks(&pool)] {
                        match r {
                            Ok(_) | Err(Error::Changed { .. }) => {}
                            Err(e) => bad.push(e),
                        }
                    }
                    calls += 1;
                }
                bad
            });
            for round in 0..ROUNDS {
                pool.transaction(|tx| {
                    for i in 0..(round % 50) {
                        v.push(tx, [i; 4])?;
                        b.append(tx, &[i as u8; 24])?;
                    }
                    if round % 3 == 0 {
                        v.clear(tx)?;
                        b.truncate(tx, 0)?;
                        b.shrink_to_fit(tx)?;
                    }
                    if round % 5 == 0 {
                        b.replace(tx, &vec![1u8; (round as usize * 37) % 5000])?;
                    }
                    if round % 7 == 0 {
                        return Err(common::aborted());
                    }
                    Ok(())
                })
                .or_else(|e| match e {
                    Error::Pool(rewind::Error::Aborted) => Ok(()),
                    e => Err(e),
                })
                .unwrap();
            }
            done.store(true, Ordering::Release);
            reader.join().unwrap()
        });
        assert!(
            bad.is_empty(),
            "{what}: {} errors, first {:?}",
            bad.len(),
            bad.first()
        );
    }
}

/// `check_invariants` and `blocks` of every collection (and the scans)
/// run in a loop beside a writer whose transactions (some rolled back)
/// split and merge trees, double a hash table and push and pop a list:
/// each gives its answer or `Changed`.
#[test]
fn checks_beside_a_writer_are_answers_or_changed() {
    for cfg in [
        PoolConfig::default().policy(Policy::Force),
        PoolConfig::default().policy(Policy::NoForce),
        PoolConfig::default(),
        PoolConfig::default().policy(Policy::RedoAsync),
    ] {
        let what = common::name(&cfg);
        let pool = Pool::create_sim("checks", 16 << 20, &cfg).unwrap();
        let (m, s, h, l) = pool
            .transaction(|tx| {
                Ok::<_, Error>((
                    BTreeMap::<u64, u64>::create_with_fanout(tx, 4)?,
                    BTreeMap::<String, String>::create_with_fanout(tx, 4)?,
                    HashMap::<u64, u64>::create(tx)?,
                    List::<u64>::create(tx)?,
                ))
            })
            .unwrap();
        let done = AtomicBool::new(false);
        let bad = std::thread::scope(|sc| {
            let reader = sc.spawn(|| {
                let mut bad: std::vec::Vec<String> = vec![];
                let mut calls = 0u64;
                let mut note = |r: Result<(), Error>, name: &str| match r {
                    Ok(()) | Err(Error::Changed { .. }) => {}
                    Err(e) => bad.push(format!("{name}: {e:?}")),
                };
                while !done.load(Ordering::Acquire) || calls < 500 {
                    note(m.check_invariants(&pool), "map check");
                    note(s.check_invariants(&pool), "strings check");
                    note(h.check_invariants(&pool), "hash check");
                    note(l.check_invariants(&pool), "list check");
                    note(m.blocks(&pool).map(|_| ()), "map blocks");
                    note(s.blocks(&pool).map(|_| ()), "strings blocks");
                    note(h.blocks(&pool).map(|_| ()), "hash blocks");
                    match s.iter(&pool) {
                        Ok(it) => {
                            for e in it.rev() {
                                note(e.map(|_| ()), "strings scan");
                            }
                        }
                        Err(e) => note(Err(e), "strings scan start"),
                    }
                    match h.iter(&pool) {
                        Ok(it) => {
                            for e in it {
                                note(e.map(|_| ()), "hash scan");
                            }
                        }
                        Err(e) => note(Err(e), "hash scan start"),
                    }
                    calls += 1;
                }
                bad
            });
            let mut rng = SmallRng::seed_from_u64(77);
            for round in 0..300u64 {
                let r = pool.transaction(|tx| {
                    for _ in 0..20 {
                        let k = rng.gen_range(0..400u64);
                        if rng.gen_bool(0.6) {
                            m.insert(tx, k, round)?;
                            s.insert(tx, format!("{k:045}"), "x".repeat((k % 60) as usize))?;
                            h.insert(tx, k + round * 1000, k)?;
                            l.push_back(tx, k)?;
                        } else {
                            m.remove(tx, &k)?;
                            s.remove(tx, &format!("{k:045}"))?;
                            l.pop_front(tx)?;
                        }
                    }
                    if round % 6 == 5 {
                        return Err(common::aborted());
                    }
                    Ok(())
                });
                match r {
                    Ok(()) | Err(Error::Pool(rewind::Error::Aborted)) => {}
                    Err(e) => panic!("{what}: {e:?}"),
                }
            }
            done.store(true, Ordering::Release);
            reader.join().unwrap()
        });
        assert!(
            bad.is_empty(),
            "{what}: {} errors, first {:?}",
            bad.len(),
            bad.first()
        );
        m.check_invariants(&pool).unwrap();
        s.check_invariants(&pool).unwrap();
        h.check_invariants(&pool).unwrap();
        l.check_invariants(&pool).unwrap();
    }
}

/// `update` whose closure leaves a byte-string value as it was (out of
/// line: over 36 bytes) writes nothing, as the documentation says ("only
/// the bytes the closure changed are written"; a value the closure
/// changes is stored again): the value keeps its block, and in a pool
/// with no free block the call succeeds. It stored the value again in a
/// new block, so a read-only pass of `update` over a full pool failed
/// with `OutOfMemory`. A value the closure changes is still stored again.
#[test]
fn an_update_that_changes_nothing_writes_nothing() {
    for cfg in [
        PoolConfig::default(),
        PoolConfig::default().policy(Policy::Force),
        PoolConfig::default().policy(Policy::NoForce),
    ] {
        let what = common::name(&cfg);
        let pool = Pool::create_sim("update", 4 << 20, &cfg).unwrap();
        let (ms, mb) = pool
            .transaction(|tx| {
                let ms = BTreeMap::<u64, String>::create(tx)?;
                let mb = BTreeMap::<String, std::vec::Vec<u8>>::create(tx)?;
                for k in 0..50u64 {
                    ms.insert(tx, k, format!("{k}-{}", "v".repeat(100)))?;
                    mb.insert(tx, format!("key-{k}"), vec![k as u8; 200])?;
                }
                Ok::<_, Error>((ms, mb))
            })
            .unwrap();
        let before = (ms.blocks(&pool).unwrap(), mb.blocks(&pool).unwrap());
        let seen = pool
            .transaction(|tx| {
                let a = ms.update(tx, &7, |v| v.len())?;
                let b = mb.update(tx, "key-9", |v| v[0])?;
                Ok::<_, Error>((a, b))
            })
            .unwrap();
        assert_eq!(seen, (Some(102), Some(9)), "{what}");
        assert_eq!(
            (ms.blocks(&pool).unwrap(), mb.blocks(&pool).unwrap()),
            before,
            "{what}: a value re-stored"
        );
        // A full pool: every block taken.
        let mut filler = vec![];
        for size in (6..=16).rev().map(|s| 1u64 << s) {
            while let Ok(b) = pool.transaction(|tx| tx.alloc_bytes(size)) {
                filler.push(b);
            }
        }
        let r = pool.transaction(|tx| {
            for k in 0..50u64 {
                ms.update(tx, &k, |v| assert!(v.starts_with(&format!("{k}-"))))?;
                mb.update(tx, &format!("key-{k}"), |v| assert_eq!(v.len(), 200))?;
            }
            Ok::<_, Error>(())
        });
        assert!(r.is_ok(), "{what}: {r:?}");
        // A change is stored (here it needs a block, and there is none).
        let r = pool.transaction(|tx| ms.update(tx, &3, |v| v.push('!')));
        assert!(r.as_ref().is_err_and(is_full), "{what}: {r:?}");
        pool.transaction(|tx| {
            for b in &filler[..4] {
                tx.free(PPtr::<u8>::from_offset(*b))?;
            }
            Ok::<_, Error>(())
        })
        .unwrap();
        pool.transaction(|tx| ms.update(tx, &3, |v| v.push('!')))
            .unwrap();
        assert!(ms.get(&pool, &3).unwrap().unwrap().ends_with('!'), "{what}");
        ms.check_invariants(&pool).unwrap();
        mb.check_invariants(&pool).unwrap();
    }
}

/// A handle of the wrong kind (the usual `WrongMagic`) says in words what
/// its pointer leads to: the message printed the magics as hex byte
/// arrays that read as decimal ("magic [52, 57, 42, 54, ...], expected
/// [52, 57, 48, 41, ...]"), naming neither collection.
#[test]
fn a_handle_of_another_kind_names_what_it_found() {
    let pool = Pool::create_sim("kind", 8 << 20, &PoolConfig::default()).unwrap();
    let (m, b) = pool
        .transaction(|tx| {
            Ok::<_, Error>((
                BTreeMap::<u64, u64>::create(tx)?,
                Blob::create_from(tx, &[0xff; 64])?,
            ))
        })
        .unwrap();
    let e = HashMap::<u64, u64>::from_ptr(PPtr::from_offset(m.as_ptr().offset()))
        .get(&pool, &1)
        .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, Error::WrongMagic { .. }), "{e:?}");
    assert!(
        text.contains("\"RWBTREE2\" (a B+-tree)") && text.contains("\"RWHASH03\" (a hash map)"),
        "{text}"
    );
    let e = List::<u64>::from_ptr(PPtr::from_offset(m.as_ptr().offset()))
        .len(&pool)
        .unwrap_err();
    assert!(e.to_string().contains("(a B+-tree)"), "{e}");
    // Bytes that are no text: in hex, said to be bytes.
    let buf = b.blocks(&pool).unwrap()[1];
    let e = BTreeMap::<u64, u64>::from_ptr(PPtr::from_offset(buf))
        .len(&pool)
        .unwrap_err();
    assert!(
        e.to_string().contains("bytes 0xffffffffffffffff") && e.to_string().contains("(a B+-tree)"),
        "{e}"
    );
}

/// `TooLong` gives the remedy of the type that refused: "use a larger N"
/// is for `FixedBytes<N>` only; a B+-tree value of 4 GiB (refused before
/// anything is read or allocated: tried by hand, 57 µs) said "use a larger
/// N, or a Blob", and a blob past 2^63 bytes "use a larger N, or a Blob".
#[test]
fn too_long_says_the_remedy_of_its_type() {
    let e = FixedBytes::<4>::new(b"hello").unwrap_err();
    assert!(e.to_string().contains("use a larger N"), "{e}");
    let e = Error::TooLong {
        what: "B+-tree byte string",
        len: 1 << 32,
        max: u32::MAX as u64,
    };
    let t = e.to_string();
    assert!(!t.contains("larger N") && t.contains("Blob"), "{t}");
    let e = Error::TooLong {
        what: "blob",
        len: u64::MAX,
        max: 1 << 63,
    };
    let t = e.to_string();
    assert!(!t.contains("larger N") && !t.contains("or a Blob"), "{t}");
}

/// A hash map and a list whose entries are larger than the largest
/// small block (70,000-byte values: whole chunks each) filled until the
/// pool refuses, under redo, force and no-force: the refusal is typed,
/// the map and list hold exactly the committed entries, and destroy gives
/// every chunk back.
#[test]
fn entries_larger_than_a_block_fill_and_empty_a_pool() {
    for cfg in [
        PoolConfig::default(),
        PoolConfig::default().policy(Policy::Force),
        PoolConfig::default().policy(Policy::NoForce),
    ] {
        let what = common::name(&cfg);
        let pool = Pool::create_sim("big-entries", 16 << 20, &cfg).unwrap();
        let free0 = pool.alloc_stats().bytes_free;
        let (h, l) = pool
            .transaction(|tx| {
                Ok::<_, Error>((
                    HashMap::<u64, [u8; 70_000]>::create(tx)?,
                    List::<[u8; 70_000]>::create(tx)?,
                ))
            })
            .unwrap();
        let mut n = 0u64;
        loop {
            let r = pool.transaction(|tx| {
                h.insert(tx, n, [n as u8; 70_000])?;
                l.push_back(tx, [n as u8; 70_000])
            });
            match r {
                Ok(()) => n += 1,
                Err(e) if is_full(&e) => break,
                Err(e) => panic!("{what}: {e:?}"),
            }
        }
        assert!(n > 10, "{what}: only {n}");
        assert_eq!(h.len(&pool).unwrap(), n, "{what}");
        assert_eq!(l.len(&pool).unwrap(), n, "{what}");
        for k in [0, n / 2, n - 1] {
            assert_eq!(h.get(&pool, &k).unwrap(), Some([k as u8; 70_000]), "{what}");
            assert_eq!(l.get(&pool, k).unwrap(), Some([k as u8; 70_000]), "{what}");
        }
        h.check_invariants(&pool).unwrap();
        l.check_invariants(&pool).unwrap();
        pool.transaction(|tx| {
            h.destroy(tx)?;
            l.destroy(tx)
        })
        .unwrap();
        assert!(common::allocated(&pool).is_empty(), "{what}");
        assert_eq!(pool.alloc_stats().bytes_free, free0, "{what}");
    }
}

/// A double-ended scan through `&Pool` taken from both ends, with keys
/// committed between its steps (in the middle, before and after both
/// ends): the two ends never cross, so no key is yielded twice and the
/// front's keys stay below the back's.
#[test]
fn a_double_ended_scan_beside_commits_never_yields_a_key_twice() {
    for cfg in [
        PoolConfig::default(),
        PoolConfig::default().policy(Policy::Force),
    ] {
        let what = common::name(&cfg);
        let pool = Pool::create_sim("de", 8 << 20, &cfg).unwrap();
        let m = pool
            .transaction(|tx| {
                let m = BTreeMap::<u64, u64>::create_with_fanout(tx, 4)?;
                for k in (0..200).step_by(4) {
                    m.insert(tx, k, k)?;
                }
                Ok::<_, Error>(m)
            })
            .unwrap();
        for (front_steps, back_steps) in [(5, 10), (0, 49), (49, 0), (25, 25), (1, 1)] {
            let mut it = m.iter(&pool).unwrap();
            let mut seen: std::vec::Vec<u64> = vec![];
            let mut fronts = vec![];
            let mut backs = vec![];
            for _ in 0..front_steps {
                if let Some(Ok((k, _))) = it.next() {
                    fronts.push(k);
                }
            }
            for _ in 0..back_steps {
                if let Some(Ok((k, _))) = it.next_back() {
                    backs.push(k);
                }
            }
            // Keys everywhere: the odd ones, then taken away again later.
            pool.transaction(|tx| {
                for k in (1..200).step_by(2) {
                    m.insert(tx, k, k)?;
                }
                Ok::<_, Error>(())
            })
            .unwrap();
            loop {
                match (it.next(), it.next_back()) {
                    (None, None) => break,
                    (f, b) => {
                        for (e, side) in [(f, &mut fronts), (b, &mut backs)] {
                            match e {
                                Some(Ok((k, _))) => side.push(k),
                                Some(Err(Error::Changed { .. })) | None => {}
                                Some(Err(e)) => panic!("{what}: {e:?}"),
                            }
                        }
                    }
                }
            }
            seen.extend(&fronts);
            seen.extend(&backs);
            let mut sorted = seen.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(
                sorted.len(),
                seen.len(),
                "{what}: a key twice: {fronts:?} / {backs:?}"
            );
            assert!(fronts.windows(2).all(|w| w[0] < w[1]), "{what}: {fronts:?}");
            assert!(backs.windows(2).all(|w| w[0] > w[1]), "{what}: {backs:?}");
            if let (Some(f), Some(b)) = (fronts.last(), backs.last()) {
                assert!(f < b, "{what}: the ends crossed: {fronts:?} / {backs:?}");
            }
            pool.transaction(|tx| {
                for k in (1..200).step_by(2) {
                    m.remove(tx, &k)?;
                }
                Ok::<_, Error>(())
            })
            .unwrap();
        }
        m.check_invariants(&pool).unwrap();
    }
}

/// A list scanned through `&Pool` from both ends while commits remove
/// elements between the ends (and push new ones at the back): the front
/// ran on by the count it began with, past the back, and yielded again
/// what the back had yielded (`[1, 2, 7, 8, 9]` after `0` and `9`, then
/// `Changed`; with pushes, with no error at all). The ends now stop where
/// they meet: no element twice.
#[test]
fn a_double_ended_list_scan_beside_removals_never_yields_an_element_twice() {
    for cfg in [
        PoolConfig::default(),
        PoolConfig::default().policy(Policy::Force),
        PoolConfig::default().policy(Policy::NoForce),
    ] {
        let what = common::name(&cfg);
        let pool = Pool::create_sim("list-de", 8 << 20, &cfg).unwrap();
        let l = pool.transaction(List::<u64>::create).unwrap();
        for (removed, pushed, back_first) in [(4, 0, 1), (4, 5, 1), (3, 3, 2), (8, 0, 1), (1, 0, 3)]
        {
            pool.transaction(|tx| {
                while l.pop_front(tx)?.is_some() {}
                for i in 0..10 {
                    l.push_back(tx, i)?;
                }
                Ok::<_, Error>(())
            })
            .unwrap();
            let mut it = l.iter(&pool).unwrap();
            let mut fronts = vec![it.next().unwrap().unwrap()];
            let mut backs: std::vec::Vec<u64> = (0..back_first)
                .map(|_| it.next_back().unwrap().unwrap())
                .collect();
            pool.transaction(|tx| {
                for _ in 0..removed {
                    l.remove(tx, 2)?;
                }
                for i in 0..pushed {
                    l.push_back(tx, 100 + i)?;
                }
                Ok::<_, Error>(())
            })
            .unwrap();
            for e in it.by_ref() {
                match e {
                    Ok(v) => fronts.push(v),
                    Err(Error::Changed { .. }) => {}
                    Err(e) => panic!("{what}: {e:?}"),
                }
            }
            backs.reverse();
            let mut all = fronts.clone();
            all.extend(&backs);
            let mut dedup = all.clone();
            dedup.sort_unstable();
            dedup.dedup();
            assert_eq!(
                dedup.len(),
                all.len(),
                "{what}: removed {removed}, pushed {pushed}: {fronts:?} then the back's {backs:?}"
            );
        }
        l.check_invariants(&pool).unwrap();
    }
}

/// A range scanned through `&Pool` from either end while commits insert
/// and remove keys around it every few steps (one thread, a fixed
/// sequence): every key it yields is in range, once, in order. The back
/// end yielded keys again and out of order (`…, 422, 421, 422, 421, …`,
/// no error) when a commit had moved entries into the leaf before the one
/// it had read (a neighbour's rebalance): it descends for that leaf by
/// the lower separator it read earlier, and took all its keys.
#[test]
fn a_range_scan_beside_rebalancing_commits_yields_each_key_once_in_order() {
    for cfg in [
        PoolConfig::default(),
        PoolConfig::default().policy(Policy::Force),
    ] {
        let what = common::name(&cfg);
        let pool = Pool::create_sim("range", 16 << 20, &cfg).unwrap();
        let m = pool
            .transaction(|tx| {
                let m = BTreeMap::<u64, u64>::create_with_fanout(tx, 4)?;
                for i in (0..1000).step_by(3) {
                    m.insert(tx, i, i)?;
                }
                Ok::<_, Error>(m)
            })
            .unwrap();
        for round in 0..160u64 {
            let mut it = m.range(&pool, 300..600).unwrap();
            let rev = round % 2 == 1;
            let mut got = vec![];
            let mut step = 0;
            loop {
                let e = if rev { it.next_back() } else { it.next() };
                let Some(e) = e else { break };
                match e {
                    Ok((k, _)) => got.push(k),
                    Err(Error::Changed { .. }) => break,
                    Err(e) => panic!("{what}: {e:?}"),
                }
                step += 1;
                if step % 7 == 0 {
                    pool.transaction(|tx| {
                        for j in 0..20u64 {
                            let k = (round * 31 + j * 53 + step) % 1000;
                            if j % 2 == 0 {
                                m.insert(tx, k, k)?;
                            } else {
                                m.remove(tx, &k)?;
                            }
                        }
                        Ok::<_, Error>(())
                    })
                    .unwrap();
                }
            }
            assert!(
                got.iter().all(|k| (300..600).contains(k)),
                "{what} round {round}: {got:?}"
            );
            let ordered = if rev {
                got.windows(2).all(|w| w[0] > w[1])
            } else {
                got.windows(2).all(|w| w[0] < w[1])
            };
            assert!(ordered, "{what} round {round} (rev {rev}): {got:?}");
        }
        m.check_invariants(&pool).unwrap();
    }
}

/// Readers scanning a string tree through `&Pool` from either end, and
/// from both at once, while two writer threads insert and remove keys
/// (splits, merges and rebalances): every scan yields keys in order, each
/// once, its ends never crossing; an error is `Changed` only.
#[test]
fn scans_beside_writer_threads_yield_ordered_keys_once() {
    for cfg in [
        PoolConfig::default(),
        PoolConfig::default().policy(Policy::Force),
        PoolConfig::default().policy(Policy::NoForce),
    ] {
        let what = common::name(&cfg);
        let pool = Pool::create_sim("scans", 16 << 20, &cfg).unwrap();
        let key = |k: u64| format!("{k:030}-{}", "k".repeat((k % 11) as usize));
        let m = pool
            .transaction(|tx| {
                let m = BTreeMap::<String, u64>::create_with_fanout(tx, 5)?;
                for k in (0..800).step_by(2) {
                    m.insert(tx, key(k), k)?;
                }
                Ok::<_, Error>(m)
            })
            .unwrap();
        let done = AtomicBool::new(false);
        std::thread::scope(|sc| {
            let writers: std::vec::Vec<_> = (0..2u64)
                .map(|t| {
                    let pool = &pool;
                    sc.spawn(move || {
                        let mut rng = SmallRng::seed_from_u64(t + 99);
                        for _ in 0..300 {
                            loop {
                                let r = pool.transaction(|tx| {
                                    for _ in 0..10 {
                                        let k = rng.gen_range(0..800u64);
                                        if rng.gen_bool(0.5) {
                                            m.insert(tx, key(k), k)?;
                                        } else {
                                            m.remove(tx, &key(k))?;
                                        }
                                    }
                                    Ok::<_, Error>(())
                                });
                                match r {
                                    Ok(()) => break,
                                    Err(e) if retryable(&e) => {}
                                    Err(e) => panic!("{e:?}"),
                                }
                            }
                        }
                    })
                })
                .collect();
            let reader = sc.spawn(|| {
                let mut scans = 0u64;
                while !done.load(Ordering::Acquire) || scans < 30 {
                    let mode = scans % 3;
                    let mut it = match m.iter(&pool) {
                        Ok(it) => it,
                        Err(Error::Changed { .. }) => continue,
                        Err(e) => panic!("{what}: {e:?}"),
                    };
                    let (mut f, mut b) = (vec![], vec![]);
                    let mut turn = 0u64;
                    loop {
                        let front = mode == 0 || (mode == 2 && turn.is_multiple_of(2));
                        let e = if front { it.next() } else { it.next_back() };
                        turn += 1;
                        match e {
                            Some(Ok((k, _))) => {
                                if front {
                                    f.push(k)
                                } else {
                                    b.push(k)
                                }
                            }
                            Some(Err(Error::Changed { .. })) => break,
                            Some(Err(e)) => panic!("{what}: {e:?}"),
                            None if mode == 2 && turn < 3 => {}
                            None => break,
                        }
                    }
                    assert!(f.windows(2).all(|w| w[0] < w[1]), "{what}: front {f:?}");
                    assert!(b.windows(2).all(|w| w[0] > w[1]), "{what}: back {b:?}");
                    if let (Some(x), Some(y)) = (f.last(), b.last()) {
                        assert!(x < y, "{what}: the ends crossed at {x} / {y}");
                    }
                    scans += 1;
                }
            });
            for w in writers {
                w.join().unwrap();
            }
            done.store(true, Ordering::Release);
            reader.join().unwrap();
        });
        m.check_invariants(&pool).unwrap();
    }
}

/// Readers scanning a list through `&Pool` from either end and from both
/// at once beside two writer threads that push at the back, pop at the
/// front and remove from the middle: every error is `Changed`, never
/// another error or a panic. (What such a scan yields is only part of a
/// change: a node popped and pushed again holds another value in another
/// place, and under redo a value 0, never in the list, was yielded by
/// both ends in 1 of 4 runs: bytes of a node the scan reached whose
/// block another transaction had taken meanwhile. collections.md said
/// redo scans saw the state between commits.)
#[test]
fn list_scans_beside_writer_threads_end_changed_or_whole() {
    for cfg in [
        PoolConfig::default(),
        PoolConfig::default().policy(Policy::Force),
        PoolConfig::default().policy(Policy::NoForce),
    ] {
        let what = common::name(&cfg);
        let pool = Pool::create_sim("list-scans", 16 << 20, &cfg).unwrap();
        let l = pool
            .transaction(|tx| {
                let l = List::<u64>::create(tx)?;
                for v in 1..=200 {
                    l.push_back(tx, v)?;
                }
                Ok::<_, Error>(l)
            })
            .unwrap();
        let done = AtomicBool::new(false);
        std::thread::scope(|sc| {
            let writers: std::vec::Vec<_> = (0..2u64)
                .map(|t| {
                    let pool = &pool;
                    sc.spawn(move || {
                        let mut rng = SmallRng::seed_from_u64(t + 7);
                        for _ in 0..300 {
                            loop {
                                let r = pool.transaction(|tx| {
                                    for _ in 0..5 {
                                        let len = l.len_tx(tx)?;
                                        match rng.gen_range(0..3) {
                                            0 => {
                                                let last = match len {
                                                    0 => 0,
                                                    n => l.get_tx(tx, n - 1)?.unwrap(),
                                                };
                                                l.push_back(tx, last + 1)?;
                                            }
                                            1 => {
                                                l.pop_front(tx)?;
                                            }
                                            _ if len > 2 => {
                                                l.remove(tx, rng.gen_range(1..len - 1))?;
                                            }
                                            _ => {}
                                        }
                                    }
                                    Ok::<_, Error>(())
                                });
                                match r {
                                    Ok(()) => break,
                                    Err(e) if retryable(&e) => {}
                                    Err(e) => panic!("{e:?}"),
                                }
                            }
                        }
                    })
                })
                .collect();
            let reader = sc.spawn(|| {
                let mut scans = 0u64;
                while !done.load(Ordering::Acquire) || scans < 30 {
                    let mode = scans % 3;
                    let mut it = match l.iter(&pool) {
                        Ok(it) => it,
                        Err(Error::Changed { .. }) => continue,
                        Err(e) => panic!("{what}: {e:?}"),
                    };
                    let (mut f, mut b) = (vec![], vec![]);
                    let mut turn = 0u64;
                    loop {
                        let front = mode == 0 || (mode == 2 && turn.is_multiple_of(2));
                        let e = if front { it.next() } else { it.next_back() };
                        turn += 1;
                        match e {
                            Some(Ok(v)) => {
                                if front {
                                    f.push(v)
                                } else {
                                    b.push(v)
                                }
                            }
                            Some(Err(Error::Changed { .. })) | None => break,
                            Some(Err(e)) => panic!("{what}: {e:?}"),
                        }
                    }
                    assert!(
                        f.len() + b.len() <= 2000,
                        "{what}: {} values",
                        f.len() + b.len()
                    );
                    scans += 1;
                }
            });
            for w in writers {
                w.join().unwrap();
            }
            done.store(true, Ordering::Release);
            reader.join().unwrap();
        });
        l.check_invariants(&pool).unwrap();
    }
}
