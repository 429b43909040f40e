//! What a [`Client`](super::Client) handle asks of its connection task (vocabulary, bottom layer): the
//! [`Command`]s sent over the task's channel and the reply channels they carry. Handles only send these; the
//! task and its parts answer them.

use tokio::sync::oneshot;

use super::error::ClientError;
use super::secrets::OutgoingText;

/// Where the raw text of a call's result (or its error) goes back to the caller, which decodes it.
pub(super) type CallReply = oneshot::Sender<Result<String, ClientError>>;

/// Where a consumer's `events.subscribe` learns its reply's `last_seq` (or its error).
pub(super) type SubscribeReply = oneshot::Sender<Result<u64, ClientError>>;

/// One request of a handle to the connection task.
pub(super) enum Command {
    /// Write the request `frame`, already encoded under `id`, and send its answer to `reply`.
    Call { id: u64, frame: OutgoingText, reply: CallReply },
    /// The caller stopped waiting for this call.
    Forget { id: u64 },
    /// Follow `session_id` from `cursor` (see `subscriptions`).
    Subscribe { session_id: String, cursor: Option<u64>, reply: SubscribeReply },
}
