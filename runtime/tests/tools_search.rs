//! The `search` tool on real trees: `.gitignore`, binary files, globs, caps and regex errors.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use troupe_protocol::types::run::{PersistedToolResult, ToolResultStatus};
use troupe_runtime::tools::{ToolContext, ToolRegistry};

const STEP: Duration = Duration::from_secs(20);

async fn search_with(arguments: Value, context: ToolContext) -> PersistedToolResult {
    let registry = ToolRegistry::builtin();
    tokio::time::timeout(STEP, registry.get("search").unwrap().execute(arguments, context))
        .await
        .expect("the search ends in time")
}

async fn search(arguments: Value, cwd: &Path) -> PersistedToolResult {
    search_with(arguments, ToolContext::new(cwd)).await
}

fn write(root: &Path, path: &str, content: &[u8]) {
    let path = root.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// A temporary directory holding `files`, given as (path, content) pairs, so that a test's tree reads as one table.
fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let directory = tempfile::tempdir().unwrap();
    for (path, content) in files {
        write(directory.path(), path, content.as_bytes());
    }
    directory
}

#[tokio::test]
async fn search_respects_gitignore_and_skips_binary_files() {
    let directory = tree(&[
        (".gitignore", "target/\n*.log\n"),
        ("src/main.rs", "fn main() {\n    println!(\"needle\");\n}\n"),
        ("notes.txt", "no match here\nneedle at line two\n"),
        ("target/debug/out.rs", "needle in build output\n"),
        ("run.log", "needle in a log\n"),
        ("data.bin", "needle\0binary"),
        (".github/workflow.yml", "needle: hidden but not ignored\n"),
        (".git/config", "needle in git internals\n"),
    ]);
    let root = directory.path();

    let result = search(json!({"pattern": "needle"}), root).await;
    assert_eq!(result.status, ToolResultStatus::Ok, "{}", result.output);
    let mut lines: Vec<&str> = result.output.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            ".github/workflow.yml:1: needle: hidden but not ignored",
            "notes.txt:2: needle at line two",
            "src/main.rs:2:     println!(\"needle\");",
        ]
    );
}

#[tokio::test]
async fn glob_and_path_narrow_the_search() {
    let directory = tree(&[("src/a.rs", "let x = 1;\n"), ("src/b.txt", "let x = 2;\n"), ("docs/c.rs", "let x = 3;\n")]);
    let root = directory.path();

    let rust = search(json!({"pattern": r"let x = \d", "glob": "*.rs"}), root).await;
    let mut lines: Vec<&str> = rust.output.lines().collect();
    lines.sort();
    assert_eq!(lines, ["docs/c.rs:1: let x = 3;", "src/a.rs:1: let x = 1;"]);

    let under_src = search(json!({"pattern": "let", "path": "src", "glob": "*.txt"}), root).await;
    assert_eq!(under_src.output, "src/b.txt:1: let x = 2;");

    let one_file = search(json!({"pattern": "let", "path": "docs/c.rs"}), root).await;
    assert_eq!(one_file.output, "docs/c.rs:1: let x = 3;");

    let none = search(json!({"pattern": "absent"}), root).await;
    assert_eq!(none.status, ToolResultStatus::Ok);
    assert_eq!(none.output, "no matches for /absent/ in .");
}

#[tokio::test]
async fn an_invalid_regex_is_reported_clearly() {
    let directory = tempfile::tempdir().unwrap();
    let result = search(json!({"pattern": "fn (main"}), directory.path()).await;
    assert_eq!(result.status, ToolResultStatus::Error);
    assert!(result.output.starts_with("invalid regex: "), "{}", result.output);
    assert!(result.output.contains("unclosed group"), "{}", result.output);
}

#[tokio::test]
async fn results_are_capped_and_long_lines_shortened() {
    let directory = tempfile::tempdir().unwrap();
    let many: String = (0..50).map(|index| format!("hit {index}\n")).collect();
    write(directory.path(), "many.txt", many.as_bytes());
    let mut context = ToolContext::new(directory.path());
    context.limits.max_search_results = 10;
    let capped = search_with(json!({"pattern": "hit"}), context).await;
    let lines: Vec<&str> = capped.output.lines().collect();
    assert_eq!(lines.len(), 11);
    assert_eq!(lines[9], "many.txt:10: hit 9");
    assert_eq!(lines[10], "[stopped after 10 matches; narrow the pattern, path or glob to see more]");

    let long = format!("{}\n", "é".repeat(400));
    write(directory.path(), "long.txt", long.as_bytes());
    let shortened = search(json!({"pattern": "é", "glob": "long.txt"}), directory.path()).await;
    assert_eq!(shortened.output, format!("long.txt:1: {}…", "é".repeat(300)));
}

#[tokio::test]
async fn searching_outside_the_cwd_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let cwd = root.path().join("project");
    write(root.path(), "secret/key.txt", b"needle\n");
    std::fs::create_dir(&cwd).unwrap();
    let request = ToolRegistry::builtin()
        .get("search")
        .unwrap()
        .permission(&json!({"pattern": "needle", "path": "../secret"}), &cwd)
        .unwrap();
    assert!(!request.inside_cwd);
    let result = search(json!({"pattern": "needle", "path": "../secret"}), &cwd).await;
    assert_eq!(result.status, ToolResultStatus::Denied);

    // A symlinked directory inside the cwd is not followed by the walk.
    std::os::unix::fs::symlink(root.path().join("secret"), cwd.join("link")).unwrap();
    let walked = search(json!({"pattern": "needle"}), &cwd).await;
    assert_eq!(walked.output, "no matches for /needle/ in .");
}

/// Opens `fifo` for writing without blocking (once a reader waits) and closes it, which lets a reader blocked in
/// `open` go on: what a test does to end a search the fix failed to protect, so that it fails instead of hanging.
fn release_reader(fifo: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(fifo);
}

#[tokio::test]
async fn an_ignore_file_that_is_a_fifo_is_never_opened_and_its_folder_is_skipped() {
    let directory =
        tree(&[("sub/a.txt", "needle in sub\n"), ("top.txt", "needle on top\n"), ("other/b.txt", "needle in other\n")]);
    let root = directory.path();
    let fifo = root.join("sub/.gitignore");
    let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o644) }, 0);
    std::os::unix::fs::symlink("/dev/zero", root.join("other/.ignore")).unwrap();

    let search =
        ToolRegistry::builtin().get("search").unwrap().execute(json!({"pattern": "needle"}), ToolContext::new(root));
    let result = match tokio::time::timeout(Duration::from_secs(10), search).await {
        Ok(result) => result,
        Err(_) => {
            release_reader(&fifo);
            panic!("the search blocked on the FIFO .gitignore");
        }
    };
    assert_eq!(result.status, ToolResultStatus::Ok, "{}", result.output);
    let mut lines: Vec<&str> = result.output.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "[skipped other: its .ignore is not a regular file, and reading it would block]",
            "[skipped sub: its .gitignore is not a regular file, and reading it would block]",
            "top.txt:1: needle on top",
        ]
    );

    // Rooted in the folder itself (or beneath it), no ignore file is read at all, and the search still ends.
    let inside = search_with(json!({"pattern": "needle", "path": "sub"}), ToolContext::new(root));
    let inside = match tokio::time::timeout(Duration::from_secs(10), inside).await {
        Ok(result) => result,
        Err(_) => {
            release_reader(&fifo);
            panic!("the search rooted at the FIFO's folder blocked");
        }
    };
    assert_eq!(
        inside.output,
        "sub/a.txt:1: needle in sub\n[no .gitignore was applied: sub/.gitignore is not a regular file, and reading \
         it would block]"
    );
}
