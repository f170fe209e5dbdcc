//! The README's SQLite example is `examples/readme.rs` word for word, so it
//! compiles (`cargo test` builds examples), and it runs here as `cargo run
//! -p rewind-sqlite --example sqlite-readme` runs it.

use std::path::Path;

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn readme_sqlite_example_is_examples_readme() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = read(&dir.join("../../README.md"));
    let section = &readme[readme.find("## SQLite on rewind").expect("the section")..];
    let start = section.find("```rust\n").expect("its rust block") + "```rust\n".len();
    let block = &section[start..start + section[start..].find("```").expect("the block's end")];
    let example = read(&dir.join("examples/readme.rs"));
    let body = &example[example.find("// README begin\n").unwrap() + 16
        ..example.find("    // README end").unwrap()];
    // Compared without whitespace: rustfmt wraps the example's long line.
    let squeeze = |s: &str| s.split_whitespace().collect::<String>();
    assert_eq!(
        squeeze(block),
        squeeze(body),
        "README.md's SQLite example differs from examples/readme.rs"
    );
}

/// The example itself, compiled into this test: its `main` is private.
mod example {
    include!("../examples/readme.rs");

    pub fn run() -> Result<(), Box<dyn std::error::Error>> {
        main()
    }
}

#[test]
fn readme_sqlite_example_runs() {
    // (It works in a temporary directory of its own, made current.)
    example::run().unwrap();
}
