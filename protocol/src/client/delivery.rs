//! What a consumer reads (vocabulary, bottom layer): the ordered stream of [`ClientDelivery`] values, why a
//! replay comes ([`ReplayReason`]), and the stream itself ([`Deliveries`], read through the [`DeliveryStream`]
//! trait). Imports no other module of the client; the connection task produces these values, the consumer
//! reads them.

use serde_json::Value;
use tokio::sync::mpsc;

use crate::types::events::StoredEvent;
use crate::types::runtime::RuntimeChangedParams;

/// Why a replay is being delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReplayReason {
    /// The consumer called [`Client::subscribe`](super::Client::subscribe).
    Subscribe,
    /// The daemon reported a gap and the client re-subscribed from its cursor.
    Gap,
    /// The connection was re-established and the client re-subscribed from its cursor.
    Reconnect,
}

/// One item of the ordered delivery stream.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientDelivery {
    /// An event notification; its `seq` is above every `seq` delivered before for its session. After a paged
    /// replay (a `ReplayEnd` whose `last_seq` is below the session's end) the rest of the stored events come
    /// this way too, in order, before the new ones.
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
    /// `events.tool_output_gap` params, as sent by the daemon, or synthesized by the client for output it
    /// dropped while the delivery stream was congested (see [back-pressure](super#back-pressure)).
    ToolOutputGap(Value),
    /// `events.tool_output_end` params, as sent: a named tool-output subscription ended.
    ToolOutputEnd(Value),
    /// `events.plugin` params, as sent.
    PluginEvent(Value),
    /// `count` plugin events were dropped while the delivery stream was congested.
    PluginEventsDropped {
        count: u64,
    },
    RuntimeChanged(RuntimeChangedParams),
    /// The automatic re-subscribe kept failing; the client no longer follows this session. Subscribe again to
    /// resume.
    RecoveryFailed {
        session_id: String,
        detail: String,
    },
    /// The connection dropped and the client is dialing again (only with a
    /// [`ReconnectPolicy`](super::ReconnectPolicy)).
    Disconnected {
        detail: String,
    },
    /// The connection is back and handshaken; replays with [`ReplayReason::Reconnect`] follow.
    Reconnected,
}

/// An ordered stream of [`ClientDelivery`] values; it ends (`None`) when the connection is gone for good.
pub trait DeliveryStream: Send {
    fn next(&mut self) -> impl Future<Output = Option<ClientDelivery>> + Send;
}

/// The delivery stream of one [`Client`](super::Client). It ends (`None`) when the connection task stops.
pub struct Deliveries {
    receiver: mpsc::Receiver<ClientDelivery>,
}

impl Deliveries {
    /// The stream read from `receiver`, whose sender the connection task holds.
    pub(super) fn new(receiver: mpsc::Receiver<ClientDelivery>) -> Self {
        Deliveries { receiver }
    }

    /// The next delivery, or `None` once the client is closed or the connection is gone for good.
    pub async fn next(&mut self) -> Option<ClientDelivery> {
        self.receiver.recv().await
    }
}

impl DeliveryStream for Deliveries {
    fn next(&mut self) -> impl Future<Output = Option<ClientDelivery>> + Send {
        Deliveries::next(self)
    }
}

impl std::fmt::Debug for Deliveries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deliveries").field("queued", &self.receiver.len()).finish()
    }
}
