//! The handshake's answer, judged (vocabulary, bottom layer): used by the [`Client`](super::Client) for the
//! first connection and by the connection task for each re-established one.

use super::error::ClientError;
use crate::types::runtime::{HandshakeResult, PROTOCOL_VERSION};

/// The daemon speaks protocol 20, or the connection is of no use.
pub(super) fn check_handshake_result(result: &HandshakeResult) -> Result<(), ClientError> {
    if result.protocol_version == PROTOCOL_VERSION {
        Ok(())
    } else {
        Err(ClientError::Protocol(format!(
            "the daemon answered the handshake with protocol {} instead of {PROTOCOL_VERSION}",
            result.protocol_version
        )))
    }
}

/// Whether the daemon refused the handshake only because it does not know `field` (serde's "unknown field"
/// refusal, which carries no typed code).
pub(super) fn params_unknown_to_the_daemon(answer: &Result<HandshakeResult, ClientError>, field: &str) -> bool {
    let Err(ClientError::Rpc(error)) = answer else {
        return false;
    };
    error.code == crate::error::codes::INVALID_PARAMS
        && error.typed_code().is_none()
        && error.detail().is_some_and(|detail| detail.contains("unknown field") && detail.contains(field))
}
