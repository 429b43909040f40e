//! What the sandbox's settings change for a command, over the real wire: shared memory (`/dev/shm`) is written
//! only in `workspace-write`, like the session's directory; `read-only` commands read it and write nothing there.
//! The git directory of a repository holding the session's folder from outside it (a `$HOME` that is a dotfiles
//! repository, a project whose subfolder the session works in) is written only with `[sandbox] enclosing_git_dir =
//! "writable"`, and `troupe sandbox explain` says which.

use serde_json::json;
use troupe_protocol::method;
use troupe_protocol::types::common::Empty;
use troupe_protocol::types::run::ToolResultStatus;
use troupe_protocol::types::runtime::EnclosingGitDir;

use super::support::*;

/// A daemon whose `config.toml` sets `[sandbox] mode`, with the automatic titles off as `TestDaemon` has them.
fn daemon_in_mode(mode: &str) -> TestDaemon {
    let config_toml = format!("[sandbox]\nmode = \"{mode}\"\n");
    TestDaemon::start_with(DaemonSetup { config_toml: Some(config_toml), ..DaemonSetup::default() })
}

/// Writes a file of its own in `/dev/shm` and reads `/dev/shm` back, in a scripted yolo run: the result.
async fn write_shared_memory(daemon: &TestDaemon, name: &str) -> (ToolResultStatus, String) {
    let command = format!("ls /dev/shm > /dev/null && echo listed && echo x > /dev/shm/{name} && echo wrote");
    let script = json!({"turns": [
        {"tool_calls": [{"tool": "shell", "arguments": {"command": command}}]},
        {"text": "done"}
    ]});
    let events = run_script_in_yolo(daemon, daemon.project_path(), script).await;
    let result = tool_results(&events).into_iter().next().expect("the shell call's result");
    (result.status, result.output)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_memory_is_written_only_in_workspace_write() {
    let name = format!("troupe-e2e-{}", std::process::id());
    let path = std::path::Path::new("/dev/shm").join(&name);

    let read_only = daemon_in_mode("read-only");
    let (status, output) = write_shared_memory(&read_only, &name).await;
    assert_eq!(status, ToolResultStatus::Error, "{output}");
    assert!(output.contains("listed") && !output.contains("wrote"), "{output}");
    assert!(!path.exists(), "a read-only command wrote {}", path.display());

    let workspace_write = daemon_in_mode("workspace-write");
    let (status, output) = write_shared_memory(&workspace_write, &name).await;
    let written = std::fs::read_to_string(&path);
    let _ = std::fs::remove_file(&path);
    assert_eq!(status, ToolResultStatus::Ok, "{output}");
    assert!(output.contains("wrote"), "{output}");
    assert_eq!(written.expect("the command's file"), "x\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enclosing_git_dir_is_not_written_by_default_and_sandbox_explain_says_so() {
    let daemon = TestDaemon::start();
    let repository = daemon.project_path().canonicalize().unwrap();
    std::fs::create_dir(repository.join("sub")).unwrap();
    std::fs::write(repository.join("README"), "root").unwrap();
    git(&repository, &["init", "-q"]);
    git(&repository, &["add", "."]);
    git(&repository, &["commit", "-q", "-m", "first"]);
    let config_before = std::fs::read_to_string(repository.join(".git/config")).unwrap();
    let cwd = repository.join("sub");
    // The red team's escape: a config that git runs later, outside the sandbox, in every folder of the repository.
    let script = json!({"turns": [
        {"tool_calls": [{"tool": "shell", "arguments": {"command": "git config core.fsmonitor 'touch /tmp/pwned'"}}]},
        {"tool_calls": [{"tool": "shell", "arguments": {"command": "echo x > ../.git/hooks/post-checkout"}}]},
        {"tool_calls": [{"tool": "shell", "arguments": {"command":
            "echo hi > new.txt && git add new.txt && git -c user.name=t -c user.email=t@example.com commit -qm agent"}}]},
        {"text": "done"}
    ]});
    let events = run_script_in_yolo(&daemon, &cwd, script).await;
    for result in tool_results(&events) {
        assert_eq!(result.status, ToolResultStatus::Error, "{}", result.output);
    }
    assert_eq!(std::fs::read_to_string(repository.join(".git/config")).unwrap(), config_before);
    assert!(!repository.join(".git/hooks/post-checkout").exists());
    assert!(cwd.join("new.txt").exists(), "the session's own folder stays writable");

    let (client, _deliveries) = daemon.client().await;
    let snapshot = within("snapshot", client.call::<method::RuntimeSnapshotGet>(Empty {})).await.unwrap().snapshot;
    assert_eq!(snapshot.sandbox.expect("the sandbox").enclosing_git_dir, EnclosingGitDir::ReadOnly);
    let session = create_session_in(&client, &cwd).await;
    let output = std::process::Command::new(troupe_binary())
        .args(["sandbox", "explain", &session.session_id, "--url", &daemon.url()])
        .env("TROUPE_TOKEN", &daemon.token)
        .output()
        .expect("troupe sandbox explain");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text} {}", String::from_utf8_lossy(&output.stderr));
    assert!(text.contains("commands may not write that git directory"), "{text}");
    assert!(text.contains("enclosing_git_dir = \"writable\""), "{text}");
}
