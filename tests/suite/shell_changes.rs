//! What shell commands changed, shown afterwards (`session.diff`'s `shell`, `troupe diff`): in a git repository a
//! run's commands' changes are the work tree before its first command against after its last, over the real wire
//! and the real binary, with the user's repository (its index, its objects) untouched, ignored files and the
//! sandbox's denied files left out, and `troupe undo` saying that it cannot take them back.

use serde_json::{Value, json};
use troupe_protocol::client::ClientError;
use troupe_protocol::method;
use troupe_protocol::types::changes::{FileChangeKind, SessionDiffParams, SessionUndoParams};
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::session::PermissionMode;

use super::cli_support::troupe;
use super::support::*;

fn shell(command: &str) -> Value {
    json!({"tool": "shell", "arguments": {"command": command}})
}

#[tokio::test]
async fn a_runs_shell_changes_in_a_git_repository_are_shown_as_its_diff_and_not_undone() {
    let project = tempfile::tempdir().expect("project");
    let cwd = project.path().canonicalize().expect("cwd");
    git(&cwd, &["init", "-q"]);
    std::fs::write(cwd.join("a.txt"), "one\ntwo\n").expect("a.txt");
    std::fs::write(cwd.join(".gitignore"), "target/\n").expect(".gitignore");
    git(&cwd, &["add", "."]);
    git(&cwd, &["commit", "-qm", "first"]);
    let objects_before = git(&cwd, &["count-objects"]);
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    let script = json!({"turns": [
        {"tool_calls": [shell("printf 'one\\n' > a.txt && mkdir -p src && echo draft > src/draft.txt")]},
        {"tool_calls": [shell("rm src/draft.txt && echo 'fn main() {}' > src/main.rs && mkdir -p target && echo o > target/out")]},
        {"text": "done"},
    ]});
    connect_script(&client, daemon.data_path(), script).await;
    let session_id = create_session_in(&client, &cwd).await.session_id;
    set_mode(&client, &session_id, PermissionMode::Yolo).await;
    within("subscribe", client.subscribe(&session_id, None)).await.expect("subscribe");
    let run_id = start_run(&client, &session_id, selection_of("default", "local/scripted"), "change things").await;
    let events =
        events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    assert!(
        matches!(events.last().map(|event| &event.payload), Some(EventPayload::RunCompleted { .. })),
        "{events:#?}"
    );

    let params = SessionDiffParams { session_id: session_id.clone(), run_id: None };
    let diff = within("session.diff", client.call::<method::SessionDiff>(params)).await.expect("session.diff");
    assert_eq!(diff.run_id.as_deref(), Some(run_id.as_str()));
    assert!(diff.files.is_empty(), "no file tool ran: {diff:?}");
    assert_eq!(diff.runs.len(), 1);
    assert!(diff.runs[0].shell && diff.runs[0].files == 0, "{:?}", diff.runs);
    let shell = diff.shell.expect("the shell commands' changes");
    assert_eq!(shell.repository, cwd.to_string_lossy());
    let files: Vec<(String, FileChangeKind)> = shell.files.iter().map(|file| (file.path.clone(), file.kind)).collect();
    let path = |name: &str| cwd.join(name).to_string_lossy().into_owned();
    // The draft made and removed within the run is not a change of the run; the ignored build output is not.
    assert_eq!(files, vec![(path("a.txt"), FileChangeKind::Modified), (path("src/main.rs"), FileChangeKind::Created)]);
    assert_eq!((shell.files[0].lines_added, shell.files[0].lines_removed), (0, 1));

    // The CLI prints it as a unified diff that says where it comes from.
    let printed = troupe(&daemon, &["diff", &session_id]).await;
    assert!(printed.succeeded(), "{printed:?}");
    let printed = format!("{}{}", printed.stderr, printed.stdout);
    // Named as `git diff` in the session's folder names them, so the text applies there.
    assert!(printed.contains("--- /dev/null\n+++ b/src/main.rs\n") && printed.contains("-two"), "{printed}");
    assert!(printed.contains("while its shell commands ran"), "{printed}");

    // Undo cannot take these back, and says so.
    let params = SessionUndoParams { session_id: session_id.clone(), run_id: Some(run_id.clone()), force: false };
    let Err(ClientError::Rpc(error)) = within("session.undo", client.call::<method::SessionUndo>(params)).await else {
        panic!("the undo is refused")
    };
    assert_eq!(error.typed_code(), Some("run_changed_no_files"));
    let detail = error.data.as_ref().and_then(|data| data["detail"].as_str()).unwrap_or_default().to_owned();
    assert!(detail.contains("shell commands") && detail.contains("troupe diff"), "{detail}");

    // The user's repository: nothing staged, no object of ours in it.
    assert_eq!(git(&cwd, &["diff", "--cached", "--name-only"]), "");
    assert_eq!(git(&cwd, &["count-objects"]), objects_before, "the first commit's objects only");
}
