//! The repository README's first example is `examples/readme.rs`, word for
//! word, so it compiles (`cargo test` builds examples); `cargo run -p
//! rewind-collections --example readme` runs it.

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
