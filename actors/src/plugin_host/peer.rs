//! The JSON-RPC 2.0 peer over a plugin's stdio: requests both ways, their ids, timeouts, and the classification
//! of every line the plugin writes.
//!
//! Requests the daemon sends get increasing integer ids; their answers resolve waiting futures. When the process
//! goes away every waiting request fails at once with [`PeerError::Closed`], so nothing waits on a dead plugin.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};
use troupe_protocol::RpcError;

pub use crate::plugin_tools::PeerError;

/// One message the plugin sent, other than an answer to the daemon's request.
#[derive(Debug)]
pub enum Incoming {
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
    },
    /// Not a JSON-RPC 2.0 message (the reason never quotes the line).
    Invalid {
        reason: String,
    },
}

type Waiters = Arc<Mutex<Option<HashMap<u64, oneshot::Sender<Result<Value, PeerError>>>>>>;

/// The daemon's side of one plugin connection. Cheap to clone.
#[derive(Clone)]
pub struct Peer {
    outgoing: mpsc::Sender<String>,
    /// `None` once closed: no new request waits.
    waiters: Waiters,
    next_id: Arc<AtomicU64>,
}

impl Peer {
    pub fn new(outgoing: mpsc::Sender<String>) -> Self {
        Peer { outgoing, waiters: Arc::new(Mutex::new(Some(HashMap::new()))), next_id: Arc::new(AtomicU64::new(1)) }
    }

    /// Sends a request and waits for its answer, at most `timeout` in all: queueing the request on a full stdin
    /// counts against it too, so a plugin that stops reading cannot hold the caller.
    pub async fn request<P: Serialize>(&self, method: &str, params: &P, timeout: Duration) -> Result<Value, PeerError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = oneshot::channel();
        match self.waiters.lock().as_mut() {
            Some(waiters) => waiters.insert(id, sender),
            None => return Err(PeerError::Closed),
        };
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        let exchange = async {
            if self.outgoing.send(line).await.is_err() {
                return Err(PeerError::Closed);
            }
            match receiver.await {
                Ok(result) => result,
                Err(_) => Err(PeerError::Closed),
            }
        };
        let answer = tokio::time::timeout(timeout, exchange).await;
        self.forget(id);
        answer.unwrap_or_else(|_| Err(PeerError::Timeout { method: method.to_owned(), timeout }))
    }

    fn forget(&self, id: u64) {
        if let Some(waiters) = self.waiters.lock().as_mut() {
            waiters.remove(&id);
        }
    }

    /// Sends a notification; never waits (a full pipe drops it: notifications carry no promise).
    pub fn notify<P: Serialize>(&self, method: &str, params: &P) {
        let line = json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string();
        let _ = self.outgoing.try_send(line);
    }

    /// Answers a request of the plugin, waiting at most `wait` for room on its stdin. `false` when the answer
    /// was dropped because the plugin did not read its stdin in time (a failed plugin: the caller kills it).
    pub async fn respond(&self, id: Value, result: Result<Value, RpcError>, wait: Duration) -> bool {
        let message = match result {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
        };
        // A closed connection is not the plugin's fault here: its exit is reported on its own.
        tokio::time::timeout(wait, self.outgoing.send(message.to_string())).await.is_ok()
    }

    /// Fails every waiting request and refuses new ones: the process is gone.
    pub fn close(&self) {
        if let Some(waiters) = self.waiters.lock().take() {
            for (_, waiter) in waiters {
                let _ = waiter.send(Err(PeerError::Closed));
            }
        }
    }

    /// Classifies one line: an answer resolves its request here (`None`); anything else is returned.
    pub fn accept(&self, line: &str) -> Option<Incoming> {
        let value: Value = match serde_json::from_str(line) {
            Ok(value) => value,
            Err(_) => return Some(Incoming::Invalid { reason: "a line that is not JSON".into() }),
        };
        let Value::Object(mut object) = value else {
            return Some(Incoming::Invalid { reason: "a JSON value that is not an object".into() });
        };
        if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Some(Incoming::Invalid { reason: "a message without \"jsonrpc\": \"2.0\"".into() });
        }
        let params = object.remove("params").unwrap_or(Value::Object(Map::new()));
        match (object.remove("method"), object.remove("id")) {
            (Some(Value::String(method)), Some(id)) => Some(Incoming::Request { id, method, params }),
            (Some(Value::String(method)), None) => Some(Incoming::Notification { method }),
            (Some(_), _) => Some(Incoming::Invalid { reason: "a method that is not a string".into() }),
            (None, Some(id)) => {
                let answer = match (object.remove("result"), object.remove("error")) {
                    (Some(result), None) => Ok(result),
                    (None, Some(error)) => {
                        let error: Result<RpcError, _> = serde_json::from_value(error);
                        Err(match error {
                            Ok(error) => PeerError::Rpc(format!("{} ({})", error.message, error.code)),
                            Err(_) => PeerError::Malformed("an error object without code and message".into()),
                        })
                    }
                    _ => Err(PeerError::Malformed("an answer with neither or both of result and error".into())),
                };
                let waiter = id.as_u64().and_then(|id| self.waiters.lock().as_mut().and_then(|w| w.remove(&id)));
                match waiter {
                    Some(waiter) => {
                        let _ = waiter.send(answer);
                        None
                    }
                    // A late answer (its request timed out) or an id the daemon never sent.
                    None => {
                        tracing::debug!("a plugin answered a request that is not waiting");
                        None
                    }
                }
            }
            (None, None) => Some(Incoming::Invalid { reason: "a message with neither method nor id".into() }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_resolve_their_requests_and_closing_fails_the_rest() {
        let (sender, mut lines) = mpsc::channel(8);
        let peer = Peer::new(sender);
        let asking = {
            let peer = peer.clone();
            tokio::spawn(async move { peer.request("plugin/ping", &json!({}), Duration::from_secs(30)).await })
        };
        let sent: Value = serde_json::from_str(&lines.recv().await.unwrap()).unwrap();
        assert_eq!(sent["method"], "plugin/ping");
        let answer = json!({"jsonrpc": "2.0", "id": sent["id"], "result": {"ok": true}}).to_string();
        assert!(peer.accept(&answer).is_none());
        assert_eq!(asking.await.unwrap(), Ok(json!({"ok": true})));

        let waiting = {
            let peer = peer.clone();
            tokio::spawn(async move { peer.request("plugin/ping", &json!({}), Duration::from_secs(30)).await })
        };
        let _ = lines.recv().await.unwrap();
        peer.close();
        assert_eq!(waiting.await.unwrap(), Err(PeerError::Closed));
        assert_eq!(peer.request("x", &json!({}), Duration::from_secs(1)).await, Err(PeerError::Closed));
    }

    #[tokio::test]
    async fn a_full_stdin_counts_against_the_timeout_and_drops_answers() {
        let (sender, _lines) = mpsc::channel(1);
        let peer = Peer::new(sender);
        peer.notify("fill", &json!({}));
        let asked = peer.request("plugin/ping", &json!({}), Duration::from_millis(50)).await;
        assert!(matches!(asked, Err(PeerError::Timeout { .. })), "{asked:?}");
        assert!(!peer.respond(json!(1), Ok(json!({})), Duration::from_millis(50)).await);
    }

    #[test]
    fn lines_are_classified_without_quoting_them() {
        let (sender, _lines) = mpsc::channel(8);
        let peer = Peer::new(sender);
        let Some(Incoming::Invalid { reason }) = peer.accept("secret garbage") else { panic!("not invalid") };
        assert!(!reason.contains("secret"));
        assert!(matches!(
            peer.accept(r#"{"jsonrpc":"2.0","id":"a","method":"plugin/emit","params":{}}"#),
            Some(Incoming::Request { method, .. }) if method == "plugin/emit"
        ));
        assert!(matches!(
            peer.accept(r#"{"jsonrpc":"2.0","method":"n"}"#),
            Some(Incoming::Notification { method, .. }) if method == "n"
        ));
        assert!(matches!(peer.accept(r#"{"id":1,"method":"n"}"#), Some(Incoming::Invalid { .. })));
    }
}
