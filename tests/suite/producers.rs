//! Producer messages, driven through the engine's producer API (what plugin requests call) and observed on the
//! wire: a message wakes an idle session; a `queue` message waits for the active run to end while a `steer`
//! message enters it at its next boundary; a retry gets the original receipt and other content is refused;
//! discard works after unregister and is idempotent; claims left by a crash are released and delivered once; and
//! `session.producers` lists the registrations.

use serde_json::json;
use troupe_actors::EngineError;
use troupe_actors::session_actor::DiscardOutcome;
use troupe_protocol::RpcError;
use troupe_protocol::client::{Client, ClientError, Deliveries};
use troupe_protocol::method;
use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::producers::{ProducerMessageMode, ProducerOwner};
use troupe_protocol::types::run::RunToolStdinParams;
use troupe_protocol::types::session::PermissionMode;

use super::support::*;

/// The origin of what the engine writes for producer messages, as the log spells it.
const PRODUCER_ORIGIN: &str = "engine:producer";

fn notify() -> ProducerOwner {
    ProducerOwner::Plugin { plugin: "notify".into() }
}

/// Events until the `count`-th run end.
async fn events_until_runs_end(deliveries: &mut Deliveries, count: usize) -> Vec<StoredEvent> {
    let mut ended = 0;
    events_until(deliveries, |event| {
        ended += usize::from(is_terminal(event));
        ended == count
    })
    .await
}

/// The `run_started` events among `events`: (run id, origin, input).
fn runs_started(events: &[StoredEvent]) -> Vec<(String, Option<String>, String)> {
    events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::RunStarted { input, .. } => {
                Some((event.run_id.clone().unwrap_or_default(), event.origin.clone(), input.clone()))
            }
            _ => None,
        })
        .collect()
}

fn position(events: &[StoredEvent], what: impl Fn(&StoredEvent) -> bool) -> usize {
    events.iter().position(what).expect("the event is there")
}

fn claimed(event: &StoredEvent, run_id: &str, message_id: &str) -> bool {
    matches!(&event.payload, EventPayload::ProducerMessagesClaimed { message_ids }
        if message_ids == &[message_id.to_owned()] && event.run_id.as_deref() == Some(run_id))
}

fn consumed(event: &StoredEvent, message_id: &str) -> bool {
    matches!(&event.payload, EventPayload::ProducerMessageConsumed { message_id: id } if id == message_id)
}

/// Waits for the first tool call of the active run to start; returns its id.
async fn tool_started(deliveries: &mut Deliveries) -> String {
    let started = events_until(deliveries, |e| matches!(e.payload, EventPayload::ToolCallStarted { .. })).await;
    let EventPayload::ToolCallStarted { tool_call_id, .. } = &started.last().expect("an event").payload else {
        unreachable!()
    };
    tool_call_id.clone()
}

async fn finish_tool(client: &Client, run_id: &str, tool_call_id: &str) {
    within(
        "run.tool_stdin",
        client.call::<method::RunToolStdin>(RunToolStdinParams {
            run_id: run_id.to_owned(),
            tool_call_id: tool_call_id.to_owned(),
            data: Some("ping\n".into()),
            eof: true,
        }),
    )
    .await
    .expect("stdin");
}

#[tokio::test]
async fn a_message_wakes_an_idle_session_and_a_retry_gets_the_same_receipt() {
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    let session = daemon.create_session(&client).await;
    let session_id = session.session_id.as_str();
    client.subscribe(session_id, None).await.expect("subscribe");
    let engine = daemon.engine();

    let producer = within("register", engine.register_producer(session_id, notify())).await.expect("register");
    let send = |key: &'static str, body: &'static str| {
        engine.send_producer_message(session_id, &producer, ProducerMessageMode::Queue, key, body)
    };
    let receipt = within("send", send("k1", "the build finished")).await.expect("send");
    assert!(!receipt.replayed);

    let events = events_until(&mut deliveries, is_terminal).await;
    let accepted = position(&events, |e| matches!(e.payload, EventPayload::ProducerMessageAccepted { .. }));
    assert_eq!(events[accepted].seq, receipt.seq);
    assert_eq!(events[accepted].origin.as_deref(), Some("plugin:notify"));
    let runs = runs_started(&events);
    assert_eq!(runs.len(), 1, "one run woke");
    let (run_id, origin, input) = &runs[0];
    assert_eq!((origin.as_deref(), input.as_str()), (Some(PRODUCER_ORIGIN), "the build finished"));
    let started = position(&events, |e| matches!(e.payload, EventPayload::RunStarted { .. }));
    let claim = position(&events, |e| claimed(e, run_id, &receipt.message_id));
    let consume = position(&events, |e| consumed(e, &receipt.message_id));
    assert!(accepted < started && started < claim && claim < consume, "{:?}", kinds(&events));
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCompleted { .. }));

    // A retry with the same key and content: the original receipt, no new event and no new run.
    let again = within("retry", send("k1", "the build finished")).await.expect("retry");
    assert_eq!(
        (again.message_id.as_str(), again.seq, again.replayed),
        (receipt.message_id.as_str(), receipt.seq, true)
    );
    let conflict = within("conflict", send("k1", "something else")).await.unwrap_err();
    assert!(matches!(&conflict, EngineError::ProducerIdempotencyConflict { message_id, .. }
        if *message_id == receipt.message_id));
    assert_eq!(RpcError::from(conflict).typed_code(), Some("idempotency_conflict"));
    let meta = client.call::<method::SessionGet>(SessionIdParams { session_id: session_id.into() }).await.unwrap();
    assert_eq!(meta.session.last_event_seq, events.last().unwrap().seq, "a retry writes nothing");

    // Another owner has its own keys.
    let other = engine.register_producer(session_id, ProducerOwner::Goal { goal_id: "g".into() }).await.unwrap();
    let theirs = engine
        .send_producer_message(session_id, &other, ProducerMessageMode::Steer, "k1", "the build finished")
        .await
        .expect("another owner's k1");
    assert_ne!(theirs.message_id, receipt.message_id);
    events_until(&mut deliveries, is_terminal).await;

    // `session.producers` over the wire: both registrations, oldest first, with their age.
    let listed = within(
        "session.producers",
        client.call::<method::SessionProducers>(SessionIdParams { session_id: session_id.into() }),
    )
    .await
    .expect("session.producers");
    let ids: Vec<&str> = listed.producers.iter().map(|p| p.producer_id.as_str()).collect();
    assert_eq!(ids, [producer.as_str(), other.as_str()]);
    assert_eq!(listed.producers[0].owner, notify());
    assert!(listed.producers.iter().all(|p| p.session_id == session_id && p.age_ms < 60_000));
    assert!(listed.plugin_recovery.is_empty(), "no plugin host reports yet");
    let unknown = client
        .call::<method::SessionProducers>(SessionIdParams { session_id: "00000000-0000-0000-0000-000000000000".into() })
        .await
        .unwrap_err();
    let ClientError::Rpc(unknown) = unknown else { panic!("{unknown:?}") };
    assert_eq!(unknown.typed_code(), Some("session_not_found"));
}

/// A run blocked in a tool reading stdin: turn 1 calls it, turn 2 answers after the boundary, turn 3 answers the
/// run a queued message wakes.
fn blocking_script() -> serde_json::Value {
    json!({"turns": [
        {"tool_calls": [{"tool": "shell", "arguments": {"command": "read line; echo got $line"}}]},
        {"text": "answered after the boundary"},
        {"text": "answered the queued message"}
    ]})
}

/// A yolo session whose run is blocked in its shell tool (waiting for stdin), subscribed by `client`.
struct Busy {
    client: Client,
    deliveries: Deliveries,
    session_id: String,
    run_id: String,
    tool_call_id: String,
}

async fn busy_session(daemon: &TestDaemon) -> Busy {
    let (client, mut deliveries) = daemon.client().await;
    connect_script(&client, daemon.data_path(), blocking_script()).await;
    let session_id = daemon.create_session(&client).await.session_id;
    set_mode(&client, &session_id, PermissionMode::Yolo).await;
    client.subscribe(&session_id, None).await.expect("subscribe");
    let run_id = start_run(&client, &session_id, selection_of("default", "local/scripted"), "start").await;
    let tool_call_id = tool_started(&mut deliveries).await;
    Busy { client, deliveries, session_id, run_id, tool_call_id }
}

#[tokio::test]
async fn a_queue_message_waits_for_the_run_to_end_and_a_steer_message_enters_it() {
    let daemon = TestDaemon::start();
    let Busy { client, mut deliveries, session_id, run_id, tool_call_id } = busy_session(&daemon).await;
    let session_id = session_id.as_str();

    let engine = daemon.engine();
    let producer = engine.register_producer(session_id, notify()).await.expect("register");
    let queued = within(
        "send queue",
        engine.send_producer_message(session_id, &producer, ProducerMessageMode::Queue, "q", "queued note"),
    )
    .await
    .expect("queue");
    let steered = within(
        "send steer",
        engine.send_producer_message(session_id, &producer, ProducerMessageMode::Steer, "s", "steer note"),
    )
    .await
    .expect("steer");

    finish_tool(&client, &run_id, &tool_call_id).await;
    let events = events_until_runs_end(&mut deliveries, 2).await;
    let first_end = position(&events, is_terminal);
    let (first, second) = events.split_at(first_end + 1);

    // The steer message entered the active run at its boundary (after the tool), as a submitted input.
    let tool_done = position(first, |e| matches!(e.payload, EventPayload::ToolCallTerminated { .. }));
    let claim = position(first, |e| claimed(e, &run_id, &steered.message_id));
    let submitted = position(first, |e| {
        matches!(&e.payload, EventPayload::UserInputSubmitted { input_id, input, .. }
            if *input_id == steered.message_id && input == "steer note")
    });
    let turn = first.iter().rposition(|e| matches!(e.payload, EventPayload::ModelTurnCommitted { .. })).unwrap();
    let consume = position(first, |e| consumed(e, &steered.message_id));
    assert!(tool_done < claim && claim < submitted && submitted < turn && turn < consume, "{:?}", kinds(first));
    assert_eq!(first[submitted].origin.as_deref(), Some(PRODUCER_ORIGIN));
    assert!(
        !first.iter().any(|e| claimed(e, &run_id, &queued.message_id)),
        "the queue message is not delivered to the active run"
    );
    assert!(matches!(first[first_end].payload, EventPayload::RunCompleted { .. }));

    // The queue message waited for the end, then woke the next run, with the latest run's selection.
    let runs = runs_started(second);
    assert_eq!(runs.len(), 1);
    let (woken, origin, input) = &runs[0];
    assert_eq!((origin.as_deref(), input.as_str()), (Some(PRODUCER_ORIGIN), "queued note"));
    let EventPayload::RunStarted { selection, .. } =
        &second[position(second, |e| e.run_id.as_ref() == Some(woken))].payload
    else {
        panic!("run_started first")
    };
    assert_eq!(selection.model.model, "local/scripted");
    assert!(second.iter().any(|e| claimed(e, woken, &queued.message_id)));
    assert!(second.iter().any(|e| consumed(e, &queued.message_id)));
    let EventPayload::RunCompleted { final_text } = &second.last().unwrap().payload else { panic!() };
    assert_eq!(final_text.as_deref(), Some("answered the queued message"));
}

#[tokio::test]
async fn discard_works_after_unregister_and_is_idempotent() {
    let daemon = TestDaemon::start();
    let Busy { client, mut deliveries, session_id, run_id, tool_call_id } = busy_session(&daemon).await;
    let session_id = session_id.as_str();

    let engine = daemon.engine();
    let producer = engine.register_producer(session_id, notify()).await.expect("register");
    let withdrawn = engine
        .send_producer_message(session_id, &producer, ProducerMessageMode::Queue, "d", "to withdraw")
        .await
        .expect("send");
    assert!(engine.unregister_producer(session_id, &producer));
    assert!(!engine.unregister_producer(session_id, &producer), "already gone");
    let gone = engine
        .send_producer_message(session_id, &producer, ProducerMessageMode::Queue, "d2", "late")
        .await
        .unwrap_err();
    assert_eq!(RpcError::from(gone).typed_code(), Some("producer_not_found"));

    // After unregister, the owner still withdraws its message; a second discard is answered without an event.
    let discard = |owner: ProducerOwner, message_id: String| async move {
        within("discard", engine.discard_producer_message(session_id, &owner, &message_id)).await
    };
    assert_eq!(discard(notify(), withdrawn.message_id.clone()).await.unwrap(), DiscardOutcome::Discarded);
    assert_eq!(discard(notify(), withdrawn.message_id.clone()).await.unwrap(), DiscardOutcome::AlreadyDiscarded);
    let other = ProducerOwner::Plugin { plugin: "other".into() };
    let not_theirs = discard(other, withdrawn.message_id.clone()).await.unwrap_err();
    assert_eq!(RpcError::from(not_theirs).typed_code(), Some("producer_message_not_found"));
    let unknown = discard(notify(), "no-such-message".into()).await.unwrap_err();
    assert!(matches!(unknown, EngineError::ProducerMessageNotFound { .. }));

    finish_tool(&client, &run_id, &tool_call_id).await;
    let first = events_until(&mut deliveries, is_terminal).await;
    assert!(first.iter().any(|e| matches!(&e.payload,
        EventPayload::ProducerMessageDiscarded { message_id } if *message_id == withdrawn.message_id)));

    // The discarded message is never delivered: the next message wakes a run with its own text only.
    let fresh_producer = engine.register_producer(session_id, notify()).await.expect("register again");
    let fresh = engine
        .send_producer_message(session_id, &fresh_producer, ProducerMessageMode::Queue, "f", "fresh note")
        .await
        .expect("send");
    let second = events_until(&mut deliveries, is_terminal).await;
    let runs = runs_started(&second);
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].2, "fresh note");
    assert!(second.iter().any(|e| claimed(e, &runs[0].0, &fresh.message_id)));
    // A consumed message can no longer be withdrawn.
    assert_eq!(discard(notify(), fresh.message_id.clone()).await.unwrap(), DiscardOutcome::AlreadyDelivered);
}

fn stored(session_id: &str, seq: u64, run_id: Option<&str>, origin: Option<&str>, payload: EventPayload) -> String {
    let event = StoredEvent {
        session_id: session_id.to_owned(),
        run_id: run_id.map(str::to_owned),
        seq,
        timestamp: format!("2026-01-01T00:00:{seq:02}.000Z"),
        origin: origin.map(str::to_owned),
        payload,
    };
    serde_json::to_string(&event).expect("encode")
}

#[tokio::test]
async fn claims_left_by_a_crash_are_released_and_delivered_once() {
    // The log a daemon leaves when it dies while a woken run has claimed a message and not consumed it.
    let data_dir = tempfile::tempdir().expect("data dir");
    let session_id = troupe_runtime::clock::new_id();
    let sid = session_id.as_str();
    let crashed_run = "00000000-0000-0000-0000-0000000000aa";
    let lines = [
        session_created_line(sid, json!({"type": "root"})),
        stored(
            sid,
            2,
            None,
            Some("plugin:notify"),
            EventPayload::ProducerMessageAccepted {
                message_id: "m1".into(),
                producer_owner: notify(),
                mode: ProducerMessageMode::Queue,
                idempotency_key: "k".into(),
                body: "left over".into(),
            },
        ),
        stored(
            sid,
            3,
            Some(crashed_run),
            Some(PRODUCER_ORIGIN),
            EventPayload::RunStarted {
                client_run_id: "producer:x".into(),
                selection: echo_selection(),
                input: "left over".into(),
                fallback_index: 0,
                model_chain: Vec::new(),
                reset_fallback: false,
                skill: None,
                requested_model: None,
                attachments: Vec::new(),
            },
        ),
        stored(
            sid,
            4,
            Some(crashed_run),
            Some(PRODUCER_ORIGIN),
            EventPayload::ProducerMessagesClaimed { message_ids: vec!["m1".into()] },
        ),
    ];
    write_session_log(data_dir.path(), sid, &lines.iter().map(|line| format!("{line}\n")).collect::<Vec<_>>());

    // The daemon opens the session that was running: the run is interrupted, the claim released, and the message
    // wakes one new run.
    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..Default::default() });
    let (client, mut deliveries) = daemon.client().await;
    client.subscribe(sid, None).await.expect("subscribe");
    let events = events_until(&mut deliveries, |e| {
        matches!(e.payload, EventPayload::RunCompleted { .. } | EventPayload::RunFailed { .. })
    })
    .await;
    let interrupted = position(&events, |e| matches!(e.payload, EventPayload::RunInterrupted { .. }));
    let released = position(
        &events,
        |e| matches!(&e.payload, EventPayload::ProducerMessagesReleased { message_ids, .. } if message_ids == &["m1"]),
    );
    assert!(interrupted < released);
    let runs: Vec<_> = runs_started(&events).into_iter().filter(|(run_id, _, _)| run_id != crashed_run).collect();
    assert_eq!(runs.len(), 1, "delivered once");
    assert_eq!(runs[0].2, "left over");
    assert!(events.iter().any(|e| claimed(e, &runs[0].0, "m1")));
    assert!(events.iter().any(|e| consumed(e, "m1")));
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCompleted { .. }));
    drop(client);
    let data_dir = daemon.stop();

    // Another restart delivers nothing again: the next run woken holds only the next message.
    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..Default::default() });
    let (client, mut deliveries) = daemon.client().await;
    let engine = daemon.engine();
    let producer = engine.register_producer(sid, notify()).await.expect("register after restart");
    let barrier =
        engine.send_producer_message(sid, &producer, ProducerMessageMode::Queue, "k2", "barrier").await.expect("send");
    client.subscribe(sid, Some(barrier.seq - 1)).await.expect("subscribe");
    let events = events_until(&mut deliveries, is_terminal).await;
    let runs = runs_started(&events);
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].2, "barrier");
}

#[test]
fn watch_renders_producer_events() {
    let accepted = EventPayload::ProducerMessageAccepted {
        message_id: "m1".into(),
        producer_owner: notify(),
        mode: ProducerMessageMode::Steer,
        idempotency_key: "k".into(),
        body: "the build failed".into(),
    };
    let describe = troupe::render::describe;
    assert_eq!(describe(&accepted).as_deref(), Some("message from plugin notify (steer): the build failed"));
    let claimed = EventPayload::ProducerMessagesClaimed { message_ids: vec!["m1".into(), "m2".into()] };
    assert_eq!(describe(&claimed).as_deref(), Some("2 producer messages delivered to the run"));
    let released = EventPayload::ProducerMessagesReleased { message_ids: vec!["m1".into()], reason: "restart".into() };
    assert_eq!(describe(&released).as_deref(), Some("1 producer message(s) pending again: restart"));
    assert_eq!(describe(&EventPayload::ProducerMessageConsumed { message_id: "m1".into() }), None);
    let discarded = EventPayload::ProducerMessageDiscarded { message_id: "m1".into() };
    assert_eq!(describe(&discarded).as_deref(), Some("producer message m1 withdrawn"));
}

#[tokio::test]
async fn a_daemon_stopped_while_a_woken_run_waits_for_its_model_delivers_the_message_once_more() {
    let daemon = TestDaemon::start();
    let (client, mut deliveries) = daemon.client().await;
    // The model of the woken run answers only after a minute: the daemon stops before its turn commits.
    let script = daemon.data_path().join("producer-script.json");
    std::fs::write(&script, json!({"turns": [{"text": "too late", "delay_ms": 60_000}]}).to_string()).unwrap();
    connect_provider(&client, "local", &[("script", script.to_str().unwrap())], None).await.expect("connect");
    let session = within(
        "session.create",
        client.call::<method::SessionCreate>(troupe_protocol::types::session::SessionCreateParams {
            selection: selection_of("default", "local/scripted"),
            cwd: Some(daemon.project_path().to_string_lossy().into_owned()),
        }),
    )
    .await
    .expect("session.create")
    .session;
    let session_id = session.session_id.clone();
    client.subscribe(&session_id, None).await.expect("subscribe");
    let engine = daemon.engine();
    let producer = engine.register_producer(&session_id, notify()).await.expect("register");
    let sent = engine
        .send_producer_message(&session_id, &producer, ProducerMessageMode::Queue, "k", "slow note")
        .await
        .expect("send");
    let before = events_until(&mut deliveries, |e| matches!(e.payload, EventPayload::ModelAttemptStarted { .. })).await;
    let (first_run, _, _) = runs_started(&before).pop().expect("a woken run");
    assert!(before.iter().any(|e| claimed(e, &first_run, &sent.message_id)));
    drop((client, deliveries));
    let data_dir = daemon.stop();

    // After the restart the model answers at once; the message reaches one new run, and only one.
    std::fs::write(&script, json!({"turns": [{"text": "handled the note"}]}).to_string()).unwrap();
    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..Default::default() });
    let (client, mut deliveries) = daemon.client().await;
    client.subscribe(&session_id, None).await.expect("subscribe");
    let events = events_until(&mut deliveries, |e| matches!(e.payload, EventPayload::RunCompleted { .. })).await;
    assert!(
        events.iter().any(|e| e.run_id.as_deref() == Some(first_run.as_str())
            && matches!(e.payload, EventPayload::RunInterrupted { .. }))
    );
    assert!(events.iter().any(|e| matches!(&e.payload,
        EventPayload::ProducerMessagesReleased { message_ids, .. } if *message_ids == [sent.message_id.clone()])));
    let runs = runs_started(&events);
    assert_eq!(runs.len(), 2, "the interrupted run and one redelivery: {runs:?}");
    let (second_run, origin, input) = &runs[1];
    assert_eq!((origin.as_deref(), input.as_str()), (Some(PRODUCER_ORIGIN), "slow note"));
    assert!(events.iter().any(|e| claimed(e, second_run, &sent.message_id)));
    assert!(events.iter().any(|e| consumed(e, &sent.message_id)));
    let EventPayload::RunCompleted { final_text } = &events.last().unwrap().payload else { unreachable!() };
    assert_eq!(final_text.as_deref(), Some("handled the note"));
    assert!(has_no_registrations(&daemon, &session_id).await, "registrations do not survive a restart");
}

async fn has_no_registrations(daemon: &TestDaemon, session_id: &str) -> bool {
    let (client, _deliveries) = daemon.client().await;
    let listed = client
        .call::<method::SessionProducers>(SessionIdParams { session_id: session_id.into() })
        .await
        .expect("session.producers");
    listed.producers.is_empty()
}

#[tokio::test]
async fn a_send_past_the_session_backlog_is_refused_with_nothing_written() {
    use troupe_runtime::producer_book::{MAX_HELD_BYTES, MAX_HELD_MESSAGES};
    let daemon = TestDaemon::start();
    let Busy { client, deliveries: _deliveries, session_id, .. } = busy_session(&daemon).await;
    let session_id = session_id.as_str();

    let engine = daemon.engine();
    let producer = engine.register_producer(session_id, notify()).await.expect("register");
    let send = |key: String, body: String| {
        let producer = producer.clone();
        async move {
            within("send", engine.send_producer_message(session_id, &producer, ProducerMessageMode::Queue, &key, &body))
                .await
        }
    };
    let last_seq = || async {
        let meta = client.call::<method::SessionGet>(SessionIdParams { session_id: session_id.into() }).await;
        meta.expect("session.get").session.last_event_seq
    };

    // Bytes: the run is busy, so every message waits; the bodies fill the byte bound exactly.
    let big = 1024 * 1024;
    let mut held = Vec::new();
    for n in 0..MAX_HELD_BYTES / big {
        held.push(send(format!("big{n}"), "x".repeat(big)).await.expect("within bounds"));
    }
    let before = last_seq().await;
    let full = send("one more".into(), "y".into()).await.unwrap_err();
    assert!(matches!(full, EngineError::ProducerBacklogFull { messages: 16, bytes, .. } if bytes == MAX_HELD_BYTES));
    let rpc = RpcError::from(full);
    assert_eq!(rpc.typed_code(), Some("producer_backlog_full"));
    assert_eq!(rpc.code, -32000);
    let data = rpc.data.expect("data");
    assert_eq!((data["max_messages"].as_u64(), data["max_bytes"].as_u64()), (Some(256), Some(16 * 1024 * 1024)));
    assert!(data["detail"].as_str().unwrap().contains("at most 256 messages"), "{data}");
    assert_eq!(last_seq().await, before, "a refused send writes nothing");
    // A retry of an accepted send is still answered with its receipt.
    let retry = send("big0".into(), "x".repeat(big)).await.expect("a retry");
    assert!(retry.replayed);

    // Count: with the big ones withdrawn, small messages fill the count bound.
    for receipt in &held {
        engine.discard_producer_message(session_id, &notify(), &receipt.message_id).await.expect("discard");
    }
    for n in 0..MAX_HELD_MESSAGES {
        send(format!("small{n}"), format!("note {n}")).await.expect("within bounds");
    }
    let before = last_seq().await;
    let full = send("small one more".into(), "z".into()).await.unwrap_err();
    assert!(matches!(full, EngineError::ProducerBacklogFull { messages, .. } if messages == MAX_HELD_MESSAGES));
    assert_eq!(last_seq().await, before, "a refused send writes nothing");
}

#[tokio::test]
async fn queued_messages_larger_than_the_input_limit_together_are_delivered_across_runs() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[limits]\nmax_input_bytes = 1000\n".into()),
        ..Default::default()
    });
    let (client, mut deliveries) = daemon.client().await;
    let mut turns = vec![
        json!({"tool_calls": [{"tool": "shell", "arguments": {"command": "read line; echo got $line"}}]}),
        json!({"text": "answered after the boundary"}),
    ];
    turns.extend((0..8).map(|n| json!({"text": format!("woken {n}")})));
    connect_script(&client, daemon.data_path(), json!({ "turns": turns })).await;
    let session = daemon.create_session(&client).await;
    let session_id = session.session_id.as_str();
    set_mode(&client, session_id, PermissionMode::Yolo).await;
    client.subscribe(session_id, None).await.expect("subscribe");
    let run_id = start_run(&client, session_id, selection_of("default", "local/scripted"), "start").await;
    let tool_call_id = tool_started(&mut deliveries).await;

    let engine = daemon.engine();
    let producer = engine.register_producer(session_id, notify()).await.expect("register");
    // Ten bodies of 300 bytes: three fit in 1000 bytes with their separators, four do not.
    let bodies: Vec<String> = (0..10).map(|n| format!("{n}").repeat(300)).collect();
    let mut ids = Vec::new();
    for (n, body) in bodies.iter().enumerate() {
        let receipt = engine
            .send_producer_message(session_id, &producer, ProducerMessageMode::Queue, &format!("k{n}"), body)
            .await
            .expect("send");
        ids.push(receipt.message_id);
    }

    finish_tool(&client, &run_id, &tool_call_id).await;
    let events = events_until_runs_end(&mut deliveries, 5).await;
    let runs = runs_started(&events);
    let woken: Vec<&(String, Option<String>, String)> =
        runs.iter().filter(|(_, origin, _)| origin.as_deref() == Some(PRODUCER_ORIGIN)).collect();
    assert_eq!(woken.len(), 4, "{:?}", kinds(&events));
    let per_run: Vec<usize> = woken.iter().map(|(_, _, input)| input.split("\n\n").count()).collect();
    assert_eq!(per_run, [3, 3, 3, 1]);
    assert!(woken.iter().all(|(_, _, input)| input.len() <= 1000));
    let delivered: Vec<String> =
        woken.iter().flat_map(|(_, _, input)| input.split("\n\n").map(str::to_owned).collect::<Vec<_>>()).collect();
    assert_eq!(delivered, bodies, "every message once, oldest first");
    for id in &ids {
        let claims = events.iter().filter(|e| {
            matches!(&e.payload,
            EventPayload::ProducerMessagesClaimed { message_ids } if message_ids.contains(id))
        });
        assert_eq!(claims.count(), 1);
        assert_eq!(events.iter().filter(|e| consumed(e, id)).count(), 1);
    }
    assert!(events.iter().filter(|e| is_terminal(e)).all(|e| matches!(e.payload, EventPayload::RunCompleted { .. })));
}
