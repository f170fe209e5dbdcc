//! Commit lanes (`log/lanes.rs`): each thread commits in a lane of its own
//! while there are lanes enough, gives it back when it ends, and recovery
//! merges the lanes' groups in global commit order. The crash explorer
//! proves the lanes at every fence (`crashtest`: half its two-thread
//! programs run in two lanes, and `ring.watermark`'s mutation is detected);
//! `tests/torture_threads.rs` kills 4 and 8 threads in four lanes.

use rewind::{Error, PPtr, Pool, PoolConfig};

const LAYOUT: &str = "lanes";

fn pool(lanes: u64) -> Pool {
    let cfg = PoolConfig::default().lanes(lanes);
    Pool::create_sim(LAYOUT, 8 << 20, &cfg).unwrap()
}

#[test]
fn threads_take_the_lane_fewest_hold_and_give_it_back_when_they_end() {
    let p = pool(3);
    assert_eq!(p.lane_threads(), vec![0, 0, 0]);
    let x: PPtr<u64> = p.transaction(|tx| tx.root::<u64>()).unwrap();
    // This thread took lane 0.
    assert_eq!(p.lane_threads(), vec![1, 0, 0]);
    let barrier = std::sync::Barrier::new(4);
    std::thread::scope(|s| {
        let mut handles = Vec::new();
        for i in 0..3 {
            let (p, barrier) = (&p, &barrier);
            handles.push(s.spawn(move || {
                p.transaction(|tx| {
                    tx.lock(x)?;
                    let v = tx.read(x)?;
                    tx.write(x, &(v + i + 1))
                })
                .unwrap();
                barrier.wait();
                barrier.wait();
            }));
        }
        barrier.wait();
        // Four threads in three lanes: one lane holds two.
        let mut held = p.lane_threads();
        held.sort();
        assert_eq!(held, vec![1, 1, 2]);
        barrier.wait();
        // Joined one by one: a join returns once its thread has ended,
        // its thread-local claims dropped (the end of a scope alone waits
        // only for the closures).
        for h in handles {
            h.join().unwrap();
        }
    });
    // The three threads ended: their lanes are free again.
    assert_eq!(p.lane_threads(), vec![1, 0, 0]);
    assert_eq!(p.read(x).unwrap(), 6);
}

#[test]
fn recovery_replays_the_lanes_groups_in_global_commit_order() {
    let p = pool(2);
    let x: PPtr<u64> = p.transaction(|tx| tx.root::<u64>()).unwrap();
    // Lane 1 (another thread) writes 1, then lane 0 (this one) writes 2:
    // recovery must replay lane 1's group first.
    std::thread::scope(|s| {
        s.spawn(|| p.transaction(|tx| tx.write(x, &1)).unwrap());
    });
    p.transaction(|tx| tx.write(x, &2)).unwrap();
    let image = p.domain().with_sim(|s| s.image_none_pending()).unwrap();
    let r = Pool::open_image(image, LAYOUT).unwrap();
    assert_eq!(r.recovery_report().ring_groups, 3, "every group replayed");
    assert_eq!(r.read(r.root::<u64>().unwrap().unwrap()).unwrap(), 2);
}

#[test]
fn a_lane_count_that_does_not_fit_is_a_typed_error() {
    for (lanes, size) in [(0, 8 << 20), (17, 64 << 20), (16, 1 << 20)] {
        let cfg = PoolConfig::default().lanes(lanes);
        match Pool::create_sim(LAYOUT, size, &cfg) {
            Err(Error::InvalidConfig { what, .. }) => assert_eq!(what, "commit lanes"),
            Err(e) => panic!("{lanes} lanes in {size} bytes: {e}"),
            Ok(_) => panic!("{lanes} lanes in {size} bytes accepted"),
        }
    }
}

#[test]
fn on_a_disk_every_thread_commits_in_the_first_lane() {
    // Msync: lanes would save no wait behind the device flush every
    // commit shares, and each lane in use would add a page to it.
    let dir = tempfile::tempdir().unwrap();
    let cfg = PoolConfig::default()
        .lanes(3)
        .backend(rewind::Backend::Msync);
    let p = Pool::create(dir.path().join("disk.pool"), LAYOUT, 8 << 20, &cfg).unwrap();
    let x: PPtr<u64> = p.transaction(|tx| tx.root::<u64>()).unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    p.transaction(|tx| {
                        tx.lock(x)?;
                        let v = tx.read(x)?;
                        tx.write(x, &(v + 1))
                    })
                    .unwrap();
                    p.lane_threads()
                })
            })
            .collect();
        for h in handles {
            let held = h.join().unwrap();
            assert_eq!(held[1..], [0, 0], "a thread claimed another lane: {held:?}");
        }
    });
    assert_eq!(p.lane_threads(), vec![1, 0, 0]);
    assert_eq!(p.read(x).unwrap(), 2);
}
