//! The repository README's first example is `examples/readme.rs`, word for
//! word, so it compiles (`cargo test` builds examples), and it runs here
//! as a user runs it (`cargo run -p rewind-collections --example readme`),
//! twice, so the second run reopens the pool the first one made.

use std::path::Path;

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn readme_first_example_is_examples_readme() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = read(&crate_dir.join("../../README.md"));
    let example = read(&crate_dir.join("examples/readme.rs"));
    let start = readme.find("```rust\n").expect("a rust block in README.md") + "```rust\n".len();
    let len = readme[start..].find("```").expect("the block's end");
    assert_eq!(
        readme[start..start + len].trim_end(),
        example.trim_end(),
        "README.md's first example differs from crates/rewind-collections/examples/readme.rs"
    );
}

/// The example itself, compiled into this test: its `main` is private.
mod example {
    include!("../examples/readme.rs");

    pub fn run() -> Result<(), Error> {
        main()
    }
}

#[test]
fn readme_first_example_runs_and_runs_again_on_its_pool() {
    // The example's pool goes to the temporary directory: a fresh one
    // here. This file's other tests run beside this one in the same
    // process, so none of them may read TMPDIR (they make their
    // directories under the target's own temporary directory).
    let dir = tempfile::tempdir().unwrap();
    std::env::set_var("TMPDIR", dir.path());
    example::run().unwrap();
    example::run().unwrap();
    let pool = rewind::Pool::open(
        dir.path().join("balances.pool"),
        "balances",
        &rewind::OpenOptions::default(),
    )
    .unwrap();
    let map = pool
        .transaction(|tx| {
            let root: rewind::PPtr<rewind::PPtr<rewind_collections::BTreeMap<String, u64>>> =
                tx.root()?;
            tx.read(root)
        })
        .unwrap();
    let map = rewind_collections::BTreeMap::<String, u64>::from_ptr(map);
    // Two transfers of 10 from alice's 100.
    assert_eq!(map.get(&pool, "alice").unwrap(), Some(80));
    assert_eq!(map.get(&pool, "bob").unwrap(), Some(20));
}

/// docs/collections.md's "Handles and the root" block, word for word
/// between the markers, in the program around it: create a map in the
/// pool's root, reopen, rebuild the handle.
#[rustfmt::skip]
fn collections_md_handles(path: &Path) -> Result<(), rewind_collections::Error> {
    use rewind::{OpenOptions, PPtr, Pool, PoolConfig};
    use rewind_collections::BTreeMap;
    let pool = Pool::create(path, "handles", 8 << 20, &PoolConfig::default())?;
    pool.transaction(|tx| {
        let map = BTreeMap::<u64, u64>::create(tx)?;
        map.insert(tx, 1, 10)?;
        // collections.md begin
        let root = tx.root::<PPtr<BTreeMap<u64, u64>>>()?;    // in the creating transaction
        tx.write(root, &map.as_ptr())?;
        // collections.md end
        Ok::<_, rewind_collections::Error>(())
    })?;
    pool.close()?;
    let pool = Pool::open(path, "handles", &OpenOptions::default())?;
    // collections.md begin
    // after reopening:
    let map = BTreeMap::<u64, u64>::from_ptr(pool.read(pool.root()?.unwrap())?);
    // collections.md end
    assert_eq!(map.get(&pool, &1)?, Some(10));
    Ok(())
}

#[test]
fn collections_md_handles_block_is_this_and_runs() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = read(&crate_dir.join("../../docs/collections.md"));
    let start = doc.find("```rust\n").expect("a rust block") + "```rust\n".len();
    let block = &doc[start..start + doc[start..].find("```").expect("its end")];
    let src = read(&crate_dir.join("tests/readme.rs"));
    let ours: String = src
        .split("// collections.md begin\n")
        .skip(1)
        .flat_map(|b| b[..b.find("// collections.md end").expect("an end")].lines())
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.trim_start().to_string() + "\n")
        .collect();
    assert_eq!(
        ours, block,
        "docs/collections.md's handles block differs from tests/readme.rs"
    );
    // Not tempfile::tempdir(): that reads TMPDIR, which the test above
    // points at a directory it removes when it ends.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    collections_md_handles(&dir.path().join("h.pool")).unwrap();
}
