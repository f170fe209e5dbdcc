//! A user's fifth round with the `rewind` command: commands whose writes
//! the system refuses part way (a file-size limit, `ulimit -f`, with its
//! signal ignored, so a write past it fails with EFBIG), copies to hostile
//! destinations, and a layout given wrong. Every command must end with a
//! clear message and status 1 or 2, or succeed; never a panic or a
//! signal, never a half-written copy left behind, and never a pool that no
//! longer opens.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};

use rewind::{LogVariant, Policy, Pool, PoolConfig};
use rewind_collections::BTreeMap;

const LAYOUT: &str = "cli-probe5";

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

    fn assert_sane(&self) {
        assert!(
            matches!(self.code, Some(0..=2)),
            "{:?} ended with {:?} (a signal or panic?)\nstdout:\n{}\nstderr:\n{}",
            self.args,
            self.code,
            self.stdout,
            self.stderr
        );
        assert!(
            !self.stderr.contains("panicked"),
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

/// Runs `rewind args` with, when `fsize_kib` is given, the file-size limit
/// (`ulimit -f`, in KiB) and SIGXFSZ ignored (inherited across exec), so a
/// write past the limit fails with EFBIG rather than killing the process.
fn rewind_limited<S: AsRef<std::ffi::OsStr>>(fsize_kib: Option<u64>, args: &[S]) -> Run {
    let limit = match fsize_kib {
        Some(k) => format!("trap '' XFSZ && ulimit -f {k} && "),
        None => String::new(),
    };
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "{limit}ulimit -v {} && exec \"$0\" \"$@\"",
            1 << 21
        ))
        .arg(env!("CARGO_BIN_EXE_rewind"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run the rewind binary");
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
    let status = child.wait().unwrap();
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

fn rewind<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Run {
    rewind_limited(None, args)
}

/// A closed pool of `size` bytes holding a B+-tree of 500 entries under
/// the root.
fn build_pool(path: &Path, size: u64, cfg: &PoolConfig) {
    let pool = Pool::create(path, LAYOUT, size, cfg).expect("create pool");
    pool.transaction(|tx| {
        let root = tx.root::<rewind::PPtr<BTreeMap<u64, u64>>>()?;
        let m = BTreeMap::<u64, u64>::create(tx)?;
        for k in 0..500 {
            m.insert(tx, k, k * 3)?;
        }
        tx.write(root, &m.as_ptr())?;
        Ok::<_, rewind_collections::Error>(())
    })
    .unwrap();
    pool.close().unwrap();
}

/// The pool opens, its tree holds the 500 entries, and `rewind check`
/// calls it consistent.
fn assert_pool_sound(path: &Path, what: &str) {
    let run = rewind(&[std::ffi::OsStr::new("check"), path.as_os_str()]);
    assert!(run.ok(), "{what}: check: {}\n{}", run.stdout, run.stderr);
    let pool = Pool::open(path, LAYOUT, &Default::default())
        .unwrap_or_else(|e| panic!("{what}: open: {e}"));
    let root = pool
        .root::<rewind::PPtr<BTreeMap<u64, u64>>>()
        .unwrap()
        .unwrap();
    let m = BTreeMap::<u64, u64>::from_ptr(pool.read(root).unwrap());
    assert_eq!(m.len(&pool).unwrap(), 500, "{what}");
    m.check_invariants(&pool).unwrap();
}

/// `copy` to a file system that refuses its writes part way (a file-size
/// limit below the pool's size): a clean error, and no partial copy left
/// at the destination; the source as it was.
#[test]
fn a_copy_refused_part_way_leaves_no_partial_copy() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.pool");
    build_pool(&src, 8 << 20, &PoolConfig::default());
    let before = std::fs::read(&src).unwrap();
    for limit in [1u64, 64, 4096, 6000] {
        let dst = dir.path().join(format!("dst-{limit}.pool"));
        let run = rewind_limited(
            Some(limit),
            &[
                std::ffi::OsStr::new("copy"),
                src.as_os_str(),
                dst.as_os_str(),
            ],
        );
        run.assert_fails(&["file too large", "too large", "no space", "limit"]);
        assert!(
            !dst.exists(),
            "limit {limit} KiB: a partial copy was left at {dst:?} ({:?} bytes)",
            std::fs::metadata(&dst).map(|m| m.len())
        );
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.iter().all(|n| n == "src.pool"),
            "limit {limit} KiB: files left behind: {names:?}"
        );
        assert!(
            std::fs::read(&src).unwrap() == before,
            "limit {limit} KiB: the source changed"
        );
    }
    assert_pool_sound(&src, "source after refused copies");
}

/// `grow` past a file-size limit: a clean error, and the pool still opens
/// whole at its old size (under every log variant, force and redo).
#[test]
fn a_growth_refused_by_the_file_system_leaves_the_pool_sound() {
    for v in LogVariant::ALL {
        for p in [Policy::Force, Policy::Redo] {
            let what = format!("{v}/{p}");
            let dir = tempfile::tempdir().unwrap();
            let pool = dir.path().join("g.pool");
            let cfg = PoolConfig::default().log(v).policy(p).max_size(64 << 20);
            build_pool(&pool, 4 << 20, &cfg);
            let size = std::fs::metadata(&pool).unwrap().len();
            // The limit lies between the pool's size and the growth's.
            let limit_kib = size / 1024 + 512;
            let run = rewind_limited(
                Some(limit_kib),
                &[
                    std::ffi::OsStr::new("grow"),
                    pool.as_os_str(),
                    std::ffi::OsStr::new("+16M"),
                ],
            );
            run.assert_sane();
            if run.ok() {
                // (A growth that stopped at the limit would have to say so.)
                let now = std::fs::metadata(&pool).unwrap().len();
                assert!(
                    now <= limit_kib * 1024,
                    "{what}: grew past the limit: {now}"
                );
            } else {
                run.assert_fails(&["too large", "file", "space", "grow"]);
            }
            assert_pool_sound(&pool, &what);
            // And it grows once the limit is gone.
            let run = rewind(&[
                std::ffi::OsStr::new("grow"),
                pool.as_os_str(),
                std::ffi::OsStr::new("+16M"),
            ]);
            assert!(run.ok(), "{what}: {}", run.stderr);
            assert!(
                std::fs::metadata(&pool).unwrap().len() >= size + (16 << 20),
                "{what}"
            );
            assert_pool_sound(&pool, &what);
        }
    }
}

/// `copy` to destinations that cannot take it: an existing file, a
/// directory, a dangling symbolic link, the source itself, a path under a
/// missing directory or under a file: refused, nothing written anywhere
/// (the link's target not created), the source as it was.
#[test]
fn copies_to_hostile_destinations_are_refused_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = d.join("src.pool");
    build_pool(&src, 4 << 20, &PoolConfig::default());
    let before = std::fs::read(&src).unwrap();
    let existing = d.join("existing");
    std::fs::write(&existing, b"keep me").unwrap();
    let sub = d.join("subdir");
    std::fs::create_dir(&sub).unwrap();
    let link = d.join("dangling");
    let target = d.join("made-through-the-link.pool");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let cases: Vec<(&str, std::path::PathBuf, &[&str])> = vec![
        ("an existing file", existing.clone(), &["exists"]),
        ("a directory", sub.clone(), &["exists", "directory"]),
        ("a dangling link", link.clone(), &["exists", "link"]),
        ("the source", src.clone(), &["exists", "same", "in use"]),
        (
            "a missing directory",
            d.join("missing/x.pool"),
            &["no such file", "directory"],
        ),
        (
            "under a file",
            existing.join("x.pool"),
            &["not a directory"],
        ),
    ];
    for (what, dst, mentions) in cases {
        let run = rewind(&[
            std::ffi::OsStr::new("copy"),
            src.as_os_str(),
            dst.as_os_str(),
        ]);
        run.assert_fails(mentions);
        assert!(
            std::fs::read(&src).unwrap() == before,
            "copy to {what}: the source changed"
        );
        assert_eq!(std::fs::read(&existing).unwrap(), b"keep me", "{what}");
        assert!(!target.exists(), "copy to {what}: wrote through the link");
        assert_eq!(std::fs::read_dir(&sub).unwrap().count(), 0, "{what}");
    }
    let names: std::collections::BTreeSet<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        ["dangling", "existing", "src.pool", "subdir"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        "files left behind"
    );
    assert_pool_sound(&src, "source");
}

/// `recover --layout` with another layout's name: refused naming both
/// layouts, the file unchanged.
#[test]
fn recover_with_the_wrong_layout_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("p.pool");
    build_pool(&pool, 4 << 20, &PoolConfig::default());
    let before = std::fs::read(&pool).unwrap();
    for wrong in ["other", "", &"x".repeat(300), "cli-probe5 "] {
        let run = rewind(&[
            std::ffi::OsStr::new("recover"),
            std::ffi::OsStr::new("--layout"),
            std::ffi::OsStr::new(wrong),
            pool.as_os_str(),
        ]);
        run.assert_fails(&["layout"]);
        assert!(
            std::fs::read(&pool).unwrap() == before,
            "{wrong:?}: changed"
        );
    }
    assert_pool_sound(&pool, "after wrong layouts");
}

/// `rewind demo --policy redo-async` (the one policy the demo's own tests
/// leave out) under every log variant and two seeds: the child killed in
/// its first in-flight transaction (a count, not a time), the recovered
/// tree verified, and `rewind check` clean on the pool it keeps.
#[test]
fn the_demo_recovers_under_redo_async_with_every_log_variant() {
    let dir = tempfile::tempdir().unwrap();
    for log in ["simple", "optimized", "batch", "two-layer"] {
        for seed in ["3", "11"] {
            let pool = dir.path().join(format!("demo-{log}-{seed}.pool"));
            let run = rewind(&[
                std::ffi::OsStr::new("demo"),
                std::ffi::OsStr::new("--pool"),
                pool.as_os_str(),
                std::ffi::OsStr::new("--log"),
                std::ffi::OsStr::new(log),
                std::ffi::OsStr::new("--policy"),
                std::ffi::OsStr::new("redo-async"),
                std::ffi::OsStr::new("--seconds-before-kill"),
                std::ffi::OsStr::new("0"),
                std::ffi::OsStr::new("--seed"),
                std::ffi::OsStr::new(seed),
                std::ffi::OsStr::new("--throughput-tx"),
                std::ffi::OsStr::new("20"),
            ]);
            run.assert_sane();
            assert!(
                run.ok() && run.stdout.contains("all checks passed"),
                "{log} seed {seed}:\n{}\n{}",
                run.stdout,
                run.stderr
            );
            assert!(
                run.stdout.contains("redo-async policy"),
                "{log}: {}",
                run.stdout
            );
            let check = rewind(&[std::ffi::OsStr::new("check"), pool.as_os_str()]);
            assert!(
                check.ok(),
                "{log} seed {seed}: {}\n{}",
                check.stdout,
                check.stderr
            );
        }
    }
}
