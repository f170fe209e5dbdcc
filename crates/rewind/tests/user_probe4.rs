//! A fourth round of a user's programs probed from outside (after
//! `user_probe.rs`, `user_probe2.rs` and `user_probe3.rs`): configuration
//! values at the ends of their types. Counts only, never time.

mod common;

use std::sync::mpsc;

use rewind::{NvmLatency, OpenOptions, PPtr, Pool, PoolConfig};

const LAYOUT: &str = "probe4";

/// An emulated NVM latency past any the emulation means (the `rewind
/// bench` flags stop at 1 ms) is `InvalidConfig` at create and at open,
/// never a create or open that spins for centuries charging it (a debug
/// build overflowed multiplying it by the lines written). The bound
/// itself is taken. Run in a thread, so that the old hang shows as a
/// silence `REWIND_HANG_LIMIT_SECS` names.
#[test]
fn an_nvm_latency_past_a_millisecond_is_invalid_config_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let (send, recv) = mpsc::channel();
    let d = dir.path().to_path_buf();
    std::thread::spawn(move || {
        let huge = [
            NvmLatency::new(u64::MAX, 0),
            NvmLatency::new(0, u64::MAX),
            NvmLatency::new(1_000_001, 0),
            NvmLatency::new(0, 1_000_001),
        ];
        for (i, l) in huge.into_iter().enumerate() {
            let path = d.join(format!("c{i}.pool"));
            let cfg = PoolConfig::default().nvm_latency(l);
            let r = Pool::create(&path, LAYOUT, 4 << 20, &cfg).map(|_| ());
            send.send(format!("create {l:?}: {r:?}, file left: {}", path.exists()))
                .unwrap();
        }
        let path = d.join("ok.pool");
        let cfg = PoolConfig::default().nvm_latency(NvmLatency::new(1_000_000, 1_000_000));
        let pool = Pool::create(&path, LAYOUT, 4 << 20, &cfg).unwrap();
        let r: PPtr<u64> = pool.transaction(|tx| tx.root()).unwrap();
        pool.transaction(|tx| tx.write(r, &7)).unwrap();
        pool.close().unwrap();
        for l in huge {
            let opts = OpenOptions::default().nvm_latency(l);
            let r = Pool::open(&path, LAYOUT, &opts).map(|_| ());
            send.send(format!("open {l:?}: {r:?}")).unwrap();
        }
        let pool = Pool::open(&path, LAYOUT, &OpenOptions::default()).unwrap();
        send.send(format!("reopened: {:?}", pool.read(r))).unwrap();
        pool.close().unwrap();
    });
    let mut seen = Vec::new();
    for _ in 0..9 {
        match common::recv_watched(&recv) {
            Ok(s) => seen.push(s),
            Err(e) => panic!("no answer ({e:?}) after {seen:#?}"),
        }
    }
    for s in &seen[..8] {
        assert!(
            s.contains("InvalidConfig") && !s.contains("file left: true"),
            "{s}"
        );
    }
    assert_eq!(seen[8], "reopened: Ok(7)");
}
