//! The edges of the tools' boundary, through the real daemon: a session whose folder another session replaces
//! with a symlink, and a tool stuck on a FIFO that a cancellation must still end.

use serde_json::json;
use troupe_protocol::client::ClientError;
use troupe_protocol::method;
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::run::{RunIdParams, RunStartParams, ToolResultStatus};
use troupe_protocol::types::session::PermissionMode;

use super::support::*;

/// Session A works in `project`, session B in `project/pkg`. While B's run waits in its first command, A replaces
/// `pkg` with a symlink to a victim folder. B's next shell command and `write_file` must not run or write there;
/// each is refused, and B's next `run.start` is refused with `session_cwd_unusable`.
#[tokio::test]
async fn a_session_cannot_lead_another_sessions_tools_out_through_a_swapped_folder() {
    let daemon = TestDaemon::start();
    let project = tempfile::tempdir().expect("project");
    let project = project.path().canonicalize().expect("canonical project");
    let pkg = project.join("pkg");
    std::fs::create_dir(&pkg).expect("pkg");
    let victim = tempfile::tempdir().expect("victim");
    let victim_path = victim.path().canonicalize().expect("canonical victim");
    let pkg_text = pkg.display().to_string();
    let wait_for_swap = format!("for i in $(seq 400); do [ -L '{pkg_text}' ] && break; sleep 0.05; done; echo waited");
    let swap = format!("rm -rf pkg && ln -s '{}' pkg && echo swapped", victim_path.display());
    let script = json!({
        "turns": [{"text": "x"}],
        "by_input": {
            "swap": {"turns": [
                {"tool_calls": [{"tool": "shell", "arguments": {"command": swap}}]},
                {"text": "done"}
            ]},
            "plant": {"turns": [
                {"tool_calls": [{"tool": "shell", "arguments": {"command": wait_for_swap}}]},
                {"tool_calls": [{"tool": "shell", "arguments": {"command": "pwd -P; echo evil > planted-by-shell"}}]},
                {"tool_calls": [{"tool": "write_file", "arguments": {"path": "planted-by-write_file", "content": "evil"}}]},
                {"tool_calls": [{"tool": "list_dir", "arguments": {}}]},
                {"text": "done"}
            ]}
        }
    });
    let (client_b, mut deliveries_b) = daemon.client().await;
    connect_script(&client_b, daemon.data_path(), script).await;
    let session_b = create_session_in(&client_b, &pkg).await;
    set_mode(&client_b, &session_b.session_id, PermissionMode::Yolo).await;
    client_b.subscribe(&session_b.session_id, None).await.expect("subscribe B");
    let (client_a, mut deliveries_a) = daemon.client().await;
    let session_a = create_session_in(&client_a, &project).await;
    set_mode(&client_a, &session_a.session_id, PermissionMode::Yolo).await;
    client_a.subscribe(&session_a.session_id, None).await.expect("subscribe A");

    start_run(&client_b, &session_b.session_id, selection_of("default", "local/scripted"), "plant").await;
    events_until(&mut deliveries_b, |event| matches!(event.payload, EventPayload::ToolCallStarted { .. })).await;
    start_run(&client_a, &session_a.session_id, selection_of("default", "local/scripted"), "swap").await;
    let swapped = tool_results(&events_until(&mut deliveries_a, is_terminal).await);
    assert!(swapped[0].output.contains("swapped"), "A swapped B's folder: {swapped:?}");
    assert!(std::fs::symlink_metadata(&pkg).expect("pkg").is_symlink());

    let results = tool_results(&events_until(&mut deliveries_b, is_terminal).await);
    assert_eq!(results.len(), 4, "{results:?}");
    for (index, result) in results.iter().enumerate().skip(1) {
        assert_eq!(result.status, ToolResultStatus::Error, "call {index}: {}", result.output);
        assert!(result.output.contains("was replaced by a symbolic link"), "call {index}: {}", result.output);
    }
    let planted: Vec<_> = std::fs::read_dir(&victim_path).expect("victim").collect();
    assert!(planted.is_empty(), "nothing was written in the folder the link leads to: {planted:?}");

    let refused = within(
        "run.start",
        client_b.call::<method::RunStart>(RunStartParams {
            session_id: session_b.session_id.clone(),
            client_run_id: troupe_runtime::clock::new_id(),
            selection: selection_of("default", "local/scripted"),
            input: "plant".to_owned(),
            reset_fallback: false,
            attachments: Vec::new(),
        }),
    )
    .await;
    let Err(ClientError::Rpc(refused)) = refused else { panic!("run.start in a swapped folder: {refused:?}") };
    assert_eq!((refused.code, refused.typed_code()), (-32000, Some("session_cwd_unusable")));
    let data = refused.data.as_ref().expect("data");
    assert_eq!(data["cwd"], pkg_text.as_str());
    let detail = data["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("was replaced by a symbolic link") && detail.contains("new session"), "{detail}");
    assert!(std::fs::read_dir(&victim_path).expect("victim").next().is_none());
}

fn make_fifo(path: &std::path::Path) {
    let text = std::ffi::CString::new(path.to_str().expect("utf-8 path")).expect("no NUL");
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(text.as_ptr(), 0o644) }, 0, "mkfifo {}", path.display());
}

/// Opens `fifo` for writing without blocking and closes it: a reader blocked in `open` goes on.
fn release_reader(fifo: &std::path::Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(fifo);
}

/// A command makes a project's `sub/.gitignore` a FIFO; `search` then skips that folder (and says so) instead of
/// blocking in `open` for good, and the run ends.
#[tokio::test]
async fn a_fifo_gitignore_made_by_a_command_does_not_stop_search() {
    let daemon = TestDaemon::start();
    let project = tempfile::tempdir().expect("project");
    std::fs::create_dir(project.path().join("sub")).expect("sub");
    std::fs::write(project.path().join("sub/a.txt"), "hello\n").expect("a.txt");
    std::fs::write(project.path().join("b.txt"), "hello\n").expect("b.txt");
    let script = json!({"turns": [
        {"tool_calls": [{"tool": "shell", "arguments": {"command": "mkfifo sub/.gitignore"}}]},
        {"tool_calls": [{"tool": "search", "arguments": {"pattern": "hello"}}]},
        {"text": "done"}
    ]});
    let fifo = project.path().join("sub/.gitignore");
    let events = run_script_in_yolo(&daemon, project.path(), script).await;
    release_reader(&fifo);
    assert!(matches!(events.last().map(|event| &event.payload), Some(EventPayload::RunCompleted { .. })));
    let results = tool_results(&events);
    assert_eq!(results[1].status, ToolResultStatus::Ok, "{}", results[1].output);
    assert_eq!(
        results[1].output,
        "b.txt:1: hello\n[skipped sub: its .gitignore is not a regular file, and reading it would block]"
    );
}

/// A tool whose blocking work never returns (here `search`: the `ignore` crate opens the daemon user's
/// `~/.gitconfig` with a blocking open, and it is a FIFO) does not keep a cancelled run alive: the run ends as
/// cancelled with the call `cancelled`, and the session takes the next run.
#[tokio::test]
async fn cancelling_a_run_ends_it_even_when_its_tool_is_stuck() {
    let data_dir = tempfile::tempdir().expect("data dir");
    let home = tempfile::tempdir().expect("home");
    let project = tempfile::tempdir().expect("project");
    std::fs::write(project.path().join("a.txt"), "hello\n").expect("a.txt");
    let xdg = home.path().join("xdg");
    std::fs::create_dir_all(&xdg).expect("xdg");
    let fifo = home.path().join(".gitconfig");
    make_fifo(&fifo);
    let daemon = troupe_serve(data_dir.path())
        .listen("127.0.0.1:0")
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", &xdg)
        .env_remove("GIT_CONFIG_GLOBAL")
        .spawn();

    let (client, mut deliveries) = daemon.client().await;
    let script = json!({"turns": [
        {"tool_calls": [{"tool": "search", "arguments": {"pattern": "hello"}}]},
        {"text": "done"}
    ]});
    connect_script(&client, data_dir.path(), script).await;
    let session = create_session_in(&client, project.path()).await;
    set_mode(&client, &session.session_id, PermissionMode::Yolo).await;
    client.subscribe(&session.session_id, None).await.expect("subscribe");
    let run_id = start_run(&client, &session.session_id, selection_of("default", "local/scripted"), "go").await;
    events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::ToolCallStarted { .. })).await;
    within("run.cancel", client.call::<method::RunCancel>(RunIdParams { run_id })).await.expect("cancel");
    let events = events_until(&mut deliveries, is_terminal).await;
    let ended = events.last().map(|event| event.payload.clone());
    // The daemon's blocked thread is let go either way, so that stopping it does not wait on it.
    release_reader(&fifo);
    assert!(matches!(ended, Some(EventPayload::RunCancelled { .. })), "{ended:?}");
    let results = tool_results(&events);
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0].status, ToolResultStatus::Cancelled, "{}", results[0].output);
    // Abandoned by the run, not ended by the search's own check of the cancellation: it was stuck.
    assert!(results[0].output.contains("was abandoned"), "{}", results[0].output);

    let next = run_in_subscribed(&client, &mut deliveries, &session.session_id, "local/echo", "again").await;
    assert!(matches!(next.last().map(|event| &event.payload), Some(EventPayload::RunCompleted { .. })));
}
