//! A fake model vendor: plain HTTP/1.1 on `127.0.0.1:0` (or another local address), answering each request with
//! the next scripted [`FakeResponse`] and recording what it received. SSE bodies go out with chunked transfer
//! encoding, one write per scripted piece, as the real vendors send them; [`crate::replies`] builds the pieces in
//! the OpenAI Chat Completions and Anthropic Messages formats the runtime's providers parse.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// One request as the server received it.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    /// Names lowercased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RecordedRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(header, _)| header == name).map(|(_, value)| value.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("the request body is JSON")
    }
}

/// What the server answers.
#[derive(Clone, Debug)]
pub enum FakeResponse {
    /// `200 text/event-stream`, the pieces written one by one, then the body is ended cleanly.
    Sse { pieces: Vec<String> },
    /// Like `Sse`, but the connection then stays open until the client goes away.
    SseThenHold { pieces: Vec<String> },
    /// Like `SseThenHold`, and in between proves that the client's stream consumer took every event of `pieces`:
    /// the server writes more SSE comment lines than every buffer between it and the client's SSE parser can hold
    /// (the kernel's socket buffers at their largest, and a margin for the HTTP client's), which it can only finish
    /// once the parser was asked for the event after the last piece; then it notifies
    /// [`FakeServer::pieces_consumed`]. (The runtime reads a model stream's body only as fast as its events are
    /// taken.)
    SseConsumedThenHold { pieces: Vec<String> },
    /// Any status with a complete body.
    Full { status: u16, headers: Vec<(String, String)>, body: Vec<u8> },
}

impl FakeResponse {
    pub fn sse(pieces: &[&str]) -> FakeResponse {
        FakeResponse::Sse { pieces: pieces.iter().map(|piece| piece.to_string()).collect() }
    }

    pub fn status(status: u16, headers: &[(&str, &str)], body: impl Into<Vec<u8>>) -> FakeResponse {
        FakeResponse::Full {
            status,
            headers: headers.iter().map(|(name, value)| (name.to_string(), value.to_string())).collect(),
            body: body.into(),
        }
    }
}

/// The running fake vendor; stops accepting when dropped.
pub struct FakeServer {
    pub base_url: String,
    requests: Arc<Mutex<Vec<RecordedRequest>>>,
    /// Notified when a `SseThenHold` or `SseConsumedThenHold` client disconnects.
    pub client_gone: Arc<Notify>,
    /// Notified when a `SseConsumedThenHold` client has taken every scripted event.
    pub pieces_consumed: Arc<Notify>,
    accept_task: tokio::task::JoinHandle<()>,
}

impl FakeServer {
    pub async fn start(responses: Vec<FakeResponse>) -> FakeServer {
        FakeServer::start_on("127.0.0.1:0", responses).await
    }

    /// The same on another address of this machine (e.g. a LAN address, to test plain http off loopback).
    pub async fn start_on(address: &str, responses: Vec<FakeResponse>) -> FakeServer {
        let listener = TcpListener::bind(address).await.expect("bind");
        let address = listener.local_addr().expect("local addr");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let responses = Arc::new(Mutex::new(VecDeque::from(responses)));
        let signals = Signals { client_gone: Arc::new(Notify::new()), pieces_consumed: Arc::new(Notify::new()) };
        let accept_task = tokio::spawn({
            let requests = requests.clone();
            let signals = signals.clone();
            async move {
                while let Ok((socket, _)) = listener.accept().await {
                    let requests = requests.clone();
                    let responses = responses.clone();
                    let signals = signals.clone();
                    tokio::spawn(async move {
                        serve_one(socket, requests, responses, signals).await;
                    });
                }
            }
        });
        let Signals { client_gone, pieces_consumed } = signals;
        FakeServer { base_url: format!("http://{address}"), requests, client_gone, pieces_consumed, accept_task }
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.requests).clone()
    }

    /// The JSON bodies of the requests whose path ends with `suffix` (e.g. `/chat/completions`), in order.
    pub fn bodies_to(&self, suffix: &str) -> Vec<serde_json::Value> {
        lock(&self.requests)
            .iter()
            .filter(|request| request.path.ends_with(suffix))
            .map(RecordedRequest::json)
            .collect()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.accept_task.abort();
    }
}

/// A lock that a panicking test thread cannot poison for the rest of the test.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What the server tells the test about a connection.
#[derive(Clone)]
struct Signals {
    client_gone: Arc<Notify>,
    pieces_consumed: Arc<Notify>,
}

async fn serve_one(
    mut socket: TcpStream,
    requests: Arc<Mutex<Vec<RecordedRequest>>>,
    responses: Arc<Mutex<VecDeque<FakeResponse>>>,
    signals: Signals,
) {
    let Some(request) = read_request(&mut socket).await else {
        return;
    };
    lock(&requests).push(request);
    let response = lock(&responses).pop_front();
    let response =
        response.unwrap_or_else(|| FakeResponse::status(500, &[], "the fake server ran out of scripted responses"));
    match response {
        FakeResponse::Full { status, headers, body } => {
            let mut head = format!("HTTP/1.1 {status} Fake\r\nContent-Length: {}\r\nConnection: close\r\n", body.len());
            if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("content-type")) {
                head.push_str("Content-Type: application/json\r\n");
            }
            for (name, value) in headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(&body).await;
            let _ = socket.shutdown().await;
        }
        FakeResponse::Sse { pieces } => {
            if write_sse(&mut socket, &pieces).await.is_ok() {
                let _ = socket.write_all(b"0\r\n\r\n").await;
                let _ = socket.shutdown().await;
            }
        }
        FakeResponse::SseThenHold { pieces } => {
            if write_sse(&mut socket, &pieces).await.is_ok() {
                hold(&mut socket, &signals).await;
            }
        }
        FakeResponse::SseConsumedThenHold { pieces } => {
            if write_sse(&mut socket, &pieces).await.is_ok() && write_past_every_buffer(&mut socket).await.is_ok() {
                signals.pieces_consumed.notify_one();
                hold(&mut socket, &signals).await;
            }
        }
    }
}

/// Keeps the connection open until the client closes its side (a read returning 0 bytes or failing).
async fn hold(socket: &mut TcpStream, signals: &Signals) {
    let mut buffer = [0u8; 64];
    loop {
        match socket.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    signals.client_gone.notify_one();
}

/// Writes SSE comment lines (which a parser skips) until more bytes went out than the kernel's send and receive
/// buffers can hold at their largest plus `CLIENT_BUFFER_MARGIN`, so that the write returns only once the client
/// read, and so parsed, past everything written before.
async fn write_past_every_buffer(socket: &mut TcpStream) -> std::io::Result<()> {
    let total = largest_buffer("/proc/sys/net/ipv4/tcp_wmem")
        + largest_buffer("/proc/sys/net/ipv4/tcp_rmem")
        + CLIENT_BUFFER_MARGIN;
    let line = format!(": {}\n", "x".repeat(1021));
    let chunk = line.repeat(64);
    let head = format!("{:x}\r\n", chunk.len());
    let mut written = 0;
    while written < total {
        socket.write_all(head.as_bytes()).await?;
        socket.write_all(chunk.as_bytes()).await?;
        socket.write_all(b"\r\n").await?;
        written += chunk.len();
    }
    socket.flush().await
}

/// Room for what the client's HTTP stack buffers above the socket (hyper reads at most ~400 KB ahead).
const CLIENT_BUFFER_MARGIN: usize = 4 * 1024 * 1024;

/// The last (largest) of the three sizes in `/proc/sys/net/ipv4/tcp_{r,w}mem`; 64 MiB when unreadable.
fn largest_buffer(path: &str) -> usize {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| text.split_whitespace().last().and_then(|size| size.parse().ok()))
        .unwrap_or(64 * 1024 * 1024)
}

/// The pause between two SSE pieces' writes.
const PIECE_PAUSE: Duration = Duration::from_millis(2);

async fn write_sse(socket: &mut TcpStream, pieces: &[String]) -> std::io::Result<()> {
    socket
        .write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\
              Connection: close\r\nx-request-id: req_fake_1\r\n\r\n",
        )
        .await?;
    for piece in pieces {
        socket.write_all(format!("{:x}\r\n{piece}\r\n", piece.len()).as_bytes()).await?;
        socket.flush().await?;
        // Pacing, not synchronisation: a pause between pieces makes them separate reads on the client's side, as
        // a real stream's are, so that the parser's handling of events split across reads is what runs.
        tokio::time::sleep(PIECE_PAUSE).await;
    }
    Ok(())
}

async fn read_request(socket: &mut TcpStream) -> Option<RecordedRequest> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(position) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            break position;
        }
        let read = socket.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8(buffer[..head_end].to_vec()).ok()?;
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_owned();
    let path = request_line.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let content_length: usize = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0);
    let mut body = buffer[head_end + 4..].to_vec();
    while body.len() < content_length {
        let read = socket.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..read]);
    }
    Some(RecordedRequest { method, path, headers, body })
}
