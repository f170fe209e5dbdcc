//! Recovery of every record kind, with crashes at every fence.
//!
//! Each scenario runs an action (a commit with UPDATE, ALLOC and DELETE
//! records; a rollback, which writes ROLLBACK, CLRs and END; a no-force
//! checkpoint, which writes CHECKPOINT) on a simulated pool. For every
//! fence the action issues, the images a crash there could leave are
//! recovered: the state must be all-before or all-after the action, with
//! no leaked or doubly allocated block. Then recovery itself is crashed at
//! each of its fences, and recovering that image must give the same state
//! (recovery is idempotent under crashes).

use rewind::persist::Domain;
use rewind::{AllocStats, Backend, LogVariant, PPtr, Pod, Policy, Pool, PoolConfig, Zeroable};

#[derive(Clone, Copy, Pod, Zeroable, Debug, PartialEq)]
#[repr(C)]
struct Root {
    slots: [u64; 8],
    objs: [u64; 4],
    blob: PPtr<u8>,
}

#[derive(Clone, Debug, PartialEq)]
struct State {
    root: Root,
    obj_bytes: Vec<u64>,
    blob: Vec<u8>,
    alloc: AllocStats,
}

const BLOB: usize = 700;

fn cfg(v: LogVariant, p: Policy) -> PoolConfig {
    PoolConfig::default()
        .log(v)
        .policy(p)
        .backend(Backend::Sim)
        .bucket_cells(8)
        .log_size(256 << 10)
}

fn state(pool: &Pool) -> State {
    let root: Root = pool.read(pool.root::<Root>().unwrap().unwrap()).unwrap();
    let obj_bytes = root
        .objs
        .iter()
        .map(|&o| {
            if o == 0 {
                0
            } else {
                pool.read(PPtr::<u64>::from_offset(o)).unwrap()
            }
        })
        .collect();
    let mut blob = vec![0; BLOB];
    pool.read_bytes(root.blob.offset(), &mut blob).unwrap();
    State {
        root,
        obj_bytes,
        blob,
        alloc: pool.alloc_stats(),
    }
}

/// The state as a fresh open would rebuild it (allocator from media).
fn reopened_state(pool: &Pool) -> State {
    let img = pool.domain().with_sim(|s| s.image_all_pending()).unwrap();
    state(&Pool::open_image(img, "rec").unwrap())
}

fn setup(pool: &Pool) {
    pool.transaction(|tx| {
        let r: PPtr<Root> = tx.root()?;
        let mut root = Root::zeroed();
        for i in 0..4 {
            let o = tx.alloc::<u64>()?;
            tx.write(o, &(100 + i))?;
            root.objs[i as usize] = o.offset();
        }
        root.blob = tx.alloc_array(BLOB as u64)?;
        tx.write(r, &root)
    })
    .unwrap();
    for round in 0..3u64 {
        pool.transaction(|tx| {
            let r = tx.root::<Root>()?;
            let mut root = tx.read(r)?;
            root.slots[round as usize] = round + 1;
            tx.write(r, &root)
        })
        .unwrap();
    }
}

/// Writes slots, allocates one object, frees another, writes a blob that
/// spans several records.
fn mutate(tx: &mut rewind::Tx<'_>) -> Result<(), rewind::Error> {
    let r = tx.root::<Root>()?;
    let mut root = tx.read(r)?;
    for (i, s) in root.slots.iter_mut().enumerate() {
        *s = 1000 + i as u64;
    }
    tx.free(PPtr::<u64>::from_offset(root.objs[1]))?;
    let o = tx.alloc::<u64>()?;
    tx.write(o, &4242)?;
    root.objs[1] = o.offset();
    tx.write(r, &root)?;
    tx.write_bytes(root.blob.offset(), &[0xab; BLOB])
}

#[derive(Clone, Copy, Debug)]
enum Action {
    Commit,
    Abort,
    Checkpoint,
}

fn act(pool: &Pool, a: Action) {
    match a {
        Action::Commit => pool.transaction(mutate).unwrap(),
        Action::Abort => {
            let r: Result<(), rewind::Error> = pool.transaction(|tx| {
                mutate(tx)?;
                Err(rewind::Error::TxMisuse("abort"))
            });
            assert!(r.is_err());
        }
        Action::Checkpoint => pool.checkpoint().unwrap(),
    }
}

fn fresh(v: LogVariant, p: Policy) -> Pool {
    let pool = Pool::create_sim("rec", 4 << 20, &cfg(v, p)).unwrap();
    setup(&pool);
    pool
}

fn recover(img: Vec<u8>) -> State {
    state(&Pool::open_image(img, "rec").unwrap_or_else(|e| panic!("recovery failed: {e}")))
}

/// Crashes recovery of `img` at every fence; each result must be `want`.
fn crash_recovery(img: &[u8], want: &State, what: &str) -> u64 {
    let probe = Domain::sim_from_image(img.to_vec());
    let pool = Pool::open_domain(probe, "rec").unwrap();
    let fences = pool.domain().with_sim(|s| s.fences()).unwrap();
    let mut checked = 0;
    for k in 1..=fences {
        let dom = Domain::sim_from_image(img.to_vec());
        dom.with_sim_mut(|s| s.capture_at_fence(k, k * 7919));
        let _pool = Pool::open_domain(dom, "rec").unwrap();
        let images = _pool.domain().with_sim_mut(|s| s.take_captured()).unwrap();
        for i2 in images {
            assert_eq!(
                &recover(i2),
                want,
                "{what}: recovery crashed at its fence {k}"
            );
            checked += 1;
        }
    }
    checked
}

fn scenario(v: LogVariant, p: Policy, a: Action) -> u64 {
    let probe = fresh(v, p);
    let pre = reopened_state(&probe);
    let start = probe.domain().with_sim(|s| s.fences()).unwrap();
    act(&probe, a);
    let end = probe.domain().with_sim(|s| s.fences()).unwrap();
    let post = reopened_state(&probe);
    match a {
        Action::Commit => assert_ne!(pre, post, "the commit changed nothing"),
        Action::Abort | Action::Checkpoint => assert_eq!(pre, post, "{a:?} changed the state"),
    }
    let mut checked = 0;
    for k in start + 1..=end {
        let pool = fresh(v, p);
        pool.domain().with_sim_mut(|s| s.capture_at_fence(k, k));
        act(&pool, a);
        let images = pool.domain().with_sim_mut(|s| s.take_captured()).unwrap();
        assert_eq!(images.len(), 3, "fence {k} not reached");
        for (i, img) in images.into_iter().enumerate() {
            let what = format!("{v}/{p} {a:?} crash at fence {k} (image {i})");
            let got = recover(img.clone());
            assert!(got == pre || got == post, "{what}: state is neither before nor after\n got {got:?}\n pre {pre:?}\npost {post:?}");
            checked += 1;
            // Crash recovery too, for a sample of images (depth 2).
            if i == 2 && k % 3 == 0 {
                checked += crash_recovery(&img, &got, &what);
            }
        }
    }
    checked
}

fn every_config(a: Action) {
    let mut total = 0;
    for v in LogVariant::ALL {
        for p in Policy::ALL {
            if matches!(a, Action::Checkpoint) && p == Policy::Force {
                continue;
            }
            total += scenario(v, p, a);
        }
    }
    assert!(total > 100, "only {total} crash images checked");
    eprintln!("{a:?}: {total} crash images recovered and checked");
}

#[test]
fn commit_with_update_alloc_delete_records() {
    every_config(Action::Commit);
}

#[test]
fn rollback_with_clr_records() {
    every_config(Action::Abort);
}

#[test]
fn noforce_checkpoint_records() {
    every_config(Action::Checkpoint);
}

#[test]
fn noforce_committed_work_is_redone() {
    for v in LogVariant::ALL {
        let pool = fresh(v, Policy::NoForce);
        act(&pool, Action::Commit);
        let want = reopened_state(&pool);
        // Nothing the commits left in the cache persisted: redo restores it.
        let img = pool.domain().with_sim(|s| s.image_none_pending()).unwrap();
        let p2 = Pool::open_image(img, "rec").unwrap();
        assert!(p2.recovery_report().redone > 0, "{v}: nothing redone");
        assert_eq!(state(&p2), want, "{v}");
    }
}
