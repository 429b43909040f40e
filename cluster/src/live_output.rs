//! Live tool output across the cluster ([`LiveOutputShare`]) on plain NATS subjects, one per session
//! (`troupe.output.<session id>`): the hosting node publishes each chunk and each call's end, and every node whose
//! clients follow the session subscribes while they do.
//!
//! Plain NATS, not JetStream: the output is transient (what is durable of it travels with the events), a server
//! delivers a publisher's messages to a subscriber in the order they were published, and it drops them for a
//! subscriber too slow to take them, which the follower sees as a hole in the offsets. Publishing goes through a
//! bounded queue to a task on the cluster's runtime, so the session actor never waits for NATS; a full queue, or a
//! node cut off from NATS, drops the chunk rather than keep it for later (output sent late would arrive after the
//! call it belongs to has ended).
//!
//! A follow says when it is in place (after a round trip to its server, which handles a connection's messages in
//! order), so that a subscription is answered only once what is printed after its reply reaches it. On a NATS
//! cluster the publisher's server may learn of the interest a moment later: what it printed meanwhile is missed
//! like output printed before the subscription.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use troupe_protocol::types::tool_output::OutputStream;
use troupe_runtime::live_output_share::{LiveOutputShare, OutputDeliver, OutputFollow, SharedOutput};

use crate::connection::{Cluster, REQUEST_TIMEOUT};
use crate::names;

/// Messages waiting to be published; past this, chunks are dropped (the followers see the hole).
const PUBLISH_QUEUE: usize = 1024;

/// A request any JetStream-enabled server answers (its account's information): the round trip that tells a new
/// subscription is in place.
const ROUND_TRIP_SUBJECT: &str = "$JS.API.INFO";

/// This node's side of the cluster's live output.
#[derive(Debug)]
pub struct NatsLiveOutput {
    cluster: Cluster,
    queue: mpsc::Sender<(String, Vec<u8>)>,
}

impl NatsLiveOutput {
    /// Starts the publishing task on the cluster's runtime.
    pub fn start(cluster: Cluster) -> NatsLiveOutput {
        let (queue, mut queued) = mpsc::channel::<(String, Vec<u8>)>(PUBLISH_QUEUE);
        let publisher = cluster.clone();
        cluster.handle().spawn(async move {
            while let Some((subject, payload)) = queued.recv().await {
                if !publisher.is_connected() {
                    continue;
                }
                if let Err(error) = publisher.client().publish(subject, payload.into()).await {
                    tracing::debug!(%error, "could not publish a tool's live output");
                }
            }
        });
        NatsLiveOutput { cluster, queue }
    }
}

impl LiveOutputShare for NatsLiveOutput {
    fn publish(&self, session_id: &str, output: SharedOutput) {
        if !names::is_subject_token(session_id) {
            return;
        }
        let Ok(payload) = serde_json::to_vec(&WireOutput::from(output)) else { return };
        // Dropped when full: see the module doc.
        let _ = self.queue.try_send((names::output_subject(session_id), payload));
    }

    fn follow(&self, session_id: &str, mut deliver: OutputDeliver) -> OutputFollow {
        let (stop, mut stopped) = oneshot::channel::<()>();
        let (ready, readied) = oneshot::channel::<()>();
        let follow = OutputFollow { guard: Box::new(stop), ready: readied };
        if !names::is_subject_token(session_id) {
            return follow;
        }
        let (client, subject, session_id) =
            (self.cluster.client().clone(), names::output_subject(session_id), session_id.to_owned());
        self.cluster.handle().spawn(async move {
            // The client subscribes again by itself after a reconnect; what was published meanwhile is a hole.
            let mut messages = match client.subscribe(subject).await {
                Ok(messages) => messages,
                Err(error) => {
                    tracing::debug!(%session_id, %error, "could not follow a session's live output");
                    return;
                }
            };
            // NATS does not acknowledge a subscription, but a server handles a connection's messages in order: once
            // a request sent after it is answered, the server delivers what is published from then on.
            let answered =
                tokio::time::timeout(REQUEST_TIMEOUT, client.request(ROUND_TRIP_SUBJECT, Bytes::new())).await;
            if !matches!(answered, Ok(Ok(_))) {
                tracing::debug!(%session_id, "no round trip after following a session's live output");
            }
            let _ = ready.send(());
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    message = messages.next() => match message {
                        Some(message) => match serde_json::from_slice::<WireOutput>(&message.payload) {
                            Ok(output) => match output.try_into() {
                                Ok(output) => deliver(output),
                                Err(()) => tracing::debug!(%session_id, "a live output chunk was not base64"),
                            },
                            Err(error) => tracing::debug!(%session_id, %error, "an undecodable live output message"),
                        },
                        None => break,
                    },
                }
            }
            let _ = messages.unsubscribe().await;
        });
        follow
    }
}

/// [`SharedOutput`] as it travels: JSON, the bytes in base64.
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum WireOutput {
    Chunk { run_id: String, tool_call_id: String, stream: OutputStream, offset: u64, data: String },
    Ended { tool_call_id: String },
}

impl From<SharedOutput> for WireOutput {
    fn from(output: SharedOutput) -> WireOutput {
        match output {
            SharedOutput::Chunk { run_id, tool_call_id, stream, offset, data } => {
                WireOutput::Chunk { run_id, tool_call_id, stream, offset, data: BASE64.encode(data) }
            }
            SharedOutput::Ended { tool_call_id } => WireOutput::Ended { tool_call_id },
        }
    }
}

impl TryFrom<WireOutput> for SharedOutput {
    type Error = ();

    fn try_from(output: WireOutput) -> Result<SharedOutput, ()> {
        Ok(match output {
            WireOutput::Chunk { run_id, tool_call_id, stream, offset, data } => {
                let data = BASE64.decode(data).map_err(drop)?;
                SharedOutput::Chunk { run_id, tool_call_id, stream, offset, data }
            }
            WireOutput::Ended { tool_call_id } => SharedOutput::Ended { tool_call_id },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_and_an_end_travel_unchanged() {
        for output in [
            SharedOutput::Chunk {
                run_id: "r".into(),
                tool_call_id: "c".into(),
                stream: OutputStream::Stderr,
                offset: 7,
                data: vec![0, 159, 255, b'\n'],
            },
            SharedOutput::Ended { tool_call_id: "c".into() },
        ] {
            let encoded = serde_json::to_vec(&WireOutput::from(output.clone())).expect("encodes");
            let decoded: WireOutput = serde_json::from_slice(&encoded).expect("decodes");
            assert_eq!(SharedOutput::try_from(decoded), Ok(output));
        }
    }
}
