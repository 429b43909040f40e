//! `ConnectionActor`: one per accepted WebSocket, from the upgrade to the close.
//!
//! It owns the socket's protocol session ([`ServerConnection`]), the [`SocketWriter`] it sends control frames
//! with, the keepalive clock and its entry in the gateway's [`ConnectionRegistry`]. Who talks to it: actix feeds it the
//! socket's inbound messages as a stream; the gateway's graceful stop and a console sign-out send [`GoingAway`]. The engine never
//! addresses it: replies and notifications reach the socket through the protocol session's outbound queue,
//! which the response body ([`SocketBody`](crate::socket_body::SocketBody)) drains when the HTTP dispatcher polls it.
//!
//! - Inbound text frames are handed to the protocol session at once and processed concurrently: each is polled
//!   once in the handler, and one that has to wait (for its session, the disk, room in the queue) goes on in the
//!   connection's [`FrameTasks`], one task for all of them, so that replies ready together are queued together;
//!   admission (handshake gating, the in-flight limit) is still decided in arrival order, synchronously,
//!   inside `handle_frame`. The frames' work is detached from the actor on purpose: a disconnect must not cancel an
//!   engine operation halfway; its reply is simply dropped.
//! - The response body takes frames from the outbound queue in queue order whenever the socket has room
//!   (`socket_body`), so a slow socket pushes back on the queue (which is what turns a slow subscriber into a gap).
//!   When the body is dropped (the socket is gone) the actor stops.
//! - However the actor ends, [`Teardown`] closes the outbound stream (engine-side sinks report closed) and then
//!   tells the engine the connection is gone, exactly once.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use actix_ws::{AggregatedMessage, AggregatedMessageStream, CloseCode, CloseReason, ProtocolError};
use tracing::{debug, info};
use troupe_protocol::server::{OutboundCloser, ServerConnection, ServerLimits, ServerProtocol};

use crate::connection_registry::{ConnectionRegistry, GoingAway};
use crate::console_book::SessionKey;
use crate::frame_tasks::{self, FrameTasks};
use crate::read_gate::ReadGate;
use crate::socket_body::{SocketBody, SocketWriter};

/// Frame tasks allowed beyond `max_in_flight` before the socket stops being read. They are the frames being
/// refused with -32003 whose replies wait for room in the outbound queue.
const READ_GATE_SLACK: usize = 64;

/// The web console's session a connection was authorized by, and when that session ends.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConsoleGrant {
    pub(crate) session: SessionKey,
    pub(crate) expires_at: std::time::SystemTime,
}

/// Ping cadence and patience.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Keepalive {
    pub(crate) ping_interval: Duration,
    pub(crate) pong_timeout: Duration,
}

/// Everything a new connection needs, gathered by the upgrade handler.
pub(crate) struct ConnectionSetup<S> {
    pub(crate) engine: Arc<S>,
    pub(crate) limits: ServerLimits,
    /// The largest inbound frame; also the bytes of frames being answered at which reading pauses.
    pub(crate) max_frame_bytes: usize,
    pub(crate) inbound: AggregatedMessageStream,
    /// The client's address, recorded once in the connection's span.
    pub(crate) peer: String,
    pub(crate) keepalive: Keepalive,
    pub(crate) registry: Arc<ConnectionRegistry>,
    /// Where the protocol session reports handshakes, requests, drops and gaps (the daemon's metrics).
    pub(crate) observer: troupe_protocol::server::SharedObserver,
    /// Set when the console's cookie authorized the upgrade: the connection ends with that session.
    pub(crate) console: Option<ConsoleGrant>,
}

pub(crate) struct ConnectionActor<S: ServerProtocol> {
    /// The protocol session: decodes frames, gates on the handshake, dispatches to the engine, queues replies.
    connection: ServerConnection<S>,
    /// Cached `connection.connection_id()`, for the registry.
    connection_id: u64,
    /// The end-of-connection duty; moved into the watch on the socket's body when the actor starts.
    teardown: Option<Teardown<S>>,
    /// Resolves when the response body is dropped: the socket is gone. Taken when the actor starts.
    body_gone: Option<futures::channel::oneshot::Receiver<()>>,
    /// Control frames to the socket: pings, pongs, the close frame.
    socket: SocketWriter,
    /// `connection{connection_id, client}`: entered by the actor's handlers and carried by every frame task, so
    /// each log line emitted for this socket (a request's `request` span nests inside it) names the connection
    /// and the client's address; the lines themselves do not repeat them.
    span: tracing::Span,
    keepalive: Keepalive,
    /// When the client last sent anything. Any frame proves liveness, not only pongs.
    last_heard: Instant,
    /// Set once a close frame has been decided on; nothing else is read or written after it.
    closing: bool,
    registry: Arc<ConnectionRegistry>,
    /// The console session that authorized this connection, if one did.
    console: Option<ConsoleGrant>,
    /// Counts the frames being answered and pauses the inbound stream when too many are pending.
    read_gate: Rc<ReadGate>,
    /// The frames that have to wait, driven together.
    waiting: FrameTasks,
    connected_at: Instant,
    frames_in: u64,
    /// Counted by the response body, read when the actor stops.
    frames_out: Rc<Cell<u64>>,
}

impl<S: ServerProtocol> ConnectionActor<S> {
    /// Creates the protocol session (which tells the engine `connected`), starts the actor on the current
    /// worker's arbiter, and returns the response body that writes the socket.
    pub(crate) fn launch(setup: ConnectionSetup<S>) -> SocketBody {
        // What `Actor::create` does, with the context at hand here so that the body comes back beside the actor.
        let mut ctx = Context::new();
        let (connection, outbound) =
            ServerConnection::with_observer(setup.engine.clone(), setup.limits, setup.observer);
        let closer = outbound.closer();
        let frames_out = Rc::new(Cell::new(0));
        let (socket, socket_body, body_gone) = crate::socket_body::socket(outbound, frames_out.clone());
        if setup.console.is_some() {
            connection.set_authority(troupe_protocol::server::Authority::BrowserSession);
        }
        let connection_id = connection.connection_id();
        let read_gate =
            ReadGate::new(setup.limits.max_in_flight.saturating_add(READ_GATE_SLACK), setup.max_frame_bytes);
        ctx.add_stream(read_gate.gate(setup.inbound));
        let span = tracing::info_span!("connection", connection_id, client = %setup.peer);
        ctx.run(ConnectionActor {
            connection,
            connection_id,
            teardown: Some(Teardown { closer, engine: setup.engine, connection_id }),
            body_gone: Some(body_gone),
            socket,
            span,
            keepalive: setup.keepalive,
            last_heard: Instant::now(),
            closing: false,
            registry: setup.registry,
            console: setup.console,
            read_gate,
            waiting: FrameTasks::default(),
            connected_at: Instant::now(),
            frames_in: 0,
            frames_out,
        });
        socket_body
    }

    /// Stops the actor when the response body is dropped (the socket is gone). The teardown goes with this
    /// watch: it runs when the body is gone, or with the actor when the actor stops first.
    fn watch_socket(&mut self, ctx: &mut Context<Self>) {
        let (Some(teardown), Some(body_gone)) = (self.teardown.take(), self.body_gone.take()) else {
            return;
        };
        let watch = async move {
            let _ = body_gone.await;
            drop(teardown);
        };
        ctx.spawn(watch.into_actor(self).map(|(), actor, ctx| {
            // Unless a close is already under way (which stops the actor itself), there is nothing left to do.
            if !actor.closing {
                // The engine has just been told the connection is gone: read nothing more.
                actor.closing = true;
                ctx.stop();
            }
        }));
    }

    /// Pings, and gives up on a client that has been silent for `pong_timeout`.
    fn start_keepalive(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(self.keepalive.ping_interval, |actor, ctx| {
            if actor.closing {
                return;
            }
            if actor.last_heard.elapsed() >= actor.keepalive.pong_timeout {
                let _entered = actor.span.clone().entered();
                info!("closing a WebSocket that did not answer pings");
                actor.close_and_stop(ctx, CloseCode::Policy, "no pong within the keepalive timeout");
                return;
            }
            // A console session's end is checked on the same clock: the connection ends within a ping interval.
            if actor.console.is_some_and(|grant| grant.expires_at <= std::time::SystemTime::now()) {
                let _entered = actor.span.clone().entered();
                info!("closing a console WebSocket whose sign-in expired");
                actor.close_and_stop(ctx, CloseCode::Policy, "the console sign-in expired");
                return;
            }
            actor.socket.ping();
        });
    }

    /// Queues the close frame, the socket's last, then stops.
    fn close_and_stop(&mut self, ctx: &mut Context<Self>, code: CloseCode, description: &str) {
        if !std::mem::replace(&mut self.closing, true) {
            debug!(code = u16::from(code), "closing the WebSocket");
            self.socket.close(CloseReason { code, description: Some(description.to_owned()) });
        }
        ctx.stop();
    }
}

impl<S: ServerProtocol> Actor for ConnectionActor<S> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let _entered = self.span.clone().entered();
        // At debug: every CLI call is a connection, and an operator's log is not a list of them.
        debug!("WebSocket connected");
        self.watch_socket(ctx);
        let console_session = self.console.map(|grant| grant.session);
        if !self.registry.register(self.connection_id, ctx.address().recipient(), console_session) {
            // The gateway began stopping between the upgrade and now.
            self.close_and_stop(ctx, CloseCode::Away, "the daemon is shutting down");
            return;
        }
        self.start_keepalive(ctx);
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        let _entered = self.span.clone().entered();
        self.registry.unregister(self.connection_id);
        debug!(duration_ms = self.connected_at.elapsed().as_millis() as u64, "WebSocket disconnected");
        debug!(
            frames_in = self.frames_in,
            frames_out = self.frames_out.get(),
            frames_still_processing = self.read_gate.outstanding(),
            "WebSocket frame counts"
        );
    }
}

impl<S: ServerProtocol> Handler<GoingAway> for ConnectionActor<S> {
    type Result = ();

    fn handle(&mut self, message: GoingAway, ctx: &mut Self::Context) -> Self::Result {
        let _entered = self.span.clone().entered();
        let (code, description) = match message {
            GoingAway::DaemonStopping => (CloseCode::Away, "the daemon is shutting down"),
            GoingAway::SignedOut => (CloseCode::Policy, "signed out of the console"),
        };
        self.close_and_stop(ctx, code, description);
    }
}

impl<S: ServerProtocol> StreamHandler<Result<AggregatedMessage, ProtocolError>> for ConnectionActor<S> {
    fn handle(&mut self, item: Result<AggregatedMessage, ProtocolError>, ctx: &mut Self::Context) {
        if self.closing {
            return;
        }
        let _entered = self.span.clone().entered();
        self.last_heard = Instant::now();
        match item {
            Ok(AggregatedMessage::Text(text)) => {
                self.frames_in += 1;
                // Admission happens inside `handle_frame`, now, in arrival order. The work is polled once here:
                // most frames (a read, a refusal) are answered without waiting, and need no task of their own.
                let work = frame_tasks::frame_work(&self.connection, &self.read_gate, &self.span, &text);
                let mut work = frame_tasks::contained(work);
                let mut inline = std::task::Context::from_waker(std::task::Waker::noop());
                if std::pin::Pin::new(&mut work).poll(&mut inline).is_pending() {
                    // Its next poll, by the frame tasks' driver, registers a real waker wherever this one left the
                    // no-op.
                    self.waiting.push(work);
                }
            }
            Ok(AggregatedMessage::Binary(_)) => {
                self.close_and_stop(
                    ctx,
                    CloseCode::Unsupported,
                    "binary frames are not part of the troupe protocol; send JSON as text frames",
                );
            }
            Ok(AggregatedMessage::Ping(payload)) => {
                self.socket.pong(payload);
            }
            Ok(AggregatedMessage::Pong(_)) => {}
            Ok(AggregatedMessage::Close(reason)) => {
                debug!(code = reason.as_ref().map(|reason| u16::from(reason.code)), "the client closed the WebSocket");
                // Answer the close handshake, as RFC 6455 asks, before letting go.
                self.close_and_stop(ctx, CloseCode::Normal, "bye");
            }
            Err(error) if is_frame_too_big(&error) => {
                debug!("a frame exceeded max_frame_bytes");
                self.close_and_stop(ctx, CloseCode::Size, "the frame exceeds max_frame_bytes");
            }
            Err(ProtocolError::Io(error)) => {
                // The transport itself failed; there is nobody left to send a close frame to.
                debug!(%error, "the WebSocket transport failed");
                ctx.stop();
            }
            Err(error) => {
                debug!(%error, "the client broke the WebSocket protocol");
                self.close_and_stop(ctx, CloseCode::Protocol, "invalid WebSocket frame");
            }
        }
    }

    fn finished(&mut self, ctx: &mut Self::Context) {
        // The client's half of the socket ended.
        if !self.closing {
            ctx.stop();
        }
    }
}

/// Whether an inbound error means "too big": the codec's own `Overflow`, or the early check of
/// [`FrameSizeGuard`](crate::frame_size_guard::FrameSizeGuard), which actix-ws hands over wrapped in an I/O
/// error.
fn is_frame_too_big(error: &ProtocolError) -> bool {
    match error {
        ProtocolError::Overflow => true,
        ProtocolError::Io(io_error) => io_error
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<actix_web::error::PayloadError>())
            .is_some_and(|payload_error| matches!(payload_error, actix_web::error::PayloadError::Overflow)),
        _ => false,
    }
}

/// The end of a connection, run when dropped: first the outbound stream is marked closed, so that every sink the
/// engine holds for this connection reports closed, then the engine is told. Living in a `Drop` makes it run
/// exactly once however the actor ends, including when its arbiter shuts down.
struct Teardown<S: ServerProtocol> {
    closer: OutboundCloser,
    engine: Arc<S>,
    connection_id: u64,
}

impl<S: ServerProtocol> Drop for Teardown<S> {
    fn drop(&mut self) {
        self.closer.close();
        self.engine.disconnected(self.connection_id);
    }
}
