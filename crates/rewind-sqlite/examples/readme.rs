// The README's SQLite example, word for word between the markers (see
// `tests/readme.rs`), in a temporary directory.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    std::env::set_current_dir(dir.path())?;
    // README begin
    rewind_sqlite::register("rewind-wal", &rewind_sqlite::Config::default())?;
    let db =
        rusqlite::Connection::open_with_flags_and_vfs("app.db", Default::default(), "rewind-wal")?;
    db.pragma_update(None, "journal_mode", "WAL")?;
    db.execute("CREATE TABLE IF NOT EXISTS t(x)", [])?;
    db.execute("INSERT INTO t VALUES (?1)", [42])?;
    // README end
    let x: i64 = db.query_row("SELECT x FROM t", [], |r| r.get(0))?;
    assert_eq!(x, 42);
    assert!(std::path::Path::new("app.db-wal.rewind").exists());
    Ok(())
}
