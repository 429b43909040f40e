//! What a start finds on disk, said and kept right: a sessions directory that cannot be read at start is read again
//! once it can be (no restart needed), a line deleted from the middle of a log is reported in `skipped_events`, and
//! a clean stop leaves every session's metadata cache current for the next start, and a session index that the next
//! start lists from and checks against each log.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use troupe_protocol::client::{Client, ClientOptions};
use troupe_protocol::method;
use troupe_protocol::types::common::{SessionIdParams, SkippedEvent};
use troupe_protocol::types::session::SessionListParams;

use super::support::*;

/// Hands `path` and everything under it to `nobody`, so a daemon running as `nobody` owns its data dir.
fn give_to_nobody(path: &Path) {
    let status = Command::new("chown").args(["-R", "65534:65534"]).arg(path).status().expect("chown");
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_directory_unreadable_at_start_is_read_once_it_can_be() {
    // A session on disk, written by a daemon that then stopped.
    let data_dir = {
        let daemon = TestDaemon::start();
        let (client, _) = daemon.client().await;
        let session = daemon.create_session(&client).await;
        set_title(&client, &session.session_id, "named", "still here").await.expect("rename");
        daemon.stop()
    };
    // Root reads any directory whatever its mode: the daemon then runs as `nobody`, which owns the data dir.
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        std::fs::set_permissions(data_dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
        give_to_nobody(data_dir.path());
    }
    let sessions = data_dir.path().join("sessions");
    std::fs::set_permissions(&sessions, std::fs::Permissions::from_mode(0o000)).expect("chmod sessions");

    let mut command = troupe_serve(data_dir.path()).listen("127.0.0.1:0");
    if root {
        command = command.user(65534);
    }
    let daemon = command.spawn();
    let (url, token) = (daemon.url.clone(), daemon.token.clone());
    let (client, _) =
        within("connect", Client::connect_websocket(&url, &token, ClientOptions::default())).await.expect("connect");
    let listed = within("list", client.call::<method::SessionList>(SessionListParams::default())).await.expect("list");
    assert!(listed.sessions.is_empty(), "nothing can be read yet: {listed:?}");

    std::fs::set_permissions(&sessions, std::fs::Permissions::from_mode(0o700)).expect("chmod sessions back");
    let found = eventually_some("the session listed without a restart", WAIT, || async {
        let listed = client.call::<method::SessionList>(SessionListParams::default()).await.expect("list");
        listed.sessions.into_iter().next()
    })
    .await;
    assert_eq!(found.title.as_deref(), Some("still here"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_deleted_from_the_middle_of_a_log_is_reported_as_missing() {
    let daemon = TestDaemon::start();
    let (client, _) = daemon.client().await;
    let session_id = daemon.create_session(&client).await.session_id;
    for index in 0..6 {
        set_title(&client, &session_id, &format!("r{index}"), &format!("title {index}")).await.expect("rename");
    }
    let data_dir = daemon.stop();
    let log = data_dir.path().join("sessions").join(&session_id).join("events.jsonl");
    let text = std::fs::read_to_string(&log).expect("log");
    let kept: String =
        text.lines().filter(|line| !line.contains("\"seq\":5,")).map(|line| format!("{line}\n")).collect();
    assert_eq!(kept.lines().count(), 6, "one line deleted");
    std::fs::write(&log, kept).expect("rewrite the log");

    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..DaemonSetup::default() });
    let (client, _) = daemon.client().await;
    let got = within("get", client.call::<method::SessionGet>(SessionIdParams { session_id: session_id.clone() }))
        .await
        .expect("session.get");
    assert_eq!(got.session.last_event_seq, 7);
    let missing =
        SkippedEvent { seq: Some(5), line: None, reason: "missing: no line of the log holds sequence 5".into() };
    assert_eq!(got.session.skipped_events, [missing]);
}

#[test]
fn a_clean_stop_leaves_the_metadata_cache_current() {
    let data_dir = tempfile::tempdir().expect("data dir");
    let mut daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let session_id = runtime.block_on(async {
        let (client, _) = daemon.client().await;
        let session = create_session_in(&client, Path::new("/")).await.session_id;
        // The session stays live (it was just written to) until the stop.
        set_title(&client, &session, "named", "named before the stop").await.expect("rename");
        session
    });
    assert!(daemon.terminate().success());

    let session_dir = data_dir.path().join("sessions").join(&session_id);
    let cached = troupe_runtime::meta_cache::read(&session_dir).expect("a metadata cache");
    assert_eq!(Some(cached.log_len_bytes), troupe_runtime::meta_cache::log_len(&session_dir), "current: {cached:?}");
    assert_eq!(cached.meta.title.as_deref(), Some("named before the stop"));
    assert_eq!(cached.meta.last_event_seq, 2);
}

/// The titles `session.list` gives, by session id.
async fn listed_titles(client: &troupe_protocol::client::Client) -> std::collections::BTreeMap<String, Option<String>> {
    let listed = within("session.list", client.call::<method::SessionList>(Default::default())).await.expect("list");
    listed.sessions.into_iter().map(|meta| (meta.session_id, meta.title)).collect()
}

#[tokio::test]
async fn a_clean_stop_leaves_a_session_index_the_next_start_lists_from_and_checks_against_each_log() {
    let daemon = TestDaemon::start();
    let (client, _deliveries) = daemon.client().await;
    let kept = daemon.create_session(&client).await.session_id;
    let restored = daemon.create_session(&client).await.session_id;
    set_title(&client, &kept, "k1", "kept").await.unwrap();
    set_title(&client, &restored, "r1", "backed up").await.unwrap();
    // Acknowledged, so durable: this copy is the session as a backup taken now holds it.
    let log = |data_dir: &std::path::Path| data_dir.join("sessions").join(&restored).join("events.jsonl");
    let backup = std::fs::read(log(daemon.data_path())).unwrap();
    set_title(&client, &restored, "r2", "changed after the backup").await.unwrap();
    let before = listed_titles(&client).await;
    drop(client);
    let data_dir = daemon.stop();

    let index = data_dir.path().join("daemon").join("session-index.jsonl");
    let written = std::fs::read_to_string(&index).expect("a clean stop writes the session index");
    assert_eq!(written.lines().count(), 3, "a header and both sessions: {written}");
    // The backup put back while no daemon runs: the index and the session's cache describe a longer log.
    std::fs::write(log(data_dir.path()), &backup).unwrap();

    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..DaemonSetup::default() });
    let (client, _deliveries) = daemon.client().await;
    let first = listed_titles(&client).await;
    assert!(!index.exists(), "the start takes the index, so a crash later cannot leave it behind");
    assert_eq!(first.keys().collect::<Vec<_>>(), before.keys().collect::<Vec<_>>(), "every session is listed");
    assert_eq!(first[&kept].as_deref(), Some("kept"));
    // The check of the index against the logs reads the put-back session again.
    eventually_some("the put-back session listed as its log says", WAIT, || async {
        (listed_titles(&client).await[&restored].as_deref() == Some("backed up")).then_some(())
    })
    .await;
    let got = client.call::<method::SessionGet>(SessionIdParams { session_id: restored.clone() }).await.unwrap();
    assert_eq!(got.session.title.as_deref(), Some("backed up"));
}
