//! The README's "The `rewind` command" block against the binary: every
//! subcommand it names exists, every option it shows is in that
//! subcommand's `--help`, and the line under a usage line quotes the
//! subcommand's summary as `rewind --help` prints it.

use std::process::Command;

fn rewind(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rewind"))
        .args(args)
        .output()
        .expect("run the rewind binary");
    assert!(out.status.success(), "rewind {args:?} failed");
    String::from_utf8(out.stdout).expect("UTF-8 help")
}

/// The lines of the README's fenced block under "## The `rewind` command".
fn command_block() -> Vec<String> {
    let readme = include_str!("../../../README.md");
    let section = readme
        .split("## The `rewind` command")
        .nth(1)
        .expect("README has a section `The rewind command`");
    let block = section.split("```").nth(1).expect("a fenced block");
    block.lines().skip(1).map(str::to_string).collect()
}

/// Whitespace collapsed, so that wrapped help text compares.
fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn every_subcommand_option_and_summary_the_readme_quotes_is_the_binarys() {
    let top = rewind(&["--help"]);
    let lines = command_block();
    let mut checked = 0;
    for (i, line) in lines.iter().enumerate() {
        let Some(usage) = line.strip_prefix("rewind ") else {
            continue;
        };
        // `info | check | recover | dump-log POOL`: each name before the operands.
        let words: Vec<&str> = usage.split_whitespace().collect();
        let mut subs = vec![words[0].split('|').next().unwrap_or_default()];
        let mut rest = &words[1..];
        while rest.len() >= 2 && rest[0] == "|" {
            subs.push(rest[1]);
            rest = &rest[2..];
        }
        let flags: Vec<&str> = (words.iter())
            .map(|w| w.trim_matches(|c: char| c == '[' || c == ']'))
            .filter(|w| w.starts_with("--"))
            .collect();
        for sub in &subs {
            let help = rewind(&[sub, "--help"]);
            for flag in &flags {
                assert!(help.contains(flag), "`rewind {sub} --help` has no {flag}");
            }
            checked += 1;
        }
        // The summary the README quotes under the usage line.
        if let Some(summary) = lines.get(i + 1).and_then(|l| l.strip_prefix("    ")) {
            let sub = subs[0];
            let listed = (top.lines())
                .find_map(|l| l.trim_start().strip_prefix(sub)?.strip_prefix(' '))
                .unwrap_or_else(|| panic!("`rewind --help` does not list {sub}"));
            assert_eq!(
                squash(summary),
                squash(listed),
                "README's summary of `rewind {sub}` is not the binary's"
            );
        }
    }
    assert!(
        checked >= 7,
        "only {checked} subcommands found in the README"
    );
}
