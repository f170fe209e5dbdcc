//! The `rewind` command on pools that a process running several threads of
//! collection transactions left when it was SIGKILLed (several
//! transactions in flight at once, in several commit lanes), under every
//! log variant × policy and on Msync: the readers report them without
//! changing a byte and find no problem, `recover` recovers them, and the
//! recovered pool holds exactly the acknowledged transactions (at most
//! one more per thread, whole).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use rewind::{Backend, LogVariant, OpenOptions, PPtr, Policy, Pool, PoolConfig};
use rewind_collections::{BTreeMap, Blob, Error, HashMap, List};

const LAYOUT: &str = "cli-probe3";
/// Set in the child: `PATH|variant|policy|backend`.
const CHILD: &str = "REWIND_CLI_PROBE3_CHILD";
const THREADS: u64 = 4;
/// Acknowledgements the parent reads before it kills the child.
const ACKS: u64 = 120;

#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Root {
    map: u64,
    counts: u64,
    blob: u64,
    strings: u64,
    lists: [u64; THREADS as usize],
}

impl rewind::Typed for Root {
    fn type_name() -> String {
        "cli_probe3::Root".into()
    }
}

struct Colls {
    map: BTreeMap<u64, u64>,
    counts: HashMap<u64, u64>,
    blob: Blob,
    strings: BTreeMap<String, std::vec::Vec<u8>>,
    lists: std::vec::Vec<List<u64>>,
}

fn colls(r: &Root) -> Colls {
    Colls {
        map: BTreeMap::from_ptr(PPtr::from_offset(r.map)),
        counts: HashMap::from_ptr(PPtr::from_offset(r.counts)),
        blob: Blob::from_ptr(PPtr::from_offset(r.blob)),
        strings: BTreeMap::from_ptr(PPtr::from_offset(r.strings)),
        lists: r
            .lists
            .iter()
            .map(|&l| List::from_ptr(PPtr::from_offset(l)))
            .collect(),
    }
}

fn variant(s: &str) -> LogVariant {
    match s {
        "Simple" => LogVariant::Simple,
        "Optimized" => LogVariant::Optimized,
        "Batch" => LogVariant::Batch,
        _ => LogVariant::TwoLayer,
    }
}

fn policy(s: &str) -> Policy {
    match s {
        "Force" => Policy::Force,
        "NoForce" => Policy::NoForce,
        "Redo" => Policy::Redo,
        _ => Policy::RedoAsync,
    }
}

/// The child: creates the pool, then four threads commit transactions that
/// each change every collection, printing `t i` after each commit returns,
/// until the parent kills the process.
#[test]
fn child_commits_until_killed() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let parts: std::vec::Vec<&str> = spec.split('|').collect();
    let mut cfg = PoolConfig::default()
        .log(variant(parts[1]))
        .policy(policy(parts[2]));
    if parts[3] == "Msync" {
        cfg = cfg.backend(Backend::Msync);
    }
    let pool = Pool::create(parts[0], LAYOUT, 8 << 20, &cfg).expect("create");
    if parts.get(4) == Some(&"exit") {
        // A transaction left in flight: the process ends inside it.
        let m = pool.transaction(BTreeMap::<u64, u64>::create).unwrap();
        pool.transaction(|tx| m.insert(tx, 1, 1)).unwrap();
        let _ = pool.transaction(|tx| {
            for k in 2..100 {
                m.insert(tx, k, k)?;
            }
            std::process::exit(0);
            #[allow(unreachable_code)]
            Ok::<_, Error>(())
        });
    }
    let root = pool
        .transaction(|tx| {
            let mut lists = [0; THREADS as usize];
            for l in &mut lists {
                *l = List::<u64>::create(tx)?.as_ptr().offset();
            }
            let r = Root {
                map: BTreeMap::<u64, u64>::create_with_fanout(tx, 8)?
                    .as_ptr()
                    .offset(),
                counts: HashMap::<u64, u64>::create(tx)?.as_ptr().offset(),
                blob: Blob::create(tx)?.as_ptr().offset(),
                strings: BTreeMap::<String, std::vec::Vec<u8>>::create_with_fanout(tx, 4)?
                    .as_ptr()
                    .offset(),
                lists,
            };
            let root: PPtr<Root> = tx.root_named("root")?;
            tx.write(root, &r)?;
            Ok::<_, Error>(r)
        })
        .expect("setup");
    let out = Mutex::new(std::io::stdout());
    std::thread::scope(|sc| {
        for t in 0..THREADS {
            let (pool, out, c) = (&pool, &out, colls(&root));
            sc.spawn(move || {
                for i in 0.. {
                    let r = pool.transaction(|tx| {
                        c.map.insert(tx, (t << 32) | i, i)?;
                        c.counts.insert(tx, t, i + 1)?;
                        c.blob.append(tx, &((t << 32) | i).to_le_bytes())?;
                        let l = c.lists[t as usize];
                        l.push_back(tx, i)?;
                        let len = l.len_tx(tx)?;
                        if len > 20 {
                            // From the middle, at a cursor.
                            let at = l.cursor_tx(tx, len / 2)?.expect("in the list");
                            l.remove_at(tx, at)?;
                        }
                        c.strings.insert(tx, skey(t, i), sval(i))?;
                        if i >= 5 {
                            c.strings.remove(tx, &skey(t, i - 5))?;
                        }
                        Ok::<_, Error>(())
                    });
                    match r {
                        Ok(()) => {
                            let mut o = out.lock().unwrap();
                            writeln!(o, "{t} {i}").unwrap();
                            o.flush().unwrap();
                        }
                        Err(Error::Pool(rewind::Error::Deadlock { .. })) => panic!("retry"),
                        Err(e) => panic!("thread {t}: {e:?}"),
                    }
                }
            });
        }
    });
}

/// Thread `t`'s string key of its transaction `i` (out of line).
fn skey(t: u64, i: u64) -> String {
    format!("{t}-{i:040}")
}

fn sval(i: u64) -> std::vec::Vec<u8> {
    vec![i as u8; 50 + (i % 30) as usize]
}

/// Thread `t`'s list after `n` commits: each pushes its number, then
/// removes the middle element once there are more than 20.
fn list_model(n: u64) -> std::vec::Vec<u64> {
    let mut l = std::collections::VecDeque::new();
    for i in 0..n {
        l.push_back(i);
        if l.len() > 20 {
            l.remove(l.len() / 2);
        }
    }
    l.into()
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn rewind<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_rewind"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run rewind");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs the child for a configuration and kills it after [`ACKS`]
/// acknowledgements; returns each thread's acknowledged count.
fn killed_child(path: &Path, v: LogVariant, p: Policy, b: &str) -> [u64; THREADS as usize] {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_commits_until_killed", "--nocapture"])
        .env(CHILD, format!("{}|{v:?}|{p:?}|{b}", path.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut acked = [0u64; THREADS as usize];
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = 0;
    while seen < ACKS {
        let Some(Ok(line)) = lines.next() else {
            let mut err = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            panic!("{v:?}/{p:?}/{b}: the child ended after {seen} acknowledgements:\n{err}");
        };
        let mut w = line.split(' ').map(|x| x.parse::<u64>());
        let (Some(Ok(t)), Some(Ok(i))) = (w.next(), w.next()) else {
            continue; // libtest's own lines
        };
        acked[t as usize] = acked[t as usize].max(i + 1);
        seen += 1;
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), None, "killed by the signal");
    // What it printed before the signal is acknowledged too.
    for line in lines.map_while(Result::ok) {
        let mut w = line.split(' ').map(|x| x.parse::<u64>());
        if let (Some(Ok(t)), Some(Ok(i))) = (w.next(), w.next()) {
            acked[t as usize] = acked[t as usize].max(i + 1);
        }
    }
    acked
}

fn check_recovered(path: &Path, acked: [u64; THREADS as usize], what: &str) {
    let pool = Pool::open(path, LAYOUT, &OpenOptions::default()).unwrap();
    let root = pool.root_named::<Root>("root").unwrap().unwrap();
    let c = colls(&pool.read(root).unwrap());
    let mut total = 0;
    let mut blob_words = std::vec::Vec::new();
    for t in 0..THREADS {
        let n = c.counts.get(&pool, &t).unwrap().unwrap_or(0);
        let a = acked[t as usize];
        assert!(
            n == a || n == a + 1,
            "{what}: thread {t}: {n} kept, {a} acked"
        );
        let keys: std::vec::Vec<u64> = c
            .map
            .range(&pool, (t << 32)..((t + 1) << 32))
            .unwrap()
            .map(|e| e.unwrap().0 & 0xffff_ffff)
            .collect();
        assert_eq!(keys, (0..n).collect::<std::vec::Vec<_>>(), "{what}: {t}");
        let list: std::vec::Vec<u64> = c.lists[t as usize]
            .iter(&pool)
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        assert_eq!(list, list_model(n), "{what}: list {t}");
        let strings: std::vec::Vec<(String, std::vec::Vec<u8>)> = c
            .strings
            .range(
                &pool,
                (
                    std::ops::Bound::Included(format!("{t}-").as_str()),
                    std::ops::Bound::Excluded(format!("{t}.").as_str()),
                ),
            )
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        let want: std::vec::Vec<(String, std::vec::Vec<u8>)> = (n.saturating_sub(5)..n)
            .map(|i| (skey(t, i), sval(i)))
            .collect();
        assert_eq!(strings, want, "{what}: strings {t}");
        c.lists[t as usize].check_invariants(&pool).unwrap();
        total += n;
    }
    let blob = c.blob.read(&pool).unwrap();
    assert_eq!(blob.len() as u64, 8 * total, "{what}: blob");
    for w in blob.chunks(8) {
        blob_words.push(u64::from_le_bytes(w.try_into().unwrap()));
    }
    for t in 0..THREADS {
        let mine: std::vec::Vec<u64> = blob_words
            .iter()
            .filter(|w| *w >> 32 == t)
            .map(|w| w & 0xffff_ffff)
            .collect();
        let n = c.counts.get(&pool, &t).unwrap().unwrap_or(0);
        assert_eq!(
            mine,
            (0..n).collect::<std::vec::Vec<_>>(),
            "{what}: blob {t}"
        );
    }
    c.map.check_invariants(&pool).unwrap();
    c.counts.check_invariants(&pool).unwrap();
    c.strings.check_invariants(&pool).unwrap();
    // No block leaked or lost: the allocated blocks are the collections'
    // and the named root's (and the catalog's, which holds its name).
    let mut mine: std::collections::BTreeSet<u64> = [root.offset()].into();
    mine.extend(c.map.blocks(&pool).unwrap());
    mine.extend(c.counts.blocks(&pool).unwrap());
    mine.extend(c.blob.blocks(&pool).unwrap());
    mine.extend(c.strings.blocks(&pool).unwrap());
    for l in &c.lists {
        mine.extend(l.blocks(&pool).unwrap());
    }
    let alloc: std::collections::BTreeSet<u64> =
        rewind::alloc::allocated_blocks(pool.domain(), pool.layout())
            .unwrap()
            .into_iter()
            .map(|(off, _)| off)
            .collect();
    let extra: std::vec::Vec<u64> = alloc.difference(&mine).copied().collect();
    let lost: std::vec::Vec<u64> = mine.difference(&alloc).copied().collect();
    assert!(
        lost.is_empty(),
        "{what}: blocks of the collections not allocated: {lost:?}"
    );
    assert_eq!(
        extra.len(),
        1,
        "{what}: blocks no collection owns: {extra:?}"
    );
}

/// Readers (`info`, `check`, `dump-log`, text and JSON) on a pool killed
/// with transactions in flight in several threads: each ends by itself,
/// `check` finds no problem, none changes a byte; `recover` succeeds; the
/// pool then checks clean and holds exactly the acknowledged commits.
fn probe(dir: &Path, ci: usize, v: LogVariant, p: Policy, b: &str) {
    let what = format!("{v:?}/{p:?}/{b}");
    let path: PathBuf = dir.join(format!("k{ci}.pool"));
    let acked = killed_child(&path, v, p, b);
    let before = std::fs::read(&path).unwrap();
    for args in [
        &["info"][..],
        &["info", "--json"],
        &["check"],
        &["check", "--json"],
        &["dump-log"],
        &["dump-log", "--json"],
    ] {
        let mut a: std::vec::Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
        a.push(path.clone().into());
        let r = rewind(&a);
        assert_eq!(
            r.code,
            Some(0),
            "{what}: {args:?}\n{}\n{}",
            r.stdout,
            r.stderr
        );
        assert!(
            std::fs::read(&path).unwrap() == before,
            "{what}: {args:?} changed the file"
        );
        if args.len() == 2 {
            serde_json::from_str::<serde_json::Value>(&r.stdout)
                .unwrap_or_else(|e| panic!("{what}: {args:?}: {e}\n{}", r.stdout));
        }
    }
    let r = rewind(&[std::ffi::OsStr::new("recover"), path.as_os_str()]);
    assert_eq!(r.code, Some(0), "{what}: recover\n{}", r.stderr);
    let r = rewind(&[std::ffi::OsStr::new("check"), path.as_os_str()]);
    assert_eq!(r.code, Some(0), "{what}: check after recover\n{}", r.stderr);
    check_recovered(&path, acked, &what);
    let r = rewind(&[std::ffi::OsStr::new("check"), path.as_os_str()]);
    assert_eq!(r.code, Some(0), "{what}: check after reopen\n{}", r.stderr);
}

#[test]
fn pools_killed_with_threads_in_flight_check_and_recover_under_every_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let mut ci = 0;
    for v in LogVariant::ALL {
        for p in Policy::ALL {
            probe(dir.path(), ci, v, p, "Pmem");
            ci += 1;
        }
    }
    probe(dir.path(), ci, LogVariant::Batch, Policy::Redo, "Msync");
    probe(
        dir.path(),
        ci + 1,
        LogVariant::Batch,
        Policy::Force,
        "Msync",
    );
}

/// `rewind grow POOL +SIZE` on a pool as created (its file ends in part of
/// a heap chunk): it grew the heap by SIZE in whole chunks, so the pool
/// ended short of its old size plus SIZE, and the command then said that
/// size was "as large as this pool can be", with the maximum far above.
/// It grows the pool by at least SIZE, and says nothing of a maximum it
/// is not near.
#[test]
fn grow_by_a_size_grows_by_at_least_it_and_names_no_false_limit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.pool");
    let cfg = PoolConfig::default().max_size(64 << 20);
    let pool = Pool::create(&path, LAYOUT, 4 << 20, &cfg).unwrap();
    let before = pool.size();
    pool.close().unwrap();
    let r = rewind(&[
        std::ffi::OsStr::new("grow"),
        path.as_os_str(),
        "+1M".as_ref(),
    ]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        !r.stdout.contains("as large as this pool can be"),
        "a false limit:\n{}",
        r.stdout
    );
    let pool = Pool::open(&path, LAYOUT, &OpenOptions::default()).unwrap();
    let after = pool.size();
    pool.close().unwrap();
    assert!(after >= before + (1 << 20), "{before} grew to {after}");
    assert!(std::fs::metadata(&path).unwrap().len() >= after);
    let r = rewind(&[
        std::ffi::OsStr::new("grow"),
        "--json".as_ref(),
        path.as_os_str(),
        "+3M".as_ref(),
    ]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert!(
        v["size"].as_u64().unwrap() >= v["size_before"].as_u64().unwrap() + (3 << 20),
        "{v}"
    );
    // At the maximum the note is true, and said.
    let r = rewind(&[
        std::ffi::OsStr::new("grow"),
        path.as_os_str(),
        "64M".as_ref(),
    ]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let pool = Pool::open(&path, LAYOUT, &OpenOptions::default()).unwrap();
    let top = pool.size();
    pool.close().unwrap();
    assert!(top > (64 << 20) - (256 << 10) && top <= 64 << 20, "{top}");
    assert_eq!(
        r.stdout.contains("as large as this pool can be"),
        top < 64 << 20,
        "{}",
        r.stdout
    );
}

/// `rewind demo --pool P` where `P.demo-lock` (the claim a running demo
/// holds) is a FIFO: the demo opened it for writing, which waits for a
/// reader for ever (a hang); and through a symbolic link it opened and
/// locked whatever the link named. Both are refused at once as not a
/// regular file, with the path named, and nothing is created.
/// `grow +SIZE` past the maximum is refused without a change to the file,
/// even when opening the pool would tidy its allocator: a pool whose only
/// block of a size class was freed has that class's chunk empty, and an
/// open gives such a chunk back to the free chunks (a descriptor store).
/// The refusal came after the open, so the file was changed.
#[test]
fn a_refused_relative_growth_leaves_the_file_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("full.pool");
    let pool = Pool::create(&path, LAYOUT, 4 << 20, &PoolConfig::default()).unwrap();
    let block = pool.transaction(|tx| tx.alloc_bytes(8000)).unwrap();
    pool.transaction(|tx| tx.free(PPtr::<u8>::from_offset(block)))
        .unwrap();
    pool.close().unwrap();
    let before = std::fs::read(&path).unwrap();
    for size in ["+1", "+1M"] {
        let r = rewind(&[
            std::ffi::OsStr::new("grow"),
            path.as_os_str(),
            size.as_ref(),
        ]);
        assert_ne!(
            r.code,
            Some(0),
            "grow {size} of a pool at its maximum: {}",
            r.stdout
        );
        assert!(r.stderr.contains("maximum size"), "{}", r.stderr);
        assert!(
            std::fs::read(&path).unwrap() == before,
            "grow {size}, refused, changed the file"
        );
    }
    // The pool is as it was: opening it now tidies the chunk, and works.
    let pool = Pool::open(&path, LAYOUT, &OpenOptions::default()).unwrap();
    assert_eq!(pool.size(), 4 << 20);
    pool.close().unwrap();
}

#[test]
fn a_demo_lock_path_that_is_no_regular_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("d.pool");
    let lock = dir.path().join("d.pool.demo-lock");
    let st = Command::new("mkfifo").arg(&lock).status().unwrap();
    assert!(st.success());
    let mut demo = Command::new(env!("CARGO_BIN_EXE_rewind"))
        .args(["demo", "--seconds-before-kill", "0", "--pool"])
        .arg(&pool)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A reader of the FIFO (opened without waiting), held until the demo
    // ends: a demo that waited for one is let go, and then runs.
    use std::os::unix::fs::OpenOptionsExt;
    let reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(&lock)
        .unwrap();
    let mut err = String::new();
    demo.stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = demo.wait().unwrap();
    drop(reader);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("not a regular file"), "{err}");
    assert!(!pool.exists());
    // A symbolic link there: refused, its target untouched.
    std::fs::remove_file(&lock).unwrap();
    let target = dir.path().join("notes.txt");
    std::fs::write(&target, "notes\n").unwrap();
    std::os::unix::fs::symlink(&target, &lock).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rewind"))
        .args(["demo", "--seconds-before-kill", "0", "--pool"])
        .arg(&pool)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("not a regular file"), "{err}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "notes\n");
    assert!(std::fs::symlink_metadata(&lock)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(!pool.exists());
}

/// `rewind copy SRC DST` of a pool a crash left mid-transaction: opening
/// SRC runs recovery on it in place, which the command did silently (its
/// help said only "copy"); it now says so, and the help says it. A clean
/// pool is copied with no such note.
#[test]
fn copy_says_it_recovered_its_source_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("crashed.pool");
    let st = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_commits_until_killed", "--nocapture"])
        .env(CHILD, format!("{}|Batch|Force|Pmem|exit", src.display()))
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let log = rewind(&[std::ffi::OsStr::new("dump-log"), src.as_os_str()]);
    assert!(log.stdout.contains("in flight"), "{}", log.stdout);
    let dst = dir.path().join("copy.pool");
    let r = rewind(&[
        std::ffi::OsStr::new("copy"),
        src.as_os_str(),
        dst.as_os_str(),
    ]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        r.stdout.contains("ran recovery on it, in place"),
        "{}",
        r.stdout
    );
    let log = rewind(&[std::ffi::OsStr::new("dump-log"), src.as_os_str()]);
    assert!(!log.stdout.contains("in flight"), "{}", log.stdout);
    // Now clean: no note.
    let dst2 = dir.path().join("copy2.pool");
    let r = rewind(&[
        std::ffi::OsStr::new("copy"),
        src.as_os_str(),
        dst2.as_os_str(),
    ]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(!r.stdout.contains("recovery"), "{}", r.stdout);
    let help = rewind(&["copy", "--help"]);
    assert!(
        help.stdout.contains("recovered in place"),
        "{}",
        help.stdout
    );
}
