//! Step 3 of the demo: reopen the killed child's pool and compare it with
//! the model replayed from the seed.

use std::path::Path;

use rewind::{OpenOptions, Pool};

use super::bank::{self, Bank, Model, ACCOUNTS, INITIAL_BALANCE, LAYOUT};
use super::child::Kill;
use crate::error::CliError;

/// Transfers run on the recovered pool to show it is still usable.
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
    for line in pool.recovery_report().to_string().lines() {
        println!("      {line}");
    }
    c.check(
        kill.inflight == kill.last_committed + 1,
        format!(
            "the killed transfer {} follows the last commit {}",
            kill.inflight, kill.last_committed
        ),
    );
    let reading = || CliError::rewind("reading the recovered bank");
    let Some(root) = pool.root::<Bank>().map_err(reading())? else {
        c.check(false, "the pool has a root object".into());
        return Ok(c.failures);
    };

    let mut model = Model::new();
    while model.committed < kill.last_committed {
        model.step(seed);
    }
    let bank = pool.read(root).map_err(reading())?;
    c.check(
        bank.committed == kill.last_committed,
        format!(
            "committed counter {} == last commit returned {} (transfer {} rolled back)",
            bank.committed, kill.last_committed, kill.inflight
        ),
    );
    compare_with_model(&pool, &bank, &model, &mut c)?;

    // The recovered pool must keep working, allocator and log included; on
    // a state already wrong, more transfers would only add confusing errors.
    if c.failures.is_empty() {
        for _ in 0..AFTER_RECOVERY {
            bank::transfer(&pool, root, seed, |_| {})
                .map_err(CliError::rewind("running transfers after recovery"))?;
            model.step(seed);
        }
        let bank = pool.read(root).map_err(reading())?;
        c.check(
            bank.committed == model.committed,
            format!(
                "{AFTER_RECOVERY} more transfers after recovery: counter {}",
                bank.committed
            ),
        );
        compare_with_model(&pool, &bank, &model, &mut c)?;
    } else {
        println!("      skipped: {AFTER_RECOVERY} more transfers on the recovered pool");
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

/// Balances, their sum and the history list against the model.
fn compare_with_model(
    pool: &Pool,
    bank: &Bank,
    model: &Model,
    c: &mut Checks,
) -> Result<(), CliError> {
    let reading = || CliError::rewind("reading the recovered bank");
    let mut wrong = Vec::new();
    let mut total = 0u64;
    for a in 0..ACCOUNTS {
        let balance = pool.read(bank.accounts.at(a)).map_err(reading())?;
        total += balance;
        if balance != model.balances[a as usize] {
            wrong.push(a);
        }
    }
    c.check(
        wrong.is_empty(),
        format!(
            "{} of {ACCOUNTS} balances equal the model{}",
            ACCOUNTS - wrong.len() as u64,
            if wrong.is_empty() {
                String::new()
            } else {
                format!(" (first wrong: account {})", wrong[0])
            }
        ),
    );
    c.check(
        total == ACCOUNTS * INITIAL_BALANCE,
        format!("sum of balances {total} == {}", ACCOUNTS * INITIAL_BALANCE),
    );

    // Read one past the expected length so an overlong list shows. A
    // damaged list may point outside the pool: that is a failed check.
    let history = match bank::read_history(pool, bank, model.history.len() as u64 + 1) {
        Ok(h) => h,
        Err(e) => {
            c.check(false, format!("history list is readable: {e}"));
            return Ok(());
        }
    };
    let strip = |e: &bank::Entry| (e.from, e.to, e.amount, e.tx_no);
    let same = history.len() == model.history.len()
        && bank.history_len == model.history.len() as u64
        && history
            .iter()
            .map(strip)
            .eq(model.history.iter().map(strip));
    let span = match (history.first(), history.last()) {
        (Some(first), Some(last)) => format!("transfers {}..={}", last.tx_no, first.tx_no),
        _ => "empty".into(),
    };
    c.check(
        same,
        format!(
            "history: {} entries ({span}), length field {}, expected {} entries",
            history.len(),
            bank.history_len,
            model.history.len()
        ),
    );
    Ok(())
}
