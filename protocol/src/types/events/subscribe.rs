//! `events.subscribe` and the `events.subscription` notification.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::EventJson;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventsSubscribeParams {
    pub session_id: String,
    /// Return events with `seq` greater than this; all events when absent.
    #[serde(default)]
    pub cursor: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EventsSubscribeResult {
    /// Stored events with `seq > cursor`, in order: at most one page of them.
    pub events: Vec<EventJson>,
    /// The `seq` of the last event in `events` (the cursor when `events` is empty). Notifications carry exactly the
    /// events after it: the rest of the stored history first, when it did not fit the page, then the live ones.
    pub last_seq: u64,
    /// troupe extension: the session's last physical sequence when the subscription started, that is, where its
    /// stored history ends. Above `last_seq`, the history continues past this page as notifications; a
    /// notification with a later `seq` is live. Absent from daemons that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_last_seq: Option<u64>,
}

/// `events.subscription` notification.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventsSubscriptionParams {
    Event {
        session_id: String,
        event: EventJson,
    },
    /// The subscriber fell behind; it must re-subscribe from its cursor.
    Gap {
        session_id: String,
        last_delivered_seq: u64,
    },
}
