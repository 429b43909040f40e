//! Plugins as real subprocesses: the example `file_watch.py`, and small inline Python plugins that misbehave.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use troupe_protocol::client::{ClientDelivery, Deliveries};
use troupe_protocol::method;
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::producers::PluginRecoveryStatus;
use troupe_protocol::types::run::ToolResultStatus;
use troupe_protocol::types::session::{SessionRenameParams, TitleChange};

use super::support::*;

/// The python3 the plugin runs with, by absolute path (a plugin's environment has no PATH).
pub(super) fn python3() -> PathBuf {
    let path = std::env::var_os("PATH").expect("PATH");
    std::env::split_paths(&path)
        .map(|dir| dir.join("python3"))
        .find(|candidate| candidate.is_file())
        .expect("python3 on PATH (scripts/test installs it)")
}

fn example_plugin() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/plugins/file_watch.py")
}

fn toml_string(value: &Path) -> String {
    serde_json::to_string(value.to_str().expect("utf-8 path")).expect("string")
}

/// A `[plugins.<name>]` section running `script` with `env`.
pub(super) fn plugin_section(name: &str, script: &Path, env: &[(&str, &Path)], extra: &str) -> String {
    let env: Vec<String> = env.iter().map(|(key, value)| format!("{key} = {}", toml_string(value))).collect();
    format!(
        "[plugins.{name}]\ncommand = {}\nargs = [{}]\nenv = {{ {} }}\n{extra}\n",
        toml_string(&python3()),
        toml_string(script),
        env.join(", ")
    )
}

pub(super) async fn wait_for_status(daemon: &TestDaemon, plugin: &str, status: PluginRecoveryStatus) {
    eventually(&format!("plugin {plugin} {status:?}"), || daemon.engine().plugins().status(plugin) == Some(status))
        .await;
}

/// The next `events.plugin` delivery and the durable `plugin_event_added` event, in whichever order they come
/// (the notification follows the event's durability; the event's own notification may be queued before it).
async fn next_plugin_event(deliveries: &mut Deliveries) -> (Value, StoredEvent) {
    within("an events.plugin notification and its event", async {
        let (mut notification, mut stored) = (None, None);
        while notification.is_none() || stored.is_none() {
            match deliveries.next().await.expect("deliveries open") {
                ClientDelivery::PluginEvent(params) => notification = Some(params),
                ClientDelivery::Live(event) if matches!(event.payload, EventPayload::PluginEventAdded { .. }) => {
                    stored = Some(event)
                }
                _ => {}
            }
        }
        (notification.unwrap(), stored.unwrap())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_plugin_offers_its_tool_and_its_events_reach_subscribed_clients_only() {
    let files = tempfile::tempdir().unwrap();
    let watched = files.path().join("app.log");
    std::fs::write(&watched, "old line\n").unwrap();
    let state = files.path().join("state.json");
    let config =
        plugin_section("file_watch", &example_plugin(), &[("WATCH_FILE", &watched), ("STATE_FILE", &state)], "");
    let daemon = TestDaemon::start_with(DaemonSetup { config_toml: Some(config), ..Default::default() });
    wait_for_status(&daemon, "file_watch", PluginRecoveryStatus::Ready).await;

    let (first, mut first_deliveries) = daemon.client().await;
    connect_script(
        &first,
        daemon.data_path(),
        json!({"turns": [{"tool_calls": [{"tool": "plugin__file_watch__watch", "arguments": {"mode": "queue"}}]}, {"text": "ok"}]}),
    )
    .await;
    let session = create_session_in(&first, daemon.project_path()).await;
    set_mode(&first, &session.session_id, troupe_protocol::types::session::PermissionMode::Yolo).await;
    first.subscribe(&session.session_id, None).await.expect("subscribe");
    start_run(&first, &session.session_id, selection_of("default", "local/scripted"), "watch the log").await;
    let events = events_until(&mut first_deliveries, is_terminal).await;
    let started = events.iter().find_map(|event| match &event.payload {
        EventPayload::ToolCallStarted { tool, resource, .. } => Some((tool.clone(), resource.clone())),
        _ => None,
    });
    assert_eq!(started, Some(("plugin__file_watch__watch".to_owned(), "plugin:file_watch/watch".to_owned())));
    let results = tool_results(&events);
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0].status, ToolResultStatus::Ok, "{}", results[0].output);
    assert!(results[0].output.starts_with("[file]\n") && results[0].output.contains("[status]\nwatching"));
    assert_eq!(results[0].display.as_deref(), Some("watching app.log"));

    let (second, mut second_deliveries) = daemon.client().await;
    second.subscribe(&session.session_id, None).await.expect("subscribe");
    let (third, mut third_deliveries) = daemon.client().await;
    let elsewhere = create_session_in(&third, daemon.project_path()).await;
    third.subscribe(&elsewhere.session_id, None).await.expect("subscribe");

    let mut file = std::fs::OpenOptions::new().append(true).open(&watched).unwrap();
    std::io::Write::write_all(&mut file, b"disk almost full\n").unwrap();
    for deliveries in [&mut first_deliveries, &mut second_deliveries] {
        let (event, stored) = next_plugin_event(deliveries).await;
        assert_eq!(event["session_id"], json!(session.session_id));
        assert_eq!((event["plugin"].as_str(), event["name"].as_str()), (Some("file_watch"), Some("line")));
        assert_eq!(event["payload"]["line"], "disk almost full");
        // The durable record reaches subscribers through the log as well.
        let EventPayload::PluginEventAdded { plugin, name, payload } = &stored.payload else { unreachable!() };
        assert_eq!(
            (plugin.as_str(), name.as_str(), &payload["line"]),
            ("file_watch", "line", &json!("disk almost full"))
        );
        assert_eq!(stored.origin.as_deref(), Some("plugin:file_watch"));
    }

    // The third client saw the plugin event's fan-out happen before anything it is sent next: a rename of its
    // own session arrives with no plugin event ahead of it.
    within(
        "rename",
        third.call::<method::SessionRename>(SessionRenameParams {
            session_id: elsewhere.session_id.clone(),
            client_rename_id: "r1".into(),
            change: TitleChange::Set { title: "elsewhere".into() },
        }),
    )
    .await
    .expect("rename");
    within("the third client's next event", async {
        loop {
            match third_deliveries.next().await.expect("deliveries open") {
                ClientDelivery::PluginEvent(params) => panic!("an unsubscribed client got {params}"),
                ClientDelivery::Live(event) if matches!(event.payload, EventPayload::SessionTitleCommitted { .. }) => {
                    return;
                }
                _ => {}
            }
        }
    })
    .await;
}

/// An inline plugin whose behaviour `MODE` picks. It appends `start <pid>` to `TRACE` when it starts and
/// `recovered` when it completes recovery, and `refused <code>` for each emit the daemon refuses.
const INLINE_PLUGIN: &str = r#"
import json, os, sys, threading, time
MODE = os.environ["MODE"]
TRACE = os.environ["TRACE"]
NAME = os.environ.get("NAME", "inline")
def trace(text):
    with open(TRACE, "a") as f:
        f.write(text + "\n")
lock = threading.Lock()
def send(message):
    message["jsonrpc"] = "2.0"
    with lock:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()
trace("start %d" % os.getpid())
if MODE == "crash":
    os._exit(1)
answers, arrived = {}, threading.Condition()
def ask(rid, method, params):
    send({"id": rid, "method": method, "params": params})
    with arrived:
        arrived.wait_for(lambda: rid in answers, timeout=20)
        return answers.get(rid, {})
def duplicates(session_id):
    producer = ask("reg", "plugin/producer/register", {"session_id": session_id})["result"]["producer_id"]
    message = {"session_id": session_id, "producer_id": producer, "mode": "queue", "idempotency_key": "k1", "body": "hello"}
    first = ask("s1", "plugin/producer/send", message)["result"]["message_id"]
    again = ask("s2", "plugin/producer/send", message)["result"]["message_id"]
    other = ask("s3", "plugin/producer/send", dict(message, body="other"))
    trace("sent %s %s %s" % (first, again, (other.get("error", {}).get("data") or {}).get("code")))
    gone = ask("u1", "plugin/producer/unregister", {"session_id": session_id, "producer_id": producer})["result"]
    discarded = ask("d1", "plugin/producer/discard", {"session_id": session_id, "message_id": first})["result"]
    trace("after unregister %s %s" % (gone["unregistered"], discarded["outcome"]))
for line in sys.stdin:
    message = json.loads(line)
    method, mid, params = message.get("method"), message.get("id"), message.get("params") or {}
    if method is None:
        error = message.get("error")
        if error:
            trace("refused %s" % (error.get("data") or {}).get("code"))
        with arrived:
            answers[mid] = message
            arrived.notify_all()
        continue
    if method == "plugin/initialize":
        if MODE == "silent":
            continue
        version = "0.0.5" if MODE == "wrong_version" else "0.0.6"
        tools = [{"name": "work", "description": "does work", "input_schema": {"type": "object"}}]
        name = "other" if MODE == "wrong_name" else NAME
        send({"id": mid, "result": {"protocol_version": version, "name": name, "version": "1",
              "capabilities": {"tools": True, "producer_messaging": True}, "tools": tools}})
        if MODE == "garbage":
            sys.stdout.write("this is not json\n"); sys.stdout.flush()
    elif method == "plugin/recovery/start":
        send({"id": "rc", "method": "plugin/recovery/complete", "params": {"outcome": {"status": "ready"}}})
        trace("recovered")
    elif method == "plugin/tools/cancel":
        trace("cancelled %s" % params.get("tool_call_id"))
    elif method == "plugin/tools/call":
        if MODE == "slow":
            trace("called")
            continue
        if MODE == "duplicates":
            threading.Thread(target=duplicates, args=(params["session_id"],), daemon=True).start()
        if MODE == "exit_mid_call":
            os._exit(3)
        if MODE == "noread":
            # Answer, then flood requests from a thread and never read stdin again: the answers fill the pipe.
            send({"id": mid, "result": {"output": {"type": "single", "text": "worked"}}})
            def flood():
                for i in range(3000):
                    send({"id": "n%d" % i, "method": "plugin/emit", "params": {
                          "session_id": "00000000-0000-7000-8000-000000000000", "name": "x", "payload": {"i": i}}})
            threading.Thread(target=flood, daemon=True).start()
            trace("stopped reading")
            time.sleep(3600)
        if MODE == "flood":
            for i in range(400):
                send({"id": "e%d" % i, "method": "plugin/emit",
                      "params": {"session_id": params["session_id"], "name": "tick", "payload": {"i": i}}})
        send({"id": mid, "result": {"output": {"type": "single", "text": "worked"}}})
    elif method == "plugin/ping":
        send({"id": mid, "result": {}})
    elif method == "plugin/shutdown":
        trace("shutdown")
        break
trace("exit")
"#;

struct Inline {
    daemon: TestDaemon,
    trace: PathBuf,
    _files: tempfile::TempDir,
}

fn start_inline(mode: &str, extra: &str) -> Inline {
    let files = tempfile::tempdir().unwrap();
    let script = files.path().join("inline.py");
    std::fs::write(&script, INLINE_PLUGIN).unwrap();
    let trace = files.path().join("trace");
    let config = plugin_section("inline", &script, &[("TRACE", &trace), ("MODE", Path::new(mode))], extra);
    let daemon = TestDaemon::start_with(DaemonSetup { config_toml: Some(config), ..Default::default() });
    Inline { daemon, trace, _files: files }
}

fn trace_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_owned).collect()
}

fn starts(path: &Path) -> Vec<String> {
    trace_lines(path).into_iter().filter(|line| line.starts_with("start ")).collect()
}

/// The daemon still serves: a session is created and an echo run completes.
async fn daemon_still_works(daemon: &TestDaemon) {
    let (client, mut deliveries) = daemon.client().await;
    let session = create_session_in(&client, daemon.project_path()).await;
    client.subscribe(&session.session_id, None).await.expect("subscribe");
    start_run(&client, &session.session_id, echo_selection(), "still there?").await;
    let events = events_until(&mut deliveries, is_terminal).await;
    assert!(
        matches!(events.last().map(|event| &event.payload), Some(EventPayload::RunCompleted { .. })),
        "the echo run did not complete: {:?}",
        events.last()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_killed_with_sigkill_is_restarted_and_recovers_while_runs_go_on() {
    let inline = start_inline("ok", "");
    wait_for_status(&inline.daemon, "inline", PluginRecoveryStatus::Ready).await;
    eventually("the first recovery traced", || trace_lines(&inline.trace).iter().any(|line| line == "recovered")).await;
    let first = starts(&inline.trace);
    assert_eq!(first.len(), 1, "{first:?}");
    let pid: i32 = first[0].trim_start_matches("start ").parse().unwrap();
    // SAFETY: kill(2) on the plugin's pid, which the test read from the plugin's own trace.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    daemon_still_works(&inline.daemon).await;
    eventually("a second start", || starts(&inline.trace).len() >= 2).await;
    wait_for_status(&inline.daemon, "inline", PluginRecoveryStatus::Ready).await;
    eventually("a second recovery", || {
        trace_lines(&inline.trace).iter().filter(|line| *line == "recovered").count() >= 2
    })
    .await;
    // Its tool works again.
    let events = run_script_in_yolo(
        &inline.daemon,
        inline.daemon.project_path(),
        json!({"turns": [{"tool_calls": [{"tool": "plugin__inline__work", "arguments": {}}]}, {"text": "ok"}]}),
    )
    .await;
    assert_eq!(tool_results(&events)[0].output, "worked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_never_answers_initialize_is_restarted_and_the_daemon_keeps_working() {
    // Long enough for python3 to start on a loaded machine (a plugin killed before it ran leaves no trace).
    let inline = start_inline("silent", "startup_timeout_ms = 3000");
    eventually("a restart after the startup timeout", || starts(&inline.trace).len() >= 2).await;
    assert_ne!(inline.daemon.engine().plugins().status("inline"), Some(PluginRecoveryStatus::Ready));
    daemon_still_works(&inline.daemon).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_of_the_wrong_version_or_name_is_failed_and_not_restarted() {
    for mode in ["wrong_version", "wrong_name"] {
        let inline = start_inline(mode, "");
        wait_for_status(&inline.daemon, "inline", PluginRecoveryStatus::Failed).await;
        daemon_still_works(&inline.daemon).await;
        // Not restarted (a restart cannot fix it), and its tool is not offered.
        assert_eq!(starts(&inline.trace).len(), 1, "{mode}");
        assert!(inline.daemon.engine().plugins().tool("plugin__inline__work").is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_looping_plugin_stays_failed_while_it_is_retried() {
    let inline = start_inline("crash", "");
    wait_for_status(&inline.daemon, "inline", PluginRecoveryStatus::Failed).await;
    let failed_at = starts(&inline.trace).len();
    eventually("two more starts, all while failed", || {
        assert_eq!(inline.daemon.engine().plugins().status("inline"), Some(PluginRecoveryStatus::Failed));
        starts(&inline.trace).len() >= failed_at + 2
    })
    .await;
    daemon_still_works(&inline.daemon).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_writes_garbage_is_restarted() {
    let inline = start_inline("garbage", "");
    eventually("a restart after garbage", || starts(&inline.trace).len() >= 2).await;
    daemon_still_works(&inline.daemon).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_exits_mid_call_gives_the_run_a_tool_error() {
    let inline = start_inline("exit_mid_call", "");
    wait_for_status(&inline.daemon, "inline", PluginRecoveryStatus::Ready).await;
    let events = run_script_in_yolo(
        &inline.daemon,
        inline.daemon.project_path(),
        json!({"turns": [{"tool_calls": [{"tool": "plugin__inline__work", "arguments": {}}]}, {"text": "ok"}]}),
    )
    .await;
    let results = tool_results(&events);
    assert_eq!(results[0].status, ToolResultStatus::Error, "{}", results[0].output);
    assert!(results[0].output.contains("plugin inline"), "{}", results[0].output);
    assert!(matches!(events.last().map(|event| &event.payload), Some(EventPayload::RunCompleted { .. })));
    eventually("a restart", || starts(&inline.trace).len() >= 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_plugin_is_rate_limited_with_a_clear_error() {
    let inline = start_inline("flood", "");
    wait_for_status(&inline.daemon, "inline", PluginRecoveryStatus::Ready).await;
    let events = run_script_in_yolo(
        &inline.daemon,
        inline.daemon.project_path(),
        json!({"turns": [{"tool_calls": [{"tool": "plugin__inline__work", "arguments": {}}]}, {"text": "ok"}]}),
    )
    .await;
    assert_eq!(tool_results(&events)[0].output, "worked");
    eventually("rate-limited emits", || trace_lines(&inline.trace).iter().any(|line| line == "refused rate_limited"))
        .await;
    // The emits the limit let through were written; the plugin is still running.
    assert_eq!(starts(&inline.trace).len(), 1);
    assert_eq!(inline.daemon.engine().plugins().status("inline"), Some(PluginRecoveryStatus::Ready));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_stops_reading_while_it_floods_gives_tool_errors_in_time_and_is_restarted() {
    let inline = start_inline("noread", "startup_timeout_ms = 4000\ntool_timeout_ms = 1000");
    wait_for_status(&inline.daemon, "inline", PluginRecoveryStatus::Ready).await;
    let started = std::time::Instant::now();
    // The first call is answered, then the plugin floods and stops reading; the second call (after the flood
    // filled its stdin) cannot even be queued, and still ends with a tool error within the tool timeout.
    let events = run_script_in_yolo(
        &inline.daemon,
        inline.daemon.project_path(),
        json!({"turns": [
            {"tool_calls": [{"tool": "plugin__inline__work", "arguments": {}}]},
            {"delay_ms": 1000, "tool_calls": [{"tool": "plugin__inline__work", "arguments": {}}]},
            {"text": "ok"}
        ]}),
    )
    .await;
    let results = tool_results(&events);
    assert_eq!(results[0].output, "worked");
    assert_eq!(results[1].status, ToolResultStatus::Error, "{}", results[1].output);
    assert!(matches!(events.last().map(|event| &event.payload), Some(EventPayload::RunCompleted { .. })));
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
    assert!(trace_lines(&inline.trace).iter().any(|line| line == "stopped reading"));
    // The plugin that does not read is killed and started again; the daemon serves other sessions meanwhile.
    daemon_still_works(&inline.daemon).await;
    eventually("a restart of the plugin that stopped reading", || starts(&inline.trace).len() >= 2).await;
    daemon_still_works(&inline.daemon).await;
}

/// `session.producers` of `session_id`.
async fn producers_of(
    client: &troupe_protocol::client::Client,
    session_id: &str,
) -> troupe_protocol::types::producers::SessionProducersResult {
    within(
        "session.producers",
        client.call::<method::SessionProducers>(troupe_protocol::types::common::SessionIdParams {
            session_id: session_id.to_owned(),
        }),
    )
    .await
    .expect("session.producers")
}

/// Polls `session.producers` until `condition` holds for it.
async fn producers_until(
    client: &troupe_protocol::client::Client,
    session_id: &str,
    what: &str,
    condition: impl Fn(&troupe_protocol::types::producers::SessionProducersResult) -> bool,
) -> troupe_protocol::types::producers::SessionProducersResult {
    eventually_some(what, WAIT, || async {
        let producers = producers_of(client, session_id).await;
        condition(&producers).then_some(producers)
    })
    .await
}

fn append_line(path: &Path, line: &str) {
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    std::io::Write::write_all(&mut file, format!("{line}\n").as_bytes()).unwrap();
}

/// The body of the next `producer_message_accepted` among the session's events, and the events up to it.
async fn next_accepted_body(deliveries: &mut Deliveries) -> String {
    let events =
        events_until(deliveries, |event| matches!(event.payload, EventPayload::ProducerMessageAccepted { .. })).await;
    match &events.last().unwrap().payload {
        EventPayload::ProducerMessageAccepted { body, producer_owner, .. } => {
            assert_eq!(
                *producer_owner,
                troupe_protocol::types::producers::ProducerOwner::Plugin { plugin: "file_watch".into() }
            );
            body.clone()
        }
        _ => unreachable!(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_plugin_sends_lines_as_producer_messages_and_recovers_after_sigkill() {
    let files = tempfile::tempdir().unwrap();
    // A copy with a path of its own, so that this test finds its process by command line.
    let script = files.path().join("file_watch_sigkill.py");
    std::fs::copy(example_plugin(), &script).unwrap();
    let watched = files.path().join("build.log");
    std::fs::write(&watched, "").unwrap();
    let state = files.path().join("state.json");
    let config = plugin_section("file_watch", &script, &[("WATCH_FILE", &watched), ("STATE_FILE", &state)], "");
    let daemon = TestDaemon::start_with(DaemonSetup { config_toml: Some(config), ..Default::default() });

    let (client, mut deliveries) = daemon.client().await;
    connect_script(
        &client,
        daemon.data_path(),
        json!({"turns": [{"tool_calls": [{"tool": "plugin__file_watch__watch", "arguments": {}}]}, {"text": "watching"}]}),
    )
    .await;
    let session = create_session_in(&client, daemon.project_path()).await;
    let ready = |producers: &troupe_protocol::types::producers::SessionProducersResult| {
        producers
            .plugin_recovery
            .iter()
            .any(|state| state.plugin == "file_watch" && state.status == PluginRecoveryStatus::Ready)
    };
    producers_until(&client, &session.session_id, "the plugin ready", ready).await;
    set_mode(&client, &session.session_id, troupe_protocol::types::session::PermissionMode::Yolo).await;
    client.subscribe(&session.session_id, None).await.expect("subscribe");
    start_run(&client, &session.session_id, selection_of("default", "local/scripted"), "watch the build").await;
    let events = events_until(&mut deliveries, is_terminal).await;
    let output = &tool_results(&events)[0].output;
    assert!(!output.contains("registration failed"), "{output}");
    let registered = producers_of(&client, &session.session_id).await.producers;
    assert_eq!(registered.len(), 1, "{registered:?}");

    // A new line is a producer message, which wakes the idle session into a run.
    append_line(&watched, "build failed");
    assert_eq!(next_accepted_body(&mut deliveries).await, "build failed");
    let woken = events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::RunStarted { .. })).await;
    assert!(woken.last().unwrap().origin.as_deref().is_some_and(|origin| origin.starts_with("engine:")));
    events_until(&mut deliveries, is_terminal).await;

    // SIGKILL: the daemon keeps serving, restarts the plugin, and the plugin registers again while recovering.
    let pids = super::processes::processes_with(script.to_str().unwrap());
    assert_eq!(pids.len(), 1, "{pids:?}");
    // SAFETY: kill(2) on the plugin process this test started, found by its unique command line.
    assert_eq!(unsafe { libc::kill(pids[0] as i32, libc::SIGKILL) }, 0);
    daemon_still_works(&daemon).await;
    let old = registered[0].producer_id.clone();
    producers_until(&client, &session.session_id, "a fresh registration after the restart", |producers| {
        ready(producers) && producers.producers.len() == 1 && producers.producers[0].producer_id != old
    })
    .await;
    append_line(&watched, "build fixed");
    assert_eq!(next_accepted_body(&mut deliveries).await, "build fixed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_run_cancels_its_plugin_call_and_a_slow_call_times_out() {
    let inline = start_inline("slow", "tool_timeout_ms = 60000");
    wait_for_status(&inline.daemon, "inline", PluginRecoveryStatus::Ready).await;
    let (client, mut deliveries) = inline.daemon.client().await;
    connect_script(
        &client,
        inline.daemon.data_path(),
        json!({"turns": [{"tool_calls": [{"tool": "plugin__inline__work", "arguments": {}}]}, {"text": "ok"}]}),
    )
    .await;
    let session = create_session_in(&client, inline.daemon.project_path()).await;
    set_mode(&client, &session.session_id, troupe_protocol::types::session::PermissionMode::Yolo).await;
    client.subscribe(&session.session_id, None).await.expect("subscribe");
    let run_id = start_run(&client, &session.session_id, selection_of("default", "local/scripted"), "go").await;
    eventually("the plugin got the call", || trace_lines(&inline.trace).iter().any(|line| line == "called")).await;
    let cancelled = within(
        "run.cancel",
        client.call::<method::RunCancel>(troupe_protocol::types::run::RunIdParams { run_id: run_id.clone() }),
    )
    .await
    .expect("run.cancel");
    assert!(cancelled.cancelled);
    let events = events_until(&mut deliveries, is_terminal).await;
    assert!(matches!(events.last().unwrap().payload, EventPayload::RunCancelled { .. }), "{:?}", kinds(&events));
    eventually("the plugin was told", || {
        trace_lines(&inline.trace).iter().any(|line| line.starts_with("cancelled call-"))
    })
    .await;

    // Stopping the daemon sends plugin/shutdown: the plugin exits on its own.
    inline.daemon.stop();
    let lines = trace_lines(&inline.trace);
    assert!(lines.ends_with(&["shutdown".to_owned(), "exit".to_owned()]), "{lines:?}");

    let timing_out = start_inline("slow", "tool_timeout_ms = 200");
    wait_for_status(&timing_out.daemon, "inline", PluginRecoveryStatus::Ready).await;
    let events = run_script_in_yolo(
        &timing_out.daemon,
        timing_out.daemon.project_path(),
        json!({"turns": [{"tool_calls": [{"tool": "plugin__inline__work", "arguments": {}}]}, {"text": "ok"}]}),
    )
    .await;
    let result = &tool_results(&events)[0];
    assert_eq!(result.status, ToolResultStatus::Error);
    assert!(result.output.contains("did not answer plugin/tools/call"), "{}", result.output);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_tools_go_through_the_ordinary_permission_rules() {
    let rules =
        "\n[permissions]\nrules = [{ effect = \"allow\", action = \"execute\", resource = \"plugin:inline/*\" }]\n";
    let allowed = start_inline("ok", rules);
    let denied = start_inline(
        "ok",
        "\n[permissions]\nrules = [{ effect = \"deny\", action = \"execute\", resource = \"plugin:inline/work\" }]\n",
    );
    for (inline, expected) in [(&allowed, ToolResultStatus::Ok), (&denied, ToolResultStatus::Denied)] {
        wait_for_status(&inline.daemon, "inline", PluginRecoveryStatus::Ready).await;
        let (client, mut deliveries) = inline.daemon.client().await;
        connect_script(
            &client,
            inline.daemon.data_path(),
            json!({"turns": [{"tool_calls": [{"tool": "plugin__inline__work", "arguments": {}}]}, {"text": "ok"}]}),
        )
        .await;
        // The session's default mode asks for anything not allowed by a rule.
        let session = create_session_in(&client, inline.daemon.project_path()).await;
        client.subscribe(&session.session_id, None).await.expect("subscribe");
        start_run(&client, &session.session_id, selection_of("default", "local/scripted"), "go").await;
        let events = events_until(&mut deliveries, is_terminal).await;
        assert!(!kinds(&events).contains(&"approval_requested"), "{:?}", kinds(&events));
        let results = tool_results(&events);
        assert_eq!(results[0].status, expected, "{}", results[0].output);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_producer_send_returns_the_same_receipt_and_discard_works_after_unregister() {
    let inline = start_inline("duplicates", "");
    wait_for_status(&inline.daemon, "inline", PluginRecoveryStatus::Ready).await;
    let (client, mut deliveries) = inline.daemon.client().await;
    connect_script(
        &client,
        inline.daemon.data_path(),
        json!({"turns": [{"tool_calls": [{"tool": "plugin__inline__work", "arguments": {}}]}, {"text": "ok"}]}),
    )
    .await;
    let session = create_session_in(&client, inline.daemon.project_path()).await;
    set_mode(&client, &session.session_id, troupe_protocol::types::session::PermissionMode::Yolo).await;
    client.subscribe(&session.session_id, None).await.expect("subscribe");
    start_run(&client, &session.session_id, selection_of("default", "local/scripted"), "go").await;
    eventually("the sends traced", || {
        trace_lines(&inline.trace).iter().any(|line| line.starts_with("after unregister"))
    })
    .await;
    let lines = trace_lines(&inline.trace);
    let sent: Vec<&str> =
        lines.iter().find(|line| line.starts_with("sent ")).expect("sent").split(' ').skip(1).collect();
    assert_eq!(sent[0], sent[1], "a retry with the same key and body returns the original receipt");
    assert_eq!(sent[2], "idempotency_conflict");
    // The message was queued behind the run that asked; whether a run took it first or the discard did, the
    // answer says which, and unregistering did not stop the discard.
    let after = lines.iter().find(|line| line.starts_with("after unregister")).unwrap();
    assert!(
        after == "after unregister True discarded" || after == "after unregister True already_delivered",
        "{after}"
    );
    let events =
        events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::ProducerMessageAccepted { .. }))
            .await;
    let accepted = events.last().unwrap();
    assert_eq!(accepted.origin.as_deref(), Some("plugin:inline"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_plugin_is_listed_and_not_started() {
    let inline = start_inline("ok", "enabled = false");
    let (client, _deliveries) = inline.daemon.client().await;
    let session = create_session_in(&client, inline.daemon.project_path()).await;
    let producers = producers_of(&client, &session.session_id).await;
    assert_eq!(
        producers.plugin_recovery,
        vec![troupe_protocol::types::producers::PluginRecoveryState {
            plugin: "inline".into(),
            status: PluginRecoveryStatus::Disabled
        }]
    );
    assert!(starts(&inline.trace).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_plugins_queue_message_waits_for_the_active_run_to_end() {
    let files = tempfile::tempdir().unwrap();
    let watched = files.path().join("queue.log");
    std::fs::write(&watched, "").unwrap();
    let state = files.path().join("state.json");
    let mut config =
        plugin_section("file_watch", &example_plugin(), &[("WATCH_FILE", &watched), ("STATE_FILE", &state)], "");
    config.push_str(
        "\n[permissions]\nrules = [{ effect = \"allow\", action = \"execute\", resource = \"plugin:file_watch/*\" }]\n",
    );
    let daemon = TestDaemon::start_with(DaemonSetup { config_toml: Some(config), ..Default::default() });
    wait_for_status(&daemon, "file_watch", PluginRecoveryStatus::Ready).await;
    let (client, mut deliveries) = daemon.client().await;
    // The watch call is allowed by the rule; the shell call then waits for an approval, keeping the run active.
    connect_script(
        &client,
        daemon.data_path(),
        json!({"turns": [
            {"tool_calls": [{"tool": "plugin__file_watch__watch", "arguments": {"mode": "queue"}}]},
            {"tool_calls": [{"tool": "shell", "arguments": {"command": "true"}}]},
            {"text": "done"}
        ]}),
    )
    .await;
    let session = create_session_in(&client, daemon.project_path()).await;
    client.subscribe(&session.session_id, None).await.expect("subscribe");
    let run_id = start_run(&client, &session.session_id, selection_of("default", "local/scripted"), "watch").await;
    events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::ApprovalRequested { .. })).await;

    append_line(&watched, "queued while busy");
    assert_eq!(next_accepted_body(&mut deliveries).await, "queued while busy");
    within("run.cancel", client.call::<method::RunCancel>(troupe_protocol::types::run::RunIdParams { run_id }))
        .await
        .expect("run.cancel");
    let until_end = events_until(&mut deliveries, is_terminal).await;
    assert!(
        !kinds(&until_end).contains(&"producer_messages_claimed"),
        "a queued message is not taken by the active run: {:?}",
        kinds(&until_end)
    );
    // Once the run ended, the message starts the next run.
    let next = events_until(&mut deliveries, |event| matches!(event.payload, EventPayload::RunStarted { .. })).await;
    let EventPayload::RunStarted { input, .. } = &next.last().unwrap().payload else { unreachable!() };
    assert!(input.contains("queued while busy"), "{input}");
}
