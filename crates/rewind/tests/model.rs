//! Model-based property tests: random programs of transactions run against
//! the library and against a plain in-memory model, for every log variant ×
//! policy. Inside transactions, crash images (nothing pending persisted,
//! everything persisted, random per-line prefixes) are recovered on a copy
//! and must equal the model before the transaction; after each commit they
//! must equal the model after it. Reopening must not leak heap space.
//!
//! Transactions also take savepoints, roll back to them, and run nested
//! top actions (some failing): inside a transaction a crash image must
//! equal the model before it plus what its finished nested top actions
//! did, and so must the state after an abort. Nested top actions touch the
//! upper slots and objects, the rest of a transaction the lower ones.

use std::cell::RefCell;

use proptest::prelude::*;
use rand::{rngs::StdRng, Rng, SeedableRng};
use rewind::{Backend, LogVariant, PPtr, Pod, Policy, Pool, PoolConfig, Zeroable};

const SLOTS: u64 = 64;
const OBJS: u64 = 16;
/// Slots and objects from here up are nested top actions' own.
const NTA_SLOTS: u64 = 48;
const NTA_OBJS: u64 = 12;
const BIG: usize = 1500;

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct Root {
    slots: PPtr<u64>,
    objs: PPtr<Obj>,
    big: PPtr<u8>,
}

#[derive(Clone, Copy, Pod, Zeroable, Default, Debug, PartialEq)]
#[repr(C)]
struct Obj {
    ptr: u64,
    size: u64,
    fill: u64,
}

#[derive(Clone, Debug)]
enum Op {
    Write(u64, u64),
    Big(usize, usize, u8),
    Alloc(u64, u64, u8),
    Free(u64),
    /// A logged write into an object an earlier transaction allocated.
    Poke(u64, u8),
    /// Take a savepoint.
    Save,
    /// Roll back to the latest savepoint (nothing without one).
    Back,
    /// A nested top action of these operations; `true`: it fails.
    Nta(Vec<Op>, bool),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum End {
    Commit,
    Abort,
    Panic,
}

#[derive(Clone, Debug)]
struct TxProg {
    ops: Vec<Op>,
    end: End,
    checkpoint_after: bool,
}

#[derive(Clone, PartialEq, Debug)]
struct Model {
    slots: Vec<u64>,
    objs: Vec<Obj>,
    big: Vec<u8>,
}

fn plain_op(slots: std::ops::Range<u64>, objs: std::ops::Range<u64>) -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (slots, any::<u64>()).prop_map(|(s, v)| Op::Write(s, v)),
        1 => (0..BIG - 1, 1..700usize, any::<u8>()).prop_map(|(a, n, b)| Op::Big(a, n, b)),
        2 => (objs.clone(), prop_oneof![9 => 1..400u64, 1 => 200_000..300_000u64], any::<u8>())
            .prop_map(|(k, s, f)| Op::Alloc(k, s, f)),
        2 => objs.clone().prop_map(Op::Free),
        2 => (objs, any::<u8>()).prop_map(|(k, f)| Op::Poke(k, f)),
    ]
}

fn nta_op() -> impl Strategy<Value = Op> {
    let inner = prop_oneof![
        3 => (NTA_SLOTS..SLOTS, any::<u64>()).prop_map(|(s, v)| Op::Write(s, v)),
        1 => (NTA_OBJS..OBJS, 1..400u64, any::<u8>()).prop_map(|(k, s, f)| Op::Alloc(k, s, f)),
        1 => (NTA_OBJS..OBJS).prop_map(Op::Free),
        1 => (NTA_OBJS..OBJS, any::<u8>()).prop_map(|(k, f)| Op::Poke(k, f)),
    ];
    (
        prop::collection::vec(inner, 1..5),
        prop::bool::weighted(0.25),
    )
        .prop_map(|(ops, fail)| Op::Nta(ops, fail))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        13 => plain_op(0..NTA_SLOTS, 0..NTA_OBJS),
        1 => Just(Op::Save),
        1 => Just(Op::Back),
        1 => nta_op(),
    ]
}

fn tx_prog() -> impl Strategy<Value = TxProg> {
    (
        prop::collection::vec(op(), 0..24),
        prop_oneof![6 => Just(End::Commit), 2 => Just(End::Abort), 1 => Just(End::Panic)],
        prop::bool::weighted(0.15),
    )
        .prop_map(|(ops, end, checkpoint_after)| TxProg {
            ops,
            end,
            checkpoint_after,
        })
}

fn cfg(v: LogVariant, p: Policy) -> PoolConfig {
    PoolConfig::default()
        .log(v)
        .policy(p)
        .backend(Backend::Sim)
        .bucket_cells(16)
        .log_size(1 << 20)
}

fn read_model(pool: &Pool) -> Model {
    let root: Root = pool.read(pool.root::<Root>().unwrap().unwrap()).unwrap();
    let slots = (0..SLOTS)
        .map(|i| pool.read(root.slots.at(i)).unwrap())
        .collect();
    let objs: Vec<Obj> = (0..OBJS)
        .map(|i| pool.read(root.objs.at(i)).unwrap())
        .collect();
    let mut big = vec![0u8; BIG];
    pool.read_bytes(root.big.offset(), &mut big).unwrap();
    for o in &objs {
        if o.ptr != 0 {
            // Contents: first and last 8 bytes carry the fill byte.
            let mut b = [0u8; 1];
            pool.read_bytes(o.ptr, &mut b).unwrap();
            assert_eq!(b[0], o.fill as u8, "object {:#x} content", o.ptr);
            pool.read_bytes(o.ptr + o.size - 1, &mut b).unwrap();
            assert_eq!(b[0], o.fill as u8, "object {:#x} tail", o.ptr);
        }
    }
    // No two live objects overlap (no double allocation).
    let mut live: Vec<(u64, u64)> = objs
        .iter()
        .filter(|o| o.ptr != 0)
        .map(|o| (o.ptr, o.size))
        .collect();
    live.sort();
    for w in live.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "objects overlap: {w:?}");
    }
    Model { slots, objs, big }
}

/// Compares everything but object addresses, which the model cannot know.
fn same(a: &Model, b: &Model) -> bool {
    let strip =
        |m: &Model| -> Vec<(u64, u64)> { m.objs.iter().map(|o| (o.size, o.fill)).collect() };
    a.slots == b.slots && a.big == b.big && strip(a) == strip(b)
}

fn diff(got: &Model, want: &Model) -> String {
    let mut out = String::new();
    for (i, (g, w)) in got.slots.iter().zip(&want.slots).enumerate() {
        if g != w {
            out += &format!("slot {i}: got {g}, want {w}\n");
        }
    }
    for (i, (g, w)) in got.objs.iter().zip(&want.objs).enumerate() {
        if (g.size, g.fill) != (w.size, w.fill) {
            out += &format!("obj {i}: got {g:?}, want {w:?}\n");
        }
    }
    if let Some(i) = (0..BIG).find(|&i| got.big[i] != want.big[i]) {
        out += &format!("big differs from byte {i}\n");
    }
    out
}

fn apply(m: &mut Model, o: &Op) {
    match *o {
        Op::Write(s, v) => m.slots[s as usize] = v,
        Op::Big(a, n, b) => {
            let e = (a + n).min(BIG);
            m.big[a..e].iter_mut().for_each(|x| *x = b);
        }
        Op::Alloc(k, size, f) => {
            if m.objs[k as usize].ptr == 0 {
                m.objs[k as usize] = Obj {
                    ptr: 1,
                    size,
                    fill: f as u64,
                };
            }
        }
        Op::Free(k) => m.objs[k as usize] = Obj::default(),
        Op::Poke(k, f) => {
            if m.objs[k as usize].ptr != 0 {
                m.objs[k as usize].fill = f as u64;
            }
        }
        Op::Save | Op::Back => {}
        Op::Nta(ref ops, fail) => {
            if !fail {
                ops.iter().for_each(|o| apply(m, o));
            }
        }
    }
}

/// `m` with the part outside nested top actions taken from `snap` (a
/// rollback to a savepoint keeps what later nested top actions did).
fn restore_main(m: &mut Model, snap: &Model) {
    m.slots[..NTA_SLOTS as usize].copy_from_slice(&snap.slots[..NTA_SLOTS as usize]);
    m.objs[..NTA_OBJS as usize].copy_from_slice(&snap.objs[..NTA_OBJS as usize]);
    m.big.copy_from_slice(&snap.big);
}

fn run_op(
    tx: &mut rewind::Tx<'_>,
    root: &Root,
    o: &Op,
    saves: &mut Vec<rewind::Savepoint>,
) -> Result<(), rewind::Error> {
    match *o {
        Op::Save => {
            saves.push(tx.savepoint()?);
            Ok(())
        }
        Op::Back => match saves.last() {
            Some(&sp) => tx.rollback_to(sp),
            None => Ok(()),
        },
        Op::Nta(ref ops, fail) => {
            let r = tx.nested_top_action(|tx| {
                for o in ops {
                    run_op(tx, root, o, &mut Vec::new())?;
                }
                if fail {
                    Err(rewind::Error::Aborted)
                } else {
                    Ok(())
                }
            });
            match r {
                Err(rewind::Error::Aborted) if fail => Ok(()),
                r => r,
            }
        }
        Op::Write(s, v) => tx.write(root.slots.at(s), &v),
        Op::Big(a, n, b) => {
            let e = (a + n).min(BIG);
            tx.write_bytes(root.big.offset() + a as u64, &vec![b; e - a])
        }
        Op::Alloc(k, size, f) => {
            let slot = root.objs.at(k);
            if tx.read(slot)?.ptr != 0 {
                return Ok(());
            }
            let p = tx.alloc_bytes(size)?;
            tx.write_bytes(p, &vec![f; size as usize])?;
            tx.write(
                slot,
                &Obj {
                    ptr: p,
                    size,
                    fill: f as u64,
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
        Op::Poke(k, f) => {
            let slot = root.objs.at(k);
            let mut obj = tx.read(slot)?;
            if obj.ptr != 0 {
                tx.write_bytes(obj.ptr, &[f])?;
                tx.write_bytes(obj.ptr + obj.size - 1, &[f])?;
                obj.fill = f as u64;
                tx.write(slot, &obj)?;
            }
            Ok(())
        }
    }
}

fn images(pool: &Pool, rng: &mut StdRng) -> Vec<Vec<u8>> {
    pool.domain()
        .with_sim(|s| {
            let mut v = vec![s.image_none_pending(), s.image_all_pending()];
            let seed: u64 = rng.gen();
            let mut r = StdRng::seed_from_u64(seed);
            v.push(s.image_with(|_, n| r.gen_range(0..=n)));
            v
        })
        .unwrap()
}

fn check_image(img: Vec<u8>, want: &Model, what: &str) {
    let p =
        Pool::open_image(img, "model").unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
    let got = read_model(&p);
    assert!(
        same(&got, want),
        "{what}: recovered state differs from model ({})\n{}",
        p.recovery_report(),
        diff(&got, want)
    );
    // Recovering the recovered image again changes nothing.
    let again = Pool::open_image(
        p.domain().with_sim(|s| s.image_none_pending()).unwrap(),
        "model",
    )
    .unwrap();
    assert!(
        same(&read_model(&again), want),
        "{what}: second recovery differs"
    );
}

fn run(v: LogVariant, p: Policy, progs: &[TxProg], seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let pool = Pool::create_sim("model", 8 << 20, &cfg(v, p)).unwrap();
    let root = pool
        .transaction(|tx| {
            let r: PPtr<Root> = tx.root()?;
            let root = Root {
                slots: tx.alloc_array(SLOTS)?,
                objs: tx.alloc_array(OBJS)?,
                big: tx.alloc_array(BIG as u64)?,
            };
            tx.write(r, &root)?;
            Ok::<_, rewind::Error>(root)
        })
        .unwrap();
    let baseline = {
        let img = pool.domain().with_sim(|s| s.image_none_pending()).unwrap();
        Pool::open_image(img, "model").unwrap().alloc_stats()
    };
    let mut model = read_model(&pool);
    for (t, prog) in progs.iter().enumerate() {
        let crash_at = rng.gen_range(0..=prog.ops.len());
        let mut after = model.clone();
        // What survives if the transaction does not commit: the model before
        // it plus its finished nested top actions.
        let mut kept = model.clone();
        let mut snaps: Vec<Model> = Vec::new();
        let seen = RefCell::new(Vec::new());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut saves = Vec::new();
            pool.transaction(|tx| {
                for (i, o) in prog.ops.iter().enumerate() {
                    if i == crash_at {
                        let imgs = images(&pool, &mut rng);
                        seen.borrow_mut()
                            .extend(imgs.into_iter().map(|m| (m, kept.clone())));
                    }
                    run_op(tx, &root, o, &mut saves)?;
                    match o {
                        Op::Save => snaps.push(after.clone()),
                        Op::Back => {
                            if let Some(s) = snaps.last() {
                                restore_main(&mut after, s);
                            }
                        }
                        Op::Nta(..) => {
                            apply(&mut after, o);
                            apply(&mut kept, o);
                        }
                        _ => apply(&mut after, o),
                    }
                }
                match prog.end {
                    End::Commit => Ok(()),
                    End::Abort => Err(rewind::Error::TxMisuse("abort")),
                    End::Panic => panic!("user panic inside a transaction"),
                }
            })
        }));
        match (prog.end, &r) {
            (End::Commit, Ok(Ok(()))) => model = after,
            (End::Commit, Ok(Err(e))) => panic!("tx {t} failed: {e}"),
            (End::Abort, Ok(Err(_))) | (End::Panic, Err(_)) => model = kept,
            other => panic!("unexpected outcome {:?}", other.0),
        }
        let now = read_model(&pool);
        assert!(
            same(&now, &model),
            "tx {t} ({:?}): live state differs from model",
            prog.end
        );
        for (img, want) in seen.into_inner() {
            check_image(img, &want, &format!("{v}/{p} crash inside tx {t}"));
        }
        for img in images(&pool, &mut rng) {
            check_image(img, &model, &format!("{v}/{p} crash after tx {t}"));
        }
        if prog.checkpoint_after {
            pool.checkpoint().unwrap();
        }
        // Redo-async on the simulated domain: write-back runs where the
        // seed says, so crash images fall before, between and after steps.
        if p == Policy::RedoAsync && rng.gen_bool(0.5) {
            pool.write_back_step().unwrap();
        }
    }
    // Leak check: free everything, reopen, compare with the baseline.
    pool.transaction(|tx| {
        for k in 0..OBJS {
            run_op(tx, &root, &Op::Free(k), &mut Vec::new())?;
        }
        Ok::<_, rewind::Error>(())
    })
    .unwrap();
    let img = pool.domain().with_sim(|s| s.image_all_pending()).unwrap();
    let reopened = Pool::open_image(img, "model").unwrap();
    assert_eq!(
        reopened.alloc_stats(),
        baseline,
        "{v}/{p}: heap leaked or double-freed"
    );
}

macro_rules! model_test {
    ($name:ident, $v:expr, $p:expr) => {
        proptest! {
            #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
            #[test]
            fn $name(progs in prop::collection::vec(tx_prog(), 1..12), seed in any::<u64>()) {
                run($v, $p, &progs, seed);
            }
        }
    };
}

model_test!(simple_force, LogVariant::Simple, Policy::Force);
model_test!(simple_noforce, LogVariant::Simple, Policy::NoForce);
model_test!(optimized_force, LogVariant::Optimized, Policy::Force);
model_test!(optimized_noforce, LogVariant::Optimized, Policy::NoForce);
model_test!(batch_force, LogVariant::Batch, Policy::Force);
model_test!(batch_noforce, LogVariant::Batch, Policy::NoForce);
model_test!(two_layer_force, LogVariant::TwoLayer, Policy::Force);
model_test!(two_layer_noforce, LogVariant::TwoLayer, Policy::NoForce);
model_test!(batch_redo, LogVariant::Batch, Policy::Redo);
model_test!(optimized_redo, LogVariant::Optimized, Policy::Redo);
model_test!(simple_redo, LogVariant::Simple, Policy::Redo);
model_test!(two_layer_redo, LogVariant::TwoLayer, Policy::Redo);
model_test!(batch_redo_async, LogVariant::Batch, Policy::RedoAsync);
model_test!(
    optimized_redo_async,
    LogVariant::Optimized,
    Policy::RedoAsync
);
model_test!(simple_redo_async, LogVariant::Simple, Policy::RedoAsync);
model_test!(
    two_layer_redo_async,
    LogVariant::TwoLayer,
    Policy::RedoAsync
);

/// Regression (found by this test): a Batch force commit makes END valid
/// before its last group's stores; recovery redid whatever subset of a
/// committed transaction's records survived their (unfenced) clearing,
/// replaying an older value of `objs[1]` without the newer one.
#[test]
fn regression_batch_force_partial_clear_is_not_redone() {
    use Op::*;
    let progs = vec![
        TxProg {
            ops: vec![Alloc(1, 1, 0), Free(1), Write(0, 76742)],
            end: End::Commit,
            checkpoint_after: false,
        },
        TxProg {
            ops: vec![
                Write(38, 8410266870400178945),
                Poke(11, 130),
                Poke(10, 125),
                Big(1366, 391, 192),
                Write(21, 5563591915556903863),
                Big(508, 39, 34),
                Write(38, 14358294536001442776),
                Poke(12, 131),
                Free(1),
                Write(25, 4159451850010762183),
                Poke(0, 5),
                Write(7, 9988482862646165906),
                Write(13, 8001533578584404431),
                Alloc(4, 388, 202),
                Write(24, 7397897241392571438),
                Write(60, 10235441555500556986),
                Free(13),
                Write(10, 6475729546981776216),
            ],
            end: End::Abort,
            checkpoint_after: false,
        },
    ];
    run(
        LogVariant::Batch,
        Policy::Force,
        &progs,
        8747873640597742499,
    );
}
