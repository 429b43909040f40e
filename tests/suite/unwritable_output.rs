//! The daemon starts and serves when its own stdout and stderr cannot be written (a log on a full disk): its
//! announcements and log lines are lost, never the requests they were about.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use troupe_protocol::client::{Client, ClientOptions};
use troupe_protocol::types::events::EventPayload;

use super::support::*;

/// `troupe serve` with stdout and stderr on `/dev/full` (every write fails with ENOSPC), logging at `debug` so
/// that every request writes log lines.
fn serve_on_a_full_disk(data_dir: &Path) -> Child {
    std::fs::create_dir_all(data_dir).expect("data dir");
    std::fs::write(data_dir.join("config.toml"), "[titles]\nauto = false\n").expect("config");
    let full = || std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full");
    Command::new(troupe_binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .env("RUST_LOG", "debug")
        .env_remove("TROUPE_TOKEN")
        .stdin(Stdio::null())
        .stdout(full())
        .stderr(full())
        .spawn()
        .expect("spawn troupe serve")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_starts_and_serves_with_stdout_and_stderr_on_a_full_disk() {
    let data_dir = tempfile::tempdir().expect("temp dir");
    let project = tempfile::tempdir().expect("project dir");
    let mut daemon = serve_on_a_full_disk(data_dir.path());
    // It cannot say where it listens: the URL file says it.
    let url_path = data_dir.path().join("daemon/url");
    let mut exited = None;
    eventually("the daemon's URL file, or its exit", || {
        exited = daemon.try_wait().expect("wait");
        exited.is_some() || std::fs::read_to_string(&url_path).is_ok_and(|url| url.ends_with('\n'))
    })
    .await;
    assert_eq!(exited, None, "the daemon exited at start");
    let url = std::fs::read_to_string(&url_path).expect("url").trim().to_owned();
    let token = token_of(data_dir.path());

    // Under load from several clients at once: sessions, runs, subscriptions, each answered.
    let clients = (0..4).map(|_| async {
        let (client, mut deliveries) =
            within("connect", Client::connect_websocket(&url, &token, ClientOptions::default()))
                .await
                .expect("connect");
        let session_id = within("create", create_session_in(&client, project.path())).await.session_id;
        within("subscribe", client.subscribe(&session_id, None)).await.expect("subscribe");
        for index in 0..5 {
            let events =
                run_in_subscribed(&client, &mut deliveries, &session_id, "local/echo", &format!("hello {index}")).await;
            let last = events.last().expect("the run's events");
            assert!(matches!(last.payload, EventPayload::RunCompleted { .. }), "{:?}", last.payload);
        }
    });
    futures::future::join_all(clients).await;
    // Still up after all of it.
    assert_eq!(daemon.try_wait().expect("wait"), None, "the daemon exited under load");
    let _ = daemon.kill();
    let _ = daemon.wait();
}
