//! The label values and label sets of the daemon's metrics: typed, so a series can only carry a value the code
//! names, and cheap, so counting with a fixed label set allocates nothing.
//!
//! The enums implement `EncodeLabelValue` through [`label_value!`] rather than the crate's derive, which writes
//! the variant's Rust name (`RateLimited`); Prometheus label values are snake_case by convention, and these match
//! the protocol's own wire names (`rate_limited`, `cancelled`).

use std::fmt::{self, Write as _};

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use troupe_protocol::RpcError;
use troupe_protocol::error::codes;
use troupe_protocol::types::run::ToolResultStatus;

use crate::event_log::SnapshotUse;
use crate::model::ModelErrorKind;

/// An enum of label values with its snake_case text.
macro_rules! label_value {
    ($(#[$meta:meta])* $name:ident { $($(#[$variant_meta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$variant_meta])* $variant),+
        }

        impl $name {
            /// The label value.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> fmt::Result {
                encoder.write_str(self.as_str())
            }
        }
    };
}

label_value! {
    /// How a `handshake` request ended.
    HandshakeResult {
        Ok => "ok",
        Refused => "refused",
    }
}

label_value! {
    /// How a request ended: `ok`, or the name of its JSON-RPC error code.
    RpcOutcome {
        Ok => "ok",
        ParseError => "parse_error",
        InvalidRequest => "invalid_request",
        MethodNotFound => "method_not_found",
        InvalidParams => "invalid_params",
        InternalError => "internal_error",
        EngineError => "engine_error",
        HandshakeRequired => "handshake_required",
        Overloaded => "overloaded",
        /// A code outside the wire contract's list.
        Other => "other",
    }
}

impl RpcOutcome {
    pub fn of(result: Result<(), &RpcError>) -> Self {
        let Err(error) = result else { return RpcOutcome::Ok };
        match error.code {
            codes::PARSE_ERROR => RpcOutcome::ParseError,
            codes::INVALID_REQUEST => RpcOutcome::InvalidRequest,
            codes::METHOD_NOT_FOUND => RpcOutcome::MethodNotFound,
            codes::INVALID_PARAMS => RpcOutcome::InvalidParams,
            codes::INTERNAL_ERROR => RpcOutcome::InternalError,
            codes::ENGINE_ERROR => RpcOutcome::EngineError,
            codes::HANDSHAKE_REQUIRED => RpcOutcome::HandshakeRequired,
            codes::OVERLOADED => RpcOutcome::Overloaded,
            _ => RpcOutcome::Other,
        }
    }
}

label_value! {
    /// The terminal outcome of a run.
    RunOutcome {
        Completed => "completed",
        Failed => "failed",
        Cancelled => "cancelled",
        /// Its session or the daemon went away while it was in flight, or its end could not be recorded.
        Interrupted => "interrupted",
    }
}

label_value! {
    /// Which kind of notification found no room in a connection's outbound queue.
    DropKind {
        /// A subscription's event: the subscription ended with a gap.
        Event => "event",
        /// Live tool output, dropped without ending anything.
        Transient => "transient",
    }
}

label_value! {
    /// A tool call's terminal status, as in `tool_call_terminated`.
    ToolStatus {
        Ok => "ok",
        Error => "error",
        Denied => "denied",
        Cancelled => "cancelled",
    }
}

impl From<ToolResultStatus> for ToolStatus {
    fn from(status: ToolResultStatus) -> Self {
        match status {
            ToolResultStatus::Ok => ToolStatus::Ok,
            ToolResultStatus::Error => ToolStatus::Error,
            ToolResultStatus::Denied => ToolStatus::Denied,
            ToolResultStatus::Cancelled => ToolStatus::Cancelled,
        }
    }
}

label_value! {
    /// What a session's load made of its projection snapshot.
    SnapshotOutcome {
        /// It matched the log: only the lines after it were scanned.
        Used => "used",
        /// There was none: the whole log was scanned.
        Missing => "missing",
        /// It did not match the log, or could not be read: the whole log was scanned.
        Refused => "refused",
    }
}

impl From<&SnapshotUse> for SnapshotOutcome {
    fn from(snapshot: &SnapshotUse) -> Self {
        match snapshot {
            SnapshotUse::Used { .. } => SnapshotOutcome::Used,
            SnapshotUse::Missing => SnapshotOutcome::Missing,
            SnapshotUse::Refused(_) => SnapshotOutcome::Refused,
        }
    }
}

impl EncodeLabelValue for ModelErrorKind {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> fmt::Result {
        encoder.write_str(self.as_str())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct HandshakeLabels {
    pub(super) outcome: HandshakeResult,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct RequestLabels {
    /// A name from the method table, or `unknown`.
    pub(super) method: &'static str,
    pub(super) outcome: RpcOutcome,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct MethodLabels {
    pub(super) method: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct RunEndLabels {
    pub(super) outcome: RunOutcome,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct DropLabels {
    pub(super) kind: DropKind,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct SessionLoadLabels {
    pub(super) snapshot: SnapshotOutcome,
}

/// A provider id (`local`, `openai`, `anthropic`): the configured providers, a small set.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct ProviderLabels {
    pub(super) provider: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct ModelErrorLabels {
    pub(super) provider: String,
    pub(super) kind: ModelErrorKind,
}

/// A tool the run offered (a name the model made up is counted as `unknown` by the caller).
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct ToolCallLabels {
    pub(super) tool: String,
    pub(super) status: ToolStatus,
}
