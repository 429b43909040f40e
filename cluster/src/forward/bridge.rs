//! The owner's side of a forwarded request, inside the node: runs it through the local server exactly as a client
//! connected here would, on a handshaken [`ServerConnection`] that never forwards (a request is forwarded once).
//!
//! The bridge keeps one long-lived connection per `client_info` it has been sent (so what the engine reads of a
//! connection's `client_info` is the original client's), up to [`MAX_CONNECTIONS`]; requests of any further
//! `client_info` share one connection without it. Each connection numbers its requests itself (the original ids
//! stay with the node that forwarded them) and a reader task hands each reply frame to the request with its id;
//! notifications (the handshake's `runtime.changed`) are read and dropped.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytestring::ByteString;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::sync::oneshot;
use troupe_protocol::server::{
    ForwardedRequest, OutboundCloser, OutboundStream, ServerConnection, ServerLimits, ServerProtocol,
};
use troupe_protocol::types::runtime::{ClientInfo, HandshakeParams, PROTOCOL_VERSION};

/// Distinct `client_info`s given a connection of their own; more share the anonymous one.
pub const MAX_CONNECTIONS: usize = 32;

/// Requests of other nodes being run at once on one connection: more are refused -32003 like any client's.
const MAX_IN_FLIGHT: usize = 1024;

/// Replies still owed, by the id the bridge gave the request.
type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<ByteString>>>>;

/// The local connections forwarded requests run on.
pub struct Bridge<S: ServerProtocol> {
    server: Arc<S>,
    runtime: tokio::runtime::Handle,
    /// By `client_info` (`None`: the connection without one).
    connections: Mutex<HashMap<Option<ClientInfoKey>, Arc<Local<S>>>>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct ClientInfoKey {
    name: String,
    version: Option<String>,
}

/// One handshaken local connection and the replies it owes.
struct Local<S: ServerProtocol> {
    connection: ServerConnection<S>,
    closer: OutboundCloser,
    pending: Pending,
    next_id: AtomicU64,
}

impl<S: ServerProtocol> Bridge<S> {
    /// A bridge to `server`, whose connections' reader tasks run on `runtime`.
    pub fn new(server: Arc<S>, runtime: tokio::runtime::Handle) -> Self {
        Bridge { server, runtime, connections: Mutex::new(HashMap::new()) }
    }

    /// Runs `request` and returns its whole reply frame (`{"jsonrpc":"2.0","id":..,"result"|"error":..}`, the id
    /// the bridge's own). `None` when the local connection closed before answering (the daemon is stopping).
    pub async fn call(&self, request: ForwardedRequest) -> Option<ByteString> {
        let ForwardedRequest { method, params, client_info, caller } = request;
        let local = self.connection(client_info.as_deref());
        local.call(&method, params.as_deref(), caller.as_deref()).await
    }

    /// The connection for `client_info`, handshaken; opened on first use.
    fn connection(&self, client_info: Option<&ClientInfo>) -> Arc<Local<S>> {
        let mut key = client_info.map(|info| ClientInfoKey { name: info.name.clone(), version: info.version.clone() });
        let mut connections = self.connections.lock();
        if key.is_some() && !connections.contains_key(&key) && connections.len() >= MAX_CONNECTIONS {
            key = None;
        }
        if let Some(local) = connections.get(&key) {
            return local.clone();
        }
        let local = self.open(key.clone().map(|key| ClientInfo { name: key.name, version: key.version }));
        connections.insert(key, local.clone());
        local
    }

    /// A new local connection, its handshake already admitted: the connection decides admission in the order
    /// frames arrive, so every request sent after this returns is past the handshake gate.
    fn open(&self, client_info: Option<ClientInfo>) -> Arc<Local<S>> {
        let limits = ServerLimits { max_in_flight: MAX_IN_FLIGHT, ..ServerLimits::default() };
        let (connection, outbound) = ServerConnection::new(self.server.clone(), limits);
        connection.never_forward();
        let pending: Pending = Arc::default();
        let closer = outbound.closer();
        self.runtime.spawn(read_replies(outbound, pending.clone()));
        let params = HandshakeParams { protocol_version: PROTOCOL_VERSION, client_info };
        // Id 0 is never waited for: the reader drops its reply (and the `runtime.changed` after it).
        if let Ok(handshake) = serde_json::to_string(&Handshake { jsonrpc: "2.0", id: 0, method: "handshake", params })
        {
            self.runtime.spawn(connection.handle_text(&handshake));
        }
        Arc::new(Local { connection, closer, pending, next_id: AtomicU64::new(1) })
    }
}

impl<S: ServerProtocol> Drop for Bridge<S> {
    /// Closes every local connection, as a transport does when its client leaves.
    fn drop(&mut self) {
        for local in self.connections.get_mut().values() {
            local.closer.close();
            self.server.disconnected(local.connection.connection_id());
        }
    }
}

impl<S: ServerProtocol> Local<S> {
    async fn call(&self, method: &str, params: Option<&RawValue>, caller: Option<&str>) -> Option<ByteString> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let text = serde_json::to_string(&Request { jsonrpc: "2.0", id, method, params }).ok()?;
        let (sender, receiver) = oneshot::channel();
        self.pending.lock().insert(id, sender);
        // The frame's reply is queued when this returns; the reader hands it over.
        self.connection.handle_forwarded_text(&text, caller).await;
        let reply = receiver.await.ok();
        self.pending.lock().remove(&id);
        reply
    }
}

#[derive(Serialize)]
struct Request<'a> {
    jsonrpc: &'static str,
    id: u64,
    method: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a RawValue>,
}

#[derive(Serialize)]
struct Handshake {
    jsonrpc: &'static str,
    id: u64,
    method: &'static str,
    params: HandshakeParams,
}

/// The id of a reply frame; notifications have none.
#[derive(Deserialize)]
struct ReplyId {
    #[serde(default)]
    id: Option<u64>,
}

/// Hands each reply frame of a local connection to the request it answers, until the connection closes; the
/// requests still waiting then get nothing.
async fn read_replies(mut outbound: OutboundStream, pending: Pending) {
    while let Some(frame) = outbound.next().await {
        let Ok(ReplyId { id: Some(id) }) = serde_json::from_str::<ReplyId>(&frame) else { continue };
        if let Some(sender) = pending.lock().remove(&id) {
            let _ = sender.send(frame);
        }
    }
    pending.lock().clear();
}
