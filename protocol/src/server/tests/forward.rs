//! Forwarding a request refused with `session_hosted_elsewhere` to the node named in the refusal: once, with the
//! client's params byte for byte, answered under the client's id; never for connection-scoped methods; and not at
//! all (not even consulted) when nothing was refused that way.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use serde_json::Value;
use serde_json::value::RawValue;

use super::limits;
use crate::error::RpcError;
use crate::error_code::ErrorCode;
use crate::server::{
    ForwardFailure, ForwardedRequest, OutboundStream, RequestForwarder, ServerConnection, ServerContext, ServerProtocol,
};
use crate::types::common::Empty;
use crate::types::events::{EventsSubscribeParams, EventsSubscribeResult};
use crate::types::run::{RunCancelResult, RunIdParams};
use crate::types::session::{SessionListParams, SessionListResult};

/// What a fake forwarder answers.
#[derive(Clone)]
enum Answer {
    Result(&'static str),
    Error(RpcError),
    Unreachable,
}

/// One forwarded request as the forwarder saw it: node, method, params text, client_info name.
type Sent = (String, String, Option<String>, Option<String>);

/// Records what it is asked to forward and answers [`Answer`].
struct FakeForwarder {
    answer: Answer,
    sent: Mutex<Vec<Sent>>,
}

impl RequestForwarder for FakeForwarder {
    fn forward(
        &self,
        node: &str,
        request: ForwardedRequest,
    ) -> BoxFuture<'static, Result<Box<RawValue>, ForwardFailure>> {
        let ForwardedRequest { method, params, client_info, .. } = request;
        let params = params.map(|params| params.get().to_owned());
        self.sent.lock().push((node.to_owned(), method, params, client_info.map(|info| info.name.clone())));
        let answer = match &self.answer {
            Answer::Result(json) => Ok(RawValue::from_string((*json).to_owned()).expect("valid JSON")),
            Answer::Error(error) => Err(ForwardFailure::Answered(error.clone())),
            Answer::Unreachable => Err(ForwardFailure::Unreachable { detail: "no responders".to_owned() }),
        };
        futures::future::ready(answer).boxed()
    }
}

/// Refuses `run.cancel` and `events.subscribe` because node `a` hosts the session; answers `session.list`.
struct Refuser {
    forwarder: Option<Arc<FakeForwarder>>,
    /// How many times the connection asked for the forwarder.
    asked: AtomicUsize,
}

fn hosted_on_a() -> RpcError {
    RpcError::engine(
        ErrorCode::SessionHostedElsewhere,
        "session `s1` is hosted by cluster node `a`",
        &[("session_id", Value::from("s1")), ("node", Value::from("a"))],
    )
}

impl ServerProtocol for Refuser {
    fn forwarder(&self) -> Option<Arc<dyn RequestForwarder>> {
        self.asked.fetch_add(1, Ordering::Relaxed);
        self.forwarder.clone().map(|forwarder| forwarder as Arc<dyn RequestForwarder>)
    }

    async fn run_cancel(&self, _: &ServerContext, _: RunIdParams) -> Result<RunCancelResult, RpcError> {
        Err(hosted_on_a())
    }

    async fn events_subscribe(
        &self,
        _: &ServerContext,
        _: EventsSubscribeParams,
    ) -> Result<EventsSubscribeResult, RpcError> {
        Err(hosted_on_a())
    }

    async fn session_list(&self, _: &ServerContext, _: SessionListParams) -> Result<SessionListResult, RpcError> {
        Ok(SessionListResult { sessions: Vec::new() })
    }

    async fn usage_global(
        &self,
        _: &ServerContext,
        _: Empty,
    ) -> Result<crate::types::usage::GlobalUsageResult, RpcError> {
        Err(RpcError::internal("some other failure"))
    }
}

/// A handshaken connection to a [`Refuser`] with `answer` as its forwarder (`None`: no forwarder).
async fn connect(answer: Option<Answer>) -> (ServerConnection<Refuser>, OutboundStream, Arc<Refuser>) {
    let forwarder = answer.map(|answer| Arc::new(FakeForwarder { answer, sent: Mutex::new(Vec::new()) }));
    let server = Arc::new(Refuser { forwarder, asked: AtomicUsize::new(0) });
    let (connection, mut outbound) = ServerConnection::new(server.clone(), limits(64, 1 << 20));
    let handshake = r#"{"jsonrpc":"2.0","id":0,"method":"handshake","params":{"protocol_version":20,"client_info":{"name":"test cli"}}}"#;
    connection.handle_text(handshake).await;
    // The fake has no handshake handler (it answers not_implemented), but the connection counts as handshaken.
    next_reply(&mut outbound).await;
    (connection, outbound, server)
}

async fn next_reply(outbound: &mut OutboundStream) -> Value {
    let frame = tokio::time::timeout(Duration::from_secs(5), outbound.next())
        .await
        .expect("a reply within 5 s")
        .expect("the connection is open");
    serde_json::from_str(&frame).expect("a JSON reply")
}

/// Sends `text` and returns its reply.
async fn ask(connection: &ServerConnection<Refuser>, outbound: &mut OutboundStream, text: &str) -> Value {
    tokio::time::timeout(Duration::from_secs(5), connection.handle_text(text)).await.expect("handled within 5 s");
    next_reply(outbound).await
}

fn sent(server: &Refuser) -> Vec<Sent> {
    server.forwarder.as_ref().map(|forwarder| forwarder.sent.lock().clone()).unwrap_or_default()
}

const CANCEL: &str = r#"{"jsonrpc":"2.0","id":"abc-7","method":"run.cancel","params":{ "run_id" :  "r1" }}"#;

#[tokio::test]
async fn a_refused_request_is_forwarded_once_with_its_params_and_answered_under_the_clients_id() {
    let (connection, mut outbound, server) = connect(Some(Answer::Result(r#"{"cancelled":true}"#))).await;
    let reply = ask(&connection, &mut outbound, CANCEL).await;
    assert_eq!(reply, serde_json::json!({"jsonrpc": "2.0", "id": "abc-7", "result": {"cancelled": true}}));
    let sent = sent(&server);
    assert_eq!(sent.len(), 1, "forwarded exactly once");
    let (node, method, params, client_info) = &sent[0];
    assert_eq!(node, "a");
    assert_eq!(method, "run.cancel");
    assert_eq!(params.as_deref(), Some(r#"{ "run_id" :  "r1" }"#), "the params byte for byte");
    assert_eq!(client_info.as_deref(), Some("test cli"));
}

#[tokio::test]
async fn the_owners_error_is_the_answer_even_another_refusal_which_is_not_forwarded_again() {
    let mut owners = hosted_on_a();
    owners.data.as_mut().expect("data")["node"] = Value::from("c");
    let (connection, mut outbound, server) = connect(Some(Answer::Error(owners.clone()))).await;
    let reply = ask(&connection, &mut outbound, CANCEL).await;
    assert_eq!(reply["id"], "abc-7");
    assert_eq!(serde_json::from_value::<RpcError>(reply["error"].clone()).expect("an error"), owners);
    assert_eq!(sent(&server).len(), 1, "no second forward to node c");
}

#[tokio::test]
async fn an_unreachable_owner_leaves_the_refusal_saying_so() {
    let (connection, mut outbound, _server) = connect(Some(Answer::Unreachable)).await;
    let reply = ask(&connection, &mut outbound, CANCEL).await;
    let error = &reply["error"];
    assert_eq!(error["code"], -32000);
    assert_eq!(error["data"]["code"], "session_hosted_elsewhere");
    assert_eq!(error["data"]["node"], "a");
    let detail = error["data"]["detail"].as_str().expect("a detail");
    assert!(detail.contains("node `a` is not reachable") && detail.contains("no responders"), "{detail}");
}

#[tokio::test]
async fn connection_scoped_methods_are_never_forwarded() {
    let (connection, mut outbound, server) = connect(Some(Answer::Result("{}"))).await;
    let subscribe = r#"{"jsonrpc":"2.0","id":3,"method":"events.subscribe","params":{"session_id":"s1"}}"#;
    let reply = ask(&connection, &mut outbound, subscribe).await;
    assert_eq!(reply["error"]["data"]["code"], "session_hosted_elsewhere");
    assert!(sent(&server).is_empty());
}

#[tokio::test]
async fn a_connection_that_never_forwards_answers_the_refusal_as_it_is() {
    let (connection, mut outbound, server) = connect(Some(Answer::Result(r#"{"cancelled":true}"#))).await;
    connection.never_forward();
    let reply = ask(&connection, &mut outbound, CANCEL).await;
    assert_eq!(reply["error"]["data"]["node"], "a");
    assert!(sent(&server).is_empty());
}

#[tokio::test]
async fn without_a_refusal_to_forward_the_forwarder_is_not_even_asked() {
    for answer in [None, Some(Answer::Result("{}"))] {
        let (connection, mut outbound, server) = connect(answer).await;
        let list = r#"{"jsonrpc":"2.0","id":1,"method":"session.list","params":{}}"#;
        assert!(ask(&connection, &mut outbound, list).await.get("result").is_some());
        let usage = r#"{"jsonrpc":"2.0","id":2,"method":"usage.global","params":{}}"#;
        assert_eq!(ask(&connection, &mut outbound, usage).await["error"]["code"], -32603);
        assert_eq!(server.asked.load(Ordering::Relaxed), 0);
    }
    // With no forwarder, the refusal itself is the answer.
    let (connection, mut outbound, server) = connect(None).await;
    let reply = ask(&connection, &mut outbound, CANCEL).await;
    assert_eq!(reply["error"]["data"]["node"], "a");
    assert_eq!(server.asked.load(Ordering::Relaxed), 1);
}
