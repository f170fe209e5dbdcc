//! Black-box probes of the `rewind` command with hostile or unusual input:
//! damaged pools (metadata and collection nodes), pools left in the middle
//! of a transaction by a killed process, files that are not pools, pools in
//! use, bad arguments and paths. Every command must end with a clear
//! message and a non-zero exit status, or succeed: never a panic, a signal,
//! a hang or unbounded memory, and never a change to a file it only reads.
//!
//! Each run of the binary goes through `sh -c 'ulimit -v …; exec …'` (an
//! address-space limit, so a believed damaged length aborts the command
//! instead of the machine) and a hang guard that kills it and fails the
//! test. Counts and seeds only: the same cases every run.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rewind::{LogVariant, PPtr, Policy, Pool, PoolConfig};
use rewind_collections::{BTreeMap, Blob, Error, HashMap, List, Vec as PVec};

const LAYOUT: &str = "cli-probe";
/// The command's address space, in KiB: far above what inspecting these
/// small pools takes, far below a believed damaged size.
const ADDRESS_SPACE_KIB: u64 = 1 << 20;
/// A command that has not ended by then is taken for a hang: only with
/// `REWIND_HANG_LIMIT_SECS=N` (a watchdog for runs by hand); by default a
/// command runs as long as it takes, so that no outcome depends on the
/// machine's speed (a true hang is left to the CI's own time limit).
fn hang_guard() -> Option<Duration> {
    std::env::var("REWIND_HANG_LIMIT_SECS")
        .ok()
        .map(|s| Duration::from_secs(s.parse().expect("REWIND_HANG_LIMIT_SECS: whole seconds")))
}
/// Set in the child that builds a pool and exits inside a transaction.
const CHILD: &str = "REWIND_CLI_PROBE_CHILD";

/// What one run of the command left.
struct Run {
    args: Vec<String>,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn ok(&self) -> bool {
        self.code == Some(0)
    }

    /// Ended by itself, with status 0, 1 or 2, no panic and, when it
    /// failed, an `error: ` message.
    fn assert_sane(&self) {
        assert!(
            matches!(self.code, Some(0..=2)),
            "{:?} ended with {:?} (a signal or panic?)\nstderr:\n{}",
            self.args,
            self.code,
            self.stderr
        );
        assert!(
            !self.stderr.contains("panicked") && !self.stderr.contains("RUST_BACKTRACE"),
            "{:?} panicked:\n{}",
            self.args,
            self.stderr
        );
        if !self.ok() {
            assert!(
                self.stderr.starts_with("error: "),
                "{:?} failed with no message:\n{}",
                self.args,
                self.stderr
            );
        }
    }

    /// A clean failure whose message mentions one of `mentions`.
    fn assert_fails(&self, mentions: &[&str]) {
        self.assert_sane();
        assert!(!self.ok(), "{:?} succeeded:\n{}", self.args, self.stdout);
        let lower = self.stderr.to_lowercase();
        assert!(
            mentions.iter().any(|m| lower.contains(m)),
            "{:?}: stderr mentions none of {mentions:?}:\n{}",
            self.args,
            self.stderr
        );
    }
}

/// Runs `rewind args` under the address-space limit and the hang guard.
fn rewind<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Run {
    rewind_in(None, args)
}

fn rewind_in<S: AsRef<std::ffi::OsStr>>(cwd: Option<&Path>, args: &[S]) -> Run {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "ulimit -v {ADDRESS_SPACE_KIB} && exec \"$0\" \"$@\""
        ))
        .arg(env!("CARGO_BIN_EXE_rewind"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let mut child = cmd.spawn().expect("run the rewind binary");
    // Drain both pipes in threads, so a chatty command cannot block.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let status = match hang_guard() {
        None => child.wait().unwrap(),
        Some(limit) => {
            let start = Instant::now();
            loop {
                if let Some(s) = child.try_wait().unwrap() {
                    break s;
                }
                if start.elapsed() > limit {
                    let _ = child.kill();
                    let _ = child.wait();
                    let args: Vec<_> = args.iter().map(|a| a.as_ref().to_owned()).collect();
                    panic!("rewind {args:?} did not end within {limit:?}: a hang");
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    };
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    Run {
        args: args
            .iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect(),
        code: status.code(),
        stdout: text(t_out.join().unwrap()),
        stderr: text(t_err.join().unwrap()),
    }
}

/// The commands that only read their pool.
const READERS: [&[&str]; 6] = [
    &["info"],
    &["info", "--json"],
    &["check"],
    &["check", "--deep", "--json"],
    &["dump-log"],
    &["dump-log", "--json"],
];

/// Runs every reader on `path`: each sane, none changing the file.
/// Returns `check`'s run.
fn readers_on(path: &Path) -> Run {
    let before = std::fs::read(path).ok();
    let mut check = None;
    for r in READERS {
        let mut args: Vec<std::ffi::OsString> = r.iter().map(Into::into).collect();
        args.push(path.into());
        let run = rewind(&args);
        run.assert_sane();
        assert_eq!(
            std::fs::read(path).ok(),
            before,
            "{:?} changed the file it only reads",
            run.args
        );
        if r == ["check"] {
            check = Some(run);
        }
    }
    check.unwrap()
}

type BtU = BTreeMap<u64, u64>;
type BtS = BTreeMap<String, String>;

/// A file pool holding every collection under a named root (their header
/// offsets), a plain root object, and a few hundred entries; closed.
fn build_pool(path: &Path, v: LogVariant, p: Policy) {
    let cfg = PoolConfig::default().log(v).policy(p);
    let pool = Pool::create(path, LAYOUT, 4 << 20, &cfg).expect("create pool");
    fill(&pool);
    pool.close().expect("close pool");
}

fn fill(pool: &Pool) -> [u64; 6] {
    let set = pool
        .transaction(|tx| {
            let root: PPtr<u64> = tx.root()?;
            tx.write(root, &7u64)?;
            let named: PPtr<[u64; 6]> = tx.root_named("collections")?;
            let set = [
                BtU::create_with_fanout(tx, 4)?.as_ptr().offset(),
                BtS::create_with_fanout(tx, 4)?.as_ptr().offset(),
                HashMap::<u64, u64>::create(tx)?.as_ptr().offset(),
                PVec::<u64>::create(tx)?.as_ptr().offset(),
                List::<u64>::create(tx)?.as_ptr().offset(),
                Blob::create(tx)?.as_ptr().offset(),
            ];
            tx.write(named, &set)?;
            Ok::<_, Error>(set)
        })
        .unwrap();
    for round in 0..4u64 {
        pool.transaction(|tx| {
            for j in 0..30 {
                let i = round * 30 + j;
                BtU::from_ptr(PPtr::from_offset(set[0])).insert(tx, i * 7 % 101, i)?;
                if j % 3 == 0 {
                    BtS::from_ptr(PPtr::from_offset(set[1])).insert(
                        tx,
                        format!("key-{i:04}-{}", "x".repeat(i as usize % 50)),
                        "v".repeat(j as usize),
                    )?;
                }
                HashMap::<u64, u64>::from_ptr(PPtr::from_offset(set[2])).insert(tx, i * 11, i)?;
                PVec::<u64>::from_ptr(PPtr::from_offset(set[3])).push(tx, i)?;
                List::<u64>::from_ptr(PPtr::from_offset(set[4])).push_back(tx, i)?;
            }
            Blob::from_ptr(PPtr::from_offset(set[5])).append(tx, &[round as u8; 300])?;
            Ok::<_, Error>(())
        })
        .unwrap();
    }
    set
}

fn configs() -> [(LogVariant, Policy); 4] {
    [
        (LogVariant::Batch, Policy::Redo),
        (LogVariant::Simple, Policy::Force),
        (LogVariant::TwoLayer, Policy::NoForce),
        (LogVariant::Optimized, Policy::RedoAsync),
    ]
}

/// SplitMix64: the pokes' seeded choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn le(b: &[u8], at: u64) -> u64 {
    u64::from_le_bytes(b[at as usize..at as usize + 8].try_into().unwrap())
}

/// The metadata regions of a pool image, from its header (docs/format.md):
/// (start, end) byte ranges.
fn metadata_regions(b: &[u8]) -> Vec<(u64, u64)> {
    let bitmap_off = le(b, 128);
    let log_off = le(b, 136);
    let blocks = le(b, 144);
    let block_size = le(b, 112);
    let heap_off = le(b, 152);
    let chunks = le(b, 160);
    vec![
        (4096, 4480),                                    // meta page words
        (8192, 8192 + 32 * chunks.min(64)),              // chunk table
        (bitmap_off, bitmap_off + 512 * chunks.min(8)),  // bitmaps
        (log_off, log_off + blocks.min(4) * block_size), // first log blocks
        (log_off + blocks * block_size, heap_off),       // commit ring
    ]
}

/// A plausible or random value for a damaged word.
fn damage(rng: &mut Rng, old: u64) -> u64 {
    match rng.below(8) {
        0 => 0,
        1 => 1,
        2 => u64::MAX,
        3 => old ^ (1 << rng.below(64)),
        4 => old.wrapping_add(64),
        5 => 1 << 40,
        6 => 1 << 60,
        _ => rng.next(),
    }
}

/// Damaged metadata words (meta page, chunk table, bitmaps, log blocks,
/// commit ring) and damaged collection nodes, seeded: every reader ends
/// sanely and leaves the file as it was; `check` never calls consistent a
/// pool that open (`recover`) refuses.
#[test]
fn damaged_pools_are_reported_never_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let mut findings = Vec::new();
    for (ci, (v, p)) in configs().into_iter().enumerate() {
        let clean = dir.path().join(format!("clean-{ci}.pool"));
        build_pool(&clean, v, p);
        let bytes = std::fs::read(&clean).unwrap();
        let mut regions = metadata_regions(&bytes);
        // The collections' nodes: the first heap chunk.
        let heap = le(&bytes, 152);
        regions.push((heap, heap + (256 << 10)));
        let mut rng = Rng(0x5eed ^ ci as u64);
        for case in 0..POKES {
            let (s, e) = regions[(case % regions.len() as u64) as usize];
            let at = (s + rng.below(e - s - 8)) & !7;
            let old = le(&bytes, at);
            let new = damage(&mut rng, old);
            let mut b = bytes.clone();
            b[at as usize..at as usize + 8].copy_from_slice(&new.to_le_bytes());
            let path = dir.path().join(format!("d-{ci}-{case}.pool"));
            std::fs::write(&path, &b).unwrap();
            let check = readers_on(&path);
            let rec = rewind(&[std::ffi::OsStr::new("recover"), path.as_os_str()]);
            rec.assert_sane();
            if check.ok() && !rec.ok() {
                findings.push(format!(
                    "{v:?}/{p:?}: word {at:#x} {old:#x} -> {new:#x}: check says consistent, \
                     recover fails: {}",
                    rec.stderr.trim()
                ));
            }
            let _ = std::fs::remove_file(&path);
        }
    }
    assert!(findings.is_empty(), "{}", findings.join("\n"));
}

/// Damaged words per configuration.
const POKES: u64 = 60;

/// This test binary run again as a child that builds a pool at `path` and
/// exits in the middle of a transaction that changed every collection, as a
/// killed process would (no unwinding, no close: the lock goes with the
/// process, the log keeps the transaction's records).
fn pool_left_mid_transaction(path: &Path, v: LogVariant, p: Policy) {
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_exits_mid_transaction", "--nocapture"])
        .env(CHILD, format!("{}|{v:?}|{p:?}", path.display()))
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "child: {status:?}");
}

/// The child of [`pool_left_mid_transaction`]; does nothing as a test.
#[test]
fn child_exits_mid_transaction() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let mut parts = spec.split('|');
    let path = PathBuf::from(parts.next().unwrap());
    let v = match parts.next().unwrap() {
        "Simple" => LogVariant::Simple,
        "Optimized" => LogVariant::Optimized,
        "Batch" => LogVariant::Batch,
        _ => LogVariant::TwoLayer,
    };
    let p = match parts.next().unwrap() {
        "Force" => Policy::Force,
        "NoForce" => Policy::NoForce,
        "Redo" => Policy::Redo,
        _ => Policy::RedoAsync,
    };
    let pool = Pool::create(
        &path,
        LAYOUT,
        4 << 20,
        &PoolConfig::default().log(v).policy(p),
    )
    .expect("create pool");
    let set = fill(&pool);
    let _ = pool.transaction(|tx| {
        for i in 0..40u64 {
            BtU::from_ptr(PPtr::from_offset(set[0])).insert(tx, 1000 + i, i)?;
            HashMap::<u64, u64>::from_ptr(PPtr::from_offset(set[2])).remove(tx, &(i * 11))?;
            PVec::<u64>::from_ptr(PPtr::from_offset(set[3])).push(tx, i)?;
        }
        List::<u64>::from_ptr(PPtr::from_offset(set[4])).pop_back(tx)?;
        Blob::from_ptr(PPtr::from_offset(set[5])).truncate(tx, 100)?;
        std::process::exit(0);
        #[allow(unreachable_code)]
        Ok::<_, Error>(())
    });
    unreachable!("the child exits inside its transaction");
}

/// A pool a killed process left in the middle of a transaction: the readers
/// report it without changing a byte (check passes, noting the records
/// recovery will undo; dump-log shows the transaction in flight); `recover`
/// then rolls it back and the pool checks clean with an empty log.
#[test]
fn a_pool_left_mid_transaction_is_read_unchanged_then_recovered() {
    let dir = tempfile::tempdir().unwrap();
    for (ci, (v, p)) in configs().into_iter().enumerate() {
        let path = dir.path().join(format!("killed-{ci}.pool"));
        pool_left_mid_transaction(&path, v, p);
        let check = readers_on(&path);
        assert!(check.ok(), "{v:?}/{p:?}: {}{}", check.stdout, check.stderr);
        if matches!(p, Policy::Force | Policy::NoForce) {
            let log = rewind(&[std::ffi::OsStr::new("dump-log"), path.as_os_str()]);
            assert!(
                log.stdout.contains("in flight"),
                "{v:?}/{p:?}:\n{}",
                log.stdout
            );
        }
        let rec = rewind(&[std::ffi::OsStr::new("recover"), path.as_os_str()]);
        assert!(rec.ok(), "{v:?}/{p:?}: {}", rec.stderr);
        let check = readers_on(&path);
        assert!(check.ok(), "{v:?}/{p:?}: {}", check.stderr);
        let log = rewind(&[std::ffi::OsStr::new("dump-log"), path.as_os_str()]);
        assert!(
            log.stdout.contains("(log is empty)"),
            "{v:?}/{p:?}: {}",
            log.stdout
        );
    }
}

/// `grow` to a size past the pool's maximum, or by more than it, is
/// refused from the header alone: a pool left mid-transaction is not
/// recovered by the refused command (its bytes stay as they were), and
/// `recover` then finds the transaction still to undo.
#[test]
fn grow_past_the_maximum_is_refused_before_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed-grow.pool");
    pool_left_mid_transaction(&path, LogVariant::Batch, Policy::Force);
    let before = contents(&path);
    for size in ["1T", "+1T", "18446744073709551615"] {
        let run = rewind(&[
            std::ffi::OsStr::new("grow"),
            path.as_os_str(),
            size.as_ref(),
        ]);
        run.assert_fails(&["maximum size"]);
        assert_eq!(contents(&path), before, "grow {size} changed the pool");
    }
    let log = rewind(&[std::ffi::OsStr::new("dump-log"), path.as_os_str()]);
    assert!(log.stdout.contains("in flight"), "{}", log.stdout);
}

/// `--check` and `--markdown` belong to `bench report`: given to a run,
/// they are a usage error before anything is measured, not ignored.
#[test]
fn report_flags_on_a_run_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    for flags in [&["--check"][..], &["--markdown", "X.md"][..]] {
        let mut args = vec!["bench", "fence", "--tiny", "--out", out.to_str().unwrap()];
        args.extend_from_slice(flags);
        let run = rewind(&args);
        run.assert_fails(&["report"]);
        assert!(
            !run.stdout.contains("bench fence"),
            "{flags:?} ran:\n{}",
            run.stdout
        );
    }
}

/// A run's options given to `bench report` are a usage error naming them,
/// before anything is written, not ignored (found by this probe: `report
/// --quick --backend msync` regenerated the document as if they were not
/// there, the converse of the refusal above).
/// A `--dir` the pools cannot go to (missing, or a file) is refused
/// before the first bench runs: it failed after the bench had printed its
/// header and started (found by the CLI probe).
#[test]
fn a_bench_dir_that_is_no_directory_is_refused_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let missing = dir.path().join("missing");
    for d in [&missing, &file] {
        let run = rewind(&[
            "bench",
            "fence",
            "--tiny",
            "--out",
            out.to_str().unwrap(),
            "--dir",
            d.to_str().unwrap(),
        ]);
        run.assert_fails(&["--dir"]);
        assert_eq!(run.code, Some(1), "{d:?}: {}", run.stderr);
        assert!(
            !run.stdout.contains("bench fence"),
            "{d:?}: the bench began:\n{}",
            run.stdout
        );
        assert!(!out.join("fence.json").exists(), "{d:?}: results written");
    }
}

#[test]
fn run_flags_on_a_report_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = out.to_str().unwrap();
    let md = dir.path().join("B.md");
    let m = md.to_str().unwrap();
    let run = rewind(&["bench", "fence", "--tiny", "--out", o]);
    assert!(run.ok(), "{}", run.stderr);
    std::fs::remove_file(out.join("fence.csv")).unwrap();
    for (flags, named) in [
        (&["--quick"][..], "--quick"),
        (&["--tiny"], "--tiny"),
        (&["--dir", "/tmp"], "--dir"),
        (&["--backend", "pmem"], "--backend"),
        (&["--nvm-write-ns", "0"], "--nvm-write-ns"),
        (&["--fence-ns", "150"], "--fence-ns"),
        (&["--configs", "batch-redo"], "--configs"),
    ] {
        let mut args = vec!["bench", "report", "--out", o, "--markdown", m];
        args.extend_from_slice(flags);
        let run = rewind(&args);
        run.assert_fails(&[named]);
        assert_eq!(run.code, Some(2), "{flags:?}: {}", run.stderr);
        assert!(!md.exists(), "{flags:?}: the document was written");
        assert!(
            !out.join("fence.csv").exists(),
            "{flags:?}: a CSV was written"
        );
    }
    let run = rewind(&["bench", "report", "--out", o, "--markdown", m]);
    assert!(run.ok(), "{}", run.stderr);
    assert!(md.is_file() && out.join("fence.csv").is_file());
}

/// A regular file's bytes (`None` for anything else: reading a FIFO
/// would wait for a writer).
fn contents(path: &Path) -> Option<Vec<u8>> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_file() => std::fs::read(path).ok(),
        _ => None,
    }
}

/// Every command that takes a pool, given `path`, fails with one of
/// `mentions`, and leaves what is at `path` as it was.
fn every_pool_command_refuses(dir: &Path, path: &Path, mentions: &[&str]) {
    let before = contents(path);
    let copy = dir.join("refused-copy.pool");
    let p = path.as_os_str();
    let runs: Vec<Vec<&std::ffi::OsStr>> = vec![
        vec!["info".as_ref(), p],
        vec!["info".as_ref(), "--json".as_ref(), p],
        vec!["check".as_ref(), p],
        vec!["check".as_ref(), "--deep".as_ref(), p],
        vec!["dump-log".as_ref(), p],
        vec!["recover".as_ref(), p],
        vec!["recover".as_ref(), "--layout".as_ref(), LAYOUT.as_ref(), p],
        vec!["copy".as_ref(), p, copy.as_os_str()],
        vec!["grow".as_ref(), p, "+1M".as_ref()],
    ];
    for args in runs {
        let run = rewind(&args);
        run.assert_fails(mentions);
        assert_eq!(contents(path), before, "{:?} changed {path:?}", run.args);
        assert!(!copy.exists(), "{:?} wrote a copy", run.args);
    }
}

/// Files that are not pools: missing, a directory, a FIFO (never waited
/// on), a character device, zero-length, cut short at every region's
/// boundary, all zeros, another file's bytes; and pools behind a unicode
/// path and a path longer than PATH_MAX.
#[test]
fn files_that_are_not_pools_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    every_pool_command_refuses(d, &d.join("missing.pool"), &["no such file"]);
    every_pool_command_refuses(d, d, &["directory"]);
    every_pool_command_refuses(d, Path::new("/dev/null"), &["character device"]);
    let fifo = d.join("fifo");
    if Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success())
    {
        every_pool_command_refuses(d, &fifo, &["fifo"]);
    }
    let empty = d.join("empty.pool");
    std::fs::write(&empty, b"").unwrap();
    every_pool_command_refuses(d, &empty, &["0 bytes", "truncated"]);
    let zeros = d.join("zeros.pool");
    std::fs::write(&zeros, vec![0u8; 1 << 20]).unwrap();
    every_pool_command_refuses(d, &zeros, &["not a rewind pool"]);
    let text = d.join("text.pool");
    std::fs::write(&text, "REWINDPL is not enough\n".repeat(400)).unwrap();
    every_pool_command_refuses(d, &text, &["checksum", "not a rewind pool"]);

    let clean = d.join("clean.pool");
    build_pool(&clean, LogVariant::Optimized, Policy::NoForce);
    let bytes = std::fs::read(&clean).unwrap();
    let heap = le(&bytes, 152) as usize;
    let cut = d.join("cut.pool");
    for len in [
        1,
        4095,
        4096,
        4097,
        8192,
        12288,
        heap - 1,
        heap,
        heap + 4096,
        bytes.len() - 1,
    ] {
        std::fs::write(&cut, &bytes[..len]).unwrap();
        every_pool_command_refuses(d, &cut, &["truncated", "bytes"]);
    }

    // Unicode and very long paths: a pool there works; past PATH_MAX the
    // OS's refusal is the message.
    let uni = d.join("ünïcødé 📦 pool\u{200b}.pool");
    std::fs::copy(&clean, &uni).unwrap();
    assert!(readers_on(&uni).ok());
    let uni_copy = d.join("кopия-📦.pool");
    let run = rewind(&[
        std::ffi::OsStr::new("copy"),
        uni.as_os_str(),
        uni_copy.as_os_str(),
    ]);
    assert!(run.ok(), "{}", run.stderr);
    assert!(readers_on(&uni_copy).ok());
    let mut long = d.to_path_buf();
    for _ in 0..20 {
        long.push("d".repeat(250));
    }
    long.push("p.pool");
    every_pool_command_refuses(d, &long, &["too long", "no such file"]);
    let long_name = d.join(format!("{}.pool", "n".repeat(300)));
    every_pool_command_refuses(d, &long_name, &["too long"]);
    let run = rewind(&[
        std::ffi::OsStr::new("copy"),
        clean.as_os_str(),
        long_name.as_os_str(),
    ]);
    run.assert_fails(&["too long"]);
}

/// CRC-32 (IEEE), as the header's.
fn crc32(b: &[u8]) -> u32 {
    let mut c = !0u32;
    for &x in b {
        c ^= x as u32;
        for _ in 0..8 {
            c = (c >> 1) ^ (0xedb8_8320 & (c & 1).wrapping_neg());
        }
    }
    !c
}

/// `bytes` with the header field at `at` set to `value` and the header's
/// CRC recomputed (a header edited by a tool, or written by another build).
fn edit_header(bytes: &[u8], at: usize, value: &[u8]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    b[at..at + value.len()].copy_from_slice(value);
    let crc = crc32(&b[..180]);
    b[180..184].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Headers edited with their CRC recomputed: another format version, huge
/// or zero sizes and counts, unknown codes, flags this build does not
/// know, a layout name with bytes after its end. Every command refuses
/// each with a message naming what is wrong (found by this probe: header
/// flags and the layout name's padding were not checked, so a header with
/// an unknown flag set, or bytes after the name's NUL, opened as a sound
/// pool, and `check` called it consistent).
#[test]
fn edited_headers_are_refused_by_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let clean = dir.path().join("clean.pool");
    build_pool(&clean, LogVariant::Batch, Policy::Force);
    let bytes = std::fs::read(&clean).unwrap();
    let mut name_tail = bytes[16..80].to_vec();
    name_tail[LAYOUT.len() + 1] = b'x';
    let cases: Vec<(&str, usize, Vec<u8>, &[&str])> = vec![
        (
            "version 10",
            8,
            10u32.to_le_bytes().to_vec(),
            &["version 10"],
        ),
        (
            "version 13",
            8,
            13u32.to_le_bytes().to_vec(),
            &["version 13"],
        ),
        (
            "no lanes",
            176,
            0u32.to_le_bytes().to_vec(),
            &["commit lanes"],
        ),
        (
            "17 lanes",
            176,
            17u32.to_le_bytes().to_vec(),
            &["commit lanes"],
        ),
        (
            "lanes max",
            176,
            u32::MAX.to_le_bytes().to_vec(),
            &["commit lanes"],
        ),
        (
            "version max",
            8,
            u32::MAX.to_le_bytes().to_vec(),
            &["version"],
        ),
        ("flags 1", 12, 1u32.to_le_bytes().to_vec(), &["flags"]),
        (
            "flags top bit",
            12,
            (1u32 << 31).to_le_bytes().to_vec(),
            &["flags"],
        ),
        ("name padding", 16, name_tail, &["layout name"]),
        ("empty name", 16, vec![0; 64], &["layout name"]),
        ("name of 64 bytes", 16, vec![b'n'; 64], &["layout name"]),
        (
            "max size 2^64-1",
            80,
            u64::MAX.to_le_bytes().to_vec(),
            &["header field"],
        ),
        (
            "max size 1 TiB",
            80,
            (1u64 << 40).to_le_bytes().to_vec(),
            &["header field"],
        ),
        (
            "max size 0",
            80,
            0u64.to_le_bytes().to_vec(),
            &["header field"],
        ),
        ("variant 9", 104, vec![9], &["log variant"]),
        ("policy 0", 105, vec![0], &["policy"]),
        (
            "cells max",
            108,
            u32::MAX.to_le_bytes().to_vec(),
            &["header field"],
        ),
        (
            "block size max",
            112,
            u64::MAX.to_le_bytes().to_vec(),
            &["header field"],
        ),
        (
            "log blocks max",
            144,
            u64::MAX.to_le_bytes().to_vec(),
            &["header field"],
        ),
        (
            "heap chunks max",
            160,
            u64::MAX.to_le_bytes().to_vec(),
            &["header field"],
        ),
        (
            "size at create max",
            168,
            u64::MAX.to_le_bytes().to_vec(),
            &["size at create"],
        ),
        (
            "size at create 0",
            168,
            0u64.to_le_bytes().to_vec(),
            &["size at create"],
        ),
    ];
    for (what, at, value, mentions) in cases {
        let path = dir.path().join("edited.pool");
        let b = edit_header(&bytes, at, &value);
        std::fs::write(&path, &b).unwrap();
        for cmd in [
            &["info"][..],
            &["check"],
            &["check", "--deep"],
            &["dump-log"],
            &["recover"],
        ] {
            let mut args: Vec<std::ffi::OsString> = cmd.iter().map(Into::into).collect();
            args.push(path.clone().into());
            let run = rewind(&args);
            assert!(
                !run.ok(),
                "{what}: {:?} accepted the header:\n{}",
                run.args,
                run.stdout
            );
            run.assert_fails(mentions);
            assert_eq!(
                std::fs::read(&path).unwrap(),
                b,
                "{what}: {:?} changed the file",
                run.args
            );
        }
        let copy = dir.path().join("copy.pool");
        rewind(&[
            std::ffi::OsStr::new("copy"),
            path.as_os_str(),
            copy.as_os_str(),
        ])
        .assert_fails(mentions);
        assert!(!copy.exists(), "{what}: copy of a refused pool was written");
        rewind(&[
            std::ffi::OsStr::new("grow"),
            path.as_os_str(),
            std::ffi::OsStr::new("+1M"),
        ])
        .assert_fails(mentions);
    }
}

/// `bench --out` where no result can be written: under a regular file,
/// under /proc, in a read-only directory (when this test is not run by
/// root, for whom none is). Refused before the run, not after it (found by
/// this probe: only an `--out` that existed as a file was found early; the
/// others failed once every measurement was taken, and lost them).
#[test]
fn bench_out_that_cannot_be_written_is_refused_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let mut outs = vec![
        file.join("results"),
        PathBuf::from("/proc/rewind-cli-probe/results"),
    ];
    let ro = dir.path().join("read-only");
    std::fs::create_dir(&ro).unwrap();
    let mut perms = std::fs::metadata(&ro).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o555);
    std::fs::set_permissions(&ro, perms).unwrap();
    if tempfile::NamedTempFile::new_in(&ro).is_err() {
        outs.push(ro.join("results"));
        outs.push(ro.clone());
    }
    for out in outs {
        let run = rewind(&[
            std::ffi::OsStr::new("bench"),
            "fence".as_ref(),
            "--tiny".as_ref(),
            "--out".as_ref(),
            out.as_os_str(),
        ]);
        run.assert_fails(&["--out"]);
        assert!(
            !run.stdout.contains("bench fence"),
            "{out:?}: the run started before the results directory was found unwritable:\n{}",
            run.stdout
        );
    }
    // A fresh directory, parents and all, is made and filled.
    let fresh = dir.path().join("a/b/c");
    let run = rewind(&[
        std::ffi::OsStr::new("bench"),
        "fence".as_ref(),
        "--tiny".as_ref(),
        "--out".as_ref(),
        fresh.as_os_str(),
    ]);
    assert!(run.ok(), "{}", run.stderr);
    assert!(fresh.join("fence.json").is_file());
    assert_eq!(
        std::fs::read_dir(&fresh).unwrap().count(),
        3,
        "json, csv and svg only"
    );
}

/// `crashtest` with its output going to files (a CI job, a log): progress
/// lines on stderr as the budget is spent, not silence until the end
/// (found by this probe: the spinner draws only on a terminal, so a run of
/// the default 60 s printed nothing between its first and its last lines).
#[test]
fn crashtest_shows_progress_when_not_on_a_terminal() {
    let run = rewind(&[
        "crashtest",
        "--budget",
        "1500",
        "--threads",
        "1",
        "--config",
        "batch-force",
    ]);
    run.assert_sane();
    assert!(run.ok(), "{}", run.stderr);
    let lines: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("progress"))
        .collect();
    assert!(lines.len() >= 2, "progress lines:\n{}", run.stderr);
    assert!(
        lines.last().unwrap().contains("progress 100%"),
        "{}",
        run.stderr
    );
    assert!(run.stdout.contains("crash states: "), "{}", run.stdout);
}

/// A pool another opener holds: the commands that open it (`copy`, `grow`,
/// `recover`) and the scanners refuse it as in use, write no copy and leave
/// the file alone; `info` shows the header. Once closed, `copy` works.
#[test]
fn a_pool_in_use_is_refused_by_every_opener() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("held.pool");
    build_pool(&path, LogVariant::Batch, Policy::NoForce);
    let held = Pool::open(&path, LAYOUT, &rewind::OpenOptions::default()).unwrap();
    let before = std::fs::read(&path).unwrap();
    let copy = dir.path().join("copy.pool");
    let p = path.as_os_str();
    for args in [
        vec!["copy".as_ref(), p, copy.as_os_str()],
        vec!["grow".as_ref(), p, "+0".as_ref()],
        vec!["grow".as_ref(), p, "1T".as_ref()],
        vec!["recover".as_ref(), p],
        vec!["check".as_ref(), "--deep".as_ref(), p],
        vec!["dump-log".as_ref(), "--json".as_ref(), p],
    ] {
        let run = rewind(&args);
        run.assert_fails(&["in use"]);
        assert!(!copy.exists(), "{:?} wrote a copy", run.args);
        assert_eq!(std::fs::read(&path).unwrap(), before, "{:?}", run.args);
    }
    let info = rewind(&[std::ffi::OsStr::new("info"), p]);
    assert!(
        info.ok() && info.stdout.contains("IN USE"),
        "{}",
        info.stdout
    );
    drop(held);
    // A sibling test's child forked while the pool was open holds its lock
    // until it execs: ask again while that is so.
    let run = loop {
        let run = rewind(&[std::ffi::OsStr::new("copy"), p, copy.as_os_str()]);
        if run.ok() || !run.stderr.contains("in use") {
            break run;
        }
    };
    assert!(run.ok(), "{}", run.stderr);
    assert!(readers_on(&copy).ok());
}

/// Arguments: numbers that are not numbers, negative, huge or past a
/// limit; conflicting flags; layout names that cannot be. Usage errors
/// (status 2) or clean failures, never a panic; nothing is changed.
#[test]
fn bad_arguments_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("args.pool");
    build_pool(&path, LogVariant::Simple, Policy::Force);
    let p = path.to_str().unwrap();
    let before = std::fs::read(&path).unwrap();
    for args in [
        &["grow", p, ""][..],
        &["grow", p, "-1"],
        &["grow", p, "1.5G"],
        &["grow", p, "0x100000"],
        &["grow", p, "99999999999999999999"],
        &["grow", p, "18446744073709551615T"],
        &["grow", p, "+٣"],
        &["grow", p, "0"],
        &["grow", p, "+1"],
        &["grow", p, "18446744073709551615"],
        &["crashtest", "--budget", "0"],
        &["crashtest", "--budget", "-1"],
        &["crashtest", "--budget", "18446744073709551616"],
        &["crashtest", "--threads", "0"],
        &["crashtest", "--threads", "65"],
        &["crashtest", "--seconds", "nan"],
        &["crashtest", "--seconds", "inf"],
        &["crashtest", "--seconds", "0"],
        &["crashtest", "--seconds", "1", "--budget", "1"],
        &["crashtest", "--replay", "1"],
        &["crashtest", "--replay", "1", "--config", "nope"],
        &["crashtest", "--mutate", "no.such.site"],
        &["demo", "--seconds-before-kill", "nan"],
        &["demo", "--seconds-before-kill", "-0.5"],
        &["demo", "--log", "fastest"],
        &["demo", "--policy", "maybe"],
        &["demo", "--seed", "-3"],
        &["bench", "fence", "--nvm-write-ns", "-1"],
        &["bench", "fence", "--backend", "tape"],
        &["bench", "🚀"],
        &["info"],
        &["info", p, p],
        &["copy", p],
    ] {
        let run = rewind(args);
        run.assert_sane();
        assert!(!run.ok(), "{args:?} succeeded:\n{}", run.stdout);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "{args:?} changed the pool"
        );
    }
    for args in [
        &["recover", "--layout", "", p][..],
        &["recover", "--layout", &"L".repeat(100), p],
        &["recover", "--layout", "another", p],
    ] {
        rewind(args).assert_fails(&["layout"]);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "{args:?} changed the pool"
        );
    }
}

/// Output that cannot be written (stdout on /dev/full: no space left) is
/// an error with status 1 naming the cause, not a panic with status 101;
/// a stderr that cannot be written to keeps the error's status (found by
/// this probe: `rewind info POOL > /dev/full` panicked in `println!`, and
/// every failure with stderr on /dev/full ended with status 101).
#[test]
fn output_that_cannot_be_written_is_an_error_not_a_panic() {
    let full = Path::new("/dev/full");
    if !full.exists() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.pool");
    build_pool(&path, LogVariant::Batch, Policy::Redo);
    let before = std::fs::read(&path).unwrap();
    let run = |args: &[&std::ffi::OsStr], stdout: Stdio, stderr: Stdio| {
        Command::new(env!("CARGO_BIN_EXE_rewind"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .output()
            .unwrap()
    };
    let p = path.as_os_str();
    for cmd in [
        &["info"][..],
        &["info", "--json"],
        &["check"],
        &["check", "--json"],
        &["dump-log"],
        &["dump-log", "--json"],
        &["recover"],
    ] {
        let mut args: Vec<&std::ffi::OsStr> = cmd.iter().map(|a| a.as_ref()).collect();
        args.push(p);
        let out = run(
            &args,
            std::fs::File::create(full).unwrap().into(),
            Stdio::piped(),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{cmd:?}:\n{stderr}");
        assert!(
            stderr.starts_with("error: ") && stderr.contains("stdout"),
            "{cmd:?}:\n{stderr}"
        );
        assert!(stderr.contains("No space left"), "{cmd:?}:\n{stderr}");
        assert!(!stderr.contains("panicked"), "{cmd:?}:\n{stderr}");
        if cmd != ["recover"] {
            assert_eq!(std::fs::read(&path).unwrap(), before, "{cmd:?}");
        }
    }
    // Failures whose message cannot be written: the status is still theirs.
    let missing = dir.path().join("missing.pool");
    for (args, code) in [
        (vec!["info".as_ref(), missing.as_os_str()], 1),
        (vec!["grow".as_ref(), p, "1.5G".as_ref()], 2),
        (vec!["info".as_ref()], 2),
    ] {
        let out = run(
            &args,
            Stdio::null(),
            std::fs::File::create(full).unwrap().into(),
        );
        assert_eq!(out.status.code(), Some(code), "{args:?}");
    }
}

/// `--deep` is `check`'s: given to `info` or `dump-log` it is a usage
/// error (status 2) naming it, not accepted and ignored (found by this
/// probe: the three commands shared their options, so `info --deep` and
/// `dump-log --deep` ran as if it were not there).
#[test]
fn deep_is_refused_by_the_commands_it_does_not_belong_to() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deep.pool");
    build_pool(&path, LogVariant::Batch, Policy::Redo);
    let p = path.to_str().unwrap();
    for args in [
        &["info", "--deep", p][..],
        &["dump-log", "--json", "--deep", p],
    ] {
        let run = rewind(args);
        run.assert_fails(&["--deep"]);
        assert_eq!(run.code, Some(2), "{args:?}:\n{}", run.stderr);
        assert!(run.stdout.is_empty(), "{args:?}:\n{}", run.stdout);
    }
    let run = rewind(&["check", "--deep", p]);
    assert!(run.ok(), "{}", run.stderr);
}

/// `grow` to a size under the pool's size at create (a pool never
/// shrinks: `grow POOL 1M` meant as `+1M`) is refused from the header
/// alone, as a size past the maximum is: the pool left mid-transaction
/// keeps its bytes and its transaction to undo (found by this probe: the
/// usage error came after the open, which had recovered the pool).
#[test]
fn grow_to_a_smaller_size_is_refused_before_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed-shrink.pool");
    pool_left_mid_transaction(&path, LogVariant::Batch, Policy::Force);
    let before = contents(&path);
    for size in ["0", "1M", "4095K"] {
        let run = rewind(&[
            std::ffi::OsStr::new("grow"),
            path.as_os_str(),
            size.as_ref(),
        ]);
        run.assert_fails(&["shrink"]);
        assert_eq!(run.code, Some(2), "grow {size}: {}", run.stderr);
        // (Not assert_eq: a 4 MiB difference is no message.)
        assert!(contents(&path) == before, "grow {size} changed the pool");
    }
    let log = rewind(&[std::ffi::OsStr::new("dump-log"), path.as_os_str()]);
    assert!(log.stdout.contains("in flight"), "{}", log.stdout);
    // The size it has is no shrink: the open recovers it, and it stays.
    let run = rewind(&[
        std::ffi::OsStr::new("grow"),
        path.as_os_str(),
        "4M".as_ref(),
    ]);
    assert!(run.ok(), "{}", run.stderr);
    assert!(run.stdout.contains("4194304 bytes"), "{}", run.stdout);
}

/// `check --deep` promised "a collection's invariants" (`--help`), but this
/// command registers no deep check, and a collection cannot be a named
/// root's type (found by this probe): each named root is a note saying
/// that none is registered, and the help says so.
#[test]
fn check_deep_says_what_it_checks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("named.pool");
    let pool = Pool::create(&path, LAYOUT, 4 << 20, &PoolConfig::default()).unwrap();
    pool.transaction(|tx| {
        let c: PPtr<u64> = tx.root_named("counter")?;
        tx.write(c, &7)
    })
    .unwrap();
    pool.close().unwrap();
    let run = rewind(&[
        std::ffi::OsStr::new("check"),
        "--deep".as_ref(),
        path.as_os_str(),
    ]);
    run.assert_sane();
    assert!(run.ok(), "{}", run.stderr);
    assert!(
        run.stdout.contains("counter") && run.stdout.contains("no deep check registered"),
        "{}",
        run.stdout
    );
    let help = rewind(&["check", "--help"]);
    assert!(help.ok(), "{}", help.stderr);
    let help = help.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        !help.contains("a collection's invariants") && help.contains("registers none"),
        "{help}"
    );
}
