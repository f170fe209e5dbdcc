//! Named, typed roots: created on first use with their type's fingerprint,
//! found again after a reopen, refused under another type (even one of the
//! same size), forgotten by a rollback, and listed by `inspect::info`.

use rewind::{Error, OpenOptions, PPtr, Pod, Pool, PoolConfig, Typed, Zeroable};

/// Derived through rewind's re-export: no bytemuck dependency needed.
#[derive(Clone, Copy, Pod, Zeroable)]
#[bytemuck(crate = "rewind::bytemuck")]
#[repr(C)]
struct Account {
    id: u64,
    balance: u64,
}

impl Typed for Account {
    fn type_name() -> String {
        "bank::Account".into()
    }
}

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct Pair {
    a: u64,
    b: u64,
}

impl Typed for Pair {
    fn type_name() -> String {
        "test::Pair".into()
    }
}

#[test]
fn a_root_reopened_as_another_type_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("n.pool");
    let pool = Pool::create(&path, "named", 4 << 20, &PoolConfig::default()).unwrap();
    let acc: PPtr<Account> = pool.transaction(|tx| tx.root_named("accounts")).unwrap();
    pool.transaction(|tx| tx.write(acc, &Account { id: 1, balance: 10 }))
        .unwrap();
    let hits: PPtr<u64> = pool.transaction(|tx| tx.root_named("hits")).unwrap();
    assert_ne!(acc.offset(), hits.offset());
    drop(pool);
    let pool = Pool::open(&path, "named", &OpenOptions::default()).unwrap();
    let again: PPtr<Account> = pool.transaction(|tx| tx.root_named("accounts")).unwrap();
    assert_eq!(again, acc);
    assert_eq!(pool.read(acc).unwrap().balance, 10);
    assert_eq!(pool.root_named::<Account>("accounts").unwrap(), Some(acc));
    assert_eq!(pool.root_named::<Account>("nobody").unwrap(), None);
    // Same size and alignment, another type: refused, naming both.
    let e = pool
        .transaction(|tx| tx.root_named::<Pair>("accounts"))
        .unwrap_err();
    match &e {
        Error::TypeMismatch {
            name,
            found,
            expected,
        } => {
            assert_eq!(name, "accounts");
            assert!(
                found.contains("bank::Account") && expected.contains("test::Pair"),
                "{e}"
            );
        }
        _ => panic!("{e}"),
    }
    assert!(matches!(
        pool.root_named::<i64>("hits"),
        Err(Error::TypeMismatch { .. })
    ));
    let names: Vec<String> = pool.roots().unwrap().into_iter().map(|r| r.name).collect();
    assert_eq!(names, ["accounts", "hits"]);
    drop(pool);
    let info = rewind::inspect::info(&path).unwrap();
    let listed = info.roots.as_ref().unwrap();
    assert_eq!(listed.len(), 2);
    assert!(info.to_string().contains("bank::Account"), "{info}");
    assert!(rewind::inspect::check(&path).unwrap().is_ok());
}

/// `info`'s text shows a root's name escaped: a newline or an escape
/// sequence in a name cannot break its row or drive the terminal.
#[test]
fn info_text_escapes_root_names() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("esc.pool");
    let pool = Pool::create(&path, "named", 4 << 20, &PoolConfig::default()).unwrap();
    for name in ["new\nline", "\u{1b}[31mred", "tab\there"] {
        pool.transaction(|tx| tx.root_named::<u64>(name)).unwrap();
    }
    drop(pool);
    let text = rewind::inspect::info(&path).unwrap().to_string();
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("root `")).collect();
    assert_eq!(rows.len(), 3, "{text}");
    assert!(!text.contains('\u{1b}') && !text.contains('\t'), "{text:?}");
    assert!(text.contains("root `new\\nline`"), "{text}");
}

#[test]
fn many_roots_grow_the_catalog_and_a_rollback_forgets_a_new_one() {
    let pool = Pool::create_sim("named", 4 << 20, &PoolConfig::default()).unwrap();
    let mut ptrs = Vec::new();
    for i in 0..100u64 {
        let p: PPtr<[u64; 3]> = pool
            .transaction(|tx| tx.root_named(&format!("root-{i}")))
            .unwrap();
        pool.transaction(|tx| tx.write(p, &[i, i, i])).unwrap();
        ptrs.push(p);
    }
    for (i, p) in ptrs.iter().enumerate() {
        let q = pool.root_named::<[u64; 3]>(&format!("root-{i}")).unwrap();
        assert_eq!(q, Some(*p));
        assert_eq!(pool.read(*p).unwrap(), [i as u64; 3]);
    }
    let _ = pool.transaction(|tx| {
        tx.root_named::<u64>("ephemeral")?;
        Err::<(), _>(Error::Aborted)
    });
    assert_eq!(pool.root_named::<u64>("ephemeral").unwrap(), None);
    assert_eq!(pool.roots().unwrap().len(), 100);
    assert!(rewind::inspect::check_pool(&pool).is_ok());
    let e = pool.transaction(|tx| tx.root_named::<u64>("")).unwrap_err();
    assert!(matches!(e, Error::InvalidConfig { .. }), "{e}");
    let long = "x".repeat(48);
    let e = pool
        .transaction(|tx| tx.root_named::<u64>(&long))
        .unwrap_err();
    assert!(matches!(e, Error::InvalidConfig { .. }), "{e}");
}

/// A program's linked list: each node holds its value and value * 3.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct Node {
    next: u64,
    value: u64,
    triple: u64,
}

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct Chain {
    head: u64,
}

impl Typed for Chain {
    fn type_name() -> String {
        "test::Chain".into()
    }
}

fn check_chain(pool: &Pool, root: &rewind::NamedRoot) -> Vec<String> {
    let mut problems = Vec::new();
    let Ok(c) = pool.read(PPtr::<Chain>::from_offset(root.offset)) else {
        return vec!["unreadable".into()];
    };
    let mut at = c.head;
    while at != 0 {
        match pool.read(PPtr::<Node>::from_offset(at)) {
            Ok(n) if n.triple == n.value * 3 => at = n.next,
            Ok(_) => {
                problems.push(format!("node {at:#x} breaks its invariant"));
                break;
            }
            Err(e) => {
                problems.push(format!("node {at:#x}: {e}"));
                break;
            }
        }
    }
    problems
}

#[test]
fn check_deep_runs_the_registered_check_of_each_root() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deep.pool");
    let pool = Pool::create(&path, "named", 4 << 20, &PoolConfig::default()).unwrap();
    let chain: PPtr<Chain> = pool.transaction(|tx| tx.root_named("chain")).unwrap();
    let mut nodes = Vec::new();
    pool.transaction(|tx| {
        let mut head = 0;
        for v in 0..10u64 {
            let n = tx.alloc::<Node>()?;
            tx.write(
                n,
                &Node {
                    next: head,
                    value: v,
                    triple: v * 3,
                },
            )?;
            head = n.offset();
            nodes.push(n);
        }
        tx.write(chain, &Chain { head })
    })
    .unwrap();
    let _: PPtr<u64> = pool.transaction(|tx| tx.root_named("unchecked")).unwrap();
    drop(pool);
    rewind::inspect::register_deep_check("test::Chain", check_chain);
    let r = rewind::inspect::check_deep(&path).unwrap();
    assert!(r.is_ok(), "{r}");
    assert!(r.to_string().contains("no deep check registered"), "{r}");
    // Damage one node's payload: the pool's own structures stay sound.
    let mut bytes = std::fs::read(&path).unwrap();
    let off = nodes[4].offset() as usize + 16;
    bytes[off] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    assert!(rewind::inspect::check(&path).unwrap().is_ok());
    let r = rewind::inspect::check_deep(&path).unwrap();
    assert!(!r.is_ok(), "{r}");
    assert!(r.to_string().contains("breaks its invariant"), "{r}");
}

/// Runs `body` in a transaction, again while it fails with `Deadlock` (two
/// transactions that both read the catalog, then both add to it, under an
/// undo policy: one of them is rolled back and retried, as a program would).
fn retried<R>(pool: &Pool, mut body: impl FnMut(&mut rewind::Tx<'_>) -> Result<R, Error>) -> R {
    loop {
        match pool.transaction(&mut body) {
            Err(Error::Deadlock { .. }) => continue,
            r => return r.unwrap(),
        }
    }
}

/// Threads that create roots at the same time (found by a user: neither
/// `root` nor `root_named` took a lock, so two transactions both found no
/// root and both created one; the last commit won, acknowledged roots were
/// lost, and a name named different objects in different threads). Each
/// creation now holds the root's (or the catalog's) lock until its
/// transaction ends, and looks again once it holds it. Every policy.
#[test]
fn threads_creating_roots_at_once_share_one_root_per_name() {
    use rewind::Policy;
    for policy in [
        Policy::Redo,
        Policy::Force,
        Policy::NoForce,
        Policy::RedoAsync,
    ] {
        let cfg = PoolConfig::default().policy(policy);
        let pool = Pool::create_sim("race", 16 << 20, &cfg).unwrap();
        // Waits end by the holders' commits, never by the clock.
        pool.set_lock_timeout(std::time::Duration::MAX);
        let barrier = std::sync::Barrier::new(4);
        let got: Vec<(Vec<u64>, Vec<u64>)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4u64)
                .map(|t| {
                    let (pool, barrier) = (&pool, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        // The unnamed root, incremented by every thread.
                        let root = retried(pool, |tx| {
                            let r: PPtr<u64> = tx.root()?;
                            tx.lock(r)?; // the increment is the program's to isolate
                            let v = tx.read(r)?;
                            tx.write(r, &(v + 1))?;
                            Ok(r.offset())
                        });
                        let mut shared = vec![root];
                        let mut own = Vec::new();
                        for i in 0..40u64 {
                            // A name every thread asks for, and one of its own.
                            let s: PPtr<u64> =
                                retried(pool, |tx| tx.root_named(&format!("shared{}", i % 5)));
                            shared.push(s.offset());
                            let o: PPtr<u64> = retried(pool, |tx| {
                                let o: PPtr<u64> = tx.root_named(&format!("t{t}-{i}"))?;
                                tx.write(o, &(t * 1000 + i))?;
                                Ok(o)
                            });
                            own.push(o.offset());
                        }
                        (shared, own)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        pool.sync().unwrap();
        let root = pool.root::<u64>().unwrap().unwrap();
        assert_eq!(
            pool.read(root).unwrap(),
            4,
            "{policy:?}: every increment kept"
        );
        for (t, (shared, own)) in got.iter().enumerate() {
            assert_eq!(
                shared, &got[0].0,
                "{policy:?}: thread {t} got other shared roots"
            );
            for (i, &o) in own.iter().enumerate() {
                let found = pool.root_named::<u64>(&format!("t{t}-{i}")).unwrap();
                assert_eq!(found.map(|p| p.offset()), Some(o), "{policy:?}: t{t}-{i}");
                assert_eq!(
                    pool.read(PPtr::<u64>::from_offset(o)).unwrap(),
                    t as u64 * 1000 + i as u64
                );
            }
        }
        assert_eq!(pool.roots().unwrap().len(), 4 * 40 + 5, "{policy:?}");
    }
}
