//! `session.archive` and `session.delete` (troupe extensions) over the real wire: archiving hides a root session
//! from `session.list` unless `include_archived`, durably (a restart keeps it hidden) and without stopping it from
//! running; deleting removes a whole tree from every query and from the disk, is refused while the tree is at work
//! and for a child, ends the subscriptions of the deleted sessions, and a deletion a crash interrupted after its
//! rename is finished at the next start.

use serde_json::{Value, json};
use troupe_protocol::client::{Client, ClientDelivery, ClientError, Deliveries};
use troupe_protocol::method;
use troupe_protocol::types::common::{SessionIdParams, SessionMeta};
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::run::RunIdParams;
use troupe_protocol::types::session::{PermissionMode, SessionArchiveParams, SessionListParams};

use super::support::*;

fn rpc_error<T: std::fmt::Debug>(result: Result<T, ClientError>) -> troupe_protocol::RpcError {
    match result {
        Err(ClientError::Rpc(error)) => error,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

async fn archive(client: &Client, session_id: &str, archived: bool) -> Result<SessionMeta, ClientError> {
    let params = SessionArchiveParams { session_id: session_id.to_owned(), archived };
    within("session.archive", client.call::<method::SessionArchive>(params)).await.map(|result| result.session)
}

async fn delete(client: &Client, session_id: &str) -> Result<Vec<String>, ClientError> {
    let params = SessionIdParams { session_id: session_id.to_owned() };
    within("session.delete", client.call::<method::SessionDelete>(params))
        .await
        .map(|result| result.deleted_session_ids)
}

async fn listed(client: &Client, include_archived: bool) -> Vec<SessionMeta> {
    let params = SessionListParams { cwd: None, include_archived };
    within("session.list", client.call::<method::SessionList>(params)).await.expect("session.list").sessions
}

fn ids(sessions: &[SessionMeta]) -> Vec<&str> {
    sessions.iter().map(|session| session.session_id.as_str()).collect()
}

async fn get(client: &Client, session_id: &str) -> Result<SessionMeta, ClientError> {
    let params = SessionIdParams { session_id: session_id.to_owned() };
    within("session.get", client.call::<method::SessionGet>(params)).await.map(|result| result.session)
}

/// Runs `input` on the echo model in a subscribed session to its end.
async fn echo_run(client: &Client, deliveries: &mut Deliveries, session_id: &str, input: &str) {
    let run_id = start_run(client, session_id, echo_selection(), input).await;
    let events = events_until(deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    assert!(matches!(events.last().map(|event| &event.payload), Some(EventPayload::RunCompleted { .. })));
}

#[tokio::test]
async fn an_archived_session_is_hidden_from_the_list_until_asked_for_and_stays_so_across_a_restart() {
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    let kept = daemon.create_session(&client).await.session_id;
    let filed = daemon.create_session(&client).await.session_id;

    let archived = archive(&client, &filed, true).await.expect("archive");
    assert!(archived.archived);
    let seq = archived.last_event_seq;
    // Archiving again changes nothing and writes nothing.
    assert_eq!(archive(&client, &filed, true).await.expect("archive again").last_event_seq, seq);
    assert_eq!(ids(&listed(&client, false).await), [kept.as_str()]);
    let everything = listed(&client, true).await;
    assert_eq!(everything.len(), 2);
    assert!(everything.iter().any(|session| session.session_id == filed && session.archived));
    assert!(everything.iter().any(|session| session.session_id == kept && !session.archived));
    // On the wire, `archived` is omitted when false.
    let raw = serde_json::to_value(&everything).expect("json");
    assert!(raw.as_array().expect("array").iter().any(|session| session.get("archived").is_none()));

    // Still readable and runnable, and a run does not bring it back.
    client.subscribe(&filed, None).await.expect("subscribe to the archived session");
    echo_run(&client, &mut deliveries, &filed, "still here").await;
    assert!(get(&client, &filed).await.expect("session.get").archived);
    assert_eq!(ids(&listed(&client, false).await), [kept.as_str()]);
    drop(deliveries);
    client.close().await;

    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(daemon.stop()), ..DaemonSetup::default() });
    let (client, _deliveries) = daemon.client().await;
    assert_eq!(ids(&listed(&client, false).await), [kept.as_str()], "still hidden after a restart");
    assert!(listed(&client, true).await.iter().any(|session| session.session_id == filed && session.archived));

    let back = archive(&client, &filed, false).await.expect("unarchive");
    assert!(!back.archived);
    let mut both = ids(&listed(&client, false).await).into_iter().map(str::to_owned).collect::<Vec<_>>();
    both.sort();
    let mut expected = vec![kept.clone(), filed.clone()];
    expected.sort();
    assert_eq!(both, expected);

    let missing = rpc_error(archive(&client, "no-such-session", true).await);
    assert_eq!(missing.typed_code(), Some("session_not_found"));
}

/// A `helper` agent on the scripted model.
const DELEGATION_CONFIG: &str = "[agents.helper]\nmodels = [\"local/scripted\"]\n";

fn delegate(task: &str) -> Value {
    json!({"tool": "delegate", "arguments": {"agent": "helper", "task": task}})
}

#[tokio::test]
async fn deleting_a_root_removes_its_whole_tree_from_every_query_and_from_the_disk() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some(DELEGATION_CONFIG.to_owned()),
        ..DaemonSetup::default()
    });
    let (client, mut deliveries) = daemon.client().await;
    let script = json!({
        "turns": [{"tool_calls": [delegate("help me")]}, {"text": "root done"}],
        "by_input": {"help me": {"turns": [{"text": "child done"}]}}
    });
    connect_script(&client, daemon.data_path(), script).await;
    let other = daemon.create_session(&client).await.session_id;
    let root = daemon.create_session(&client).await.session_id;
    set_mode(&client, &root, PermissionMode::Yolo).await;
    client.subscribe(&root, None).await.expect("subscribe");
    start_run(&client, &root, selection_of("default", "local/scripted"), "go").await;
    let events = events_until(&mut deliveries, is_terminal).await;
    let child = events
        .iter()
        .find_map(|event| match &event.payload {
            EventPayload::DelegateStarted { child_session_id, .. } => Some(child_session_id.clone()),
            _ => None,
        })
        .expect("a delegation");

    // A child is refused, naming its root; so is archiving it.
    let refused = rpc_error(delete(&client, &child).await);
    assert_eq!((refused.code, refused.typed_code()), (-32000, Some("not_root_session")));
    assert_eq!(refused.data.as_ref().expect("data")["root_session_id"], root.as_str());
    let refused = rpc_error(archive(&client, &child, true).await);
    assert_eq!(refused.typed_code(), Some("not_root_session"));

    assert_eq!(delete(&client, &root).await.expect("session.delete"), [root.clone(), child.clone()]);
    for gone in [&root, &child] {
        assert_eq!(rpc_error(get(&client, gone).await).typed_code(), Some("session_not_found"), "{gone}");
        let params = SessionIdParams { session_id: gone.clone() };
        let tree = within("session.tree", client.call::<method::SessionTree>(params)).await;
        assert_eq!(rpc_error(tree).typed_code(), Some("session_not_found"));
        assert!(!daemon.data_path().join("sessions").join(gone).exists(), "{gone}'s directory is gone");
    }
    assert_eq!(ids(&listed(&client, true).await), [other.as_str()]);
    let leftovers: Vec<String> = std::fs::read_dir(daemon.data_path().join("sessions"))
        .expect("sessions dir")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(leftovers, [other.as_str()], "no staging directory is left");
    // A repeated delete finds nothing.
    assert_eq!(rpc_error(delete(&client, &root).await).typed_code(), Some("session_not_found"));

    // And a restart does not bring anything back.
    client.close().await;
    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(daemon.stop()), ..DaemonSetup::default() });
    let (client, _deliveries) = daemon.client().await;
    assert_eq!(ids(&listed(&client, true).await), [other.as_str()]);
    assert_eq!(rpc_error(get(&client, &child).await).typed_code(), Some("session_not_found"));
}

#[tokio::test]
async fn a_session_with_an_active_run_is_not_deleted_until_the_run_ends() {
    let (daemon, client, mut deliveries) =
        scripted_daemon(json!({"turns": [{"text": "slow", "delay_ms": 600000}]})).await;
    let session = daemon.create_session(&client).await.session_id;
    client.subscribe(&session, None).await.expect("subscribe");
    let run_id = start_run(&client, &session, selection_of("default", "local/scripted"), "take your time").await;

    let busy = rpc_error(delete(&client, &session).await);
    assert_eq!((busy.code, busy.typed_code()), (-32000, Some("session_busy")));
    let data = busy.data.as_ref().expect("data");
    assert_eq!((&data["session_id"], &data["active_run_id"]), (&json!(session), &json!(run_id)));
    assert!(busy.detail().is_some_and(|detail| detail.contains("cancel")), "{busy:?}");
    // Refused, the session goes on serving.
    assert!(get(&client, &session).await.is_ok());

    within("run.cancel", client.call::<method::RunCancel>(RunIdParams { run_id: run_id.clone() }))
        .await
        .expect("run.cancel");
    events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    assert_eq!(delete(&client, &session).await.expect("delete after the cancel"), [session.as_str()]);
}

#[tokio::test]
async fn a_session_driven_by_an_active_goal_is_deleted_once_the_goal_is_paused_and_its_run_ends() {
    use troupe_protocol::types::goal::{GoalLifecycleAction, GoalLifecycleParams, GoalSetParams};
    let (daemon, client, mut deliveries) =
        scripted_daemon(json!({"turns": [{"text": "slow", "delay_ms": 600000}]})).await;
    let session = daemon.create_session(&client).await.session_id;
    client.subscribe(&session, None).await.expect("subscribe");
    let params = GoalSetParams {
        session_id: session.clone(),
        objective: "keep going".into(),
        selection: Some(selection_of("default", "local/scripted")),
    };
    let goal = within("session.goal.set", client.call::<method::SessionGoalSet>(params)).await.expect("goal").goal;
    // The goal starts its automatic run at once.
    let started = events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::RunStarted { .. })).await;
    let run_id = started.last().and_then(|event| event.run_id.clone()).expect("the goal's run");

    let busy = rpc_error(delete(&client, &session).await);
    assert_eq!(busy.typed_code(), Some("session_busy"), "{busy:?}");

    let pause = GoalLifecycleParams {
        session_id: session.clone(),
        goal_id: goal.goal_id.clone(),
        expected_revision: goal.revision,
        action: GoalLifecycleAction::Pause,
        selection: None,
    };
    within("pause", client.call::<method::SessionGoalLifecycle>(pause)).await.expect("pause the goal");
    within("run.cancel", client.call::<method::RunCancel>(RunIdParams { run_id: run_id.clone() }))
        .await
        .expect("run.cancel");
    events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    assert_eq!(delete(&client, &session).await.expect("delete"), [session.as_str()]);
    assert!(!daemon.data_path().join("sessions").join(&session).exists());
}

#[tokio::test]
async fn a_hibernated_session_is_deleted_for_good_and_its_usage_leaves_the_rollups() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        hibernate_after: Some(std::time::Duration::from_millis(50)),
        ..DaemonSetup::default()
    });
    let session = {
        let (client, mut deliveries) = daemon.client().await;
        let session = daemon.create_session(&client).await.session_id;
        client.subscribe(&session, None).await.expect("subscribe");
        echo_run(&client, &mut deliveries, &session, "spend something").await;
        client.close().await;
        session
    };
    eventually("the session to hibernate", || !daemon.engine().is_live(&session)).await;
    let (client, _deliveries) = daemon.client().await;
    let spent = within("usage.global", client.call::<method::UsageGlobal>(Default::default())).await.expect("usage");

    assert_eq!(delete(&client, &session).await.expect("delete"), [session.as_str()]);
    // What the session said while it was loaded for the deletion does not bring it back: asked five times over
    // ~100 ms (the pauses are the window observed, not a synchronisation).
    for _ in 0..5 {
        assert_eq!(rpc_error(get(&client, &session).await).typed_code(), Some("session_not_found"));
        assert!(listed(&client, true).await.is_empty());
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let after = within("usage.global", client.call::<method::UsageGlobal>(Default::default())).await.expect("usage");
    assert!(spent.usage.totals.request_count > 0, "the run spent something: {:?}", spent.usage);
    assert_eq!(after.usage.totals.request_count, 0, "{:?}", after.usage);
}

#[tokio::test]
async fn a_session_whose_log_cannot_be_read_can_still_be_deleted() {
    let data_dir = tempfile::tempdir().expect("data dir");
    // A session whose log lost its first line (listed, damaged) and one whose log is a directory (listed, every
    // request answers the error).
    let damaged = troupe_runtime::clock::new_id();
    write_session_log(data_dir.path(), &damaged, &["{not json".to_owned()]);
    let unreadable = troupe_runtime::clock::new_id();
    std::fs::create_dir_all(data_dir.path().join("sessions").join(&unreadable).join("events.jsonl")).expect("dir");

    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..DaemonSetup::default() });
    let (client, _deliveries) = daemon.client().await;
    assert_eq!(listed(&client, true).await.len(), 2);
    for session in [&damaged, &unreadable] {
        assert_eq!(delete(&client, session).await.expect("delete"), [session.as_str()]);
        assert!(!daemon.data_path().join("sessions").join(session).exists(), "{session}");
    }
    assert!(listed(&client, true).await.is_empty());
}

#[tokio::test]
async fn subscribers_of_a_deleted_session_are_told_and_a_new_subscribe_is_refused() {
    let daemon = TestDaemon::start();
    let (watcher, mut watched) = daemon.client().await;
    let (client, mut deliveries) = daemon.client().await;
    let session = daemon.create_session(&client).await.session_id;
    client.subscribe(&session, None).await.expect("subscribe");
    echo_run(&client, &mut deliveries, &session, "hello").await;
    watcher.subscribe(&session, None).await.expect("the watcher subscribes");

    delete(&client, &session).await.expect("session.delete");
    // The watcher's subscription ends (its gap's re-subscribe finds no session) instead of waiting forever.
    let ended = within("the watcher's subscription to end", async {
        loop {
            match watched.next().await.expect("deliveries open") {
                ClientDelivery::RecoveryFailed { session_id, detail } => return (session_id, detail),
                _ => continue,
            }
        }
    })
    .await;
    assert_eq!(ended.0, session);
    assert!(ended.1.contains("no session"), "{}", ended.1);

    let (late, _late_deliveries) = daemon.client().await;
    let refused = within("subscribe after the deletion", late.subscribe(&session, None)).await;
    assert_eq!(rpc_error(refused).typed_code(), Some("session_not_found"));
}

#[tokio::test]
async fn a_deletion_interrupted_after_its_rename_is_finished_at_the_next_start() {
    let daemon = TestDaemon::start();
    let (client, _deliveries) = daemon.client().await;
    let kept = daemon.create_session(&client).await.session_id;
    let doomed = daemon.create_session(&client).await.session_id;
    client.close().await;
    let data_dir = daemon.stop();
    // What a crash between the rename and the removal leaves: the session's directory under its staging name.
    let sessions = data_dir.path().join("sessions");
    let staged = sessions.join(format!(".{doomed}.delete"));
    std::fs::rename(sessions.join(&doomed), &staged).expect("stage the directory");

    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..DaemonSetup::default() });
    let (client, _deliveries) = daemon.client().await;
    assert_eq!(ids(&listed(&client, true).await), [kept.as_str()]);
    assert_eq!(rpc_error(get(&client, &doomed).await).typed_code(), Some("session_not_found"));
    assert!(!staged.exists(), "the start removed the staging directory");
}

mod cli {
    //! `troupe archive`, `unarchive`, `sessions --all` and `rm`, through the real binary.

    use super::super::cli_support::*;
    use super::*;

    #[tokio::test]
    async fn troupe_archive_unarchive_and_sessions_all_show_what_is_put_away() {
        let daemon = TestDaemon::start();
        let (client, _deliveries) = daemon.client().await;
        let kept = daemon.create_session(&client).await.session_id;
        let filed = daemon.create_session(&client).await.session_id;

        let said = troupe(&daemon, &["archive", &filed]).await.ok();
        assert!(said.starts_with(&format!("archived {}", &filed[..8])), "{said}");
        assert!(said.contains("troupe sessions --all"), "{said}");
        assert!(get(&client, &filed).await.expect("session.get").archived);

        let listed = troupe(&daemon, &["sessions"]).await.ok();
        assert_eq!(listed.lines().count(), 1, "{listed}");
        assert!(listed.contains(&kept[..8]) && !listed.contains("[archived]"), "{listed}");
        let all = troupe(&daemon, &["sessions", "--all"]).await.ok();
        assert_eq!(all.lines().count(), 2, "{all}");
        assert_eq!(all.lines().filter(|line| line.ends_with("[archived]")).count(), 1, "{all}");
        let json: Vec<Value> = serde_json::from_str(&troupe(&daemon, &["sessions", "--all", "--json"]).await.ok())
            .expect("sessions --all --json");
        let archived: Vec<&str> = json
            .iter()
            .filter(|session| session["archived"] == true)
            .map(|session| session["session_id"].as_str().expect("id"))
            .collect();
        assert_eq!(archived, [filed.as_str()]);

        let back: Value = serde_json::from_str(&troupe(&daemon, &["unarchive", &filed, "--json"]).await.ok())
            .expect("unarchive --json");
        assert_eq!(back["session"]["session_id"], filed.as_str());
        assert!(back["session"].get("archived").is_none(), "{back}");
        assert_eq!(troupe(&daemon, &["sessions"]).await.ok().lines().count(), 2);

        let missing = troupe(&daemon, &["archive", "0000ffff-no-such-session"]).await.refused();
        assert!(missing.contains("no session"), "{missing}");
    }

    #[tokio::test]
    async fn troupe_rm_needs_yes_without_a_terminal_and_prints_what_it_deleted() {
        let daemon = TestDaemon::start();
        let (client, _deliveries) = daemon.client().await;
        let first = daemon.create_session(&client).await.session_id;
        let second = daemon.create_session(&client).await.session_id;

        // stdin is not a terminal here: nothing to confirm on, so nothing is deleted.
        let refused = troupe(&daemon, &["rm", &first]).await.refused();
        assert!(refused.contains("--yes"), "{refused}");
        assert!(get(&client, &first).await.is_ok(), "still there");

        let said = troupe(&daemon, &["rm", &first, "--yes"]).await.ok();
        assert_eq!(said.trim(), format!("deleted session {first}  (untitled)"));
        assert_eq!(rpc_error(get(&client, &first).await).typed_code(), Some("session_not_found"));

        // By a prefix (the only session left), as JSON.
        let json: Value =
            serde_json::from_str(&troupe(&daemon, &["rm", &second[..13], "--yes", "--json"]).await.ok()).expect("json");
        assert_eq!(json, json!({"deleted_session_ids": [second]}));

        let again = troupe(&daemon, &["rm", &second, "--yes"]).await.refused();
        assert!(again.contains("no session"), "{again}");
    }

    #[tokio::test]
    async fn troupe_rm_of_a_busy_session_says_how_to_free_it() {
        let (daemon, client, _deliveries) =
            scripted_daemon(json!({"turns": [{"text": "slow", "delay_ms": 600000}]})).await;
        let session = daemon.create_session(&client).await.session_id;
        let run_id = start_run(&client, &session, selection_of("default", "local/scripted"), "wait").await;

        let refused = troupe(&daemon, &["rm", &session, "--yes"]).await.refused();
        assert!(refused.contains(&format!("troupe cancel {run_id}")), "{refused}");
        assert!(refused.contains("nothing was deleted"), "{refused}");
        assert!(get(&client, &session).await.is_ok());
    }
}

mod terminal {
    //! `troupe rm` on a terminal (a pseudo-terminal from `script(1)`): it asks, and only `y` deletes.

    use std::process::Stdio;

    use tokio::io::AsyncWriteExt as _;

    use super::super::cli_support::CliOutput;
    use super::*;

    /// Runs `troupe rm SESSION` on a pseudo-terminal, answering `answer`; None when `script(1)` is missing.
    async fn rm_on_a_terminal(daemon: &TestDaemon, session_id: &str, answer: &str) -> CliOutput {
        // script(1) gives the command a terminal; like the spinner test in `cli_core`, the test needs it.
        let script = ["/usr/bin/script", "/bin/script"]
            .into_iter()
            .find(|path| std::path::Path::new(path).exists())
            .expect("script(1) from util-linux is not installed; the test needs it");
        let line = format!("{} rm {session_id}", troupe_binary().display());
        let mut child = tokio::process::Command::new(script)
            .args(["-qec", &line, "/dev/null"])
            .env("TROUPE_URL", daemon.url())
            .env("TROUPE_TOKEN", &daemon.token)
            .env("RUST_LOG", "off")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn script");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(format!("{answer}\n").as_bytes()).await.expect("answer");
        let output = within("troupe rm on a terminal", child.wait_with_output()).await.expect("script ran");
        CliOutput {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    #[tokio::test]
    async fn troupe_rm_asks_on_a_terminal_and_deletes_only_on_yes() {
        let daemon = TestDaemon::start();
        let (client, _deliveries) = daemon.client().await;
        let session = daemon.create_session(&client).await.session_id;

        let declined = rm_on_a_terminal(&daemon, &session, "n").await;
        assert!(declined.stdout.contains("This cannot be undone. [y/N]"), "{declined:?}");
        assert!(declined.stdout.contains("nothing deleted"), "{declined:?}");
        assert_ne!(declined.code, Some(0), "{declined:?}");
        assert!(get(&client, &session).await.is_ok(), "still there");

        let accepted = rm_on_a_terminal(&daemon, &session, "y").await;
        assert_eq!(accepted.code, Some(0), "{accepted:?}");
        // On a terminal the id is bold.
        assert!(accepted.stdout.contains("deleted session") && accepted.stdout.contains(&session), "{accepted:?}");
        assert_eq!(rpc_error(get(&client, &session).await).typed_code(), Some("session_not_found"));
    }
}
