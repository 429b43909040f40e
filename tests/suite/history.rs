//! Revert and fork over the real socket: what the model is sent after a revert (checked in the fake vendor's
//! received requests), reverts of reverts, a restart, a fork of a running session, a fork of a reverted one, and
//! the typed errors.

use serde_json::json;
use troupe_protocol::client::{Client, ClientError, Deliveries};
use troupe_protocol::method;
use troupe_protocol::types::common::{SessionIdParams, SessionMeta, SessionStatus};
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::run::RunIdParams;
use troupe_protocol::types::session::{SessionForkParams, SessionListParams};

mod fork_prefix;

use super::support::*;
use troupe_test_support::FakeServer;
use troupe_test_support::replies::{models_list, openai_text};

const MODEL: &str = "openai/gpt-hist";

async fn connect_vendor(client: &Client, vendor: &FakeServer) {
    connect_provider(client, "openai", &[("base_url", &format!("{}/v1", vendor.base_url))], Some("sk-test"))
        .await
        .expect("connect the fake vendor");
}

async fn fork(client: &Client, session_id: &str, through_seq: u64) -> Result<String, ClientError> {
    within(
        "session.fork",
        client.call::<method::SessionFork>(SessionForkParams { session_id: session_id.into(), through_seq }),
    )
    .await
    .map(|result| result.session_id)
}

/// The user and assistant texts of the vendor's last chat request.
fn last_request_conversation(vendor: &FakeServer) -> (Vec<String>, Vec<String>) {
    let requests = vendor.requests();
    let chat = requests.iter().rev().find(|request| request.path.ends_with("/chat/completions")).expect("a request");
    let body = chat.json();
    let texts = |role: &str| -> Vec<String> {
        body["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .filter(|message| message["role"] == role)
            .map(|message| {
                message["content"].as_str().map(str::to_owned).unwrap_or_else(|| message["content"].to_string())
            })
            .collect()
    };
    (texts("user"), texts("assistant"))
}

fn last_seq(events: &[StoredEvent]) -> u64 {
    events.last().expect("events").seq
}

async fn get(client: &Client, session_id: &str) -> SessionMeta {
    within("session.get", client.call::<method::SessionGet>(SessionIdParams { session_id: session_id.into() }))
        .await
        .expect("session.get")
        .session
}

/// Every stored event of a session, by a fresh subscription.
async fn all_events(client: &Client, deliveries: &mut Deliveries, session_id: &str) -> Vec<StoredEvent> {
    let last = get(client, session_id).await.last_event_seq;
    client.subscribe(session_id, None).await.expect("subscribe");
    events_until(deliveries, |event| event.session_id == session_id && event.seq == last)
        .await
        .into_iter()
        .filter(|event| event.session_id == session_id)
        .collect()
}

#[tokio::test]
async fn a_revert_hides_later_turns_from_the_model_across_reverts_of_reverts_a_restart_and_a_fork() {
    let replies = ["one", "two", "three", "four", "five", "six"].map(|n| openai_text(&format!("answer {n}")));
    let vendor = FakeServer::start([vec![models_list(&["gpt-hist"])], replies.to_vec()].concat()).await;
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    connect_vendor(&client, &vendor).await;
    let session = daemon.create_session(&client).await;
    let id = session.session_id.clone();
    set_title(&client, &id, "r1", "Before").await.expect("rename");
    client.subscribe(&id, None).await.expect("subscribe");

    let first = run_in_subscribed(&client, &mut deliveries, &id, MODEL, "question one").await;
    let end_of_first = last_seq(&first);
    set_title(&client, &id, "r2", "Later title").await.expect("rename");
    let second = run_in_subscribed(&client, &mut deliveries, &id, MODEL, "question two").await;
    let end_of_second = last_seq(&second);

    // Back to the end of the first run: the later rename and run are no longer part of the session.
    let reverted = revert(&client, &id, end_of_first).await.expect("revert");
    assert_eq!(reverted.title.as_deref(), Some("Before"));
    assert_eq!(reverted.status, SessionStatus::Completed);
    let marker =
        events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::SessionReverted { .. })).await;
    let marker = marker.last().unwrap();
    assert_eq!(marker.payload, EventPayload::SessionReverted { through_seq: end_of_first });
    assert_eq!(reverted.last_event_seq, marker.seq);

    run_in_subscribed(&client, &mut deliveries, &id, MODEL, "question three").await;
    let (users, assistants) = last_request_conversation(&vendor);
    assert_eq!(users, ["question one", "question three"]);
    assert_eq!(assistants, ["answer one"]);

    // A revert into the branch the first revert hid brings that branch back (and hides the third run).
    let reverted = revert(&client, &id, end_of_second).await.expect("second revert");
    assert_eq!(reverted.title.as_deref(), Some("Later title"));
    run_in_subscribed(&client, &mut deliveries, &id, MODEL, "question four").await;
    let (users, assistants) = last_request_conversation(&vendor);
    assert_eq!(users, ["question one", "question two", "question four"]);
    assert_eq!(assistants, ["answer one", "answer two"]);

    // The same branch after a restart.
    drop((client, deliveries));
    let data_dir = daemon.stop();
    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..DaemonSetup::default() });
    let (client, mut deliveries) = daemon.client().await;
    let meta = get(&client, &id).await;
    assert_eq!(meta.title.as_deref(), Some("Later title"));
    let last_before = meta.last_event_seq;
    client.subscribe(&id, Some(last_before)).await.expect("subscribe");
    run_in_subscribed(&client, &mut deliveries, &id, MODEL, "question five").await;
    let (users, assistants) = last_request_conversation(&vendor);
    assert_eq!(users, ["question one", "question two", "question four", "question five"]);
    assert_eq!(assistants, ["answer one", "answer two", "answer four"]);

    // A fork of the reverted session copies the physical prefix, revert markers included, at the same seqs: its
    // visible branch is the source's, and that is what its model is sent.
    let through = get(&client, &id).await.last_event_seq;
    let fork_id = fork(&client, &id, through).await.expect("fork");
    let (reader, mut reader_deliveries) = daemon.client().await;
    let source = all_events(&reader, &mut reader_deliveries, &id).await;
    let copied = all_events(&reader, &mut reader_deliveries, &fork_id).await;
    assert!(copied.iter().all(|event| event.session_id == fork_id));
    let prefix = |events: &[StoredEvent]| -> Vec<(u64, EventPayload)> {
        events.iter().filter(|event| event.seq <= through).map(|event| (event.seq, event.payload.clone())).collect()
    };
    assert_eq!(prefix(&copied), prefix(&source));
    assert_eq!(prefix(&copied).len() as u64, through, "every event of the prefix, reverted ones included");
    assert_eq!(copied.iter().filter(|event| matches!(event.payload, EventPayload::SessionReverted { .. })).count(), 2);
    let forked_at = copied.iter().find(|event| event.seq == through + 1).expect("the fork's first own event");
    assert_eq!(forked_at.payload, EventPayload::SessionForked { source_session_id: id.clone(), through_seq: through });
    let forked = get(&client, &fork_id).await;
    assert_eq!(forked.title.as_deref(), Some("Later title (fork)"));
    let roots = client.call::<method::SessionList>(SessionListParams::default()).await.unwrap().sessions;
    assert!(roots.iter().any(|session| session.session_id == fork_id), "a fork is a root session");
    run_in_subscribed(&reader, &mut reader_deliveries, &fork_id, MODEL, "question six").await;
    let (users, assistants) = last_request_conversation(&vendor);
    assert_eq!(users, ["question one", "question two", "question four", "question five", "question six"]);
    assert_eq!(assistants, ["answer one", "answer two", "answer four", "answer five"]);
}

#[tokio::test]
async fn a_fork_of_a_running_session_closes_the_copied_run_in_the_fork_only() {
    let (daemon, client, mut deliveries) =
        scripted_daemon(json!({"turns": [{"text": "slowly", "delay_ms": 60_000}]})).await;
    let session = daemon.create_session(&client).await;
    let id = session.session_id.clone();
    client.subscribe(&id, None).await.expect("subscribe");
    let run_id = start_run(&client, &id, selection_of("default", "local/scripted"), "take your time").await;
    let started =
        events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::ModelAttemptStarted { .. })).await;
    let through = last_seq(&started);

    let fork_id = fork(&client, &id, through).await.expect("fork of a running session");
    let (reader, mut reader_deliveries) = daemon.client().await;
    reader.subscribe(&fork_id, None).await.expect("subscribe the fork");
    let copied =
        events_until(&mut reader_deliveries, |event| matches!(event.payload, EventPayload::RunInterrupted { .. }))
            .await;
    let kinds = kinds(&copied);
    assert_eq!(kinds.first(), Some(&"session_created"));
    let forked_at = kinds.iter().position(|kind| *kind == "session_forked").expect("session_forked");
    assert_eq!(&kinds[forked_at..], ["session_forked", "session_title_committed", "run_interrupted"]);
    assert_eq!(copied[forked_at - 1].seq, through, "the prefix keeps its length");
    match &copied.last().unwrap().payload {
        EventPayload::RunInterrupted { reason: Some(reason) } => assert!(reason.contains("fork"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(get(&client, &fork_id).await.status, SessionStatus::Interrupted);
    // The source was titled with its first input's first line (a `local/*` model is not asked).
    assert_eq!(get(&client, &fork_id).await.title.as_deref(), Some("take your time (fork)"));

    // The source's run goes on, untouched.
    assert_eq!(get(&client, &id).await.status, SessionStatus::Running);
    assert!(client.call::<method::RunCancel>(RunIdParams { run_id }).await.unwrap().cancelled);

    // The fork is a session of its own that runs.
    let forked_run =
        run_in_subscribed(&reader, &mut reader_deliveries, &fork_id, "local/echo", "hello from the fork").await;
    assert!(matches!(&forked_run.last().unwrap().payload,
        EventPayload::RunCompleted { final_text: Some(text) } if text == "hello from the fork"));
}

#[tokio::test]
async fn revert_and_fork_refuse_what_they_cannot_do_with_typed_errors() {
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    let session = daemon.create_session(&client).await;
    let id = session.session_id.clone();
    let sessions_dir = daemon.data_path().join("sessions");
    let entries = || std::fs::read_dir(&sessions_dir).unwrap().count();

    let code = |error: ClientError| match error {
        ClientError::Rpc(error) => (error.code, error.typed_code().map(str::to_owned)),
        other => panic!("{other:?}"),
    };
    // Nothing but the creation: no user message to fork from.
    let before = entries();
    assert_eq!(code(fork(&client, &id, 1).await.unwrap_err()), (-32602, Some("no_user_message_in_prefix".into())));
    assert_eq!(entries(), before, "a refused fork leaves nothing on disk");
    for through in [0, 2] {
        assert_eq!(code(revert(&client, &id, through).await.unwrap_err()), (-32602, Some("seq_out_of_range".into())));
        assert_eq!(code(fork(&client, &id, through).await.unwrap_err()), (-32602, Some("seq_out_of_range".into())));
    }
    assert_eq!(code(revert(&client, "no-such-session", 1).await.unwrap_err()).1.as_deref(), Some("session_not_found"));

    // A running session cannot be reverted; it can be forked.
    connect_script(&client, daemon.data_path(), json!({"turns": [{"text": "slowly", "delay_ms": 60_000}]})).await;
    client.subscribe(&id, None).await.expect("subscribe");
    let run_id = start_run(&client, &id, selection_of("default", "local/scripted"), "hold on").await;
    events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::ModelAttemptStarted { .. })).await;
    let busy = revert(&client, &id, 1).await.unwrap_err();
    assert_eq!(code(busy), (-32000, Some("session_busy".into())));
    assert!(fork(&client, &id, 2).await.is_ok());
    client.call::<method::RunCancel>(RunIdParams { run_id }).await.unwrap();
    events_until(&mut deliveries, is_terminal).await;

    // A revert into the middle of a run ends that run after the marker; the session stays usable.
    let reverted = revert(&client, &id, 2).await.expect("revert into the run");
    assert_eq!(reverted.status, SessionStatus::Interrupted);
    let tail =
        events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::RunInterrupted { .. })).await;
    let tail = kinds(&tail);
    assert_eq!(tail[tail.len() - 2..], ["session_reverted", "run_interrupted"]);
}

#[tokio::test]
async fn a_fork_through_a_pending_approval_gets_the_record_as_its_own_cancelled_and_no_tree_grants() {
    use troupe_protocol::types::approval::{ApprovalListParams, ApprovalStatus};
    use troupe_protocol::types::session::PermissionMode;

    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    let script = json!({"turns": [{"tool_calls": [{"tool": "shell", "arguments": {"command": "echo hi"}}]}]});
    connect_script(&client, daemon.data_path(), script).await;
    let session = daemon.create_session(&client).await;
    let id = session.session_id.clone();
    set_mode(&client, &id, PermissionMode::Ask).await;
    client.subscribe(&id, None).await.expect("subscribe");
    let run_id = start_run(&client, &id, selection_of("default", "local/scripted"), "run it").await;
    let asked =
        events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::ApprovalRequested { .. })).await;

    let fork_id = fork(&client, &id, last_seq(&asked)).await.expect("fork");
    let (reader, mut reader_deliveries) = daemon.client().await;
    reader.subscribe(&fork_id, None).await.expect("subscribe the fork");
    let copied =
        events_until(&mut reader_deliveries, |event| matches!(event.payload, EventPayload::RunInterrupted { .. }))
            .await;
    let record = copied.iter().find_map(|event| match &event.payload {
        EventPayload::ApprovalRequested { approval } => Some(approval.clone()),
        _ => None,
    });
    // The event is copied exactly; the record is the fork's, where its log is.
    assert_eq!(record.expect("the copied request").session_id, id);
    let listed = client
        .call::<method::ApprovalList>(ApprovalListParams { root_session_id: fork_id.clone(), status: None })
        .await
        .expect("approval.list on the fork");
    assert_eq!(listed.approvals.len(), 1);
    assert_eq!(listed.approvals[0].session_id, fork_id);
    assert_eq!(listed.approvals[0].status, ApprovalStatus::Cancelled);
    assert!(listed.tree_grants.is_empty());

    // The source still waits for its answer.
    let pending = client
        .call::<method::ApprovalList>(ApprovalListParams {
            root_session_id: id.clone(),
            status: Some(ApprovalStatus::Pending),
        })
        .await
        .unwrap();
    assert_eq!(pending.approvals.len(), 1);
    client.call::<method::RunCancel>(RunIdParams { run_id }).await.unwrap();
}
