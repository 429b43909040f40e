//! The shared client: one implementation of the client side of protocol 20, used by the CLI (every client
//! command, through the [`ClientProtocol`] trait), the end-to-end tests and the benchmarks.
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
//! The delivery stream is bounded ([`ClientOptions::delivery_buffer`]), and a call never waits for it: a consumer
//! may block on a call while it is not reading [`Deliveries`]. What the stream cannot take waits inside the task
//! in order, and while anything waits (the stream is *congested*) the task reads the socket only when an answer
//! is awaited, so the daemon's bounded queue holds back what follows (a replay simply waits there). What is read
//! meanwhile is not queued without bound:
//!
//! - a live event of a subscribed session marks the session *behind* at its cursor and is dropped, as are its
//!   further events; once the consumer has caught up the task subscribes again from the cursor, and the missing
//!   events come as a replay with [`ReplayReason::Gap`], exactly as after a daemon `gap`: every event once and in
//!   order. Automatic re-subscribes (after a gap or a reconnect) likewise wait until the consumer has caught up;
//! - tool output is dropped, and the consumer gets a synthesized [`ClientDelivery::ToolOutputGap`] for each
//!   stream that lost bytes (its `next_offset` past the last byte dropped) before any later output of it;
//! - of the `runtime.changed` notices only the newest is kept (each carries a whole snapshot);
//! - plugin events are dropped and counted in one [`ClientDelivery::PluginEventsDropped`].
//!
//! So the memory a slow consumer costs is one replay per session (which the daemon bounds in bytes), a few
//! notices, and a fixed amount of state per session and per output stream, never an amount per missed event.
//!
//! # Ordering
//!
//! The daemon never sends a subscription's first live event before its `events.subscribe` reply, and sends the
//! handshake reply before the first `runtime.changed` (see [`crate::server`]). The task keeps that order: it
//! delivers a reply's replay before any live event of the same session that was read after it.
//!
//! # Layout
//!
//! The modules form layers; each imports only modules of the layers below it (`cargo test --test tidy` fails on
//! any import cycle between them):
//!
//! 1. this file: the public [`Client`] handle, its [`ClientOptions`] and [`ClientProtocol`] for it. A handle
//!    only sends `Command`s to its task.
//! 2. `task`: the connection task. It owns the parts below, routes each event, command and message to them, and
//!    decides what crosses between them (what a lost, regained or refused link means for calls and
//!    subscriptions, what an answer means, what happens when the task stops).
//! 3. the parts the task uses, each owning its state and knowing nothing of the task: `subscriptions`
//!    (cursors, replays and gap recovery; it sends its requests through `calls` and delivers through
//!    `outbox`), `calls` (request ids and the answers they await), `outbox` (the hand-over to the consumer and
//!    what a congested stream drops; it takes tool output as `incoming` reads it), `reconnect` (the link and
//!    dialing again) and `incoming` (reading the daemon's frames into messages).
//! 4. vocabulary, importing nothing above: `delivery` (what a consumer reads: [`ClientDelivery`],
//!    [`Deliveries`]), `command` (what a handle asks of its task), `error` ([`ClientError`] and why the task
//!    stopped), `handshake` (judging the handshake's answer) and `secrets` (the frames to write, wiped when they
//!    carry secrets).

mod calls;
mod command;
mod delivery;
mod error;
mod handshake;
mod incoming;
mod outbox;
mod reconnect;
mod secrets;
mod subscriptions;
mod task;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot, watch};
use zeroize::Zeroizing;

use crate::jsonrpc::Method;
use crate::methods::method;
use crate::transport::{Transport, WebSocketTransport};
use crate::types::runtime::{ClientInfo, HandshakeParams, PROTOCOL_VERSION};

pub use crate::methods::ClientProtocol;
pub use delivery::{ClientDelivery, Deliveries, DeliveryStream, ReplayReason};
pub use error::ClientError;
pub use reconnect::ReconnectPolicy;

use command::Command;
use error::EndReason;
use handshake::{check_handshake_result, params_unknown_to_the_daemon};
use reconnect::{Dialer, Redial};
use secrets::OutgoingText;
use task::ConnectionTask;

/// Options of a [`Client`].
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// How long a call waits for its answer, including any time spent waiting for a reconnect.
    pub request_timeout: Duration,
    /// Dial again after the connection drops. Only [`Client::connect_websocket`] can; [`Client::connect`]
    /// ignores it, because a generic transport cannot be opened a second time.
    pub reconnect: Option<ReconnectPolicy>,
    /// Capacity of the delivery stream (see the module docs on back-pressure). A consumer that falls further
    /// behind than this gets its events again as a replay rather than queued without bound.
    pub delivery_buffer: usize,
    /// For a `wss://` URL ([`Client::connect_websocket`]): a PEM file of certificate authorities trusted besides
    /// the built-in and system roots, such as the self-signed certificate of a proxy in front of the daemon.
    pub ca_cert: Option<PathBuf>,
    /// Sent in every handshake (troupe extension): how this program is named in other clients' presence lists
    /// (`session.presence`). `None` sends none, as a strict protocol-20 client does.
    pub client_info: Option<ClientInfo>,
}

impl ClientOptions {
    /// The handshake these options send.
    fn handshake(&self) -> HandshakeParams {
        HandshakeParams { protocol_version: PROTOCOL_VERSION, client_info: self.client_info.clone() }
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            request_timeout: Duration::from_secs(30),
            reconnect: None,
            delivery_buffer: 4096,
            ca_cert: None,
            client_info: None,
        }
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
        self.end.lock().map_or(ClientError::Disconnected, EndReason::error)
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
        let handshake = Arc::new(Mutex::new(options.handshake()));
        Self::start(transport, None, options, handshake).await
    }

    /// Connects over WebSocket (`ws://host:port/ws`, or `wss://` trusting `options.ca_cert` too) with a bearer
    /// token; with `options.reconnect` set it reconnects by itself after the connection drops.
    pub async fn connect_websocket(
        url: &str,
        token: &str,
        options: ClientOptions,
    ) -> Result<(Client, Deliveries), ClientError> {
        let transport = WebSocketTransport::connect_trusting(url, token, options.ca_cert.as_deref()).await?;
        let handshake = Arc::new(Mutex::new(options.handshake()));
        let redial = options.reconnect.clone().map(|policy| {
            let url: Arc<str> = Arc::from(url);
            // Kept for dialing again; wiped when the connection task ends.
            let token = Arc::new(Zeroizing::new(token.to_owned()));
            let ca_cert: Option<Arc<std::path::Path>> = options.ca_cert.as_deref().map(Arc::from);
            let dial: Dialer<WebSocketTransport> = Box::new(move || {
                let url = url.clone();
                let token = token.clone();
                let ca_cert = ca_cert.clone();
                Box::pin(async move { WebSocketTransport::connect_trusting(&url, &token, ca_cert.as_deref()).await })
            });
            Redial::new(dial, policy, handshake.clone())
        });
        Self::start(transport, redial, options, handshake).await
    }

    async fn start<T: Transport>(
        transport: T,
        redial: Option<Redial<T>>,
        options: ClientOptions,
        handshake: Arc<Mutex<HandshakeParams>>,
    ) -> Result<(Client, Deliveries), ClientError> {
        let (commands, command_receiver) = mpsc::unbounded_channel();
        let (delivery_sender, delivery_receiver) = mpsc::channel(options.delivery_buffer.max(1));
        let (close, close_receiver) = watch::channel(false);
        let next_id = Arc::new(AtomicU64::new(1));
        let end = Arc::new(Mutex::new(None));
        let task = ConnectionTask::new(
            transport,
            redial,
            command_receiver,
            close_receiver,
            next_id.clone(),
            end.clone(),
            delivery_sender,
        );
        tokio::spawn(task.run());
        let client = Client {
            shared: Arc::new(ClientShared { commands, next_id, request_timeout: options.request_timeout, close, end }),
        };
        let params = handshake.lock().clone();
        let mut answer = client.call::<method::Handshake>(params).await;
        if params_unknown_to_the_daemon(&answer, "client_info") {
            // A daemon from before the `client_info` extension refuses the field as unknown (and stays
            // un-handshaken): such a daemon still serves this client, which is only not named in presence lists.
            // Reconnects then leave it out too.
            tracing::debug!("the daemon does not know `client_info`; handshaking without it");
            let plain = HandshakeParams { protocol_version: PROTOCOL_VERSION, client_info: None };
            *handshake.lock() = plain.clone();
            answer = client.call::<method::Handshake>(plain).await;
        }
        let handshake = answer.and_then(|result| check_handshake_result(&result));
        match handshake {
            Ok(()) => Ok((client, Deliveries::new(delivery_receiver))),
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
        let mut forget = ForgetOnDrop { id, commands: &self.shared.commands, armed: true };
        let answer =
            tokio::time::timeout(self.shared.request_timeout, answer).await.map_err(|_| ClientError::Timeout)?;
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
    pub async fn subscribe(&self, session_id: &str, cursor: Option<u64>) -> Result<u64, ClientError> {
        let (reply, answer) = oneshot::channel();
        self.send_command(Command::Subscribe { session_id: session_id.to_owned(), cursor, reply })?;
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
        self.shared.commands.send(command).map_err(|_| self.shared.ended())
    }
}

/// [`Client`] as the [`ClientProtocol`] of the reference: the typed calls come from the method table
/// (`methods.rs`) and rest on these three.
impl ClientProtocol for Client {
    type Deliveries = Deliveries;

    fn call<M: Method>(&self, params: M::Params) -> impl Future<Output = Result<M::Result, ClientError>> + Send {
        Client::call::<M>(self, params)
    }

    fn subscribe(
        &self,
        session_id: &str,
        cursor: Option<u64>,
    ) -> impl Future<Output = Result<u64, ClientError>> + Send {
        Client::subscribe(self, session_id, cursor)
    }

    fn close(&self) -> impl Future<Output = ()> + Send {
        Client::close(self)
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
