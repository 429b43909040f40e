//! The WebSocket's outbound half: a response body that the HTTP dispatcher polls whenever its write buffer has
//! room, and that takes the protocol session's frames straight from the outbound queue into WebSocket frames.
//!
//! There is no task and no channel between the queue and the socket: one poll takes up to [`WRITE_BATCH_FRAMES`]
//! frames (one lock of the queue) and frames them into one buffer, which the dispatcher copies into its write
//! buffer and writes with its next `sendto`; a long frame's payload skips the body's buffer (it is handed over as
//! its own chunk, the engine's shared bytes, after a chunk ending in its header), so it is copied once, not twice. A socket that does not drain is not polled, so the queue fills and a slow subscriber gets its gap,
//! as before. Control frames (our pings, pongs to the client's pings, the close frame) come from the
//! [`SocketWriter`] the connection's actor holds; they go out before the next data frame, never inside a
//! fragmented message's frames of another kind than RFC 6455 allows (control frames may come between fragments).
//! Once the close frame is written, the body ends and the dispatcher ends the connection.
//!
//! Both halves live on the connection's worker thread, so plain `Rc`/`Cell` suffice.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use actix_codec::Encoder;
use actix_http::ws::{Codec, Item, Message};
use actix_web::web::{Bytes, BytesMut};
use actix_ws::CloseReason;
use bytestring::ByteString;
use futures::Stream;
use troupe_protocol::server::OutboundStream;

/// Frames taken from the outbound queue at once (one lock, one wake-up of whoever waits for room).
const WRITE_BATCH_FRAMES: usize = 32;

/// A poll stops taking frames once its buffer holds this many bytes (the dispatcher asks again while its own
/// write buffer has room), so what is held outside the queue's bounds stays near this plus one fragment.
const WRITE_BATCH_BYTES: usize = 64 * 1024;

/// A text frame at least this long is handed to the dispatcher as its own chunk, the engine's bytes as they are
/// (an `events.subscription` frame is one allocation shared by every subscriber), after a chunk ending in its
/// header, instead of being copied into the body's buffer first: the dispatcher copies every chunk into its write
/// buffer anyway, so that is one copy per frame less. Shorter frames are cheaper copied than polled apart.
const SHARED_PAYLOAD_BYTES: usize = 256;

/// Bytes of one WebSocket frame of a fragmented message. A larger protocol message goes out as several frames
/// (RFC 6455 §5.4; clients see one message), one per poll at most, so it is never copied whole into a buffer.
const FRAGMENT_BYTES: usize = 64 * 1024;

/// What the actor and the body share.
#[derive(Default)]
struct Control {
    /// Our ping, if one waits to be written (at most one).
    ping: Cell<bool>,
    /// The pong answering the client's newest ping, if one waits (RFC 6455 §5.5.3 allows answering only the
    /// newest, which keeps what a client flooding pings can make us hold to one payload).
    pong: RefCell<Option<Bytes>>,
    /// The close frame, once decided; nothing is written after it.
    close: RefCell<Option<CloseReason>>,
    closing: Cell<bool>,
    /// The body's task, woken when a control frame is queued.
    waker: RefCell<Option<Waker>>,
}

impl Control {
    fn wake(&self) {
        if let Some(waker) = self.waker.borrow_mut().take() {
            waker.wake();
        }
    }
}

/// The actor's handle on the socket's outbound half: control frames only (data frames come from the outbound
/// queue). Calls after the close frame was queued do nothing.
pub(crate) struct SocketWriter {
    control: Rc<Control>,
}

impl SocketWriter {
    /// Queues a ping (unless one is already waiting).
    pub(crate) fn ping(&self) {
        if !self.control.closing.get() {
            self.control.ping.set(true);
            self.control.wake();
        }
    }

    /// Queues the pong answering a ping of the client, replacing one that has not been written yet.
    pub(crate) fn pong(&self, payload: Bytes) {
        if !self.control.closing.get() {
            *self.control.pong.borrow_mut() = Some(payload);
            self.control.wake();
        }
    }

    /// Queues the close frame: the last frame of the connection. Frames still in the outbound queue are not sent.
    pub(crate) fn close(&self, reason: CloseReason) {
        if !self.control.closing.replace(true) {
            *self.control.close.borrow_mut() = Some(reason);
            self.control.wake();
        }
    }
}

/// The response body of an upgraded `/ws` request. Dropping it (the socket is gone, or the body ended after its
/// close frame) drops the outbound stream, which closes the protocol session, and resolves the receiver
/// [`socket`] returned, which tells the actor.
pub(crate) struct SocketBody {
    control: Rc<Control>,
    outbound: OutboundStream,
    codec: Codec,
    buf: BytesMut,
    /// Chunks ready for the dispatcher, in order: cut from `buf`, and long frames' payloads (see
    /// [`SHARED_PAYLOAD_BYTES`]); nothing new is framed until they are all out, so a control frame never lands
    /// between a header and its payload.
    ready: VecDeque<Bytes>,
    /// Bytes in `ready`.
    ready_bytes: usize,
    /// Frames taken from the queue and not yet framed.
    taken: VecDeque<ByteString>,
    batch: Vec<ByteString>,
    /// The rest of a fragmented message: its bytes and how far they went out.
    fragmenting: Option<(Bytes, usize)>,
    frames_out: Rc<Cell<u64>>,
    finished: bool,
    /// Dropped with the body.
    _gone: futures::channel::oneshot::Sender<()>,
}

/// The two halves of a socket's outbound side, and a receiver that resolves when the body is dropped.
pub(crate) fn socket(
    outbound: OutboundStream,
    frames_out: Rc<Cell<u64>>,
) -> (SocketWriter, SocketBody, futures::channel::oneshot::Receiver<()>) {
    let control = Rc::new(Control::default());
    let (gone, body_gone) = futures::channel::oneshot::channel();
    let body = SocketBody {
        control: control.clone(),
        outbound,
        codec: Codec::new(),
        buf: BytesMut::new(),
        ready: VecDeque::new(),
        ready_bytes: 0,
        taken: VecDeque::new(),
        batch: Vec::with_capacity(WRITE_BATCH_FRAMES),
        fragmenting: None,
        frames_out,
        finished: false,
        _gone: gone,
    };
    (SocketWriter { control }, body, body_gone)
}

impl SocketBody {
    fn encode(&mut self, message: Message) -> Result<(), actix_http::ws::ProtocolError> {
        self.codec.encode(message, &mut self.buf)
    }

    /// Frames the control frames that wait; the close frame ends the body.
    fn encode_control(&mut self) -> Result<(), actix_http::ws::ProtocolError> {
        let control = self.control.clone();
        if let Some(payload) = control.pong.borrow_mut().take() {
            self.encode(Message::Pong(payload))?;
        }
        if control.ping.replace(false) {
            self.encode(Message::Ping(Bytes::new()))?;
        }
        if let Some(reason) = control.close.borrow_mut().take() {
            self.encode(Message::Close(Some(reason)))?;
            self.finished = true;
        }
        Ok(())
    }

    /// Frames a whole text message. A long one's payload becomes its own chunk, uncopied.
    fn encode_text(&mut self, frame: ByteString) -> Result<(), actix_http::ws::ProtocolError> {
        if frame.len() < SHARED_PAYLOAD_BYTES {
            return self.encode(Message::Text(frame));
        }
        // The header as the codec writes it (RFC 6455 §5.2: FIN, opcode 1, no mask from a server), then the
        // payload itself.
        let len = frame.len();
        if len <= usize::from(u16::MAX) {
            self.buf.extend_from_slice(&[0x81, 126]);
            self.buf.extend_from_slice(&(len as u16).to_be_bytes());
        } else {
            self.buf.extend_from_slice(&[0x81, 127]);
            self.buf.extend_from_slice(&(len as u64).to_be_bytes());
        }
        self.cut_buffer();
        self.ready_bytes += len;
        self.ready.push_back(frame.into_bytes());
        Ok(())
    }

    /// Moves what the buffer holds to the ready chunks.
    fn cut_buffer(&mut self) {
        if !self.buf.is_empty() {
            self.ready_bytes += self.buf.len();
            self.ready.push_back(self.buf.split().freeze());
        }
    }

    /// Frames data until the buffer is full enough or nothing is ready; `false` once the outbound queue closed.
    fn encode_data(&mut self, cx: &mut Context<'_>) -> Result<bool, actix_http::ws::ProtocolError> {
        while self.buf.len() + self.ready_bytes < WRITE_BATCH_BYTES {
            if let Some((bytes, sent)) = self.fragmenting.take() {
                let end = (sent + FRAGMENT_BYTES).min(bytes.len());
                let part = bytes.slice(sent..end);
                if end == bytes.len() {
                    self.encode(Message::Continuation(Item::Last(part)))?;
                    self.frames_out.set(self.frames_out.get() + 1);
                } else {
                    self.encode(Message::Continuation(Item::Continue(part)))?;
                    self.fragmenting = Some((bytes, end));
                }
                continue;
            }
            if let Some(frame) = self.taken.pop_front() {
                if frame.len() <= FRAGMENT_BYTES {
                    self.encode_text(frame)?;
                    self.frames_out.set(self.frames_out.get() + 1);
                } else {
                    let bytes = frame.into_bytes();
                    self.encode(Message::Continuation(Item::FirstText(bytes.slice(..FRAGMENT_BYTES))))?;
                    self.fragmenting = Some((bytes, FRAGMENT_BYTES));
                }
                continue;
            }
            match self.outbound.poll_next_batch(cx, &mut self.batch, WRITE_BATCH_FRAMES, WRITE_BATCH_BYTES) {
                Poll::Ready(true) => self.taken.extend(self.batch.drain(..)),
                Poll::Ready(false) => return Ok(false),
                Poll::Pending => break,
            }
        }
        Ok(true)
    }

    /// The next chunk ready for the dispatcher.
    fn next_ready(&mut self) -> Option<Bytes> {
        let chunk = self.ready.pop_front()?;
        self.ready_bytes -= chunk.len();
        Some(chunk)
    }
}

impl Stream for SocketBody {
    type Item = Result<Bytes, actix_http::ws::ProtocolError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if let Some(chunk) = this.next_ready() {
            return Poll::Ready(Some(Ok(chunk)));
        }
        if this.finished {
            return Poll::Ready(None);
        }
        // Registered before looking at the control frames, so that one queued after the look wakes this task.
        match &mut *this.control.waker.borrow_mut() {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        if let Err(error) = this.encode_control() {
            return Poll::Ready(Some(Err(error)));
        }
        if !this.finished && !this.control.closing.get() {
            match this.encode_data(cx) {
                Ok(true) => {}
                // The protocol session is closed (the actor stopped without a close frame): the body ends.
                Ok(false) => this.finished = true,
                Err(error) => return Poll::Ready(Some(Err(error))),
            }
        }
        this.cut_buffer();
        if let Some(chunk) = this.next_ready() {
            return Poll::Ready(Some(Ok(chunk)));
        }
        if this.finished { Poll::Ready(None) } else { Poll::Pending }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use actix_codec::Decoder;
    use actix_http::ws::Frame;
    use actix_ws::CloseCode;
    use futures::StreamExt;
    use troupe_protocol::server::{ServerConnection, ServerLimits, ServerProtocol};

    use super::*;

    /// A protocol server that implements nothing: every request is answered with an error naming its id, which is
    /// all these tests need to put frames of a chosen size in the outbound queue.
    struct Nothing;
    impl ServerProtocol for Nothing {}

    struct Harness {
        connection: ServerConnection<Nothing>,
        writer: SocketWriter,
        body: SocketBody,
        gone: futures::channel::oneshot::Receiver<()>,
        frames_out: Rc<Cell<u64>>,
        decoder: Codec,
        received: BytesMut,
    }

    fn harness() -> Harness {
        let (connection, outbound) = ServerConnection::new(Arc::new(Nothing), ServerLimits::default());
        let frames_out = Rc::new(Cell::new(0));
        let (writer, body, gone) = socket(outbound, frames_out.clone());
        Harness {
            connection,
            writer,
            body,
            gone,
            frames_out,
            decoder: Codec::new().client_mode(),
            received: BytesMut::new(),
        }
    }

    impl Harness {
        /// Queues the reply to a request with this id (a -32002 `handshake_required` error that echoes the id).
        async fn queue_reply(&self, id: &str) {
            let request = format!(r#"{{"jsonrpc":"2.0","id":"{id}","method":"session.get","params":{{}}}}"#);
            self.connection.handle_text(&request).await;
        }

        /// Polls the body until it is pending or ended; returns the frames it wrote and whether it ended.
        fn drain(&mut self) -> (Vec<Frame>, bool) {
            let waker = futures::task::noop_waker();
            let mut cx = Context::from_waker(&waker);
            let mut ended = false;
            loop {
                match self.body.poll_next_unpin(&mut cx) {
                    Poll::Ready(Some(Ok(bytes))) => self.received.extend_from_slice(&bytes),
                    Poll::Ready(Some(Err(error))) => panic!("the body failed: {error}"),
                    Poll::Ready(None) => {
                        ended = true;
                        break;
                    }
                    Poll::Pending => break,
                }
            }
            let mut frames = Vec::new();
            while let Some(frame) = self.decoder.decode(&mut self.received).expect("a valid frame") {
                frames.push(frame);
            }
            (frames, ended)
        }
    }

    fn text(frame: &Frame) -> String {
        match frame {
            Frame::Text(bytes) => String::from_utf8(bytes.to_vec()).unwrap(),
            other => panic!("expected a text frame, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn frames_leave_in_queue_order_and_a_large_message_in_fragments() {
        let mut harness = harness();
        let long_id = "x".repeat(FRAGMENT_BYTES + 1000);
        for id in ["a", &long_id, "c"] {
            harness.queue_reply(id).await;
        }
        let (frames, ended) = harness.drain();
        assert!(!ended);
        assert_eq!(frames.len(), 4, "{frames:?}");
        assert!(text(&frames[0]).contains(r#""id":"a""#));
        let (Frame::Continuation(Item::FirstText(first)), Frame::Continuation(Item::Last(last))) =
            (&frames[1], &frames[2])
        else {
            panic!("expected the long reply in two fragments: {frames:?}");
        };
        assert_eq!(first.len(), FRAGMENT_BYTES);
        let whole = String::from_utf8([first.as_ref(), last.as_ref()].concat()).unwrap();
        assert!(whole.contains(&format!(r#""id":"{long_id}""#)));
        assert!(text(&frames[3]).contains(r#""id":"c""#));
        assert_eq!(harness.frames_out.get(), 3, "messages, not frames, are counted");
    }

    #[tokio::test]
    async fn a_long_frame_goes_out_as_its_own_chunk_between_whole_frames_and_a_ping_never_splits_it() {
        let mut harness = harness();
        let long_id = "y".repeat(SHARED_PAYLOAD_BYTES);
        for id in ["a", &long_id, "c"] {
            harness.queue_reply(id).await;
        }
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        // The first chunk ends with the long frame's header; the payload comes next, as the engine encoded it.
        let Poll::Ready(Some(Ok(first))) = harness.body.poll_next_unpin(&mut cx) else { panic!("a chunk") };
        harness.received.extend_from_slice(&first);
        // A ping queued now waits until the long frame is whole.
        harness.writer.ping();
        let (frames, _) = harness.drain();
        assert_eq!(frames.len(), 4, "{frames:?}");
        assert!(text(&frames[0]).contains(r#""id":"a""#));
        assert!(text(&frames[1]).contains(&format!(r#""id":"{long_id}""#)));
        assert!(text(&frames[2]).contains(r#""id":"c""#), "{frames:?}");
        assert!(matches!(&frames[3], Frame::Ping(_)), "{frames:?}");
        assert_eq!(harness.frames_out.get(), 3);
    }

    #[tokio::test]
    async fn control_frames_go_first_and_the_close_frame_is_the_last() {
        let mut harness = harness();
        harness.writer.pong(Bytes::from_static(b"older"));
        harness.writer.pong(Bytes::from_static(b"newest"));
        harness.writer.ping();
        harness.queue_reply("a").await;
        let (frames, ended) = harness.drain();
        assert!(!ended);
        assert!(matches!(&frames[0], Frame::Pong(payload) if payload.as_ref() == b"newest"), "{frames:?}");
        assert!(matches!(&frames[1], Frame::Ping(_)), "{frames:?}");
        assert!(text(&frames[2]).contains(r#""id":"a""#));
        assert_eq!(frames.len(), 3, "the older pong was replaced by the newest: {frames:?}");

        harness.queue_reply("after the close").await;
        harness.writer.close(CloseReason { code: CloseCode::Away, description: Some("bye".to_owned()) });
        harness.writer.ping();
        let (frames, ended) = harness.drain();
        assert!(ended, "the body ends after its close frame");
        assert_eq!(frames.len(), 1, "nothing after the close frame: {frames:?}");
        assert!(matches!(&frames[0], Frame::Close(Some(reason)) if reason.code == CloseCode::Away), "{frames:?}");
    }

    #[tokio::test]
    async fn the_body_ends_when_the_protocol_session_closes_and_its_drop_is_seen() {
        let mut harness = harness();
        harness.queue_reply("a").await;
        let closer = harness.body.outbound.closer();
        closer.close();
        let (frames, ended) = harness.drain();
        assert!(ended);
        assert!(frames.is_empty(), "a closed session's queued frames are dropped: {frames:?}");
        let Harness { body, gone, .. } = harness;
        drop(body);
        assert!(tokio::time::timeout(std::time::Duration::from_secs(5), gone).await.is_ok());
    }
}
