//! The README's first example: a persistent linked list of accounts.
//! Run it twice: the second run opens the pool (recovery first) and
//! prepends another account.

use rewind::{PPtr, Pod, Pool, PoolConfig, Zeroable};

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct Account {
    balance: u64,
    next: PPtr<Account>,
}

fn main() -> Result<(), rewind::Error> {
    let path = std::env::temp_dir().join("accounts.pool");
    // Opens (running recovery first) or creates a 64 MiB pool.
    let pool = Pool::open_or_create(&path, "accounts", 64 << 20, &PoolConfig::default())?;
    pool.transaction(|tx| {
        let head: PPtr<PPtr<Account>> = tx.root()?; // zeroed on first use
        let a = tx.alloc::<Account>()?; // undone if we abort
        let next = tx.read(head)?;
        tx.write(a, &Account { balance: 100, next })?; // logged, then stored in place
        tx.write(head, &a) // Ok => commit; Err or panic => rollback
    })?;
    let mut n = 0;
    let mut p = pool.read(pool.root::<PPtr<Account>>()?.expect("root"))?;
    while !p.is_null() {
        n += 1;
        p = pool.read(p)?.next;
    }
    println!("{} holds {n} account(s)", path.display());
    pool.close() // or drop it; close reports errors
}
