//! Pools holding every collection, damaged on media as a hostile or
//! failing disk would leave them: a word, a 32-bit field or a byte of a
//! collection's header or of one of its nodes, entries, buffers or
//! out-of-line strings set to a value that is plausible (0, 1, all ones,
//! 2^40, 2^60, the next or previous word, another of the collection's
//! blocks, the header itself) or random. Each damaged image is opened and
//! every collection walked whole: lengths, lookups, scans both ways,
//! ranges, invariant checks, block lists, then a change through a
//! transaction and the walk again. Each must end in `Ok` or a typed error
//! within a bounded number of steps and of bytes.
//!
//! The cases run in a child process (this test binary run again with
//! `REWIND_HOSTILE_CHILD` set) whose address space is limited to 2 GiB,
//! so a length believed and allocated aborts the child instead of the
//! machine, and a walk that does not end is caught by its step cap. The
//! child names each case on stderr before it runs it; the parent shows
//! the last one named when the child fails. Counts and seeds only: the
//! same cases every run.

use std::io::Read;
use std::ops::Bound;
use std::process::{Command, Stdio};

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;
use rewind::{Backend, LogVariant, PPtr, Policy, Pool, PoolConfig};
use rewind_collections::{BTreeMap, Blob, Error, HashMap, List, Vec as PVec};

const LAYOUT: &str = "hostile-collections";
const CHILD: &str = "REWIND_HOSTILE_CHILD";
/// The child's address space: far above what a walk of these small pools
/// needs, far below what a believed damaged length would ask for.
const ADDRESS_SPACE: u64 = 2 << 30;
/// Items any one scan may yield before it is taken for a scan that does
/// not end (the pools hold a few hundred entries each).
const STEP_CAP: usize = 100_000;
/// Damaged images per configuration (`REWIND_HOSTILE_CASES` overrides).
const CASES: u64 = 300;

fn cases() -> u64 {
    std::env::var("REWIND_HOSTILE_CASES")
        .map_or(CASES, |s| s.parse().expect("REWIND_HOSTILE_CASES"))
}

type BtU = BTreeMap<u64, u64>;
type BtS = BTreeMap<String, String>;
type Hm = HashMap<u64, u64>;
type Vc = PVec<u64>;
type Ls = List<u64>;

/// The root object: each collection's header offset.
#[derive(Clone, Copy, Debug)]
struct Set {
    bt: u64,
    bs: u64,
    hm: u64,
    vc: u64,
    ls: u64,
    bl: u64,
}

impl Set {
    fn headers(&self) -> [u64; 6] {
        [self.bt, self.bs, self.hm, self.vc, self.ls, self.bl]
    }
}

fn configs() -> [(LogVariant, Policy); 4] {
    [
        (LogVariant::Batch, Policy::Redo),
        (LogVariant::Simple, Policy::Force),
        (LogVariant::TwoLayer, Policy::NoForce),
        (LogVariant::Optimized, Policy::RedoAsync),
    ]
}

fn skey(i: u64) -> String {
    // Lengths 1 to 80: inline and out of line, long shared prefixes.
    let len = (i * 37 % 80) as usize + 1;
    let mut s = format!("k{i:05}-");
    while s.len() < len {
        s.push_str("prefix-shared-by-many-keys/");
    }
    s.truncate(len.max(7));
    s
}

fn sval(i: u64) -> String {
    "v".repeat((i * 13 % 100) as usize)
}

/// A pool with every collection, some hundreds of entries, and every
/// kind of node: inner and leaf nodes of fan-out 4, out-of-line strings,
/// a hash table that has doubled, a vector's buffer, list nodes, a blob.
fn build(v: LogVariant, p: Policy) -> (Pool, Set) {
    let cfg = PoolConfig::default().log(v).policy(p).backend(Backend::Sim);
    let pool = Pool::create_sim(LAYOUT, 8 << 20, &cfg).unwrap();
    let set = pool
        .transaction(|tx| {
            let root = tx.root::<[u64; 6]>()?;
            let set = Set {
                bt: BtU::create_with_fanout(tx, 4)?.as_ptr().offset(),
                bs: BtS::create_with_fanout(tx, 4)?.as_ptr().offset(),
                hm: Hm::create(tx)?.as_ptr().offset(),
                vc: Vc::create(tx)?.as_ptr().offset(),
                ls: Ls::create(tx)?.as_ptr().offset(),
                bl: Blob::create(tx)?.as_ptr().offset(),
            };
            tx.write(root, &set.headers())?;
            Ok::<_, Error>(set)
        })
        .unwrap();
    let c = handles(set);
    for round in 0..10u64 {
        pool.transaction(|tx| {
            for j in 0..30 {
                let i = round * 30 + j;
                c.bt.insert(tx, i * 7 % 301, i)?;
                if j % 3 == 0 {
                    c.bs.insert(tx, skey(i), sval(i))?;
                }
                c.hm.insert(tx, i * 11, i)?;
                if j % 2 == 0 {
                    c.vc.push(tx, i)?;
                }
                if j % 5 == 0 {
                    c.ls.push_back(tx, i)?;
                }
            }
            c.bl.append(tx, &[round as u8; 300])?;
            if round % 3 == 2 {
                c.bt.remove(tx, &(round * 5))?;
                c.bs.remove(tx, &skey(round * 30))?;
                c.ls.pop_front(tx)?;
            }
            Ok::<_, Error>(())
        })
        .unwrap();
    }
    (pool, set)
}

struct Handles {
    bt: BtU,
    bs: BtS,
    hm: Hm,
    vc: Vc,
    ls: Ls,
    bl: Blob,
}

fn handles(s: Set) -> Handles {
    Handles {
        bt: BtU::from_ptr(PPtr::from_offset(s.bt)),
        bs: BtS::from_ptr(PPtr::from_offset(s.bs)),
        hm: Hm::from_ptr(PPtr::from_offset(s.hm)),
        vc: Vc::from_ptr(PPtr::from_offset(s.vc)),
        ls: Ls::from_ptr(PPtr::from_offset(s.ls)),
        bl: Blob::from_ptr(PPtr::from_offset(s.bl)),
    }
}

fn image(pool: &Pool) -> Vec<u8> {
    pool.sync().unwrap();
    pool.domain().with_sim(|s| s.image_all_pending()).unwrap()
}

/// An image taken inside a transaction that changed every collection, as
/// a kill there would leave it (recovery rolls the transaction back).
fn image_mid_tx(pool: &Pool, set: Set) -> Vec<u8> {
    let c = handles(set);
    let mut img = None;
    let _ = pool.transaction(|tx| {
        for i in 0..40 {
            c.bt.insert(tx, 1000 + i, i)?;
            c.bs.insert(tx, skey(1000 + i), sval(i))?;
            c.hm.remove(tx, &(i * 11))?;
            c.vc.push(tx, i)?;
        }
        c.ls.pop_back(tx)?;
        c.bl.truncate(tx, 100)?;
        c.bt.pop_first(tx)?;
        img = Some(pool.domain().with_sim(|s| s.image_all_pending()).unwrap());
        Err::<(), _>(Error::Pool(rewind::Error::Aborted))
    });
    img.unwrap()
}

/// Every block of every collection, with the collection's index.
fn blocks(pool: &Pool, set: Set) -> Vec<(usize, u64)> {
    let c = handles(set);
    let lists = [
        c.bt.blocks(pool).unwrap(),
        c.bs.blocks(pool).unwrap(),
        c.hm.blocks(pool).unwrap(),
        c.vc.blocks(pool).unwrap(),
        c.ls.blocks(pool).unwrap(),
        c.bl.blocks(pool).unwrap(),
    ];
    let mut out = Vec::new();
    for (i, l) in lists.into_iter().enumerate() {
        out.extend(l.into_iter().map(|b| (i, b)));
    }
    out
}

/// One change to an image: `width` bytes (1, 4 or 8) at `off` set to the
/// low bytes of `value`.
#[derive(Clone, Copy, Debug)]
struct Poke {
    off: u64,
    width: usize,
    value: u64,
}

fn word(img: &[u8], off: u64) -> u64 {
    let o = off as usize;
    u64::from_le_bytes(img[o..o + 8].try_into().unwrap())
}

/// The damage of case `seed`: one to three pokes into the collections'
/// blocks.
fn damage(img: &[u8], blocks: &[(usize, u64)], seed: u64) -> Vec<Poke> {
    let mut rng = SplitMix64::seed_from_u64(seed);
    let mut pick = |n: u64| rng.next_u64() % n;
    let n = 1 + pick(3);
    let mut pokes = Vec::new();
    for _ in 0..n {
        // Headers more often than their share: they hold every count.
        let (_, blk) = if pick(3) == 0 {
            let hdrs: Vec<_> = blocks
                .iter()
                .enumerate()
                .filter(|(i, (c, b))| *i == 0 || blocks[i - 1].0 != *c || *b == 0)
                .map(|(_, x)| *x)
                .collect();
            hdrs[pick(hdrs.len() as u64) as usize]
        } else {
            blocks[pick(blocks.len() as u64) as usize]
        };
        let width = [1usize, 4, 8][pick(3) as usize];
        let within = if pick(2) == 0 { 160 } else { 1024 };
        let off = (blk + pick(within)) / width as u64 * width as u64;
        if off as usize + 8 > img.len() {
            continue;
        }
        let old = word(img, off);
        let other = blocks[pick(blocks.len() as u64) as usize].1;
        let value = match pick(14) {
            0 => 0,
            1 => 1,
            2 => u64::MAX,
            3 => 1 << 40,
            4 => 1 << 60,
            5 => old ^ (1 << pick(64)),
            6 => old.wrapping_add(8),
            7 => old.wrapping_sub(8),
            8 => other,
            9 => other + 8 * pick(8),
            10 => blk,
            11 => u32::MAX as u64,
            12 => img.len() as u64 - 8,
            _ => pick(u64::MAX),
        };
        pokes.push(Poke { off, width, value });
    }
    pokes
}

fn apply(img: &mut [u8], pokes: &[Poke]) {
    for p in pokes {
        let o = p.off as usize;
        img[o..o + p.width].copy_from_slice(&p.value.to_le_bytes()[..p.width]);
    }
}

/// Asserts an error is typed and says something.
fn said(e: &Error) {
    assert!(!e.to_string().is_empty(), "{e:?}");
}

/// Drains a scan: at most `STEP_CAP` items, ending at its first error.
fn drain<T>(what: &str, it: impl Iterator<Item = Result<T, Error>>) -> usize {
    let mut n = 0;
    for item in it {
        n += 1;
        assert!(
            n <= STEP_CAP,
            "{what}: a scan past {STEP_CAP} items (a cycle?)"
        );
        if let Err(e) = item {
            said(&e);
            break;
        }
    }
    n
}

fn ok_or_typed<T>(r: Result<T, Error>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            said(&e);
            None
        }
    }
}

/// Every read of every collection through `&Pool` and through a
/// transaction; returns the steps taken.
fn walk(pool: &Pool, set: Set) -> usize {
    let c = handles(set);
    let mut steps = 0;
    // B+-tree of u64.
    ok_or_typed(c.bt.len(pool));
    ok_or_typed(c.bt.height(pool));
    ok_or_typed(c.bt.check_invariants(pool));
    ok_or_typed(c.bt.blocks(pool));
    ok_or_typed(c.bt.first_key_value(pool));
    ok_or_typed(c.bt.last_key_value(pool));
    for k in [0u64, 7, 150, 300, u64::MAX] {
        ok_or_typed(c.bt.get(pool, &k));
    }
    if let Some(it) = ok_or_typed(c.bt.iter(pool)) {
        steps += drain("btree iter", it);
    }
    if let Some(it) = ok_or_typed(c.bt.iter(pool)) {
        steps += drain("btree iter rev", it.rev());
    }
    if let Some(it) = ok_or_typed(c.bt.range(pool, 50u64..250)) {
        steps += drain("btree range", it);
    }
    if let Some(it) = ok_or_typed(c.bt.range(pool, (Bound::Excluded(20u64), Bound::Included(200))))
    {
        steps += drain("btree range rev", it.rev());
    }
    // B+-tree of strings.
    ok_or_typed(c.bs.len(pool));
    ok_or_typed(c.bs.check_invariants(pool));
    ok_or_typed(c.bs.blocks(pool));
    ok_or_typed(c.bs.first_key_value(pool));
    ok_or_typed(c.bs.last_key_value(pool));
    for i in [0u64, 3, 33, 60, 297] {
        ok_or_typed(c.bs.get(pool, skey(i).as_str()));
    }
    if let Some(it) = ok_or_typed(c.bs.iter(pool)) {
        steps += drain("string btree iter", it);
    }
    if let Some(it) = ok_or_typed(c.bs.iter(pool)) {
        steps += drain("string btree iter rev", it.rev());
    }
    let (a, b) = (skey(30), skey(200));
    if let Some(it) = ok_or_typed(c.bs.range(
        pool,
        (Bound::Included(a.as_str()), Bound::Excluded(b.as_str())),
    )) {
        steps += drain("string btree range rev", it.rev());
    }
    // Hash map.
    ok_or_typed(c.hm.len(pool));
    ok_or_typed(c.hm.check_invariants(pool));
    ok_or_typed(c.hm.blocks(pool));
    for k in [0u64, 11, 110, 3289, 5] {
        ok_or_typed(c.hm.get(pool, &k));
    }
    if let Some(it) = ok_or_typed(c.hm.iter(pool)) {
        steps += drain("hash iter", it);
    }
    if let Some(e) = ok_or_typed(c.hm.entries(pool)) {
        steps += e.len();
    }
    // Vec.
    if let Some(n) = ok_or_typed(c.vc.len(pool)) {
        for i in [0, 1, n / 2, n.saturating_sub(1), n, u64::MAX] {
            ok_or_typed(c.vc.get(pool, i));
        }
    }
    ok_or_typed(c.vc.blocks(pool));
    if let Some(all) = ok_or_typed(c.vc.to_vec(pool)) {
        steps += all.len();
    }
    // List.
    ok_or_typed(c.ls.check_invariants(pool));
    ok_or_typed(c.ls.blocks(pool));
    ok_or_typed(c.ls.front(pool));
    ok_or_typed(c.ls.back(pool));
    if let Some(n) = ok_or_typed(c.ls.len(pool)) {
        for i in [0, 1, n / 2, n.saturating_sub(1), n, u64::MAX] {
            ok_or_typed(c.ls.get(pool, i));
        }
    }
    if let Some(it) = ok_or_typed(c.ls.iter(pool)) {
        steps += drain("list iter", it);
    }
    if let Some(it) = ok_or_typed(c.ls.iter(pool)) {
        steps += drain("list iter rev", it.rev());
    }
    if let Some(Some(mut cur)) = ok_or_typed(c.ls.cursor(pool, 0)) {
        for _ in 0..STEP_CAP {
            ok_or_typed(c.ls.value(pool, cur));
            match ok_or_typed(c.ls.next(pool, cur)) {
                Some(Some(n)) => cur = n,
                _ => break,
            }
            steps += 1;
        }
    }
    // Blob.
    ok_or_typed(c.bl.len(pool));
    ok_or_typed(c.bl.capacity(pool));
    ok_or_typed(c.bl.blocks(pool));
    if let Some(all) = ok_or_typed(c.bl.read(pool)) {
        steps += all.len() / 64;
    }
    let mut buf = [0u8; 100];
    for at in [0u64, 2900, 2999, u64::MAX - 50] {
        ok_or_typed(c.bl.read_at(pool, at, &mut buf));
    }
    // The same through a transaction (shared locks, its own view).
    let r = pool.transaction(|tx| {
        ok_or_typed(c.bt.len_tx(tx));
        ok_or_typed(c.bt.get_tx(tx, &150));
        if let Some(it) = ok_or_typed(c.bt.iter_tx(tx)) {
            steps += drain("btree iter_tx", it.rev());
        }
        if let Some(it) = ok_or_typed(c.bs.range_tx(tx, ..)) {
            steps += drain("string btree range_tx", it);
        }
        ok_or_typed(c.hm.get_tx(tx, &110));
        if let Some(it) = ok_or_typed(c.hm.iter_tx(tx)) {
            steps += drain("hash iter_tx", it);
        }
        ok_or_typed(c.vc.get_tx(tx, 3));
        ok_or_typed(c.ls.get_tx(tx, 3));
        ok_or_typed(c.bl.read_tx(tx));
        Ok::<_, Error>(())
    });
    ok_or_typed(r);
    steps
}

/// A change to every collection, each in a transaction of its own: `Ok`
/// or a typed error (the transaction then rolls back).
fn change(pool: &Pool, set: Set) {
    let c = handles(set);
    ok_or_typed(pool.transaction(|tx| c.bt.insert(tx, 5000, 1)));
    ok_or_typed(pool.transaction(|tx| c.bt.remove(tx, &14)));
    ok_or_typed(pool.transaction(|tx| c.bt.pop_last(tx)));
    ok_or_typed(pool.transaction(|tx| c.bs.insert(tx, skey(5000), sval(77))));
    ok_or_typed(pool.transaction(|tx| c.bs.remove(tx, skey(3).as_str())));
    ok_or_typed(pool.transaction(|tx| c.hm.insert(tx, 5000, 1)));
    ok_or_typed(pool.transaction(|tx| c.hm.remove(tx, &110)));
    ok_or_typed(pool.transaction(|tx| c.vc.push(tx, 5)));
    ok_or_typed(pool.transaction(|tx| c.vc.set(tx, 2, 5)));
    ok_or_typed(pool.transaction(|tx| c.vc.pop(tx)));
    ok_or_typed(pool.transaction(|tx| c.ls.push_front(tx, 5)));
    ok_or_typed(pool.transaction(|tx| c.ls.remove(tx, 2)));
    ok_or_typed(pool.transaction(|tx| c.bl.append(tx, b"more")));
    ok_or_typed(pool.transaction(|tx| c.bl.write_at(tx, 10, b"xyz")));
}

/// One damaged image: open, walk, change, walk again.
/// Returns the steps of the first walk (0: the pool was refused).
fn run_case(img: Vec<u8>, set: Set) -> usize {
    let pool = match Pool::open_image(img, LAYOUT) {
        Ok(p) => p,
        Err(e) => {
            said(&Error::Pool(e));
            return 0;
        }
    };
    let steps = walk(&pool, set);
    change(&pool, set);
    walk(&pool, set);
    steps
}

/// The child: every case of configuration `which` (an index into
/// `configs`), each named on stderr before it runs.
fn child(which: usize) {
    let limit = rustix::process::Rlimit {
        current: Some(ADDRESS_SPACE),
        maximum: Some(ADDRESS_SPACE),
    };
    rustix::process::setrlimit(rustix::process::Resource::As, limit).unwrap();
    let (v, p) = configs()[which];
    let (pool, set) = build(v, p);
    let clean = image(&pool);
    let mid = image_mid_tx(&pool, set);
    // Undamaged, both open and walk whole.
    for img in [&clean, &mid] {
        let again = Pool::open_image(img.clone(), LAYOUT).unwrap();
        let c = handles(set);
        c.bt.check_invariants(&again).unwrap();
        c.bs.check_invariants(&again).unwrap();
        c.hm.check_invariants(&again).unwrap();
        c.ls.check_invariants(&again).unwrap();
        assert!(walk(&again, set) > 500);
    }
    let blocks = blocks(&pool, set);
    drop(pool);
    let (mut opened, mut steps) = (0, 0);
    // `REWIND_HOSTILE_ONLY=N`: case N alone (to replay one a run named).
    let only: Option<u64> = std::env::var("REWIND_HOSTILE_ONLY")
        .ok()
        .map(|s| s.parse().unwrap());
    for case in 0..cases() {
        if only.is_some_and(|o| o != case) {
            continue;
        }
        let base = if case % 4 == 3 { &mid } else { &clean };
        let pokes = damage(base, &blocks, case * 0x9e37_79b9 + which as u64);
        eprintln!("case {which}/{case} ({v:?}/{p:?}): {pokes:x?}");
        if only.is_some() {
            for pk in &pokes {
                let within = blocks
                    .iter()
                    .filter(|(_, b)| *b <= pk.off)
                    .max_by_key(|(_, b)| *b);
                eprintln!("  {:#x}: collection, block {within:x?}", pk.off);
            }
        }
        let mut img = base.clone();
        apply(&mut img, &pokes);
        let n = run_case(img, set);
        opened += (n > 0) as u64;
        steps += n;
    }
    eprintln!(
        "done {which}: {} cases, {opened} opened, {steps} steps walked",
        cases()
    );
}

#[test]
fn damaged_collections_end_in_ok_or_a_typed_error() {
    if let Ok(which) = std::env::var(CHILD) {
        child(which.parse().unwrap());
        return;
    }
    let exe = std::env::current_exe().unwrap();
    for which in 0..configs().len() {
        let mut c = Command::new(&exe)
            .args([
                "--exact",
                "damaged_collections_end_in_ok_or_a_typed_error",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, which.to_string())
            .env("RUST_BACKTRACE", "0")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = String::new();
        c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        let status = c.wait().unwrap();
        if let Some(done) = err.lines().find(|l| l.starts_with("done")) {
            println!("{done}");
        }
        let tail: Vec<&str> = err.lines().rev().take(30).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        let last = err.lines().rev().find(|l| l.starts_with("case"));
        assert!(
            status.success() && err.contains(&format!("done {which}")),
            "configuration {which}: the child ended {status} in {}; the last of its \
             stderr:\n{}",
            last.unwrap_or("no case"),
            tail.join("\n")
        );
    }
}

// Defects the damaged images found, each as the smallest damage that
// shows it, written through a transaction at the offsets
// docs/collections.md draws.

fn small_pool() -> Pool {
    Pool::create_sim("hostile-small", 4 << 20, &PoolConfig::default()).unwrap()
}

/// Overwrites the little-endian `u64` at `off`.
fn poke(pool: &Pool, off: u64, v: u64) {
    pool.transaction(|tx| tx.write_bytes(off, &v.to_le_bytes()))
        .unwrap();
}

fn peek(pool: &Pool, off: u64) -> u64 {
    let mut b = [0u8; 8];
    pool.read_bytes(off, &mut b).unwrap();
    u64::from_le_bytes(b)
}

fn labelled<T: std::fmt::Debug>(what: &str, r: Result<T, Error>) {
    assert!(matches!(r, Err(Error::Corrupt { .. })), "{what}: {r:?}");
}

fn corrupt<T: std::fmt::Debug>(r: Result<T, Error>) {
    assert!(matches!(r, Err(Error::Corrupt { .. })), "{r:?}");
}

/// Drains a scan that must end in `Corrupt` within `cap` items.
fn ends_corrupt<T: std::fmt::Debug>(cap: usize, it: impl Iterator<Item = Result<T, Error>>) {
    let mut n = 0;
    for item in it {
        n += 1;
        assert!(n <= cap, "a scan past {cap} items");
        if item.is_err() {
            return corrupt(item);
        }
    }
    panic!("the scan ended without an error after {n} items");
}

/// A list whose tail (or a node's `prev`) is within 16 of `u64::MAX`:
/// `get` of the last element added 16 to it for the value
/// (`List::value_in`: "attempt to add with overflow", a panic in debug
/// builds, a wrapped offset in release), `push_back` added 8 for the old
/// tail's `next`. Now `Corrupt`.
#[test]
fn list_with_an_end_at_the_end_of_the_address_space() {
    for end in [u64::MAX, u64::MAX - 7, u64::MAX - 15] {
        let pool = small_pool();
        let l = pool
            .transaction(|tx| {
                let l = Ls::create(tx)?;
                for i in 0..3 {
                    l.push_back(tx, i)?;
                }
                Ok::<_, Error>(l)
            })
            .unwrap();
        let hdr = l.as_ptr().offset();
        poke(&pool, hdr + 32, end); // tail
        assert!(l.get(&pool, 2).is_err());
        assert!(l.back(&pool).is_err());
        assert!(pool.transaction(|tx| l.push_back(tx, 9)).is_err());
        assert!(pool.transaction(|tx| l.pop_back(tx)).is_err());
        corrupt(l.check_invariants(&pool));
        // The middle node's `prev` (node + 0) at the end instead.
        poke(&pool, hdr + 32, peek(&pool, hdr + 24)); // tail back to a node
        let pool = small_pool();
        let l = pool
            .transaction(|tx| {
                let l = Ls::create(tx)?;
                for i in 0..3 {
                    l.push_back(tx, i)?;
                }
                Ok::<_, Error>(l)
            })
            .unwrap();
        let head = peek(&pool, l.as_ptr().offset() + 24);
        let mid = peek(&pool, head + 8);
        poke(&pool, mid, end);
        assert!(pool.transaction(|tx| l.remove(tx, 1)).is_err());
        corrupt(l.check_invariants(&pool));
    }
}

/// A leaf of a B+-tree whose `next` names itself: a scan through `&Pool`
/// went round it for ever. Its bound on the entries it may yield (twice
/// the largest length read, plus a leaf: writers may insert ahead of a
/// scan) was recomputed from the previous bound rather than from the
/// length read, so it doubled at each check and never held. Now
/// `Corrupt` after at most that bound, through `&Pool` and through a
/// transaction, forward and backward.
#[test]
fn btree_leaf_chain_with_a_cycle_ends() {
    let pool = small_pool();
    let m = pool
        .transaction(|tx| {
            let m = BtU::create_with_fanout(tx, 4)?;
            for i in 0..40 {
                m.insert(tx, i, i)?;
            }
            Ok::<_, Error>(m)
        })
        .unwrap();
    let first = peek(&pool, m.as_ptr().offset() + 24);
    poke(&pool, first + 16, first); // next: itself
    ends_corrupt(2 * 40 + 64 + 1, m.iter(&pool).unwrap());
    ends_corrupt(2 * 40 + 64 + 1, m.range(&pool, 0u64..).unwrap());
    pool.transaction(|tx| {
        ends_corrupt(41, m.iter_tx(tx).unwrap());
        Ok::<_, Error>(())
    })
    .unwrap();
    corrupt(m.check_invariants(&pool));
}

/// Stored lengths beyond what the pool could hold: a hash map's `len` of
/// 2^61 made `entries` ask for a buffer of that many entries at once
/// ("capacity overflow", a panic; a smaller huge one an allocation of
/// many GiB), and any damaged length bounded the walks of a chain with a
/// cycle by itself (2^40 steps: a hang). Now `Corrupt` at the header for
/// the hash map, the list and the B+-tree.
#[test]
fn lengths_larger_than_the_pool_could_hold() {
    for len in [1u64 << 61, u64::MAX, 1 << 40, (4 << 20) / 64 + 1] {
        let pool = small_pool();
        let (h, l, b) = pool
            .transaction(|tx| {
                let h = Hm::create(tx)?;
                let l = Ls::create(tx)?;
                let b = BtU::create(tx)?;
                for i in 0..10 {
                    h.insert(tx, i, i)?;
                    l.push_back(tx, i)?;
                    b.insert(tx, i, i)?;
                }
                Ok::<_, Error>((h, l, b))
            })
            .unwrap();
        // A cycle in each: an entry's, a node's next naming itself.
        let table = peek(&pool, h.as_ptr().offset() + 24);
        let entry = (0..16)
            .map(|i| peek(&pool, table + 8 * i))
            .find(|&e| e != 0)
            .unwrap();
        poke(&pool, entry, entry);
        let node = peek(&pool, l.as_ptr().offset() + 24);
        poke(&pool, node + 8, node);
        let leaf = peek(&pool, b.as_ptr().offset() + 24);
        poke(&pool, leaf + 16, leaf);
        // The lengths: at 8 in the hash map's and the tree's headers, at
        // 16 in the list's.
        for at in [
            h.as_ptr().offset() + 8,
            l.as_ptr().offset() + 16,
            b.as_ptr().offset() + 8,
        ] {
            poke(&pool, at, len);
        }
        labelled("h.len(&pool)", h.len(&pool));
        labelled("h.entries(&pool)", h.entries(&pool));
        labelled(
            "h.iter(&pool).map(|it| it.count())",
            h.iter(&pool).map(|it| it.count()),
        );
        labelled("h.check_invariants(&pool)", h.check_invariants(&pool));
        labelled(
            "pool.transaction(|tx| h.insert(tx, 99, 1))",
            pool.transaction(|tx| h.insert(tx, 99, 1)),
        );
        labelled("l.len(&pool)", l.len(&pool));
        labelled(
            "l.iter(&pool).map(|it| it.count())",
            l.iter(&pool).map(|it| it.count()),
        );
        labelled("l.check_invariants(&pool)", l.check_invariants(&pool));
        if len > 4 << 20 {
            labelled("b.len(&pool)", b.len(&pool));
            labelled(
                "b.iter(&pool).map(|it| it.count())",
                b.iter(&pool).map(|it| it.count()),
            );
            labelled("b.insert", pool.transaction(|tx| b.insert(tx, 99, 1)));
        } else {
            // A length a tree of this pool could have (a leaf of 4 in
            // under 64 bytes each): the scan of the cycle is bounded by it.
            ends_corrupt(2 * 65537 + 65, b.iter(&pool).unwrap());
        }
    }
}

/// A leaf whose `next` names itself, below a range's start: the scan
/// passed over its entries (outside the range, so not counted against
/// the map's length) and read the leaf again, for ever. Found as case
/// 3/11908 of the damaged images (a byte of a leaf's `next` zeroed).
/// Now entries passed over beyond one leaf's worth at each end count
/// against the bound, and the scan ends in `Corrupt`.
#[test]
fn btree_range_over_a_cycle_of_entries_below_its_start_ends() {
    let pool = small_pool();
    let m = pool
        .transaction(|tx| {
            let m = BtU::create_with_fanout(tx, 4)?;
            for i in 0..40 {
                m.insert(tx, i * 10, i)?;
            }
            Ok::<_, Error>(m)
        })
        .unwrap();
    // The first leaf holds keys below 20 (fan-out 4, a split at each
    // fourth key): a range from 11 starts in it and passes over them.
    let first = peek(&pool, m.as_ptr().offset() + 24);
    poke(&pool, first + 16, first); // next: itself
    let mut n = 0;
    for item in m.range(&pool, 11u64..).unwrap() {
        n += 1;
        assert!(n <= 2 * 40 + 64 + 1, "a scan past its bound");
        if item.is_err() {
            return corrupt(item);
        }
    }
    panic!("the scan ended without an error after {n} items");
}
