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
    // here (this file's only other test reads no environment).
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
