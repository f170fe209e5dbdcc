//! `rewind copy SRC DST` and `rewind grow POOL SIZE`: pool tools that open
//! the pool (and so run recovery first), unlike the read-only inspection
//! of `inspect`.
//!
//! A pool has one opener at a time: `copy` of a pool that a running
//! program holds open is refused (`in use`); that program backs its pool up
//! itself with `Pool::backup_to`, which `copy` calls.

use std::path::PathBuf;

use rewind::{OpenOptions, Pool};

use crate::error::CliError;

/// `rewind copy SRC DST`.
#[derive(clap::Args)]
pub struct CopyArgs {
    /// The pool to copy.
    pub src: PathBuf,
    /// Where the copy goes (must not exist).
    pub dst: PathBuf,
}

pub fn copy(a: &CopyArgs) -> Result<(), CliError> {
    let info = rewind::inspect::info(&a.src).map_err(CliError::rewind(format!(
        "reading pool {}",
        a.src.display()
    )))?;
    let pool = Pool::open(&a.src, info.layout_name(), &OpenOptions::default()).map_err(
        CliError::rewind(format!("opening pool {}", a.src.display())),
    )?;
    // Opening ran recovery on SRC, in place: a pool a crash left changes
    // here, before it is copied. Say so (the help does too).
    let r = pool.recovery_report();
    if r.records > 0 || r.ring_groups > 0 || r.rolled_back > 0 || r.adll_repaired {
        println!(
            "note: opening {} ran recovery on it, in place, before the copy: {r}",
            a.src.display()
        );
    }
    pool.backup_to(&a.dst).map_err(CliError::rewind(format!(
        "copying {} to {}",
        a.src.display(),
        a.dst.display()
    )))?;
    pool.close().map_err(CliError::rewind(format!(
        "closing pool {}",
        a.src.display()
    )))?;
    println!("copied {} to {}", a.src.display(), a.dst.display());
    Ok(())
}

/// `rewind grow POOL SIZE`.
#[derive(clap::Args)]
pub struct GrowArgs {
    /// The pool to grow.
    pub pool: PathBuf,
    /// The new size in bytes, or +BYTES to grow by; a K, M, G or T suffix
    /// multiplies by 1024, 1024², ... The heap grows in whole 256 KiB chunks.
    pub size: String,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `SIZE` or `+SIZE`, with an optional K, M, G or T suffix: (relative,
/// bytes); `None` when it is not one.
fn parse_size(s: &str) -> Option<(bool, u64)> {
    let (relative, s) = match s.strip_prefix('+') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let (digits, shift) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 10),
        (i, 'm' | 'M') => (&s[..i], 20),
        (i, 'g' | 'G') => (&s[..i], 30),
        (i, 't' | 'T') => (&s[..i], 40),
        _ => (s, 0),
    };
    // Digits only: `str::parse` would take a sign (`++1`, `+-1`).
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some((relative, n.checked_mul(1 << shift)?))
}

/// `grow`'s refusal of a size past the pool's maximum (`by`: SIZE was
/// +BYTES). A file longer than the maximum (extended by hand: `truncate
/// -s`) holds the pool in its first `max` bytes, and the message says
/// so rather than leave its length to be taken for the pool's size.
fn too_large(a: &GrowArgs, bytes: u64, by: bool, max: u64) -> CliError {
    let what = if by { "by" } else { "to" };
    let file = std::fs::metadata(&a.pool).map_or(0, |m| m.len());
    let past = match file.checked_sub(max) {
        Some(extra) if extra > 0 => format!(
            "; its file is {file} bytes, of which the {extra} past the maximum are not part of the pool"
        ),
        _ => String::new(),
    };
    CliError::Usage(format!(
        "{} cannot grow {what} {bytes} bytes: its maximum size is {max} (set at create){past}",
        a.pool.display()
    ))
}

/// What `rewind grow --json` prints.
#[derive(serde::Serialize)]
struct Grown<'a> {
    pool: &'a std::path::Path,
    size_before: u64,
    size: u64,
    max_size: u64,
    heap_chunks: u64,
}

pub fn grow(a: &GrowArgs) -> Result<(), CliError> {
    let Some((relative, bytes)) = parse_size(&a.size) else {
        return Err(CliError::Usage(format!(
            "SIZE `{}` is not a size: bytes or +bytes, with an optional K, M, G or T suffix",
            a.size
        )));
    };
    let info = rewind::inspect::info(&a.pool).map_err(CliError::rewind(format!(
        "reading pool {}",
        a.pool.display()
    )))?;
    // A size past the maximum is refused from the header alone, before
    // opening runs recovery on the pool (a pool in use is refused as such,
    // by the open, as by every command that opens one).
    if !info.in_use && bytes > info.max_size {
        return Err(too_large(a, bytes, relative, info.max_size));
    }
    // And a relative size past it from the file's length (the pool's
    // size): opening the pool may tidy its allocator (a class chunk left
    // empty goes back to the free chunks, a descriptor store), and a
    // refused growth must leave the file as it was.
    if !info.in_use && relative {
        if let Ok(m) = std::fs::metadata(&a.pool) {
            // (A file longer than the maximum holds a pool of the maximum.)
            let target = m.len().min(info.max_size).saturating_add(bytes);
            if target > info.max_size {
                return Err(too_large(a, target, false, info.max_size));
            }
        }
    }
    // So is a size under the one at create (a pool never shrinks): `grow
    // POOL 1M` meant as +1M must not recover the pool and then refuse.
    if !info.in_use && !relative && bytes < info.size {
        return Err(CliError::Usage(format!(
            "{} was {} bytes at create, more than {bytes}: a pool does not shrink",
            a.pool.display(),
            info.size
        )));
    }
    let pool = Pool::open(&a.pool, info.layout_name(), &OpenOptions::default()).map_err(
        CliError::rewind(format!("opening pool {}", a.pool.display())),
    )?;
    let before = pool.size();
    let target = if relative {
        before.saturating_add(bytes)
    } else {
        bytes
    };
    if target < before {
        return Err(CliError::Usage(format!(
            "{} is {before} bytes already: a pool does not shrink",
            a.pool.display()
        )));
    }
    if target > pool.max_size() {
        return Err(too_large(a, target, false, pool.max_size()));
    }
    if target > before {
        // +BYTES too grows the pool to its size plus BYTES, not its heap
        // by BYTES: a pool's file as created ends in part of a chunk, so
        // the heap's growth alone left the pool short of that size (and
        // the note below then named a false limit).
        pool.grow_to(target).map_err(CliError::rewind(format!(
            "growing {} to {target} bytes (its maximum size is {})",
            a.pool.display(),
            pool.max_size()
        )))?;
    }
    let grown = Grown {
        pool: &a.pool,
        size_before: before,
        size: pool.size(),
        max_size: pool.max_size(),
        heap_chunks: pool.alloc_stats().total_chunks,
    };
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&grown).map_err(CliError::Json)?
        );
    } else {
        println!(
            "{}: {} bytes (was {}; at most {}), {} heap chunks",
            a.pool.display(),
            grown.size,
            grown.size_before,
            grown.max_size,
            grown.heap_chunks
        );
        if grown.size < target {
            // (`grow_to` stops at the last whole chunk under the maximum.)
            println!(
                "note: {target} bytes is past the last whole 256 KiB heap chunk under the maximum \
                 size; {} bytes is as large as this pool can be",
                grown.size
            );
        }
    }
    pool.close().map_err(CliError::rewind(format!(
        "closing pool {}",
        a.pool.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_suffixes_and_a_plus() {
        assert_eq!(parse_size("4096"), Some((false, 4096)));
        assert_eq!(parse_size("64M"), Some((false, 64 << 20)));
        assert_eq!(parse_size("+1g"), Some((true, 1 << 30)));
        assert_eq!(parse_size("2T"), Some((false, 2 << 40)));
        for bad in [
            "",
            "+",
            "M",
            "1.5G",
            "-4",
            "99999999999T",
            "4X",
            "++1",
            "+-1",
            "+ 1",
        ] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }
}
