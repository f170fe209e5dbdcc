//! The demo's "bank" workload: N accounts and a bounded history of transfers.
//!
//! Transfer number `i` is a pure function of `(seed, i)` and the balances,
//! so the parent can replay exactly the transactions the child committed in
//! a volatile [`Model`] and compare it with what recovery left in the pool.
//! Each transfer exercises the three kinds of logged change: in-place
//! updates (balances, the root), an allocation (the new history entry) and,
//! once the history is longer than [`HISTORY_CAP`], a free (the oldest entry).

use rewind::{Error, PPtr, Pod, Pool, Tx, Zeroable};

/// Number of accounts.
pub const ACCOUNTS: u64 = 1000;
/// Starting balance of every account.
pub const INITIAL_BALANCE: u64 = 1000;
/// Longest history kept; older entries are freed.
pub const HISTORY_CAP: u64 = 64;
/// Layout name of the demo pool.
pub const LAYOUT: &str = "rewind-demo-bank";

/// The root object.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub struct Bank {
    /// Array of [`ACCOUNTS`] balances.
    pub accounts: PPtr<u64>,
    /// Newest history entry (a singly linked list, newest first).
    pub history: PPtr<Entry>,
    /// Entries in the list.
    pub history_len: u64,
    /// Number of the last committed transfer.
    pub committed: u64,
}

/// One transfer in the history list.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct Entry {
    /// Debited account.
    pub from: u64,
    /// Credited account.
    pub to: u64,
    /// Amount moved (0 when `from` could not cover it).
    pub amount: u64,
    /// Transfer number.
    pub tx_no: u64,
    /// Next older entry.
    pub next: PPtr<Entry>,
}

/// splitmix64: tiny, fast and good enough to spread transfers over accounts.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Transfer `i` before the balance check: `(from, to, requested amount)`.
pub fn plan(seed: u64, i: u64) -> (u64, u64, u64) {
    let mut s = seed ^ i.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    let from = splitmix64(&mut s) % ACCOUNTS;
    let to = splitmix64(&mut s) % ACCOUNTS;
    let want = splitmix64(&mut s) % 200 + 1;
    (from, to, want)
}

/// The amount actually moved: all of it if `from` can pay, else nothing.
pub fn amount(want: u64, from_balance: u64) -> u64 {
    if want <= from_balance {
        want
    } else {
        0
    }
}

/// The volatile model the parent replays.
pub struct Model {
    /// Balances.
    pub balances: Vec<u64>,
    /// History, newest first.
    pub history: std::collections::VecDeque<Entry>,
    /// Last applied transfer.
    pub committed: u64,
}

impl Model {
    /// The bank just after initialisation.
    pub fn new() -> Model {
        Model {
            balances: vec![INITIAL_BALANCE; ACCOUNTS as usize],
            history: Default::default(),
            committed: 0,
        }
    }

    /// Applies the next transfer.
    pub fn step(&mut self, seed: u64) {
        let i = self.committed + 1;
        let (from, to, want) = plan(seed, i);
        let amount = amount(want, self.balances[from as usize]);
        self.balances[from as usize] -= amount;
        self.balances[to as usize] += amount;
        self.history.push_front(Entry {
            from,
            to,
            amount,
            tx_no: i,
            next: PPtr::null(),
        });
        self.history.truncate(HISTORY_CAP as usize);
        self.committed = i;
    }
}

/// Creates the root and the accounts in one transaction.
pub fn init(pool: &Pool) -> Result<PPtr<Bank>, Error> {
    pool.transaction(|tx| {
        let root = tx.root::<Bank>()?;
        let accounts = tx.alloc_array::<u64>(ACCOUNTS)?;
        for a in 0..ACCOUNTS {
            tx.write(accounts.at(a), &INITIAL_BALANCE)?;
        }
        let bank = Bank {
            accounts,
            history: PPtr::null(),
            history_len: 0,
            committed: 0,
        };
        tx.write(root, &bank)?;
        Ok(root)
    })
}

/// Runs the next transfer in one transaction and returns its number.
///
/// `mid` runs inside the transaction after the balances and the history are
/// changed and before the counter is, so the demo child can announce the
/// transaction and get killed while it is in flight. By then the allocation
/// and the free have pushed the earlier records out to the log (the Batch
/// log fences its pending group before either), so recovery has real work.
pub fn transfer(
    pool: &Pool,
    root: PPtr<Bank>,
    seed: u64,
    mid: impl FnOnce(u64),
) -> Result<u64, Error> {
    pool.transaction(|tx| {
        let bank = tx.read(root)?;
        let i = bank.committed + 1;
        let (from, to, want) = plan(seed, i);
        let from_balance = tx.read(bank.accounts.at(from))?;
        let amount = amount(want, from_balance);
        tx.write(bank.accounts.at(from), &(from_balance - amount))?;
        // Read after the debit: `from == to` must see its own write.
        let to_balance = tx.read(bank.accounts.at(to))?;
        tx.write(bank.accounts.at(to), &(to_balance + amount))?;

        let entry = tx.alloc::<Entry>()?;
        let new = Entry {
            from,
            to,
            amount,
            tx_no: i,
            next: bank.history,
        };
        tx.write(entry, &new)?;
        let mut len = bank.history_len + 1;
        if len > HISTORY_CAP {
            drop_oldest(tx, entry, len)?;
            len -= 1;
        }
        mid(i);
        let bank = Bank {
            history: entry,
            history_len: len,
            committed: i,
            ..bank
        };
        tx.write(root, &bank)?;
        Ok(i)
    })
}

/// Unlinks and frees the last of `len` entries starting at `head`.
fn drop_oldest(tx: &mut Tx<'_>, head: PPtr<Entry>, len: u64) -> Result<(), Error> {
    // Walk to the second-to-last entry: the list has no tail pointer, on
    // purpose, so every transfer also reads a few dozen persistent entries.
    let mut prev = head;
    for _ in 0..len - 2 {
        prev = tx.read(prev)?.next;
    }
    let mut before = tx.read(prev)?;
    let oldest = before.next;
    before.next = PPtr::null();
    tx.write(prev, &before)?;
    tx.free(oldest)
}

/// Reads the whole history list of a recovered pool, newest first.
/// Stops after `limit` entries so a damaged (cyclic) list cannot hang us.
pub fn read_history(pool: &Pool, bank: &Bank, limit: u64) -> Result<Vec<Entry>, Error> {
    let mut out = Vec::new();
    let mut p = bank.history;
    while !p.is_null() && (out.len() as u64) < limit {
        let e = pool.read(p)?;
        out.push(e);
        p = e.next;
    }
    Ok(out)
}
