//! Path confinement: `..`, symlinks pointing out, swapped components between permission and execution, and
//! approved access outside the cwd.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use troupe_protocol::types::run::{PersistedToolResult, ToolResultStatus};
use troupe_runtime::tools::paths::resolve_path;
use troupe_runtime::tools::{PermissionRequest, ToolContext, ToolRegistry};

const STEP: Duration = Duration::from_secs(20);

fn permission(name: &str, arguments: &Value, cwd: &Path) -> PermissionRequest {
    ToolRegistry::builtin().get(name).unwrap().permission(arguments, cwd).unwrap()
}

async fn execute(name: &str, arguments: Value, context: ToolContext) -> PersistedToolResult {
    let registry = ToolRegistry::builtin();
    tokio::time::timeout(STEP, registry.get(name).unwrap().execute(arguments, context))
        .await
        .expect("the call ends in time")
}

/// A cwd inside a parent directory that also holds a file outside the cwd.
struct Layout {
    _root: tempfile::TempDir,
    cwd: std::path::PathBuf,
    outside: std::path::PathBuf,
}

fn layout() -> Layout {
    let root = tempfile::tempdir().unwrap();
    let base = root.path().canonicalize().unwrap();
    let cwd = base.join("project");
    let outside = base.join("secret");
    std::fs::create_dir_all(cwd.join("sub")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("key.txt"), "secret").unwrap();
    std::fs::write(cwd.join("inside.txt"), "inside").unwrap();
    Layout { _root: root, cwd, outside }
}

#[tokio::test]
async fn dot_dot_out_of_the_cwd_is_outside() {
    let layout = layout();
    let request = permission("read_file", &json!({"path": "../secret/key.txt"}), &layout.cwd);
    assert!(!request.inside_cwd);
    assert_eq!(request.resource, layout.outside.join("key.txt").to_str().unwrap());

    let result = execute("read_file", json!({"path": "../secret/key.txt"}), ToolContext::new(&layout.cwd)).await;
    assert_eq!(result.status, ToolResultStatus::Denied);
    assert!(!result.output.contains("secret\n"));

    let written =
        execute("write_file", json!({"path": "sub/../../escaped.txt", "content": "x"}), ToolContext::new(&layout.cwd))
            .await;
    assert_eq!(written.status, ToolResultStatus::Denied);
    assert!(!layout.cwd.parent().unwrap().join("escaped.txt").exists());

    // `..` that stays inside is fine, and the resource is the normalized path.
    let inside = permission("read_file", &json!({"path": "sub/../inside.txt"}), &layout.cwd);
    assert!(inside.inside_cwd);
    assert_eq!(inside.resource, layout.cwd.join("inside.txt").to_str().unwrap());
}

#[tokio::test]
async fn a_symlink_to_etc_is_outside() {
    let layout = layout();
    symlink("/etc", layout.cwd.join("etc_link")).unwrap();

    for (name, arguments) in [
        ("read_file", json!({"path": "etc_link/passwd"})),
        ("list_dir", json!({"path": "etc_link"})),
        ("search", json!({"pattern": "root", "path": "etc_link"})),
        ("write_file", json!({"path": "etc_link/troupe_test", "content": "x"})),
        ("read_file", json!({"path": "etc_link/../etc/passwd"})),
        ("list_dir", json!({"path": "etc_link/.."})),
    ] {
        let request = permission(name, &arguments, &layout.cwd);
        assert!(!request.inside_cwd, "{name} {arguments}");
        assert!(!request.resource.starts_with(layout.cwd.to_str().unwrap()), "{name} {arguments}");
        let result = execute(name, arguments.clone(), ToolContext::new(&layout.cwd)).await;
        assert_eq!(result.status, ToolResultStatus::Denied, "{name} {arguments}: {}", result.output);
    }
    assert_eq!(permission("read_file", &json!({"path": "etc_link/passwd"}), &layout.cwd).resource, "/etc/passwd");
    assert!(!Path::new("/etc/troupe_test").exists());
}

#[tokio::test]
async fn symlinked_files_and_dangling_links_pointing_out_are_outside() {
    let layout = layout();
    symlink(layout.outside.join("key.txt"), layout.cwd.join("key_link")).unwrap();
    symlink(layout.outside.join("new.txt"), layout.cwd.join("dangling")).unwrap();
    // A relative link target is resolved against the link's directory.
    symlink("../../secret", layout.cwd.join("sub/relative_out")).unwrap();

    for path in ["key_link", "dangling", "sub/relative_out/key.txt"] {
        let request = permission("write_file", &json!({"path": path, "content": "x"}), &layout.cwd);
        assert!(!request.inside_cwd, "{path}");
        let result =
            execute("write_file", json!({"path": path, "content": "pwned"}), ToolContext::new(&layout.cwd)).await;
        assert_eq!(result.status, ToolResultStatus::Denied, "{path}");
    }
    assert_eq!(std::fs::read_to_string(layout.outside.join("key.txt")).unwrap(), "secret");
    assert!(!layout.outside.join("new.txt").exists());

    // A component that does not exist yet cannot hide a link behind `..`.
    let hidden = permission("read_file", &json!({"path": "missing/../key_link"}), &layout.cwd);
    assert!(!hidden.inside_cwd);
}

#[tokio::test]
async fn symlinks_that_stay_inside_are_inside() {
    let layout = layout();
    symlink("inside.txt", layout.cwd.join("alias")).unwrap();
    symlink(layout.cwd.join("sub"), layout.cwd.join("sub_alias")).unwrap();
    let request = permission("read_file", &json!({"path": "alias"}), &layout.cwd);
    assert!(request.inside_cwd);
    assert_eq!(request.resource, layout.cwd.join("inside.txt").to_str().unwrap());

    let read = execute("read_file", json!({"path": "alias"}), ToolContext::new(&layout.cwd)).await;
    assert_eq!(read.output, "inside");
    let written =
        execute("write_file", json!({"path": "sub_alias/new.txt", "content": "n"}), ToolContext::new(&layout.cwd))
            .await;
    assert_eq!(written.status, ToolResultStatus::Ok, "{}", written.output);
    assert_eq!(written.output, "wrote 1 bytes to sub/new.txt (new file, +1)");
}

#[tokio::test]
async fn absolute_paths_through_an_alias_of_the_cwd_are_inside_but_a_symlinked_cwd_is_refused() {
    let layout = layout();
    let alias_root = tempfile::tempdir().unwrap();
    let cwd_alias = alias_root.path().join("cwd_alias");
    symlink(&layout.cwd, &cwd_alias).unwrap();

    // A session's cwd is canonical (`session.create` resolves it); a path through an alias of it is inside.
    let absolute_via_alias = cwd_alias.join("inside.txt");
    let absolute = permission("read_file", &json!({"path": absolute_via_alias.to_str().unwrap()}), &layout.cwd);
    assert!(absolute.inside_cwd);
    assert_eq!(absolute.resource, layout.cwd.join("inside.txt").to_str().unwrap());
    let root = permission("list_dir", &json!({"path": "/"}), &layout.cwd);
    assert!(!root.inside_cwd);

    // A cwd that leads through a symlink is one that was replaced since it was recorded: nothing resolves
    // against it, and the tools refuse it rather than follow it.
    let refused = ToolRegistry::builtin()
        .get("read_file")
        .unwrap()
        .permission(&json!({"path": "inside.txt"}), &cwd_alias)
        .unwrap_err();
    assert!(refused.to_string().contains("was replaced by a symbolic link"), "{refused}");
    let shell = execute("shell", json!({"command": "pwd -P; touch planted"}), ToolContext::new(&cwd_alias)).await;
    assert_eq!(shell.status, ToolResultStatus::Error, "{}", shell.output);
    assert!(shell.output.contains("was replaced by a symbolic link"), "{}", shell.output);
    assert!(!layout.cwd.join("planted").exists());
}

#[tokio::test]
async fn resolution_is_lexical_for_missing_components_and_rejects_loops() {
    let layout = layout();
    let resolved = resolve_path(&layout.cwd, "new/deeper/../file.txt").unwrap();
    assert!(resolved.inside_cwd);
    assert_eq!(resolved.path, layout.cwd.join("new/file.txt"));

    symlink("loop_b", layout.cwd.join("loop_a")).unwrap();
    symlink("loop_a", layout.cwd.join("loop_b")).unwrap();
    let error = resolve_path(&layout.cwd, "loop_a/x").unwrap_err();
    assert!(error.to_string().contains("too many levels of symbolic links"), "{error}");

    assert!(resolve_path(&layout.cwd.join("no_such_cwd"), "x").is_err());
}

#[tokio::test]
async fn a_component_swapped_for_a_symlink_after_permission_is_refused() {
    let layout = layout();
    let arguments = json!({"path": "sub/target.txt", "content": "pwned"});
    let request = permission("write_file", &arguments, &layout.cwd);
    assert!(request.inside_cwd, "judged while sub is a real directory");

    // Between the permission decision and the execution, sub becomes a link to the outside.
    std::fs::remove_dir(layout.cwd.join("sub")).unwrap();
    symlink(&layout.outside, layout.cwd.join("sub")).unwrap();

    let mut context = ToolContext::new(&layout.cwd);
    context.approved_request = Some(request);
    let result = execute("write_file", arguments, context).await;
    assert_eq!(result.status, ToolResultStatus::Denied, "{}", result.output);
    assert!(!layout.outside.join("target.txt").exists());
}

#[tokio::test]
async fn an_approved_outside_path_is_executed_but_only_that_path() {
    let layout = layout();
    let arguments = json!({"path": "../secret/key.txt"});
    let request = permission("read_file", &arguments, &layout.cwd);
    assert!(!request.inside_cwd);

    let mut context = ToolContext::new(&layout.cwd);
    context.approved_request = Some(request.clone());
    let read = execute("read_file", arguments, context).await;
    assert_eq!(read.status, ToolResultStatus::Ok, "{}", read.output);
    assert_eq!(read.output, "secret");

    // The same approval does not cover another outside path.
    std::fs::write(layout.outside.join("other.txt"), "other").unwrap();
    let mut context = ToolContext::new(&layout.cwd);
    context.approved_request = Some(request);
    let other = execute("read_file", json!({"path": "../secret/other.txt"}), context).await;
    assert_eq!(other.status, ToolResultStatus::Denied);

    // Nor are parent directories created outside the cwd for an approved write.
    let arguments = json!({"path": "../secret/newdir/file.txt", "content": "x"});
    let request = permission("write_file", &arguments, &layout.cwd);
    let mut context = ToolContext::new(&layout.cwd);
    context.approved_request = Some(request);
    let written = execute("write_file", arguments, context).await;
    assert_eq!(written.status, ToolResultStatus::Error, "{}", written.output);
    assert!(!layout.outside.join("newdir").exists());
}

/// Paths through a link of `/proc` name what the process following them has (its cwd, its descriptors, its root):
/// resolved in the daemon they would describe the daemon, not the command or the file the tool opens. Refused, in
/// every spelling, whatever they would lead to; `/proc` itself and an ordinary symlink still resolve.
#[tokio::test]
async fn a_path_through_a_link_of_proc_is_refused_not_judged_as_the_daemons() {
    let layout = layout();
    std::fs::write(layout.cwd.join("inside.txt"), "inside").unwrap();
    symlink("/proc/self/root/etc", layout.cwd.join("etc-of-self")).unwrap();
    symlink("/dev/fd", layout.cwd.join("descriptors")).unwrap();
    symlink("/proc/self/cwd", layout.cwd.join("daemon-cwd")).unwrap();
    let own_pid = std::process::id().to_string();
    for path in [
        "/proc/self/cwd/inside.txt".to_owned(),
        "/proc/thread-self/root/etc/hostname".to_owned(),
        "/proc/self/fd/0".to_owned(),
        format!("/proc/{own_pid}/root/etc/hostname"),
        format!("/proc/{own_pid}/cwd"),
        "/proc/self/exe".to_owned(),
        "/dev/fd/1".to_owned(),
        "/dev/stdin".to_owned(),
        "etc-of-self/passwd".to_owned(),
        "descriptors/2".to_owned(),
        "daemon-cwd/inside.txt".to_owned(),
    ] {
        let error = resolve_path(&layout.cwd, &path).expect_err(&path);
        let message = error.to_string();
        assert!(message.contains("a link of /proc whose target depends on the process"), "{path}: {message}");
    }
    // The file tools' permission (and the shell classifier) judge through the same resolution: refused there too.
    let registry = ToolRegistry::builtin();
    let judged = registry.get("read_file").unwrap().permission(&json!({"path": "daemon-cwd/inside.txt"}), &layout.cwd);
    assert!(judged.is_err(), "{judged:?}");
    assert!(resolve_path(&layout.cwd, "/proc/cpuinfo").is_ok());
    symlink("inside.txt", layout.cwd.join("alias.txt")).unwrap();
    assert_eq!(resolve_path(&layout.cwd, "alias.txt").unwrap().path, layout.cwd.join("inside.txt"));
}
