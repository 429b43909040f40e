//! The one stand-in of the provider figures: a fake OpenAI-compatible vendor on 127.0.0.1 that speaks the real wire
//! format, so the daemon's own `openai` provider (reqwest, SSE parser) is what gets measured.
//!
//! `GET {base}/models` lists one model; `POST {base}/chat/completions` answers `200 text/event-stream` with
//! chunked transfer encoding, as OpenAI does: `data: {chat.completion.chunk}` events, then a `finish_reason` chunk,
//! a usage chunk (the daemon asks for `stream_options.include_usage`) and `data: [DONE]`. What a turn that offers
//! tools gets is the server's [`Replies`]:
//!
//! - [`Replies::Stream`] (figure 10): text chunks paced `interval` apart, so that each is its own TCP write
//!   (TCP_NODELAY); the instant just before each chunk's write is sent to the figure once the stream ends. Each
//!   request on its own connection (`Connection: close`).
//! - [`Replies::ToolTurns`] (figure 14): at once, one `read_file` call of [`TOOL_FILE`] while the request holds fewer
//!   tool results than its first user message asks for (`tools=N`), then a short text. Connections are kept alive
//!   and serve request after request, as a vendor's do.
//!
//! A request without tools (a session's automatic title) gets a one-chunk text at once.
//!
//! Blocking std sockets on threads of their own: the pacing and the timestamps do not wait on the bench's tokio
//! workers, which are busy reading the subscriber's deliveries at the same moments.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;
use troupe_protocol::client::Client;
use troupe_protocol::method;
use troupe_protocol::types::provider::ProviderConnectParams;

use crate::harness::within;

/// The model id the server lists and streams as.
pub const MODEL: &str = "bench-stream";

/// The file [`Replies::ToolTurns`] has the model read, relative to the session's cwd (figure 7's, written by
/// `figures::runs::write_tool_file`).
pub const TOOL_FILE: &str = "small.txt";

/// What a turn that offers tools is answered with.
#[derive(Clone, Debug)]
pub enum Replies {
    /// The paced text stream of the plan; the write instants of its chunks go to `sent` once it has ended
    /// (bounded: the figure reads one per run before it starts the next).
    Stream { plan: StreamPlan, sent: tokio::sync::mpsc::Sender<Vec<Instant>> },
    /// A `read_file` call until the request holds as many tool results as its first user message asks for
    /// (`tools=N`; none when it does not say), then a short text.
    ToolTurns,
}

/// The first user message that asks a [`Replies::ToolTurns`] server for `tools` tool turns.
pub fn tool_turns_input(tools: usize) -> String {
    format!("tools={tools}")
}

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
    /// Connections accepted so far.
    accepted: Arc<AtomicUsize>,
    /// Requests read so far, on all connections.
    served: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl FakeOpenAi {
    /// Listens on 127.0.0.1:0 and answers turns with tools as `replies` says.
    pub fn start(replies: Replies) -> anyhow::Result<FakeOpenAi> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (accepted, served) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let accept = std::thread::Builder::new().name("fake-openai".into()).spawn({
            let (stop, accepted, served) = (stop.clone(), accepted.clone(), served.clone());
            move || {
                for socket in listener.incoming() {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let Ok(socket) = socket else { continue };
                    accepted.fetch_add(1, Ordering::Relaxed);
                    let (replies, served) = (replies.clone(), served.clone());
                    let _ = std::thread::Builder::new().name("fake-openai-conn".into()).spawn(move || {
                        if let Err(error) = serve(socket, &replies, &served) {
                            eprintln!("fake openai server: {error:#}");
                        }
                    });
                }
            }
        })?;
        Ok(FakeOpenAi { addr, accepted, served, stop, accept: Some(accept) })
    }

    /// How many connections the server has accepted.
    pub fn connections(&self) -> usize {
        self.accepted.load(Ordering::Relaxed)
    }

    /// How many requests the server has read, on all its connections.
    pub fn requests(&self) -> usize {
        self.served.load(Ordering::Relaxed)
    }

    /// The `base_url` the daemon's `openai` provider is connected with.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// `provider.connect` of the daemon's `openai` provider to this server, with a dummy key (as a user would).
    pub async fn connect(&self, client: &Client) -> anyhow::Result<()> {
        let params = ProviderConnectParams {
            provider_id: "openai".to_owned(),
            expected_catalog_revision: None,
            setup_values: BTreeMap::from([("base_url".to_owned(), self.base_url())]),
            auth_method: "api_key".to_owned(),
            auth_values: BTreeMap::from([("api_key".to_owned(), "sk-bench".to_owned())]),
            client_connect_id: troupe_runtime::clock::new_id(),
        };
        let connected = within("provider.connect", client.call::<method::ProviderConnect>(params)).await??;
        let wanted = format!("openai/{MODEL}");
        anyhow::ensure!(
            connected.snapshot.models.iter().any(|model| model.model == wanted),
            "the openai provider does not list {wanted} after connecting"
        );
        Ok(())
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

/// The requests of one connection: one for [`Replies::Stream`] (`Connection: close`), as many as the client sends
/// for [`Replies::ToolTurns`].
fn serve(mut socket: TcpStream, replies: &Replies, served: &AtomicUsize) -> anyhow::Result<()> {
    socket.set_nodelay(true)?;
    socket.set_read_timeout(Some(Duration::from_secs(30)))?;
    let keep_alive = matches!(replies, Replies::ToolTurns);
    let connection = if keep_alive { "keep-alive" } else { "close" };
    let mut buffered = Vec::new();
    while let Some((method, path, body)) = read_request(&mut socket, &mut buffered)? {
        served.fetch_add(1, Ordering::Relaxed);
        match (method.as_str(), path.as_str()) {
            ("GET", path) if path.ends_with("/models") => {
                let body = json!({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "bench"}]});
                let body = body.to_string();
                write!(
                    socket,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: \
                     {connection}\r\n\r\n{body}",
                    body.len()
                )?;
            }
            ("POST", path) if path.ends_with("/chat/completions") => {
                let request: serde_json::Value = serde_json::from_slice(&body).context("a request body not JSON")?;
                reply(&mut socket, &request, replies, connection)?;
            }
            _ => {
                write!(socket, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: {connection}\r\n\r\n")?;
            }
        }
        socket.flush()?;
        if !keep_alive {
            break;
        }
    }
    let _ = socket.shutdown(std::net::Shutdown::Write);
    Ok(())
}

/// Answers one Chat Completions request.
fn reply(
    socket: &mut TcpStream,
    request: &serde_json::Value,
    replies: &Replies,
    connection: &str,
) -> anyhow::Result<()> {
    // The session's automatic title (its first run asks the same model, without tools): a short reply at once,
    // as a vendor would give, and not a measured stream.
    if !asks_with_tools(request) {
        let title = StreamPlan { chunks: vec!["Bench stream".to_owned()], interval: Duration::ZERO };
        stream_reply(socket, &title, connection)?;
        return Ok(());
    }
    match replies {
        Replies::Stream { plan, sent } => {
            let times = stream_reply(socket, plan, connection)?;
            // The figure reads one per run; a closed channel means it stopped.
            sent.blocking_send(times).map_err(|_| anyhow::anyhow!("the figure stopped listening"))?;
        }
        Replies::ToolTurns => {
            let done = tool_results(request);
            if done < tools_asked(request) {
                tool_call_reply(socket, done, connection)?;
            } else {
                let text = StreamPlan { chunks: vec![format!("read it {done} times")], interval: Duration::ZERO };
                stream_reply(socket, &text, connection)?;
            }
        }
    }
    Ok(())
}

/// How many tool turns the request's first user message asks for ([`tool_turns_input`]); none if it does not.
fn tools_asked(request: &serde_json::Value) -> usize {
    let messages = request["messages"].as_array().map(Vec::as_slice).unwrap_or_default();
    messages
        .iter()
        .find(|message| message["role"] == "user")
        .and_then(|message| message["content"].as_str()?.strip_prefix("tools=")?.trim().parse().ok())
        .unwrap_or(0)
}

/// How many tool results the request's messages hold.
fn tool_results(request: &serde_json::Value) -> usize {
    let messages = request["messages"].as_array().map(Vec::as_slice).unwrap_or_default();
    messages.iter().filter(|message| message["role"] == "tool").count()
}

/// Whether a Chat Completions request offers tools: a run's turn does (the agent's tools), a title request does not.
fn asks_with_tools(request: &serde_json::Value) -> bool {
    request["tools"].as_array().is_some_and(|tools| !tools.is_empty())
}

/// The head of a streamed reply.
fn write_stream_head(socket: &mut TcpStream, connection: &str) -> std::io::Result<()> {
    write!(
        socket,
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
         Transfer-Encoding: chunked\r\nConnection: {connection}\r\nx-request-id: req_bench\r\n\r\n"
    )
}

/// One `chat.completion.chunk` of the reply `id`, with one choice.
fn chunk(id: &str, delta: serde_json::Value, finish: Option<&str>) -> serde_json::Value {
    json!({
        "id": id, "object": "chat.completion.chunk", "created": 0, "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    })
}

/// The usage chunk, `[DONE]` and the end of the chunked body.
fn write_stream_end(socket: &mut TcpStream, id: &str, completion_tokens: usize) -> std::io::Result<()> {
    let usage = json!({
        "id": id, "object": "chat.completion.chunk", "created": 0, "model": MODEL, "choices": [],
        "usage": {"prompt_tokens": 20, "completion_tokens": completion_tokens, "total_tokens": 20 + completion_tokens},
    });
    write_event(socket, &usage.to_string())?;
    write_event(socket, "[DONE]")?;
    socket.write_all(b"0\r\n\r\n")
}

/// A streamed turn that calls `read_file` on [`TOOL_FILE`] (the call's id numbered after the results so far).
fn tool_call_reply(socket: &mut TcpStream, done: usize, connection: &str) -> anyhow::Result<()> {
    write_stream_head(socket, connection)?;
    let id = format!("chatcmpl-bench-{}", troupe_runtime::clock::new_id());
    let call = json!({"index": 0, "id": format!("call_{done}"), "type": "function",
        "function": {"name": "read_file", "arguments": json!({"path": TOOL_FILE}).to_string()}});
    write_event(
        socket,
        &chunk(&id, json!({"role": "assistant", "content": null, "tool_calls": [call]}), None).to_string(),
    )?;
    write_event(socket, &chunk(&id, json!({}), Some("tool_calls")).to_string())?;
    write_stream_end(socket, &id, 12)?;
    Ok(())
}

/// Writes the SSE reply; returns the instant just before each text chunk's write.
fn stream_reply(socket: &mut TcpStream, plan: &StreamPlan, connection: &str) -> anyhow::Result<Vec<Instant>> {
    write_stream_head(socket, connection)?;
    let id = format!("chatcmpl-bench-{}", troupe_runtime::clock::new_id());
    let chunk = |delta: serde_json::Value, finish: Option<&str>| chunk(&id, delta, finish);
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
    write_stream_end(socket, &id, plan.chunks.len())?;
    Ok(times)
}

/// One SSE event as one HTTP chunk, in a single write.
fn write_event(socket: &mut TcpStream, data: &str) -> std::io::Result<()> {
    let event = format!("data: {data}\n\n");
    socket.write_all(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes())
}

/// Reads one request: method, path and its `Content-Length` body (read whole, which also keeps closing the socket
/// from resetting it); `None` when the peer closed before a request began (the accept loop's wake-up connection, or
/// a kept-alive connection the client let go). `buffered` holds what was read past the request, for the next one.
fn read_request(socket: &mut TcpStream, buffered: &mut Vec<u8>) -> anyhow::Result<Option<(String, String, Vec<u8>)>> {
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(position) = buffered.windows(4).position(|window| window == b"\r\n\r\n") {
            break position + 4;
        }
        let read = match socket.read(&mut chunk) {
            Ok(read) => read,
            // A kept-alive connection the client closed abruptly, or left idle past the timeout, between requests.
            Err(error) if buffered.is_empty() && is_end_of_connection(&error) => 0,
            Err(error) => return Err(error.into()),
        };
        if read == 0 {
            anyhow::ensure!(buffered.is_empty(), "the client closed in the middle of a request's head");
            return Ok(None);
        }
        buffered.extend_from_slice(&chunk[..read]);
        anyhow::ensure!(buffered.len() < 1 << 20, "request head over 1 MiB");
    };
    let head = std::str::from_utf8(&buffered[..head_end]).context("request head is not UTF-8")?;
    let mut request_line = head.lines().next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_owned();
    let path = request_line.next().unwrap_or_default().to_owned();
    let length: usize = head
        .lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .map_or(Ok(0), |(_, value)| value.trim().parse())
        .context("Content-Length")?;
    while buffered.len() < head_end + length {
        let read = socket.read(&mut chunk)?;
        anyhow::ensure!(read > 0, "the client closed before its body ended");
        buffered.extend_from_slice(&chunk[..read]);
    }
    let body = buffered[head_end..head_end + length].to_vec();
    buffered.drain(..head_end + length);
    Ok(Some((method, path, body)))
}

fn is_end_of_connection(error: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(error.kind(), ErrorKind::ConnectionReset | ErrorKind::WouldBlock | ErrorKind::TimedOut)
}
