//! Isolation probes, fourth round: multi-threaded and interleaved programs
//! against the documented isolation promises (`docs/collections.md`,
//! Isolation). `cargo test --release -p rewind-collections --test
//! iso_probe4`.

use rewind::{Policy, Pool, PoolConfig};
use rewind_collections::{BTreeMap, Error};

/// A scan through `&Pool` of a map that a commit destroyed, whose header
/// block a map of other types (same kind, same sizes: `u64 -> i64`) then
/// took, ends with `Changed`, as the docs promise for an error met while
/// a writer held the collection: it ended with `TypeMismatch` ("created
/// for other value types"), when the scan, past the length it began with
/// in the new map's leaves, read the header again. Under redo, force and
/// no-force.
#[test]
fn a_scan_whose_map_is_destroyed_and_its_header_reused_by_other_types_ends_changed() {
    for policy in [Policy::Redo, Policy::Force, Policy::NoForce] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = PoolConfig::default().policy(policy);
        let pool = Pool::create(dir.path().join("s.pool"), "s", 16 << 20, &cfg).unwrap();
        let m = pool
            .transaction(|tx| {
                let m = BTreeMap::<u64, u64>::create_with_fanout(tx, 4)?;
                for k in 0..8 {
                    m.insert(tx, k, k)?;
                }
                Ok::<_, Error>(m)
            })
            .unwrap();
        let mut it = m.iter(&pool).unwrap();
        assert_eq!(it.next().unwrap().unwrap(), (0, 0));
        pool.transaction(|tx| m.destroy(tx)).unwrap();
        let m2 = pool
            .transaction(|tx| {
                let m2 = BTreeMap::<u64, i64>::create_with_fanout(tx, 4)?;
                for k in 0..200 {
                    m2.insert(tx, k, -(k as i64))?;
                }
                Ok::<_, Error>(m2)
            })
            .unwrap();
        // The case probed: the new map's header is where the old one was.
        assert_eq!(m2.as_ptr().offset(), m.as_ptr().offset(), "{policy:?}");
        let mut end = None;
        for e in it.by_ref().take(1_000) {
            if let Err(e) = e {
                end = Some(e);
                break;
            }
        }
        assert!(
            matches!(end, None | Some(Error::Changed { .. })),
            "{policy:?}: the scan ended with {end:?}"
        );
        // Read through the old handle now, the map is another's: that is
        // an answer of its own, not a scan that met a change.
        assert!(matches!(m.len(&pool), Err(Error::TypeMismatch { .. })));
    }
}

/// What a thread-local value's destructor read from a map as its thread
/// ended (`tls_read_child`).
static READ_AT_EXIT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// A thread-local value that reads a map when dropped (a cache that logs
/// a last lookup as its thread ends).
struct ReadAtExit(Option<(std::sync::Arc<Pool>, BTreeMap<u64, u64>)>);

impl Drop for ReadAtExit {
    fn drop(&mut self) {
        if let Some((pool, m)) = self.0.take() {
            let got = m.get(&pool, &7).map(|v| v.unwrap_or(0));
            let len = m.len(&pool);
            // A change there: committed, or refused as the thread ends.
            let put = match pool.transaction(|tx| m.insert(tx, 8, 80)) {
                Ok(_) => "committed".to_string(),
                Err(Error::Pool(rewind::Error::TxMisuse(_))) => "refused".to_string(),
                Err(e) => format!("error {e}"),
            };
            READ_AT_EXIT
                .lock()
                .unwrap()
                .push(format!("get {got:?} len {len:?} insert {put}"));
        }
    }
}

thread_local! {
    static READER: std::cell::RefCell<ReadAtExit> =
        const { std::cell::RefCell::new(ReadAtExit(None)) };
}

/// The child of `a_map_read_in_a_thread_local_destructor_is_answered_not_an_abort`.
#[test]
fn tls_read_child() {
    if std::env::var_os("REWIND_ISO_PROBE4_TLS_READ_CHILD").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pool = std::sync::Arc::new(
        Pool::create(
            dir.path().join("r.pool"),
            "r",
            8 << 20,
            &PoolConfig::default(),
        )
        .unwrap(),
    );
    let m = pool
        .transaction(|tx| {
            let m = BTreeMap::<u64, u64>::create(tx)?;
            m.insert(tx, 7, 70)?;
            Ok::<_, Error>(m)
        })
        .unwrap();
    let p = pool.clone();
    std::thread::spawn(move || {
        // Registered before the thread's first read of the map: dropped
        // after what that read set up on this thread.
        READER.with(|r| r.borrow_mut().0 = Some((p.clone(), m)));
        assert_eq!(m.get(&p, &7).unwrap(), Some(70));
    })
    .join()
    .unwrap();
    let insert = match m.get(&pool, &8).unwrap() {
        Some(80) => "committed",
        None => "refused",
        Some(v) => panic!("{v}"),
    };
    println!("{} / {insert}", READ_AT_EXIT.lock().unwrap()[0]);
}

/// A thread that reads a map through `&Pool` and whose thread-local
/// value reads it again in its destructor: the library's per-thread cache
/// of type-name hashes (a thread-local with a destructor, read with
/// `with`) was gone by then, the read panicked ('cannot access a Thread
/// Local Storage value during or after destruction') and the process
/// aborted. Run in a child process.
#[test]
fn a_map_read_in_a_thread_local_destructor_is_answered_not_an_abort() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "tls_read_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("REWIND_ISO_PROBE4_TLS_READ_CHILD", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed: {stdout}\n{stderr}");
    assert!(
        stdout.contains("get Ok(70) len Ok(1) insert committed / committed")
            || stdout.contains("get Ok(70) len Ok(1) insert refused / refused"),
        "{stdout}"
    );
}
