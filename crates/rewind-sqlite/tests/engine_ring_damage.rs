//! A defect found by probing WAL pools with damaged bytes, reproduced on
//! the engine alone (the cause was in `crates/rewind`'s redo recovery).
//!
//! Redo recovery replays the commit ring's groups in order and stopped at
//! the first whose CRC fails, even when valid groups of later commits
//! followed it. A group damaged after its commit (one flipped byte) then
//! made recovery replay the groups before it over values the damaged
//! group and those after it had already written in place: the pool opened
//! without an error, with values of an older commit. Through
//! `rewind-sqlite` this was a silent loss of committed SQLite
//! transactions: each link of a new WAL block is a rewind transaction that
//! zeroes the new block's `next` word and sets the previous block's; one
//! flipped byte in the group of the second-to-last link made the replay of
//! the link before it cut the block chain there, and a database of 40
//! committed rows opened with 36, no error. Each group now says how many
//! groups of its lane were not yet written back when it was reserved, so
//! recovery knows a later group written after the damaged one was
//! durable, and refuses the pool (`LogCorrupt`).

use rewind::{OpenOptions, Policy, Pool, PoolConfig};

/// Offsets of the commit ring's groups in a pool file's bytes, ordered by
/// their lane sequence number: each starts on a 64-byte line with the
/// magic "RG" (`docs/format.md`: magic u16, lag u16, entry bytes u32,
/// lane sequence number u64 at 8).
fn groups(bytes: &[u8]) -> Vec<(u64, usize)> {
    let mut found: Vec<(u64, usize)> = (0..bytes.len().saturating_sub(64))
        .step_by(64)
        .filter(|&at| &bytes[at..at + 2] == b"RG")
        .map(|at| {
            let csn = u64::from_le_bytes(bytes[at + 8..at + 16].try_into().unwrap());
            (csn, at)
        })
        .collect();
    found.sort();
    found
}

#[test]
fn a_damaged_group_followed_by_valid_ones_is_an_error_not_an_older_value() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ring.pool");
    let cfg = PoolConfig::default().policy(Policy::Redo);
    let pool = Pool::create(&path, "ring-repro", 4 << 20, &cfg).unwrap();
    let root = pool
        .transaction(|tx| tx.root::<[u8; 64]>())
        .unwrap()
        .offset();
    for v in 1..=5u64 {
        pool.transaction(|tx| tx.write_bytes(root, &v.to_le_bytes()))
            .unwrap();
    }
    // The file as a crash now leaves it (the pool still open): every
    // commit is durable, and its group still in the ring.
    let mut image = std::fs::read(&path).unwrap();
    drop(pool);
    let g = groups(&image);
    assert!(g.len() >= 3, "groups found: {g:?}");
    // One byte of the entries of the second-to-last group (the commit of
    // 4), after which the commit of 5 checks.
    let (_, at) = g[g.len() - 2];
    image[at + 40] ^= 0x01;
    let copy = dir.path().join("copy.pool");
    std::fs::write(&copy, &image).unwrap();
    match Pool::open(&copy, "ring-repro", &OpenOptions::default()) {
        Err(e) => assert!(
            matches!(e, rewind::Error::LogCorrupt { .. }),
            "refused, but not as damage to the log: {e}"
        ),
        Ok(p) => {
            let mut v = [0u8; 8];
            p.read_bytes(root, &mut v).unwrap();
            assert_eq!(
                u64::from_le_bytes(v),
                5,
                "a committed value replaced by an older one, without an error"
            );
        }
    }
}
