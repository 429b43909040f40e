//! Durability: damaged logs load best-effort and say what they skipped; SIGTERM shuts down gracefully; one
//! daemon per data directory. (SIGKILL under load: `sigkill_trials`.)

use serde_json::json;
use troupe_protocol::method;
use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::session::{SessionRenameParams, TitleChange};

use super::support::*;

#[tokio::test]
async fn a_corrupted_middle_line_and_a_torn_last_line_are_reported_and_repaired() {
    let data_dir = tempfile::tempdir().unwrap();
    let session_id = "01900000-0000-7000-8000-00000000000a";
    let event = |seq: u64, payload: serde_json::Value| {
        json!({"session_id": session_id, "run_id": null, "seq": seq, "timestamp": "2026-01-01T00:00:00.000Z", "payload": payload})
            .to_string()
    };
    let title = |seq: u64, title: &str| {
        event(
            seq,
            json!({"type": "session_title_committed", "title": title, "change": "set", "client_rename_id": format!("r{seq}")}),
        )
    };
    let created = session_created_line(session_id, json!({"type": "root"}));
    // A damaged middle line: valid JSON with a readable seq, but not a valid event.
    let damaged =
        json!({"session_id": session_id, "seq": 3, "payload": {"type": "session_title_committed", "title": 3}});
    // A torn, unterminated last line.
    let torn = title(5, "five")[..40].to_owned();
    let log = [created, title(2, "two"), damaged.to_string(), title(4, "four"), torn].join("\n");
    write_session_log(data_dir.path(), session_id, &[log]);

    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..DaemonSetup::default() });
    let (client, _deliveries) = daemon.client().await;
    let meta =
        client.call::<method::SessionGet>(SessionIdParams { session_id: session_id.into() }).await.unwrap().session;
    assert_eq!(meta.title.as_deref(), Some("four"));
    assert_eq!(meta.last_event_seq, 4);
    assert_eq!(meta.skipped_events.len(), 2, "{:?}", meta.skipped_events);
    assert_eq!(meta.skipped_events[0].seq, Some(3));
    assert!(meta.skipped_events[1].reason.contains("torn"), "{:?}", meta.skipped_events[1]);
    assert_eq!(meta.skipped_events[1].line, Some(5));
    for skipped in &meta.skipped_events {
        assert!(
            !skipped.reason.contains("title_committed") && !skipped.reason.contains("five"),
            "reasons never echo content"
        );
    }

    // The next append truncates the torn tail first, so the log is clean afterwards.
    let renamed = client
        .call::<method::SessionRename>(SessionRenameParams {
            session_id: session_id.into(),
            client_rename_id: "after".into(),
            change: TitleChange::Set { title: "after".into() },
        })
        .await
        .unwrap();
    assert_eq!(renamed.session.title_updated_seq, Some(5));
    let data_dir = {
        drop(client);
        daemon.stop()
    };
    let contents =
        std::fs::read_to_string(data_dir.path().join("sessions").join(session_id).join("events.jsonl")).unwrap();
    assert!(contents.ends_with('\n'));
    let lines: Vec<&str> = contents.lines().collect();
    assert_eq!(lines.len(), 5, "created, two, damaged three, four, and the new five");
    assert!(lines[4].contains(r#""client_rename_id":"after""#));

    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..DaemonSetup::default() });
    let (client, _deliveries) = daemon.client().await;
    let meta =
        client.call::<method::SessionGet>(SessionIdParams { session_id: session_id.into() }).await.unwrap().session;
    assert_eq!(
        meta.skipped_events.iter().map(|s| s.seq).collect::<Vec<_>>(),
        [Some(3)],
        "only the damaged middle line remains"
    );
    assert_eq!(meta.title.as_deref(), Some("after"));
}

#[tokio::test]
async fn sigterm_closes_sockets_with_1001_and_exits_cleanly() {
    let data_dir = tempfile::tempdir().unwrap();
    let mut daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let mut socket = RawSocket::connect(&daemon.url, &daemon.token).await;
    socket.handshake().await;
    let status = tokio::task::spawn_blocking(move || {
        let status = daemon.terminate();
        (daemon, status)
    });
    assert_eq!(socket.close_code().await, Some(1001));
    let (_daemon, status) = within("exit", status).await.unwrap();
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
async fn a_second_daemon_on_the_same_data_directory_refuses_to_start() {
    let data_dir = tempfile::tempdir().unwrap();
    let _first = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let output = std::process::Command::new(troupe_binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("another troupe daemon"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_log_cannot_be_loaded_is_retried_by_the_next_request_not_stranded() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        hibernate_after: Some(std::time::Duration::from_millis(50)),
        ..DaemonSetup::default()
    });
    let (client, _deliveries) = daemon.client().await;
    let session = daemon.create_session(&client).await;
    set_title(&client, &session.session_id, "first", "before").await.unwrap();
    eventually("the session hibernates", || !daemon.engine().is_live(&session.session_id)).await;

    // The log cannot be opened now (a directory stands where it was): loading fails with a typed error.
    let log = daemon.data_path().join("sessions").join(&session.session_id).join("events.jsonl");
    let moved = log.with_extension("jsonl.away");
    std::fs::rename(&log, &moved).unwrap();
    std::fs::create_dir(&log).unwrap();
    let failed = set_title(&client, &session.session_id, "second", "during").await;
    let error = failed.expect_err("the log cannot be loaded");
    assert!(
        error.to_string().contains("events.jsonl") || error.to_string().to_lowercase().contains("storage"),
        "{error}"
    );

    // Put back, the session works again at the next request: no restart needed, nothing stranded.
    std::fs::remove_dir(&log).unwrap();
    std::fs::rename(&moved, &log).unwrap();
    let renamed = eventually_some("the session loads again", WAIT, || async {
        let rename_id = format!("third-{}", troupe_runtime::clock::new_id());
        set_title(&client, &session.session_id, &rename_id, "after").await.ok()
    })
    .await;
    assert_eq!(renamed.session.title.as_deref(), Some("after"));
}
