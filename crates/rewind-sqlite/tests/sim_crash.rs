//! The log in a simulated persistence domain: every image a power failure
//! could leave at the commit mark (nothing of the transaction persisted,
//! all of it, each single line missing: a torn frame, random subsets), and
//! at every fence of a restart (the end of a checkpoint, which frees the
//! blocks). Recovery must find the commits before the crash, or those and
//! the transaction in flight, never anything else, and no block may be
//! lost or used twice.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rewind::{Policy, Pool, PoolConfig};
use rewind_sqlite::log::{Frame, Out, WalHeader, WalLog};
use rewind_sqlite::LAYOUT;

const PAGE: usize = 4096;
const BLOCK: u64 = 4096;

fn header(salt: u32) -> WalHeader {
    let mut h = [0u8; 32];
    h[..4].copy_from_slice(&0x377f_0682u32.to_be_bytes());
    h[4..8].copy_from_slice(&3_007_000u32.to_be_bytes());
    h[8..12].copy_from_slice(&(PAGE as u32).to_be_bytes());
    h[16..20].copy_from_slice(&salt.to_be_bytes());
    h
}

fn new_log() -> WalLog {
    let pool =
        Pool::create_sim(LAYOUT, 2 << 20, &PoolConfig::default().policy(Policy::Redo)).unwrap();
    let (mut log, rec) = WalLog::open(pool, BLOCK).unwrap();
    assert!(rec.header.is_none() && rec.frames.is_empty());
    log.restart(Some(&header(1))).unwrap();
    log
}

/// Transaction `t`'s frames: one to four pages, each the page's last image
/// with a few runs changed (a row inserted, say), the last with the commit
/// flag.
fn tx(r: &mut SmallRng, pages: &mut [Vec<u8>], t: u32) -> Vec<Frame> {
    let n = r.gen_range(1..=4);
    let mut out: Vec<Frame> = Vec::new();
    for k in 0..n {
        let pgno = r.gen_range(1..=pages.len() as u32);
        let mut image = pages[pgno as usize - 1].clone();
        for _ in 0..r.gen_range(1..4) {
            let at = r.gen_range(0..PAGE - 200);
            let len = r.gen_range(1..200);
            r.fill(&mut image[at..at + len]);
        }
        pages[pgno as usize - 1] = image.clone();
        out.push(Frame {
            pgno,
            ntrunc: if k + 1 == n { 10 + t } else { 0 },
            image,
        });
    }
    out
}

/// Commits `frames`, each against its page's previous frame in `log_frames`
/// (the committed ones) or in this transaction.
fn commit(
    log: &mut WalLog,
    committed: &[Frame],
    frames: &[Frame],
) -> Result<(), rewind_sqlite::Error> {
    let outs: Vec<Out<'_>> = frames
        .iter()
        .enumerate()
        .map(|(i, f)| Out {
            pgno: f.pgno,
            ntrunc: f.ntrunc,
            image: &f.image,
            base: frames[..i]
                .iter()
                .rev()
                .chain(committed.iter().rev())
                .find(|g| g.pgno == f.pgno)
                .map(|g| &g.image[..]),
        })
        .collect();
    log.commit(&outs, true)
}

/// Frames in a short form for assertion messages: (page, flag, crc of image).
fn brief(f: &[Frame]) -> Vec<(u32, u32, u32)> {
    f.iter()
        .map(|f| (f.pgno, f.ntrunc, crc32fast::hash(&f.image)))
        .collect()
}

fn recover(image: Vec<u8>) -> (Option<WalHeader>, Vec<Frame>, WalLog) {
    let pool = Pool::open_image(image, LAYOUT).unwrap();
    let (log, rec) = WalLog::open(pool, BLOCK).unwrap();
    (rec.header, rec.frames, log)
}

/// A log with `txs` committed transactions, and the next one's frames.
fn setup(seed: u64, txs: u32) -> (WalLog, Vec<Frame>, Vec<Frame>) {
    let mut r = SmallRng::seed_from_u64(seed);
    let mut pages = vec![vec![0u8; PAGE]; 6];
    let mut log = new_log();
    let mut committed = Vec::new();
    for t in 0..txs {
        let f = tx(&mut r, &mut pages, t);
        commit(&mut log, &committed, &f).unwrap();
        committed.extend(f);
    }
    let next = tx(&mut r, &mut pages, txs);
    (log, committed, next)
}

#[test]
fn every_image_at_the_commit_mark_recovers_a_prefix() {
    let (mut torn, mut whole, mut tried) = (0, 0, 0);
    for seed in 0..12u64 {
        let txs = 3 + seed as u32 * 2;
        let (mut log, before, next) = setup(seed, txs);
        let mut after = before.clone();
        after.extend(next.clone());
        // The commit's one fence fails: its records stay pending, as they
        // are at the instant before the fence completes.
        // A commit that links a new block first fences that transaction:
        // those are the restart test's business.
        let (mut probe, _, _) = setup(seed, txs);
        let blocks = probe.blocks();
        commit(&mut probe, &before, &next).unwrap();
        if probe.blocks() != blocks {
            continue;
        }
        log.pool().domain().fail_fences_after(0);
        assert!(commit(&mut log, &before, &next).is_err());
        let dom = log.pool().domain();
        let pending = dom.with_sim(|s| s.pending_lines()).unwrap();
        assert!(!pending.is_empty());
        let mut images = vec![
            dom.with_sim(|s| s.image_none_pending()).unwrap(),
            dom.with_sim(|s| s.image_all_pending()).unwrap(),
        ];
        // A torn frame: each single line of the transaction lost.
        for &(l, _) in &pending {
            images.push(
                dom.with_sim(|s| s.image_with(|x, n| if x == l { 0 } else { n }))
                    .unwrap(),
            );
        }
        let mut r = SmallRng::seed_from_u64(seed);
        for _ in 0..16 {
            images.push(
                dom.with_sim(|s| s.image_with(|_, n| r.gen_range(0..=n)))
                    .unwrap(),
            );
        }
        for (i, img) in images.into_iter().enumerate() {
            tried += 1;
            let (h, frames, mut again) = recover(img);
            assert_eq!(h, Some(header(1)));
            match i {
                0 => assert_eq!(
                    brief(&frames),
                    brief(&before),
                    "seed {seed}: nothing persisted"
                ),
                1 => assert_eq!(
                    brief(&frames),
                    brief(&after),
                    "seed {seed}: everything persisted"
                ),
                _ => assert!(
                    frames == before || frames == after,
                    "seed {seed} image {i}: not a prefix"
                ),
            }
            if frames == before {
                torn += 1;
            } else {
                whole += 1;
            }
            // The recovered log goes on: the transaction again, then a read.
            commit(&mut again, &frames, &next).unwrap();
            let img = again
                .pool()
                .domain()
                .with_sim(|s| s.image_none_pending())
                .unwrap();
            let (_, back, _) = recover(img);
            let mut want = frames.clone();
            want.extend(next.clone());
            if frames == after {
                assert_eq!(back.len(), after.len() + next.len());
            } else {
                assert_eq!(
                    brief(&back),
                    brief(&want),
                    "seed {seed} image {i}: after a torn commit"
                );
            }
        }
    }
    assert!(
        torn > 100 && whole >= 5,
        "{torn} torn, {whole} whole of {tried}"
    );
}

#[test]
fn a_crash_at_every_fence_of_a_restart_frees_each_block_once() {
    crash_at_every_fence_of_a_restart(rewind_sqlite::log::FREE_BATCH);
}

/// The same with two blocks freed per transaction: a restart's reclaim
/// chain freed over several transactions, the crash between any two.
#[test]
fn a_crash_between_the_reclaim_transactions_of_a_restart_frees_each_block_once() {
    crash_at_every_fence_of_a_restart(2);
}

fn crash_at_every_fence_of_a_restart(batch: usize) {
    // The reference: the restart runs to the end.
    let (mut log, before, _) = setup(99, 40);
    log.set_free_batch(batch);
    assert!(log.blocks() > 3, "the transactions span several blocks");
    let f0 = log.pool().counters().fences;
    log.restart(Some(&header(2))).unwrap();
    let fences = log.pool().counters().fences - f0;
    assert!(fences >= 1);
    let img = log
        .pool()
        .domain()
        .with_sim(|s| s.image_none_pending())
        .unwrap();
    let reference = recover(img).2.pool().alloc_stats();
    let mut seen = (0, 0);
    for f in 1..=fences {
        for pick in 0..3 {
            let (mut log, _, _) = setup(99, 40);
            log.set_free_batch(batch);
            let dom = log.pool().domain();
            let at = dom.with_sim(|s| s.fences()).unwrap() + f;
            dom.with_sim_mut(|s| s.capture_at_fence(at, 7)).unwrap();
            log.restart(Some(&header(2))).unwrap();
            let img = log
                .pool()
                .domain()
                .with_sim_mut(|s| s.take_captured())
                .unwrap()
                .swap_remove(pick);
            let (h, frames, mut again) = recover(img);
            if h == Some(header(1)) {
                assert_eq!(
                    brief(&frames),
                    brief(&before),
                    "fence {f}: the old generation whole"
                );
                seen.0 += 1;
            } else {
                assert_eq!(h, Some(header(2)), "fence {f}");
                assert!(frames.is_empty(), "fence {f}: the new generation is empty");
                seen.1 += 1;
            }
            // Finish (or redo) the restart: the heap must then be exactly
            // as after the uninterrupted one, no block leaked or doubled.
            again.restart(Some(&header(2))).unwrap();
            let img = again
                .pool()
                .domain()
                .with_sim(|s| s.image_none_pending())
                .unwrap();
            let (_, _, done) = recover(img);
            assert_eq!(
                done.pool().alloc_stats(),
                reference,
                "fence {f} image {pick}"
            );
            assert_eq!(again.blocks(), 1);
        }
    }
    assert!(seen.0 > 0 && seen.1 > 0, "{seen:?}");
}
