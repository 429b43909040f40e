//! Forwarding over a real NATS server between two in-process "nodes", each a small fake server: a request refused on
//! node b because node a hosts its session is answered by a's server (result, error, or a's own refusal, which is
//! not forwarded again); with nobody serving a's subject, or a never answering, b's client gets the refusal saying a
//! is not reachable.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;
use troupe_cluster::forward::ForwardedServing;
use troupe_cluster::{Cluster, ClusterSettings, NatsForwarder, serve_forwarded};
use troupe_protocol::RpcError;
use troupe_protocol::error_code::ErrorCode;
use troupe_protocol::server::{OutboundStream, RequestForwarder, ServerConnection, ServerContext, ServerProtocol};
use troupe_protocol::types::run::{RunCancelResult, RunIdParams};
use troupe_test_support::NatsServer;

const BOUND: Duration = Duration::from_secs(10);

/// A node's server: hosts the sessions it is told it hosts; refuses the others naming their owner.
struct Node {
    /// `None`: this node hosts every session; `Some(owner)`: `owner` does.
    owner: Option<&'static str>,
    forwarder: Option<Arc<NatsForwarder>>,
    /// What this server ran: (run id, the connection's client_info name).
    ran: Mutex<Vec<(String, Option<String>)>>,
}

impl Node {
    fn new(owner: Option<&'static str>, forwarder: Option<NatsForwarder>) -> Arc<Node> {
        Arc::new(Node { owner, forwarder: forwarder.map(Arc::new), ran: Mutex::new(Vec::new()) })
    }
}

impl ServerProtocol for Node {
    fn forwarder(&self) -> Option<Arc<dyn RequestForwarder>> {
        self.forwarder.clone().map(|forwarder| forwarder as Arc<dyn RequestForwarder>)
    }

    async fn run_cancel(&self, ctx: &ServerContext, params: RunIdParams) -> Result<RunCancelResult, RpcError> {
        self.ran.lock().push((params.run_id.clone(), ctx.client_info().map(|info| info.name.clone())));
        if let Some(owner) = self.owner {
            return Err(RpcError::engine(
                ErrorCode::SessionHostedElsewhere,
                &format!("session `s1` is hosted by cluster node `{owner}`"),
                &[("session_id", Value::from("s1")), ("node", Value::from(owner))],
            ));
        }
        match params.run_id.as_str() {
            "missing" => Err(RpcError::engine(ErrorCode::RunNotFound, "no run `missing`", &[])),
            _ => Ok(RunCancelResult { cancelled: true }),
        }
    }
}

fn connect(server: &NatsServer, node: &str) -> Cluster {
    Cluster::connect(ClusterSettings::plain(&server.url(), node)).expect("connect to NATS")
}

/// A client's handshaken connection to `server`.
async fn client(server: Arc<Node>) -> (ServerConnection<Node>, OutboundStream) {
    let (connection, mut outbound) = ServerConnection::new(server, Default::default());
    let handshake = r#"{"jsonrpc":"2.0","id":0,"method":"handshake","params":{"protocol_version":20,"client_info":{"name":"cli on b"}}}"#;
    tokio::time::timeout(BOUND, connection.handle_text(handshake)).await.expect("handshake handled");
    tokio::time::timeout(BOUND, outbound.next()).await.expect("handshake reply").expect("open");
    (connection, outbound)
}

/// `run.cancel` of `run_id` under id `"x-1"`, and its reply.
async fn cancel(connection: &ServerConnection<Node>, outbound: &mut OutboundStream, run_id: &str) -> Value {
    let text = format!(r#"{{"jsonrpc":"2.0","id":"x-1","method":"run.cancel","params":{{"run_id": "{run_id}"}}}}"#);
    tokio::time::timeout(Duration::from_secs(40), connection.handle_text(&text)).await.expect("handled in time");
    let frame = tokio::time::timeout(BOUND, outbound.next()).await.expect("a reply").expect("open");
    serde_json::from_str(&frame).expect("JSON")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a test runtime")
}

#[test]
fn a_request_refused_on_b_is_answered_by_the_owner_a() {
    let nats = NatsServer::start();
    let (cluster_a, cluster_b) = (connect(&nats, "a"), connect(&nats, "b"));
    let node_a = Node::new(None, None);
    let node_b = Node::new(Some("a"), Some(NatsForwarder::new(cluster_b.clone())));
    runtime().block_on(async {
        let _serving: ForwardedServing = tokio::time::timeout(BOUND, serve_forwarded(&cluster_a, node_a.clone()))
            .await
            .expect("in time")
            .expect("serving");
        let (connection, mut outbound) = client(node_b.clone()).await;

        let reply = cancel(&connection, &mut outbound, "r1").await;
        assert_eq!(reply, serde_json::json!({"jsonrpc": "2.0", "id": "x-1", "result": {"cancelled": true}}));
        assert_eq!(*node_a.ran.lock(), vec![("r1".to_owned(), Some("cli on b".to_owned()))], "a ran it, as b's client");

        let reply = cancel(&connection, &mut outbound, "missing").await;
        assert_eq!(reply["id"], "x-1");
        assert_eq!(reply["error"]["data"]["code"], "run_not_found", "a's error, as a answered it");
    });
}

#[test]
fn a_refusal_on_the_owner_comes_back_as_it_is_without_a_second_forward() {
    let nats = NatsServer::start();
    let (cluster_a, cluster_b) = (connect(&nats, "a"), connect(&nats, "b"));
    // Each thinks the other hosts the session (the lease moved while the request travelled).
    let node_a = Node::new(Some("b"), Some(NatsForwarder::new(cluster_a.clone())));
    let node_b = Node::new(Some("a"), Some(NatsForwarder::new(cluster_b.clone())));
    runtime().block_on(async {
        let _serving_a =
            tokio::time::timeout(BOUND, serve_forwarded(&cluster_a, node_a.clone())).await.expect("in time");
        let _serving_b =
            tokio::time::timeout(BOUND, serve_forwarded(&cluster_b, node_b.clone())).await.expect("in time");
        let (connection, mut outbound) = client(node_b.clone()).await;
        let reply = cancel(&connection, &mut outbound, "r1").await;
        assert_eq!(reply["error"]["data"]["code"], "session_hosted_elsewhere");
        assert_eq!(reply["error"]["data"]["node"], "b", "a's refusal, naming b");
        assert_eq!(node_a.ran.lock().len(), 1, "a ran it once");
        assert_eq!(node_b.ran.lock().len(), 1, "b ran it once: no loop");
    });
}

#[test]
fn an_owner_that_is_down_or_silent_leaves_the_refusal_saying_it_is_not_reachable() {
    let nats = NatsServer::start();
    let cluster_b = connect(&nats, "b");
    runtime().block_on(async {
        // Nobody serves a's subject: NATS says so at once ("no responders").
        let node_b = Node::new(Some("a"), Some(NatsForwarder::new(cluster_b.clone())));
        let (connection, mut outbound) = client(node_b).await;
        let started = std::time::Instant::now();
        let reply = cancel(&connection, &mut outbound, "r1").await;
        assert!(started.elapsed() < Duration::from_secs(5), "no responders is known without waiting");
        let error = &reply["error"];
        assert_eq!((error["code"].clone(), error["data"]["node"].clone()), (Value::from(-32000), Value::from("a")));
        let detail = error["data"]["detail"].as_str().expect("a detail");
        assert!(detail.contains("node `a` is not reachable") && detail.contains("no node of that name"), "{detail}");

        // Something listens on a's subject and never answers: the request times out.
        let silent = cluster_b.client().clone();
        let subscriber = cluster_b
            .handle()
            .spawn(async move {
                let subscriber = silent.subscribe(troupe_cluster::names::node_request_subject("a")).await;
                silent.flush().await.map(|()| subscriber)
            })
            .await
            .expect("joined")
            .expect("flushed")
            .expect("subscribed");
        let forwarder = NatsForwarder::with_timeout(cluster_b.clone(), Duration::from_millis(300));
        let node_b = Node::new(Some("a"), Some(forwarder));
        let (connection, mut outbound) = client(node_b).await;
        let reply = cancel(&connection, &mut outbound, "r1").await;
        let detail = reply["error"]["data"]["detail"].as_str().expect("a detail").to_owned();
        assert!(detail.contains("not reachable") && detail.contains("did not answer within"), "{detail}");
        drop(subscriber);
    });
}

#[test]
fn the_owner_refuses_connection_scoped_methods_and_payloads_that_do_not_read() {
    let nats = NatsServer::start();
    let (cluster_a, cluster_b) = (connect(&nats, "a"), connect(&nats, "b"));
    let node_a = Node::new(None, None);
    runtime().block_on(async {
        let _serving = tokio::time::timeout(BOUND, serve_forwarded(&cluster_a, node_a.clone())).await.expect("in time");
        for (payload, detail) in [
            (r#"{"method":"events.subscribe","params":{"session_id":"s1"}}"#, "never forwarded"),
            (r#"{"method":"handshake","params":{"protocol_version":20}}"#, "never forwarded"),
            ("not json", "does not read"),
        ] {
            let client = cluster_b.client().clone();
            let asked = cluster_b.handle().spawn(async move {
                client.request(troupe_cluster::names::node_request_subject("a"), payload.into()).await
            });
            let reply = tokio::time::timeout(BOUND, asked).await.expect("in time").expect("joined").expect("answered");
            let reply: Value = serde_json::from_slice(&reply.payload).expect("JSON");
            assert_eq!(reply["error"]["code"], -32600, "{payload}");
            assert!(reply["error"]["data"]["detail"].as_str().expect("detail").contains(detail), "{reply}");
        }
        assert!(node_a.ran.lock().is_empty());
    });
}
