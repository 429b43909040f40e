//! The gateway over the real wire: a real server on 127.0.0.1:0, real WebSocket clients, and a tiny fake engine
//! (the point is the edge, not the engine). Every await is under a timeout.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream as StdTcpStream};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use troupe_protocol::error_code::ErrorCode;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{HeaderName, HeaderValue};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use troupe_gateway::{GatewayConfig, RunningGateway, Token, start};
use troupe_protocol::RpcError;
use troupe_protocol::server::{ServerContext, ServerProtocol};
use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::runtime::{HandshakeParams, HandshakeResult, ServerInfo};
use troupe_protocol::types::session::SessionResult;

const TOKEN: &str = "test-token-0123456789";
const STEP: Duration = Duration::from_secs(10);

type Client = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Answers `handshake`, refuses `session.get` (held until released when `hold_session_get` is set) and records
/// connects and disconnects.
#[derive(Default)]
struct FakeEngine {
    hold_session_get: bool,
    release_session_get: tokio::sync::Notify,
    connected: Mutex<Vec<u64>>,
    disconnected: Mutex<Vec<u64>>,
}

impl ServerProtocol for FakeEngine {
    fn connected(&self, connection_id: u64) {
        self.connected.lock().unwrap().push(connection_id);
    }

    fn disconnected(&self, connection_id: u64) {
        self.disconnected.lock().unwrap().push(connection_id);
    }

    async fn handshake(&self, _ctx: &ServerContext, _params: HandshakeParams) -> Result<HandshakeResult, RpcError> {
        Ok(HandshakeResult {
            protocol_version: 20,
            server: ServerInfo { name: "fake".to_owned(), version: "0.0.0".to_owned() },
        })
    }

    async fn session_get(
        &self,
        _ctx: &ServerContext,
        params: SessionIdParams,
    ) -> Result<troupe_protocol::Encoded<SessionResult>, RpcError> {
        if self.hold_session_get {
            self.release_session_get.notified().await;
        }
        Err(RpcError::engine(
            ErrorCode::SessionNotFound,
            "no such session",
            &[("session_id", json!(params.session_id))],
        ))
    }
}

struct TestGateway {
    running: RunningGateway,
    engine: Arc<FakeEngine>,
    ready: Arc<AtomicBool>,
}

impl TestGateway {
    async fn start(engine: FakeEngine, adjust: impl FnOnce(&mut GatewayConfig)) -> TestGateway {
        let engine = Arc::new(engine);
        let ready = Arc::new(AtomicBool::new(false));
        let mut config = GatewayConfig::new("127.0.0.1:0".parse().unwrap(), Token::new(TOKEN));
        config.workers = 1;
        adjust(&mut config);
        let readiness = {
            let ready = ready.clone();
            Arc::new(move || ready.load(Ordering::SeqCst))
        };
        let (running, server) = start(engine.clone(), config, readiness).expect("the gateway starts");
        assert_ne!(running.local_addr().expect("a TCP listener").port(), 0);
        actix_web::rt::spawn(server);
        TestGateway { running, engine, ready }
    }

    fn addr(&self) -> SocketAddr {
        self.running.local_addr().expect("a TCP listener")
    }

    async fn connect(
        &self,
        headers: &[(&str, &str)],
    ) -> Result<(Client, tungstenite::handshake::client::Response), tungstenite::Error> {
        let mut request = format!("ws://{}/ws", self.addr()).into_client_request().unwrap();
        for (name, value) in headers {
            request
                .headers_mut()
                .append(HeaderName::from_bytes(name.as_bytes()).unwrap(), HeaderValue::from_str(value).unwrap());
        }
        tokio::time::timeout(STEP, tokio_tungstenite::connect_async(request)).await.expect("the upgrade timed out")
    }

    async fn connect_with_token(&self) -> Client {
        self.connect(&[("authorization", &format!("Bearer {TOKEN}"))]).await.expect("the upgrade succeeds").0
    }

    async fn connect_and_handshake(&self) -> Client {
        let mut client = self.connect_with_token().await;
        send(
            &mut client,
            json!({"jsonrpc": "2.0", "id": 1, "method": "handshake", "params": {"protocol_version": 20}}),
        )
        .await;
        let reply = next_json(&mut client).await;
        assert_eq!(reply["id"], 1, "{reply}");
        client
    }

    async fn wait_for_disconnects(&self, count: usize) {
        poll_until(&format!("{count} disconnects"), || self.engine.disconnected.lock().unwrap().len() >= count).await;
    }

    async fn stop(&self) {
        tokio::time::timeout(STEP, self.running.stop()).await.expect("stop timed out");
    }
}

async fn poll_until(what: &str, condition: impl FnMut() -> bool) {
    troupe_test_support::eventually(what, STEP, condition).await;
}

async fn send(client: &mut Client, value: Value) {
    tokio::time::timeout(STEP, client.send(Message::Text(value.to_string().into())))
        .await
        .expect("send timed out")
        .expect("send failed");
}

/// The next message that is not a ping or pong.
async fn next_message(client: &mut Client) -> Option<Message> {
    loop {
        let message = tokio::time::timeout(STEP, client.next()).await.expect("no message in time")?;
        match message {
            Ok(Message::Ping(_) | Message::Pong(_)) => continue,
            Ok(message) => return Some(message),
            Err(_) => return None,
        }
    }
}

async fn next_json(client: &mut Client) -> Value {
    match next_message(client).await {
        Some(Message::Text(text)) => serde_json::from_str(&text).expect("a JSON frame"),
        other => panic!("expected a text frame, got {other:?}"),
    }
}

async fn expect_close(client: &mut Client, code: CloseCode) {
    match next_message(client).await {
        Some(Message::Close(Some(frame))) => assert_eq!(frame.code, code, "{frame:?}"),
        other => panic!("expected a close frame with {code:?}, got {other:?}"),
    }
}

/// A raw HTTP/1.1 exchange, for the statuses and headers a WebSocket client hides. Returns the status, the
/// lowercased header lines and the body (empty for a 101).
async fn raw_http(addr: SocketAddr, request: String) -> (u16, Vec<(String, String)>, String) {
    let exchange = tokio::task::spawn_blocking(move || {
        let mut stream = StdTcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(STEP)).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut received = Vec::new();
        let mut buffer = [0u8; 4096];
        loop {
            let read = stream.read(&mut buffer).unwrap_or(0);
            if read == 0 {
                break;
            }
            received.extend_from_slice(&buffer[..read]);
            let text = String::from_utf8_lossy(&received);
            // A 101 keeps the socket open; its head is all there is to read.
            if text.starts_with("HTTP/1.1 101") && text.contains("\r\n\r\n") {
                break;
            }
        }
        String::from_utf8_lossy(&received).into_owned()
    });
    let text = tokio::time::timeout(STEP, exchange).await.expect("HTTP timed out").unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete HTTP head");
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

fn upgrade_request(addr: SocketAddr, extra_headers: &str) -> String {
    format!(
        "GET /ws HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{extra_headers}\r\n"
    )
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str())
}

fn http_status(error: tungstenite::Error) -> u16 {
    match error {
        tungstenite::Error::Http(response) => response.status().as_u16(),
        other => panic!("expected an HTTP refusal, got {other:?}"),
    }
}

#[actix_web::test]
async fn missing_or_wrong_tokens_get_401() {
    let gateway = TestGateway::start(FakeEngine::default(), |_| {}).await;
    assert_eq!(http_status(gateway.connect(&[]).await.unwrap_err()), 401);
    let wrong = gateway.connect(&[("authorization", "Bearer not-the-token")]).await;
    assert_eq!(http_status(wrong.unwrap_err()), 401);
    let wrong_subprotocol = gateway.connect(&[("sec-websocket-protocol", "troupe, troupe.bearer.nope")]).await;
    assert_eq!(http_status(wrong_subprotocol.unwrap_err()), 401);

    let (status, headers, body) = raw_http(gateway.addr(), upgrade_request(gateway.addr(), "")).await;
    assert_eq!(status, 401);
    assert_eq!(header(&headers, "www-authenticate"), Some("Bearer"));
    assert!(!body.contains(TOKEN));
    assert!(gateway.engine.connected.lock().unwrap().is_empty(), "a refused upgrade never reaches the engine");
    gateway.stop().await;
}

#[actix_web::test]
async fn origins_are_checked_before_the_token() {
    let gateway = TestGateway::start(FakeEngine::default(), |config| {
        config.allowed_origins = vec!["https://Console.Example.com:443".to_owned()];
    })
    .await;
    let bearer = format!("Bearer {TOKEN}");
    let foreign = gateway.connect(&[("origin", "http://evil.example"), ("authorization", &bearer)]).await;
    assert_eq!(http_status(foreign.unwrap_err()), 403);
    // A foreign origin without a token is still a 403: the origin is checked first.
    let (status, _, body) =
        raw_http(gateway.addr(), upgrade_request(gateway.addr(), "Origin: http://evil.example\r\n")).await;
    assert_eq!((status, body.as_str()), (403, "origin not allowed"));

    let same_host = format!("http://{}", gateway.addr());
    gateway
        .connect(&[("origin", &same_host), ("authorization", &bearer)])
        .await
        .expect("the daemon's own origin is accepted");
    gateway
        .connect(&[("origin", "https://console.example.com"), ("authorization", &bearer)])
        .await
        .expect("a listed origin is accepted");
    gateway.stop().await;
}

#[actix_web::test]
async fn a_subprotocol_token_is_accepted_and_troupe_selected() {
    let gateway = TestGateway::start(FakeEngine::default(), |_| {}).await;
    let offered = format!("troupe, troupe.bearer.{TOKEN}");
    let (mut client, response) =
        gateway.connect(&[("sec-websocket-protocol", &offered)]).await.expect("the subprotocol token is accepted");
    assert_eq!(response.headers().get("sec-websocket-protocol").and_then(|value| value.to_str().ok()), Some("troupe"));
    send(&mut client, json!({"jsonrpc": "2.0", "id": 1, "method": "handshake", "params": {"protocol_version": 20}}))
        .await;
    assert_eq!(next_json(&mut client).await["result"]["protocol_version"], 20);

    // Only the token entry offered: the upgrade succeeds and selects nothing, as RFC 6455 requires (a server may
    // select only what the client offered; strict clients abort otherwise), and the token is never echoed.
    let (status, headers, _) = raw_http(
        gateway.addr(),
        upgrade_request(gateway.addr(), &format!("Sec-WebSocket-Protocol: troupe.bearer.{TOKEN}\r\n")),
    )
    .await;
    assert_eq!(status, 101);
    assert_eq!(header(&headers, "sec-websocket-protocol"), None);
    // (tungstenite's own client, stricter than the RFC, refuses a handshake that selects none when it offered
    // some, so this case is checked on the raw upgrade; browsers and Python's websockets accept it.)
    gateway.stop().await;
}

#[actix_web::test]
async fn handshake_round_trip_and_an_error_reply() {
    let gateway = TestGateway::start(FakeEngine::default(), |_| {}).await;
    let mut client = gateway.connect_with_token().await;
    send(&mut client, json!({"jsonrpc": "2.0", "id": 1, "method": "handshake", "params": {"protocol_version": 20}}))
        .await;
    assert_eq!(
        next_json(&mut client).await,
        json!({"jsonrpc": "2.0", "id": 1, "result": {"protocol_version": 20, "server": {"name": "fake", "version": "0.0.0"}}})
    );
    send(&mut client, json!({"jsonrpc": "2.0", "id": 2, "method": "session.get", "params": {"session_id": "s-1"}}))
        .await;
    let reply = next_json(&mut client).await;
    assert_eq!(reply["id"], 2);
    assert_eq!(reply["error"]["code"], -32000);
    assert_eq!(reply["error"]["data"]["code"], "session_not_found");
    assert_eq!(reply["error"]["data"]["session_id"], "s-1");

    let connection_id = gateway.engine.connected.lock().unwrap()[0];
    drop(client);
    gateway.wait_for_disconnects(1).await;
    assert_eq!(*gateway.engine.disconnected.lock().unwrap(), vec![connection_id]);
    gateway.stop().await;
}

#[actix_web::test]
async fn a_binary_frame_closes_with_1003() {
    let gateway = TestGateway::start(FakeEngine::default(), |_| {}).await;
    let mut client = gateway.connect_and_handshake().await;
    tokio::time::timeout(STEP, client.send(Message::Binary(vec![1, 2, 3].into()))).await.unwrap().unwrap();
    expect_close(&mut client, CloseCode::Unsupported).await;
    gateway.wait_for_disconnects(1).await;
    gateway.stop().await;
}

#[actix_web::test]
async fn a_frame_over_max_frame_bytes_closes_with_1009() {
    let gateway = TestGateway::start(FakeEngine::default(), |config| config.max_frame_bytes = 1024).await;
    let mut client = gateway.connect_with_token().await;
    // Just under the limit is fine.
    let padded = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"handshake","params":{{"protocol_version":20}}}}{}"#,
        " ".repeat(900)
    );
    assert!(padded.len() <= 1024);
    tokio::time::timeout(STEP, client.send(Message::Text(padded.into()))).await.unwrap().unwrap();
    assert_eq!(next_json(&mut client).await["id"], 1);

    let oversized = format!(r#"{{"jsonrpc":"2.0","id":2,"method":"x","params":"{}"}}"#, "a".repeat(4096));
    tokio::time::timeout(STEP, client.send(Message::Text(oversized.into()))).await.unwrap().unwrap();
    expect_close(&mut client, CloseCode::Size).await;
    gateway.wait_for_disconnects(1).await;
    gateway.stop().await;
}

#[actix_web::test]
async fn a_fragmented_message_over_max_frame_bytes_closes_with_1009() {
    use tokio_tungstenite::tungstenite::protocol::frame::Frame;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};

    let gateway = TestGateway::start(FakeEngine::default(), |config| config.max_frame_bytes = 1024).await;
    let mut client = gateway.connect_and_handshake().await;
    // Each fragment fits; the message they make does not.
    let fragments = [
        Frame::message(vec![b' '; 600], OpCode::Data(Data::Text), false),
        Frame::message(vec![b' '; 600], OpCode::Data(Data::Continue), true),
    ];
    for fragment in fragments {
        tokio::time::timeout(STEP, client.send(Message::Frame(fragment))).await.unwrap().unwrap();
    }
    expect_close(&mut client, CloseCode::Size).await;
    gateway.wait_for_disconnects(1).await;
    gateway.stop().await;
}

#[actix_web::test]
async fn health_and_readiness() {
    let gateway = TestGateway::start(FakeEngine::default(), |_| {}).await;
    let get = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let (status, _, body) = raw_http(gateway.addr(), get("/healthz")).await;
    assert_eq!((status, body.as_str()), (200, "ok"));
    let (status, _, _) = raw_http(gateway.addr(), get("/readyz")).await;
    assert_eq!(status, 503);
    gateway.ready.store(true, Ordering::SeqCst);
    let (status, _, body) = raw_http(gateway.addr(), get("/readyz")).await;
    assert_eq!((status, body.as_str()), (200, "ready"));
    gateway.stop().await;
}

#[actix_web::test]
async fn stop_closes_connected_clients_with_1001() {
    let gateway = TestGateway::start(FakeEngine::default(), |_| {}).await;
    let mut first = gateway.connect_and_handshake().await;
    let mut second = gateway.connect_with_token().await;
    poll_until("two open connections", || gateway.running.open_connections() == 2).await;
    gateway.stop().await;
    expect_close(&mut first, CloseCode::Away).await;
    expect_close(&mut second, CloseCode::Away).await;
    gateway.wait_for_disconnects(2).await;
    assert_eq!(gateway.running.open_connections(), 0);
}

#[actix_web::test]
async fn requests_over_the_in_flight_limit_get_overloaded() {
    let engine = FakeEngine { hold_session_get: true, ..FakeEngine::default() };
    let gateway = TestGateway::start(engine, |config| config.limits.max_in_flight = 1).await;
    let mut client = gateway.connect_and_handshake().await;
    // Pipelined: the second request arrives while the first is still being processed.
    send(&mut client, json!({"jsonrpc": "2.0", "id": 2, "method": "session.get", "params": {"session_id": "a"}})).await;
    send(&mut client, json!({"jsonrpc": "2.0", "id": 3, "method": "session.get", "params": {"session_id": "b"}})).await;
    let first = next_json(&mut client).await;
    assert_eq!(first["id"], 3, "the refusal is immediate: {first}");
    assert_eq!(first["error"]["code"], -32003);
    gateway.engine.release_session_get.notify_one();
    let second = next_json(&mut client).await;
    assert_eq!(second["id"], 2);
    assert_eq!(second["error"]["data"]["code"], "session_not_found");
    gateway.stop().await;
}

#[actix_web::test]
async fn a_silent_client_is_closed_after_the_pong_timeout() {
    let gateway = TestGateway::start(FakeEngine::default(), |config| {
        config.ping_interval = Duration::from_millis(50);
        config.pong_timeout = Duration::from_millis(200);
    })
    .await;
    // The client never reads until now, so it never answers the pings.
    let mut client = gateway.connect_with_token().await;
    gateway.wait_for_disconnects(1).await;
    expect_close(&mut client, CloseCode::Policy).await;
    gateway.stop().await;
}
