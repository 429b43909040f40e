//! Frames in, replies out: admission (the handshake gate and the in-flight limit, decided in arrival order),
//! dispatch to the [`ServerProtocol`] implementation, and queueing of each frame's reply.

use crate::error_code::ErrorCode;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytestring::ByteString;
use futures::FutureExt;
use parking_lot::Mutex;
use serde_json::value::RawValue;

use super::budget::ReplyBudget;
use super::channel::GatedChannel;
use super::context::{ReplyGroup, ServerContext};
use super::forward::{ForwardFailure, ForwardedRequest, forward_target, unreachable};
use super::observer::{HandshakeOutcome, SharedObserver, no_observer};
use super::outbound::{OutboundQueue, OutboundStream};
use super::{ServerLimits, ServerProtocol};
use crate::error::RpcError;
use crate::jsonrpc::{Frame, IncomingRequest, Method, RawId, encode_error_response};
use crate::methods::dispatch;
use crate::transport::MessageFrame;
use crate::types::runtime::{ClientInfo, HandshakeParams, PROTOCOL_VERSION};

static NEXT_CONNECTION_ID: AtomicU64 = AtomicU64::new(1);

/// State shared by a connection, its request contexts and its sinks.
pub(super) struct ConnectionShared {
    pub(super) id: u64,
    pub(super) limits: ServerLimits,
    handshaken: AtomicBool,
    in_flight: AtomicUsize,
    pub(super) queue: OutboundQueue,
    pub(super) budget: Arc<ReplyBudget>,
    /// The current subscription of this connection to each session. Subscribing again replaces it.
    pub(super) subscriptions: Mutex<HashMap<Arc<str>, Arc<GatedChannel>>>,
    /// The named tool-output subscriptions of this connection, by the client's name for each.
    pub(super) output_subscriptions: Mutex<HashMap<String, Arc<GatedChannel>>>,
    /// Told about handshakes, requests, drops and gaps (the daemon's metrics).
    pub(super) observer: SharedObserver,
    /// The `client_info` of the connection's handshake (the latest accepted one), for presence lists.
    pub(super) client_info: Mutex<Option<Arc<ClientInfo>>>,
    /// What the client proved at the upgrade; set once by the transport before any frame, else the token.
    pub(super) authority: std::sync::OnceLock<Authority>,
    /// Whether a request refused because another node hosts its session is sent on to that node (when the server
    /// has a forwarder). Off on the connections that run requests forwarded from other nodes: forwarded once.
    forwards: AtomicBool,
}

/// What a connection's client proved when it connected, for the few methods that need more than being connected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Authority {
    /// The daemon's bearer token (CLI, scripts, the shared client, in-process transports).
    Token,
    /// A browser session of the daemon's web console (its cookie and page key), which may not mint more sign-ins.
    BrowserSession,
}

impl ConnectionShared {
    pub(super) fn is_closed(&self) -> bool {
        self.queue.is_closed()
    }

    /// Closes the connection and frees what it holds: queued frames, the side list, its subscriptions (and the
    /// frames they held back), and wakes every reply, replay and reservation waiting on it.
    pub(super) fn close(&self) {
        self.queue.close();
        self.budget.close();
        let subscriptions = std::mem::take(&mut *self.subscriptions.lock());
        for channel in subscriptions.into_values() {
            channel.close();
        }
        let outputs = std::mem::take(&mut *self.output_subscriptions.lock());
        for channel in outputs.into_values() {
            channel.close();
        }
    }
}

/// One connection's protocol state. Cheap to clone; all clones drive the same connection.
pub struct ServerConnection<S> {
    server: Arc<S>,
    pub(super) shared: Arc<ConnectionShared>,
}

impl<S> Clone for ServerConnection<S> {
    fn clone(&self) -> Self {
        ServerConnection { server: self.server.clone(), shared: self.shared.clone() }
    }
}

impl<S> ServerConnection<S> {
    /// Records what the client proved at the upgrade. Call it before feeding any frame; the first call wins, and a
    /// connection never told is [`Authority::Token`].
    pub fn set_authority(&self, authority: Authority) {
        let _ = self.shared.authority.set(authority);
    }

    /// Makes this connection answer every refusal as it is, never forwarding it to another node: for the
    /// connections that run requests other nodes forwarded here, so that a request is forwarded at most once.
    pub fn never_forward(&self) {
        self.shared.forwards.store(false, Ordering::Release);
    }
}

impl<S: ServerProtocol> ServerConnection<S> {
    /// A new connection and the stream of frames it will send.
    pub fn new(server: Arc<S>, limits: ServerLimits) -> (Self, OutboundStream) {
        Self::with_observer(server, limits, no_observer())
    }

    /// [`new`](Self::new), reporting what happens on the connection to `observer`.
    pub fn with_observer(server: Arc<S>, limits: ServerLimits, observer: SharedObserver) -> (Self, OutboundStream) {
        let shared = Arc::new(ConnectionShared {
            id: NEXT_CONNECTION_ID.fetch_add(1, Ordering::Relaxed),
            limits,
            handshaken: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            queue: OutboundQueue::new(limits.outbound_queue, limits.outbound_queue_bytes),
            budget: ReplyBudget::new(limits.reply_budget_bytes),
            subscriptions: Mutex::new(HashMap::new()),
            output_subscriptions: Mutex::new(HashMap::new()),
            observer,
            client_info: Mutex::new(None),
            authority: std::sync::OnceLock::new(),
            forwards: AtomicBool::new(true),
        });
        server.connected(shared.id);
        let outbound = OutboundStream { shared: shared.clone() };
        (ServerConnection { server, shared }, outbound)
    }

    pub fn connection_id(&self) -> u64 {
        self.shared.id
    }

    /// Processes one inbound frame completely: its reply (if any) and whatever it unblocks are queued when the
    /// returned future finishes. Frames may be processed concurrently; the handshake and gating decisions are
    /// taken in arrival order, before the first await.
    pub fn handle_frame(&self, frame: MessageFrame) -> impl Future<Output = ()> + Send + 'static + use<S> {
        self.handle_text(&frame.into_text())
    }

    /// [`handle_frame`](Self::handle_frame) of a text frame the caller keeps (the returned future does not borrow
    /// it: what a request needs of it is copied before this returns).
    pub fn handle_text(&self, text: &str) -> impl Future<Output = ()> + Send + 'static + use<S> {
        self.handle_forwarded_text(text, None)
    }

    /// [`handle_text`](Self::handle_text) of a frame another node forwarded on behalf of `caller` (its name for the
    /// client's connection, which the frame's requests see as [`ServerContext::forwarded_caller`]).
    pub fn handle_forwarded_text(
        &self,
        text: &str,
        caller: Option<&str>,
    ) -> impl Future<Output = ()> + Send + 'static + use<S> {
        let this = self.clone();
        let group = Arc::new(ReplyGroup::sent_by(caller.map(Arc::from)));
        // Validation and gating happen here, synchronously, so that a pipelined `handshake` followed by another
        // method is gated in the order the client sent them. No handler holds the frame's text.
        let work = match crate::jsonrpc::parse_frame(text) {
            Err(error) => Work::Immediate(encode_error_response(&RawId::null(), &error)),
            Ok(Frame::Batch(members)) if members.is_empty() => Work::Immediate(encode_error_response(
                &RawId::null(),
                &RpcError::invalid_request("an empty batch is not a valid request"),
            )),
            Ok(Frame::Batch(members)) => {
                Work::Batch(members.into_iter().map(|member| this.admit(member.get(), &group)).collect())
            }
            Ok(Frame::Single(member)) => Work::Single(this.admit(member, &group)),
        };
        async move {
            let reply = match work {
                Work::Immediate(reply) => Some(reply),
                Work::Single(admitted) => this.run(admitted).await,
                Work::Batch(members) => {
                    let replies: Vec<Option<String>> =
                        futures::future::join_all(members.into_iter().map(|member| this.run(member))).await;
                    let replies: Vec<String> = replies.into_iter().flatten().collect();
                    (!replies.is_empty()).then(|| format!("[{}]", replies.join(",")))
                }
            };
            if let Some(reply) = reply
                && this.shared.queue.push(ByteString::from(reply)).await.is_err()
            {
                // The connection is gone; dropping the group closes what it opened and frees its reservations.
                return;
            }
            group.reply_queued();
            group.release(&this.shared).await;
        }
    }

    /// Validates one request object and decides, in arrival order, whether it may run.
    fn admit(&self, member: &str, group: &Arc<ReplyGroup>) -> Admitted {
        let request = match crate::jsonrpc::parse_request(member) {
            Ok(request) => request,
            Err((id, error)) => return Admitted::Reply(encode_error_response(&id, &error)),
        };
        let observed = |error: RpcError| {
            self.shared.observer.request_finished(request.method_label(), Err(&error), None);
            match &request.id {
                None => Admitted::Nothing,
                Some(id) => Admitted::Reply(encode_error_response(id, &error)),
            }
        };
        if request.method == crate::methods::method::Handshake::NAME {
            match check_handshake(request.params.as_deref()) {
                Ok(params) => *self.shared.client_info.lock() = params.client_info.map(Arc::new),
                Err(error) => {
                    self.shared.observer.handshake(HandshakeOutcome::Refused);
                    return observed(error);
                }
            }
            self.shared.handshaken.store(true, Ordering::Release);
        } else if !self.shared.handshaken.load(Ordering::Acquire) {
            return observed(RpcError::handshake_required(&request.method));
        }
        let limit = self.shared.limits.max_in_flight;
        if self.shared.in_flight.fetch_add(1, Ordering::AcqRel) >= limit {
            self.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
            return observed(RpcError::overloaded(limit));
        }
        let ctx = ServerContext { shared: self.shared.clone(), group: group.clone() };
        Admitted::Dispatch { request, ctx }
    }

    /// Runs an admitted request to its encoded reply (`None` for a notification).
    async fn run(&self, admitted: Admitted) -> Option<String> {
        match admitted {
            Admitted::Nothing => None,
            Admitted::Reply(reply) => Some(reply),
            Admitted::Dispatch { request, ctx } => {
                let started = Instant::now();
                // The table's name, found when the request was read: the span and the observer label it with it.
                let method = request.method_label();
                let span = super::request_span::request_span(method, request.params.as_deref());
                let IncomingRequest { id, method: name, params } = request;
                let work = async {
                    // The params are lent to the handler, not moved: a refusal to forward still has them, and a
                    // request that is not forwarded costs no copy.
                    let result = dispatch(&*self.server, &ctx, &name, params.as_deref(), id.as_ref()).await;
                    match result {
                        // Rare (a session another node hosts): boxed, so that it does not size every request.
                        Err(refusal) => {
                            Box::pin(self.forward(&ctx, refusal, name.into_owned(), params, id.as_ref())).await
                        }
                        done => done,
                    }
                };
                let outcome =
                    tracing::Instrument::instrument(AssertUnwindSafe(work).catch_unwind(), span.clone()).await;
                let _in_request = span.enter();
                self.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                let result = outcome.unwrap_or_else(|_| {
                    tracing::error!(method, "a request handler panicked");
                    Err(RpcError::internal(&format!(
                        "the handler of `{method}` failed unexpectedly; the daemon's log has the details"
                    )))
                });
                let elapsed = started.elapsed();
                self.observe(method, result.as_ref().map(|_| ()), elapsed);
                super::request_span::log_end(result.as_ref().map(|_| ()), elapsed);
                match result {
                    Ok(reply) => reply,
                    Err(error) => id.map(|id| encode_error_response(&id, &error)),
                }
            }
        }
    }
}

impl<S: ServerProtocol> ServerConnection<S> {
    /// Sends a request refused because another node hosts its session on to that node, once, and returns that
    /// node's answer as this request's; any other refusal (or one this connection may not forward) as it is.
    async fn forward(
        &self,
        ctx: &ServerContext,
        refusal: RpcError,
        method: String,
        params: Option<Box<RawValue>>,
        id: Option<&RawId>,
    ) -> Result<Option<String>, RpcError> {
        if !self.shared.forwards.load(Ordering::Acquire) {
            return Err(refusal);
        }
        let Some(node) = forward_target(&method, &refusal) else { return Err(refusal) };
        let Some(forwarder) = self.server.forwarder() else { return Err(refusal) };
        let node = node.to_owned();
        let caller = Some(self.server.connection_label(ctx.connection_id()));
        let request = ForwardedRequest { method, params, client_info: ctx.client_info(), caller };
        match forwarder.forward(&node, request).await {
            Ok(result) => id.map(|id| crate::jsonrpc::encode_result_for(id, &result)).transpose(),
            Err(ForwardFailure::Answered(error)) => Err(error),
            Err(ForwardFailure::Unreachable { detail }) => Err(unreachable(refusal, &node, &detail)),
        }
    }
}

impl<S> ServerConnection<S> {
    /// Reports a dispatched request; `method` is its label (the table's name, or `unknown`).
    fn observe(&self, method: &'static str, result: Result<(), &RpcError>, elapsed: Duration) {
        let observer = &self.shared.observer;
        if method == crate::methods::method::Handshake::NAME {
            observer.handshake(if result.is_ok() { HandshakeOutcome::Accepted } else { HandshakeOutcome::Refused });
        }
        observer.request_finished(method, result, Some(elapsed));
    }
}

enum Work {
    Immediate(String),
    Single(Admitted),
    Batch(Vec<Admitted>),
}

enum Admitted {
    /// A notification that is dropped (before the handshake, or over the in-flight limit).
    Nothing,
    /// An error reply decided without dispatching.
    Reply(String),
    Dispatch {
        request: IncomingRequest,
        ctx: ServerContext,
    },
}

/// Decodes and checks the handshake's params, so that a bad `client_info` is refused like a bad version: before
/// the connection counts as handshaken.
fn check_handshake(params: Option<&RawValue>) -> Result<HandshakeParams, RpcError> {
    let params: HandshakeParams = crate::jsonrpc::decode_params("handshake", params)?;
    if let Some(client_info) = &params.client_info
        && let Err(detail) = client_info.validate()
    {
        return Err(RpcError::invalid_params_typed(ErrorCode::InvalidClientInfo, &detail, &[]));
    }
    if params.protocol_version != PROTOCOL_VERSION {
        return Err(RpcError::invalid_params_typed(
            ErrorCode::UnsupportedProtocolVersion,
            &format!(
                "this daemon speaks protocol {PROTOCOL_VERSION} only; the client asked for {}",
                params.protocol_version
            ),
            &[("supported", serde_json::json!([PROTOCOL_VERSION]))],
        ));
    }
    Ok(params)
}
