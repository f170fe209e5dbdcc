//! Step 3 of the demo: reopen the killed child's pool and compare its
//! B+-tree with the model replayed from the seed.

use std::path::Path;

use rewind::{OpenOptions, Pool};

use super::child::Kill;
use super::tree::{self, Book, Model, Root, LAYOUT};
use crate::error::CliError;

/// Transactions run on the recovered pool to show it is still usable.
const AFTER_RECOVERY: u64 = 100;

/// Prints each check as it is made and keeps the failed ones.
#[derive(Default)]
struct Checks {
    failures: Vec<String>,
}

impl Checks {
    fn check(&mut self, ok: bool, what: String) {
        println!("      {} {what}", if ok { "ok    " } else { "FAILED" });
        if !ok {
            self.failures.push(what);
        }
    }
}

/// Reopens the pool, checks it; returns the failed checks.
pub(super) fn recovered(path: &Path, seed: u64, kill: &Kill) -> Result<Vec<String>, CliError> {
    let mut c = Checks::default();
    let pool = Pool::open(path, LAYOUT, &OpenOptions::default()).map_err(CliError::rewind(
        format!("reopening pool {}", path.display()),
    ))?;
    let report = pool.recovery_report();
    for line in report.to_string().lines() {
        println!("      {line}");
    }
    c.check(
        kill.inflight == kill.last_committed + 1,
        format!(
            "the killed transaction {} follows the last commit {}",
            kill.inflight, kill.last_committed
        ),
    );
    let reading = || CliError::rewind("reading the recovered root");
    let Some(root) = pool.root::<Root>().map_err(reading())? else {
        c.check(false, "the pool has a root object".into());
        return Ok(c.failures);
    };

    let mut model = Model::default();
    while model.committed < kill.last_committed {
        model.step(seed);
    }
    let r = pool.read(root).map_err(reading())?;
    // Under undo the killed transaction's records are in the log and
    // recovery rolls it back; under redo its writes waited in its write
    // set until a commit that never came, and recovery finds nothing of it.
    let killed = match report.rolled_back {
        0 => "never reached the log: nothing to roll back",
        _ => "rolled back",
    };
    c.check(
        r.committed == kill.last_committed,
        format!(
            "committed counter {} == last commit returned {} (transaction {} {killed})",
            r.committed, kill.last_committed, kill.inflight
        ),
    );
    compare_with_model(&pool, Book::from_ptr(r.book), &model, &mut c);

    // The recovered pool must keep working, allocator and log included; on
    // a state already wrong, more transactions would only add confusing
    // errors.
    if c.failures.is_empty() {
        for _ in 0..AFTER_RECOVERY {
            tree::step(&pool, root, seed, |_| {})
                .map_err(CliError::collection("running transactions after recovery"))?;
            model.step(seed);
        }
        let r = pool.read(root).map_err(reading())?;
        c.check(
            r.committed == model.committed,
            format!(
                "{AFTER_RECOVERY} more transactions after recovery: counter {}",
                r.committed
            ),
        );
        compare_with_model(&pool, Book::from_ptr(r.book), &model, &mut c);
    } else {
        println!("      skipped: {AFTER_RECOVERY} more transactions on the recovered pool");
    }
    drop(pool);

    match rewind::inspect::check(path) {
        Ok(report) => {
            c.check(
                report.is_ok(),
                format!(
                    "rewind check: {} problem(s), {} note(s)",
                    report.problems.len(),
                    report.notes.len()
                ),
            );
            for p in &report.problems {
                println!("             problem: {p}");
            }
        }
        Err(e) => c.check(false, format!("rewind check: {e}")),
    }
    Ok(c.failures)
}

/// The tree's invariants, its entries, and its blocks against the model
/// and the allocator. A damaged tree is a failed check, not an error.
fn compare_with_model(pool: &Pool, book: Book, model: &Model, c: &mut Checks) {
    match book.check_invariants(pool) {
        Ok(()) => c.check(
            true,
            format!(
                "B+-tree invariants: sorted keys, separators, leaf depths, fill factors (height {})",
                book.height(pool).unwrap_or(0)
            ),
        ),
        Err(e) => {
            c.check(false, format!("B+-tree invariants: {e}"));
            return;
        }
    }
    let entries: Result<Vec<_>, _> = book.iter(pool).and_then(|it| it.collect());
    match entries {
        Ok(entries) => {
            let wrong = entries
                .iter()
                .zip(&model.book)
                .position(|((k, v), (mk, mv))| k != mk || v != mv);
            let same = entries.len() == model.book.len() && wrong.is_none();
            c.check(
                same,
                format!(
                    "{} orders in key order, expected {}{}",
                    entries.len(),
                    model.book.len(),
                    match wrong {
                        Some(i) => format!(" (first difference at entry {i})"),
                        None => String::new(),
                    }
                ),
            );
        }
        Err(e) => c.check(false, format!("the tree's entries are readable: {e}")),
    }
    // Every allocated block is the root's or a tree node: a crash inside a
    // split (a nested top action under undo) neither leaked nor freed a node.
    let owned = book.blocks(pool);
    let allocated = rewind::alloc::allocated_blocks(pool.domain(), pool.layout());
    match (owned, allocated) {
        (Ok(owned), Ok(allocated)) => {
            let root = pool.root::<Root>().ok().flatten().map(|p| p.offset());
            let mut owned: Vec<u64> = owned.into_iter().chain(root).collect();
            owned.sort_unstable();
            let allocated: Vec<u64> = allocated.into_iter().map(|(off, _)| off).collect();
            c.check(
                owned == allocated,
                format!(
                    "{} allocated blocks == the root and the tree's {} reachable blocks",
                    allocated.len(),
                    owned.len().saturating_sub(1)
                ),
            );
        }
        (Err(e), _) => c.check(false, format!("the tree's nodes are readable: {e}")),
        (_, Err(e)) => c.check(false, format!("the allocator's state is readable: {e}")),
    }
}
