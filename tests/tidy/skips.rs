//! Every test that gives up on this machine does so through `runtime/tests/sandbox_support/unavailable.rs`, whose
//! `skip` turns the skip into a failure under `TROUPE_REQUIRE_SANDBOX=1` (CI). A test printing its own "skipped"
//! would pass in CI having checked nothing, so this fails on any `print!`/`println!`/`eprint!`/`eprintln!` whose
//! text starts with "skip" anywhere else in the workspace's Rust source.

use std::path::{Path, PathBuf};

/// The one file allowed to print a skip.
const HELPER: &str = "runtime/tests/sandbox_support/unavailable.rs";
/// This file, whose own test names the patterns.
const THIS_FILE: &str = "tests/tidy/skips.rs";

/// Where tests live: the integration tests and the crates' sources (their `#[cfg(test)]` modules).
const FOLDERS: [&str; 14] = [
    "tests",
    "src",
    "protocol/src",
    "protocol/tests",
    "runtime/src",
    "runtime/tests",
    "actors/src",
    "actors/tests",
    "gateway/src",
    "gateway/tests",
    "bench/src",
    "bench/tests",
    "examples",
    "test-support/src",
];

#[test]
fn tests_skip_only_through_the_one_helper() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut problems = Vec::new();
    for folder in FOLDERS {
        for path in rust_files(&workspace.join(folder)) {
            let relative = path.strip_prefix(workspace).expect("a path in the workspace");
            if relative == Path::new(HELPER) || relative == Path::new(THIS_FILE) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            for (number, line) in text.lines().enumerate() {
                if prints_a_skip(line) {
                    problems.push(format!("{}:{}: {}", relative.display(), number + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "tests that skip on their own, which TROUPE_REQUIRE_SANDBOX=1 cannot turn into failures; call \
         `unavailable::skip(Missing::…)` ({HELPER}) instead, adding a `Missing` variant if none fits:\n{}",
        problems.join("\n")
    );
}

/// Whether `line` prints a text starting with "skip" (any case): `eprintln!("skipped: …")` and the like.
fn prints_a_skip(line: &str) -> bool {
    let line = line.to_lowercase();
    ["print!(\"skip", "println!(\"skip"].iter().any(|pattern| line.contains(pattern))
}

/// The `.rs` files under `folder` (none when it does not exist), skipping `node_modules`.
fn rust_files(folder: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut folders = vec![folder.to_path_buf()];
    while let Some(current) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else { continue };
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                if path.file_name().is_some_and(|name| name != "node_modules") {
                    folders.push(path);
                }
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                files.push(path);
            }
        }
    }
    files
}

#[test]
fn the_pattern_finds_the_prints_of_a_skip() {
    assert!(prints_a_skip(r#"        eprintln!("skipped: not root");"#));
    assert!(prints_a_skip(r#"println!("Skipping: no Landlock");"#));
    assert!(!prints_a_skip(r#"eprintln!("RSS before {} MB", before);"#));
    assert!(!prints_a_skip(r#"assert!(meta.skipped_events.is_empty());"#));
}
