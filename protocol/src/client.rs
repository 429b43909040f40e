//! The shared client: one implementation of the client side of protocol 20, used by the CLI (`troupe sessions`,
//! `troupe watch`), the end-to-end tests and the benchmarks.
//!
//! A [`Client`] is a cheap handle to one *connection task*, which owns the transport and all protocol state:
//!
//! - **Calls** are correlated by id. Ids are increasing integers taken from a counter shared by every handle and
//!   by the task's own requests; replies may come in any order. Each call has a timeout.
//! - **Notifications** are demultiplexed into one ordered stream of [`ClientDelivery`] values read through
//!   [`Deliveries`], so a UI never parses a JSON-RPC frame.
//! - **Subscriptions** ([`Client::subscribe`]) are remembered per session with a *cursor*: the last `seq`
//!   handed to the consumer. Live events at or below the cursor are duplicates and are dropped. A `gap` notice
//!   (the daemon dropped the subscription because this client fell behind) makes the task re-subscribe from the
//!   cursor by itself; the replay is delivered between `ReplayStart` and `ReplayEnd`, and the live events that
//!   arrived meanwhile are held back and delivered after it, so the consumer sees every event exactly once and in
//!   order.
//! - **Secrets**: the params of a method marked [`Method::CARRIES_SECRETS`] are serialized into a buffer that is
//!   wiped once the transport has taken its copy of the frame.
//! - **Shutdown**: when the connection ends, every outstanding call fails (`Disconnected`, or `Closed` after
//!   [`Client::close`]) and the delivery stream ends. With a [`ReconnectPolicy`]
//!   ([`Client::connect_websocket`] only, because only it knows how to dial again) the task instead reports
//!   `Disconnected`, dials again with backoff, handshakes, reports `Reconnected` and re-subscribes every known
//!   session from its cursor.
//!
//! # Back-pressure
//!
//! The delivery stream is bounded ([`ClientOptions::delivery_buffer`]). When it is full the connection task waits
//! for the consumer and reads nothing else from the socket meanwhile, replies included. That is deliberate: the
//! daemon's own bounded queue then fills up, it sends a `gap`, and recovery by cursor brings the consumer back
//! without unbounded memory on either side. The price is that a consumer must not block on a [`Client::call`]
//! while it stops draining [`Deliveries`]: read deliveries on their own task, or such calls end in `Timeout`.
//!
//! # Ordering
//!
//! The daemon never sends a subscription's first live event before its `events.subscribe` reply, and sends the
//! handshake reply before the first `runtime.changed` (see [`crate::server`]). The task keeps that order: it
//! delivers a reply's replay before any live event of the same session that was read after it.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot, watch};
use zeroize::{Zeroize, Zeroizing};

use crate::error::RpcError;
use crate::jsonrpc::{Id, Method, Notification, encode_request};
use crate::methods::{method, notification};
use crate::transport::{MessageFrame, Transport, TransportError, WebSocketTransport};
use crate::types::events::{EventsSubscribeParams, StoredEvent};
use crate::types::runtime::{
    HandshakeParams, HandshakeResult, PROTOCOL_VERSION, RuntimeChangedParams,
};

/// How many times a failed automatic re-subscribe (after a gap or a reconnect) is retried before the session is
/// given up with [`ClientDelivery::RecoveryFailed`].
const RECOVERY_RETRIES: u32 = 6;

/// Delay before the first recovery retry; it doubles for each further one.
const RECOVERY_INITIAL_DELAY: Duration = Duration::from_millis(100);

/// Live events held back per session while its re-subscribe is in flight. Beyond this they are dropped: they
/// have `seq` above the cursor, so a further re-subscribe fetches them again if the pending replay does not
/// already contain them.
const MAX_HELD_LIVE_EVENTS: usize = 10_000;

/// Everything that can go wrong with a call.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The daemon answered with a JSON-RPC error.
    #[error("{}", describe_rpc_error(.0))]
    Rpc(RpcError),
    /// [`Client::close`] was called.
    #[error("the client was closed")]
    Closed,
    /// The connection to the daemon was lost before the answer came.
    #[error("the connection to the daemon was lost")]
    Disconnected,
    /// No answer within [`ClientOptions::request_timeout`].
    #[error("the daemon did not answer within the request timeout")]
    Timeout,
    /// The transport could not be opened.
    #[error("{0}")]
    Transport(String),
    /// The params could not be serialized.
    #[error("cannot encode the request: {0}")]
    Encode(String),
    /// The daemon's answer did not decode into the expected type.
    #[error("cannot decode the daemon's answer: {0}")]
    Decode(String),
    /// The daemon answered something protocol 20 does not allow (such as another protocol version).
    #[error("protocol violation: {0}")]
    Protocol(String),
}

impl From<RpcError> for ClientError {
    fn from(error: RpcError) -> Self {
        ClientError::Rpc(error)
    }
}

impl From<TransportError> for ClientError {
    fn from(error: TransportError) -> Self {
        ClientError::Transport(error.0)
    }
}

/// `data.detail` is sanitized by the daemon (terminal-safe, bounded), so it may be shown as is.
fn describe_rpc_error(error: &RpcError) -> String {
    match error.detail() {
        Some(detail) => format!("{} ({}): {detail}", error.message, error.code),
        None => format!("{} ({})", error.message, error.code),
    }
}

/// How [`Client::connect_websocket`] dials again after the connection drops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconnectPolicy {
    /// Delay before the first attempt; it doubles after each failed one.
    pub initial_delay: Duration,
    /// Upper bound of the delay between attempts.
    pub max_delay: Duration,
    /// Give up (and end the delivery stream) after this many failed attempts in a row; `None` never gives up.
    pub max_attempts: Option<u32>,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        ReconnectPolicy {
            initial_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(5),
            max_attempts: None,
        }
    }
}

impl ReconnectPolicy {
    /// The delay before attempt `attempt` (0-based).
    fn delay(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(16)).unwrap_or(u32::MAX);
        self.initial_delay
            .saturating_mul(factor)
            .min(self.max_delay)
    }
}

/// Options of a [`Client`].
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// How long a call waits for its answer, including any time spent waiting for a reconnect.
    pub request_timeout: Duration,
    /// Dial again after the connection drops. Only [`Client::connect_websocket`] can; [`Client::connect`]
    /// ignores it, because a generic transport cannot be opened a second time.
    pub reconnect: Option<ReconnectPolicy>,
    /// Capacity of the delivery stream (see the module docs on back-pressure).
    pub delivery_buffer: usize,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            request_timeout: Duration::from_secs(30),
            reconnect: None,
            delivery_buffer: 4096,
        }
    }
}

/// Why a replay is being delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReplayReason {
    /// The consumer called [`Client::subscribe`].
    Subscribe,
    /// The daemon reported a gap and the client re-subscribed from its cursor.
    Gap,
    /// The connection was re-established and the client re-subscribed from its cursor.
    Reconnect,
}

/// One item of the ordered delivery stream.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientDelivery {
    /// A live event; its `seq` is above every `seq` delivered before for its session.
    Live(StoredEvent),
    /// The replay of a subscribe reply begins: events with `seq > after_seq` follow as `ReplayEvent`.
    ReplayStart {
        session_id: String,
        after_seq: u64,
        reason: ReplayReason,
    },
    ReplayEvent(StoredEvent),
    /// The replay is complete; `last_seq` is the reply's `last_seq`, and live events continue after it.
    ReplayEnd {
        session_id: String,
        last_seq: u64,
    },
    /// `events.tool_output_delta` params, as sent.
    ToolOutputDelta(Value),
    /// `events.tool_output_snapshot` params, as sent.
    ToolOutputSnapshot(Value),
    /// `events.tool_output_gap` params, as sent.
    ToolOutputGap(Value),
    /// `events.plugin` params, as sent.
    PluginEvent(Value),
    RuntimeChanged(RuntimeChangedParams),
    /// The automatic re-subscribe kept failing; the client no longer follows this session. Subscribe again to
    /// resume.
    RecoveryFailed {
        session_id: String,
        detail: String,
    },
    /// The connection dropped and the client is dialing again (only with a [`ReconnectPolicy`]).
    Disconnected {
        detail: String,
    },
    /// The connection is back and handshaken; replays with [`ReplayReason::Reconnect`] follow.
    Reconnected,
}

/// The delivery stream of one [`Client`]. It ends (`None`) when the connection task stops.
pub struct Deliveries {
    receiver: mpsc::Receiver<ClientDelivery>,
}

impl std::fmt::Debug for Deliveries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deliveries")
            .field("queued", &self.receiver.len())
            .finish()
    }
}

impl Deliveries {
    /// The next delivery, or `None` once the client is closed or the connection is gone for good.
    pub async fn next(&mut self) -> Option<ClientDelivery> {
        self.receiver.recv().await
    }
}

/// A handle to a connection. Clones share the connection; it stays open while any handle exists.
#[derive(Clone)]
pub struct Client {
    shared: Arc<ClientShared>,
}

struct ClientShared {
    commands: mpsc::UnboundedSender<Command>,
    next_id: Arc<AtomicU64>,
    request_timeout: Duration,
    /// Set by [`Client::close`]. The task watches it even while it waits for a slow consumer.
    close: watch::Sender<bool>,
    /// Why the task stopped, for calls that find it gone.
    end: Arc<Mutex<Option<EndReason>>>,
}

impl ClientShared {
    fn ended(&self) -> ClientError {
        self.end
            .lock()
            .map_or(ClientError::Disconnected, EndReason::error)
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

impl Client {
    /// Handshakes (protocol 20) over an existing transport; returns the client and its delivery stream.
    ///
    /// Must be called inside a Tokio runtime: the connection task is spawned on it.
    pub async fn connect<T: Transport>(
        transport: T,
        options: ClientOptions,
    ) -> Result<(Client, Deliveries), ClientError> {
        if options.reconnect.is_some() {
            tracing::debug!("a reconnect policy needs `connect_websocket`; ignoring it");
        }
        Self::start(transport, None, options).await
    }

    /// Connects over WebSocket (`ws://host:port/ws`) with a bearer token; with `options.reconnect` set it
    /// reconnects by itself after the connection drops.
    pub async fn connect_websocket(
        url: &str,
        token: &str,
        options: ClientOptions,
    ) -> Result<(Client, Deliveries), ClientError> {
        let transport = WebSocketTransport::connect(url, token).await?;
        let redial = options.reconnect.clone().map(|policy| {
            let url: Arc<str> = Arc::from(url);
            // Kept for dialing again; wiped when the connection task ends.
            let token = Arc::new(Zeroizing::new(token.to_owned()));
            let dial: Dialer<WebSocketTransport> = Box::new(move || {
                let url = url.clone();
                let token = token.clone();
                Box::pin(async move { WebSocketTransport::connect(&url, &token).await })
            });
            Redial {
                dial,
                policy,
                attempt: 0,
            }
        });
        Self::start(transport, redial, options).await
    }

    async fn start<T: Transport>(
        transport: T,
        redial: Option<Redial<T>>,
        options: ClientOptions,
    ) -> Result<(Client, Deliveries), ClientError> {
        let (commands, command_receiver) = mpsc::unbounded_channel();
        let (delivery_sender, delivery_receiver) = mpsc::channel(options.delivery_buffer.max(1));
        let (close, close_receiver) = watch::channel(false);
        let next_id = Arc::new(AtomicU64::new(1));
        let end = Arc::new(Mutex::new(None));
        let task = ConnectionTask {
            link: Link::Up {
                transport,
                ready: true,
            },
            redial,
            commands: command_receiver,
            close: close_receiver,
            next_id: next_id.clone(),
            end: end.clone(),
            deliveries: Some(delivery_sender),
            outbox: VecDeque::new(),
            outgoing: VecDeque::new(),
            pending: HashMap::new(),
            waiting: VecDeque::new(),
            sessions: HashMap::new(),
            retries: FuturesUnordered::new(),
            next_epoch: 1,
            stop: None,
        };
        tokio::spawn(task.run());
        let client = Client {
            shared: Arc::new(ClientShared {
                commands,
                next_id,
                request_timeout: options.request_timeout,
                close,
                end,
            }),
        };
        let handshake = client
            .call::<method::Handshake>(HandshakeParams {
                protocol_version: PROTOCOL_VERSION,
            })
            .await
            .and_then(|result| check_handshake_result(&result));
        match handshake {
            Ok(()) => Ok((
                client,
                Deliveries {
                    receiver: delivery_receiver,
                },
            )),
            Err(error) => {
                client.close().await;
                Err(error)
            }
        }
    }

    /// Calls `M` and decodes its result. Fails with `Timeout` after [`ClientOptions::request_timeout`].
    ///
    /// Use [`Client::subscribe`] rather than calling `events.subscribe` directly: only then does the connection
    /// task know the subscription, deliver its events and recover it.
    pub async fn call<M: Method>(&self, params: M::Params) -> Result<M::Result, ClientError> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = OutgoingText::encode::<M>(id, &params)?;
        drop(params);
        let (reply, answer) = oneshot::channel();
        self.send_command(Command::Call { id, frame, reply })?;
        // Dropping the call (a timeout, or the caller giving up) tells the task to forget the id, so that its
        // table of outstanding calls does not grow.
        let mut forget = ForgetOnDrop {
            id,
            commands: &self.shared.commands,
            armed: true,
        };
        let answer = tokio::time::timeout(self.shared.request_timeout, answer)
            .await
            .map_err(|_| ClientError::Timeout)?;
        forget.armed = false;
        let text = match answer {
            Ok(result) => result?,
            Err(_) => return Err(self.shared.ended()),
        };
        serde_json::from_str(&text)
            .map_err(|error| ClientError::Decode(format!("the result of `{}`: {error}", M::NAME)))
    }

    /// `events.subscribe` through the connection task. The reply's events come out of [`Deliveries`] as
    /// `ReplayStart` / `ReplayEvent`* / `ReplayEnd` (reason `Subscribe`), then the session's live events; the
    /// task remembers the session's cursor and recovers the subscription after a gap or a reconnect. Returns
    /// the reply's `last_seq`.
    ///
    /// `cursor` replaces the cursor the task had for this session, so subscribing again with an older cursor
    /// replays those events again. If the call fails, the session is forgotten.
    pub async fn subscribe(
        &self,
        session_id: &str,
        cursor: Option<u64>,
    ) -> Result<u64, ClientError> {
        let (reply, answer) = oneshot::channel();
        self.send_command(Command::Subscribe {
            session_id: session_id.to_owned(),
            cursor,
            reply,
        })?;
        match tokio::time::timeout(self.shared.request_timeout, answer).await {
            Err(_) => Err(ClientError::Timeout),
            Ok(Err(_)) => Err(self.shared.ended()),
            Ok(Ok(result)) => result,
        }
    }

    /// Closes the connection: outstanding calls fail with `Closed`, the delivery stream ends, and later calls
    /// fail with `Closed`. Returns once the connection task has stopped.
    pub async fn close(&self) {
        self.shared.close.send_replace(true);
        self.shared.commands.closed().await;
    }

    fn send_command(&self, command: Command) -> Result<(), ClientError> {
        self.shared
            .commands
            .send(command)
            .map_err(|_| self.shared.ended())
    }
}

fn check_handshake_result(result: &HandshakeResult) -> Result<(), ClientError> {
    if result.protocol_version == PROTOCOL_VERSION {
        Ok(())
    } else {
        Err(ClientError::Protocol(format!(
            "the daemon answered the handshake with protocol {} instead of {PROTOCOL_VERSION}",
            result.protocol_version
        )))
    }
}

struct ForgetOnDrop<'a> {
    id: u64,
    commands: &'a mpsc::UnboundedSender<Command>,
    armed: bool,
}

impl Drop for ForgetOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.commands.send(Command::Forget { id: self.id });
        }
    }
}

/// A serialized request waiting to be written.
enum OutgoingText {
    Plain(String),
    /// Carries secrets: wiped once the transport has taken its copy. What the transport does with that copy
    /// (tungstenite's write buffer, the kernel's socket buffer, the other end of an in-process channel) is
    /// outside this crate's control.
    Secret(Zeroizing<String>),
}

impl OutgoingText {
    fn encode<M: Method>(id: u64, params: &M::Params) -> Result<OutgoingText, ClientError> {
        let encoded = if M::CARRIES_SECRETS {
            encode_secret_request::<M>(id, params).map(OutgoingText::Secret)
        } else {
            encode_request::<M>(&Id::Number(id.into()), params).map(OutgoingText::Plain)
        };
        encoded
            .map_err(|error| ClientError::Encode(format!("the params of `{}`: {error}", M::NAME)))
    }
}

/// Serializes a request into a buffer of exactly the right size: a growing buffer would leave copies of the
/// secret behind in the memory it frees on each reallocation, which nothing could wipe.
fn encode_secret_request<M: Method>(
    id: u64,
    params: &M::Params,
) -> Result<Zeroizing<String>, serde_json::Error> {
    #[derive(Serialize)]
    struct Envelope<'a, P> {
        jsonrpc: &'static str,
        id: u64,
        method: &'static str,
        params: &'a P,
    }
    struct ByteCounter(usize);
    impl std::io::Write for ByteCounter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let envelope = Envelope {
        jsonrpc: "2.0",
        id,
        method: M::NAME,
        params,
    };
    let mut counter = ByteCounter(0);
    serde_json::to_writer(&mut counter, &envelope)?;
    let mut buffer = Zeroizing::new(Vec::with_capacity(counter.0));
    serde_json::to_writer(&mut *buffer, &envelope)?;
    match String::from_utf8(std::mem::take(&mut *buffer)) {
        Ok(text) => Ok(Zeroizing::new(text)),
        Err(error) => {
            // serde_json only writes UTF-8; wipe the bytes anyway before reporting.
            error.into_bytes().zeroize();
            Err(serde::ser::Error::custom(
                "the encoded request is not UTF-8",
            ))
        }
    }
}

type DialFuture<T> = Pin<Box<dyn Future<Output = Result<T, TransportError>> + Send>>;
type Dialer<T> = Box<dyn Fn() -> DialFuture<T> + Send + Sync>;

/// How to open the transport again, and where the current series of attempts stands.
struct Redial<T> {
    dial: Dialer<T>,
    policy: ReconnectPolicy,
    /// Failed attempts since the connection was last established.
    attempt: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EndReason {
    Closed,
    Disconnected,
}

impl EndReason {
    fn error(self) -> ClientError {
        match self {
            EndReason::Closed => ClientError::Closed,
            EndReason::Disconnected => ClientError::Disconnected,
        }
    }
}

enum Command {
    Call {
        id: u64,
        frame: OutgoingText,
        reply: oneshot::Sender<Result<String, ClientError>>,
    },
    /// The caller stopped waiting for this call.
    Forget { id: u64 },
    Subscribe {
        session_id: String,
        cursor: Option<u64>,
        reply: oneshot::Sender<Result<u64, ClientError>>,
    },
}

type SubscribeReply = oneshot::Sender<Result<u64, ClientError>>;

/// A request that was written and awaits its answer.
enum Pending {
    /// A consumer's call: the raw text of its result goes back to the caller, which decodes it.
    Call(oneshot::Sender<Result<String, ClientError>>),
    /// An `events.subscribe` sent by the task; `reply` is set when a consumer asked for it.
    Subscribe {
        session_id: String,
        epoch: u64,
        reply: Option<SubscribeReply>,
    },
    /// The handshake on a re-established connection.
    Handshake,
}

/// A consumer's call made while the connection is down; written once it is back.
struct WaitingCall {
    id: u64,
    frame: OutgoingText,
    reply: oneshot::Sender<Result<String, ClientError>>,
}

enum Link<T> {
    /// `ready` once handshaken: consumer calls wait until then.
    Up {
        transport: T,
        ready: bool,
    },
    /// Waiting before the next dial.
    Backoff(Pin<Box<tokio::time::Sleep>>),
    Dialing(DialFuture<T>),
}

/// What the task knows of one subscribed session.
struct SessionState {
    /// The last `seq` handed to the consumer (0: none yet).
    cursor: u64,
    phase: SessionPhase,
    /// Bumped whenever a subscribe is issued or the link drops, so that stale replies and timers are ignored.
    epoch: u64,
    /// Live events read while a re-subscribe is in flight, delivered after its replay.
    held: VecDeque<StoredEvent>,
    /// The highest `seq` of a live event dropped because `held` was full.
    dropped_above: Option<u64>,
    /// A gap arrived while a subscribe was in flight. It may be the new subscription's own (a subscription can
    /// fall behind before its reply is written), so the task re-subscribes once more after the replay.
    gap_while_subscribing: bool,
    /// A subscribe succeeded at least once: the session survives a reconnect.
    established: bool,
    /// Failed automatic re-subscribes in a row.
    failures: u32,
}

enum SessionPhase {
    /// Subscribed; live events go straight to the consumer.
    Live,
    /// An `events.subscribe` is in flight.
    Subscribing { reason: ReplayReason },
    /// A re-subscribe failed; a timer retries it.
    RetryWait { reason: ReplayReason },
    /// Subscribe as soon as the connection is back (and handshaken).
    AwaitingLink {
        reason: ReplayReason,
        reply: Option<SubscribeReply>,
    },
}

impl SessionState {
    fn new() -> Self {
        SessionState {
            cursor: 0,
            phase: SessionPhase::Live,
            epoch: 0,
            held: VecDeque::new(),
            dropped_above: None,
            gap_while_subscribing: false,
            established: false,
            failures: 0,
        }
    }
}

enum Event<T> {
    Close,
    Command(Command),
    Frame(Option<MessageFrame>),
    BackoffElapsed,
    Dialed(Result<T, TransportError>),
    RetryDue { session_id: String, epoch: u64 },
}

type RetryTimer = Pin<Box<dyn Future<Output = (String, u64)> + Send>>;

/// The connection task: owns the transport and every piece of protocol state. Handlers are synchronous and
/// only queue work (`outgoing` frames, `outbox` deliveries); the loop does the awaiting, so state changes are
/// never interleaved with I/O.
struct ConnectionTask<T: Transport> {
    link: Link<T>,
    redial: Option<Redial<T>>,
    commands: mpsc::UnboundedReceiver<Command>,
    close: watch::Receiver<bool>,
    next_id: Arc<AtomicU64>,
    end: Arc<Mutex<Option<EndReason>>>,
    /// `None` once the consumer dropped [`Deliveries`].
    deliveries: Option<mpsc::Sender<ClientDelivery>>,
    outbox: VecDeque<ClientDelivery>,
    /// Frames to write, each already registered in `pending`.
    outgoing: VecDeque<OutgoingText>,
    pending: HashMap<u64, Pending>,
    waiting: VecDeque<WaitingCall>,
    sessions: HashMap<String, SessionState>,
    retries: FuturesUnordered<RetryTimer>,
    next_epoch: u64,
    /// Set when the task must stop.
    stop: Option<EndReason>,
}

impl<T: Transport> ConnectionTask<T> {
    async fn run(mut self) {
        loop {
            let event = self.next_event().await;
            self.handle_event(event);
            if self.stop != Some(EndReason::Closed) {
                self.flush_outgoing().await;
                self.flush_outbox().await;
            }
            if self.stop.is_some() {
                break;
            }
        }
        self.finish();
    }

    async fn next_event(&mut self) -> Event<T> {
        if *self.close.borrow() {
            return Event::Close;
        }
        let close = &mut self.close;
        let commands = &mut self.commands;
        let link = &mut self.link;
        let retries = &mut self.retries;
        // Not biased: a busy notification stream must not starve commands, nor the reverse.
        tokio::select! {
            // An error means every `Client` handle is gone: nobody can call or close any more.
            _ = close.wait_for(|closed| *closed) => Event::Close,
            command = commands.recv() => match command {
                Some(command) => Event::Command(command),
                None => Event::Close,
            },
            event = link_event(link) => event,
            Some((session_id, epoch)) = retries.next(), if !retries.is_empty() => {
                Event::RetryDue { session_id, epoch }
            }
        }
    }

    fn handle_event(&mut self, event: Event<T>) {
        match event {
            Event::Close => self.stop = Some(EndReason::Closed),
            Event::Command(command) => self.handle_command(command),
            Event::Frame(Some(frame)) => self.handle_frame(frame),
            Event::Frame(None) => self.link_lost("the daemon closed the connection".to_owned()),
            Event::BackoffElapsed => {
                if let Some(redial) = &self.redial {
                    self.link = Link::Dialing((redial.dial)());
                }
            }
            Event::Dialed(Ok(transport)) => {
                self.link = Link::Up {
                    transport,
                    ready: false,
                };
                let id = self.next_request_id();
                let params = HandshakeParams {
                    protocol_version: PROTOCOL_VERSION,
                };
                match encode_request::<method::Handshake>(&Id::Number(id.into()), &params) {
                    Ok(frame) => {
                        self.pending.insert(id, Pending::Handshake);
                        self.outgoing.push_back(OutgoingText::Plain(frame));
                    }
                    Err(error) => {
                        tracing::error!(%error, "cannot encode the handshake");
                        self.stop = Some(EndReason::Disconnected);
                    }
                }
            }
            Event::Dialed(Err(error)) => {
                tracing::warn!(error = %error.0, "reconnecting to the daemon failed");
                self.schedule_redial();
            }
            Event::RetryDue { session_id, epoch } => {
                let Some(state) = self.sessions.get(&session_id) else {
                    return;
                };
                if state.epoch != epoch {
                    return;
                }
                if let SessionPhase::RetryWait { reason } = state.phase {
                    self.issue_subscribe(&session_id, reason, None);
                }
            }
        }
    }

    fn link_ready(&self) -> bool {
        matches!(self.link, Link::Up { ready: true, .. })
    }

    fn next_request_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn bump_epoch(&mut self) -> u64 {
        self.next_epoch += 1;
        self.next_epoch
    }

    fn handle_command(&mut self, command: Command) {
        match command {
            Command::Call { id, frame, reply } => {
                if self.link_ready() {
                    self.pending.insert(id, Pending::Call(reply));
                    self.outgoing.push_back(frame);
                } else {
                    self.waiting.push_back(WaitingCall { id, frame, reply });
                }
            }
            Command::Forget { id } => {
                if matches!(self.pending.get(&id), Some(Pending::Call(_))) {
                    self.pending.remove(&id);
                }
                self.waiting.retain(|call| call.id != id);
            }
            Command::Subscribe {
                session_id,
                cursor,
                reply,
            } => {
                let ready = self.link_ready();
                let epoch = self.bump_epoch();
                let state = self
                    .sessions
                    .entry(session_id.clone())
                    .or_insert_with(SessionState::new);
                state.cursor = cursor.unwrap_or(0);
                state.failures = 0;
                if ready {
                    self.issue_subscribe(&session_id, ReplayReason::Subscribe, Some(reply));
                } else {
                    state.epoch = epoch;
                    let previous = std::mem::replace(
                        &mut state.phase,
                        SessionPhase::AwaitingLink {
                            reason: ReplayReason::Subscribe,
                            reply: Some(reply),
                        },
                    );
                    // An earlier subscribe of the same session that was still waiting is superseded.
                    if let SessionPhase::AwaitingLink {
                        reply: Some(earlier),
                        ..
                    } = previous
                    {
                        let _ = earlier.send(Err(ClientError::Disconnected));
                    }
                }
            }
        }
    }

    /// Sends `events.subscribe {session_id, cursor}` from the session's cursor, or parks the session until the
    /// connection is ready.
    fn issue_subscribe(
        &mut self,
        session_id: &str,
        reason: ReplayReason,
        reply: Option<SubscribeReply>,
    ) {
        let ready = self.link_ready();
        let epoch = self.bump_epoch();
        let Some(state) = self.sessions.get_mut(session_id) else {
            return;
        };
        state.epoch = epoch;
        if !ready {
            state.phase = SessionPhase::AwaitingLink { reason, reply };
            return;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let params = EventsSubscribeParams {
            session_id: session_id.to_owned(),
            // Sequences start at 1, so "after 0" and "from the beginning" are the same request.
            cursor: (state.cursor > 0).then_some(state.cursor),
        };
        match encode_request::<method::EventsSubscribe>(&Id::Number(id.into()), &params) {
            Ok(frame) => {
                state.phase = SessionPhase::Subscribing { reason };
                self.pending.insert(
                    id,
                    Pending::Subscribe {
                        session_id: session_id.to_owned(),
                        epoch,
                        reply,
                    },
                );
                self.outgoing.push_back(OutgoingText::Plain(frame));
            }
            Err(error) => {
                // Cannot happen for a struct of a string and a number; fail the subscribe rather than panic.
                let error = ClientError::Encode(error.to_string());
                self.subscribe_failed(session_id.to_owned(), reason, reply, error);
            }
        }
    }

    fn handle_frame(&mut self, frame: MessageFrame) {
        let text = frame.into_text();
        if text.trim_start().starts_with('[') {
            // The client sends no batches, but a batch reply is valid JSON-RPC: take it member by member.
            match serde_json::from_str::<Vec<&RawValue>>(&text) {
                Ok(members) => {
                    for member in members {
                        self.handle_message(member.get());
                    }
                }
                Err(error) => tracing::debug!(%error, "ignoring an undecodable batch frame"),
            }
        } else {
            self.handle_message(&text);
        }
    }

    fn handle_message(&mut self, text: &str) {
        /// One message, with `result` and `params` kept as raw JSON so each is parsed once, into its own type.
        #[derive(Deserialize)]
        struct Incoming<'a> {
            #[serde(default)]
            id: Option<Id>,
            #[serde(default, borrow)]
            method: Option<Cow<'a, str>>,
            #[serde(default, borrow)]
            params: Option<&'a RawValue>,
            #[serde(default, borrow)]
            result: Option<&'a RawValue>,
            #[serde(default)]
            error: Option<RpcError>,
        }
        let incoming: Incoming<'_> = match serde_json::from_str(text) {
            Ok(incoming) => incoming,
            Err(error) => {
                tracing::debug!(%error, "ignoring an undecodable frame");
                return;
            }
        };
        match (incoming.method, incoming.id) {
            (Some(method), None) => self.handle_notification(&method, incoming.params),
            (Some(method), Some(_)) => {
                tracing::debug!(%method, "ignoring a request from the daemon; the client serves none")
            }
            (None, Some(Id::Number(number))) if number.as_u64().is_some() => {
                let id = number.as_u64().unwrap_or_default();
                let outcome = match (incoming.error, incoming.result) {
                    (Some(error), _) => Err(error),
                    (None, Some(result)) => Ok(result.get()),
                    // `"result": null` reads as a missing member through `Option`.
                    (None, None) => Ok("null"),
                };
                self.handle_response(id, outcome);
            }
            (None, id) => match incoming.error {
                Some(error) => {
                    tracing::warn!(
                        ?id,
                        code = error.code,
                        "the daemon reported an error it could not address"
                    )
                }
                None => tracing::debug!(?id, "ignoring a response to an id this client never used"),
            },
        }
    }

    fn handle_response(&mut self, id: u64, outcome: Result<&str, RpcError>) {
        let Some(pending) = self.pending.remove(&id) else {
            tracing::debug!(id, "ignoring a response to an unknown request id");
            return;
        };
        match pending {
            Pending::Call(reply) => {
                let _ = reply.send(outcome.map(str::to_owned).map_err(ClientError::Rpc));
            }
            Pending::Subscribe {
                session_id,
                epoch,
                reply,
            } => {
                let decoded = outcome
                    .map_err(ClientError::Rpc)
                    .and_then(decode_subscribe_result);
                self.subscribe_answered(session_id, epoch, reply, decoded);
            }
            Pending::Handshake => {
                let checked = outcome
                    .map_err(ClientError::Rpc)
                    .and_then(|raw| {
                        serde_json::from_str::<HandshakeResult>(raw)
                            .map_err(|error| ClientError::Decode(error.to_string()))
                    })
                    .and_then(|result| check_handshake_result(&result));
                self.reconnect_handshaken(checked);
            }
        }
    }

    fn subscribe_answered(
        &mut self,
        session_id: String,
        epoch: u64,
        reply: Option<SubscribeReply>,
        decoded: Result<(Vec<StoredEvent>, u64), ClientError>,
    ) {
        let current = self
            .sessions
            .get(&session_id)
            .and_then(|state| match state.phase {
                SessionPhase::Subscribing { reason } if state.epoch == epoch => Some(reason),
                _ => None,
            });
        let Some(reason) = current else {
            // Superseded by a later subscribe of the same session (or the session was forgotten): that one's
            // replay is the one that counts.
            if let Some(reply) = reply {
                let _ = reply.send(decoded.map(|(_, last_seq)| last_seq));
            }
            return;
        };
        let (events, last_seq) = match decoded {
            Ok(decoded) => decoded,
            Err(error) => return self.subscribe_failed(session_id, reason, reply, error),
        };
        // Answer first: a consumer that reads deliveries on the same task as it subscribes must not find the
        // task waiting for it to drain the replay while it is still waiting for this answer.
        if let Some(reply) = reply {
            let _ = reply.send(Ok(last_seq));
        }
        let Some(state) = self.sessions.get_mut(&session_id) else {
            return;
        };
        self.outbox.push_back(ClientDelivery::ReplayStart {
            session_id: session_id.clone(),
            after_seq: state.cursor,
            reason,
        });
        for event in events {
            if event.seq > state.cursor {
                state.cursor = event.seq;
                self.outbox.push_back(ClientDelivery::ReplayEvent(event));
            }
        }
        // Live notifications carry exactly the events after `last_seq`.
        state.cursor = state.cursor.max(last_seq);
        self.outbox.push_back(ClientDelivery::ReplayEnd {
            session_id: session_id.clone(),
            last_seq,
        });
        state.established = true;
        state.failures = 0;
        let lost_held_events = state.dropped_above.is_some_and(|seq| seq > state.cursor);
        let resubscribe = lost_held_events || state.gap_while_subscribing;
        state.dropped_above = None;
        state.gap_while_subscribing = false;
        if resubscribe {
            // Whatever is held will come back in the next replay.
            state.held.clear();
            self.issue_subscribe(&session_id, ReplayReason::Gap, None);
            return;
        }
        state.phase = SessionPhase::Live;
        for event in state.held.drain(..) {
            if event.seq > state.cursor {
                state.cursor = event.seq;
                self.outbox.push_back(ClientDelivery::Live(event));
            }
        }
    }

    /// A subscribe failed. A consumer's subscribe reports the error and forgets the session; an automatic one
    /// is retried with backoff, then given up with `RecoveryFailed`.
    fn subscribe_failed(
        &mut self,
        session_id: String,
        reason: ReplayReason,
        reply: Option<SubscribeReply>,
        error: ClientError,
    ) {
        if let Some(reply) = reply {
            self.sessions.remove(&session_id);
            let _ = reply.send(Err(error));
            return;
        }
        let Some(state) = self.sessions.get_mut(&session_id) else {
            return;
        };
        state.failures += 1;
        if state.failures > RECOVERY_RETRIES {
            tracing::warn!(%session_id, %error, "giving up re-subscribing to a session");
            self.sessions.remove(&session_id);
            self.outbox.push_back(ClientDelivery::RecoveryFailed {
                session_id,
                detail: error.to_string(),
            });
            return;
        }
        tracing::debug!(%session_id, %error, attempt = state.failures, "re-subscribing failed; retrying");
        let delay = RECOVERY_INITIAL_DELAY.saturating_mul(1 << (state.failures - 1));
        state.phase = SessionPhase::RetryWait { reason };
        let epoch = state.epoch;
        self.retries.push(Box::pin(async move {
            tokio::time::sleep(delay).await;
            (session_id, epoch)
        }));
    }

    fn handle_notification(&mut self, method: &str, params: Option<&RawValue>) {
        let params = params.map_or("{}", RawValue::get);
        match method {
            notification::EventsSubscription::NAME => self.subscription_notice(params),
            notification::RuntimeChanged::NAME => {
                match serde_json::from_str::<RuntimeChangedParams>(params) {
                    Ok(changed) => self
                        .outbox
                        .push_back(ClientDelivery::RuntimeChanged(changed)),
                    Err(error) => tracing::warn!(%error, "ignoring an undecodable runtime.changed"),
                }
            }
            notification::ToolOutputDelta::NAME => {
                self.deliver_value(method, params, ClientDelivery::ToolOutputDelta)
            }
            notification::ToolOutputSnapshot::NAME => {
                self.deliver_value(method, params, ClientDelivery::ToolOutputSnapshot)
            }
            notification::ToolOutputGap::NAME => {
                self.deliver_value(method, params, ClientDelivery::ToolOutputGap)
            }
            notification::EventsPlugin::NAME => {
                self.deliver_value(method, params, ClientDelivery::PluginEvent)
            }
            other => tracing::debug!(method = %other, "ignoring an unknown notification"),
        }
    }

    fn deliver_value(&mut self, method: &str, params: &str, wrap: fn(Value) -> ClientDelivery) {
        match serde_json::from_str::<Value>(params) {
            Ok(value) => self.outbox.push_back(wrap(value)),
            Err(error) => tracing::warn!(%method, %error, "ignoring an undecodable notification"),
        }
    }

    fn subscription_notice(&mut self, params: &str) {
        #[derive(Deserialize)]
        struct Notice<'a> {
            #[serde(rename = "type", borrow)]
            kind: Cow<'a, str>,
            #[serde(borrow)]
            session_id: Cow<'a, str>,
            #[serde(default, borrow)]
            event: Option<&'a RawValue>,
            #[serde(default)]
            last_delivered_seq: Option<u64>,
        }
        let notice: Notice<'_> = match serde_json::from_str(params) {
            Ok(notice) => notice,
            Err(error) => {
                tracing::warn!(%error, "ignoring an undecodable events.subscription");
                return;
            }
        };
        let session_id: &str = &notice.session_id;
        if !self.sessions.contains_key(session_id) {
            tracing::debug!(%session_id, "ignoring a notification for a session this client does not follow");
            return;
        }
        match (&*notice.kind, notice.event) {
            ("event", Some(event)) => match serde_json::from_str::<StoredEvent>(event.get()) {
                Ok(event) => self.live_event(session_id, event),
                Err(error) => tracing::warn!(%session_id, %error, "skipping an undecodable event"),
            },
            ("gap", _) => self.gap(session_id, notice.last_delivered_seq),
            (kind, _) => tracing::debug!(%kind, "ignoring an unknown events.subscription type"),
        }
    }

    fn live_event(&mut self, session_id: &str, event: StoredEvent) {
        let Some(state) = self.sessions.get_mut(session_id) else {
            return;
        };
        if event.seq <= state.cursor {
            tracing::debug!(%session_id, seq = event.seq, "dropping a duplicate event");
            return;
        }
        if let SessionPhase::Live = state.phase {
            state.cursor = event.seq;
            self.outbox.push_back(ClientDelivery::Live(event));
        } else if state.held.len() < MAX_HELD_LIVE_EVENTS {
            state.held.push_back(event);
        } else {
            state.dropped_above = Some(state.dropped_above.unwrap_or(0).max(event.seq));
        }
    }

    fn gap(&mut self, session_id: &str, last_delivered_seq: Option<u64>) {
        let Some(state) = self.sessions.get_mut(session_id) else {
            return;
        };
        tracing::debug!(%session_id, ?last_delivered_seq, cursor = state.cursor, "subscription gap");
        match state.phase {
            SessionPhase::Live => self.issue_subscribe(session_id, ReplayReason::Gap, None),
            SessionPhase::Subscribing { .. } => state.gap_while_subscribing = true,
            // A subscribe from the cursor is already scheduled.
            SessionPhase::RetryWait { .. } | SessionPhase::AwaitingLink { .. } => {}
        }
    }

    /// The transport failed or was closed by the daemon.
    fn link_lost(&mut self, detail: String) {
        let was_ready = self.link_ready();
        // Requests written on the lost connection will never be answered on a new one.
        self.outgoing.clear();
        let reconnecting = self.redial.is_some();
        let epoch = self.bump_epoch();
        for (_, pending) in std::mem::take(&mut self.pending) {
            match pending {
                Pending::Call(reply) => {
                    let _ = reply.send(Err(ClientError::Disconnected));
                }
                Pending::Subscribe {
                    session_id,
                    reply: Some(reply),
                    ..
                } => {
                    let _ = reply.send(Err(ClientError::Disconnected));
                    if self
                        .sessions
                        .get(&session_id)
                        .is_some_and(|state| !state.established)
                    {
                        self.sessions.remove(&session_id);
                    }
                }
                Pending::Subscribe { reply: None, .. } | Pending::Handshake => {}
            }
        }
        if !reconnecting {
            tracing::debug!(%detail, "the connection ended");
            self.stop = Some(EndReason::Disconnected);
            return;
        }
        for state in self.sessions.values_mut() {
            state.epoch = epoch;
            // The replay from the cursor on the new connection covers everything held back.
            state.held.clear();
            state.dropped_above = None;
            state.gap_while_subscribing = false;
            if !matches!(state.phase, SessionPhase::AwaitingLink { .. }) {
                state.phase = SessionPhase::AwaitingLink {
                    reason: ReplayReason::Reconnect,
                    reply: None,
                };
            }
        }
        if was_ready {
            tracing::info!(%detail, "lost the connection to the daemon; reconnecting");
            self.outbox
                .push_back(ClientDelivery::Disconnected { detail });
            if let Some(redial) = &mut self.redial {
                redial.attempt = 0;
            }
        }
        self.schedule_redial();
    }

    fn schedule_redial(&mut self) {
        let Some(redial) = &mut self.redial else {
            self.stop = Some(EndReason::Disconnected);
            return;
        };
        if redial
            .policy
            .max_attempts
            .is_some_and(|max| redial.attempt >= max)
        {
            tracing::warn!(
                attempts = redial.attempt,
                "giving up reconnecting to the daemon"
            );
            self.stop = Some(EndReason::Disconnected);
            return;
        }
        let delay = redial.policy.delay(redial.attempt);
        redial.attempt += 1;
        self.link = Link::Backoff(Box::pin(tokio::time::sleep(delay)));
    }

    /// The handshake on a re-established connection was answered.
    fn reconnect_handshaken(&mut self, checked: Result<(), ClientError>) {
        if let Err(error) = checked {
            tracing::warn!(%error, "the daemon refused the handshake after reconnecting");
            self.outgoing.clear();
            self.schedule_redial();
            return;
        }
        if let Link::Up { ready, .. } = &mut self.link {
            *ready = true;
        }
        if let Some(redial) = &mut self.redial {
            redial.attempt = 0;
        }
        self.outbox.push_back(ClientDelivery::Reconnected);
        let mut parked: Vec<(String, ReplayReason, Option<SubscribeReply>)> = Vec::new();
        for (session_id, state) in &mut self.sessions {
            if let SessionPhase::AwaitingLink { reason, reply } = &mut state.phase {
                parked.push((session_id.clone(), *reason, reply.take()));
            }
        }
        for (session_id, reason, reply) in parked {
            self.issue_subscribe(&session_id, reason, reply);
        }
        // Calls made while disconnected go out after the re-subscribes.
        while let Some(call) = self.waiting.pop_front() {
            self.pending.insert(call.id, Pending::Call(call.reply));
            self.outgoing.push_back(call.frame);
        }
    }

    async fn flush_outgoing(&mut self) {
        while let Some(frame) = self.outgoing.pop_front() {
            let Link::Up { transport, .. } = &mut self.link else {
                self.outgoing.clear();
                return;
            };
            let sent = match frame {
                OutgoingText::Plain(text) => transport.send(MessageFrame::Text(text)).await,
                OutgoingText::Secret(secret) => {
                    let sent = transport
                        .send(MessageFrame::Text(secret.as_str().to_owned()))
                        .await;
                    // The transport has its copy now; ours is wiped here.
                    drop(secret);
                    sent
                }
            };
            if let Err(error) = sent {
                self.link_lost(error.0);
                return;
            }
        }
    }

    /// Hands queued deliveries to the consumer, waiting for room (see the module docs on back-pressure) but
    /// never past a `close`.
    async fn flush_outbox(&mut self) {
        while let Some(delivery) = self.outbox.pop_front() {
            let Some(sender) = &self.deliveries else {
                self.outbox.clear();
                return;
            };
            let delivery = match sender.try_send(delivery) {
                Ok(()) => continue,
                Err(mpsc::error::TrySendError::Full(delivery)) => delivery,
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    self.consumer_gone();
                    return;
                }
            };
            let consumer_present = tokio::select! {
                sent = sender.send(delivery) => sent.is_ok(),
                _ = self.close.wait_for(|closed| *closed) => {
                    self.stop = Some(EndReason::Closed);
                    return;
                }
            };
            if !consumer_present {
                self.consumer_gone();
                return;
            }
        }
    }

    /// The consumer dropped [`Deliveries`]: calls keep working, deliveries are discarded.
    fn consumer_gone(&mut self) {
        self.deliveries = None;
        self.outbox.clear();
    }

    fn finish(mut self) {
        let reason = self.stop.unwrap_or(EndReason::Disconnected);
        // Published before the replies are failed, so that a caller that finds its reply dropped reads it.
        *self.end.lock() = Some(reason);
        for (_, pending) in self.pending.drain() {
            match pending {
                Pending::Call(reply) => {
                    let _ = reply.send(Err(reason.error()));
                }
                Pending::Subscribe {
                    reply: Some(reply), ..
                } => {
                    let _ = reply.send(Err(reason.error()));
                }
                Pending::Subscribe { reply: None, .. } | Pending::Handshake => {}
            }
        }
        for call in self.waiting.drain(..) {
            let _ = call.reply.send(Err(reason.error()));
        }
        for state in self.sessions.values_mut() {
            if let SessionPhase::AwaitingLink {
                reply: Some(reply), ..
            } = std::mem::replace(&mut state.phase, SessionPhase::Live)
            {
                let _ = reply.send(Err(reason.error()));
            }
        }
        // Dropping the task drops the command receiver, which is what `Client::close` waits for, and the
        // delivery sender, which ends the consumer's stream.
    }
}

async fn link_event<T: Transport>(link: &mut Link<T>) -> Event<T> {
    match link {
        Link::Up { transport, .. } => Event::Frame(transport.recv().await),
        Link::Backoff(sleep) => {
            sleep.as_mut().await;
            Event::BackoffElapsed
        }
        Link::Dialing(dial) => Event::Dialed(dial.as_mut().await),
    }
}

/// Decodes an `events.subscribe` result straight from its raw text: each event is parsed once, into a
/// [`StoredEvent`], without the intermediate `Value` that decoding through `EventJson` would build.
fn decode_subscribe_result(raw: &str) -> Result<(Vec<StoredEvent>, u64), ClientError> {
    #[derive(Deserialize)]
    struct Reply<'a> {
        #[serde(borrow)]
        events: Vec<&'a RawValue>,
        last_seq: u64,
    }
    let reply: Reply<'_> = serde_json::from_str(raw).map_err(|error| {
        ClientError::Decode(format!("the result of `events.subscribe`: {error}"))
    })?;
    let mut events = Vec::with_capacity(reply.events.len());
    for event in reply.events {
        match serde_json::from_str::<StoredEvent>(event.get()) {
            Ok(event) => events.push(event),
            // One unreadable record must not cost the whole session; live events are treated the same way.
            Err(error) => tracing::warn!(%error, "skipping an undecodable event in a replay"),
        }
    }
    Ok((events, reply.last_seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_requests_are_encoded_like_plain_ones_in_an_exact_buffer() {
        let params = crate::types::common::SessionIdParams {
            session_id: "s-1".to_owned(),
        };
        let secret = encode_secret_request::<method::SessionGet>(7, &params).unwrap();
        let plain = encode_request::<method::SessionGet>(&Id::Number(7.into()), &params).unwrap();
        assert_eq!(secret.as_str(), plain);
        assert_eq!(secret.capacity(), secret.len());
    }

    #[test]
    fn reconnect_delays_double_up_to_the_maximum() {
        let policy = ReconnectPolicy::default();
        assert_eq!(policy.delay(0), Duration::from_millis(200));
        assert_eq!(policy.delay(1), Duration::from_millis(400));
        assert_eq!(policy.delay(5), Duration::from_secs(5));
        assert_eq!(policy.delay(400), Duration::from_secs(5));
    }

    #[test]
    fn rpc_errors_display_their_detail() {
        let error = ClientError::Rpc(RpcError::engine("session_not_found", "no session x", &[]));
        assert_eq!(error.to_string(), "Engine error (-32000): no session x");
    }
}
