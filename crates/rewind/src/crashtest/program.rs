//! Random transaction programs and the plain model they are checked
//! against. A program is a list of transactions of writes (single words and
//! multi-record byte ranges), allocations (only the first and last byte
//! written, so the zeroing shows), logged writes into existing objects,
//! frees, aborts and checkpoints, savepoints with partial rollbacks, nested
//! top actions (some failing, some inside transactions that then abort),
//! and single-write atomic updates; everything is derived from a seed.
//!
//! A transaction with nested top actions touches one half of its part of
//! the root outside them and the other half inside them, so what the
//! actions leave behind does not depend on the rest ([`effect`]).
//!
//! A two-thread program gives each thread its own part of the root (a
//! [`Part`]) and, in the [`Shape::Handoff`] shape, one slot that passes from
//! thread 0 to thread 1: thread 1 writes it only after thread 0's last write
//! of it has committed.

use std::ops::Range;

use bytemuck::{Pod, Zeroable};
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;

use crate::error::Error;
use crate::pool::{PPtr, Pool};
use crate::tx::Tx;

/// Word slots in the root.
pub const SLOTS: u64 = 24;
/// Object table entries.
pub const OBJS: u64 = 6;
/// Bytes of the byte range.
pub const BIG: usize = 600;

/// The pool's root object: one block holding the slots, the object table
/// and the byte range (so setup takes a single heap chunk).
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub struct Root {
    slots: [u64; SLOTS as usize],
    objs: [Obj; OBJS as usize],
    big: [u8; BIG],
}

/// Typed pointers into the root block.
#[derive(Clone, Copy)]
struct Parts {
    root: u64,
    slots: PPtr<u64>,
    objs: PPtr<Obj>,
    big: PPtr<u8>,
}

impl Parts {
    fn of(root: u64) -> Parts {
        let objs = root + 8 * SLOTS;
        Parts {
            root,
            slots: PPtr::from_offset(root),
            objs: PPtr::from_offset(objs),
            big: PPtr::from_offset(objs + std::mem::size_of::<Obj>() as u64 * OBJS),
        }
    }
}

/// An object table entry.
#[derive(Clone, Copy, Pod, Zeroable, Default, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Obj {
    ptr: u64,
    size: u64,
    fill: u64,
    /// Leading bytes holding `fill`; the rest must read zero.
    extent: u64,
}

/// One operation of a transaction.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// `slots[i] = v`.
    Write(u64, u64),
    /// `big[at..at+len] = byte` (several records).
    Big(usize, usize, u8),
    /// Allocate an object of `size` bytes into entry `k` if it is empty;
    /// its first `extent` bytes (clamped to the size) become `fill`, the
    /// rest stays zero: a reused block shows stale bytes if zeroing is lost.
    Alloc(u64, u64, u8, u64),
    /// Free entry `k`'s object.
    Free(u64),
    /// Logged write of `fill` over entry `k`'s first `extent` bytes
    /// (clamped), zeroing the rest of the old extent.
    Poke(u64, u8, u64),
    /// Take a savepoint (the transaction keeps a stack of them).
    Save,
    /// Roll back to the latest savepoint, which stays (nothing without one).
    Back,
    /// Begin a nested top action: the operations up to the matching
    /// [`Op::NtaEnd`] run inside it.
    NtaBegin,
    /// End the nested top action; `true` makes it fail (return an error),
    /// so it is rolled back and the transaction goes on.
    NtaEnd(bool),
    /// `slots[i] = v` by `Pool::atomic_write`, as a transaction of its own.
    Atomic(u64, u64),
    /// `big[at..at+len] = byte` by `Pool::atomic_write_bytes`, likewise.
    AtomicBig(usize, usize, u8),
}

impl Op {
    /// Whether this is a single-write atomic update (run outside any
    /// transaction).
    pub fn is_atomic(&self) -> bool {
        matches!(self, Op::Atomic(..) | Op::AtomicBig(..))
    }
}

/// What the plain operations of a transaction's `ops` amount to: with
/// `commit`, everything it keeps (savepoint rollbacks and failed nested top
/// actions resolved); without, what its first `ntas` nested top actions
/// leave behind (the rest is rolled back).
pub fn effect(ops: &[Op], commit: bool, ntas: usize) -> Vec<Op> {
    let (mut main, mut kept, mut saves) = (Vec::new(), Vec::new(), Vec::new());
    let (mut inside, mut cur, mut seen) = (false, Vec::new(), 0);
    for op in ops {
        match *op {
            Op::Save => saves.push(main.len()),
            Op::Back => {
                if let Some(&n) = saves.last() {
                    main.truncate(n);
                }
            }
            Op::NtaBegin => inside = true,
            Op::NtaEnd(fail) => {
                if !fail && (commit || seen < ntas) {
                    kept.append(&mut cur);
                }
                cur.clear();
                inside = false;
                seen += 1;
            }
            Op::Atomic(s, v) => main.push(Op::Write(s, v)),
            Op::AtomicBig(at, n, b) => main.push(Op::Big(at, n, b)),
            op if inside => cur.push(op),
            op => main.push(op),
        }
    }
    if commit {
        main.extend(kept);
        main
    } else {
        kept
    }
}

/// How many nested top actions `ops` holds.
pub fn nta_count(ops: &[Op]) -> usize {
    ops.iter().filter(|o| matches!(o, Op::NtaEnd(_))).count()
}

/// One transaction of a program.
#[derive(Clone, Debug)]
pub struct TxProg {
    /// Its operations.
    pub ops: Vec<Op>,
    /// Commit (true) or abort.
    pub commit: bool,
    /// Run a checkpoint after it.
    pub checkpoint: bool,
    /// Then run `Pool::sync` (under redo-async: the write cache drained).
    pub sync: bool,
    /// Two threads: starts only once this many transactions of the other
    /// thread have returned.
    pub after: Option<usize>,
}

/// The part of the root a thread's transactions touch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// Word slots.
    pub slots: Range<u64>,
    /// Object table entries.
    pub objs: Range<u64>,
    /// Bytes of the byte range.
    pub big: Range<usize>,
}

impl Part {
    /// Two halves of this part (for a transaction's main body and its
    /// nested top actions).
    pub fn split(&self) -> (Part, Part) {
        let cut = |r: &Range<u64>| {
            let m = r.start + (r.end - r.start) / 2;
            (r.start..m, m..r.end)
        };
        let (s0, s1) = cut(&self.slots);
        let (o0, o1) = cut(&self.objs);
        let (b0, b1) = cut(&(self.big.start as u64..self.big.end as u64));
        (
            Part {
                slots: s0,
                objs: o0,
                big: b0.start as usize..b0.end as usize,
            },
            Part {
                slots: s1,
                objs: o1,
                big: b1.start as usize..b1.end as usize,
            },
        )
    }

    /// Everything (one thread).
    pub fn all() -> Part {
        Part {
            slots: 0..SLOTS,
            objs: 0..OBJS,
            big: 0..BIG,
        }
    }

    /// Thread `t`'s half of the root (of two threads).
    pub fn half(t: usize) -> Part {
        let h = |n: u64| if t == 0 { 0..n / 2 } else { n / 2..n };
        let b = h(BIG as u64);
        Part {
            slots: h(SLOTS),
            objs: h(OBJS),
            big: b.start as usize..b.end as usize,
        }
    }
}

/// What kind of program to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Every kind of operation, at random.
    Mixed,
    /// Two threads: slot [`HANDOFF_SLOT`] is written last in thread 0's last
    /// transaction, then by a transaction of thread 1 that starts only after
    /// it returned, then by later ones of thread 1.
    Handoff,
    /// Allocation churn: mostly allocations (a third of them large runs)
    /// and frees, so blocks and runs are freed and reused within a few
    /// transactions, with extents shorter than the block so stale bytes
    /// show where zeroing is lost.
    Churn,
    /// Checkpoints: transactions of several word writes (records that fill
    /// log cells across cache lines), a checkpoint after every other one.
    Checkpoints,
    /// Log growth and exhaustion, run on a pool with the smallest log:
    /// transactions of 16 to 40 writes, which outgrow it, so the log grows
    /// into heap chunks and gives them back; some first take most of the
    /// heap with large objects, so growing fails and the transaction is
    /// doomed and rolled back.
    Grow,
    /// Transaction control: transactions with savepoints, rollbacks to
    /// them and nested top actions, between single-write atomic updates.
    Control,
    /// Reuse of freed blocks by the log, on the smallest log (as
    /// [`Shape::Grow`]): the heap filled with one-chunk objects, one
    /// transaction each; a transaction writing some of them (logged
    /// writes: under redo-async their values wait in the write cache) and
    /// freeing some; a later one freeing the others written; then
    /// transactions of 16 to 40 writes that grow the log into the freed
    /// chunks (the only free ones), with more writes and frees of the
    /// objects left. Under redo-async write-back runs at one point in 64
    /// (and at syncs), so values of a freed block often still wait when
    /// the log takes its chunk.
    Reuse,
}

impl Shape {
    /// Every shape.
    pub const ALL: [Shape; 7] = [
        Shape::Mixed,
        Shape::Handoff,
        Shape::Churn,
        Shape::Checkpoints,
        Shape::Grow,
        Shape::Control,
        Shape::Reuse,
    ];

    /// Whether its programs run on the smallest log (four buckets).
    pub fn smallest_log(self) -> bool {
        matches!(self, Shape::Grow | Shape::Reuse)
    }

    /// Its name in a configuration name.
    pub fn name(self) -> &'static str {
        match self {
            Shape::Mixed => "mixed",
            Shape::Handoff => "handoff",
            Shape::Churn => "churn",
            Shape::Checkpoints => "checkpoints",
            Shape::Grow => "grow",
            Shape::Control => "control",
            Shape::Reuse => "reuse",
        }
    }
}

/// The slot of the [`Shape::Handoff`] programs (in thread 0's part).
pub const HANDOFF_SLOT: u64 = 0;

/// The explorer's deterministic generator: SplitMix64 (rand_xoshiro's,
/// value-stable across versions, so a printed seed replays its program).
#[derive(Clone, Debug)]
pub struct Rng(SplitMix64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(SplitMix64::seed_from_u64(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// A random program of up to `max_tx` transactions over the whole root.
pub fn generate(seed: u64, max_tx: u64) -> Vec<TxProg> {
    let mut r = Rng::new(seed);
    random_txs(&mut r, max_tx, &Part::all(), Shape::Mixed)
}

/// A program of `threads` (1 or 2) threads: per thread, its transactions.
pub fn generate_threads(seed: u64, max_tx: u64, threads: usize, shape: Shape) -> Vec<Vec<TxProg>> {
    let mut r = Rng::new(seed);
    if threads < 2 {
        return vec![random_txs(&mut r, max_tx, &Part::all(), shape)];
    }
    let mut progs: Vec<Vec<TxProg>> = (0..2)
        .map(|t| random_txs(&mut r, max_tx, &Part::half(t), shape))
        .collect();
    if shape == Shape::Handoff {
        // Thread 0's last transaction writes the slot last (so it is in the
        // commit group); thread 1 takes it over once that has returned.
        // (An atomic update is not a transaction to add writes to.)
        if progs[0].last().is_some_and(is_atomic) {
            progs[0].push(plain_tx(&mut r, &Part::half(0)));
        }
        let last = progs[0].last_mut().expect("at least one transaction");
        last.ops.push(Op::Write(HANDOFF_SLOT, r.next_u64()));
        last.commit = true;
        let n0 = progs[0].len();
        let at = r.below(progs[1].len() as u64 + 1) as usize;
        let mut take = plain_tx(&mut r, &Part::half(1));
        take.ops.push(Op::Write(HANDOFF_SLOT, r.next_u64()));
        take.commit = r.below(4) != 0;
        take.after = Some(n0);
        progs[1].insert(at, take);
        for t in progs[1][at + 1..].iter_mut() {
            if r.below(2) == 0 && !is_atomic(t) {
                t.ops.push(Op::Write(HANDOFF_SLOT, r.next_u64()));
            }
        }
    }
    progs
}

fn random_txs(r: &mut Rng, max_tx: u64, part: &Part, shape: Shape) -> Vec<TxProg> {
    if shape == Shape::Reuse {
        return reuse_txs(r, max_tx, part);
    }
    (0..1 + r.below(max_tx))
        .map(|_| match shape {
            Shape::Churn => churn_tx(r, part),
            Shape::Checkpoints => checkpoint_tx(r, part),
            Shape::Grow => grow_tx(r, part),
            Shape::Control => control_tx(r, part),
            Shape::Mixed | Shape::Handoff | Shape::Reuse => random_tx(r, part),
        })
        .collect()
}

fn checkpoint_tx(r: &mut Rng, part: &Part) -> TxProg {
    let ops = (0..2 + r.below(7))
        .map(|_| Op::Write(pick(r, &part.slots), r.next_u64()))
        .collect();
    TxProg {
        ops,
        commit: r.below(6) != 0,
        checkpoint: r.below(2) == 0,
        after: None,
        sync: false,
    }
}

/// A write of up to 400 bytes (several records) inside the byte range.
fn big_op(r: &mut Rng, part: &Part) -> Op {
    let room = (part.big.end - part.big.start) as u64;
    let at = part.big.start + r.below(room - 1) as usize;
    let len = (1 + r.below(400) as usize).min(part.big.end - at);
    Op::Big(at, len, r.next_u64() as u8)
}

fn grow_tx(r: &mut Rng, part: &Part) -> TxProg {
    let mut ops = Vec::new();
    if r.below(3) == 0 {
        // Large objects first: the heap has about six chunks, so with two
        // of these the log's growth may find none left.
        for _ in 0..1 + r.below(2) {
            let size = 300_000 + r.below(200_000);
            ops.push(Op::Alloc(
                pick(r, &part.objs),
                size,
                1 + r.below(255) as u8,
                64,
            ));
        }
    }
    for _ in 0..16 + r.below(25) {
        ops.push(Op::Write(pick(r, &part.slots), r.next_u64()));
    }
    if r.below(3) == 0 {
        ops.push(big_op(r, part));
    }
    TxProg {
        ops,
        commit: r.below(5) != 0,
        checkpoint: r.below(4) == 0,
        after: None,
        sync: false,
    }
}

/// A [`Shape::Reuse`] program: the heap filled with one-chunk objects,
/// a transaction each (so that one finding the heap full is all that
/// fails), each followed by a sync (the log, its records released, keeps
/// no chunk: the objects take them all); then a transaction writing some
/// objects (logged writes) and freeing some of them, and one freeing the
/// others written; then 1 to `max_tx` transactions of 16 to 40 writes,
/// which grow the log into the freed chunks (the only free ones), at
/// times freeing or writing what is left; a sync at the end.
fn reuse_txs(r: &mut Rng, max_tx: u64, part: &Part) -> Vec<TxProg> {
    let tx = |ops, commit, checkpoint, sync| TxProg {
        ops,
        commit,
        checkpoint,
        after: None,
        sync,
    };
    let mut out = Vec::new();
    for k in part.objs.clone() {
        // More than the largest class, at most a chunk: a run of one chunk.
        let size = 70_000 + r.below(190_000);
        let op = Op::Alloc(k, size, 1 + r.below(255) as u8, 1 + r.below(256));
        out.push(tx(vec![op], true, false, true));
    }
    // Written (a few lines at the block's start, where a log chunk begins
    // with a block's header and cells), then freed, at once or in the next
    // transaction.
    let (mut now, mut later) = (Vec::new(), Vec::new());
    let mut ops = Vec::new();
    for k in part.objs.clone() {
        if r.below(4) != 0 {
            ops.push(Op::Poke(k, 1 + r.below(255) as u8, 1 + r.below(192)));
            if r.below(3) == 0 {
                now.push(Op::Free(k));
            } else {
                later.push(Op::Free(k));
            }
        }
    }
    ops.extend(now);
    out.push(tx(ops, r.below(8) != 0, false, false));
    if !later.is_empty() {
        out.push(tx(later, r.below(8) != 0, false, false));
    }
    for i in 0..1 + r.below(max_tx) {
        // The first more than the log's four buckets hold (16 cells each),
        // so that its records reach the chunk it grows into.
        let n = if i == 0 {
            64 + r.below(33)
        } else {
            16 + r.below(25)
        };
        let mut ops: Vec<Op> = (0..n)
            .map(|_| Op::Write(pick(r, &part.slots), r.next_u64()))
            .collect();
        // Not in the first: its writes alone, to lines no commit has left
        // in the write cache, so that nothing drains the cache before the
        // log has taken a freed chunk (an in-place store to a cached line
        // drains it, and a large transaction's writes are stored in place
        // before it commits).
        for _ in 0..if i == 0 { 0 } else { r.below(3) } {
            let k = pick(r, &part.objs);
            let at = r.below(ops.len() as u64 + 1) as usize;
            let op = match r.below(3) {
                0 => Op::Free(k),
                _ => Op::Poke(k, 1 + r.below(255) as u8, 1 + r.below(192)),
            };
            ops.insert(at, op);
        }
        if i > 0 && r.below(3) == 0 {
            ops.push(big_op(r, part));
        }
        out.push(tx(ops, r.below(5) != 0, r.below(8) == 0, false));
    }
    if let Some(last) = out.last_mut() {
        last.sync = true;
    }
    out
}

fn churn_tx(r: &mut Rng, part: &Part) -> TxProg {
    let ops = (0..1 + r.below(6))
        .map(|_| {
            let k = pick(r, &part.objs);
            match r.below(8) {
                0..=3 => {
                    let size = if r.below(3) == 0 {
                        70_000 + r.below(150_000)
                    } else {
                        64 + r.below(448)
                    };
                    Op::Alloc(k, size, 1 + r.below(255) as u8, 1 + r.below(size))
                }
                4..=6 => Op::Free(k),
                _ => Op::Poke(k, 1 + r.below(255) as u8, 1 + r.below(512)),
            }
        })
        .collect();
    TxProg {
        ops,
        commit: r.below(6) != 0,
        checkpoint: r.below(4) == 0,
        after: None,
        sync: false,
    }
}

fn pick(r: &mut Rng, range: &Range<u64>) -> u64 {
    range.start + r.below(range.end - range.start)
}

fn random_op(r: &mut Rng, part: &Part) -> Op {
    match r.below(12) {
        0..=4 => Op::Write(pick(r, &part.slots), r.next_u64()),
        5 => big_op(r, part),
        6 | 7 => {
            let size = if r.below(10) == 0 {
                70_000 + r.below(150_000)
            } else {
                1 + r.below(300)
            };
            Op::Alloc(
                pick(r, &part.objs),
                size,
                1 + r.below(255) as u8,
                1 + r.below(512),
            )
        }
        8 | 9 => Op::Free(pick(r, &part.objs)),
        _ => Op::Poke(
            pick(r, &part.objs),
            1 + r.below(255) as u8,
            1 + r.below(512),
        ),
    }
}

fn random_tx(r: &mut Rng, part: &Part) -> TxProg {
    let ops = match r.below(8) {
        0 => vec![atomic_op(r, part)],
        1..=2 => control_ops(r, part),
        _ => (0..r.below(14)).map(|_| random_op(r, part)).collect(),
    };
    let atomic = ops.first().is_some_and(Op::is_atomic);
    TxProg {
        ops,
        commit: atomic || r.below(5) != 0,
        checkpoint: r.below(4) == 0,
        after: None,
        sync: false,
    }
}

fn control_tx(r: &mut Rng, part: &Part) -> TxProg {
    let atomic = r.below(3) == 0;
    TxProg {
        ops: if atomic {
            vec![atomic_op(r, part)]
        } else {
            control_ops(r, part)
        },
        commit: atomic || r.below(5) != 0,
        checkpoint: r.below(4) == 0,
        after: None,
        sync: false,
    }
}

fn is_atomic(t: &TxProg) -> bool {
    t.ops.first().is_some_and(Op::is_atomic)
}

/// A random transaction that is not an atomic update.
fn plain_tx(r: &mut Rng, part: &Part) -> TxProg {
    loop {
        let t = random_tx(r, part);
        if !is_atomic(&t) {
            return t;
        }
    }
}

/// A single-write atomic update: a word (one store under force) or a byte
/// range (a transaction of one write).
fn atomic_op(r: &mut Rng, part: &Part) -> Op {
    if r.below(4) == 0 {
        let Op::Big(at, n, b) = big_op(r, part) else {
            unreachable!("big_op makes Big")
        };
        Op::AtomicBig(at, n, b)
    } else {
        Op::Atomic(pick(r, &part.slots), r.next_u64())
    }
}

/// Operations of a transaction using MARS's transaction control:
/// savepoints, rollbacks to them, and nested top actions (on the other
/// half of the part), some of which fail.
fn control_ops(r: &mut Rng, part: &Part) -> Vec<Op> {
    let (main, nta) = part.split();
    let mut ops = Vec::new();
    for _ in 0..2 + r.below(9) {
        match r.below(10) {
            0..=4 => ops.push(random_op(r, &main)),
            5 => ops.push(Op::Save),
            6 => ops.push(Op::Back),
            _ => {
                ops.push(Op::NtaBegin);
                for _ in 0..1 + r.below(4) {
                    ops.push(random_op(r, &nta));
                }
                ops.push(Op::NtaEnd(r.below(4) == 0));
            }
        }
    }
    ops
}

/// What a pool holds, as the program sees it (object addresses aside).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Model {
    /// The word slots.
    pub slots: Vec<u64>,
    /// `(size, fill, extent)` of each object entry; zeros when empty.
    pub objs: Vec<(u64, u64, u64)>,
    /// The byte range.
    pub big: Vec<u8>,
}

impl Model {
    /// The state right after [`setup`].
    pub fn initial() -> Model {
        Model {
            slots: vec![0; SLOTS as usize],
            objs: vec![(0, 0, 0); OBJS as usize],
            big: vec![0; BIG],
        }
    }

    /// The state after `op` runs.
    pub fn apply(&mut self, op: &Op) {
        match *op {
            Op::Write(s, v) => self.slots[s as usize] = v,
            Op::Big(at, n, b) => self.big[at..(at + n).min(BIG)].fill(b),
            Op::Alloc(k, size, f, e) => {
                if self.objs[k as usize].0 == 0 {
                    self.objs[k as usize] = (size, f as u64, e.min(size));
                }
            }
            Op::Free(k) => self.objs[k as usize] = (0, 0, 0),
            Op::Poke(k, f, e) => {
                let o = &mut self.objs[k as usize];
                if o.0 != 0 {
                    *o = (o.0, f as u64, e.min(o.0));
                }
            }
            Op::Atomic(s, v) => self.slots[s as usize] = v,
            Op::AtomicBig(at, n, b) => self.big[at..(at + n).min(BIG)].fill(b),
            // Markers: resolved by [`effect`].
            Op::Save | Op::Back | Op::NtaBegin | Op::NtaEnd(_) => {}
        }
    }
}

/// Creates the root.
pub fn setup(pool: &Pool) -> Result<(), Error> {
    pool.transaction(|tx| tx.root::<Root>().map(|_| ()))
}

fn root(tx: &mut Tx<'_>) -> Result<Parts, Error> {
    Ok(Parts::of(tx.root::<Root>()?.offset()))
}

/// Runs a single-write atomic update ([`Op::is_atomic`]).
pub fn run_atomic(pool: &Pool, op: &Op) -> Result<(), Error> {
    let rp = pool
        .root::<Root>()?
        .ok_or(Error::TxMisuse("no root object"))?;
    let root = Parts::of(rp.offset());
    match *op {
        Op::Atomic(s, v) => pool.atomic_write(root.slots.at(s), &v),
        Op::AtomicBig(at, n, b) => pool.atomic_write_bytes(
            root.big.offset() + at as u64,
            &vec![b; (at + n).min(BIG) - at],
        ),
        _ => Err(Error::TxMisuse("not an atomic update")),
    }
}

/// Runs a transaction's operations, calling `point` before each and
/// `nta(k, done)` as its `k`th nested top action begins (`false`) and once
/// it has ended (`true`).
pub fn run_ops(
    tx: &mut Tx<'_>,
    ops: &[Op],
    point: &dyn Fn(),
    nta: &mut dyn FnMut(usize, bool),
) -> Result<(), Error> {
    let mut saves = Vec::new();
    let (mut i, mut k) = (0, 0);
    while i < ops.len() {
        point();
        match ops[i] {
            Op::Save => saves.push(tx.savepoint()?),
            Op::Back => {
                if let Some(&sp) = saves.last() {
                    tx.rollback_to(sp)?;
                }
            }
            Op::NtaBegin => {
                let len = ops[i..]
                    .iter()
                    .position(|o| matches!(o, Op::NtaEnd(_)))
                    .ok_or(Error::TxMisuse("nested top action without its end"))?;
                let Op::NtaEnd(fail) = ops[i + len] else {
                    unreachable!("found above")
                };
                nta(k, false);
                let r = tx.nested_top_action(|tx| {
                    for op in &ops[i + 1..i + len] {
                        point();
                        run_op(tx, op)?;
                    }
                    if fail {
                        Err(Error::Aborted)
                    } else {
                        Ok(())
                    }
                });
                match r {
                    Err(Error::Aborted) if fail => {}
                    r => r?,
                }
                nta(k, true);
                k += 1;
                i += len;
            }
            ref op => run_op(tx, op)?,
        }
        i += 1;
    }
    Ok(())
}

/// Runs one operation inside a transaction.
pub fn run_op(tx: &mut Tx<'_>, op: &Op) -> Result<(), Error> {
    let root = root(tx)?;
    match *op {
        Op::Write(s, v) => tx.write(root.slots.at(s), &v),
        Op::Big(at, n, b) => tx.write_bytes(
            root.big.offset() + at as u64,
            &vec![b; (at + n).min(BIG) - at],
        ),
        Op::Alloc(k, size, f, e) => {
            let slot = root.objs.at(k);
            if tx.read(slot)?.ptr != 0 {
                return Ok(());
            }
            let p = tx.alloc_bytes(size)?;
            let extent = e.min(size);
            tx.write_bytes(p, &vec![f; extent as usize])?;
            tx.write(
                slot,
                &Obj {
                    ptr: p,
                    size,
                    fill: f as u64,
                    extent,
                },
            )
        }
        Op::Free(k) => {
            let slot = root.objs.at(k);
            let obj = tx.read(slot)?;
            if obj.ptr != 0 {
                tx.free(PPtr::<u8>::from_offset(obj.ptr))?;
                tx.write(slot, &Obj::default())?;
            }
            Ok(())
        }
        Op::Poke(k, f, e) => {
            let slot = root.objs.at(k);
            let mut obj = tx.read(slot)?;
            if obj.ptr != 0 {
                let extent = e.min(obj.size);
                let mut bytes = vec![0; extent.max(obj.extent) as usize];
                bytes[..extent as usize].fill(f);
                tx.write_bytes(obj.ptr, &bytes)?;
                obj.fill = f as u64;
                obj.extent = extent;
                tx.write(slot, &obj)?;
            }
            Ok(())
        }
        Op::Save | Op::Back | Op::NtaBegin | Op::NtaEnd(_) => {
            Err(Error::TxMisuse("a control operation outside run_ops"))
        }
        Op::Atomic(..) | Op::AtomicBig(..) => {
            Err(Error::TxMisuse("an atomic update inside a transaction"))
        }
    }
}

/// Reads the model back from a pool, verifying each object's bytes (fill,
/// then zeros) and returning the blocks the program can
/// reach (the root and live objects) for the allocator check. A damaged
/// state is an error, never a panic.
pub fn read(pool: &Pool) -> Result<(Model, Vec<u64>), String> {
    let e = |e: Error| e.to_string();
    let rp = pool.root::<Root>().map_err(e)?.ok_or("no root object")?;
    let root = Parts::of(rp.offset());
    let mut m = Model::initial();
    let mut reach = vec![root.root];
    for i in 0..SLOTS {
        m.slots[i as usize] = pool.read(root.slots.at(i)).map_err(e)?;
    }
    pool.read_bytes(root.big.offset(), &mut m.big).map_err(e)?;
    for k in 0..OBJS {
        let o: Obj = pool.read(root.objs.at(k)).map_err(e)?;
        if o.ptr == 0 {
            continue;
        }
        if o.size == 0 || o.size > pool.layout().pool_size {
            return Err(format!(
                "object {k} at {:#x} has an impossible size {}",
                o.ptr, o.size
            ));
        }
        let mut bytes = vec![0u8; o.size as usize];
        pool.read_bytes(o.ptr, &mut bytes).map_err(e)?;
        let f = o.fill as u8;
        let h = o.extent.min(o.size) as usize;
        let ok = bytes[..h].iter().all(|&b| b == f) && bytes[h..].iter().all(|&b| b == 0);
        if !ok {
            return Err(format!(
                "object {k} at {:#x}: contents are not {h} bytes of fill {f}, then zeros",
                o.ptr
            ));
        }
        m.objs[k as usize] = (o.size, o.fill, o.extent);
        reach.push(o.ptr);
    }
    reach.sort_unstable();
    Ok((m, reach))
}

#[cfg(test)]
mod rng_tests {
    /// The generator is SplitMix64 exactly: seeds printed by earlier
    /// versions (which carried their own copy) replay the same programs.
    #[test]
    fn rng_is_splitmix64() {
        let mut state = 70u64;
        let mut r = super::Rng::new(70);
        for _ in 0..100 {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            assert_eq!(r.next_u64(), z ^ (z >> 31));
        }
    }
}
