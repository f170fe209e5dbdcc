//! What rewind-sqlite's integration tests share.

// Each test binary compiles this module and may use only part of it.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Stdio};

use rusqlite::types::{Value, ValueRef};
use rusqlite::{Connection, OpenFlags};

/// Registers the VFS `name` with `cfg`, once per test process (the tests
/// of a file run as threads of one process and share its VFSes).
pub fn register_once(name: &'static str, cfg: &rewind_sqlite::Config) {
    static DONE: std::sync::Mutex<Vec<&str>> = std::sync::Mutex::new(Vec::new());
    let mut done = DONE.lock().unwrap();
    if !done.contains(&name) {
        rewind_sqlite::register(name, cfg).unwrap();
        done.push(name);
    }
}

/// A connection to `path` through the VFS `name` (registered with `cfg`),
/// in WAL mode.
pub fn open_wal(name: &'static str, cfg: &rewind_sqlite::Config, path: &Path) -> Connection {
    register_once(name, cfg);
    let c = Connection::open_with_flags_and_vfs(path, OpenFlags::default(), name).unwrap();
    c.pragma_update(None, "journal_mode", "WAL").unwrap();
    c
}

/// A connection to `path` through the VFS `name` (registered with `cfg`),
/// or through stock SQLite when `ours` is false, with a busy handler that
/// waits as long as it takes, not yet in WAL mode.
pub fn connect(
    name: &'static str,
    cfg: &rewind_sqlite::Config,
    path: &Path,
    ours: bool,
) -> Connection {
    let c = if ours {
        register_once(name, cfg);
        Connection::open_with_flags_and_vfs(path, OpenFlags::default(), name).unwrap()
    } else {
        Connection::open(path).unwrap()
    };
    c.busy_handler(Some(|_| {
        std::thread::sleep(std::time::Duration::from_micros(200));
        true
    }))
    .unwrap();
    c
}

/// Puts `c`'s database in WAL mode (checked).
pub fn wal(c: &Connection) {
    let mode: String = c
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .unwrap_or_else(|e| panic!("WAL mode: {e} ({:?})", rewind_sqlite::last_error()));
    assert_eq!(mode, "wal");
}

/// Runs one statement; its result as text (rows, or changes, or the error).
pub fn run(c: &Connection, sql: &str) -> String {
    let mut st = match c.prepare(sql) {
        Ok(st) => st,
        Err(e) => return format!("prepare error: {e}"),
    };
    let n = st.column_count();
    if sql.starts_with("PRAGMA incremental_vacuum") {
        // It steps without a row; rusqlite's execute refuses it.
        drop(st);
        return match c.execute_batch(sql) {
            Ok(()) => format!("changes {}", c.changes()),
            Err(e) => format!("error: {e}"),
        };
    }
    if n == 0 {
        return match st.execute([]) {
            Ok(k) => format!("changes {k}"),
            Err(e) => format!("error: {e}"),
        };
    }
    let mut out = String::new();
    let mut rows = match st.query([]) {
        Ok(r) => r,
        Err(e) => return format!("error: {e}"),
    };
    loop {
        match rows.next() {
            Ok(Some(row)) => {
                for i in 0..n {
                    match row.get_ref(i).unwrap() {
                        ValueRef::Text(b) => out.push_str(&format!("T{b:?}|")),
                        ValueRef::Blob(b) => {
                            let h = crc32fast::hash(b);
                            out.push_str(&format!("B{}:{h:08x}|", b.len()))
                        }
                        v => out.push_str(&format!("{:?}|", Value::from(v))),
                    }
                }
                out.push('\n');
            }
            Ok(None) => break,
            Err(e) => return format!("{out}error: {e}"),
        }
    }
    out
}

/// `SELECT count(*)` of table `t`.
pub fn count(c: &Connection) -> i64 {
    c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap()
}

/// `PRAGMA integrity_check` says `ok`.
pub fn intact(c: &Connection) {
    let ok: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
}

/// A tmpfs of `mib` MiB, unmounted when dropped; `None` where mounting is
/// not permitted (the test is then skipped).
pub struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    pub fn mount(mib: u64) -> Option<SmallFs> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("cannot mount a tmpfs here: skipped");
            return None;
        }
        Some(SmallFs { dir })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        // A child another test forks meanwhile holds a pool's mapping
        // until it execs: then the mount is detached lazily.
        let umount = |lazy: bool| {
            let mut cmd = Command::new("umount");
            if lazy {
                cmd.arg("-l");
            }
            cmd.arg(self.dir.path())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !umount(false) {
            umount(true);
        }
    }
}
