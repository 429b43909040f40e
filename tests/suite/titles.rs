//! Automatic session titles over the real wire: the session's model names a root session from its first input
//! (the request's prompt and input checked at the fake OpenAI vendor, its usage recorded with purpose `title`);
//! the first line of the input instead when the model fails, for `local/*` models, with `[titles] auto = false`
//! and for delegated sessions; a client's title wins over one still being asked for; `reset` returns to the
//! automatic title; a restart does not title a session again.

use serde_json::{Value, json};
use troupe_protocol::client::{Client, Deliveries};
use troupe_protocol::method;
use troupe_protocol::types::common::{SessionIdParams, SessionMeta};
use troupe_protocol::types::events::{EventPayload, StoredEvent, TitleChangeKind, UsagePurpose};
use troupe_protocol::types::run::RunIdParams;
use troupe_protocol::types::session::{SessionRenameParams, TitleChange};
use troupe_runtime::title::TITLE_SYSTEM_PROMPT;

use super::support::*;
use troupe_test_support::replies::{models_list, openai_error, openai_text_reporting};
use troupe_test_support::{FakeResponse, FakeServer};

const MODEL: &str = "openai/gpt-t";
const AUTO_ON: &str = "[titles]\nauto = true\n";

async fn connect_vendor(client: &Client, vendor: &FakeServer) {
    connect_provider(client, "openai", &[("base_url", &format!("{}/v1", vendor.base_url))], Some("sk-test"))
        .await
        .expect("connect the fake vendor");
}

fn daemon_with(config: &str) -> TestDaemon {
    TestDaemon::start_with(DaemonSetup { config_toml: Some(config.to_owned()), ..Default::default() })
}

/// The chat requests the vendor received, as JSON bodies.
fn chat_requests(vendor: &FakeServer) -> Vec<Value> {
    vendor.bodies_to("/chat/completions")
}

/// Whether a chat request is a title request (its system message is the title prompt).
fn is_title_request(body: &Value) -> bool {
    body["messages"][0]["role"] == json!("system") && body["messages"][0]["content"] == json!(TITLE_SYSTEM_PROMPT)
}

async fn get(client: &Client, session_id: &str) -> SessionMeta {
    let params = SessionIdParams { session_id: session_id.to_owned() };
    within("session.get", client.call::<method::SessionGet>(params)).await.expect("session.get").session
}

async fn rename(client: &Client, session_id: &str, change: TitleChange) -> SessionMeta {
    let params = SessionRenameParams {
        session_id: session_id.to_owned(),
        client_rename_id: troupe_runtime::clock::new_id(),
        change,
    };
    within("session.rename", client.call::<method::SessionRename>(params)).await.expect("session.rename").session
}

fn is_auto_title(event: &StoredEvent) -> bool {
    matches!(event.payload, EventPayload::SessionTitleCommitted { change: TitleChangeKind::Auto, .. })
}

fn auto_titles(events: &[StoredEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::SessionTitleCommitted { title, change: TitleChangeKind::Auto, .. } => title.clone(),
            _ => None,
        })
        .collect()
}

/// Waits until both the run has ended and the automatic title is committed (in either order).
async fn run_and_title(deliveries: &mut Deliveries) -> Vec<StoredEvent> {
    let (mut ended, mut titled) = (false, false);
    events_until(deliveries, |event| {
        ended |= is_terminal(event);
        titled |= is_auto_title(event);
        ended && titled
    })
    .await
}

/// Every event of a session's log, from a fresh subscription.
async fn whole_log(daemon: &TestDaemon, session_id: &str) -> Vec<StoredEvent> {
    let (client, mut deliveries) = daemon.client().await;
    let last = get(&client, session_id).await.last_event_seq;
    client.subscribe(session_id, None).await.expect("subscribe");
    events_until(&mut deliveries, |event| event.seq == last).await
}

#[tokio::test]
async fn the_model_titles_a_first_run_and_its_usage_counts_as_title() {
    // The run and the title request go out together, in either order: both get the same answer.
    let usage = json!({"prompt_tokens": 30, "completion_tokens": 4});
    let vendor = FakeServer::start(vec![
        models_list(&["gpt-t"]),
        openai_text_reporting("Fix the flaky parser test", usage.clone()),
        openai_text_reporting("Fix the flaky parser test", usage),
    ])
    .await;
    let daemon = daemon_with(AUTO_ON);
    let (client, mut deliveries) = daemon.client().await;
    connect_vendor(&client, &vendor).await;
    let id = daemon.create_session(&client).await.session_id;
    client.subscribe(&id, None).await.expect("subscribe");
    let input = format!("the parser test fails one time in ten\n{}", "x".repeat(4000));
    start_run(&client, &id, selection_of("default", MODEL), &input).await;
    let events = run_and_title(&mut deliveries).await;

    assert_eq!(auto_titles(&events), ["Fix the flaky parser test"]);
    let titled = events.iter().find(|event| is_auto_title(event)).unwrap();
    assert_eq!((titled.run_id.as_deref(), titled.origin.as_deref()), (None, Some("engine:title")));
    assert_eq!(events.iter().filter(|e| matches!(e.payload, EventPayload::RunStarted { .. })).count(), 1);
    assert_eq!(get(&client, &id).await.title.as_deref(), Some("Fix the flaky parser test"));

    // The request: the fixed prompt and the input's first 2 KiB, no tools.
    let requests = chat_requests(&vendor);
    assert_eq!(requests.len(), 2, "the run's and the title's");
    let title_request = requests.iter().find(|body| is_title_request(body)).expect("a title request");
    assert_eq!(title_request["model"], json!("gpt-t"));
    let asked = title_request["messages"][1]["content"].as_str().expect("the input as text");
    assert_eq!(asked, &input[..2048]);
    assert!(title_request.get("tools").is_none_or(|tools| tools.as_array().is_some_and(Vec::is_empty)));

    // Its usage: recorded with purpose `title`, attributed to the run's agent, and counted by `session.usage`.
    let title_usage: Vec<&EventPayload> = events
        .iter()
        .map(|event| &event.payload)
        .filter(|payload| matches!(payload, EventPayload::ModelUsageRecorded { purpose: UsagePurpose::Title, .. }))
        .collect();
    assert!(
        matches!(title_usage[..], [EventPayload::ModelUsageRecorded { input_tokens: 30, output_tokens: 4, agent, .. }]
            if agent == "default"),
        "{title_usage:?}"
    );
    let params = SessionIdParams { session_id: id.clone() };
    let usage = within("session.usage", client.call::<method::SessionUsage>(params)).await.expect("session.usage");
    assert_eq!((usage.usage.totals.request_count, usage.usage.totals.input_tokens), (2, 60), "{usage:?}");

    // A second run asks for no title.
    start_run(&client, &id, selection_of("default", MODEL), "and now?").await;
    events_until(&mut deliveries, is_terminal).await;
    assert_eq!(chat_requests(&vendor).iter().filter(|body| is_title_request(body)).count(), 1);
}

#[tokio::test]
async fn without_a_model_answer_the_title_is_the_inputs_first_line() {
    // Both requests fail (a 400 is not retried): the run fails, and the title falls back.
    let vendor = FakeServer::start(vec![
        models_list(&["gpt-t"]),
        openai_error(400, "bad request"),
        openai_error(400, "bad request"),
    ])
    .await;
    let daemon = daemon_with(AUTO_ON);
    let (client, mut deliveries) = daemon.client().await;
    connect_vendor(&client, &vendor).await;
    let id = daemon.create_session(&client).await.session_id;
    client.subscribe(&id, None).await.expect("subscribe");
    let input = "\n  Please refactor the configuration loader so that unknown keys are reported with their line\nmore";
    start_run(&client, &id, selection_of("default", MODEL), input).await;
    let events = run_and_title(&mut deliveries).await;
    assert_eq!(auto_titles(&events), ["Please refactor the configuration loader so that unknown…"]);
    assert!(chat_requests(&vendor).iter().any(is_title_request), "the model was asked");
    assert!(!events.iter().any(|e| matches!(e.payload, EventPayload::ModelUsageRecorded { .. })));
}

#[tokio::test]
async fn local_models_and_auto_off_take_the_first_line_without_asking() {
    // `local/echo` would only echo the input back: the first line is used directly.
    let daemon = daemon_with(AUTO_ON);
    let (client, mut deliveries) = daemon.client().await;
    let id = daemon.create_session(&client).await.session_id;
    client.subscribe(&id, None).await.expect("subscribe");
    start_run(&client, &id, echo_selection(), "hello \u{1b}[31mworld\u{7}\nsecond line").await;
    let events = run_and_title(&mut deliveries).await;
    assert_eq!(auto_titles(&events), ["hello [31mworld"]);

    // `[titles] auto = false`: no title request reaches the vendor.
    let vendor = FakeServer::start(vec![
        models_list(&["gpt-t"]),
        openai_text_reporting("an answer", json!({"prompt_tokens": 1})),
        openai_text_reporting("a title", json!({"prompt_tokens": 1})),
    ])
    .await;
    let daemon = daemon_with("[titles]\nauto = false\n");
    let (client, mut deliveries) = daemon.client().await;
    connect_vendor(&client, &vendor).await;
    let id = daemon.create_session(&client).await.session_id;
    client.subscribe(&id, None).await.expect("subscribe");
    start_run(&client, &id, selection_of("default", MODEL), "summarize the README").await;
    let events = run_and_title(&mut deliveries).await;
    assert_eq!(auto_titles(&events), ["summarize the README"]);
    assert_eq!(chat_requests(&vendor).len(), 1, "only the run's request");
}

#[tokio::test]
async fn a_clients_title_wins_over_one_still_being_asked_for() {
    // Both requests are held open: the run's and the title's.
    let partial = format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": {"content": "Partial"}, "finish_reason": null}]})
    );
    let held = FakeResponse::SseThenHold { pieces: vec![partial] };
    let vendor = FakeServer::start(vec![models_list(&["gpt-t"]), held.clone(), held]).await;
    let daemon = daemon_with(AUTO_ON);
    let (client, mut deliveries) = daemon.client().await;
    connect_vendor(&client, &vendor).await;
    let id = daemon.create_session(&client).await.session_id;
    client.subscribe(&id, None).await.expect("subscribe");
    let run_id = start_run(&client, &id, selection_of("default", MODEL), "a slow question").await;
    eventually("both requests reach the vendor", || chat_requests(&vendor).len() == 2).await;

    let renamed = rename(&client, &id, TitleChange::Set { title: "Mine".into() }).await;
    assert_eq!(renamed.title.as_deref(), Some("Mine"));
    // The title request is dropped at once (the run's stays open).
    within("the title request is dropped", vendor.client_gone.notified()).await;
    within("run.cancel", client.call::<method::RunCancel>(RunIdParams { run_id })).await.expect("run.cancel");
    let mut events = events_until(&mut deliveries, is_terminal).await;
    // One more change after everything settled: no automatic title came in between.
    rename(&client, &id, TitleChange::Set { title: "Still mine".into() }).await;
    events.extend(
        events_until(&mut deliveries, |event| {
            matches!(&event.payload, EventPayload::SessionTitleCommitted { title: Some(t), .. } if t == "Still mine")
        })
        .await,
    );
    assert!(auto_titles(&events).is_empty(), "{events:?}");
    assert_eq!(get(&client, &id).await.title.as_deref(), Some("Still mine"));

    // A client's title set before the first run is kept too.
    let other = daemon.create_session(&client).await.session_id;
    rename(&client, &other, TitleChange::Set { title: "Named first".into() }).await;
    client.subscribe(&other, None).await.expect("subscribe");
    start_run(&client, &other, echo_selection(), "ignored for the title").await;
    events_until(&mut deliveries, |event| event.session_id == other && is_terminal(event)).await;
    assert_eq!(get(&client, &other).await.title.as_deref(), Some("Named first"));
}

#[tokio::test]
async fn reset_returns_to_the_automatic_title_and_a_restart_does_not_title_again() {
    let daemon = daemon_with(AUTO_ON);
    let (client, mut deliveries) = daemon.client().await;
    let id = daemon.create_session(&client).await.session_id;
    client.subscribe(&id, None).await.expect("subscribe");
    start_run(&client, &id, echo_selection(), "fix the build\nit fails on CI").await;
    run_and_title(&mut deliveries).await;
    assert_eq!(rename(&client, &id, TitleChange::Set { title: "Mine".into() }).await.title.as_deref(), Some("Mine"));
    let reset = rename(&client, &id, TitleChange::Reset).await;
    assert_eq!(reset.title.as_deref(), Some("fix the build"), "reset restores the automatic title");

    // A reset before any automatic title: untitled, and the next run titles the session.
    let fresh = daemon.create_session(&client).await.session_id;
    rename(&client, &fresh, TitleChange::Set { title: "Mine".into() }).await;
    assert_eq!(rename(&client, &fresh, TitleChange::Reset).await.title, None);
    client.subscribe(&fresh, None).await.expect("subscribe");
    start_run(&client, &fresh, echo_selection(), "write the docs").await;
    let events = events_until(&mut deliveries, |event| event.session_id == fresh && is_auto_title(event)).await;
    assert_eq!(auto_titles(&events), ["write the docs"]);
    drop((client, deliveries));

    // After a restart, both keep their titles and further runs ask for none.
    let data_dir = daemon.stop();
    let daemon = TestDaemon::start_with(DaemonSetup { data_dir: Some(data_dir), ..Default::default() });
    let (client, mut deliveries) = daemon.client().await;
    assert_eq!(get(&client, &id).await.title.as_deref(), Some("fix the build"));
    client.subscribe(&id, None).await.expect("subscribe");
    start_run(&client, &id, echo_selection(), "another thing").await;
    events_until(&mut deliveries, is_terminal).await;
    assert_eq!(auto_titles(&whole_log(&daemon, &id).await), ["fix the build"], "titled once");
    assert_eq!(get(&client, &id).await.title.as_deref(), Some("fix the build"));
}

#[tokio::test]
async fn a_delegated_session_is_titled_with_the_first_line_of_its_task() {
    let script = json!({
        "turns": [{"tool_calls": [{"tool": "delegate", "arguments": {"agent": "helper", "task": "count the files\nall of them"}}]},
                  {"text": "the parent is done"}],
        "by_input": {"count the files\nall of them": {"turns": [{"text": "three"}]}}
    });
    let daemon = daemon_with("[agents.helper]\nmodels = [\"local/scripted\"]\n[titles]\nauto = true\n");
    let (client, mut deliveries) = daemon.client().await;
    connect_script(&client, daemon.data_path(), script).await;
    let root = daemon.create_session(&client).await.session_id;
    set_mode(&client, &root, troupe_protocol::types::session::PermissionMode::Yolo).await;
    client.subscribe(&root, None).await.expect("subscribe");
    start_run(&client, &root, selection_of("default", "local/scripted"), "delegate the count").await;
    let events = events_until(&mut deliveries, is_terminal).await;
    let child = events
        .iter()
        .find_map(|event| match &event.payload {
            EventPayload::DelegateStarted { child_session_id, .. } => Some(child_session_id.clone()),
            _ => None,
        })
        .expect("a child");
    assert_eq!(get(&client, &root).await.title.as_deref(), Some("delegate the count"));
    assert_eq!(get(&client, &child).await.title.as_deref(), Some("count the files"));
    assert_eq!(auto_titles(&whole_log(&daemon, &child).await), ["count the files"]);
}
