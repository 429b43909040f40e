//! Changes you see before and can take back (troupe extensions `session.diff`, `session.undo`, and
//! `ApprovalOperation.diff`), over the real wire and the real `troupe` binary: a write's approval carries the real
//! diff of what it would do; `troupe diff` prints a run's changes; `troupe undo` puts the files back byte for byte
//! (a file the run created is removed, a binary file comes back whole), after a daemon restart too; a second undo
//! of the same run finds nothing to undo; a file changed since the run refuses the undo unless `--force`; and no
//! undo happens while a run is active.

use std::path::Path;

use serde_json::{Value, json};
use troupe_protocol::client::{Client, ClientError, Deliveries};
use troupe_protocol::method;
use troupe_protocol::types::changes::{FileChangeKind, SessionUndoParams};
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::session::PermissionMode;

use super::cli_support::troupe;
use super::support::*;

/// Bytes that are not UTF-8 (and hold a NUL): a write over them must give them back whole.
const BINARY: &[u8] = &[0x00, 0x9f, 0x92, 0x96, 0xff, b'\n', 0x01];

fn write(path: &str, content: &str) -> Value {
    json!({"tool": "write_file", "arguments": {"path": path, "content": content}})
}

fn edit(path: &str, old: &str, new: &str) -> Value {
    json!({"tool": "edit_file", "arguments": {"path": path, "old_string": old, "new_string": new}})
}

/// A script of one run making `calls` one turn each, then answering "done".
fn script(calls: Vec<Value>) -> Value {
    let mut turns: Vec<Value> = calls.into_iter().map(|call| json!({"tool_calls": [call]})).collect();
    turns.push(json!({"text": "done"}));
    json!({"turns": turns})
}

/// Starts a scripted run in a subscribed session and returns its events to its end.
async fn run_to_end(client: &Client, deliveries: &mut Deliveries, session_id: &str) -> (String, Vec<StoredEvent>) {
    let run_id = start_run(client, session_id, selection_of("default", "local/scripted"), "change things").await;
    let events = events_until(deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    assert!(
        matches!(events.last().map(|event| &event.payload), Some(EventPayload::RunCompleted { .. })),
        "{events:#?}"
    );
    (run_id, events)
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

#[tokio::test]
async fn a_writes_approval_carries_its_diff_and_undo_puts_every_file_back_byte_for_byte_after_a_restart() {
    let project = tempfile::tempdir().expect("project");
    let cwd = project.path().canonicalize().expect("cwd");
    std::fs::write(cwd.join("two.txt"), "one\ntwo\n").expect("two.txt");
    std::fs::write(cwd.join("blob.bin"), BINARY).expect("blob.bin");
    std::fs::write(cwd.join("code.rs"), "fn a() {}\nfn b() {}\n").expect("code.rs");
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    connect_script(
        &client,
        daemon.data_path(),
        script(vec![
            write("two.txt", "three\n"),
            write("blob.bin", "text now\n"),
            write("sub/new.txt", "fresh\n"),
            edit("code.rs", "fn b() {}", "fn c() {}"),
        ]),
    )
    .await;
    let session_id = create_session_in(&client, &cwd).await.session_id;
    set_mode(&client, &session_id, PermissionMode::Ask).await;
    within("subscribe", client.subscribe(&session_id, None)).await.expect("subscribe");
    let run_id = start_run(&client, &session_id, selection_of("default", "local/scripted"), "change things").await;

    // The overwrite of a 2-line file by one line is asked with its real diff: -2 +1.
    let asked =
        events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::ApprovalRequested { .. })).await;
    let Some(EventPayload::ApprovalRequested { approval }) = asked.last().map(|event| &event.payload) else {
        unreachable!("events_until stops at approval_requested")
    };
    let diff = approval.operation.diff.clone().expect("the approval carries a diff");
    assert_eq!(
        (diff.kind, diff.lines_added, diff.lines_removed, diff.path.as_str()),
        (FileChangeKind::Modified, 1, 2, cwd.join("two.txt").to_str().expect("utf-8"))
    );
    let unified = diff.unified.expect("text");
    assert!(unified.ends_with("@@ -1,2 +1 @@\n-one\n-two\n+three\n"), "{unified}");
    // On the wire, as a client reads it.
    let listed = troupe(&daemon, &["approvals", &session_id]).await.ok();
    assert!(listed.contains("change: +1 -2") && listed.contains("  -two\n"), "{listed}");
    set_mode(&client, &session_id, PermissionMode::Yolo).await;
    approve_once(&client, approval).await;
    let events = events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event));
    let results = tool_results(&events.await);
    assert_eq!(results.len(), 4, "{results:#?}");
    assert_eq!(results[0].output, "wrote 6 bytes to two.txt (+1 -2)");
    assert!(results[0].display.as_deref().is_some_and(|display| display.contains("-one\n-two\n+three")));
    assert_eq!(results[1].output, "wrote 9 bytes to blob.bin (binary, 7 → 9 bytes)");
    assert_eq!(results[2].output, "wrote 6 bytes to sub/new.txt (new file, +1)");
    assert_eq!(results[3].output, "replaced 1 occurrence in code.rs (+1 -1)");

    // `troupe diff` prints the run as a unified diff, from before the run to after it.
    let printed = troupe(&daemon, &["diff", &session_id]).await;
    assert!(printed.stderr.contains(&format!("run {run_id}: 4 files changed")), "{printed:?}");
    assert!(printed.stdout.contains("-fn b() {}\n+fn c() {}\n"), "{printed:?}");
    assert!(printed.stdout.contains("--- /dev/null\n+++ b") && printed.stdout.contains("+fresh\n"), "{printed:?}");
    assert!(printed.stderr.contains("blob.bin: binary, 7 → 9 bytes"), "{printed:?}");
    drop(deliveries);
    client.close().await;

    // The records survive a restart.
    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(daemon.stop()), ..DaemonSetup::default() });
    let (client, mut deliveries) = daemon.client().await;
    within("subscribe", client.subscribe(&session_id, None)).await.expect("subscribe");
    let undone = troupe(&daemon, &["undo", &session_id[..8]]).await.ok();
    assert!(undone.contains(&format!("undid run {run_id}")), "{undone}");
    assert!(undone.contains("sub/new.txt: removed (the run created it)"), "{undone}");
    assert_eq!(read(&cwd.join("two.txt")), b"one\ntwo\n");
    assert_eq!(read(&cwd.join("blob.bin")), BINARY);
    assert_eq!(read(&cwd.join("code.rs")), b"fn a() {}\nfn b() {}\n");
    assert!(!cwd.join("sub/new.txt").exists());
    // Every client of the session sees the undo.
    let seen =
        events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::RunChangesUndone { .. })).await;
    let Some(EventPayload::RunChangesUndone { undone_run_id, files, forced }) = seen.last().map(|e| e.payload.clone())
    else {
        unreachable!("events_until stops at run_changes_undone")
    };
    assert_eq!((undone_run_id, files.len(), forced), (run_id.clone(), 4, false));

    let again = troupe(&daemon, &["undo", &session_id, "--run", &run_id[..12]]).await.refused();
    assert!(again.contains("were undone already; there is nothing to undo"), "{again}");
    let again = troupe(&daemon, &["undo", &session_id]).await.refused();
    assert!(again.contains("there is nothing to undo"), "{again}");
    let diffed = troupe(&daemon, &["diff", &session_id]).await;
    assert!(diffed.stderr.contains("4 files changed by its file tools, undone since"), "{diffed:?}");
}

#[tokio::test]
async fn a_file_changed_since_the_run_refuses_the_undo_unless_forced_and_no_undo_runs_beside_a_run() {
    let project = tempfile::tempdir().expect("project");
    let cwd = project.path().canonicalize().expect("cwd");
    std::fs::write(cwd.join("a.txt"), "v0\n").expect("a.txt");
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    connect_script(&client, daemon.data_path(), script(vec![write("a.txt", "v1\n"), write("b.txt", "new\n")])).await;
    let session_id = create_session_in(&client, &cwd).await.session_id;
    set_mode(&client, &session_id, PermissionMode::Yolo).await;
    within("subscribe", client.subscribe(&session_id, None)).await.expect("subscribe");
    run_to_end(&client, &mut deliveries, &session_id).await;

    std::fs::write(cwd.join("a.txt"), "mine\n").expect("a.txt changed by hand");
    let refused = troupe(&daemon, &["undo", &session_id]).await.refused();
    assert!(refused.contains("a.txt: changed since the run") && refused.contains("--force"), "{refused}");
    assert_eq!(read(&cwd.join("a.txt")), b"mine\n", "nothing was undone");
    assert_eq!(read(&cwd.join("b.txt")), b"new\n", "nothing was undone");
    // The refusal is typed on the wire, listing the file.
    let params = SessionUndoParams { session_id: session_id.clone(), run_id: None, force: false };
    let Err(ClientError::Rpc(error)) = within("session.undo", client.call::<method::SessionUndo>(params)).await else {
        panic!("the undo is refused")
    };
    assert_eq!(error.typed_code(), Some("undo_conflict"));
    let files = &error.data.as_ref().expect("data")["files"];
    assert_eq!(files, &json!([{"path": cwd.join("a.txt"), "reason": "changed_since"}]));

    let forced = troupe(&daemon, &["undo", &session_id, "--force"]).await.ok();
    assert!(forced.contains("a.txt: restored"), "{forced}");
    assert_eq!(read(&cwd.join("a.txt")), b"v0\n");
    assert!(!cwd.join("b.txt").exists());

    // While a run is active, an undo is refused with `session_busy`.
    let waiting = run_waiting_for_approval(&daemon, &client, &mut deliveries).await;
    let params = SessionUndoParams { session_id: waiting.session_id.clone(), run_id: None, force: false };
    let Err(ClientError::Rpc(error)) = within("session.undo", client.call::<method::SessionUndo>(params)).await else {
        panic!("the undo is refused")
    };
    assert_eq!(error.typed_code(), Some("session_busy"));
}

#[tokio::test]
async fn troupe_diff_lists_the_sessions_runs_that_changed_files_and_names_them_as_git_diff_does() {
    let project = tempfile::tempdir().expect("project");
    let cwd = project.path().canonicalize().expect("cwd");
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    // Turn n answers a history with n assistant messages: the second run plays the third and fourth turns.
    let turns = json!({"turns": [
        {"tool_calls": [write("first.txt", "one\n")]}, {"text": "done"},
        {"tool_calls": [write("src/second.txt", "two\n")]}, {"text": "done"},
    ]});
    connect_script(&client, daemon.data_path(), turns).await;
    let session_id = create_session_in(&client, &cwd).await.session_id;
    set_mode(&client, &session_id, PermissionMode::Yolo).await;
    within("subscribe", client.subscribe(&session_id, None)).await.expect("subscribe");
    let (first, _) = run_to_end(&client, &mut deliveries, &session_id).await;
    let (second, _) = run_to_end(&client, &mut deliveries, &session_id).await;
    troupe(&daemon, &["undo", &session_id]).await.ok();

    let printed = troupe(&daemon, &["diff", &session_id, "--run", &first]).await;
    assert!(printed.succeeded(), "{printed:?}");
    // Relative to the session's folder, so `git apply` there takes it.
    assert!(printed.stdout.starts_with("--- /dev/null\n+++ b/first.txt\n"), "{printed:?}");
    let listed = printed.stderr;
    assert!(listed.contains(&format!("troupe diff {session_id} --run RUN")), "{listed}");
    assert!(listed.contains(&format!("* {first}  1 file by file tools\n")), "{listed}");
    assert!(listed.contains(&format!("  {second}  1 file by file tools, undone")), "{listed}");
}
