//! Request correlation. Every request the connection task writes is registered under its id in `pending`
//! before it goes out, whether a consumer's call, an `events.subscribe` or the handshake on a re-established
//! connection; an answer is matched by that id alone, so replies may come in any order. A consumer's call made
//! while the connection is down waits in `waiting` until the new connection is handshaken.

use tokio::sync::oneshot;

use super::command::SubscribeReply;
use super::error::ClientError;
use super::handshake::check_handshake_result;
use super::secrets::OutgoingText;
use super::subscriptions::decode_subscribe_result;
use super::task::ConnectionTask;
use crate::error::RpcError;
use crate::transport::Transport;
use crate::types::runtime::HandshakeResult;

/// A request that was written and awaits its answer.
pub(super) enum Pending {
    /// A consumer's call: the raw text of its result goes back to the caller, which decodes it.
    Call(oneshot::Sender<Result<String, ClientError>>),
    /// An `events.subscribe` sent by the task; `reply` is set when a consumer asked for it.
    Subscribe { session_id: String, epoch: u64, reply: Option<SubscribeReply> },
    /// The handshake on a re-established connection.
    Handshake,
}

/// A consumer's call made while the connection is down; written once it is back.
pub(super) struct WaitingCall {
    pub(super) id: u64,
    pub(super) frame: OutgoingText,
    pub(super) reply: oneshot::Sender<Result<String, ClientError>>,
}

impl<T: Transport> ConnectionTask<T> {
    /// A consumer's call: written now if the connection is ready, else parked until it is.
    pub(super) fn queue_call(
        &mut self,
        id: u64,
        frame: OutgoingText,
        reply: oneshot::Sender<Result<String, ClientError>>,
    ) {
        if self.link_ready() {
            self.pending.insert(id, Pending::Call(reply));
            self.outgoing.push_back(frame);
        } else {
            self.waiting.push_back(WaitingCall { id, frame, reply });
        }
    }

    /// The caller stopped waiting for call `id`.
    pub(super) fn forget_call(&mut self, id: u64) {
        if matches!(self.pending.get(&id), Some(Pending::Call(_))) {
            self.pending.remove(&id);
        }
        self.waiting.retain(|call| call.id != id);
    }

    pub(super) fn handle_response(&mut self, id: u64, outcome: Result<&str, RpcError>) {
        let Some(pending) = self.pending.remove(&id) else {
            tracing::debug!(id, "ignoring a response to an unknown request id");
            return;
        };
        match pending {
            Pending::Call(reply) => {
                let _ = reply.send(outcome.map(str::to_owned).map_err(ClientError::Rpc));
            }
            Pending::Subscribe { session_id, epoch, reply } => {
                let decoded = outcome.map_err(ClientError::Rpc).and_then(decode_subscribe_result);
                self.subscribe_answered(session_id, epoch, reply, decoded);
            }
            Pending::Handshake => {
                let checked = outcome
                    .map_err(ClientError::Rpc)
                    .and_then(|raw| {
                        serde_json::from_str::<HandshakeResult>(raw)
                            .map_err(|error| ClientError::Decode(error.to_string()))
                    })
                    .and_then(|result| check_handshake_result(&result));
                self.reconnect_handshaken(checked);
            }
        }
    }
}
