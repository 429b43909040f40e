//! Live tool output across a cluster: the node that hosts a session publishes each chunk of its running tools'
//! output, and a node whose clients follow the session from there hears it, so `events.tool_output_*` reach a
//! follower on any node. Implemented by the cluster (`cluster/`, on plain NATS subjects: transient, like the output
//! itself); a single node has none.
//!
//! Nothing here is durable and nothing waits: a chunk that cannot be sent at once (NATS unreachable, the
//! publisher's queue full) is dropped, and a follower sees the hole by its offsets and tells its clients with
//! `events.tool_output_gap`, as a local subscriber with a full queue is told. What is durable of a tool's output
//! (its first 64 KiB as `tool_call_progress` events, its result) travels with the session's events.

use troupe_protocol::types::tool_output::OutputStream;

/// One message of a session's live output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SharedOutput {
    /// Bytes `offset..offset + data.len()` of one stream of a running call.
    Chunk { run_id: String, tool_call_id: String, stream: OutputStream, offset: u64, data: Vec<u8> },
    /// The call ended: no more output comes for it.
    Ended { tool_call_id: String },
}

/// Where [`LiveOutputShare::follow`] delivers; called on the share's own threads, so it must not block.
pub type OutputDeliver = Box<dyn FnMut(SharedOutput) + Send>;

/// A running follow of a session's live output; dropping it stops the follow.
pub type OutputFollowGuard = Box<dyn Send>;

/// A follow of a session's live output, as [`LiveOutputShare::follow`] starts it.
pub struct OutputFollow {
    /// Keeps the follow running; dropping it stops the follow.
    pub guard: OutputFollowGuard,
    /// Ends once the follow hears what is published from then on (its subscription is in place where it is read),
    /// or once it cannot (the sender dropped): a subscriber told it follows before then could miss output.
    pub ready: tokio::sync::oneshot::Receiver<()>,
}

/// Live output as the engine shares it.
pub trait LiveOutputShare: Send + Sync + std::fmt::Debug + 'static {
    /// Sends one message of `session_id`'s output to the nodes that follow it. Never blocks; may drop.
    fn publish(&self, session_id: &str, output: SharedOutput);
    /// Delivers every later message of `session_id`'s output, in the order the hosting node published it, until
    /// the guard is dropped. Messages may be missing (see the module doc), never reordered.
    fn follow(&self, session_id: &str, deliver: OutputDeliver) -> OutputFollow;
}
