//! A fake model vendor for the provider tests: plain HTTP/1.1 on `127.0.0.1:0`, answering each request with
//! the next scripted response and recording what it received. SSE bodies are sent with chunked transfer
//! encoding, one write per scripted piece, as the real vendors do.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use troupe_runtime::model::{ModelError, ModelStream, StreamEvent};

/// Every await in these tests is bounded by this.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(20);

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

/// The running fake server; stops when dropped.
pub struct FakeServer {
    pub base_url: String,
    requests: Arc<Mutex<Vec<RecordedRequest>>>,
    /// Notified when a `SseThenHold` client disconnects.
    pub client_gone: Arc<Notify>,
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
        let client_gone = Arc::new(Notify::new());
        let accept_task = tokio::spawn({
            let requests = requests.clone();
            let client_gone = client_gone.clone();
            async move {
                while let Ok((socket, _)) = listener.accept().await {
                    let requests = requests.clone();
                    let responses = responses.clone();
                    let client_gone = client_gone.clone();
                    tokio::spawn(async move {
                        serve_one(socket, requests, responses, client_gone).await;
                    });
                }
            }
        });
        FakeServer { base_url: format!("http://{address}"), requests, client_gone, accept_task }
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.accept_task.abort();
    }
}

async fn serve_one(
    mut socket: TcpStream,
    requests: Arc<Mutex<Vec<RecordedRequest>>>,
    responses: Arc<Mutex<VecDeque<FakeResponse>>>,
    client_gone: Arc<Notify>,
) {
    let Some(request) = read_request(&mut socket).await else {
        return;
    };
    requests.lock().unwrap().push(request);
    let response = responses.lock().unwrap().pop_front();
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
                // Wait for the client to close its side: a read returning 0 bytes or failing.
                let mut buffer = [0u8; 64];
                loop {
                    match socket.read(&mut buffer).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                }
                client_gone.notify_one();
            }
        }
    }
}

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
        // Separate reads on the client side, like a real stream.
        tokio::time::sleep(Duration::from_millis(2)).await;
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

/// Drains a stream under [`TEST_TIMEOUT`].
pub async fn collect(stream: ModelStream) -> Vec<Result<StreamEvent, ModelError>> {
    tokio::time::timeout(TEST_TIMEOUT, stream.collect::<Vec<_>>()).await.expect("the stream finished in time")
}

/// The concatenated text deltas of `events`, and how many there were.
pub fn text_of(events: &[Result<StreamEvent, ModelError>]) -> (String, usize) {
    let deltas: Vec<&str> = events
        .iter()
        .filter_map(|event| match event {
            Ok(StreamEvent::TextDelta(text)) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    (deltas.concat(), deltas.len())
}

/// A 10 KB error body made mostly of ANSI colour escapes, to check it comes out clean and bounded.
pub fn escape_laden_body() -> String {
    let mut body = String::from("{\"error\":{\"message\":\"server exploded\",\"type\":\"server_error\"}}");
    while body.len() < 10 * 1024 {
        body.push_str("\u{1b}[31mred\u{1b}[0m\u{202e}");
    }
    body
}
