//! The shared client against the real server layer (`troupe_protocol::server::serve`), over the in-process
//! transport and over a real WebSocket, with a small test `ServerProtocol`. Some tests play the daemon by hand
//! with raw frames, to reach cases a well-behaved server never produces.
//!
//! Every await is bounded by a timeout; nothing sleeps to synchronize.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;
use troupe_protocol::error_code::ErrorCode;

use futures::{SinkExt, StreamExt};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::{AbortHandle, JoinHandle};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::StatusCode;

use troupe_protocol::client::{
    Client, ClientDelivery, ClientError, ClientOptions, Deliveries, ReconnectPolicy, ReplayReason,
};
use troupe_protocol::error::codes;
use troupe_protocol::server::{
    EventSink, ServerContext, ServerLimits, ServerProtocol, encode_event_notification, serve,
};
use troupe_protocol::transport::{
    InProcessTransport, MessageFrame, OpenFailure, Transport, TransportError, WebSocketTransport,
};
use troupe_protocol::types::common::{
    ModelSelection, RunSelection, SessionIdParams, SessionMeta, SessionOrigin, SessionStatus,
};
use troupe_protocol::types::events::{
    EventJson, EventPayload, EventsSubscribeParams, EventsSubscribeResult, StoredEvent,
};
use troupe_protocol::types::runtime::{
    ClientInfo, HandshakeParams, HandshakeResult, RuntimeChangedParams, RuntimeSnapshot, ServerInfo,
};
use troupe_protocol::types::session::SessionResult;
use troupe_protocol::{RpcError, method, notification};

const STEP: Duration = Duration::from_secs(10);

async fn within<F: Future>(future: F) -> F::Output {
    tokio::time::timeout(STEP, future).await.expect("timed out")
}

async fn next(deliveries: &mut Deliveries) -> ClientDelivery {
    within(deliveries.next()).await.expect("the delivery stream ended")
}

fn event(session_id: &str, seq: u64) -> StoredEvent {
    StoredEvent {
        session_id: session_id.to_owned(),
        run_id: None,
        seq,
        timestamp: "2026-01-01T00:00:00Z".to_owned(),
        origin: Some("user".to_owned()),
        payload: EventPayload::UserInputAdmitted {
            input_id: format!("input-{seq}"),
            input: format!("message {seq}"),
            attachments: Vec::new(),
        },
    }
}

fn meta(session_id: &str) -> SessionResult {
    SessionResult {
        session: SessionMeta {
            session_id: session_id.to_owned(),
            origin: SessionOrigin::Root,
            cwd: "/tmp".to_owned(),
            title: None,
            title_updated_seq: None,
            creation_selection: RunSelection {
                agent: "default".to_owned(),
                model: ModelSelection { model: "local/echo".to_owned(), variant: None },
                preset: None,
            },
            status: SessionStatus::Idle,
            last_event_seq: 0,
            created_at: "2026-01-01T00:00:00Z".to_owned(),
            last_activity_at: "2026-01-01T00:00:00Z".to_owned(),
            skipped_events: Vec::new(),
            archived: false,
            node: None,
            may_be_stale: false,
        },
    }
}

fn startup_snapshot() -> RuntimeChangedParams {
    RuntimeChangedParams {
        previous_revision: None,
        snapshot: RuntimeSnapshot {
            revision: 1,
            providers: Vec::new(),
            models: Vec::new(),
            agents: Vec::new(),
            sandbox: None,
            mcp_servers: Vec::new(),
        },
        reasons: vec!["startup".to_owned()],
    }
}

#[derive(Default)]
struct TestSession {
    events: Vec<EventJson>,
    sink: Option<EventSink>,
    /// `events.subscribe` fails from now on.
    broken: bool,
}

/// A daemon stand-in: sessions are lists of events, and a subscription is the sink of the latest subscribe.
#[derive(Default)]
struct TestServer {
    sessions: Mutex<HashMap<String, TestSession>>,
    /// Signalled when a `session.get` of `wait` or `never` has started.
    entered: Notify,
    /// Lets a waiting `session.get {session_id: "wait"}` answer.
    gate: Notify,
}

impl TestServer {
    /// Appends the next event of `session_id` and offers it to the current subscription, like a session actor.
    fn append(&self, session_id: &str) -> u64 {
        let mut sessions = self.sessions.lock();
        let session = sessions.entry(session_id.to_owned()).or_default();
        let seq = session.events.len() as u64 + 1;
        let json = EventJson::encode(&event(session_id, seq)).unwrap();
        if let Some(sink) = &session.sink
            && sink.offer(seq, &encode_event_notification(session_id, &json)).is_err()
        {
            session.sink = None;
        }
        session.events.push(json);
        seq
    }

    /// Offers an already-delivered event again, as a misbehaving or racing producer might.
    fn offer_again(&self, session_id: &str, seq: u64) {
        let sessions = self.sessions.lock();
        let session = &sessions[session_id];
        let json = &session.events[seq as usize - 1];
        let sink = session.sink.as_ref().unwrap();
        sink.offer(seq, &encode_event_notification(session_id, json)).unwrap();
    }

    fn break_subscriptions(&self, session_id: &str) {
        self.sessions.lock().get_mut(session_id).unwrap().broken = true;
    }
}

impl ServerProtocol for TestServer {
    async fn handshake(&self, ctx: &ServerContext, params: HandshakeParams) -> Result<HandshakeResult, RpcError> {
        ctx.notify_after_reply::<notification::RuntimeChanged>(&startup_snapshot());
        Ok(HandshakeResult {
            protocol_version: params.protocol_version,
            server: ServerInfo { name: "test".to_owned(), version: "0".to_owned() },
        })
    }

    async fn events_subscribe(
        &self,
        ctx: &ServerContext,
        params: EventsSubscribeParams,
    ) -> Result<EventsSubscribeResult, RpcError> {
        let mut sessions = self.sessions.lock();
        let not_found = || {
            RpcError::engine(ErrorCode::SessionNotFound, "no such session", &[("session_id", json!(params.session_id))])
        };
        let session = sessions.get_mut(&params.session_id).ok_or_else(not_found)?;
        if session.broken {
            return Err(not_found());
        }
        let cursor = params.cursor.unwrap_or(0) as usize;
        let events: Vec<EventJson> = session.events.iter().skip(cursor).cloned().collect();
        let last_seq = session.events.len() as u64;
        let sink = ctx.event_sink(&params.session_id);
        sink.mark_replayed_through(last_seq);
        session.sink = Some(sink);
        Ok(EventsSubscribeResult { events, last_seq, history_last_seq: Some(last_seq) })
    }

    async fn session_get(
        &self,
        _ctx: &ServerContext,
        params: SessionIdParams,
    ) -> Result<troupe_protocol::Encoded<SessionResult>, RpcError> {
        let result = match params.session_id.as_str() {
            "missing" => Err(RpcError::engine(
                ErrorCode::SessionNotFound,
                "no session `missing`",
                &[("session_id", json!("missing"))],
            )),
            "wait" => {
                self.entered.notify_one();
                self.gate.notified().await;
                Ok(meta("wait"))
            }
            "never" => {
                self.entered.notify_one();
                std::future::pending().await
            }
            other => Ok(meta(other)),
        };
        result.map(|result| troupe_protocol::Encoded::new(&result).expect("a SessionResult encodes"))
    }
}

async fn start(limits: ServerLimits, options: ClientOptions) -> (Arc<TestServer>, Client, Deliveries) {
    let server = Arc::new(TestServer::default());
    let (client_end, server_end) = InProcessTransport::pair(1024);
    tokio::spawn(serve(server_end, server.clone(), limits));
    let (client, mut deliveries) = within(Client::connect(client_end, options)).await.unwrap();
    assert_eq!(
        next(&mut deliveries).await,
        ClientDelivery::RuntimeChanged(startup_snapshot()),
        "the handshake is followed by runtime.changed"
    );
    (server, client, deliveries)
}

async fn start_default() -> (Arc<TestServer>, Client, Deliveries) {
    start(ServerLimits::default(), ClientOptions::default()).await
}

/// A server whose outbound queue holds `outbound_queue` frames, and a client subscribed to session `s`, which
/// has one event; the replay of that event has been read.
async fn start_subscribed_to_one_event(outbound_queue: usize) -> (Arc<TestServer>, Client, Deliveries) {
    let limits = ServerLimits { outbound_queue, ..ServerLimits::default() };
    let (server, client, mut deliveries) = start(limits, ClientOptions::default()).await;
    server.append("s");
    within(client.subscribe("s", None)).await.unwrap();
    assert_eq!(expect_replay(&mut deliveries, "s", 0, ReplayReason::Subscribe).await, vec![1]);
    (server, client, deliveries)
}

/// Reads deliveries until `ReplayEnd` of `session_id`, returning the replayed `seq`s.
async fn expect_replay(
    deliveries: &mut Deliveries,
    session_id: &str,
    after_seq: u64,
    reason: ReplayReason,
) -> Vec<u64> {
    assert_eq!(
        next(deliveries).await,
        ClientDelivery::ReplayStart { session_id: session_id.to_owned(), after_seq, reason }
    );
    let mut seqs = Vec::new();
    loop {
        match next(deliveries).await {
            ClientDelivery::ReplayEvent(event) => {
                assert_eq!(event, self::event(session_id, event.seq));
                seqs.push(event.seq);
            }
            ClientDelivery::ReplayEnd { session_id: ended, last_seq } => {
                assert_eq!(ended, session_id);
                assert_eq!(last_seq, seqs.last().copied().unwrap_or(after_seq));
                return seqs;
            }
            other => panic!("unexpected delivery inside a replay: {other:?}"),
        }
    }
}

async fn expect_live(deliveries: &mut Deliveries, session_id: &str, seq: u64) {
    assert_eq!(next(deliveries).await, ClientDelivery::Live(event(session_id, seq)));
}

/// `session.get {session_id}`, bounded by the step timeout.
async fn get_session(client: &Client, session_id: &str) -> Result<SessionResult, ClientError> {
    within(client.call::<method::SessionGet>(SessionIdParams { session_id: session_id.to_owned() })).await
}

/// `session.get {session_id}` on its own task, for a call whose answer the test holds back; the test awaits the
/// handle under [`within`].
fn spawn_get_session(client: &Client, session_id: &str) -> JoinHandle<Result<SessionResult, ClientError>> {
    let client = client.clone();
    let params = SessionIdParams { session_id: session_id.to_owned() };
    tokio::spawn(async move { client.call::<method::SessionGet>(params).await })
}

fn expect_rpc_error(error: ClientError) -> RpcError {
    let ClientError::Rpc(error) = error else {
        panic!("expected an RPC error, got {error:?}");
    };
    error
}

/// After the connection ended: the call that was outstanding failed as `expected`, the delivery stream is over,
/// and a new call fails the same way.
async fn expect_connection_ended(
    client: &Client,
    outstanding: JoinHandle<Result<SessionResult, ClientError>>,
    deliveries: &mut Deliveries,
    expected: fn(&ClientError) -> bool,
) {
    let error = within(outstanding).await.unwrap().unwrap_err();
    assert!(expected(&error), "{error:?}");
    assert_eq!(within(deliveries.next()).await, None);
    let error = get_session(client, "x").await.unwrap_err();
    assert!(expected(&error), "{error:?}");
}

#[tokio::test]
async fn concurrent_calls_are_matched_to_their_replies_by_id_even_out_of_order() {
    let (server, client, _deliveries) = start_default().await;

    // The reply to `wait` is held back until a later call has been answered.
    let waiting = spawn_get_session(&client, "wait");
    within(server.entered.notified()).await;

    let calls = (0..32).map(|index| {
        let client = client.clone();
        async move {
            let session_id = format!("session-{index}");
            let result = get_session(&client, &session_id).await.unwrap();
            assert_eq!(result, meta(&session_id));
        }
    });
    within(futures::future::join_all(calls)).await;
    assert!(!waiting.is_finished());

    server.gate.notify_one();
    let result = within(waiting).await.unwrap().unwrap();
    assert_eq!(result, meta("wait"));
}

#[tokio::test]
async fn an_error_reply_becomes_an_rpc_error_with_its_code_and_data() {
    let (_server, client, _deliveries) = start_default().await;

    let error = expect_rpc_error(get_session(&client, "missing").await.unwrap_err());
    assert_eq!(error.code, codes::ENGINE_ERROR);
    assert_eq!(
        error.data,
        Some(json!({"code": "session_not_found", "detail": "no session `missing`", "session_id": "missing"}))
    );

    // A method the test server does not implement answers `not_implemented`.
    let error = within(client.call::<method::RuntimeSnapshotGet>(Default::default())).await.unwrap_err();
    let error = expect_rpc_error(error);
    assert_eq!(error.typed_code(), Some("not_implemented"));
}

#[tokio::test]
async fn a_call_without_an_answer_times_out_and_the_connection_stays_usable() {
    let options = ClientOptions { request_timeout: Duration::from_millis(200), ..ClientOptions::default() };
    let (_server, client, _deliveries) = start(ServerLimits::default(), options).await;

    let error = get_session(&client, "never").await.unwrap_err();
    assert!(matches!(error, ClientError::Timeout), "{error:?}");

    let result = get_session(&client, "after").await.unwrap();
    assert_eq!(result, meta("after"));
}

#[tokio::test]
async fn subscribe_replays_stored_events_then_delivers_live_events_in_order() {
    let (server, client, mut deliveries) = start_default().await;
    for _ in 0..3 {
        server.append("s");
    }

    let last_seq = within(client.subscribe("s", None)).await.unwrap();
    assert_eq!(last_seq, 3);
    let replayed = expect_replay(&mut deliveries, "s", 0, ReplayReason::Subscribe).await;
    assert_eq!(replayed, vec![1, 2, 3]);

    server.append("s");
    server.append("s");
    expect_live(&mut deliveries, "s", 4).await;
    expect_live(&mut deliveries, "s", 5).await;

    // A cursor skips what the consumer already has.
    for _ in 0..3 {
        server.append("t");
    }
    assert_eq!(within(client.subscribe("t", Some(2))).await.unwrap(), 3);
    let replayed = expect_replay(&mut deliveries, "t", 2, ReplayReason::Subscribe).await;
    assert_eq!(replayed, vec![3]);
    server.append("t");
    expect_live(&mut deliveries, "t", 4).await;
}

#[tokio::test]
async fn subscribing_to_an_unknown_session_fails_and_forgets_it() {
    let (_server, client, _deliveries) = start_default().await;
    let error = expect_rpc_error(within(client.subscribe("nope", None)).await.unwrap_err());
    assert_eq!(error.typed_code(), Some("session_not_found"));
}

#[tokio::test]
async fn live_events_at_or_below_the_cursor_are_dropped() {
    let (server, client, mut deliveries) = start_default().await;
    for _ in 0..3 {
        server.append("s");
    }
    within(client.subscribe("s", None)).await.unwrap();
    expect_replay(&mut deliveries, "s", 0, ReplayReason::Subscribe).await;

    server.offer_again("s", 2);
    server.offer_again("s", 3);
    server.append("s");
    server.offer_again("s", 4);
    server.append("s");
    expect_live(&mut deliveries, "s", 4).await;
    expect_live(&mut deliveries, "s", 5).await;
}

#[tokio::test]
async fn a_gap_is_recovered_from_the_cursor_and_every_event_arrives_once_in_order() {
    // A tiny outbound queue: offering many events without yielding makes the server drop the subscription
    // with a gap.
    let (server, _client, mut deliveries) = start_subscribed_to_one_event(4).await;

    const FLOOD: u64 = 300;
    for _ in 0..FLOOD {
        server.append("s");
    }

    let mut expected = 2;
    let mut gap_replays = 0;
    let mut in_replay = false;
    while expected <= FLOOD + 1 || in_replay {
        match next(&mut deliveries).await {
            ClientDelivery::Live(event) | ClientDelivery::ReplayEvent(event) => {
                assert_eq!(event.seq, expected, "each event once, in order");
                expected += 1;
            }
            ClientDelivery::ReplayStart { session_id, after_seq, reason } => {
                assert_eq!(session_id, "s");
                assert_eq!(reason, ReplayReason::Gap);
                assert_eq!(after_seq, expected - 1, "the replay starts at the cursor");
                assert!(!in_replay);
                in_replay = true;
                gap_replays += 1;
            }
            ClientDelivery::ReplayEnd { session_id, last_seq } => {
                assert_eq!(session_id, "s");
                assert_eq!(last_seq, expected - 1);
                assert!(in_replay);
                in_replay = false;
            }
            other => panic!("unexpected delivery: {other:?}"),
        }
    }
    assert!(gap_replays >= 1, "the flood should have caused a gap");

    // The recovered subscription is live.
    let seq = server.append("s");
    expect_live(&mut deliveries, "s", seq).await;
}

#[tokio::test]
async fn a_recovery_that_keeps_failing_is_reported_and_the_session_forgotten() {
    let (server, _client, mut deliveries) = start_subscribed_to_one_event(2).await;

    server.break_subscriptions("s");
    for _ in 0..50 {
        server.append("s");
    }
    // Six retries back off 100 ms doubling: about 6.3 s before the client gives up.
    let failed = loop {
        match tokio::time::timeout(Duration::from_secs(30), deliveries.next())
            .await
            .expect("timed out")
            .expect("the stream ended")
        {
            ClientDelivery::Live(_) => {}
            ClientDelivery::RecoveryFailed { session_id, detail } => break (session_id, detail),
            other => panic!("unexpected delivery: {other:?}"),
        }
    };
    assert_eq!(failed.0, "s");
    assert!(failed.1.contains("no such session"), "{}", failed.1);
}

#[tokio::test]
async fn close_fails_outstanding_calls_and_ends_the_delivery_stream() {
    let (server, client, mut deliveries) = start_default().await;
    let outstanding = spawn_get_session(&client, "never");
    within(server.entered.notified()).await;

    within(client.close()).await;
    expect_connection_ended(&client, outstanding, &mut deliveries, |error| matches!(error, ClientError::Closed)).await;
}

/// A client's `Client::connect` in progress.
type Connecting = JoinHandle<Result<(Client, Deliveries), ClientError>>;

/// Plays the daemon by hand over the other end of an in-process transport.
struct RawDaemon {
    transport: InProcessTransport,
}

impl RawDaemon {
    async fn receive(&mut self) -> Value {
        match within(self.transport.recv()).await.expect("the client hung up") {
            MessageFrame::Text(text) => serde_json::from_str(&text).unwrap(),
            MessageFrame::Value(value) => value,
        }
    }

    async fn send(&mut self, value: Value) {
        within(self.transport.send(MessageFrame::Text(value.to_string()))).await.unwrap();
    }

    /// Starts connecting a client and reads its handshake request, leaving the answer to the test.
    async fn accept(capacity: usize) -> (RawDaemon, Connecting, Value) {
        RawDaemon::accept_with(capacity, ClientOptions::default()).await
    }

    async fn accept_with(capacity: usize, options: ClientOptions) -> (RawDaemon, Connecting, Value) {
        let (client_end, server_end) = InProcessTransport::pair(capacity);
        let mut daemon = RawDaemon { transport: server_end };
        let connecting = tokio::spawn(Client::connect(client_end, options));
        let handshake = daemon.receive().await;
        (daemon, connecting, handshake)
    }

    /// Connects a client, answering its handshake.
    async fn connect() -> (RawDaemon, Client, Deliveries) {
        RawDaemon::connect_with(ClientOptions::default()).await
    }

    async fn connect_with(options: ClientOptions) -> (RawDaemon, Client, Deliveries) {
        let (mut daemon, connecting, handshake) = RawDaemon::accept_with(64, options).await;
        assert_eq!(handshake["method"], "handshake");
        assert_eq!(handshake["params"], json!({"protocol_version": 20}));
        daemon
            .send(reply_frame(
                &handshake["id"],
                json!({"protocol_version": 20, "server": {"name": "raw", "version": "0"}}),
            ))
            .await;
        let (client, deliveries) = within(connecting).await.unwrap().unwrap();
        (daemon, client, deliveries)
    }

    /// Expects the `events.subscribe` from `cursor` that the client sends by itself after a gap, answers it with
    /// the events `seqs`, and checks their replay.
    async fn answer_gap_resubscribe(
        &mut self,
        deliveries: &mut Deliveries,
        session_id: &str,
        cursor: u64,
        seqs: RangeInclusive<u64>,
    ) {
        let request = self.receive().await;
        assert_eq!(request["method"], "events.subscribe");
        assert_eq!(request["params"], json!({"session_id": session_id, "cursor": cursor}));
        self.send(subscribe_reply(&request["id"], session_id, seqs.clone(), *seqs.end())).await;
        assert_eq!(expect_replay(deliveries, session_id, cursor, ReplayReason::Gap).await, seqs.collect::<Vec<u64>>());
    }
}

#[tokio::test]
async fn request_ids_are_increasing_integers() {
    let (mut daemon, client, _deliveries) = RawDaemon::connect().await;
    let first = spawn_get_session(&client, "a");
    let request = daemon.receive().await;
    assert_eq!(request["method"], "session.get");
    assert_eq!(request["params"], json!({"session_id": "a"}));
    let first_id = request["id"].as_u64().unwrap();
    let second = spawn_get_session(&client, "b");
    let request = daemon.receive().await;
    let second_id = request["id"].as_u64().unwrap();
    assert!(second_id > first_id);

    // Answered in reverse order.
    for (id, session_id) in [(second_id, "b"), (first_id, "a")] {
        daemon.send(session_get_reply(&json!(id), session_id)).await;
    }
    assert_eq!(within(first).await.unwrap().unwrap(), meta("a"));
    assert_eq!(within(second).await.unwrap().unwrap(), meta("b"));
}

#[tokio::test]
async fn notifications_are_delivered_in_arrival_order_and_strays_are_ignored() {
    let (mut daemon, client, mut deliveries) = RawDaemon::connect().await;
    let delta = json!({"session_id": "s", "run_id": "r", "tool_call_id": "t", "stream": "stdout",
        "byte_offset": 0, "data": "aGk="});
    let plugin = json!({"session_id": "s", "plugin": "p", "name": "n", "payload": {"x": 1}});
    let snapshot = json!({"session_id": "s", "run_id": "r", "tool_call_id": "t", "stream": "stdout",
        "start_offset": 0, "end_offset": 2, "data": "aGk="});
    let output_gap = json!({"session_id": "s", "run_id": "r", "tool_call_id": "t", "stream": "stdout",
        "next_offset": 9});
    let changed = serde_json::to_value(startup_snapshot()).unwrap();
    for frame in [
        // A reply to an id the client never used.
        json!({"jsonrpc": "2.0", "id": 999, "result": {}}),
        // Events and gaps of a session the client never subscribed to.
        event_frame("nobody", 1),
        gap_frame("nobody", 1),
        notification_frame("events.tool_output_delta", &delta),
        notification_frame("events.plugin", &plugin),
        notification_frame("no.such.notification", &json!({})),
        notification_frame("events.tool_output_snapshot", &snapshot),
        notification_frame("events.tool_output_gap", &output_gap),
        notification_frame("runtime.changed", &changed),
    ] {
        daemon.send(frame).await;
    }
    let mut delivered = Vec::new();
    for _ in 0..5 {
        delivered.push(next(&mut deliveries).await);
    }
    assert_eq!(
        delivered,
        vec![
            ClientDelivery::ToolOutputDelta(delta),
            ClientDelivery::PluginEvent(plugin),
            ClientDelivery::ToolOutputSnapshot(snapshot),
            ClientDelivery::ToolOutputGap(output_gap),
            ClientDelivery::RuntimeChanged(startup_snapshot()),
        ]
    );

    // The stray gap did not make the client subscribe to anything: the next frame it writes is this call.
    let call = spawn_get_session(&client, "s");
    let request = daemon.receive().await;
    assert_eq!(request["method"], "session.get");
    daemon.send(session_get_reply(&request["id"], "s")).await;
    assert_eq!(within(call).await.unwrap().unwrap(), meta("s"));
}

fn notification_frame(method: &str, params: &Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

fn event_frame(session_id: &str, seq: u64) -> Value {
    let event = serde_json::to_value(event(session_id, seq)).unwrap();
    notification_frame("events.subscription", &json!({"type": "event", "session_id": session_id, "event": event}))
}

fn gap_frame(session_id: &str, last_delivered_seq: u64) -> Value {
    notification_frame(
        "events.subscription",
        &json!({"type": "gap", "session_id": session_id, "last_delivered_seq": last_delivered_seq}),
    )
}

fn reply_frame(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn session_get_reply(id: &Value, session_id: &str) -> Value {
    reply_frame(id, serde_json::to_value(meta(session_id)).unwrap())
}

fn subscribe_reply(id: &Value, session_id: &str, seqs: RangeInclusive<u64>, last_seq: u64) -> Value {
    let events: Vec<Value> = seqs.map(|seq| serde_json::to_value(event(session_id, seq)).unwrap()).collect();
    reply_frame(id, json!({"events": events, "last_seq": last_seq}))
}

#[tokio::test]
async fn live_events_read_before_a_subscribe_reply_are_delivered_after_its_replay_once() {
    let (mut daemon, client, mut deliveries) = RawDaemon::connect().await;
    let subscribing = tokio::spawn({
        let client = client.clone();
        async move { client.subscribe("s", None).await }
    });
    let request = daemon.receive().await;
    assert_eq!(request["method"], "events.subscribe");
    assert_eq!(request["params"]["session_id"], "s");
    assert!(request["params"]["cursor"].is_null());

    // A live event overtakes the reply (as the previous subscription's events can): it is held back.
    daemon.send(event_frame("s", 3)).await;
    daemon.send(subscribe_reply(&request["id"], "s", 1..=2, 2)).await;
    daemon.send(event_frame("s", 3)).await;
    daemon.send(event_frame("s", 4)).await;

    assert_eq!(within(subscribing).await.unwrap().unwrap(), 2);
    assert_eq!(expect_replay(&mut deliveries, "s", 0, ReplayReason::Subscribe).await, vec![1, 2]);
    expect_live(&mut deliveries, "s", 3).await;
    expect_live(&mut deliveries, "s", 4).await;
}

#[tokio::test]
async fn a_gap_is_answered_with_a_subscribe_from_the_cursor_even_while_a_subscribe_is_in_flight() {
    let (mut daemon, client, mut deliveries) = RawDaemon::connect().await;
    let subscribing = tokio::spawn({
        let client = client.clone();
        async move { client.subscribe("s", Some(1)).await }
    });
    let request = daemon.receive().await;
    assert_eq!(request["params"], json!({"session_id": "s", "cursor": 1}));

    // The new subscription falls behind before its reply is even written: its gap comes first.
    daemon.send(gap_frame("s", 3)).await;
    daemon.send(subscribe_reply(&request["id"], "s", 2..=3, 3)).await;
    assert_eq!(within(subscribing).await.unwrap().unwrap(), 3);
    assert_eq!(expect_replay(&mut deliveries, "s", 1, ReplayReason::Subscribe).await, vec![2, 3]);

    // So the client subscribes again from its cursor by itself.
    daemon.answer_gap_resubscribe(&mut deliveries, "s", 3, 4..=5).await;
    daemon.send(event_frame("s", 5)).await;
    daemon.send(event_frame("s", 6)).await;
    expect_live(&mut deliveries, "s", 6).await;

    // A gap on a live subscription: the same, from the cursor.
    daemon.send(gap_frame("s", 6)).await;
    daemon.answer_gap_resubscribe(&mut deliveries, "s", 6, 7..=7).await;
}

#[tokio::test]
async fn outstanding_calls_fail_when_the_transport_closes() {
    let (mut daemon, client, mut deliveries) = RawDaemon::connect().await;
    let outstanding = spawn_get_session(&client, "s");
    assert_eq!(daemon.receive().await["method"], "session.get");
    drop(daemon);

    // Without a reconnect policy the stream simply ends.
    expect_connection_ended(&client, outstanding, &mut deliveries, |error| matches!(error, ClientError::Disconnected))
        .await;
}

#[tokio::test]
async fn a_request_before_the_handshake_is_rejected_by_the_server() {
    let (mut client_end, server_end) = InProcessTransport::pair(8);
    tokio::spawn(serve(server_end, Arc::new(TestServer::default()), ServerLimits::default()));
    within(client_end.send(MessageFrame::Text(
        r#"{"jsonrpc":"2.0","id":1,"method":"session.get","params":{"session_id":"x"}}"#.to_owned(),
    )))
    .await
    .unwrap();
    let reply: Value = serde_json::from_str(&within(client_end.recv()).await.unwrap().into_text()).unwrap();
    assert_eq!(reply["id"], 1);
    assert_eq!(reply["error"]["code"], codes::HANDSHAKE_REQUIRED);
}

#[tokio::test]
async fn a_handshake_refused_by_the_daemon_fails_connect() {
    let (mut daemon, connecting, handshake) = RawDaemon::accept(8).await;
    daemon
        .send(json!({"jsonrpc": "2.0", "id": handshake["id"], "error": {
            "code": -32602, "message": "Invalid params",
            "data": {"code": "unsupported_protocol_version", "detail": "no", "supported": [21]}}}))
        .await;
    let error = expect_rpc_error(within(connecting).await.unwrap().unwrap_err());
    assert_eq!(error.typed_code(), Some("unsupported_protocol_version"));
}

// ---- WebSocket ----

/// The daemon's end of a WebSocket, as a `Transport` for `serve`.
struct ServerSocket(WebSocketStream<TcpStream>);

impl Transport for ServerSocket {
    async fn send(&mut self, frame: MessageFrame) -> Result<(), TransportError> {
        self.0
            .send(Message::Text(frame.into_text().into()))
            .await
            .map_err(|error| TransportError::new(error.to_string()))
    }

    async fn recv(&mut self) -> Option<MessageFrame> {
        loop {
            match self.0.next().await? {
                Ok(Message::Text(text)) => {
                    return Some(MessageFrame::Text(text.as_str().to_owned()));
                }
                Ok(Message::Close(_)) | Err(_) => return None,
                Ok(_) => continue,
            }
        }
    }
}

const TOKEN: &str = "test-token-0123456789";

/// A WebSocket daemon on `127.0.0.1:0` that checks the bearer token like the gateway (401), refuses the path
/// `/forbidden` like a bad Origin (403), and serves `server` on `/ws`. Returns its URL base and the abort
/// handles of the connections it served, so a test can cut one.
// tungstenite's accept callback returns `Result<Response, ErrorResponse>`; its size is not ours to choose.
#[allow(clippy::result_large_err)]
async fn websocket_daemon(server: Arc<TestServer>) -> (String, Arc<Mutex<Vec<AbortHandle>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let connections = Arc::new(Mutex::new(Vec::new()));
    tokio::spawn({
        let connections = connections.clone();
        async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let check = |request: &Request, response: Response| -> Result<Response, ErrorResponse> {
                    let refuse = |status: StatusCode| {
                        let mut refusal = ErrorResponse::new(None);
                        *refusal.status_mut() = status;
                        Err(refusal)
                    };
                    let expected = format!("Bearer {TOKEN}");
                    if request.headers().get("authorization").map(|value| value.as_bytes()) != Some(expected.as_bytes())
                    {
                        return refuse(StatusCode::UNAUTHORIZED);
                    }
                    if request.uri().path() == "/forbidden" {
                        return refuse(StatusCode::FORBIDDEN);
                    }
                    Ok(response)
                };
                let Ok(socket) = tokio_tungstenite::accept_hdr_async(tcp, check).await else {
                    continue;
                };
                let served = tokio::spawn(serve(ServerSocket(socket), server.clone(), ServerLimits::default()));
                connections.lock().push(served.abort_handle());
            }
        }
    });
    (format!("ws://{address}"), connections)
}

#[tokio::test]
async fn wss_to_a_plain_websocket_server_fails_in_the_tls_handshake_without_the_token() {
    let (base, _connections) = websocket_daemon(Arc::new(TestServer::default())).await;
    let url = format!("{}/ws", base.replacen("ws://", "wss://", 1));
    let error = within(Client::connect_websocket(&url, TOKEN, ClientOptions::default())).await.unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, ClientError::Transport(_, None)), "{error:?}");
    assert!(message.to_lowercase().contains("tls"), "{message}");
    assert!(!message.contains(TOKEN));
}

#[tokio::test]
async fn a_refused_upgrade_says_why() {
    let (base, _connections) = websocket_daemon(Arc::new(TestServer::default())).await;

    let error = within(WebSocketTransport::connect(&format!("{base}/ws"), "wrong-token")).await.unwrap_err();
    assert!(error.0.contains("unauthorized (check the token"), "{error}");
    assert!(!error.0.contains("wrong-token"));
    assert_eq!(error.1, Some(OpenFailure::Unauthorized));

    let error = within(WebSocketTransport::connect(&format!("{base}/forbidden"), TOKEN)).await.unwrap_err();
    assert!(error.0.contains("forbidden origin"), "{error}");
    assert!(!error.0.contains(TOKEN));
    assert_eq!(error.1, None, "a refused origin is not a refused token");
}

#[tokio::test]
async fn over_websocket_the_client_reconnects_and_resubscribes_from_its_cursor() {
    let server = Arc::new(TestServer::default());
    let (base, connections) = websocket_daemon(server.clone()).await;
    let options = ClientOptions {
        reconnect: Some(ReconnectPolicy {
            initial_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(100),
            max_attempts: None,
        }),
        ..ClientOptions::default()
    };
    let (client, mut deliveries) =
        within(Client::connect_websocket(&format!("{base}/ws"), TOKEN, options)).await.unwrap();
    assert_eq!(next(&mut deliveries).await, ClientDelivery::RuntimeChanged(startup_snapshot()));
    server.append("s");
    server.append("s");
    within(client.subscribe("s", None)).await.unwrap();
    assert_eq!(expect_replay(&mut deliveries, "s", 0, ReplayReason::Subscribe).await, vec![1, 2]);
    server.append("s");
    expect_live(&mut deliveries, "s", 3).await;

    // Cut the connection from the daemon's side.
    let first = connections.lock()[0].clone();
    first.abort();
    assert!(matches!(next(&mut deliveries).await, ClientDelivery::Disconnected { .. }));
    // Events appended while the client is away come back through the replay from its cursor.
    server.append("s");
    let call = spawn_get_session(&client, "x");

    assert_eq!(next(&mut deliveries).await, ClientDelivery::Reconnected);
    assert_eq!(next(&mut deliveries).await, ClientDelivery::RuntimeChanged(startup_snapshot()));
    assert_eq!(expect_replay(&mut deliveries, "s", 3, ReplayReason::Reconnect).await, vec![4]);
    server.append("s");
    expect_live(&mut deliveries, "s", 5).await;
    // A call made while disconnected waited for the new connection.
    assert_eq!(within(call).await.unwrap().unwrap(), meta("x"));
    within(client.close()).await;
}

// ---- Back-pressure and paged replays ----

/// Options with a delivery stream of `capacity` slots.
fn small_buffer(capacity: usize) -> ClientOptions {
    ClientOptions { delivery_buffer: capacity, ..ClientOptions::default() }
}

/// Reads deliveries until event `last` of session `s` has arrived; checks that every event after `after` came
/// once and in order, replays included. Returns how many replays were for a gap.
async fn expect_every_event(deliveries: &mut Deliveries, after: u64, last: u64) -> usize {
    let mut expected = after + 1;
    let mut gap_replays = 0;
    while expected <= last {
        match next(deliveries).await {
            ClientDelivery::Live(event) | ClientDelivery::ReplayEvent(event) => {
                assert_eq!(event.seq, expected, "each event once, in order");
                expected += 1;
            }
            ClientDelivery::ReplayStart { reason, after_seq, .. } => {
                assert_eq!(after_seq, expected - 1, "a replay starts at the cursor");
                if reason == ReplayReason::Gap {
                    gap_replays += 1;
                }
            }
            ClientDelivery::ReplayEnd { .. } | ClientDelivery::RuntimeChanged(_) => {}
            other => panic!("unexpected delivery: {other:?}"),
        }
    }
    gap_replays
}

#[tokio::test]
async fn a_consumer_that_never_reads_deliveries_still_gets_call_answers() {
    let (server, client, mut deliveries) = start(ServerLimits::default(), small_buffer(4)).await;
    server.append("s");
    within(client.subscribe("s", None)).await.unwrap();

    // Far more events than the stream holds, none of them read.
    const EVENTS: u64 = 3_000;
    for _ in 1..EVENTS {
        server.append("s");
    }
    for index in 0..20 {
        let session_id = format!("call-{index}");
        assert_eq!(get_session(&client, &session_id).await.unwrap(), meta(&session_id));
    }

    // Nothing was lost meanwhile: the consumer catches up by a replay from its cursor.
    let gap_replays = expect_every_event(&mut deliveries, 0, EVENTS).await;
    assert!(gap_replays >= 1, "the consumer fell behind, so its events came back as a replay");
    let seq = server.append("s");
    loop {
        match next(&mut deliveries).await {
            ClientDelivery::ReplayEnd { .. } => {}
            delivery => break assert_eq!(delivery, ClientDelivery::Live(event("s", seq))),
        }
    }
}

#[tokio::test]
async fn a_paged_reply_is_followed_by_the_rest_of_the_history_as_event_notifications() {
    let (mut daemon, client, mut deliveries) = RawDaemon::connect().await;
    let subscribing = tokio::spawn({
        let client = client.clone();
        async move { client.subscribe("s", None).await }
    });
    let request = daemon.receive().await;
    assert_eq!(request["method"], "events.subscribe");
    // The session has six events; the reply carries the first page.
    daemon.send(subscribe_reply(&request["id"], "s", 1..=3, 3)).await;
    for seq in 4..=6 {
        daemon.send(event_frame("s", seq)).await;
    }

    assert_eq!(within(subscribing).await.unwrap().unwrap(), 3);
    assert_eq!(expect_replay(&mut deliveries, "s", 0, ReplayReason::Subscribe).await, vec![1, 2, 3]);
    for seq in 4..=6 {
        expect_live(&mut deliveries, "s", seq).await;
    }
}

/// Plays a daemon that pages replays: a session of `events` events, `page` per subscribe reply, the rest sent
/// as event notifications right after it; `session.get` is answered at once.
async fn serve_paging(mut daemon: RawDaemon, events: u64, page: u64) {
    loop {
        let request = match tokio::time::timeout(STEP, daemon.transport.recv()).await {
            Ok(Some(frame)) => serde_json::from_str::<Value>(&frame.into_text()).unwrap(),
            _ => return,
        };
        match request["method"].as_str() {
            Some("events.subscribe") => {
                let cursor = request["params"]["cursor"].as_u64().unwrap_or(0);
                let last = (cursor + page).min(events);
                daemon.send(subscribe_reply(&request["id"], "s", cursor + 1..=last, last)).await;
                for seq in last + 1..=events {
                    daemon.send(event_frame("s", seq)).await;
                }
            }
            Some("session.get") => {
                let session_id = request["params"]["session_id"].as_str().unwrap().to_owned();
                daemon.send(session_get_reply(&request["id"], &session_id)).await;
            }
            other => panic!("unexpected request {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_slow_consumer_of_a_paging_daemon_gets_every_event_once_and_its_calls_answered() {
    const EVENTS: u64 = 2_000;
    let (daemon, client, mut deliveries) = RawDaemon::connect_with(small_buffer(8)).await;
    let serving = tokio::spawn(serve_paging(daemon, EVENTS, 100));

    assert_eq!(within(client.subscribe("s", None)).await.unwrap(), 100);
    // The consumer reads nothing yet; its calls are answered all the same.
    for index in 0..5 {
        let session_id = format!("call-{index}");
        assert_eq!(get_session(&client, &session_id).await.unwrap(), meta(&session_id));
    }
    let gap_replays = expect_every_event(&mut deliveries, 0, EVENTS).await;
    assert!(gap_replays >= 1, "the consumer fell behind the notifications that follow the first page");
    within(client.close()).await;
    within(serving).await.unwrap();
}

#[tokio::test]
async fn tool_output_dropped_for_a_slow_consumer_is_reported_as_a_gap_before_later_output() {
    let (mut daemon, client, mut deliveries) = RawDaemon::connect_with(small_buffer(1)).await;
    let delta = |offset: u64| {
        json!({"session_id": "s", "run_id": "r", "tool_call_id": "t", "stream": "stdout",
            "byte_offset": offset, "data": "aGk="})
    };
    let plugin = json!({"session_id": "s", "plugin": "p", "name": "n", "payload": {}});
    // The stream holds one delivery: the plugin event fills it, the first delta waits, the rest is dropped.
    daemon.send(notification_frame("events.plugin", &plugin)).await;
    for offset in [0, 2, 4] {
        daemon.send(notification_frame("events.tool_output_delta", &delta(offset))).await;
    }
    daemon.send(notification_frame("events.plugin", &plugin)).await;
    // A call answered after them: the client has read all of them.
    let call = spawn_get_session(&client, "x");
    let request = daemon.receive().await;
    daemon.send(session_get_reply(&request["id"], "x")).await;
    assert_eq!(within(call).await.unwrap().unwrap(), meta("x"));

    assert_eq!(next(&mut deliveries).await, ClientDelivery::PluginEvent(plugin.clone()));
    assert_eq!(next(&mut deliveries).await, ClientDelivery::ToolOutputDelta(delta(0)));
    let gap = json!({"session_id": "s", "run_id": "r", "tool_call_id": "t", "stream": "stdout", "next_offset": 6});
    assert_eq!(next(&mut deliveries).await, ClientDelivery::ToolOutputGap(gap));
    assert_eq!(next(&mut deliveries).await, ClientDelivery::PluginEventsDropped { count: 1 });

    // Output after the gap flows again.
    daemon.send(notification_frame("events.tool_output_delta", &delta(6))).await;
    assert_eq!(next(&mut deliveries).await, ClientDelivery::ToolOutputDelta(delta(6)));
}

#[tokio::test]
async fn the_client_implements_the_client_protocol_of_the_reference() {
    use troupe_protocol::client::{ClientProtocol, DeliveryStream};

    /// Written against the trait only, as the CLI is.
    async fn follow<C: ClientProtocol>(client: &C, deliveries: &mut C::Deliveries) -> (SessionResult, Vec<u64>) {
        let session = client.session_get(SessionIdParams { session_id: "s".to_owned() }).await.unwrap();
        client.subscribe("s", None).await.unwrap();
        let mut seqs = Vec::new();
        while seqs.len() < 2 {
            if let Some(ClientDelivery::ReplayEvent(event)) = deliveries.next().await {
                seqs.push(event.seq);
            }
        }
        (session, seqs)
    }

    let (server, client, mut deliveries) = start_default().await;
    server.append("s");
    server.append("s");
    let (session, seqs) = within(follow(&client, &mut deliveries)).await;
    assert_eq!(session, meta("s"));
    assert_eq!(seqs, vec![1, 2]);
}

#[tokio::test]
async fn a_daemon_that_does_not_know_client_info_is_handshaken_without_it() {
    let options = ClientOptions { client_info: Some(ClientInfo::named("tester")), ..ClientOptions::default() };
    let (mut daemon, connecting, handshake) = RawDaemon::accept_with(64, options).await;
    assert_eq!(handshake["params"], json!({"protocol_version": 20, "client_info": {"name": "tester"}}));
    // A daemon from before the extension: serde's refusal of an unknown field, with no typed code.
    let detail = "invalid params for `handshake`: unknown field `client_info`, expected `protocol_version`";
    let refusal = json!({"code": -32602, "message": "Invalid params", "data": {"detail": detail}});
    daemon.send(json!({"jsonrpc": "2.0", "id": handshake["id"], "error": refusal})).await;
    let again = daemon.receive().await;
    assert_eq!(again["method"], "handshake");
    assert_eq!(again["params"], json!({"protocol_version": 20}));
    daemon
        .send(reply_frame(&again["id"], json!({"protocol_version": 20, "server": {"name": "old", "version": "0"}})))
        .await;
    within(connecting).await.unwrap().expect("connected without client_info");
}

#[tokio::test]
async fn a_client_info_the_daemon_refuses_is_reported_not_dropped() {
    let options = ClientOptions { client_info: Some(ClientInfo::named("tester")), ..ClientOptions::default() };
    let (mut daemon, connecting, handshake) = RawDaemon::accept_with(64, options).await;
    let refusal =
        json!({"code": -32602, "message": "Invalid params", "data": {"code": "invalid_client_info", "detail": "bad"}});
    daemon.send(json!({"jsonrpc": "2.0", "id": handshake["id"], "error": refusal})).await;
    let error = within(connecting).await.unwrap().expect_err("the refusal is the client's to fix");
    assert_eq!(expect_rpc_error(error).typed_code(), Some("invalid_client_info"));
}
