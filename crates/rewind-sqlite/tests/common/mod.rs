//! What rewind-sqlite's integration tests share.

// Each test binary compiles this module and may use only part of it.
#![allow(dead_code)]

use std::path::Path;

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
