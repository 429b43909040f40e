//! Unit tests of the server session layer, by concern.

mod budget;
mod forward;
mod handle;
mod observer;
mod queue;
mod replay;
mod sinks;

use std::sync::Arc;

use super::context::{ReplyGroup, ServerContext};
use super::{OutboundStream, ServerConnection, ServerLimits, ServerProtocol};

/// Answers nothing; the queue, the sinks and the budget are under test.
pub(super) struct Nothing;
impl ServerProtocol for Nothing {}

/// A connection with `limits`, its outbound stream, and a request context of a fresh reply group.
pub(super) fn connection(limits: ServerLimits) -> (ServerConnection<Nothing>, OutboundStream, ServerContext) {
    let (connection, outbound) = ServerConnection::new(Arc::new(Nothing), limits);
    let ctx = context(&connection);
    (connection, outbound, ctx)
}

/// Another request's context on `connection`.
pub(super) fn context(connection: &ServerConnection<Nothing>) -> ServerContext {
    ServerContext { shared: connection.shared.clone(), group: Arc::new(ReplyGroup::default()) }
}

pub(super) fn limits(outbound_queue: usize, outbound_queue_bytes: usize) -> ServerLimits {
    ServerLimits { max_in_flight: 4, outbound_queue, outbound_queue_bytes, ..ServerLimits::default() }
}
