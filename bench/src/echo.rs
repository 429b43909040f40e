//! The baseline of the RPC figures (1, 2 and 12): a bare actix-web + actix-ws server that answers each text frame
//! with a canned reply of the same size as the daemon's, the request's id spliced in (ids are fixed-width, so
//! sizes match). Same worker count as the gateway, TCP_NODELAY.
//!
//! It is meant to be the fastest honest echo on that stack, so that a ratio against it does not flatter the
//! daemon. Honest: every request frame is read, unmasked and checked as UTF-8 by actix-ws, its id is found in its
//! text, and every reply is its own WebSocket frame of the daemon's reply's size. Fast: its writes batch the way
//! the daemon's socket body batches them (`gateway/src/socket_body.rs`). The upgrade's response body *is* the echo:
//! each time the HTTP dispatcher polls it (after reading the socket, whenever its write buffer has room) it takes
//! every frame actix-ws has decoded so far and frames every reply into one buffer, which the dispatcher writes with
//! one `sendto`. No task, channel or wake-up sits between reading a request and writing its reply. (The first echo
//! answered from a task through actix-ws's `Session`, one channel message per reply; it is slower on a pipelined
//! connection, see docs/performance.md, figure 2.)

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use actix_web::web::{BufMut, Bytes, BytesMut};
use actix_ws::{AggregatedMessage, AggregatedMessageStream, ProtocolError};
use anyhow::{Context as _, anyhow};
use futures::{Stream, StreamExt};

use crate::harness::{WAIT, reply_id};

/// A poll stops framing replies once its buffer holds this many bytes (the daemon's body stops at the same size),
/// and leaves the rest of the decoded requests to the next poll.
const WRITE_BATCH_BYTES: usize = 64 * 1024;

/// The echo server, on its own actix System thread; stopped when dropped.
pub struct EchoServer {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl EchoServer {
    /// `canned` is a reply frame whose id is `id`; replies carry the request's id in its place.
    pub fn start(canned: &str, id: u64, workers: usize) -> anyhow::Result<EchoServer> {
        let id_text = format!("\"id\":{id}");
        let at = canned.find(&id_text).context("the canned reply carries its id")?;
        let canned = Canned { prefix: Arc::from(&canned[..at + 5]), suffix: Arc::from(&canned[at + id_text.len()..]) };
        let (ready_sender, ready_receiver) = std::sync::mpsc::channel();
        let (stop_sender, stop_receiver) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new().name("echo".into()).spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                match echo_server(canned, workers) {
                    Ok((addr, server)) => {
                        let handle = server.handle();
                        actix_web::rt::spawn(server);
                        let _ = ready_sender.send(Ok(addr));
                        let _ = stop_receiver.await;
                        handle.stop(false).await;
                    }
                    Err(error) => {
                        let _ = ready_sender.send(Err(error.to_string()));
                    }
                }
            });
        })?;
        let addr =
            ready_receiver.recv_timeout(WAIT).context("echo server start")?.map_err(|error| anyhow!("{error}"))?;
        Ok(EchoServer { addr, stop: Some(stop_sender), thread: Some(thread) })
    }

    pub fn url(&self) -> String {
        format!("ws://{}/ws", self.addr)
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The canned reply around its id.
#[derive(Clone)]
struct Canned {
    prefix: Arc<str>,
    suffix: Arc<str>,
}

fn echo_server(canned: Canned, workers: usize) -> std::io::Result<(SocketAddr, actix_web::dev::Server)> {
    use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};

    async fn ws(
        request: HttpRequest,
        payload: web::Payload,
        canned: web::Data<Canned>,
    ) -> Result<HttpResponse, actix_web::Error> {
        // actix-ws answers the handshake and decodes the frames; the body below writes the socket (its own body,
        // fed by its `Session`, is dropped unused, as the gateway does).
        let (response, _unused, inbound) = actix_ws::handle(&request, payload)?;
        let inbound = inbound.max_frame_size(16 * 1024 * 1024).aggregate_continuations();
        let body = EchoBody { inbound, canned: canned.get_ref().clone(), buf: BytesMut::new(), finished: false };
        Ok(response.set_body(actix_web::body::BoxBody::new(actix_web::body::BodyStream::new(body))))
    }

    let data = web::Data::new(canned);
    let server = HttpServer::new(move || App::new().app_data(data.clone()).route("/ws", web::get().to(ws)))
        .on_connect(|connection, _| {
            if let Some(stream) = connection.downcast_ref::<actix_web::rt::net::TcpStream>() {
                let _ = stream.set_nodelay(true);
            }
        })
        .disable_signals()
        .workers(workers)
        .bind("127.0.0.1:0")?;
    let addr = server.addrs()[0];
    Ok((addr, server.run()))
}

/// The upgraded connection's response body: reads the requests and frames their replies.
struct EchoBody {
    inbound: AggregatedMessageStream,
    canned: Canned,
    buf: BytesMut,
    /// The client closed (its close frame was answered) or its half of the socket ended.
    finished: bool,
}

/// Appends an unmasked server frame (RFC 6455 §5.2) to `buf`: FIN and `opcode`, the payload's length, then the
/// payload, given in parts.
fn frame(buf: &mut BytesMut, opcode: u8, parts: &[&[u8]]) {
    let len: usize = parts.iter().map(|part| part.len()).sum();
    buf.reserve(len + 10);
    buf.put_u8(0x80 | opcode);
    if len < 126 {
        buf.put_u8(len as u8);
    } else if len <= usize::from(u16::MAX) {
        buf.put_u8(126);
        buf.put_u16(len as u16);
    } else {
        buf.put_u8(127);
        buf.put_u64(len as u64);
    }
    for part in parts {
        buf.extend_from_slice(part);
    }
}

/// `id` in decimal, written at the end of `digits`.
fn format_id(digits: &mut [u8; 20], mut id: u64) -> &[u8] {
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (id % 10) as u8;
        id /= 10;
        if id == 0 {
            return &digits[at..];
        }
    }
}

impl Stream for EchoBody {
    type Item = Result<Bytes, ProtocolError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        while !this.finished && this.buf.len() < WRITE_BATCH_BYTES {
            match this.inbound.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(AggregatedMessage::Text(request)))) => {
                    let mut digits = [0u8; 20];
                    let id = format_id(&mut digits, reply_id(&request).unwrap_or(0));
                    let Canned { prefix, suffix } = &this.canned;
                    frame(&mut this.buf, 0x1, &[prefix.as_bytes(), id, suffix.as_bytes()]);
                }
                Poll::Ready(Some(Ok(AggregatedMessage::Ping(payload)))) => frame(&mut this.buf, 0xA, &[&payload]),
                Poll::Ready(Some(Ok(AggregatedMessage::Close(_)))) => {
                    // Answer the close handshake with a bare close frame, then end.
                    frame(&mut this.buf, 0x8, &[]);
                    this.finished = true;
                }
                Poll::Ready(Some(Ok(AggregatedMessage::Binary(_) | AggregatedMessage::Pong(_)))) => {}
                Poll::Ready(Some(Err(error))) => return Poll::Ready(Some(Err(error))),
                Poll::Ready(None) => this.finished = true,
                Poll::Pending => break,
            }
        }
        if !this.buf.is_empty() {
            return Poll::Ready(Some(Ok(this.buf.split().freeze())));
        }
        if this.finished { Poll::Ready(None) } else { Poll::Pending }
    }
}
