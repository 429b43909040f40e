//! The server side of a protocol session, independent of how frames travel.
//!
//! A [`ServerConnection`] takes inbound frames, enforces the handshake, validates the JSON-RPC envelope, limits
//! requests in flight, dispatches to a [`ServerProtocol`] implementation and queues every outbound frame on one
//! bounded queue, read through an [`OutboundStream`]. [`serve`] drives it over any [`Transport`]; the gateway
//! drives it from its per-socket actor.
//!
//! # Ordering of replies and notifications
//!
//! A handler may open notification channels ([`EventSink`], [`ConnectionNotifier`]) or schedule a notification
//! ([`ServerContext::notify_after_reply`]). All of them are *gated*: nothing they carry is queued before the
//! reply of the request that created them. So a client always sees the `events.subscribe` reply before the
//! first live event of that subscription, and the handshake reply before the first `runtime.changed`.
//!
//! # Bounded memory
//!
//! The outbound queue is bounded. Replies wait for room; notifications never wait: a subscription whose
//! notification does not fit is closed and turned into a single `gap` notice (held on a side list with at most
//! one entry per subscription), which is written once the queue has drained.

use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use bytestring::ByteString;
use futures::FutureExt;
use futures::stream::{FuturesUnordered, StreamExt};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::{Notify, mpsc};

use crate::error::RpcError;
use crate::jsonrpc::{Id, Method, Notification, encode_error_response, encode_notification, encode_result_response};
pub use crate::methods::ServerProtocol;
use crate::methods::dispatch;
use crate::transport::{MessageFrame, Transport};
use crate::types::events::{EventJson, EventsSubscriptionParams};
use crate::types::runtime::{HandshakeParams, PROTOCOL_VERSION};

/// Per-connection limits.
#[derive(Clone, Copy, Debug)]
pub struct ServerLimits {
    /// Requests being processed at once; one more is answered -32003.
    pub max_in_flight: usize,
    /// Frames queued for the client. A subscription whose notification does not fit gets a gap.
    pub outbound_queue: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits { max_in_flight: 256, outbound_queue: 1024 }
    }
}

static NEXT_CONNECTION_ID: AtomicU64 = AtomicU64::new(1);

/// State shared by a connection, its request contexts and its sinks.
struct ConnectionShared {
    id: u64,
    limits: ServerLimits,
    handshaken: AtomicBool,
    in_flight: AtomicUsize,
    outbound: mpsc::Sender<ByteString>,
    /// Frames that must not be lost when the queue is full (gap notices, runtime changes). Bounded: at most one gap
    /// per subscription lands here, because a subscription closes when it emits its gap, and at most one frame per
    /// connection-wide notifier, the newest (each carries a complete state, such as a runtime snapshot).
    priority: Mutex<VecDeque<PriorityFrame>>,
    priority_ready: Notify,
    /// The current subscription of this connection to each session. Subscribing again replaces it.
    subscriptions: Mutex<HashMap<Arc<str>, Arc<GatedChannel>>>,
    closed: AtomicBool,
}

impl ConnectionShared {
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn push_gap(&self, frame: ByteString) {
        self.priority.lock().push_back(PriorityFrame { notifier: None, frame });
        self.priority_ready.notify_one();
    }

    /// Queues a connection-wide notice that found no room, in place of an earlier one of the same notifier that
    /// is still waiting.
    fn push_notice(&self, notifier: usize, frame: ByteString) {
        let mut priority = self.priority.lock();
        priority.retain(|waiting| waiting.notifier != Some(notifier));
        priority.push_back(PriorityFrame { notifier: Some(notifier), frame });
        drop(priority);
        self.priority_ready.notify_one();
    }
}

/// A frame on the priority list: a gap notice, or a connection-wide notice of the notifier it names.
struct PriorityFrame {
    notifier: Option<usize>,
    frame: ByteString,
}

/// One connection's protocol state. Cheap to clone; all clones drive the same connection.
pub struct ServerConnection<S> {
    server: Arc<S>,
    shared: Arc<ConnectionShared>,
}

impl<S> Clone for ServerConnection<S> {
    fn clone(&self) -> Self {
        ServerConnection { server: self.server.clone(), shared: self.shared.clone() }
    }
}

/// The frames a connection wants to send, in order. Dropping it closes the connection's sinks.
pub struct OutboundStream {
    receiver: mpsc::Receiver<ByteString>,
    shared: Arc<ConnectionShared>,
}

impl OutboundStream {
    /// The next frame to write, or `None` once the connection is closed and drained.
    pub async fn next(&mut self) -> Option<ByteString> {
        loop {
            match self.receiver.try_recv() {
                Ok(frame) => return Some(frame),
                Err(mpsc::error::TryRecvError::Disconnected) => return None,
                Err(mpsc::error::TryRecvError::Empty) => {}
            }
            if let Some(waiting) = self.shared.priority.lock().pop_front() {
                return Some(waiting.frame);
            }
            if self.shared.is_closed() {
                return None;
            }
            tokio::select! {
                biased;
                frame = self.receiver.recv() => return frame,
                _ = self.shared.priority_ready.notified() => continue,
            }
        }
    }

    /// Marks the connection closed: sinks report closed, and `next` returns `None` once drained.
    pub fn close(&self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.priority_ready.notify_one();
    }
}

impl Drop for OutboundStream {
    fn drop(&mut self) {
        self.close();
    }
}

impl<S: ServerProtocol> ServerConnection<S> {
    /// A new connection and the stream of frames it will send.
    pub fn new(server: Arc<S>, limits: ServerLimits) -> (Self, OutboundStream) {
        let (sender, receiver) = mpsc::channel(limits.outbound_queue.max(1));
        let shared = Arc::new(ConnectionShared {
            id: NEXT_CONNECTION_ID.fetch_add(1, Ordering::Relaxed),
            limits,
            handshaken: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            outbound: sender,
            priority: Mutex::new(VecDeque::new()),
            priority_ready: Notify::new(),
            subscriptions: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
        });
        server.connected(shared.id);
        let outbound = OutboundStream { receiver, shared: shared.clone() };
        (ServerConnection { server, shared }, outbound)
    }

    pub fn connection_id(&self) -> u64 {
        self.shared.id
    }

    /// Processes one inbound frame completely: its reply (if any) and whatever it unblocks are queued when the
    /// returned future finishes. Frames may be processed concurrently; the handshake and gating decisions are
    /// taken in arrival order, before the first await.
    pub fn handle_frame(&self, frame: MessageFrame) -> impl Future<Output = ()> + Send + 'static {
        let this = self.clone();
        let parsed = match frame {
            MessageFrame::Text(text) => serde_json::from_str::<Value>(&text)
                .map_err(|error| RpcError::parse_error(&format!("the frame is not valid JSON: {error}"))),
            MessageFrame::Value(value) => Ok(value),
        };
        let group = Arc::new(ReplyGroup::default());
        // Validation and gating happen here, synchronously, so that a pipelined `handshake` followed by another
        // method is gated in the order the client sent them.
        let work = match parsed {
            Err(error) => Work::Immediate(encode_error_response(&Id::Null, &error)),
            Ok(Value::Array(items)) if items.is_empty() => Work::Immediate(encode_error_response(
                &Id::Null,
                &RpcError::invalid_request("an empty batch is not a valid request"),
            )),
            Ok(Value::Array(items)) => Work::Batch(items.into_iter().map(|item| this.admit(item, &group)).collect()),
            Ok(value) => Work::Single(this.admit(value, &group)),
        };
        async move {
            let reply = match work {
                Work::Immediate(reply) => Some(reply),
                Work::Single(admitted) => this.run(admitted).await,
                Work::Batch(members) => {
                    let replies: Vec<Option<String>> =
                        futures::future::join_all(members.into_iter().map(|member| this.run(member))).await;
                    let replies: Vec<String> = replies.into_iter().flatten().collect();
                    (!replies.is_empty()).then(|| format!("[{}]", replies.join(",")))
                }
            };
            if let Some(reply) = reply
                && this.shared.outbound.send(ByteString::from(reply)).await.is_err()
            {
                return;
            }
            group.release(&this.shared).await;
        }
    }

    /// Validates one request object and decides, in arrival order, whether it may run.
    fn admit(&self, value: Value, group: &Arc<ReplyGroup>) -> Admitted {
        let request = match crate::jsonrpc::parse_request(value) {
            Ok(request) => request,
            Err((id, error)) => return Admitted::Reply(encode_error_response(&id, &error)),
        };
        let is_notification = request.id.is_none();
        let reply_id = request.id.clone().unwrap_or(Id::Null);
        let refuse = |error: RpcError| {
            if is_notification { Admitted::Nothing } else { Admitted::Reply(encode_error_response(&reply_id, &error)) }
        };
        if request.method == crate::methods::method::Handshake::NAME {
            if let Err(error) = check_handshake(&request.params) {
                return refuse(error);
            }
            self.shared.handshaken.store(true, Ordering::Release);
        } else if !self.shared.handshaken.load(Ordering::Acquire) {
            return refuse(RpcError::handshake_required(&request.method));
        }
        let limit = self.shared.limits.max_in_flight;
        if self.shared.in_flight.fetch_add(1, Ordering::AcqRel) >= limit {
            self.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
            return refuse(RpcError::overloaded(limit));
        }
        let ctx = ServerContext { shared: self.shared.clone(), group: group.clone() };
        Admitted::Dispatch { request, ctx }
    }

    /// Runs an admitted request to its encoded reply (`None` for a notification).
    async fn run(&self, admitted: Admitted) -> Option<String> {
        match admitted {
            Admitted::Nothing => None,
            Admitted::Reply(reply) => Some(reply),
            Admitted::Dispatch { request, ctx } => {
                let outcome = AssertUnwindSafe(dispatch(&*self.server, &ctx, &request.method, request.params))
                    .catch_unwind()
                    .await;
                self.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                let result = outcome.unwrap_or_else(|_| {
                    tracing::error!(method = %request.method, "a request handler panicked");
                    Err(RpcError::internal(&format!(
                        "the handler of `{}` failed unexpectedly; the daemon's log has the details",
                        request.method
                    )))
                });
                let id = request.id?;
                Some(match result {
                    Ok(raw) => encode_result_response(&id, &raw),
                    Err(error) => encode_error_response(&id, &error),
                })
            }
        }
    }
}

enum Work {
    Immediate(String),
    Single(Admitted),
    Batch(Vec<Admitted>),
}

enum Admitted {
    /// A notification that is dropped (before the handshake, or over the in-flight limit).
    Nothing,
    /// An error reply decided without dispatching.
    Reply(String),
    Dispatch {
        request: crate::jsonrpc::IncomingRequest,
        ctx: ServerContext,
    },
}

fn check_handshake(params: &Value) -> Result<(), RpcError> {
    let params: HandshakeParams = crate::jsonrpc::decode_params("handshake", params.clone())?;
    if params.protocol_version != PROTOCOL_VERSION {
        return Err(RpcError::invalid_params_typed(
            "unsupported_protocol_version",
            &format!(
                "this daemon speaks protocol {PROTOCOL_VERSION} only; the client asked for {}",
                params.protocol_version
            ),
            &[("supported", serde_json::json!([PROTOCOL_VERSION]))],
        ));
    }
    Ok(())
}

/// What the requests of one frame (a single request or a whole batch) opened, released after its reply.
#[derive(Default)]
struct ReplyGroup {
    after_reply: Mutex<Vec<ByteString>>,
    channels: Mutex<Vec<Arc<GatedChannel>>>,
}

impl ReplyGroup {
    async fn release(&self, shared: &ConnectionShared) {
        let frames = std::mem::take(&mut *self.after_reply.lock());
        for frame in frames {
            if shared.outbound.send(frame).await.is_err() {
                return;
            }
        }
        let channels = std::mem::take(&mut *self.channels.lock());
        for channel in channels {
            channel.open();
        }
    }
}

/// The context of one request: which connection it came from, and the channels it may open.
pub struct ServerContext {
    shared: Arc<ConnectionShared>,
    group: Arc<ReplyGroup>,
}

impl ServerContext {
    pub fn connection_id(&self) -> u64 {
        self.shared.id
    }

    /// Queues a notification right after this request's reply.
    pub fn notify_after_reply<N: Notification>(&self, params: &N::Params) {
        match encode_notification::<N>(params) {
            Ok(frame) => self.group.after_reply.lock().push(frame),
            Err(error) => {
                tracing::error!(notification = N::NAME, %error, "failed to encode a notification")
            }
        }
    }

    /// A channel for connection-wide notifications (`runtime.changed`), open once this request has replied. Each of
    /// its notifications must carry a complete state that supersedes the ones before it: when the client does not
    /// read, only the newest waits for room.
    pub fn connection_notifier(&self) -> ConnectionNotifier {
        let channel = GatedChannel::new(self.shared.clone(), None);
        self.group.channels.lock().push(channel.clone());
        ConnectionNotifier { channel }
    }

    /// A channel for one session's `events.subscription` notifications, open once this request has replied. It
    /// replaces this connection's previous subscription to the same session, which reports closed from now on.
    pub fn event_sink(&self, session_id: &str) -> EventSink {
        let session_id: Arc<str> = Arc::from(session_id);
        let channel = GatedChannel::new(self.shared.clone(), Some(session_id.clone()));
        if let Some(previous) = self.shared.subscriptions.lock().insert(session_id, channel.clone()) {
            previous.closed.store(true, Ordering::Release);
        }
        self.group.channels.lock().push(channel.clone());
        EventSink { channel }
    }
}

/// A notification channel that holds its frames until the reply that created it is queued.
struct GatedChannel {
    shared: Arc<ConnectionShared>,
    /// Set for event subscriptions: where the gap notice points.
    session_id: Option<Arc<str>>,
    open: AtomicBool,
    held: Mutex<Option<VecDeque<(Held, ByteString)>>>,
    closed: AtomicBool,
    last_delivered_seq: AtomicU64,
}

/// What a held frame is: an event of a subscription (with its `seq`; 0 for connection-wide notices), or a
/// transient notification that may be dropped without closing the subscription.
#[derive(Clone, Copy, Debug)]
enum Held {
    Event(u64),
    Transient,
}

/// Why a notification was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SinkError {
    /// The connection is gone, or the subscription was replaced. Drop the sink.
    #[error("the subscriber is gone")]
    Closed,
    /// The subscriber fell behind: it has been sent a gap notice. Drop the sink.
    #[error("the subscriber fell behind and was sent a gap")]
    Lagging,
}

impl GatedChannel {
    fn new(shared: Arc<ConnectionShared>, session_id: Option<Arc<str>>) -> Arc<Self> {
        Arc::new(GatedChannel {
            shared,
            session_id,
            open: AtomicBool::new(false),
            held: Mutex::new(Some(VecDeque::new())),
            closed: AtomicBool::new(false),
            last_delivered_seq: AtomicU64::new(0),
        })
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.shared.is_closed()
    }

    fn offer(&self, seq: u64, frame: &ByteString) -> Result<(), SinkError> {
        if self.is_closed() {
            return Err(SinkError::Closed);
        }
        match self.hold_while_gated(Held::Event(seq), frame) {
            Some(true) => Ok(()),
            Some(false) => Err(self.fall_behind()),
            None => self.enqueue(seq, frame.clone()),
        }
    }

    /// Holds `frame` while the channel waits for its reply. `None` when the channel is open (the caller sends
    /// the frame itself); otherwise whether there was room to hold it.
    fn hold_while_gated(&self, kind: Held, frame: &ByteString) -> Option<bool> {
        if self.open.load(Ordering::Acquire) {
            return None;
        }
        let mut guard = self.held.lock();
        // `open` flips while this lock is held, after the held frames were queued; `None` here means it just did.
        let held = guard.as_mut()?;
        if held.len() >= self.shared.limits.outbound_queue {
            return Some(false);
        }
        held.push_back((kind, frame.clone()));
        Some(true)
    }

    fn enqueue(&self, seq: u64, frame: ByteString) -> Result<(), SinkError> {
        match self.shared.outbound.try_send(frame) {
            Ok(()) => {
                if seq > 0 {
                    self.last_delivered_seq.store(seq, Ordering::Release);
                }
                Ok(())
            }
            Err(mpsc::error::TrySendError::Full(frame)) => {
                if self.session_id.is_none() {
                    // Connection-wide notices must not be lost: the newest waits on the priority list, replacing an
                    // older one of this notifier (each carries the complete state).
                    self.shared.push_notice(std::ptr::from_ref(self) as usize, frame);
                    return Ok(());
                }
                Err(self.fall_behind())
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.closed.store(true, Ordering::Release);
                Err(SinkError::Closed)
            }
        }
    }

    fn offer_transient(&self, frame: &ByteString) -> Result<bool, SinkError> {
        if self.is_closed() {
            return Err(SinkError::Closed);
        }
        match self.hold_while_gated(Held::Transient, frame) {
            Some(held) => Ok(held),
            None => self.send_transient(frame.clone()),
        }
    }

    /// Queues a frame that may be dropped when there is no room, without closing the subscription.
    fn send_transient(&self, frame: ByteString) -> Result<bool, SinkError> {
        match self.shared.outbound.try_send(frame) {
            Ok(()) => Ok(true),
            Err(mpsc::error::TrySendError::Full(_)) => Ok(false),
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.closed.store(true, Ordering::Release);
                Err(SinkError::Closed)
            }
        }
    }

    /// Closes the subscription and schedules its one gap notice.
    fn fall_behind(&self) -> SinkError {
        if self.closed.swap(true, Ordering::AcqRel) {
            return SinkError::Closed;
        }
        if let Some(session_id) = &self.session_id {
            let gap = EventsSubscriptionParams::Gap {
                session_id: session_id.to_string(),
                last_delivered_seq: self.last_delivered_seq.load(Ordering::Acquire),
            };
            match encode_notification::<crate::methods::notification::EventsSubscription>(&gap) {
                Ok(frame) => self.shared.push_gap(frame),
                Err(error) => tracing::error!(%error, "failed to encode a gap notice"),
            }
            let mut subscriptions = self.shared.subscriptions.lock();
            if subscriptions.get(session_id).is_some_and(|current| std::ptr::eq(Arc::as_ptr(current), self)) {
                subscriptions.remove(session_id);
            }
        }
        SinkError::Lagging
    }

    /// Queues the held frames and lets later ones through directly.
    fn open(&self) {
        let mut held = self.held.lock();
        if let Some(frames) = held.take() {
            for (kind, frame) in frames {
                if self.closed.load(Ordering::Acquire) {
                    break;
                }
                let sent = match kind {
                    Held::Event(seq) => self.enqueue(seq, frame).is_ok(),
                    // A transient frame that finds no room is only lost; the subscription stays open.
                    Held::Transient => self.send_transient(frame).is_ok(),
                };
                if !sent {
                    break;
                }
            }
        }
        self.open.store(true, Ordering::Release);
    }
}

/// One connection's subscription to one session's events. The session actor owns it and offers each new event.
pub struct EventSink {
    channel: Arc<GatedChannel>,
}

impl EventSink {
    pub fn connection_id(&self) -> u64 {
        self.channel.shared.id
    }

    /// Records that the subscription's reply carried the events up to `seq`, so a gap points after them.
    pub fn mark_replayed_through(&self, seq: u64) {
        self.channel.last_delivered_seq.store(seq, Ordering::Release);
    }

    /// Offers one encoded `events.subscription` frame for the event `seq` (see [`encode_event_notification`]).
    /// On error the sink is finished and must be dropped; on `Lagging` its gap notice is already scheduled.
    pub fn offer(&self, seq: u64, frame: &ByteString) -> Result<(), SinkError> {
        self.channel.offer(seq, frame)
    }

    /// Whether the connection is gone or the subscription was replaced.
    pub fn is_closed(&self) -> bool {
        self.channel.is_closed()
    }

    /// Offers a notification that is not a stored event (live tool output). When the queue is full it is
    /// dropped and `Ok(false)` is returned, but the subscription stays open: the caller tells the subscriber
    /// what it missed later (`events.tool_output_gap`). `Err(Closed)` means the sink is finished.
    pub fn offer_transient(&self, frame: &ByteString) -> Result<bool, SinkError> {
        self.channel.offer_transient(frame)
    }
}

/// A connection's channel for connection-wide notifications such as `runtime.changed`.
#[derive(Clone)]
pub struct ConnectionNotifier {
    channel: Arc<GatedChannel>,
}

impl ConnectionNotifier {
    pub fn connection_id(&self) -> u64 {
        self.channel.shared.id
    }

    /// Queues a notification. Returns `Err(Closed)` once the connection is gone.
    pub fn notify<N: Notification>(&self, params: &N::Params) -> Result<(), SinkError> {
        match encode_notification::<N>(params) {
            Ok(frame) => self.channel.offer(0, &frame),
            Err(error) => {
                tracing::error!(notification = N::NAME, %error, "failed to encode a notification");
                Ok(())
            }
        }
    }

    pub fn is_closed(&self) -> bool {
        self.channel.is_closed()
    }
}

/// Encodes `events.subscription {session_id, type: "event", event}` around the event's stored JSON, once per
/// event for all subscribers.
pub fn encode_event_notification(session_id: &str, event: &EventJson) -> ByteString {
    let session_id = serde_json::to_string(session_id).unwrap_or_else(|_| "\"\"".to_owned());
    let event = event.as_str();
    let mut out = String::with_capacity(event.len() + session_id.len() + 96);
    out.push_str(r#"{"jsonrpc":"2.0","method":"events.subscription","params":{"type":"event","session_id":"#);
    out.push_str(&session_id);
    out.push_str(r#","event":"#);
    out.push_str(event);
    out.push_str("}}");
    ByteString::from(out)
}

/// Drives one complete protocol session over `transport` until either side closes.
pub async fn serve<S: ServerProtocol, T: Transport>(mut transport: T, server: Arc<S>, limits: ServerLimits) {
    let (connection, mut outbound) = ServerConnection::new(server.clone(), limits);
    let mut handlers = FuturesUnordered::new();
    loop {
        tokio::select! {
            frame = transport.recv() => match frame {
                Some(frame) => handlers.push(connection.handle_frame(frame)),
                None => break,
            },
            Some(()) = handlers.next(), if !handlers.is_empty() => {}
            frame = outbound.next() => match frame {
                Some(frame) => {
                    if transport.send(MessageFrame::Text(frame.to_string())).await.is_err() {
                        break;
                    }
                }
                None => break,
            },
        }
    }
    outbound.close();
    server.disconnected(connection.connection_id());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers nothing; the sinks are under test.
    struct Nothing;
    impl ServerProtocol for Nothing {}

    #[test]
    fn a_held_transient_frame_that_finds_no_room_does_not_close_the_subscription() {
        let limits = ServerLimits { max_in_flight: 4, outbound_queue: 2 };
        let (connection, _outbound) = ServerConnection::new(Arc::new(Nothing), limits);
        let ctx = ServerContext { shared: connection.shared.clone(), group: Arc::new(ReplyGroup::default()) };
        let sink = ctx.event_sink("s");
        // While the subscribe reply is pending, tool output is held.
        assert_eq!(sink.offer_transient(&ByteString::from("output")), Ok(true));
        // The queue fills up before the reply is written, so the held output finds no room when the gate opens.
        for _ in 0..2 {
            connection.shared.outbound.try_send(ByteString::from("reply")).unwrap();
        }
        sink.channel.open();
        assert!(!sink.is_closed(), "losing a transient frame keeps the subscription");
        // An event that does not fit is different: the subscriber fell behind and gets its gap.
        assert_eq!(sink.offer(1, &ByteString::from("event")), Err(SinkError::Lagging));
        assert!(sink.is_closed());
        assert_eq!(connection.shared.priority.lock().len(), 1, "one gap notice");
    }

    #[tokio::test]
    async fn a_client_that_does_not_read_holds_only_the_newest_connection_notice() {
        use crate::methods::notification::RuntimeChanged;
        use crate::types::runtime::{RuntimeChangedParams, RuntimeSnapshot};
        let limits = ServerLimits { max_in_flight: 4, outbound_queue: 2 };
        let (connection, mut outbound) = ServerConnection::new(Arc::new(Nothing), limits);
        let ctx = ServerContext { shared: connection.shared.clone(), group: Arc::new(ReplyGroup::default()) };
        let notifier = ctx.connection_notifier();
        notifier.channel.open();
        let snapshot = |revision| RuntimeChangedParams {
            previous_revision: Some(revision - 1),
            snapshot: RuntimeSnapshot { revision, providers: vec![], models: vec![], agents: vec![], sandbox: None },
            reasons: vec!["provider_connected".to_owned()],
        };
        for revision in 1..=1000 {
            notifier.notify::<RuntimeChanged>(&snapshot(revision)).unwrap();
        }
        // Two fit the queue; of the 998 that did not, only the newest waits.
        assert_eq!(connection.shared.priority.lock().len(), 1);
        let mut frames = Vec::new();
        for _ in 0..3 {
            frames.push(outbound.next().await.unwrap().to_string());
        }
        assert!(frames[2].contains("\"revision\":1000"), "{}", frames[2]);
    }
}
