//! Opening a pool file: only regular files, never blocking, and one opener
//! at a time.
//!
//! A pool is guarded by an advisory lock on its file (`flock`, through the
//! standard library's `File::try_lock`) held for the pool's lifetime: an
//! exclusive lock by [`Pool`](super::Pool), a shared one by the read-only
//! inspection functions. A second opener, in this process or another, gets
//! [`Error::PoolInUse`] at once instead of running recovery on a live pool.
//! The lock is advisory: a program that writes the file without taking it
//! (a plain `dd`) is not stopped.
//!
//! The path is checked with `stat` before it is opened, so a FIFO, a device,
//! a socket or a directory is refused with [`Error::NotAFile`] instead of
//! blocking in `open` or reading a device.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::error::Error;
pub(crate) use crate::persist::Locked;

/// How a pool file is opened.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Read-write, exclusive lock (a `Pool`).
    Exclusive,
    /// Read-only, shared lock (inspection).
    Shared,
    /// Read-only, no lock: only for what never changes after create (the
    /// header of a pool in use).
    Unlocked,
}

fn kind_of(ft: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_char_device() {
        "a character device"
    } else {
        "not a regular file"
    }
}

fn require_regular(path: &Path, meta: &std::fs::Metadata) -> Result<(), Error> {
    if meta.file_type().is_file() {
        Ok(())
    } else {
        Err(Error::NotAFile {
            path: path.to_path_buf(),
            kind: kind_of(meta.file_type()),
        })
    }
}

fn lock(path: &Path, file: &File, access: Access) -> Result<(), Error> {
    let r = match access {
        Access::Exclusive => file.try_lock(),
        Access::Shared | Access::Unlocked => file.try_lock_shared(),
    };
    match r {
        Ok(()) => Ok(()),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::PoolInUse {
            path: path.to_path_buf(),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io(path, e)),
    }
}

/// Opens an existing pool file, refusing anything but a regular file, and
/// locks it. Returns the file and its length.
///
/// The file locked must still be the one at `path`: its last holder may
/// have removed it (rewind-sqlite removes a WAL pool at its last close)
/// after this open found it and before the lock was granted, and a pool
/// used through a removed file would lose every commit made to it. So
/// once locked, the path is looked up again: gone, the open fails as if it
/// had found nothing (`NotFound`); another file there now (a new pool made
/// since), the open starts again, a few times at most.
pub(crate) fn open(path: &Path, access: Access) -> Result<(Locked, u64), Error> {
    let mut tries = 0;
    loop {
        let (file, len) = open_once(path, access)?;
        if access == Access::Unlocked || names(path, &file)? {
            return Ok((file, len));
        }
        tries += 1;
        if tries == 3 {
            return Err(Error::PoolInUse {
                path: path.to_path_buf(),
            });
        }
    }
}

/// Whether `path` names `file` (the same device and inode); a path that
/// names nothing now is `NotFound`.
fn names(path: &Path, file: &File) -> Result<bool, Error> {
    use std::os::unix::fs::MetadataExt;
    let there = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    let own = file.metadata().map_err(|e| Error::io(path, e))?;
    Ok(there.dev() == own.dev() && there.ino() == own.ino())
}

fn open_once(path: &Path, access: Access) -> Result<(Locked, u64), Error> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    require_regular(path, &meta)?;
    let file = Locked::new(
        OpenOptions::new()
            .read(true)
            .write(access == Access::Exclusive)
            .open(path)
            .map_err(|e| Error::io(path, e))?,
    );
    // The path may have been replaced between stat and open: check the
    // file actually opened.
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    require_regular(path, &meta)?;
    if access != Access::Unlocked {
        lock(path, &file, access)?;
    }
    Ok((file, meta.len()))
}

/// Creates a new pool file of `len` bytes whose first bytes are `prefix`
/// (the header page), atomically: the file is built without a name in
/// the same directory (`O_TMPFILE`; where the filesystem lacks it, under a
/// temporary name), sized, its blocks allocated, the prefix written and
/// made durable, then given its name without replacing anything, and the
/// directory made durable. A crash leaves no pool or a whole one (and,
/// only on a filesystem without `O_TMPFILE`, perhaps a
/// `.NAME.PID.N.creating` file to delete), never a zeroed file that every
/// later open refuses. The path must not exist (`AlreadyExists`
/// otherwise). Returns the file, locked.
///
/// The blocks are allocated now (`fallocate`), so a full filesystem is an
/// error here rather than a `SIGBUS` when a store into a hole of the
/// mapping finds no space later.
pub(crate) fn create(path: &Path, len: u64, prefix: &[u8]) -> Result<Locked, Error> {
    let (file, tmp) = create_temp(path, len)?;
    let r = file
        .write_all_at(prefix, 0)
        .map_err(|e| Error::io(path, e))
        .and_then(|()| publish(&file, &tmp, path));
    match r {
        Ok(()) => Ok(file),
        Err(e) => {
            tmp.remove();
            Err(e)
        }
    }
}

/// Where a file being built lives until [`publish`] names it.
pub(crate) enum Temp {
    /// Nowhere: an `O_TMPFILE` file, freed with its last descriptor (a
    /// process killed while building it leaves nothing on the disk).
    Unnamed,
    /// A temporary name beside the final one (a filesystem without
    /// `O_TMPFILE`).
    Named(std::path::PathBuf),
}

impl Temp {
    /// Removes a file that will not be published.
    pub(crate) fn remove(&self) {
        if let Temp::Named(tmp) = self {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// The directory `path` is in.
fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// A new file without a name in the directory of `path`, or `None` where
/// that is not to be had (no `O_TMPFILE` on this filesystem, no
/// `/proc/self/fd` entry to name it through later, or any error, which
/// the named path then reports as before).
fn open_unnamed(path: &Path) -> Option<File> {
    use rustix::fs::{Mode, OFlags};
    use std::os::fd::AsRawFd;
    let fd = rustix::fs::open(
        dir_of(path),
        OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o666),
    )
    .ok()?;
    // The name `publish` links it by must lead to it.
    let file = File::from(fd);
    let by_proc = std::fs::metadata(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()?;
    let own = file.metadata().ok()?;
    use std::os::unix::fs::MetadataExt;
    (by_proc.ino() == own.ino() && by_proc.dev() == own.dev()).then_some(file)
}

/// The first half of [`create`]: a new file of `len` bytes beside `path`
/// (which must not exist), unnamed where the filesystem allows, locked,
/// its blocks allocated. Returns it and where it lives; the caller fills
/// it and calls [`publish`] (or [`Temp::remove`]).
pub(crate) fn create_temp(path: &Path, len: u64) -> Result<(Locked, Temp), Error> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        // Something already there: a file is `AlreadyExists` (it is never
        // replaced); anything else says what it is.
        let kind = match std::fs::metadata(path) {
            Ok(m) if m.file_type().is_file() => None,
            Ok(m) => Some(kind_of(m.file_type())),
            Err(_) if meta.file_type().is_symlink() => Some("a symbolic link to nothing"),
            Err(_) => None,
        };
        return Err(match kind {
            Some(kind) => Error::NotAFile {
                path: path.to_path_buf(),
                kind,
            },
            None => Error::io(
                path,
                std::io::Error::from(std::io::ErrorKind::AlreadyExists),
            ),
        });
    }
    let (file, tmp) = match open_unnamed(path) {
        Some(file) => (file, Temp::Unnamed),
        None => {
            let tmp = temp_name(path);
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&tmp)
                .map_err(|e| Error::io(path, e))?;
            (file, Temp::Named(tmp))
        }
    };
    let file = Locked::new(file);
    let built = lock(path, &file, Access::Exclusive)
        .and_then(|()| refuse_beyond_free_space(&file, len, path))
        .and_then(|()| file.set_len(len).map_err(|e| no_space(path, len, e)))
        .and_then(|()| allocate(path, &file, len));
    match built {
        Ok(()) => Ok((file, tmp)),
        Err(e) => {
            // Nothing of a refused pool stays behind.
            tmp.remove();
            Err(e)
        }
    }
}

/// Gives the first `len` bytes of `file` (an existing pool, opened
/// read-write) their blocks where it has holes: a copy made by `cp` or
/// `rsync --sparse` leaves out the blocks the pool never wrote, and a store
/// into a hole of the mapping on a full disk kills the process with
/// `SIGBUS`. Where the disk has too little room for the holes it is
/// `NoSpace`, asked before `fallocate` (which on ext4 would take what it
/// can first). A file without holes costs one `lseek`.
pub(crate) fn allocate_holes(path: &Path, file: &File, len: u64) -> Result<(), Error> {
    use rustix::fs::SeekFrom;
    use std::os::unix::fs::MetadataExt;
    // `SEEK_HOLE` may also report blocks allocated but never written
    // (ext4's unwritten extents): `fallocate` leaves those as they are.
    // A filesystem that finds no holes (ext2 says the whole file is data)
    // still counts the blocks a file has.
    let hole = rustix::fs::seek(file, SeekFrom::Hole(0));
    let _ = rustix::fs::seek(file, SeekFrom::Start(0));
    let allocated = file
        .metadata()
        .map_err(|e| Error::io(path, e))?
        .blocks()
        .saturating_mul(512);
    if allocated >= len && !matches!(hole, Ok(at) if at < len) {
        return Ok(());
    }
    if crate::persist::free_bytes(file).is_some_and(|free| free < len.saturating_sub(allocated)) {
        return Err(Error::NoSpace {
            path: path.to_path_buf(),
            needed: len,
        });
    }
    allocate(path, file, len)
}

/// Allocates the blocks of the first `len` bytes of `file` (at least that
/// long already): `fallocate`, or on a filesystem without it a byte written
/// into each block that has none (`persist::write_blocks`). A full disk is
/// `NoSpace`.
fn allocate(path: &Path, file: &File, len: u64) -> Result<(), Error> {
    match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::KEEP_SIZE, 0, len) {
        Ok(()) => Ok(()),
        Err(e) if crate::persist::no_room(e) => Err(Error::NoSpace {
            path: path.to_path_buf(),
            needed: len,
        }),
        Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::NOSYS) => {
            crate::persist::write_blocks(file, 0, len).map_err(|e| no_space(path, len, e))
        }
        Err(e) => Err(Error::io(path, e.into())),
    }
}

/// `NoSpace` for want of room (`persist::no_room`: `ENOSPC`, `EFBIG`),
/// as a growth's `NoSpaceToGrow` is; `Io` for any other error.
pub(crate) fn no_space(path: &Path, len: u64, e: std::io::Error) -> Error {
    if rustix::io::Errno::from_io_error(&e).is_some_and(crate::persist::no_room) {
        Error::NoSpace {
            path: path.to_path_buf(),
            needed: len,
        }
    } else {
        Error::io(path, e)
    }
}

/// `NoSpace` when the filesystem of `file` has fewer than `len` bytes free
/// for this user ([`crate::persist::free_bytes`], asked before
/// `fallocate`); where it cannot say, `fallocate` answers instead.
fn refuse_beyond_free_space(file: &File, len: u64, path: &Path) -> Result<(), Error> {
    match crate::persist::free_bytes(file) {
        Some(free) if free < len => Err(Error::NoSpace {
            path: path.to_path_buf(),
            needed: len,
        }),
        _ => Ok(()),
    }
}

/// The second half of [`create`]: makes `file` durable, names it `path`
/// without replacing anything (an unnamed file is linked there, a named
/// one renamed from `tmp`), and makes the directory durable.
pub(crate) fn publish(file: &File, tmp: &Temp, path: &Path) -> Result<(), Error> {
    file.sync_all().map_err(|e| Error::io(path, e))?;
    match tmp {
        Temp::Unnamed => link_unnamed(file, path)?,
        Temp::Named(tmp) => rename_no_replace(tmp, path)?,
    }
    sync_dir(path)
}

/// Gives the unnamed `file` the name `path` unless `path` exists
/// (`AlreadyExists`: `link` never replaces).
fn link_unnamed(file: &File, path: &Path) -> Result<(), Error> {
    use std::os::fd::AsRawFd;
    let proc_path = format!("/proc/self/fd/{}", file.as_raw_fd());
    rustix::fs::linkat(
        rustix::fs::CWD,
        proc_path.as_str(),
        rustix::fs::CWD,
        path,
        rustix::fs::AtFlags::SYMLINK_FOLLOW,
    )
    .map_err(|e| Error::io(path, e.into()))
}

/// `.NAME.PID.N.creating` beside `path`.
fn temp_name(path: &Path) -> std::path::PathBuf {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = path.file_name().map(|s| s.to_string_lossy().into_owned());
    let tmp = format!(
        ".{}.{}.{n}.creating",
        name.unwrap_or_default(),
        std::process::id()
    );
    path.with_file_name(tmp)
}

/// Renames `from` to `to` unless `to` exists (`AlreadyExists`): with
/// `RENAME_NOREPLACE`, or where the filesystem lacks it, a hard link and
/// an unlink.
fn rename_no_replace(from: &Path, to: &Path) -> Result<(), Error> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS | rustix::io::Errno::OPNOTSUPP) => {
            std::fs::hard_link(from, to).map_err(|e| Error::io(to, e))?;
            std::fs::remove_file(from).map_err(|e| Error::io(from, e))
        }
        Err(e) => Err(Error::io(to, e.into())),
    }
}

/// Makes the directory entry of `path` durable.
pub(crate) fn sync_dir(path: &Path) -> Result<(), Error> {
    let dir = dir_of(path);
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, e))
}

/// The identity the open stamp records for `file` (its device and inode).
pub(crate) fn identity(path: &Path, file: &File) -> Result<u64, Error> {
    use std::os::unix::fs::MetadataExt;
    let m = file.metadata().map_err(|e| Error::io(path, e))?;
    Ok(crate::format::meta::file_identity(m.dev(), m.ino()))
}

/// Reads up to `n` bytes from the start of `file` (fewer at its end).
pub(crate) fn read_prefix(path: &Path, file: &File, n: u64) -> Result<Vec<u8>, Error> {
    let mut buf = Vec::new();
    let mut at = 0u64;
    let mut chunk = vec![0u8; (n.min(1 << 20)) as usize];
    while at < n {
        let want = ((n - at) as usize).min(chunk.len());
        let got = file
            .read_at(&mut chunk[..want], at)
            .map_err(|e| Error::io(path, e))?;
        if got == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..got]);
        at += got as u64;
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What an open checks once it holds the lock: the file it locked is
    /// still the one at the path. Removed since, the open fails as if it
    /// had found nothing; replaced by another file, the path names another
    /// pool (the open starts again).
    #[test]
    fn a_locked_file_is_checked_to_be_the_one_its_path_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        drop(create(&path, 4096, b"hdr").unwrap());
        let (file, _) = open(&path, Access::Exclusive).unwrap();
        assert!(names(&path, &file).unwrap());
        std::fs::remove_file(&path).unwrap();
        match names(&path, &file) {
            Err(Error::Io { source, .. }) => {
                assert_eq!(source.kind(), std::io::ErrorKind::NotFound)
            }
            r => panic!("a removed pool's path: {:?}", r.map_err(|e| e.to_string())),
        }
        drop(create(&path, 4096, b"new").unwrap());
        assert!(!names(&path, &file).unwrap(), "another file at the path");
        drop(file);
        let (again, _) = open(&path, Access::Exclusive).unwrap();
        assert!(names(&path, &again).unwrap());
    }

    /// A second handle on the same open file description stands for a
    /// child forked while the file was open (it shares the description
    /// until it execs): dropping the `Locked` must still free the file for
    /// the next opener, on every path that took the lock.
    #[test]
    fn a_dropped_lock_is_free_while_another_handle_shares_its_description() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        let created = create(&path, 4096, b"hdr").unwrap();
        let child = created.try_clone().unwrap();
        drop(created);
        let (opened, len) = open(&path, Access::Exclusive).unwrap();
        assert_eq!(len, 4096);
        let child2 = opened.try_clone().unwrap();
        assert!(matches!(
            open(&path, Access::Shared),
            Err(Error::PoolInUse { .. })
        ));
        drop(opened);
        let (shared, _) = open(&path, Access::Shared).unwrap();
        let child3 = shared.try_clone().unwrap();
        drop(shared);
        open(&path, Access::Exclusive).unwrap();
        // Handed to a domain and back: the domain unlocks when it drops.
        let (f, _) = open(&path, Access::Exclusive).unwrap();
        drop(Locked::new(f.into_file()));
        open(&path, Access::Exclusive).unwrap();
        drop((child, child2, child3));
    }
}
