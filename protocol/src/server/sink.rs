//! The public faces of a notification channel: [`EventSink`] (one connection's subscription to one session) and
//! [`ConnectionNotifier`] (connection-wide notices), with [`ReplayPermit`] and [`SinkError`].

use std::sync::Arc;

use bytestring::ByteString;

use super::budget::Reservation;
use super::channel::GatedChannel;
use crate::jsonrpc::{Notification, encode_notification};
use crate::types::events::EventJson;

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

/// Part of a connection's reply budget, held while a chunk of stored events is read and offered for a replay.
/// Dropping it gives the bytes back.
pub struct ReplayPermit {
    reservation: Reservation,
}

impl ReplayPermit {
    /// The bytes it holds: what was asked, at most the whole budget.
    pub fn bytes(&self) -> usize {
        self.reservation.bytes()
    }
}

impl std::fmt::Debug for ReplayPermit {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("ReplayPermit").field("bytes", &self.bytes()).finish()
    }
}

/// One connection's subscription to one session's events. The session actor owns it: it offers each new event
/// with [`offer`](Self::offer), and a replay pump pushes the stored events that did not fit the reply with
/// [`reserve_replay`](Self::reserve_replay) and [`offer_replay`](Self::offer_replay).
pub struct EventSink {
    pub(super) channel: Arc<GatedChannel>,
}

impl EventSink {
    pub fn connection_id(&self) -> u64 {
        self.channel.shared.id
    }

    /// Records that the subscription's reply carried the events up to `seq`, so a gap points after them.
    pub fn mark_replayed_through(&self, seq: u64) {
        self.channel.mark_delivered(seq);
    }

    /// Offers one encoded `events.subscription` frame for the live event `seq` (see
    /// [`encode_event_notification`]). Never waits: an event that does not fit the queue ends the subscription
    /// with its gap. On error the sink is finished and must be dropped; on `Lagging` its gap notice is already
    /// scheduled.
    pub fn offer(&self, seq: u64, frame: &ByteString) -> Result<(), SinkError> {
        self.channel.offer(seq, frame)
    }

    /// Offers the frames of several live events, in `seq` order: what [`offer`](Self::offer) of each in turn does
    /// (the first that does not fit ends the subscription with its gap, and nothing after it is queued), with one
    /// lock of the connection's queue and one wake-up of its writer for all of them.
    pub fn offer_all(&self, events: &[(u64, ByteString)]) -> Result<(), SinkError> {
        self.channel.offer_all(events)
    }

    /// Offers a stored event pushed after the subscribe reply (a replay). Waits until the reply is queued, then
    /// for room in the queue (frames and bytes), queues the frame and records `seq` as delivered. A subscriber
    /// that leaves no room for [`ServerLimits::replay_stall`](super::ServerLimits::replay_stall) is too slow: it
    /// is sent its gap and `Err(Lagging)` is returned. `Err(Closed)` when the connection closes or the
    /// subscription is replaced. Cancel-safe: dropping the future queues and records nothing.
    pub fn offer_replay(
        &self,
        seq: u64,
        frame: &ByteString,
    ) -> impl Future<Output = Result<(), SinkError>> + Send + 'static + use<> {
        let channel = self.channel.clone();
        let frame = frame.clone();
        async move { channel.offer_replay(seq, &frame).await }
    }

    /// Waits until `min(bytes, reply_budget_bytes)` of the connection's reply budget is free and takes it for a
    /// chunk of this subscription's replay, until the permit is dropped. Replies being built and replays being
    /// read share the budget. Drop one chunk's permit before reserving the next: a subscription that already
    /// holds a permit is not made to wait for another (it would wait for itself), so holding several is taking
    /// more than the budget. `Err(Closed)` if the connection or the subscription closes first.
    pub fn reserve_replay(
        &self,
        bytes: usize,
    ) -> impl Future<Output = Result<ReplayPermit, SinkError>> + Send + 'static + use<> {
        let channel = self.channel.clone();
        async move { channel.reserve_replay(bytes).await.map(|reservation| ReplayPermit { reservation }) }
    }

    /// Ends the subscription with its one `gap` notice (pointing after the last event delivered), as when the
    /// subscriber falls behind: for a server that cannot go on delivering (a replay that failed to read the log),
    /// so the client resubscribes from its cursor instead of waiting for events that will not come.
    pub fn end_with_gap(&self) {
        let _ = self.channel.fall_behind();
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

/// One named tool-output subscription of a connection (`tool_output.subscribe`). The session actor owns it:
/// it offers the call's output with [`offer_transient`](Self::offer_transient) and, once the call ended and what
/// the subscription asked for was offered, the end notice with [`offer_end`](Self::offer_end). Clones share the
/// subscription.
#[derive(Clone)]
pub struct OutputSink {
    pub(super) channel: Arc<GatedChannel>,
}

impl OutputSink {
    pub fn connection_id(&self) -> u64 {
        self.channel.shared.id
    }

    /// Offers output. When the queue is full it is dropped and `Ok(false)` is returned (the caller sends a gap
    /// notice later); `Err(Closed)` means the subscription ended (unsubscribed, replaced, or the connection gone).
    pub fn offer_transient(&self, frame: &ByteString) -> Result<bool, SinkError> {
        self.channel.offer_transient(frame)
    }

    /// Offers the end notice, which is never dropped for room (it waits on the connection's side list), and frees
    /// the subscription's slot in the connection's bound.
    pub fn offer_end(&self, frame: &ByteString) -> Result<(), SinkError> {
        let offered = self.channel.offer(0, frame);
        self.channel.mark_finished();
        offered
    }

    pub fn is_closed(&self) -> bool {
        self.channel.is_closed()
    }
}

/// Why [`ServerContext::output_sink`](super::ServerContext::output_sink) refused a subscription.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OutputSinkRefused {
    #[error("this connection already has {limit} tool-output subscriptions that have not ended")]
    TooMany { limit: usize },
    #[error("the connection is closed")]
    Closed,
}

/// A connection's channel for connection-wide notifications such as `runtime.changed`.
#[derive(Clone)]
pub struct ConnectionNotifier {
    pub(super) channel: Arc<GatedChannel>,
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
