//! A call of a plugin's tool as a message: what a run sends the plugin's host, and why a call can have no result.

use actix::prelude::*;
use tokio_util::sync::CancellationToken;
use troupe_protocol::types::plugin::{PluginToolCallParams, PluginToolCallResult};

/// Why a request to the plugin got no result.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PeerError {
    #[error("the plugin did not answer {method} within {timeout:?}")]
    Timeout { method: String, timeout: std::time::Duration },
    #[error("the plugin exited or its connection closed")]
    Closed,
    #[error("the plugin answered with an error: {0}")]
    Rpc(String),
    #[error("the plugin's answer does not match the protocol: {0}")]
    Malformed(String),
}

/// Why a plugin tool call has no result from the plugin.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PluginCallError {
    #[error("the plugin is not running (it is starting, restarting or failed)")]
    NotRunning,
    #[error("the plugin does not offer the tool `{0}`")]
    UnknownTool(String),
    #[error("{0}")]
    Peer(#[from] PeerError),
    #[error("the run was cancelled")]
    Cancelled,
}

/// Calls one of the plugin's tools, within the configured tool timeout, until `cancel`. Handled by the plugin's
/// host (`plugin_host/host/calls.rs`).
#[derive(Message)]
#[rtype(result = "Result<PluginToolCallResult, PluginCallError>")]
pub struct CallTool {
    pub params: PluginToolCallParams,
    pub cancel: CancellationToken,
}
