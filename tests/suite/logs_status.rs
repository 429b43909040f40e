//! Observability over the real wire: the daemon's JSON log lines carry the connection, request and run they
//! belong to (`troupe serve --log-format json`), and `daemon.status` / `troupe status` say what it is doing now.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use troupe_protocol::client::ClientProtocol;
use troupe_protocol::method;

use super::cli_support::troupe;
use super::support::*;

/// `troupe serve` as a child with its stderr collected line by line ([`ChildDaemon::log_lines`]).
fn logged_daemon(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> ChildDaemon {
    std::fs::write(data_dir.join("config.toml"), "[titles]\nauto = false\n").expect("write config");
    let mut command = troupe_serve(data_dir)
        .listen("127.0.0.1:0")
        .args(extra.iter().copied())
        .rust_log("info,troupe_protocol=debug")
        .log(DaemonLog::Lines);
    for (name, value) in env {
        command = command.env(*name, *value);
    }
    command.spawn()
}

/// The span named `name` among a JSON log line's `spans`.
fn span<'a>(line: &'a Value, name: &str) -> Option<&'a Value> {
    line["spans"].as_array()?.iter().find(|span| span["name"] == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_log_lines_carry_the_connection_the_request_and_the_run() {
    let data_dir = tempfile::tempdir().expect("data dir");
    let project = tempfile::tempdir().expect("project");
    let daemon = logged_daemon(data_dir.path(), &["--log-format", "json"], &[]);
    let (client, mut deliveries) = within(
        "connect",
        troupe_protocol::client::Client::connect_websocket(&daemon.url, &daemon.token, Default::default()),
    )
    .await
    .expect("client connects");
    let session = create_session_in(&client, project.path()).await;
    within("subscribe", client.subscribe(&session.session_id, None)).await.expect("subscribe");
    let run_id = start_run(&client, &session.session_id, echo_selection(), "hello").await;
    events_until(&mut deliveries, is_terminal).await;

    let session_id = session.session_id.as_str();
    let found = |lines: &[Value]| {
        let request = lines.iter().any(|line| {
            span(line, "request").is_some_and(|span| span["method"] == "run.start" && span["session_id"] == session_id)
                && span(line, "connection").is_some_and(|span| span["connection_id"].is_u64())
        });
        let run = lines.iter().any(|line| {
            line["span"]["name"] == "run"
                && line["span"]["run_id"] == run_id.as_str()
                && line["span"]["session_id"] == session_id
        });
        request && run
    };
    let parsed = || -> Vec<Value> {
        daemon
            .log_lines()
            .iter()
            .filter(|line| !line.trim().is_empty())
            .map(|line| serde_json::from_str(line).unwrap_or_else(|error| panic!("not JSON ({error}): {line}")))
            .collect()
    };
    eventually("the request and run lines in the JSON log", || found(&parsed())).await;
    let lines = parsed();
    for line in &lines {
        for key in ["timestamp", "level", "target", "fields"] {
            assert!(line.get(key).is_some(), "{key} missing from {line}");
        }
    }
    let connection = lines.iter().find_map(|line| span(line, "connection")).expect("a connection span");
    assert!(
        connection["client"].as_str().is_some_and(|client| client.starts_with("127.0.0.1:")),
        "the socket peer, not a forwarded address (trust_proxy is off): {connection}"
    );
    let run_started = lines.iter().find(|line| line["fields"]["message"] == "run started").expect("run started");
    assert_eq!(run_started["span"]["run_id"], json!(run_id));
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_format_comes_from_the_environment_too_and_text_stays_the_default() {
    let data_dir = tempfile::tempdir().expect("data dir");
    let json = logged_daemon(data_dir.path(), &[], &[("TROUPE_LOG_FORMAT", "json")]);
    eventually("a JSON log line", || {
        json.log_lines()
            .iter()
            .any(|line| serde_json::from_str::<Value>(line).is_ok_and(|value| value["level"] == "INFO"))
    })
    .await;
    drop(json);
    let text = logged_daemon(data_dir.path(), &[], &[]);
    eventually("the text log's config line", || text.log_lines().iter().any(|line| line.contains("config loaded")))
        .await;
    assert!(text.log_lines().iter().all(|line| serde_json::from_str::<Value>(line).is_err()), "{:?}", text.log_lines());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemon_status_counts_connections_sessions_runs_and_pending_approvals() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        hibernate_after: Some(Duration::from_millis(300)),
        ..DaemonSetup::default()
    });
    let (client, mut deliveries) = daemon.client().await;
    let status = within("daemon.status", client.daemon_status(Default::default())).await.expect("daemon.status");
    assert_eq!(status.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(status.listen, daemon.addr.to_string());
    assert_eq!(status.data_dir.as_deref(), Some(daemon.data_path().to_str().unwrap()));
    assert_eq!(status.connections, 1);
    assert_eq!((status.runs_active, status.approvals_pending), (0, 0));
    assert!(status.started_at.ends_with('Z'), "{}", status.started_at);

    connect_script(&client, daemon.data_path(), write_file_script()).await;
    let idle = daemon.create_session(&client).await;
    let WaitingRun { run_id, .. } = run_waiting_for_approval(&daemon, &client, &mut deliveries).await;

    let (second, _second_deliveries) = daemon.client().await;
    let status = within("daemon.status", second.daemon_status(Default::default())).await.expect("daemon.status");
    assert_eq!(status.connections, 2);
    assert_eq!(status.runs_active, 1);
    assert_eq!(status.approvals_pending, 1);
    assert!(status.sessions_live >= 1, "{status:?}");
    second.close().await;

    // The second connection is gone; the idle session, never subscribed, hibernates; the waiting one stays live.
    // Polling the status does not count as using the sessions: it must not keep the idle one awake.
    let status_now = || async { client.daemon_status(Default::default()).await.expect("daemon.status") };
    let status =
        eventually_some("the second connection to be counted out and the idle session to hibernate", WAIT, || async {
            let status = status_now().await;
            (status.connections == 1 && status.sessions_hibernated == 1).then_some(status)
        })
        .await;
    assert_eq!(status.sessions_live, 1, "{status:?}");
    assert!(!daemon.engine().is_live(&idle.session_id));

    within("run.cancel", client.call::<method::RunCancel>(troupe_protocol::types::run::RunIdParams { run_id }))
        .await
        .expect("cancel");
    events_until(&mut deliveries, is_terminal).await;
    eventually_some("the run and its approval to be gone", WAIT, || async {
        let status = status_now().await;
        (status.runs_active == 0 && status.approvals_pending == 0).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn troupe_status_shows_what_the_daemon_is_doing() {
    let daemon = TestDaemon::start();
    let (client, _deliveries) = daemon.client().await;
    daemon.create_session(&client).await;

    let text = troupe(&daemon, &["status"]).await.ok();
    assert!(text.contains(&format!("listening on {}", daemon.addr)), "{text}");
    // This test's client and the command's own connection.
    assert!(text.contains("2 connection(s)"), "{text}");
    assert!(text.contains("0 active run(s), 0 pending approval(s)"), "{text}");

    let json: Value = serde_json::from_str(&troupe(&daemon, &["status", "--json"]).await.ok()).expect("JSON");
    let status = &json["daemon"];
    assert_eq!(status["listen"], json!(daemon.addr.to_string()));
    assert_eq!(status["connections"], json!(2));
    assert!(status["uptime_ms"].is_u64(), "{json}");
    assert_eq!(status["sessions_live"].as_u64().unwrap() + status["sessions_hibernated"].as_u64().unwrap(), 1);
    client.close().await;
}
