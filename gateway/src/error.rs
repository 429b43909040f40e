//! [`GatewayError`]: why the gateway could not start. Below every module that can fail a start (`origin.rs`), so
//! none of them needs the crate root.

use crate::listener::Listener;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: Listener,
        #[source]
        source: std::io::Error,
    },
    #[error("allowed origin `{0}` is not of the form scheme://host[:port]")]
    InvalidAllowedOrigin(String),
    #[error("the bearer token is empty, which would let anyone in")]
    EmptyToken,
}
