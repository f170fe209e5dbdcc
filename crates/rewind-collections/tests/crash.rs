//! Crash tests of every collection on the simulated persistence domain,
//! under every log variant × policy.
//!
//! For each transaction of a seeded program (1 to 8 operations, every
//! fourth transaction aborting), crash images are captured at fences
//! spread over the transaction: for each sampled fence, one image with
//! nothing pending persisted, one with everything, and one with a random
//! prefix per cache line. Every image is recovered and must give:
//!
//! * a structure whose invariants hold (`check_invariants`: for the
//!   B+-tree sorted keys, separators, equal leaf depths and fill factors);
//! * contents equal to the model before the transaction or after it;
//! * no leaked or lost block: the pool's allocated blocks (read from the
//!   allocator's media state) are exactly the root object's and the
//!   collection's reachable blocks (`blocks`), so neither a crash in a
//!   split, a table doubling or a buffer move leaves
//!   garbage allocated nor frees a live block.
//!
//! Budget: `TXS` transactions and `SAMPLES` fences per transaction per
//! configuration, counts only; one short B+-tree program is crashed at
//! every fence (about 25 s in all in the test profile on 2 idle cores).

mod common;

use std::collections::{BTreeMap as StdBTreeMap, HashMap as StdHashMap, VecDeque};
use std::fmt::Debug;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{PPtr, Pool, PoolConfig, Tx};
use rewind_collections::{BTreeMap, Blob, Error, FixedBytes, HashMap, List, Vec as PVec};

use common::{configs, name};

const SIZE: u64 = 2 << 20;
const LAYOUT: &str = "crash";
/// Transactions per program.
const TXS: usize = 10;
/// Fences per transaction at which images are captured (at most).
const SAMPLES: u64 = 6;

/// A collection under test: how to create it, change it, model it and
/// read it back (checking its invariants).
trait Subject {
    type Op: Clone + Debug;
    type State: Clone + PartialEq + Debug + Default;
    /// Creates the collection; returns its header offset.
    fn create(tx: &mut Tx<'_>) -> Result<u64, Error>;
    fn op(rng: &mut SmallRng) -> Self::Op;
    fn apply(hdr: u64, tx: &mut Tx<'_>, op: &Self::Op) -> Result<(), Error>;
    fn model(state: &mut Self::State, op: &Self::Op);
    /// The contents and every block the collection owns, after checking
    /// its invariants.
    fn observe(hdr: u64, pool: &Pool) -> Result<(Self::State, Vec<u64>), Error>;
}

fn program<S: Subject>(seed: u64, txs: usize) -> Vec<(Vec<S::Op>, bool)> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..txs)
        .map(|t| {
            let n = 1 + rng.gen_range(0..8);
            ((0..n).map(|_| S::op(&mut rng)).collect(), t % 4 == 3)
        })
        .collect()
}

fn header(pool: &Pool) -> u64 {
    let root: PPtr<u64> = pool.root().unwrap().expect("root set at setup");
    pool.read(root).unwrap()
}

/// Recovers `img` and checks it: invariants, blocks, and the contents,
/// which it returns.
fn recovered<S: Subject>(pool: &Pool) -> S::State {
    let hdr = header(pool);
    let (state, blocks) = S::observe(hdr, pool).unwrap_or_else(|e| panic!("{e}"));
    let root = pool.root::<u64>().unwrap().unwrap().offset();
    let mut owned: Vec<u64> = blocks;
    owned.push(root);
    owned.sort_unstable();
    let n = owned.len();
    owned.dedup();
    assert_eq!(owned.len(), n, "a block reachable twice");
    let mut allocated: Vec<u64> = rewind::alloc::allocated_blocks(pool.domain(), pool.layout())
        .unwrap()
        .into_iter()
        .map(|(off, _)| off)
        .collect();
    allocated.sort_unstable();
    assert_eq!(
        allocated, owned,
        "allocated blocks differ from reachable ones"
    );
    state
}

fn run<S: Subject>(pool: &Pool, ops: &[S::Op], abort: bool) {
    let hdr = header(pool);
    let r = pool.transaction(|tx| {
        for op in ops {
            S::apply(hdr, tx, op)?;
        }
        if abort {
            return Err(Error::from(rewind::Error::Aborted));
        }
        Ok(())
    });
    assert_eq!(r.is_err(), abort, "{r:?}");
}

fn fences(pool: &Pool) -> u64 {
    pool.domain().with_sim(|s| s.fences()).unwrap()
}

fn image(pool: &Pool) -> Vec<u8> {
    pool.domain().with_sim(|s| s.image_all_pending()).unwrap()
}

/// Runs the program on `cfg`, crashing each transaction at `samples`
/// fences spread over it (`u64::MAX`: at every fence); returns the number
/// of images checked.
fn crash_program<S: Subject>(cfg: &PoolConfig, prog: &[(Vec<S::Op>, bool)], samples: u64) -> usize {
    let pool = Pool::create_sim(LAYOUT, SIZE, cfg).unwrap();
    pool.transaction(|tx| {
        let hdr = S::create(tx)?;
        let root = tx.root::<u64>()?;
        tx.write(root, &hdr)?;
        Ok::<_, Error>(())
    })
    .unwrap();
    let mut model = S::State::default();
    let mut checked = 0;
    for (t, (ops, abort)) in prog.iter().enumerate() {
        let mut after = model.clone();
        if !abort {
            for op in ops {
                S::model(&mut after, op);
            }
        }
        let base = image(&pool);
        // The transaction on a copy, to count its fences.
        let copy = Pool::open_image(base.clone(), LAYOUT).unwrap();
        let start = fences(&copy);
        run::<S>(&copy, ops, *abort);
        let n = fences(&copy) - start;
        assert_eq!(recovered::<S>(&copy), after);
        copy.crash();
        for f in (1..=n).step_by(n.div_ceil(samples).max(1) as usize) {
            let p = Pool::open_image(base.clone(), LAYOUT).unwrap();
            let at = fences(&p) + f;
            p.domain()
                .with_sim_mut(|s| s.capture_at_fence(at, f))
                .unwrap();
            run::<S>(&p, ops, *abort);
            let imgs = p.domain().with_sim_mut(|s| s.take_captured()).unwrap();
            assert!(!imgs.is_empty(), "tx {t}: fence {f} of {n} never reached");
            p.crash();
            for img in imgs {
                let got = recovered::<S>(&Pool::open_image(img, LAYOUT).unwrap());
                assert!(
                    got == model || got == after,
                    "{}: tx {t} ({ops:?}, abort {abort}): crash at fence {f} of {n} recovered to {got:?}",
                    name(cfg)
                );
                checked += 1;
            }
        }
        run::<S>(&pool, ops, *abort);
        assert_eq!(recovered::<S>(&pool), after);
        model = after;
    }
    pool.crash();
    checked
}

fn crash_all<S: Subject>(seed: u64) {
    let mut total = 0;
    for (i, cfg) in configs().iter().enumerate() {
        // Each configuration its own program.
        let prog = program::<S>(
            seed ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            TXS,
        );
        let checked = crash_program::<S>(cfg, &prog, SAMPLES);
        // Under redo a transaction that allocates commits under one fence
        // (its allocations are entries of its commit group): fewer points.
        let per_tx = if name(cfg).ends_with("/redo") { 1 } else { 3 };
        assert!(
            checked >= TXS * per_tx,
            "{}: only {checked} images",
            name(cfg)
        );
        total += checked;
    }
    eprintln!(
        "{}: {total} crash images recovered and checked",
        std::any::type_name::<S>()
    );
}

// ---------------------------------------------------------------------------
// The B+-tree: fan-out 4, so most transactions split nodes (nested top
// actions under undo, part of the commit group under redo); byte-string keys, so the order is the strings'.

type Key = FixedBytes<3>;
type Tree = BTreeMap<Key, u64>;

#[derive(Clone, Debug)]
enum MapOp {
    Insert(Key, u64),
    Remove(Key),
}

fn key(rng: &mut SmallRng) -> Key {
    let n = rng.gen_range(0..4) as usize;
    let b: Vec<u8> = (0..n).map(|_| b'a' + rng.gen_range(0..5) as u8).collect();
    Key::new(b).unwrap()
}

struct TreeSubject;

impl Subject for TreeSubject {
    type Op = MapOp;
    type State = StdBTreeMap<Key, u64>;

    fn create(tx: &mut Tx<'_>) -> Result<u64, Error> {
        Ok(Tree::create_with_fanout(tx, 4)?.as_ptr().offset())
    }

    fn op(rng: &mut SmallRng) -> MapOp {
        let k = key(rng);
        if rng.gen_range(0..4) == 0 {
            MapOp::Remove(k)
        } else {
            MapOp::Insert(k, rng.gen::<u64>())
        }
    }

    fn apply(hdr: u64, tx: &mut Tx<'_>, op: &MapOp) -> Result<(), Error> {
        let t = Tree::from_ptr(PPtr::from_offset(hdr));
        match op {
            MapOp::Insert(k, v) => t.insert(tx, *k, *v).map(drop),
            MapOp::Remove(k) => t.remove(tx, k).map(drop),
        }
    }

    fn model(s: &mut Self::State, op: &MapOp) {
        match op {
            MapOp::Insert(k, v) => drop(s.insert(*k, *v)),
            MapOp::Remove(k) => drop(s.remove(k)),
        }
    }

    fn observe(hdr: u64, pool: &Pool) -> Result<(Self::State, Vec<u64>), Error> {
        let t = Tree::from_ptr(PPtr::from_offset(hdr));
        t.check_invariants(pool)?;
        let state = t.iter(pool)?.collect::<Result<_, _>>()?;
        Ok((state, t.blocks(pool)?))
    }
}

#[test]
fn btree_recovers_from_crashes() {
    crash_all::<TreeSubject>(0x5eed_0001);
}

/// A short B+-tree program crashed at every fence of every transaction
/// (not a sample), under every configuration.
#[test]
fn btree_recovers_from_a_crash_at_every_fence() {
    let mut total = 0;
    for cfg in &configs() {
        let prog = program::<TreeSubject>(0x5eed_0006, 3);
        let checked = crash_program::<TreeSubject>(cfg, &prog, u64::MAX);
        // Redo: one fence per transaction, splits included (see
        // `crash_all`).
        let per_tx = if name(cfg).ends_with("/redo") {
            3
        } else {
            3 * 4
        };
        assert!(
            checked >= 3 * per_tx,
            "{}: only {checked} images",
            name(cfg)
        );
        total += checked;
    }
    eprintln!("B+-tree, every fence: {total} crash images recovered and checked");
}

// ---------------------------------------------------------------------------
// The hash map: 16 buckets at first, so programs double the table.

struct HashSubject;

impl Subject for HashSubject {
    type Op = MapOp;
    type State = StdHashMap<Key, u64>;

    fn create(tx: &mut Tx<'_>) -> Result<u64, Error> {
        Ok(HashMap::<Key, u64>::create(tx)?.as_ptr().offset())
    }

    fn op(rng: &mut SmallRng) -> MapOp {
        TreeSubject::op(rng)
    }

    fn apply(hdr: u64, tx: &mut Tx<'_>, op: &MapOp) -> Result<(), Error> {
        let m = HashMap::<Key, u64>::from_ptr(PPtr::from_offset(hdr));
        match op {
            MapOp::Insert(k, v) => m.insert(tx, *k, *v).map(drop),
            MapOp::Remove(k) => m.remove(tx, k).map(drop),
        }
    }

    fn model(s: &mut Self::State, op: &MapOp) {
        match op {
            MapOp::Insert(k, v) => drop(s.insert(*k, *v)),
            MapOp::Remove(k) => drop(s.remove(k)),
        }
    }

    fn observe(hdr: u64, pool: &Pool) -> Result<(Self::State, Vec<u64>), Error> {
        let m = HashMap::<Key, u64>::from_ptr(PPtr::from_offset(hdr));
        m.check_invariants(pool)?;
        let state = m.entries(pool)?.into_iter().collect();
        Ok((state, m.blocks(pool)?))
    }
}

#[test]
fn hash_map_recovers_from_crashes() {
    crash_all::<HashSubject>(0x5eed_0002);
}

// ---------------------------------------------------------------------------
// The vector: pushes grow the buffer (allocate, copy, free).

#[derive(Clone, Debug)]
enum VecOp {
    Push(u64),
    Pop,
    Set(u64, u64),
}

struct VecSubject;

impl Subject for VecSubject {
    type Op = VecOp;
    type State = Vec<u64>;

    fn create(tx: &mut Tx<'_>) -> Result<u64, Error> {
        Ok(PVec::<u64>::create(tx)?.as_ptr().offset())
    }

    fn op(rng: &mut SmallRng) -> VecOp {
        match rng.gen_range(0..6) {
            0 => VecOp::Pop,
            1 => VecOp::Set(rng.gen::<u64>(), rng.gen::<u64>()),
            _ => VecOp::Push(rng.gen::<u64>()),
        }
    }

    fn apply(hdr: u64, tx: &mut Tx<'_>, op: &VecOp) -> Result<(), Error> {
        let v = PVec::<u64>::from_ptr(PPtr::from_offset(hdr));
        match *op {
            VecOp::Push(x) => v.push(tx, x),
            VecOp::Pop => v.pop(tx).map(drop),
            VecOp::Set(i, x) => match v.len_tx(tx)? {
                0 => Ok(()),
                n => v.set(tx, i % n, x),
            },
        }
    }

    fn model(s: &mut Vec<u64>, op: &VecOp) {
        match *op {
            VecOp::Push(x) => s.push(x),
            VecOp::Pop => drop(s.pop()),
            VecOp::Set(i, x) => {
                if !s.is_empty() {
                    let n = s.len() as u64;
                    s[(i % n) as usize] = x;
                }
            }
        }
    }

    fn observe(hdr: u64, pool: &Pool) -> Result<(Vec<u64>, Vec<u64>), Error> {
        let v = PVec::<u64>::from_ptr(PPtr::from_offset(hdr));
        Ok((v.to_vec(pool)?, v.blocks(pool)?))
    }
}

#[test]
fn vec_recovers_from_crashes() {
    crash_all::<VecSubject>(0x5eed_0003);
}

// ---------------------------------------------------------------------------
// The list: pushes and pops at both ends, removals in the middle.

#[derive(Clone, Debug)]
enum ListOp {
    PushFront(u64),
    PushBack(u64),
    PopFront,
    PopBack,
    Remove(u64),
}

struct ListSubject;

impl Subject for ListSubject {
    type Op = ListOp;
    type State = VecDeque<u64>;

    fn create(tx: &mut Tx<'_>) -> Result<u64, Error> {
        Ok(List::<u64>::create(tx)?.as_ptr().offset())
    }

    fn op(rng: &mut SmallRng) -> ListOp {
        match rng.gen_range(0..7) {
            0 | 1 => ListOp::PushFront(rng.gen::<u64>()),
            2 | 3 => ListOp::PushBack(rng.gen::<u64>()),
            4 => ListOp::PopFront,
            5 => ListOp::PopBack,
            _ => ListOp::Remove(rng.gen::<u64>()),
        }
    }

    fn apply(hdr: u64, tx: &mut Tx<'_>, op: &ListOp) -> Result<(), Error> {
        let l = List::<u64>::from_ptr(PPtr::from_offset(hdr));
        match *op {
            ListOp::PushFront(x) => l.push_front(tx, x),
            ListOp::PushBack(x) => l.push_back(tx, x),
            ListOp::PopFront => l.pop_front(tx).map(drop),
            ListOp::PopBack => l.pop_back(tx).map(drop),
            ListOp::Remove(i) => match l.len_tx(tx)? {
                0 => Ok(()),
                n => {
                    let c = l.cursor_tx(tx, i % n)?.expect("in bounds");
                    l.remove_at(tx, c).map(drop)
                }
            },
        }
    }

    fn model(s: &mut VecDeque<u64>, op: &ListOp) {
        match *op {
            ListOp::PushFront(x) => s.push_front(x),
            ListOp::PushBack(x) => s.push_back(x),
            ListOp::PopFront => drop(s.pop_front()),
            ListOp::PopBack => drop(s.pop_back()),
            ListOp::Remove(i) => {
                if !s.is_empty() {
                    let n = s.len() as u64;
                    s.remove((i % n) as usize);
                }
            }
        }
    }

    fn observe(hdr: u64, pool: &Pool) -> Result<(VecDeque<u64>, Vec<u64>), Error> {
        let l = List::<u64>::from_ptr(PPtr::from_offset(hdr));
        l.check_invariants(pool)?;
        let fwd: VecDeque<u64> = l.iter(pool)?.collect::<Result<_, _>>()?;
        let back: Vec<u64> = l.iter(pool)?.rev().collect::<Result<_, _>>()?;
        assert!(fwd.iter().rev().eq(back.iter()), "backward walk differs");
        Ok((fwd, l.blocks(pool)?))
    }
}

#[test]
fn list_recovers_from_crashes() {
    crash_all::<ListSubject>(0x5eed_0004);
}

// ---------------------------------------------------------------------------
// The blob: appends that move the buffer, writes in place, truncations.

#[derive(Clone, Debug)]
enum BlobOp {
    Append(Vec<u8>),
    Replace(Vec<u8>),
    WriteAt(u64, Vec<u8>),
    Truncate(u64),
    Shrink,
}

struct BlobSubject;

fn bytes(rng: &mut SmallRng) -> Vec<u8> {
    let n = if rng.gen_range(0..4) == 0 {
        rng.gen_range(0..600)
    } else {
        rng.gen_range(0..40)
    };
    let fill = rng.gen::<u64>() as u8;
    (0..n).map(|i| fill.wrapping_add(i as u8)).collect()
}

impl Subject for BlobSubject {
    type Op = BlobOp;
    type State = Vec<u8>;

    fn create(tx: &mut Tx<'_>) -> Result<u64, Error> {
        Ok(Blob::create(tx)?.as_ptr().offset())
    }

    fn op(rng: &mut SmallRng) -> BlobOp {
        match rng.gen_range(0..8) {
            0 => BlobOp::Replace(bytes(rng)),
            1 | 2 => BlobOp::WriteAt(rng.gen::<u64>(), bytes(rng)),
            3 => BlobOp::Truncate(rng.gen::<u64>()),
            4 => BlobOp::Shrink,
            _ => BlobOp::Append(bytes(rng)),
        }
    }

    fn apply(hdr: u64, tx: &mut Tx<'_>, op: &BlobOp) -> Result<(), Error> {
        let b = Blob::from_ptr(PPtr::from_offset(hdr));
        match op {
            BlobOp::Append(v) => b.append(tx, v),
            BlobOp::Replace(v) => b.replace(tx, v),
            BlobOp::WriteAt(at, v) => {
                let n = b.len_tx(tx)?;
                let room = n.saturating_sub(v.len() as u64);
                b.write_at(tx, at % (room + 1), &v[..v.len().min(n as usize)])
            }
            BlobOp::Truncate(n) => {
                let len = b.len_tx(tx)?;
                b.truncate(tx, n % (len + 1))
            }
            BlobOp::Shrink => b.shrink_to_fit(tx),
        }
    }

    fn model(s: &mut Vec<u8>, op: &BlobOp) {
        match op {
            BlobOp::Append(v) => s.extend_from_slice(v),
            BlobOp::Replace(v) => s.clone_from(v),
            BlobOp::WriteAt(at, v) => {
                let n = s.len();
                let room = n.saturating_sub(v.len()) as u64;
                let at = (at % (room + 1)) as usize;
                let v = &v[..v.len().min(n)];
                s[at..at + v.len()].copy_from_slice(v);
            }
            BlobOp::Truncate(n) => {
                let len = s.len() as u64;
                s.truncate((n % (len + 1)) as usize)
            }
            BlobOp::Shrink => {}
        }
    }

    fn observe(hdr: u64, pool: &Pool) -> Result<(Vec<u8>, Vec<u64>), Error> {
        let b = Blob::from_ptr(PPtr::from_offset(hdr));
        Ok((b.read(pool)?, b.blocks(pool)?))
    }
}

#[test]
fn blob_recovers_from_crashes() {
    crash_all::<BlobSubject>(0x5eed_0005);
}

/// The three changes of the B+-tree's leaves, each crashed at every fence
/// under every configuration: a leaf insert (one slot and the bitmap), a
/// split (a nested top action; kept when its insert aborts), a merge that
/// empties a leaf and hands the root to the merged leaf, and merges on
/// several levels; the split and the merge also aborted.
#[test]
fn btree_insert_split_and_merge_crash_at_every_fence() {
    let k = |s: &str| Key::new(s).unwrap();
    let ins = |s: &str, v: u64| MapOp::Insert(k(s), v);
    let rm = |s: &str| MapOp::Remove(k(s));
    let many: Vec<String> = (0..24)
        .map(|i| format!("{}{}", (b'a' + i / 5) as char, i % 5))
        .collect();
    let prog: Vec<(Vec<MapOp>, bool)> = vec![
        (vec![ins("a", 1), ins("b", 2), ins("c", 3)], false),
        (vec![ins("d", 4)], false),      // a leaf insert
        (vec![ins("e", 5)], true),       // a split, kept, the insert undone
        (vec![ins("e", 5)], false),      // an insert beside the split
        (vec![rm("a"), rm("b")], true),  // a merge, undone
        (vec![rm("a"), rm("b")], false), // a merge: the root is a leaf again
        (many.iter().map(|s| ins(s, 7)).collect(), false),
        (many.iter().step_by(2).map(|s| rm(s)).collect(), false), // merges on two levels
    ];
    let mut total = 0;
    for cfg in &configs() {
        total += crash_program::<TreeSubject>(cfg, &prog[..6], u64::MAX);
        total += crash_program::<TreeSubject>(cfg, &prog, 8);
    }
    eprintln!("B+-tree insert, split and merge: {total} crash images recovered and checked");
}

// ---------------------------------------------------------------------------
// The B+-tree with byte-string keys and values: those over 20 bytes live
// in blocks of their own, allocated and freed by the same transaction as
// the slot that points at them.

#[derive(Clone, Debug)]
enum VarOp {
    Insert(String, String),
    Remove(String),
}

struct VarTreeSubject;

type VarTree = BTreeMap<String, String>;

/// A key of 1 to 70 bytes: out of line beyond 36, many sharing their
/// first 28 bytes (so a comparison reads the block).
fn long_key(rng: &mut SmallRng) -> String {
    let stem = ["", "a-shared-stem-of-thirty-bytes-", "b"][rng.gen_range(0..3) as usize];
    let tail = rng.gen_range(0..40) as usize;
    let c = (b'a' + rng.gen_range(0..4) as u8) as char;
    format!("{stem}{}", c.to_string().repeat(1 + tail))
}

impl Subject for VarTreeSubject {
    type Op = VarOp;
    type State = StdBTreeMap<String, String>;

    fn create(tx: &mut Tx<'_>) -> Result<u64, Error> {
        Ok(VarTree::create_with_fanout(tx, 4)?.as_ptr().offset())
    }

    fn op(rng: &mut SmallRng) -> VarOp {
        let k = long_key(rng);
        if rng.gen_range(0..4) == 0 {
            VarOp::Remove(k)
        } else {
            let v = "v".repeat(rng.gen_range(0..50) as usize);
            VarOp::Insert(k, v)
        }
    }

    fn apply(hdr: u64, tx: &mut Tx<'_>, op: &VarOp) -> Result<(), Error> {
        let t = VarTree::from_ptr(PPtr::from_offset(hdr));
        match op {
            VarOp::Insert(k, v) => t.insert(tx, k.clone(), v.clone()).map(drop),
            VarOp::Remove(k) => t.remove(tx, k).map(drop),
        }
    }

    fn model(s: &mut Self::State, op: &VarOp) {
        match op {
            VarOp::Insert(k, v) => drop(s.insert(k.clone(), v.clone())),
            VarOp::Remove(k) => drop(s.remove(k)),
        }
    }

    fn observe(hdr: u64, pool: &Pool) -> Result<(Self::State, Vec<u64>), Error> {
        let t = VarTree::from_ptr(PPtr::from_offset(hdr));
        t.check_invariants(pool)?;
        let state = t.iter(pool)?.collect::<Result<_, _>>()?;
        Ok((state, t.blocks(pool)?))
    }
}

#[test]
fn string_btree_recovers_from_crashes() {
    crash_all::<VarTreeSubject>(0x5eed_0007);
}

/// Out-of-line keys and values crashed at every fence under every
/// configuration: a leaf insert whose key and value get blocks, a value
/// replaced (a block allocated, one freed), a split whose separator is
/// cut short, a removal that frees blocks and merges; each also aborted.
#[test]
fn string_btree_out_of_line_insert_crash_at_every_fence() {
    let long = |c: char| format!("a-shared-stem-of-thirty-bytes-{}", c.to_string().repeat(20));
    let ins = |k: String, v: &str| VarOp::Insert(k, v.to_string());
    let big = "a value longer than thirty-six bytes: out of line";
    let prog: Vec<(Vec<VarOp>, bool)> = vec![
        (vec![ins("short".into(), "v")], false),
        (vec![ins(long('a'), big)], true),  // a leaf insert, undone
        (vec![ins(long('a'), big)], false), // a leaf insert: two blocks
        (vec![ins(long('a'), "small")], false), // the value's block freed
        (vec![ins(long('b'), big), ins(long('c'), big)], false),
        (vec![ins(long('d'), big)], true), // a split (kept), the insert undone
        (vec![ins(long('d'), big)], false),
        (
            vec![VarOp::Remove(long('a')), VarOp::Remove(long('b'))],
            true,
        ),
        (
            vec![VarOp::Remove(long('a')), VarOp::Remove(long('b'))],
            false,
        ),
    ];
    let mut total = 0;
    for cfg in &configs() {
        total += crash_program::<VarTreeSubject>(cfg, &prog, u64::MAX);
    }
    eprintln!("B+-tree with out-of-line strings, every fence: {total} crash images checked");
}
