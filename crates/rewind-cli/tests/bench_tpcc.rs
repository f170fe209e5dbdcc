//! `rewind bench tpcc` (REWIND Fig. 11): every system has its rows at one
//! and two threads, every system committed the same new-orders (the run
//! itself fails if any system's answers differ from the others'), and the
//! recoverable systems fence at least once per transaction. Counts only:
//! times are never checked. At the hidden `--tiny` scale, as the other
//! bench tests: `--quick` loads 10,000 items per system and takes 20 s in
//! a debug build on an idle machine, over a minute on a busy one.

mod common;

use common::value;
const SYSTEMS: [(&str, &str); 6] = [
    ("volatile", "dram"),
    ("persist-nolog", "nolog"),
    ("rewind", "batch-redo"),
    ("rewind", "batch-force"),
    ("rewind-collections", "batch-redo"),
    ("sqlite", "wal-full"),
];

#[test]
fn bench_tpcc_has_every_system_and_they_agree() {
    let json = common::run_tiny("tpcc");
    let rows = json["rows"].as_array().unwrap();
    for t in [1, 2] {
        let p = format!("threads={t}");
        let committed = value(rows, "volatile", "dram", &p, "committed").unwrap();
        assert!(committed > 0.0, "{p}: nothing committed");
        for (s, c) in SYSTEMS {
            for m in ["us_per_tx", "tpm", "ratio_vs_nolog"] {
                let v = value(rows, s, c, &p, m);
                assert!(v.is_some_and(|v| v > 0.0), "{s}/{c} {p} {m}: {v:?}");
            }
            assert_eq!(
                value(rows, s, c, &p, "committed"),
                Some(committed),
                "{s}/{c} {p}: committed a different number of new-orders"
            );
        }
        for (s, c) in &SYSTEMS[2..5] {
            let f = value(rows, s, c, &p, "fences_per_tx").unwrap();
            assert!(f >= 1.0, "{s}/{c} {p}: {f} fences per transaction");
            assert!(value(rows, s, c, &p, "speed_vs_sqlite").is_some());
        }
        // The no-log run fences once per transaction that wrote (a
        // remote line's warehouse once more).
        let f = value(rows, "persist-nolog", "nolog", &p, "fences_per_tx").unwrap();
        assert!((0.9..1.5).contains(&f), "persist-nolog {p}: {f} fences");
        assert!(value(rows, "sqlite", "wal-full", &p, "fences_per_tx").is_none());
    }
}
