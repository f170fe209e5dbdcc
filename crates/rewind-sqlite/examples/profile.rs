//! One-row inserts through the VFS or stock SQLite, timed, for profiling
//! the VFS's own per-commit cost (`perf record` on it):
//!
//! ```text
//! cargo run --release -p rewind-sqlite --example sqlite-profile -- pool /dev/shm 20000
//! cargo run --release -p rewind-sqlite --example sqlite-profile -- stock /dev/shm 20000
//! ```
//!
//! Both in WAL mode with `synchronous=FULL`; the database in a fresh
//! directory under DIR.

use rusqlite::{Connection, OpenFlags};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: sqlite-profile pool|stock DIR N";
    let (which, dir, n) = match &args[1..] {
        [w, d, n] => (w.as_str(), d.as_str(), n.parse::<u64>()?),
        _ => return Err(usage.into()),
    };
    let sub = tempfile::Builder::new()
        .prefix("profile-")
        .tempdir_in(dir)?;
    let path = sub.path().join("p.db");
    let c = match which {
        "pool" => {
            rewind_sqlite::register("rewind-profile", &rewind_sqlite::Config::default())?;
            Connection::open_with_flags_and_vfs(&path, OpenFlags::default(), "rewind-profile")?
        }
        "stock" => Connection::open(&path)?,
        _ => return Err(usage.into()),
    };
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.pragma_update(None, "synchronous", "FULL")?;
    c.execute_batch("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB NOT NULL)")?;
    let mut ins = c.prepare("INSERT INTO t(v) VALUES (?1)")?;
    let mut v = [0u8; 100];
    let t = std::time::Instant::now();
    for i in 0..n {
        v[..8].copy_from_slice(&i.to_le_bytes());
        ins.execute([&v[..]])?;
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    println!("{which}: {n} one-row inserts, {us:.2} us each");
    Ok(())
}
