//! The streaming figure's one stand-in: a fake OpenAI-compatible vendor on 127.0.0.1 that speaks the real wire
//! format, so the daemon's own `openai` provider (reqwest, SSE parser) is what gets measured.
//!
//! `GET {base}/models` lists one model; `POST {base}/chat/completions` answers `200 text/event-stream` with
//! chunked transfer encoding, as OpenAI does: one `data: {chat.completion.chunk}` event per text chunk, paced
//! `interval` apart so that each is its own TCP write (TCP_NODELAY), then a `finish_reason` chunk, a usage chunk
//! (the daemon asks for `stream_options.include_usage`) and `data: [DONE]`. The instant just before each text
//! chunk's write is recorded and sent to the figure once the stream ends.
//!
//! Blocking std sockets on threads of their own: the pacing and the timestamps do not wait on the bench's tokio
//! workers, which are busy reading the subscriber's deliveries at the same moments.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

/// The model id the server lists and streams as.
pub const MODEL: &str = "bench-stream";

/// What one streamed reply is made of.
#[derive(Clone, Debug)]
pub struct StreamPlan {
    /// Each chunk's text, in order; each is unique so that a subscriber can tell them apart.
    pub chunks: Vec<String>,
    /// Pause between two chunks' writes.
    pub interval: Duration,
}

impl StreamPlan {
    /// `count` chunks of `bytes` bytes each: the chunk's index, then filler, then a space.
    pub fn new(count: usize, bytes: usize, interval: Duration) -> StreamPlan {
        let chunks = (0..count)
            .map(|index| {
                let mut text = format!("c{index:05}");
                text.push_str(&"x".repeat(bytes.saturating_sub(text.len() + 1)));
                text.push(' ');
                text
            })
            .collect();
        StreamPlan { chunks, interval }
    }

    /// The whole reply's text.
    pub fn text(&self) -> String {
        self.chunks.concat()
    }
}

/// A running fake vendor; stops (and joins its accept thread) on drop.
pub struct FakeOpenAi {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl FakeOpenAi {
    /// Listens on 127.0.0.1:0. Every streamed reply follows `plan`; when it has ended, the write instants of its
    /// text chunks go to `sent` (bounded: the figure reads one per run before it starts the next).
    pub fn start(plan: StreamPlan, sent: tokio::sync::mpsc::Sender<Vec<Instant>>) -> anyhow::Result<FakeOpenAi> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let accept = std::thread::Builder::new().name("fake-openai".into()).spawn({
            let stop = stop.clone();
            move || {
                for socket in listener.incoming() {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let Ok(socket) = socket else { continue };
                    let (plan, sent) = (plan.clone(), sent.clone());
                    let _ = std::thread::Builder::new().name("fake-openai-conn".into()).spawn(move || {
                        if let Err(error) = serve(socket, &plan, &sent) {
                            eprintln!("fake openai server: {error:#}");
                        }
                    });
                }
            }
        })?;
        Ok(FakeOpenAi { addr, stop, accept: Some(accept) })
    }

    /// The `base_url` the daemon's `openai` provider is connected with.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
}

impl Drop for FakeOpenAi {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the blocking accept so that it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

/// One request on one connection, answered with `Connection: close`.
fn serve(
    mut socket: TcpStream,
    plan: &StreamPlan,
    sent: &tokio::sync::mpsc::Sender<Vec<Instant>>,
) -> anyhow::Result<()> {
    socket.set_nodelay(true)?;
    socket.set_read_timeout(Some(Duration::from_secs(30)))?;
    let Some((method, path, body)) = read_request(&mut socket)? else { return Ok(()) };
    match (method.as_str(), path.as_str()) {
        ("GET", path) if path.ends_with("/models") => {
            let body = json!({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "bench"}]});
            let body = body.to_string();
            write!(
                socket,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )?;
        }
        // The session's automatic title (its first run asks the same model, without tools): a short reply at once,
        // as a vendor would give, and not a measured stream.
        ("POST", path) if path.ends_with("/chat/completions") && !asks_with_tools(&body) => {
            let title = StreamPlan { chunks: vec!["Bench stream".to_owned()], interval: Duration::ZERO };
            stream_reply(&mut socket, &title)?;
        }
        ("POST", path) if path.ends_with("/chat/completions") => {
            let times = stream_reply(&mut socket, plan)?;
            // The figure reads one per run; a closed channel means it stopped.
            sent.blocking_send(times).map_err(|_| anyhow::anyhow!("the figure stopped listening"))?;
        }
        _ => {
            socket.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")?;
        }
    }
    socket.flush()?;
    let _ = socket.shutdown(std::net::Shutdown::Write);
    Ok(())
}

/// Whether a Chat Completions body offers tools: a run's turn does (the agent's tools), a title request does not.
fn asks_with_tools(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|body| body.get("tools")?.as_array().map(|tools| !tools.is_empty()))
        .unwrap_or(false)
}

/// Writes the SSE reply; returns the instant just before each text chunk's write.
fn stream_reply(socket: &mut TcpStream, plan: &StreamPlan) -> anyhow::Result<Vec<Instant>> {
    socket.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
          Transfer-Encoding: chunked\r\nConnection: close\r\nx-request-id: req_bench\r\n\r\n",
    )?;
    let id = format!("chatcmpl-bench-{}", troupe_runtime::clock::new_id());
    let chunk = |delta: serde_json::Value, finish: Option<&str>| {
        json!({
            "id": id, "object": "chat.completion.chunk", "created": 0, "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    };
    let mut times = Vec::with_capacity(plan.chunks.len());
    write_event(socket, &chunk(json!({"role": "assistant", "content": ""}), None).to_string())?;
    for (index, text) in plan.chunks.iter().enumerate() {
        if index > 0 {
            std::thread::sleep(plan.interval);
        }
        let event = chunk(json!({"content": text}), None).to_string();
        times.push(Instant::now());
        write_event(socket, &event)?;
    }
    write_event(socket, &chunk(json!({}), Some("stop")).to_string())?;
    let usage = json!({
        "id": id, "object": "chat.completion.chunk", "created": 0, "model": MODEL, "choices": [],
        "usage": {"prompt_tokens": 20, "completion_tokens": plan.chunks.len(), "total_tokens": 20 + plan.chunks.len()},
    });
    write_event(socket, &usage.to_string())?;
    write_event(socket, "[DONE]")?;
    socket.write_all(b"0\r\n\r\n")?;
    Ok(times)
}

/// One SSE event as one HTTP chunk, in a single write.
fn write_event(socket: &mut TcpStream, data: &str) -> std::io::Result<()> {
    let event = format!("data: {data}\n\n");
    socket.write_all(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes())
}

/// Reads one request: method, path and its `Content-Length` body (read whole, which also keeps closing the socket
/// from resetting it); `None` when the peer closed first (the accept loop's wake-up connection).
fn read_request(socket: &mut TcpStream) -> anyhow::Result<Option<(String, String, Vec<u8>)>> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(position) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            break position + 4;
        }
        let read = socket.read(&mut chunk)?;
        if read == 0 {
            return Ok(None);
        }
        buffer.extend_from_slice(&chunk[..read]);
        anyhow::ensure!(buffer.len() < 1 << 20, "request head over 1 MiB");
    };
    let head = std::str::from_utf8(&buffer[..head_end]).context("request head is not UTF-8")?;
    let mut request_line = head.lines().next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_owned();
    let path = request_line.next().unwrap_or_default().to_owned();
    let length: usize = head
        .lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .map_or(Ok(0), |(_, value)| value.trim().parse())
        .context("Content-Length")?;
    let mut body = buffer[head_end..].to_vec();
    while body.len() < length {
        let read = socket.read(&mut chunk)?;
        anyhow::ensure!(read > 0, "the client closed before its body ended");
        body.extend_from_slice(&chunk[..read]);
    }
    Ok(Some((method, path, body)))
}
