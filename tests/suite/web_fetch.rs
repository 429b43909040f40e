//! `web_fetch` through the real daemon: a page served on loopback by a real HTTP server reaches the model's next
//! request as Markdown; the call is a `network` permission on the host, so it asks in `ask` mode and does not under
//! an allow rule for that host; the sandbox's `network = false` refuses it without asking; and an address of this
//! machine or its network (written in the URL, or what a name resolves to) is refused even in `yolo` unless
//! `[tools] web_fetch_local` allows it.

use serde_json::json;
use troupe_protocol::client::{Client, Deliveries};
use troupe_protocol::types::approval::PermissionAction;
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::run::ToolResultStatus;
use troupe_protocol::types::session::PermissionMode;
use troupe_test_support::replies::{models_list, openai_text, openai_tool_call};
use troupe_test_support::{FakeResponse, FakeServer};

use super::support::*;

const PAGE: &str = "<!doctype html><html><head><title>Notes</title><script>var hidden = 1;</script></head>\
    <body><h1>Release 2.0</h1><p>The <b>frobnicator</b> now <a href=\"/docs\">documents</a> itself.</p></body></html>";

/// A page server on loopback answering `PAGE` as HTML (once per response given), and the model vendor scripted to
/// fetch it and then answer "done".
async fn servers(pages: usize) -> (FakeServer, FakeServer, String) {
    let responses =
        (0..pages).map(|_| FakeResponse::status(200, &[("Content-Type", "text/html; charset=utf-8")], PAGE));
    let site = FakeServer::start(responses.collect()).await;
    let url = format!("{}/notes.html", site.base_url);
    let vendor = FakeServer::start(vec![
        models_list(&["coder"]),
        openai_tool_call("web_fetch", json!({"url": url})),
        openai_text("done"),
    ])
    .await;
    (site, vendor, url)
}

async fn session(daemon: &TestDaemon, vendor: &FakeServer, mode: PermissionMode) -> (Client, Deliveries, String) {
    let (client, mut deliveries) = daemon.client().await;
    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", vendor.base_url))], Some("k")).await.unwrap();
    let session_id = daemon.create_session(&client).await.session_id;
    set_mode(&client, &session_id, mode).await;
    within("subscribe", client.subscribe(&session_id, None)).await.expect("subscribe");
    let _ = &mut deliveries;
    (client, deliveries, session_id)
}

fn results(events: &[StoredEvent]) -> Vec<(ToolResultStatus, String)> {
    tool_results(events).into_iter().map(|result| (result.status, result.output)).collect()
}

fn approvals(events: &[StoredEvent]) -> Vec<troupe_protocol::types::approval::ApprovalRecord> {
    events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::ApprovalRequested { approval } => Some((**approval).clone()),
            _ => None,
        })
        .collect()
}

/// The page's text as the second chat request carried it back to the model (the tool message).
fn tool_message_sent(vendor: &FakeServer) -> String {
    let bodies = vendor.bodies_to("/chat/completions");
    assert_eq!(bodies.len(), 2, "one request to call the tool, one with its result");
    let messages = bodies[1]["messages"].as_array().expect("messages").clone();
    let tool = messages.iter().find(|message| message["role"] == "tool").expect("a tool message");
    tool["content"].as_str().expect("text").to_owned()
}

/// The page server is on loopback: these daemons let `web_fetch` reach it.
fn local_fetches() -> DaemonSetup {
    DaemonSetup { config_toml: Some("[tools]\nweb_fetch_local = true\n".into()), ..DaemonSetup::default() }
}

#[tokio::test]
async fn an_allow_rule_for_the_host_fetches_without_asking_and_the_page_reaches_the_model_as_markdown() {
    let (site, vendor, url) = servers(1).await;
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some(
            "[tools]\nweb_fetch_local = true\n[permissions]\nrules = [{ effect = \"allow\", action = \"network\", \
             resource = \"127.0.0.1\" }]\n"
                .into(),
        ),
        ..DaemonSetup::default()
    });
    let (client, mut deliveries, session_id) = session(&daemon, &vendor, PermissionMode::Ask).await;
    start_run(&client, &session_id, selection_of("default", "openai/coder"), "read the notes").await;
    let events = events_until(&mut deliveries, is_terminal).await;

    assert!(approvals(&events).is_empty(), "the rule allows the host: {events:#?}");
    let started = events.iter().find_map(|event| match &event.payload {
        EventPayload::ToolCallStarted { action, resource, .. } => Some((*action, resource.clone())),
        _ => None,
    });
    assert_eq!(started, Some((PermissionAction::Network, "127.0.0.1".to_owned())));
    let results = results(&events);
    assert_eq!(results.len(), 1, "{results:?}");
    let (status, output) = &results[0];
    assert_eq!(*status, ToolResultStatus::Ok, "{output}");
    let expected = format!(
        "URL: {url}\nStatus: 200 OK\nContent-Type: text/html; charset=utf-8\n\n# Release 2.0\n\nThe **frobnicator** \
         now [documents](/docs) itself."
    );
    assert_eq!(output, &expected);
    assert_eq!(tool_message_sent(&vendor), expected);
    let requests = site.requests();
    assert_eq!((requests.len(), requests[0].method.as_str(), requests[0].path.as_str()), (1, "GET", "/notes.html"));
    assert!(requests[0].header("user-agent").is_some_and(|agent| agent.starts_with("troupe/")));
}

#[tokio::test]
async fn in_ask_mode_a_fetch_waits_for_approval_of_its_host_then_runs() {
    let (site, vendor, url) = servers(1).await;
    let daemon = TestDaemon::start_with(local_fetches());
    let (client, mut deliveries, session_id) = session(&daemon, &vendor, PermissionMode::Ask).await;
    start_run(&client, &session_id, selection_of("default", "openai/coder"), "read the notes").await;
    let events =
        events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::ApprovalRequested { .. })).await;
    let approval = approvals(&events).pop().expect("an approval");
    assert_eq!(
        (approval.operation.tool.as_str(), approval.operation.action, approval.operation.resource.as_str()),
        ("web_fetch", PermissionAction::Network, "127.0.0.1")
    );
    assert_eq!(approval.operation.summary, format!("fetch {url}"));
    assert!(site.requests().is_empty(), "nothing is fetched before the answer");

    approve_once(&client, &approval).await;
    let events = events_until(&mut deliveries, is_terminal).await;
    let results = results(&events);
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0].0, ToolResultStatus::Ok, "{}", results[0].1);
    assert!(tool_message_sent(&vendor).contains("# Release 2.0"));
    assert_eq!(site.requests().len(), 1);
}

#[tokio::test]
async fn with_the_sandbox_s_network_off_a_fetch_is_refused_without_asking_or_connecting() {
    let (site, vendor, _url) = servers(1).await;
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[sandbox]\nnetwork = false\n".into()),
        ..DaemonSetup::default()
    });
    let (client, mut deliveries, session_id) = session(&daemon, &vendor, PermissionMode::Ask).await;
    start_run(&client, &session_id, selection_of("default", "openai/coder"), "read the notes").await;
    let events = events_until(&mut deliveries, is_terminal).await;
    assert!(approvals(&events).is_empty(), "a call the sandbox refuses is not asked about: {events:#?}");
    let results = results(&events);
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0].0, ToolResultStatus::Denied);
    assert!(results[0].1.contains("its network is off (`[sandbox] network = false`"), "{}", results[0].1);
    assert!(site.requests().is_empty(), "nothing was fetched");
    let prompt = vendor.bodies_to("/chat/completions")[0]["messages"][0]["content"].as_str().unwrap().to_owned();
    assert!(prompt.contains("Network: off"), "{prompt}");
}

#[tokio::test]
async fn a_local_address_is_refused_even_in_yolo_whether_written_or_resolved() {
    let site = FakeServer::start(vec![FakeResponse::status(200, &[("Content-Type", "text/plain")], "secret")]).await;
    let written = format!("{}/latest/meta-data", site.base_url);
    let resolved = written.replace("127.0.0.1", "localhost");
    assert_ne!(written, resolved, "{written}");
    let vendor = FakeServer::start(vec![
        models_list(&["coder"]),
        openai_tool_call("web_fetch", json!({"url": written})),
        openai_tool_call("web_fetch", json!({"url": resolved})),
        openai_text("done"),
    ])
    .await;
    let daemon = TestDaemon::start();
    let (client, mut deliveries, session_id) = session(&daemon, &vendor, PermissionMode::Yolo).await;
    start_run(&client, &session_id, selection_of("default", "openai/coder"), "fetch it").await;
    let events = events_until(&mut deliveries, is_terminal).await;
    let results = results(&events);
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(results[0].0, ToolResultStatus::Denied, "{}", results[0].1);
    for (_, output) in &results {
        assert!(output.contains("web_fetch_local = true"), "says how to allow it: {output}");
        assert!(output.contains("127.0.0.1") || output.contains("::1"), "names the address: {output}");
    }
    assert!(site.requests().is_empty(), "nothing reached the local server");
}
