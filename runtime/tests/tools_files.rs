//! The file tools on real files: write, read, edit and list round trips, and their refusals.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use troupe_protocol::types::approval::PermissionAction;
use troupe_protocol::types::run::{PersistedToolResult, ToolResultStatus};
use troupe_runtime::tools::{ToolContext, ToolLimits, ToolRegistry};

const STEP: Duration = Duration::from_secs(20);

async fn call_with(name: &str, arguments: Value, context: ToolContext) -> PersistedToolResult {
    let registry = ToolRegistry::builtin();
    let tool = registry.get(name).expect("the tool is built in");
    tokio::time::timeout(STEP, tool.execute(arguments, context)).await.expect("the call ends in time")
}

async fn call(name: &str, arguments: Value, cwd: &Path) -> PersistedToolResult {
    call_with(name, arguments, ToolContext::new(cwd)).await
}

fn assert_ok(result: &PersistedToolResult) {
    assert_eq!(result.status, ToolResultStatus::Ok, "{}", result.output);
}

#[tokio::test]
async fn registry_lists_every_tool_sorted_with_object_schemas() {
    let registry = ToolRegistry::builtin();
    let specs = registry.specs();
    let names: Vec<&str> = specs.iter().map(|spec| spec.name.as_str()).collect();
    assert_eq!(names, ["edit_file", "list_dir", "read_file", "search", "shell", "web_fetch", "write_file"]);
    for spec in &specs {
        assert_eq!(spec.parameters["type"], "object", "{}", spec.name);
        assert_eq!(spec.parameters["additionalProperties"], false, "{}", spec.name);
        assert!(!spec.description.is_empty());
        assert!(registry.get(&spec.name).is_some());
    }
    assert!(registry.get("no_such_tool").is_none());
    assert_eq!(ToolLimits::default().max_output_bytes, 64 * 1024);
}

#[tokio::test]
async fn write_then_read_round_trips_and_creates_parents() {
    let directory = tempfile::tempdir().unwrap();
    let written = call("write_file", json!({"path": "a/b/c.txt", "content": "one\ntwo\n"}), directory.path()).await;
    assert_ok(&written);
    assert_eq!(written.output, "wrote 8 bytes to a/b/c.txt (new file, +2)");
    assert_eq!(std::fs::read_to_string(directory.path().join("a/b/c.txt")).unwrap(), "one\ntwo\n");

    let read = call("read_file", json!({"path": "a/b/c.txt"}), directory.path()).await;
    assert_ok(&read);
    assert_eq!(read.output, "one\ntwo\n");

    // Writing again replaces, never appends.
    let rewritten = call("write_file", json!({"path": "a/b/c.txt", "content": "x"}), directory.path()).await;
    assert_ok(&rewritten);
    assert_eq!(std::fs::read_to_string(directory.path().join("a/b/c.txt")).unwrap(), "x");
}

#[tokio::test]
async fn permissions_name_the_resolved_absolute_path() {
    let directory = tempfile::tempdir().unwrap();
    let cwd = directory.path().canonicalize().unwrap();
    let registry = ToolRegistry::builtin();
    let expectations = [
        ("read_file", json!({"path": "x.txt"}), PermissionAction::Read, cwd.join("x.txt")),
        ("list_dir", json!({}), PermissionAction::Read, cwd.clone()),
        ("search", json!({"pattern": "a", "path": "sub"}), PermissionAction::Read, cwd.join("sub")),
        ("write_file", json!({"path": "./n/x.txt", "content": ""}), PermissionAction::Write, cwd.join("n/x.txt")),
        (
            "edit_file",
            json!({"path": "x.txt", "old_string": "a", "new_string": "b"}),
            PermissionAction::Write,
            cwd.join("x.txt"),
        ),
    ];
    for (name, arguments, action, path) in expectations {
        let request = registry.get(name).unwrap().permission(&arguments, directory.path()).unwrap();
        assert_eq!(request.action, action, "{name}");
        assert_eq!(request.resource, path.to_str().unwrap(), "{name}");
        assert!(request.inside_cwd, "{name}");
    }
}

#[tokio::test]
async fn bad_arguments_are_errors() {
    let directory = tempfile::tempdir().unwrap();
    let registry = ToolRegistry::builtin();
    let read = registry.get("read_file").unwrap();
    let error = read.permission(&json!({"path": 5}), directory.path()).unwrap_err();
    assert!(error.to_string().starts_with("invalid arguments for read_file"), "{error}");
    assert!(read.permission(&json!({}), directory.path()).is_err());
    assert!(read.permission(&json!({"path": ""}), directory.path()).is_err());
    assert!(read.permission(&json!({"path": "a", "extra": 1}), directory.path()).is_err());

    let result = call("write_file", json!({"path": "a"}), directory.path()).await;
    assert_eq!(result.status, ToolResultStatus::Error);
    assert!(result.output.contains("missing field `content`"), "{}", result.output);
}

#[tokio::test]
async fn reading_a_missing_file_or_a_directory_is_an_error() {
    let directory = tempfile::tempdir().unwrap();
    std::fs::create_dir(directory.path().join("sub")).unwrap();
    let missing = call("read_file", json!({"path": "nope.txt"}), directory.path()).await;
    assert_eq!(missing.status, ToolResultStatus::Error);
    assert!(missing.output.starts_with("could not open nope.txt"), "{}", missing.output);
    let dir = call("read_file", json!({"path": "sub"}), directory.path()).await;
    assert_eq!(dir.status, ToolResultStatus::Error);
    assert!(dir.output.contains("is a directory"), "{}", dir.output);
}

#[tokio::test]
async fn read_windows_and_caps_with_a_note() {
    let directory = tempfile::tempdir().unwrap();
    let text: String = (1..=10).map(|line| format!("line {line}\n")).collect();
    std::fs::write(directory.path().join("f.txt"), &text).unwrap();

    let window =
        call("read_file", json!({"path": "f.txt", "offset_line": 3, "limit_lines": 2}), directory.path()).await;
    assert_eq!(window.output, "line 3\nline 4\n[truncated: showed lines 3..=4; continue with offset_line=5]");

    let mut context = ToolContext::new(directory.path());
    context.limits.max_read_bytes = 20;
    let capped = call_with("read_file", json!({"path": "f.txt"}), context).await;
    assert_eq!(capped.output, "line 1\nline 2\n[truncated: showed lines 1..=2; continue with offset_line=3]");

    let past_end = call("read_file", json!({"path": "f.txt", "offset_line": 50}), directory.path()).await;
    assert_eq!(past_end.status, ToolResultStatus::Error);

    std::fs::write(directory.path().join("bin"), [b'a', 0xff, b'b']).unwrap();
    let lossy = call("read_file", json!({"path": "bin"}), directory.path()).await;
    assert_eq!(lossy.output, "a\u{fffd}b");
}

#[tokio::test]
async fn edit_replaces_exactly_once_or_explains_why_not() {
    let directory = tempfile::tempdir().unwrap();
    let file = directory.path().join("code.rs");
    std::fs::write(&file, "let a = 1;\nlet b = 1;\nlet c = 2;\n").unwrap();

    let edit = |old: &str, new: &str, replace_all: bool| json!({"path": "code.rs", "old_string": old, "new_string": new, "replace_all": replace_all});

    let single = call("edit_file", edit("let c = 2;", "let c = 3;", false), directory.path()).await;
    assert_ok(&single);
    assert_eq!(single.output, "replaced 1 occurrence in code.rs (+1 -1)");

    let missing = call("edit_file", edit("let d", "let e", false), directory.path()).await;
    assert_eq!(missing.status, ToolResultStatus::Error);
    assert!(missing.output.starts_with("old_string was not found in code.rs"), "{}", missing.output);

    let ambiguous = call("edit_file", edit("= 1;", "= 9;", false), directory.path()).await;
    assert_eq!(ambiguous.status, ToolResultStatus::Error);
    assert!(ambiguous.output.starts_with("old_string occurs 2 times in code.rs"), "{}", ambiguous.output);
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "let a = 1;\nlet b = 1;\nlet c = 3;\n",
        "a refused edit changes nothing"
    );

    let all = call("edit_file", edit("= 1;", "= 9;", true), directory.path()).await;
    assert_ok(&all);
    assert_eq!(all.output, "replaced 2 occurrences in code.rs (+2 -2)");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "let a = 9;\nlet b = 9;\nlet c = 3;\n");

    let missing_file =
        call("edit_file", json!({"path": "nope.rs", "old_string": "a", "new_string": "b"}), directory.path()).await;
    assert_eq!(missing_file.status, ToolResultStatus::Error);
}

#[tokio::test]
async fn list_dir_sorts_and_marks_directories_and_links() {
    let directory = tempfile::tempdir().unwrap();
    std::fs::write(directory.path().join("b.txt"), "").unwrap();
    std::fs::write(directory.path().join("a.txt"), "").unwrap();
    std::fs::create_dir(directory.path().join("src")).unwrap();
    std::fs::write(directory.path().join("src/lib.rs"), "").unwrap();
    std::os::unix::fs::symlink("a.txt", directory.path().join("link")).unwrap();

    let listed = call("list_dir", json!({}), directory.path()).await;
    assert_ok(&listed);
    assert_eq!(listed.output, "a.txt\nb.txt\nlink@\nsrc/");

    let nested = call("list_dir", json!({"path": "src"}), directory.path()).await;
    assert_eq!(nested.output, "lib.rs");

    std::fs::create_dir(directory.path().join("empty")).unwrap();
    let empty = call("list_dir", json!({"path": "empty"}), directory.path()).await;
    assert_eq!(empty.output, "empty is empty");

    let missing = call("list_dir", json!({"path": "nope"}), directory.path()).await;
    assert_eq!(missing.status, ToolResultStatus::Error);

    let file = call("list_dir", json!({"path": "a.txt"}), directory.path()).await;
    assert_eq!(file.status, ToolResultStatus::Error);
    assert_eq!(file.output, "a.txt is not a directory");

    // A symlink to a directory inside the cwd lists the directory it points to.
    std::os::unix::fs::symlink("src", directory.path().join("src-link")).unwrap();
    let through_link = call("list_dir", json!({"path": "src-link"}), directory.path()).await;
    assert_eq!(through_link.output, "lib.rs");
}

#[tokio::test]
async fn list_dir_caps_at_a_thousand_entries() {
    let directory = tempfile::tempdir().unwrap();
    for index in 0..1005 {
        std::fs::write(directory.path().join(format!("f{index:04}")), "").unwrap();
    }
    let listed = call("list_dir", json!({}), directory.path()).await;
    let lines: Vec<&str> = listed.output.lines().collect();
    assert_eq!(lines.len(), 1001);
    assert_eq!(lines[999], "f0999");
    assert_eq!(lines[1000], "[5 more entries not shown; 1005 in all]");
}

#[tokio::test]
async fn cancelled_file_calls_do_nothing() {
    let directory = tempfile::tempdir().unwrap();
    let context = ToolContext::new(directory.path());
    context.cancel.cancel();
    let result = call_with("write_file", json!({"path": "x.txt", "content": "x"}), context).await;
    assert_eq!(result.status, ToolResultStatus::Cancelled);
    assert!(!directory.path().join("x.txt").exists());
}

#[tokio::test]
async fn a_file_that_is_one_huge_line_is_cut_to_the_budget_not_buffered_whole() {
    let dir = tempfile::tempdir().unwrap();
    // 4 MiB without a newline, after two short lines.
    let mut content = b"first\nsecond\n".to_vec();
    content.extend(std::iter::repeat_n(b'x', 4 * 1024 * 1024));
    std::fs::write(dir.path().join("big.txt"), &content).unwrap();
    let mut context = ToolContext::new(dir.path());
    context.limits.max_read_bytes = 1000;
    let tool = ToolRegistry::builtin();
    let tool = tool.get("read_file").unwrap();
    let result = tool.execute(json!({"path": "big.txt", "offset_line": 3}), context).await;
    assert_eq!(result.status, ToolResultStatus::Ok, "{}", result.output);
    assert!(result.output.starts_with(&"x".repeat(1000)), "{}", &result.output[..50]);
    assert!(result.output.contains("line 3 cut after 1000 bytes"), "{}", &result.output[1000..]);
    assert!(result.output.contains("continue with offset_line=4"), "{}", &result.output[1000..]);
    // The cut mark sits right after the cut, so a secret the cut split is masked in what is left of it.
    assert!(result.output[1000..].starts_with("…\n[truncated"), "{}", &result.output[1000..]);
    let mut context = ToolContext::new(dir.path());
    context.limits.max_read_bytes = 1000;
    let result = tool.execute(json!({"path": "big.txt", "limit_lines": 1}), context).await;
    assert!(
        result.output.starts_with("first\n[truncated: showed lines 1..=1; continue with offset_line=2]"),
        "{}",
        result.output
    );
}
