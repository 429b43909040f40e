//! The server side of a protocol session, independent of how frames travel.
//!
//! A [`ServerConnection`] takes inbound frames, enforces the handshake, validates the JSON-RPC envelope, limits
//! requests in flight, dispatches to a [`ServerProtocol`] implementation and queues every outbound frame on one
//! bounded queue, read through an [`OutboundStream`]. [`serve`] drives it over any [`Transport`]; the gateway
//! drives it from its per-socket actor.
//!
//! One concern per file:
//! - `connection`: frames in, admission (handshake gate, in-flight limit), dispatch, replies out.
//! - `outbound`: the outbound queue, bounded in frames and bytes, with its side list of frames that must not be
//!   lost, and the [`OutboundStream`] the writer drains.
//! - `budget`: the per-connection reply budget in bytes, shared by replies being built and replays being read.
//! - `context`: [`ServerContext`], what one request may open, and its reply group.
//! - `forward`: [`RequestForwarder`], sending a request refused because another cluster node hosts its session on
//!   to that node, and the methods never forwarded.
//! - `handle`: [`ConnectionHandle`], what the engine may keep about a connection (its `client_info`, whether it
//!   still follows a session).
//! - `channel`: the gated notification channel behind every sink: gating, backpressure, gaps.
//! - `sink`: the public faces of a channel, [`EventSink`] and [`ConnectionNotifier`].
//! - `observer`: [`ServerObserver`], what the layer reports as it works (the daemon's metrics).
//!
//! # Ordering of replies and notifications
//!
//! A handler may open notification channels ([`EventSink`], [`ConnectionNotifier`]) or schedule a notification
//! ([`ServerContext::notify_after_reply`]). All of them are *gated*: nothing they carry is queued before the
//! reply of the request that created them. So a client always sees the `events.subscribe` reply before the
//! first event notification of that subscription (replayed or live), and the handshake reply before the first
//! `runtime.changed`.
//!
//! # Bounded memory
//!
//! - The outbound queue is bounded in frames and in bytes (a frame always fits an empty queue). Replies wait for
//!   room; live notifications never wait: a subscription whose notification does not fit is closed and turned
//!   into a single `gap` notice, held on a side list with at most one entry per session and one per
//!   connection-wide notifier, and written once the queue has drained.
//! - Replies being built and stored events being read for a replay share a per-connection budget in bytes
//!   ([`ServerContext::reserve_reply_bytes`], [`EventSink::reserve_replay`]): a client that pipelines many
//!   `events.subscribe` requests and reads nothing makes the daemon build a few replies at a time, not all.
//! - A replay that finds no room in the queue for [`ServerLimits::replay_stall`] turns into the subscription's
//!   gap, like a live event that does not fit.
//! - A closed connection drops everything it queued, held or reserved at once.

mod budget;
mod channel;
mod connection;
mod context;
mod forward;
mod handle;
mod observer;
mod outbound;
mod request_span;
mod sink;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

pub use crate::methods::ServerProtocol;
use crate::transport::{MessageFrame, Transport};
pub use connection::{Authority, ServerConnection};
pub use context::ServerContext;
pub use forward::{ForwardFailure, ForwardedRequest, NOT_FORWARDED, RequestForwarder};
pub use handle::ConnectionHandle;
pub use observer::{
    DroppedNotification, HandshakeOutcome, NoObserver, ServerObserver, SharedObserver, method_label, no_observer,
};
pub use outbound::{OutboundCloser, OutboundStream};
pub use sink::{
    ConnectionNotifier, EventSink, OutputSink, OutputSinkRefused, ReplayPermit, SinkError, encode_event_notification,
};

/// Per-connection limits.
#[derive(Clone, Copy, Debug)]
pub struct ServerLimits {
    /// Requests being processed at once; one more is answered -32003.
    pub max_in_flight: usize,
    /// Frames queued for the client. A subscription whose notification does not fit gets a gap.
    pub outbound_queue: usize,
    /// Bytes of the frames queued for the client and not yet taken by the writer. Bounds the queue together with
    /// `outbound_queue`; one frame always fits an empty queue, however large.
    pub outbound_queue_bytes: usize,
    /// Bytes of replies being built and of stored events being read for replays, at once, per connection.
    pub reply_budget_bytes: usize,
    /// How long a replayed event may wait for room in the outbound queue before the subscriber is declared too
    /// slow and sent its gap.
    pub replay_stall: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_in_flight: 256,
            outbound_queue: 1024,
            outbound_queue_bytes: 8 * 1024 * 1024,
            reply_budget_bytes: 4 * 1024 * 1024,
            replay_stall: Duration::from_secs(30),
        }
    }
}

/// Drives one complete protocol session over `transport` until either side closes.
pub async fn serve<S: ServerProtocol, T: Transport>(mut transport: T, server: Arc<S>, limits: ServerLimits) {
    use futures::stream::{FuturesUnordered, StreamExt};
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
