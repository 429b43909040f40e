//! What a call can fail with ([`ClientError`]), and why the connection task stopped ([`EndReason`]), which
//! decides the error every call still outstanding at that moment, or made afterwards, fails with. Vocabulary,
//! bottom layer: imports no other module of the client.

use crate::error::RpcError;
use crate::transport::{OpenFailure, TransportError};

/// Everything that can go wrong with a call.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The daemon answered with a JSON-RPC error.
    #[error("{}", describe_rpc_error(.0))]
    Rpc(RpcError),
    /// [`Client::close`](super::Client::close) was called.
    #[error("the client was closed")]
    Closed,
    /// The connection to the daemon was lost before the answer came.
    #[error("the connection to the daemon was lost")]
    Disconnected,
    /// No answer within [`ClientOptions::request_timeout`](super::ClientOptions::request_timeout).
    #[error("the daemon did not answer within the request timeout")]
    Timeout,
    /// The transport could not be opened: what happened, and why when a client can act on it.
    #[error("{0}")]
    Transport(String, Option<OpenFailure>),
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
        ClientError::Transport(error.0, error.1)
    }
}

/// `data.detail` is sanitized by the daemon (terminal-safe, bounded), so it may be shown as is.
fn describe_rpc_error(error: &RpcError) -> String {
    match error.detail() {
        Some(detail) => format!("{} ({}): {detail}", error.message, error.code),
        None => format!("{} ({})", error.message, error.code),
    }
}

/// Why the connection task stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum EndReason {
    Closed,
    Disconnected,
}

impl EndReason {
    pub(super) fn error(self) -> ClientError {
        match self {
            EndReason::Closed => ClientError::Closed,
            EndReason::Disconnected => ClientError::Disconnected,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error_code::ErrorCode;

    #[test]
    fn rpc_errors_display_their_detail() {
        let error = ClientError::Rpc(RpcError::engine(ErrorCode::SessionNotFound, "no session x", &[]));
        assert_eq!(error.to_string(), "Engine error (-32000): no session x");
    }
}
