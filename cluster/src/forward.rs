//! Requests for a session hosted by another node, sent to that node over NATS request/reply.
//!
//! The JSON-RPC layer decides what to forward and when (troupe-protocol's `server::forward`): a request refused
//! with `session_hosted_elsewhere` naming the owner. This module carries it:
//! - [`NatsForwarder`], the caller's side: a NATS request to the owner's subject
//!   ([`names::node_request_subject`]) whose payload is the [`ForwardedRequest`] as JSON (`{method, params,
//!   client_info}`, the params as the client wrote them), and whose reply is the owner's JSON-RPC reply frame;
//! - [`serve_forwarded`], the owner's side: answers the requests on its own subject by running each through the
//!   local server as a client connected there would ([`bridge`]).
//!
//! Everything runs on the cluster's runtime. The engine's handlers need no actix context: they send to actor
//! addresses (which works from any thread) and use tokio's blocking pool and timers, which this runtime has.

mod bridge;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::RequestErrorKind;
use async_nats::client::Request;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use serde_json::value::RawValue;
use troupe_protocol::RpcError;
use troupe_protocol::server::{ForwardFailure, ForwardedRequest, NOT_FORWARDED, RequestForwarder, ServerProtocol};

pub use bridge::{Bridge, MAX_CONNECTIONS};

use crate::connection::Cluster;
use crate::error::ClusterError;
use crate::names;

/// How long a forwarded request may take before the caller gives up on the owner. The forwarded methods answer
/// once their work is accepted, not done (`run.start` replies when the run starts, not when it ends), so what they
/// wait for is the owner loading the session (its log from JetStream, a few seconds at worst) and the actor's
/// queue: 30 s is far beyond that and still short enough for a client to see a dead owner as such. A client's own
/// connection has no such bound, so a request slower than this on the owner is answered "not reachable" here while
/// it may still complete there: idempotency keys (`client_run_id`, `client_rename_id`) make the retry safe.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);

/// Methods that wait for their whole work on the owner, and the longer bound they get: a compaction replies once
/// its summary (a model call) is written.
const SLOW_METHODS: &[(&str, Duration)] = &[("session.compact", Duration::from_secs(600))];

/// Sends requests to the node hosting their session, over the cluster's NATS connection.
#[derive(Clone, Debug)]
pub struct NatsForwarder {
    cluster: Cluster,
    timeout: Duration,
}

impl NatsForwarder {
    pub fn new(cluster: Cluster) -> Self {
        NatsForwarder { cluster, timeout: FORWARD_TIMEOUT }
    }

    /// A forwarder that waits `timeout` for each answer (slow methods still get their own, longer bound).
    pub fn with_timeout(cluster: Cluster, timeout: Duration) -> Self {
        NatsForwarder { cluster, timeout }
    }

    fn timeout_for(&self, method: &str) -> Duration {
        SLOW_METHODS.iter().find(|(slow, _)| *slow == method).map_or(self.timeout, |(_, timeout)| *timeout)
    }
}

impl RequestForwarder for NatsForwarder {
    fn forward(
        &self,
        node: &str,
        request: ForwardedRequest,
    ) -> BoxFuture<'static, Result<Box<RawValue>, ForwardFailure>> {
        let unreachable = |detail: String| ForwardFailure::Unreachable { detail };
        if !names::is_subject_token(node) {
            return futures::future::ready(Err(unreachable(format!(
                "`{node}` is not a node name this node can address"
            ))))
            .boxed();
        }
        let subject = names::node_request_subject(node);
        let timeout = self.timeout_for(&request.method);
        let cluster = self.cluster.clone();
        async move {
            let payload = serde_json::to_vec(&request)
                .map_err(|error| unreachable(format!("the request could not be encoded: {error}")))?;
            let client = cluster.client().clone();
            let limit = client.server_info().max_payload;
            if limit > 0 && payload.len() > limit {
                return Err(unreachable(format!(
                    "the request is {} bytes, more than NATS carries in one message ({limit} bytes)",
                    payload.len()
                )));
            }
            // On the cluster's runtime, whatever runtime the connection runs on: the client's timer lives there.
            let asked = cluster.handle().spawn(async move {
                let request = Request::new().payload(payload.into()).timeout(Some(timeout));
                client.send_request(subject, request).await
            });
            let message = match asked.await {
                Ok(Ok(message)) => message,
                Ok(Err(error)) => {
                    return Err(unreachable(match error.kind() {
                        RequestErrorKind::NoResponders => "no node of that name is serving requests".to_owned(),
                        RequestErrorKind::TimedOut => {
                            format!("it did not answer within {timeout:?}; the request may still complete there")
                        }
                        RequestErrorKind::Other => format!("the request could not be sent: {error}"),
                    }));
                }
                Err(error) => return Err(unreachable(format!("the request was abandoned: {error}"))),
            };
            decode_reply(&message.payload)
        }
        .boxed()
    }
}

/// The owner's JSON-RPC reply frame as the forwarded request's outcome. The result is taken as the owner wrote it
/// (a `null` result included), not decoded.
fn decode_reply(payload: &[u8]) -> Result<Box<RawValue>, ForwardFailure> {
    let unreadable = |detail: String| {
        ForwardFailure::Answered(RpcError::internal(&format!(
            "the session's node answered something unreadable: {detail}"
        )))
    };
    let mut reply: HashMap<String, Box<RawValue>> =
        serde_json::from_slice(payload).map_err(|error| unreadable(error.to_string()))?;
    if let Some(result) = reply.remove("result") {
        return Ok(result);
    }
    let error = reply.remove("error").ok_or_else(|| unreadable("neither a result nor an error".to_owned()))?;
    let error: RpcError = serde_json::from_str(error.get()).map_err(|error| unreadable(error.to_string()))?;
    Err(ForwardFailure::Answered(error))
}

/// A node answering the requests other nodes forward to it; it stops when dropped.
pub struct ForwardedServing {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ForwardedServing {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Answers the requests forwarded to this node ([`names::node_request_subject`] of its name) by running each
/// through `server` as a client connected here would, until the returned value is dropped. Subscribed when this
/// returns, so a request sent after it finds this node.
pub async fn serve_forwarded<S: ServerProtocol>(
    cluster: &Cluster,
    server: Arc<S>,
) -> Result<ForwardedServing, ClusterError> {
    let subject = names::node_request_subject(cluster.node());
    let client = cluster.client().clone();
    let runtime = cluster.handle();
    let subscribed = {
        let client = client.clone();
        let subject = subject.clone();
        runtime.spawn(async move { client.subscribe(subject).await })
    };
    let unreachable = |detail: String| ClusterError::Unreachable { what: "subscribe to forwarded requests", detail };
    let mut requests = subscribed
        .await
        .map_err(|error| unreachable(error.to_string()))?
        .map_err(|error| unreachable(error.to_string()))?;
    // A request sent right after this returns must find the subscription: a flush only writes it to the socket, so
    // a round trip to the server on the same connection (which it answers after the subscription, in order) waits
    // until the server registered it. A request nobody answers is such a round trip ("no responders" comes from the
    // server itself), and unlike a JetStream call it does not wait for JetStream's leaders, which a cluster of
    // servers elects again when one of them goes.
    let registered = {
        let client = client.clone();
        runtime.spawn(async move { client.request(client.new_inbox(), bytes::Bytes::new()).await.map(drop) })
    };
    match registered.await {
        Ok(Err(error)) if !matches!(error.kind(), RequestErrorKind::NoResponders) => {
            return Err(unreachable(error.to_string()));
        }
        _ => {}
    }
    let bridge = Arc::new(Bridge::new(server, runtime.clone()));
    let serving = runtime.clone();
    let task = runtime.spawn(async move {
        while let Some(message) = requests.next().await {
            let Some(reply_to) = message.reply.clone() else { continue };
            let (client, bridge) = (client.clone(), bridge.clone());
            serving.spawn(async move {
                let Some(reply) = answer(&bridge, &message.payload).await else {
                    // The daemon is stopping: the caller times out and says this node is not reachable.
                    return;
                };
                let limit = client.server_info().max_payload;
                let reply = if limit > 0 && reply.len() > limit {
                    refusal(&RpcError::internal(&format!(
                        "the answer of the session's node is {} bytes, more than NATS carries in one message ({limit} \
                         bytes); ask for less at once",
                        reply.len()
                    )))
                } else {
                    reply
                };
                if let Err(error) = client.publish(reply_to, reply).await {
                    tracing::warn!(%error, "could not answer a forwarded request");
                }
            });
        }
    });
    Ok(ForwardedServing { task })
}

/// The reply frame to one forwarded request: the local server's, or a refusal of a payload that is not a request
/// another node may forward (a connection-scoped method would act on the bridge's connection, not the client's).
async fn answer<S: ServerProtocol>(bridge: &Bridge<S>, payload: &[u8]) -> Option<bytes::Bytes> {
    let request = match serde_json::from_slice::<ForwardedRequest>(payload) {
        Ok(request) => request,
        Err(error) => {
            return Some(refusal(&RpcError::invalid_request(&format!(
                "a forwarded request that does not read: {error}"
            ))));
        }
    };
    if NOT_FORWARDED.contains(&request.method.as_str()) {
        let detail = format!("`{}` acts on the caller's own connection and is never forwarded", request.method);
        return Some(refusal(&RpcError::invalid_request(&detail)));
    }
    bridge.call(request).await.map(bytestring::ByteString::into_bytes)
}

fn refusal(error: &RpcError) -> bytes::Bytes {
    bytes::Bytes::from(troupe_protocol::jsonrpc::encode_error_response(&troupe_protocol::jsonrpc::RawId::null(), error))
}
