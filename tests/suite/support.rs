//! The suite's protocol-level harness: the in-process daemon, clients, raw sockets and the calls tests share. The
//! child daemon, the fake model vendor and the polling waits come from `troupe_test_support` (re-exported here).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use troupe::daemon::{DaemonOptions, DaemonThread};
use troupe_actors::Engine;
use troupe_protocol::client::ClientError;
use troupe_protocol::client::{Client, ClientDelivery, ClientOptions, Deliveries};
use troupe_protocol::method;
use troupe_protocol::types::common::{ModelSelection, RunSelection, SessionMeta};
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::session::{SessionCreateParams, SessionRenameParams, SessionRenameResult, TitleChange};
use troupe_runtime::data_dir::DataDir;

pub use troupe_test_support::{
    ChildDaemon, DaemonLog, ServeCommand, WAIT, eventually_some, exit_status_within, git, holds_within,
    holds_within_blocking, token_of, within,
};

/// Polls `condition` until it holds, failing after [`WAIT`] (`troupe_test_support::eventually` with the suite's
/// usual bound).
pub async fn eventually(what: &str, condition: impl FnMut() -> bool) {
    troupe_test_support::eventually(what, WAIT, condition).await
}

pub fn echo_selection() -> RunSelection {
    RunSelection {
        agent: "default".into(),
        model: ModelSelection { model: "local/echo".into(), variant: None },
        preset: None,
    }
}

/// Options of an in-process daemon.
#[derive(Default)]
pub struct DaemonSetup {
    /// Written to `config.toml` before start.
    pub config_toml: Option<String>,
    pub hibernate_after: Option<Duration>,
    /// Reuse a data directory (for restarts).
    pub data_dir: Option<tempfile::TempDir>,
    /// The sessions' working directory (default: a fresh temp dir beside the data directory).
    pub project: Option<tempfile::TempDir>,
    /// Threads that run session actors (default: the daemon's own choice).
    pub session_threads: Option<usize>,
}

/// The real daemon (engine + gateway) on its own actix System thread, listening on 127.0.0.1:0.
pub struct TestDaemon {
    pub addr: SocketAddr,
    pub token: String,
    pub data_dir: Option<tempfile::TempDir>,
    /// The working directory of sessions the tests create (kept apart from the data directory, which tools may
    /// never write into).
    project: tempfile::TempDir,
    daemon: DaemonThread,
}

impl TestDaemon {
    pub fn start() -> TestDaemon {
        TestDaemon::start_with(DaemonSetup::default())
    }

    pub fn start_with(setup: DaemonSetup) -> TestDaemon {
        let data_dir = setup.data_dir.unwrap_or_else(|| tempfile::tempdir().expect("temp dir"));
        // Automatic titles ask the session's model, which would take the fake vendors' scripted answers meant for
        // the runs: off unless a test's config says otherwise (`titles.rs` does).
        // (A restart that names no config keeps the data directory's.)
        let path = data_dir.path().join("config.toml");
        if setup.config_toml.is_some() || !path.exists() {
            let config = setup.config_toml.unwrap_or_default();
            let config =
                if config.contains("[titles]") { config } else { format!("{config}\n[titles]\nauto = false\n") };
            std::fs::write(&path, config).expect("write config");
        }
        let options = DaemonOptions {
            data_dir: DataDir::new(data_dir.path().to_path_buf()),
            listen: Some("127.0.0.1:0".parse().expect("address")),
            hibernate_after: setup.hibernate_after,
            session_threads: setup.session_threads,
            cluster: Default::default(),
        };
        let daemon = DaemonThread::spawn(options, WAIT).unwrap_or_else(|error| panic!("{error:#}"));
        let token = token_of(data_dir.path());
        let project = setup.project.unwrap_or_else(|| tempfile::tempdir().expect("project dir"));
        TestDaemon { addr: daemon.local_addr, token, data_dir: Some(data_dir), project, daemon }
    }

    pub fn url(&self) -> String {
        format!("ws://{}/ws", self.addr)
    }

    pub fn data_path(&self) -> &Path {
        self.data_dir.as_ref().expect("data dir").path()
    }

    /// The working directory of sessions created with [`TestDaemon::create_session`].
    pub fn project_path(&self) -> &Path {
        self.project.path()
    }

    pub fn engine(&self) -> &Engine {
        self.daemon.engine()
    }

    /// A handshaken protocol client.
    pub async fn client(&self) -> (Client, Deliveries) {
        self.client_with(ClientOptions::default()).await
    }

    pub async fn client_with(&self, options: ClientOptions) -> (Client, Deliveries) {
        within("client connect", Client::connect_websocket(&self.url(), &self.token, options))
            .await
            .expect("client connects")
    }

    /// A raw, authenticated WebSocket with no handshake sent yet.
    pub async fn raw(&self) -> RawSocket {
        RawSocket::connect(&self.url(), &self.token).await
    }

    /// Like [`TestDaemon::raw`], with the client's kernel receive buffer fixed at about `bytes` (which turns off
    /// its autotuning), so that a reader that stops reading backs the daemon up after a known, small amount
    /// whatever the machine's `tcp_rmem`.
    pub async fn raw_with_receive_buffer(&self, bytes: u32) -> RawSocket {
        RawSocket::connect_with_receive_buffer(self.addr, &self.url(), &self.token, bytes).await
    }

    pub async fn create_session(&self, client: &Client) -> SessionMeta {
        within(
            "session.create",
            client.call::<method::SessionCreate>(SessionCreateParams {
                selection: echo_selection(),
                cwd: Some(self.project_path().to_string_lossy().into_owned()),
            }),
        )
        .await
        .expect("session.create")
        .session
    }

    /// Stops the daemon gracefully and returns its data directory for a restart.
    pub fn stop(mut self) -> tempfile::TempDir {
        self.daemon.stop();
        self.data_dir.take().expect("data dir")
    }
}

/// A raw WebSocket for wire-level assertions.
pub struct RawSocket {
    pub stream: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl RawSocket {
    pub async fn connect(url: &str, token: &str) -> RawSocket {
        let mut request = url.into_client_request().expect("request");
        request.headers_mut().insert("Authorization", format!("Bearer {token}").parse().expect("header"));
        let (stream, _) = within("raw connect", tokio_tungstenite::connect_async(request)).await.expect("raw connect");
        RawSocket { stream }
    }

    /// [`RawSocket::connect`] over a TCP socket whose receive buffer is set to `bytes` before connecting.
    pub async fn connect_with_receive_buffer(addr: SocketAddr, url: &str, token: &str, bytes: u32) -> RawSocket {
        let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4() } else { tokio::net::TcpSocket::new_v6() }
            .expect("socket");
        socket.set_recv_buffer_size(bytes).expect("SO_RCVBUF");
        let tcp = within("tcp connect", socket.connect(addr)).await.expect("tcp connect");
        let mut request = url.into_client_request().expect("request");
        request.headers_mut().insert("Authorization", format!("Bearer {token}").parse().expect("header"));
        let (stream, _) = within("raw connect", tokio_tungstenite::client_async(request, MaybeTlsStream::Plain(tcp)))
            .await
            .expect("raw connect");
        RawSocket { stream }
    }

    pub async fn send_text(&mut self, text: &str) {
        within("send", self.stream.send(Message::text(text))).await.expect("send");
    }

    pub async fn send(&mut self, value: &Value) {
        self.send_text(&value.to_string()).await;
    }

    /// The next text frame as JSON.
    pub async fn recv(&mut self) -> Value {
        loop {
            let message = within("a frame", self.stream.next()).await.expect("stream open").expect("frame");
            match message {
                Message::Text(text) => return serde_json::from_str(&text).expect("JSON frame"),
                Message::Ping(_) | Message::Pong(_) => continue,
                other => panic!("unexpected frame {other:?}"),
            }
        }
    }

    /// The next frame that is a response (has an `id`), skipping notifications.
    pub async fn recv_response(&mut self) -> Value {
        loop {
            let frame = self.recv().await;
            if frame.is_array() || frame.get("id").is_some() {
                return frame;
            }
        }
    }

    pub async fn call(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        self.recv_response().await
    }

    /// Sends a whole request object as given and returns the next response.
    pub async fn call_raw(&mut self, request: Value) -> Value {
        self.send(&request).await;
        self.recv_response().await
    }

    pub async fn handshake(&mut self) {
        let reply = self.call(0, "handshake", json!({"protocol_version": 20})).await;
        assert_eq!(reply["result"]["protocol_version"], 20, "{reply}");
    }

    /// The close frame's code, reading past anything else.
    pub async fn close_code(&mut self) -> Option<u16> {
        loop {
            match within("close", self.stream.next()).await {
                Some(Ok(Message::Close(frame))) => return frame.map(|frame| u16::from(frame.code)),
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => return None,
            }
        }
    }
}

/// The `troupe` binary.
pub fn troupe_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_troupe"))
}

/// `troupe serve` of this build on `data_dir`, to add flags, environment or log capture to before
/// [`ServeCommand::spawn`].
pub fn troupe_serve(data_dir: &Path) -> ServeCommand {
    ServeCommand::new(troupe_binary(), data_dir)
}

/// `troupe serve` on `data_dir` and `listen` (`127.0.0.1:0` for any port), once it listens.
pub fn spawn_daemon(data_dir: &Path, listen: &str) -> ChildDaemon {
    troupe_serve(data_dir).listen(listen).spawn()
}

/// A handshaken protocol client of a child daemon.
pub trait ConnectChild {
    fn client(&self) -> impl Future<Output = (Client, Deliveries)>;
}

impl ConnectChild for ChildDaemon {
    async fn client(&self) -> (Client, Deliveries) {
        within("client connect", Client::connect_websocket(&self.url, &self.token, ClientOptions::default()))
            .await
            .expect("client connects")
    }
}

/// Collects deliveries until `count` events (live or replayed) have arrived; returns their sequences.
pub async fn collect_event_seqs(deliveries: &mut Deliveries, count: usize) -> Vec<u64> {
    let mut seqs = Vec::new();
    within("events", async {
        while seqs.len() < count {
            match deliveries.next().await.expect("deliveries open") {
                ClientDelivery::Live(event) | ClientDelivery::ReplayEvent(event) => seqs.push(event.seq),
                _ => {}
            }
        }
    })
    .await;
    seqs
}

/// `session.rename` to a set title.
pub async fn set_title(
    client: &Client,
    session_id: &str,
    client_rename_id: &str,
    title: &str,
) -> Result<SessionRenameResult, ClientError> {
    within(
        "session.rename",
        client.call::<method::SessionRename>(SessionRenameParams {
            session_id: session_id.to_owned(),
            client_rename_id: client_rename_id.to_owned(),
            change: TitleChange::Set { title: title.to_owned() },
        }),
    )
    .await
}

/// `count` renames of one session, pipelined 100 at a time so the session commits them in shared batches.
/// Titles are padded with `padding` bytes, to make events (and notification frames) larger.
pub async fn rename_many(client: &Client, session_id: &str, prefix: &str, count: usize, padding: usize) {
    let pad = "x".repeat(padding);
    let indexes: Vec<usize> = (0..count).collect();
    for chunk in indexes.chunks(100) {
        let calls = chunk.iter().map(|index| {
            let id = format!("{prefix}-{index}");
            let title = format!("{pad}{prefix} {index}");
            async move { set_title(client, session_id, &id, &title).await }
        });
        for outcome in futures::future::join_all(calls).await {
            outcome.expect("rename");
        }
    }
}

/// Lays a session log on disk as the daemon would have written it: one JSON line per event.
pub fn write_session_log(data_dir: &Path, session_id: &str, lines: &[String]) {
    let dir = data_dir.join("sessions").join(session_id);
    std::fs::create_dir_all(&dir).expect("session dir");
    std::fs::write(dir.join("events.jsonl"), lines.join("\n")).expect("write log");
}

/// The `session_created` line of a hand-written log.
pub fn session_created_line(session_id: &str, origin: Value) -> String {
    json!({"session_id": session_id, "run_id": null, "seq": 1, "timestamp": "2026-01-01T00:00:00.000Z",
        "payload": {"type": "session_created", "origin": origin, "cwd": "/tmp", "selection": echo_selection()}})
    .to_string()
}

/// Connects a provider and returns the result.
pub async fn connect_provider(
    client: &Client,
    provider_id: &str,
    setup_values: &[(&str, &str)],
    api_key: Option<&str>,
) -> Result<troupe_protocol::types::provider::ProviderConnectResult, ClientError> {
    let (auth_method, auth_values) = match api_key {
        Some(key) => ("api_key", std::collections::BTreeMap::from([("api_key".to_owned(), key.to_owned())])),
        None => ("none", std::collections::BTreeMap::new()),
    };
    within(
        "provider.connect",
        client.call::<method::ProviderConnect>(troupe_protocol::types::provider::ProviderConnectParams {
            provider_id: provider_id.to_owned(),
            expected_catalog_revision: None,
            setup_values: setup_values.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect(),
            auth_method: auth_method.to_owned(),
            auth_values,
            client_connect_id: troupe_runtime::clock::new_id(),
        }),
    )
    .await
}

/// Disconnects a provider (whatever its generation).
pub async fn disconnect_provider(client: &Client, provider_id: &str) {
    let params = troupe_protocol::types::provider::ProviderDisconnectParams {
        provider_id: provider_id.to_owned(),
        expected_runtime_revision: None,
        expected_connection_generation: None,
        client_request_id: troupe_runtime::clock::new_id(),
    };
    let gone = within("provider.disconnect", client.call::<method::ProviderDisconnect>(params))
        .await
        .expect("provider.disconnect");
    assert!(gone.disconnected, "{provider_id} was not connected");
}

/// Every event delivered during `window` (for asserting that something does not happen while a daemon's
/// periodic work has had time to run).
pub async fn events_during(deliveries: &mut Deliveries, window: Duration) -> Vec<StoredEvent> {
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + window;
    while let Ok(delivery) = tokio::time::timeout_at(deadline, deliveries.next()).await {
        match delivery.expect("deliveries open") {
            ClientDelivery::Live(event) | ClientDelivery::ReplayEvent(event) => events.push(event),
            _ => {}
        }
    }
    events
}

/// Writes a `local/scripted` script and connects the local provider with it.
pub async fn connect_script(client: &Client, dir: &Path, script: Value) {
    let path = dir.join(format!("script-{}.json", troupe_runtime::clock::new_id()));
    std::fs::write(&path, script.to_string()).expect("write script");
    connect_provider(client, "local", &[("script", path.to_str().expect("utf-8 path"))], None)
        .await
        .expect("connect the local script");
}

pub fn selection_of(agent: &str, model: &str) -> RunSelection {
    RunSelection { agent: agent.into(), model: ModelSelection { model: model.into(), variant: None }, preset: None }
}

/// Starts a run and returns its id.
pub async fn start_run(client: &Client, session_id: &str, selection: RunSelection, input: &str) -> String {
    within(
        "run.start",
        client.call::<method::RunStart>(troupe_protocol::types::run::RunStartParams {
            session_id: session_id.to_owned(),
            client_run_id: troupe_runtime::clock::new_id(),
            selection,
            input: input.to_owned(),
            reset_fallback: false,
            attachments: Vec::new(),
        }),
    )
    .await
    .expect("run.start")
    .run_id
}

pub async fn set_mode(client: &Client, session_id: &str, mode: troupe_protocol::types::session::PermissionMode) {
    within(
        "set mode",
        client.call::<method::SessionSetPermissionMode>(troupe_protocol::types::session::SetPermissionModeParams {
            session_id: session_id.to_owned(),
            mode,
        }),
    )
    .await
    .expect("set mode");
}

/// Whether the event ends a run.
pub fn is_terminal(event: &StoredEvent) -> bool {
    matches!(
        event.payload,
        EventPayload::RunCompleted { .. }
            | EventPayload::RunFailed { .. }
            | EventPayload::RunCancelled { .. }
            | EventPayload::RunInterrupted { .. }
    )
}

/// Events (replayed or live) until `stop` holds for one, which is included.
pub async fn events_until(deliveries: &mut Deliveries, mut stop: impl FnMut(&StoredEvent) -> bool) -> Vec<StoredEvent> {
    let mut events = Vec::new();
    within("events", async {
        loop {
            match deliveries.next().await.expect("deliveries open") {
                ClientDelivery::Live(event) | ClientDelivery::ReplayEvent(event) => {
                    let done = stop(&event);
                    events.push(event);
                    if done {
                        return;
                    }
                }
                _ => {}
            }
        }
    })
    .await;
    events
}

/// The payload kinds of `events`, for comparing sequences at a glance.
pub fn kinds(events: &[StoredEvent]) -> Vec<&'static str> {
    events.iter().filter_map(|event| event.payload.kind()).collect()
}

/// `session.create` in `cwd` (the echo model's selection).
pub async fn create_session_in(client: &Client, cwd: &Path) -> SessionMeta {
    within(
        "session.create",
        client.call::<method::SessionCreate>(SessionCreateParams {
            selection: echo_selection(),
            cwd: Some(cwd.to_string_lossy().into_owned()),
        }),
    )
    .await
    .expect("session.create")
    .session
}

/// Plays `script` (a `local/scripted` script) as one run in a new `yolo` session in `cwd` and returns the run's
/// events up to its end.
pub async fn run_script_in_yolo(daemon: &TestDaemon, cwd: &Path, script: Value) -> Vec<StoredEvent> {
    let (client, mut deliveries) = daemon.client().await;
    connect_script(&client, daemon.data_path(), script).await;
    let session = create_session_in(&client, cwd).await;
    set_mode(&client, &session.session_id, troupe_protocol::types::session::PermissionMode::Yolo).await;
    client.subscribe(&session.session_id, None).await.expect("subscribe");
    start_run(&client, &session.session_id, selection_of("default", "local/scripted"), "go").await;
    events_until(&mut deliveries, is_terminal).await
}

/// Connects `script` as the scripted model and starts it as a run in a new `yolo` session of `daemon`, subscribed by
/// `client`: the session's id and the run's.
pub async fn scripted_run_in_yolo(daemon: &TestDaemon, client: &Client, script: Value) -> (String, String) {
    connect_script(client, daemon.data_path(), script).await;
    let session_id = daemon.create_session(client).await.session_id;
    set_mode(client, &session_id, troupe_protocol::types::session::PermissionMode::Yolo).await;
    within("subscribe", client.subscribe(&session_id, None)).await.expect("subscribe");
    let run_id = start_run(client, &session_id, selection_of("default", "local/scripted"), "go").await;
    (session_id, run_id)
}

/// The results of the tool calls among `events`, in order.
pub fn tool_results(events: &[StoredEvent]) -> Vec<troupe_protocol::types::run::PersistedToolResult> {
    events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::ToolCallTerminated { result, .. } => Some(result.clone()),
            _ => None,
        })
        .collect()
}

/// Runs `input` on `model` to its end in a session already subscribed on `deliveries`; the events until the
/// run's terminal one.
pub async fn run_in_subscribed(
    client: &Client,
    deliveries: &mut Deliveries,
    session_id: &str,
    model: &str,
    input: &str,
) -> Vec<StoredEvent> {
    let run_id = start_run(client, session_id, selection_of("default", model), input).await;
    events_until(deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await
}

/// A new session of `daemon`, subscribed by `client`, after each of `inputs` ran to its end on `local/echo`, one
/// after the other: the session's id and each run's events.
pub async fn session_after_echo_runs(
    daemon: &TestDaemon,
    client: &Client,
    deliveries: &mut Deliveries,
    inputs: &[&str],
) -> (String, Vec<Vec<StoredEvent>>) {
    let session_id = daemon.create_session(client).await.session_id;
    within("subscribe", client.subscribe(&session_id, None)).await.expect("subscribe");
    let mut runs = Vec::new();
    for input in inputs {
        runs.push(run_in_subscribed(client, deliveries, &session_id, "local/echo", input).await);
    }
    (session_id, runs)
}

/// A `local/scripted` script whose run writes `asked.txt` and then answers "written": in `ask` mode it waits for
/// an approval first.
pub fn write_file_script() -> Value {
    json!({"turns": [
        {"tool_calls": [{"tool": "write_file", "arguments": {"path": "asked.txt", "content": "yes"}}]},
        {"text": "written"}
    ]})
}

/// A run waiting for the approval of its call, started by [`run_waiting_for_approval`].
pub struct WaitingRun {
    pub session_id: String,
    pub run_id: String,
    pub approval: troupe_protocol::types::approval::ApprovalRecord,
}

/// Starts a `local/scripted` run (with [`write_file_script`] connected) in a new session of `daemon` in `ask`
/// mode, subscribed by `client` on `deliveries`, and returns once its approval is requested.
pub async fn run_waiting_for_approval(daemon: &TestDaemon, client: &Client, deliveries: &mut Deliveries) -> WaitingRun {
    let session_id = daemon.create_session(client).await.session_id;
    set_mode(client, &session_id, troupe_protocol::types::session::PermissionMode::Ask).await;
    within("subscribe", client.subscribe(&session_id, None)).await.expect("subscribe");
    let run_id = start_run(client, &session_id, selection_of("default", "local/scripted"), "write it").await;
    let events =
        events_until(deliveries, |event| matches!(event.payload, EventPayload::ApprovalRequested { .. })).await;
    let Some(EventPayload::ApprovalRequested { approval }) = events.last().map(|event| &event.payload) else {
        unreachable!("events_until stops at approval_requested")
    };
    WaitingRun { session_id, run_id, approval: (**approval).clone() }
}

/// `session.revert`.
pub async fn revert(client: &Client, session_id: &str, through_seq: u64) -> Result<SessionMeta, ClientError> {
    within(
        "session.revert",
        client.call::<method::SessionRevert>(troupe_protocol::types::session::SessionRevertParams {
            session_id: session_id.into(),
            through_seq,
        }),
    )
    .await
    .map(|result| result.session)
}

/// A port free right now on 127.0.0.1 (whoever needs it binds it a moment later).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("address").port()
}

/// A default daemon with `script` connected as the scripted model, and a client of it.
pub async fn scripted_daemon(script: Value) -> (TestDaemon, Client, Deliveries) {
    let daemon = TestDaemon::start();
    let (client, deliveries) = daemon.client().await;
    connect_script(&client, daemon.data_path(), script).await;
    (daemon, client, deliveries)
}

/// Answers `approval` with `approve_once` as `client` (client response id `answer-1`), failing the test if refused.
pub async fn approve_once(client: &Client, approval: &troupe_protocol::types::approval::ApprovalRecord) {
    let params = troupe_protocol::types::approval::ApprovalRespondParams {
        session_id: approval.session_id.clone(),
        approval_id: approval.approval_id.clone(),
        request_revision: approval.revision,
        operation_fingerprint: approval.operation_fingerprint.clone(),
        client_response_id: "answer-1".into(),
        decision: troupe_protocol::types::approval::ApprovalDecision::ApproveOnce,
        feedback: None,
    };
    within("approval.respond", client.call::<method::ApprovalRespond>(params)).await.expect("approved");
}
