//! Forwarding a request to the cluster node that hosts its session.
//!
//! In a cluster, each session is written by one node (its lease). Elsewhere, a write to it is refused with
//! -32000 `session_hosted_elsewhere` naming the owner in `data.node`. A server that can reach the other nodes
//! ([`ServerProtocol::forwarder`](crate::server::ServerProtocol::forwarder)) turns that refusal into the owner's
//! own answer: the connection sends the request's method and params, byte for byte, to the owner, and answers the
//! client with whatever the owner answered, under the client's id. Generic over methods: no method is forwarded
//! by name, except that the connection-scoped ones in [`NOT_FORWARDED`] never are.
//!
//! A request is forwarded at most once: the owner runs it on a connection that does not forward
//! ([`ServerConnection::never_forward`](crate::server::ServerConnection::never_forward)), so a request refused
//! again there (the lease moved meanwhile) comes back as that refusal, never around a loop.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::diagnostic::sanitize_diagnostic;
use crate::error::{RpcError, codes};
use crate::error_code::ErrorCode;
use crate::jsonrpc::Method;
use crate::methods::method;
use crate::types::runtime::ClientInfo;

/// Methods never forwarded: what they open or change belongs to the connection they came on (its handshake, its
/// event and output subscriptions, its presence), or depends on what that connection proved (`console.login_code`).
/// Forwarded, they would act on the owner's forwarding connection instead, out of the client's reach. The engine
/// serves `events.subscribe` and `tool_output.subscribe` for another node's session itself, from the cluster.
pub const NOT_FORWARDED: &[&str] = &[
    method::Handshake::NAME,
    method::EventsSubscribe::NAME,
    method::ToolOutputSubscribe::NAME,
    method::ToolOutputUnsubscribe::NAME,
    method::SessionPresence::NAME,
    method::SessionPresenceUnsubscribe::NAME,
    method::ConsoleLoginCode::NAME,
];

/// One request sent on to the node hosting its session: the client's method and params exactly as it sent them,
/// and the `client_info` and name of the connection it came on. It is also the payload that travels between nodes.
#[derive(Debug, Serialize, Deserialize)]
pub struct ForwardedRequest {
    pub method: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Box<RawValue>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_info: Option<Arc<ClientInfo>>,
    /// The forwarding node's name for the connection the request came on (`connection-<n>@<node>`), which the
    /// owner reports as who did it (an approval's `answered_by`) instead of its own forwarding connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
}

/// Why a forwarded request has no result.
#[derive(Debug)]
pub enum ForwardFailure {
    /// The owner answered with this error: the client gets it as it is.
    Answered(RpcError),
    /// The owner could not be asked, or did not answer (no node listens on its subject, the request timed out, the
    /// link to it is down). The client gets the original refusal, saying so with `detail`.
    Unreachable { detail: String },
}

/// Sends requests to other nodes of the cluster. Implemented by the cluster crate over NATS; this crate knows no
/// transport.
pub trait RequestForwarder: Send + Sync + 'static {
    /// Sends `request` to `node` and resolves to its result (the JSON of the owner's `result`) or why there is none.
    fn forward(
        &self,
        node: &str,
        request: ForwardedRequest,
    ) -> BoxFuture<'static, Result<Box<RawValue>, ForwardFailure>>;
}

/// The node a refusal asks to forward to: `data.node` of a -32000 `session_hosted_elsewhere` of a method that may
/// be forwarded.
pub(super) fn forward_target<'a>(method: &str, error: &'a RpcError) -> Option<&'a str> {
    if error.code != codes::ENGINE_ERROR || error.error_code() != Some(ErrorCode::SessionHostedElsewhere) {
        return None;
    }
    if NOT_FORWARDED.contains(&method) {
        return None;
    }
    error.data.as_ref()?.get("node")?.as_str().filter(|node| !node.is_empty())
}

/// The client's answer when the owner could not be reached: the original refusal, its detail saying why the request
/// could not be sent on.
pub(super) fn unreachable(mut refusal: RpcError, node: &str, detail: &str) -> RpcError {
    if let Some(Value::Object(data)) = &mut refusal.data {
        let before = data.get("detail").and_then(Value::as_str).unwrap_or_default();
        let detail = format!("{before}; node `{node}` is not reachable from this node ({detail})");
        data.insert("detail".to_owned(), Value::String(sanitize_diagnostic(&detail)));
    }
    refusal
}
