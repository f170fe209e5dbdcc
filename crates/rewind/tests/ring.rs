//! The redo policy's commit ring, on every log variant: one fence per
//! transaction, the floor's lines (the group's, then one per data line),
//! reclamation without a fence, a ring that wraps many times, a torn
//! group refused, and a commit that returned found after any crash.

use rewind::{Backend, LogVariant, PPtr, Policy, Pool, PoolConfig};

const LAYOUT: &str = "ring";

fn pool(v: LogVariant, size: u64) -> (Pool, PPtr<[u64; 8192]>) {
    let cfg = PoolConfig::default()
        .log(v)
        .policy(Policy::Redo)
        .backend(Backend::Sim);
    let pool = Pool::create_sim(LAYOUT, size, &cfg).unwrap();
    let root = pool.transaction(|tx| tx.root::<[u64; 8192]>()).unwrap();
    (pool, root)
}

/// Recovery of what a power failure would leave if nothing pending had
/// reached the media (`false`) or everything had (`true`).
fn recovered(pool: &Pool, all: bool) -> Pool {
    let img = pool
        .domain()
        .with_sim(|s| {
            if all {
                s.image_all_pending()
            } else {
                s.image_none_pending()
            }
        })
        .unwrap();
    Pool::open_image(img, LAYOUT).unwrap()
}

/// K random words (512 bytes apart: each its own line) per transaction.
fn k_words(pool: &Pool, root: PPtr<[u64; 8192]>, k: u64, i: u64) {
    let words = root.cast::<u64>();
    pool.transaction(|tx| {
        for j in 0..k {
            let slot = (i * 7919 + j * 64) % 8192 / 64 * 64 + (j % 8);
            tx.write(words.at(slot), &(i * 1000 + j))?;
        }
        Ok::<_, rewind::Error>(())
    })
    .unwrap();
}

#[test]
fn one_fence_and_the_floor_of_lines_per_transaction() {
    for v in LogVariant::ALL {
        let (pool, root) = pool(v, 8 << 20);
        for (k, max_lines) in [(1, 2.2), (8, 12.0), (64, 85.0)] {
            // Warm: the ring's Log Start advances a few times.
            for i in 0..200 {
                k_words(&pool, root, k, i);
            }
            let n = 2_000;
            let before = pool.counters();
            for i in 0..n {
                k_words(&pool, root, k, i);
            }
            let c = pool.counters().since(&before);
            let fences = c.fences as f64 / n as f64;
            let lines = (c.flushed_lines + c.nt_lines) as f64 / n as f64;
            println!("{v} K={k}: {fences:.3} fences, {lines:.2} lines per transaction");
            assert_eq!(c.fences, n, "{v} K={k}: one fence per transaction");
            assert!(lines <= max_lines, "{v} K={k}: {lines:.2} lines");
        }
    }
}

#[test]
fn a_returned_commit_survives_and_an_unfenced_one_is_whole_or_absent() {
    for v in LogVariant::ALL {
        let (pool, root) = pool(v, 4 << 20);
        let words = root.cast::<u64>();
        for i in 0..3000u64 {
            pool.transaction(|tx| {
                tx.write(words.at(i % 97), &i)?;
                tx.write(words.at(100 + i % 89), &i)
            })
            .unwrap();
            if i % 500 == 499 {
                // Nothing pending persisted: the last commit's write-back
                // is lost, its group replays it.
                for all in [false, true] {
                    let rec = recovered(&pool, all);
                    let got = rec.read(root).unwrap();
                    for j in i.saturating_sub(96)..=i {
                        assert_eq!(got[(j % 97) as usize] % 97, j % 97, "{v}");
                    }
                    assert_eq!(got[(i % 97) as usize], i, "{v} all={all}");
                    assert_eq!(got[(100 + i % 89) as usize], i, "{v} all={all}");
                    assert!(rec.recovery_report().ring_groups >= 1, "{v}");
                }
            }
        }
    }
}

/// The ring groups of a pool image, by lane sequence number: (csn,
/// offset). Each starts on a line with the magic "RG" and has its csn at 8
/// (`docs/format.md`).
fn groups(img: &[u8]) -> Vec<(u64, usize)> {
    let mut found: Vec<(u64, usize)> = (0..img.len() - 64)
        .step_by(64)
        .filter(|&a| img[a..a + 2] == *b"RG")
        .map(|a| {
            (
                u64::from_le_bytes(img[a + 8..a + 16].try_into().unwrap()),
                a,
            )
        })
        .collect();
    found.sort_unstable();
    found
}

/// A group damaged after its commit (a flipped byte), with a later group of
/// its lane reserved after it was written back: recovery would stop there
/// and replay the groups before it over the newer values in place. It is
/// refused as damage instead, under every log variant. The last group
/// damaged reads as torn (nothing vouches for it): the pool opens.
#[test]
fn a_damaged_group_a_later_one_vouches_for_is_log_corrupt() {
    for v in LogVariant::ALL {
        let (pool, root) = pool(v, 4 << 20);
        let word = root.cast::<u64>().at(3);
        for x in 1..=5u64 {
            pool.transaction(|tx| tx.write(word, &x)).unwrap();
        }
        let img = pool.domain().with_sim(|s| s.image_all_pending()).unwrap();
        let g = groups(&img);
        assert!(g.len() >= 5, "{v:?}: groups {g:?}");
        // The commit of 4: its entry's value (header 32, entry word 8).
        let mut damaged = img.clone();
        let (_, at) = g[g.len() - 2];
        damaged[at + 40] ^= 1;
        match Pool::open_image(damaged, LAYOUT) {
            Err(rewind::Error::LogCorrupt { reason, .. }) => {
                assert!(reason.contains("damaged"), "{v:?}: {reason}")
            }
            Err(e) => panic!("{v:?}: another error: {e}"),
            Ok(p) => panic!(
                "{v:?}: opened, the word {} (5 committed)",
                p.read(word).unwrap()
            ),
        }
        // The last group damaged: as torn, its commit lost.
        let mut last = img.clone();
        let (_, at) = g[g.len() - 1];
        last[at + 40] ^= 1;
        let rec = Pool::open_image(last, LAYOUT).unwrap();
        assert_eq!(rec.read(word).unwrap(), 4, "{v:?}");
        // Undamaged: every commit.
        let rec = Pool::open_image(img, LAYOUT).unwrap();
        assert_eq!(rec.read(word).unwrap(), 5, "{v:?}");
    }
}

#[test]
fn a_torn_group_is_not_replayed() {
    let (pool, root) = pool(LogVariant::Batch, 4 << 20);
    let words = root.cast::<u64>();
    pool.transaction(|tx| tx.write(words.at(1), &1)).unwrap();
    pool.sync().unwrap();
    // A group of several lines; its write-back not yet durable.
    pool.transaction(|tx| {
        for j in 0..32u64 {
            tx.write(words.at(2 + j * 8), &(7 + j))?;
        }
        Ok::<_, rewind::Error>(())
    })
    .unwrap();
    let img = pool.domain().with_sim(|s| s.image_none_pending()).unwrap();
    // The group is durable: recovery replays it.
    let rec = Pool::open_image(img.clone(), LAYOUT).unwrap();
    assert_eq!(rec.read(root).unwrap()[2 + 31 * 8], 7 + 31);
    assert_eq!(rec.recovery_report().ring_groups, 1);
    drop(rec);
    // Torn (one line of it as before its write): not replayed, and the
    // earlier commit stays.
    let mut torn = img;
    let &(_, at) = groups(&torn).last().expect("a group in the ring");
    torn[at + 2 * 64 + 8] ^= 0xff;
    let rec = Pool::open_image(torn, LAYOUT).unwrap();
    let got = rec.read(root).unwrap();
    assert_eq!(got[1], 1, "the earlier commit stays");
    for j in 0..32 {
        assert_eq!(got[2 + j * 8], 0, "the torn group is not replayed");
    }
    assert_eq!(rec.recovery_report().ring_groups, 0);
}

#[test]
fn an_unlogged_store_drains_the_ring_only_over_lines_a_group_wrote() {
    for v in LogVariant::ALL {
        let (pool, root) = pool(v, 4 << 20);
        let words = root.cast::<u64>();
        let block = pool.transaction(|tx| tx.alloc_bytes(256)).unwrap();
        // The allocation's group zeroes the block (a replay would zero it
        // again): drained, and the Log Start made durable by a fence of
        // this thread, so that no group recovery could replay wrote it.
        pool.sync().unwrap();
        pool.fence().unwrap();
        pool.transaction(|tx| tx.write(words.at(0), &11)).unwrap();
        // Elsewhere: the copy's own fence, no drain.
        let before = pool.counters();
        pool.write_unlogged(block, &[7u8; 200]).unwrap();
        pool.fence().unwrap();
        assert_eq!(pool.counters().since(&before).fences, 1, "{v}");
        // Over the line the group wrote: drained first (one fence more).
        let before = pool.counters();
        pool.write_unlogged(words.at(1).offset(), &22u64.to_le_bytes())
            .unwrap();
        pool.fence().unwrap();
        assert_eq!(pool.counters().since(&before).fences, 2, "{v}");
        for all in [false, true] {
            let rec = recovered(&pool, all);
            let got = rec.read(root).unwrap();
            assert_eq!((got[0], got[1]), (11, 22), "{v} all={all}");
            let mut b = [0u8; 200];
            rec.read_bytes(block, &mut b).unwrap();
            assert_eq!(b, [7u8; 200], "{v} all={all}");
        }
    }
}

#[test]
fn an_unlogged_store_after_another_threads_drain_is_not_replayed_over() {
    for v in LogVariant::ALL {
        let (pool, root) = pool(v, 4 << 20);
        let words = root.cast::<u64>();
        // Thread A commits a group and drains: the Log Start past it is
        // stored, and A does not fence again.
        std::thread::scope(|s| {
            s.spawn(|| {
                pool.transaction(|tx| tx.write(words.at(0), &11)).unwrap();
                pool.sync().unwrap();
            });
        });
        // Thread B stores over the group's word and fences: a recovery must
        // not replay the group over it, whether A's Log Start reached the
        // media or not.
        std::thread::scope(|s| {
            s.spawn(|| {
                pool.write_unlogged(words.at(0).offset(), &33u64.to_le_bytes())
                    .unwrap();
                pool.fence().unwrap();
            });
        });
        for all in [false, true] {
            let rec = recovered(&pool, all);
            assert_eq!(rec.read(root).unwrap()[0], 33, "{v} all={all}");
        }
    }
}

/// A group records where it lies in the ring, not each range it wrote:
/// a store in place reads the groups still replayable back to find their
/// lines. Every entry of a group counts, its first, its last, and each
/// line of a value over several, in a group of many entries and with
/// later groups after it; a line no group wrote needs no drain.
#[test]
fn a_store_in_place_finds_every_line_of_every_entry_of_a_replayable_group() {
    // The offset of the root's 8-byte word `i`.
    let words = |i: u64| i * 8;
    // (word of the store in place, whether a group wrote its line)
    let probes = [
        (0, true),     // the group's first entry
        (800, true),   // one in the middle
        (1607, true),  // its last entry
        (4000, true),  // the first line of the 200-byte value
        (4016, true),  // its third line
        (4024, true),  // its last line (bytes 192..200)
        (4032, false), // the line after it
        (3000, false), // a line no group wrote
        (6000, true),  // the later group's entry
    ];
    for ordered in [true, false] {
        for (word, written) in probes {
            let (pool, root) = pool(LogVariant::Batch, 8 << 20);
            pool.domain().set_sim_ordered(ordered);
            pool.sync().unwrap();
            pool.fence().unwrap();
            let base = root.offset();
            pool.transaction(|tx| {
                for i in (0..1600).step_by(100).chain([1607]) {
                    tx.write_bytes(base + words(i), &(i + 1).to_le_bytes())?;
                }
                tx.write_bytes(base + words(4000), &[5u8; 200])
            })
            .unwrap();
            pool.transaction(|tx| tx.write_bytes(base + words(6000), &[6u8; 8]))
                .unwrap();
            let before = pool.counters().fences;
            pool.write_unlogged(base + words(word), &[9u8; 8]).unwrap();
            pool.fence().unwrap();
            let fences = pool.counters().fences - before;
            let what = format!("ordered {ordered}, word {word}");
            match written {
                true => assert!(fences >= 2, "{what}: no drain before the store"),
                false => assert_eq!(fences, 1, "{what}: a drain no group needed"),
            }
            for all in [false, true] {
                let back = recovered(&pool, all);
                let mut got = [0u8; 8];
                back.read_bytes(base + words(word), &mut got).unwrap();
                assert_eq!(got, [9u8; 8], "{what}, all={all}");
                back.read_bytes(base + words(1607), &mut got).unwrap();
                let last = if word == 1607 {
                    [9u8; 8]
                } else {
                    1608u64.to_le_bytes()
                };
                assert_eq!(got, last, "{what}, all={all}");
            }
        }
    }
}

/// A store in place over lines a group still replayable wrote drains the
/// ring first, also when the group recorded its write-back without the
/// ring's latch (persistent memory's order, which the simulator is told
/// to keep here): the store's check must see that group's lines. Without
/// the drain, a crash replays the group's old value over the store.
#[test]
fn a_store_in_place_over_a_group_recorded_without_the_latch_drains_first() {
    for ordered in [true, false] {
        let (pool, root) = pool(LogVariant::Batch, 8 << 20);
        pool.domain().set_sim_ordered(ordered);
        // The root's zeroing (its group) drained, and the Log Start past
        // it durable (this thread's fence): only the next group covers
        // the word.
        pool.sync().unwrap();
        pool.fence().unwrap();
        let word = root.cast::<u64>().at(40);
        pool.transaction(|tx| tx.write(word, &7)).unwrap();
        let before = pool.counters().fences;
        pool.write_unlogged(word.offset(), &9u64.to_le_bytes())
            .unwrap();
        pool.fence().unwrap();
        assert!(
            pool.counters().fences >= before + 2,
            "ordered {ordered}: no drain before the store"
        );
        let back = recovered(&pool, true);
        assert_eq!(back.read(word).unwrap(), 9, "ordered {ordered}");
    }
}

/// `inspect::dump_log` (`rewind dump-log`) lists the commit groups a crash
/// left in the ring after the log's transactions: each with its entries
/// (adjacent words coalesced into one value), in global commit order, to be
/// replayed; recovery replays them, and after a clean close none is left.
#[test]
fn dump_log_lists_the_commit_groups_a_crash_left_in_the_ring() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("groups.pool");
    let cfg = PoolConfig::default().policy(Policy::Redo);
    let pool = Pool::create(&path, LAYOUT, 64 << 20, &cfg).unwrap();
    let root = pool.transaction(|tx| tx.root::<[u64; 8192]>()).unwrap();
    let words = root.cast::<u64>();
    for i in 0..5u64 {
        pool.transaction(|tx| {
            tx.write(words.at(i * 64), &(100 + i))?;
            tx.write(words.at(i * 64 + 1), &(200 + i))
        })
        .unwrap();
    }
    pool.crash();

    let listed = rewind::inspect::dump_log(&path).unwrap();
    let groups: Vec<_> = listed.iter().filter(|t| t.group.is_some()).collect();
    assert!(groups.len() >= 5, "{listed:#?}");
    // The log's transactions come first, then the groups.
    let first = listed.iter().position(|t| t.group.is_some()).unwrap();
    assert!(listed[first..].iter().all(|t| t.group.is_some()));
    assert!(groups.windows(2).all(|w| w[0].tx < w[1].tx), "global order");
    for (i, g) in groups[groups.len() - 5..].iter().enumerate() {
        assert_eq!(g.status, "committed", "{g}");
        assert_eq!(g.records.len(), 1, "{g}");
        let e = &g.records[0];
        assert_eq!((e.kind, e.len), ("VALUE", 16), "{g}");
        assert_eq!(e.target, words.at(i as u64 * 64).offset(), "{g}");
        let place = g.group.unwrap();
        assert_eq!(e.block, place.offset);
        let text = g.to_string();
        assert!(
            text.starts_with("commit group ") && text.contains("committed"),
            "{text}"
        );
    }

    let report = rewind::inspect::check(&path).unwrap();
    assert!(report.is_ok(), "{report:?}");
    let to_replay = groups.iter().filter(|g| g.status == "committed").count();
    let note = format!("the commit ring holds {to_replay} commit groups to replay");
    assert!(
        report.notes.iter().any(|n| n.starts_with(&note)),
        "{report:?}"
    );

    let pool = Pool::open(&path, LAYOUT, &rewind::OpenOptions::default()).unwrap();
    for i in 0..5u64 {
        assert_eq!(pool.read(words.at(i * 64)).unwrap(), 100 + i);
        assert_eq!(pool.read(words.at(i * 64 + 1)).unwrap(), 200 + i);
    }
    pool.close().unwrap();
    let listed = rewind::inspect::dump_log(&path).unwrap();
    assert!(listed.iter().all(|t| t.group.is_none()), "{listed:#?}");
}
