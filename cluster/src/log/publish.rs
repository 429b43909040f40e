//! One fenced publish of a log message: sent with the stream sequence the writer expects the subject's last
//! message to have, acknowledged by JetStream once a quorum of the stream's replicas stored it, and retried
//! unchanged when the acknowledgement does not come.
//!
//! A retry resends the same message with the same `Nats-Msg-Id` and the same expected sequence, so it cannot be
//! stored twice: within the stream's duplicate window JetStream answers a repeat with the first copy's sequence
//! (`duplicate: true`, which it checks before the expected sequence); beyond it, the expected sequence refuses
//! the repeat, and reading the subject's last message tells whether it is this writer's.
//!
//! An attempt is sent only while the client is connected: the client keeps what is published while it is
//! disconnected and sends it when it reconnects, so an append refused after its deadline would otherwise still
//! land later. Without a connection the append waits for one; refused with none sent, nothing of it can be stored.
//!
//! The message id names the writer as well as the batch (`<session>:<first seq>:<writer>`): a duplicate answer
//! then means that this very writer's message is stored, never another writer's batch that starts at the same
//! event sequence (which a retry would otherwise take for its own), nor an earlier life of a purged session.

use std::time::Duration;

use async_nats::jetstream::context::{Publish, PublishErrorKind};
use async_nats::jetstream::stream::{LastRawMessageErrorKind, Stream};
use tokio::time::Instant;

use super::format::{FIRST_SEQ, LAST_SEQ, MSG_ID, Outgoing};
use crate::connection::Cluster;
use crate::error::ClusterError;

/// How long an append keeps trying (a stream leader's election after a server dies takes a few seconds) before
/// it reports NATS unreachable.
pub const APPEND_DEADLINE: Duration = Duration::from_secs(15);
/// How long one attempt waits for its acknowledgement before the same message is sent again. Shorter than
/// [`crate::connection::REQUEST_TIMEOUT`]: a repeat costs nothing (it is stored once), and after a stream leader
/// dies the first attempt's acknowledgement never comes, so this is what a failover adds to an append.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// The pause between two attempts that failed at once (no responders while a leader is elected).
const RETRY_PAUSE: Duration = Duration::from_millis(250);
/// How often an append that waits for the connection to NATS to come back looks again.
const CONNECTION_POLL: Duration = Duration::from_millis(25);

/// `message` as it goes out under the id `msg_id`, fenced on `expected` (the stream sequence of the subject's
/// last message; 0 for none).
pub(super) fn build(message: &Outgoing, msg_id: &str, expected: u64) -> Publish {
    Publish::build()
        .payload(message.payload.clone())
        .message_id(msg_id)
        .expected_last_subject_sequence(expected)
        .header(FIRST_SEQ, message.first_seq.to_string())
        .header(LAST_SEQ, message.last_seq.to_string())
}

/// Publishes `publish` (whose message id is `msg_id`) to `subject` until JetStream acknowledges it, and returns
/// its stream sequence. `Fenced` when the subject's last message is not the expected one (another writer
/// appended); `Unreachable` when no acknowledgement came within [`APPEND_DEADLINE`].
pub(super) async fn fenced(
    cluster: &Cluster,
    stream: &Stream<()>,
    session_id: &str,
    subject: &str,
    publish: Publish,
    msg_id: &str,
) -> Result<u64, ClusterError> {
    let deadline = Instant::now() + APPEND_DEADLINE;
    let mut attempt = 0u32;
    let mut last_failure = String::new();
    let mut unreachable = true;
    while Instant::now() < deadline {
        if !cluster.is_connected() {
            last_failure = "not connected to NATS".to_owned();
            unreachable = true;
            tokio::time::sleep(CONNECTION_POLL.min(deadline.saturating_duration_since(Instant::now()))).await;
            continue;
        }
        attempt += 1;
        let limit = deadline.saturating_duration_since(Instant::now()).min(ATTEMPT_TIMEOUT);
        let sent = tokio::time::timeout(limit, async {
            cluster.jetstream().send_publish(subject.to_owned(), publish.clone()).await?.await
        })
        .await;
        match sent {
            // A duplicate is this writer's own earlier attempt (the message id is unique to it): stored once.
            Ok(Ok(ack)) => return Ok(ack.sequence),
            Ok(Err(error)) if error.kind() == PublishErrorKind::WrongLastSequence => {
                if attempt == 1 {
                    return Err(ClusterError::Fenced { session_id: session_id.to_owned() });
                }
                // An earlier attempt may have landed and moved the subject on: it did if the last message is it.
                match last_message_id(stream, subject).await {
                    Ok(Some((id, sequence))) if id == msg_id => return Ok(sequence),
                    Ok(_) => return Err(ClusterError::Fenced { session_id: session_id.to_owned() }),
                    Err(error) => last_failure = error,
                }
            }
            Ok(Err(error)) => {
                unreachable = matches!(
                    error.kind(),
                    PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe | PublishErrorKind::StreamNotFound
                );
                last_failure = error.to_string();
            }
            Err(_elapsed) => {
                unreachable = true;
                last_failure = format!("no acknowledgement within {limit:?}");
            }
        }
        tracing::debug!(session_id, attempt, failure = %last_failure, "append not acknowledged yet; retrying");
        let pause = RETRY_PAUSE.min(deadline.saturating_duration_since(Instant::now()));
        tokio::time::sleep(pause).await;
    }
    let outcome = if attempt == 0 {
        "none was sent, so nothing of it is stored"
    } else {
        "one sent before NATS went away may still be stored when it returns: a retry with the same client id answers \
         what was stored"
    };
    let detail = format!("{attempt} attempts in {APPEND_DEADLINE:?} ({outcome}), the last failure: {last_failure}");
    if unreachable {
        Err(ClusterError::Unreachable { what: "append to a session's log", detail })
    } else {
        Err(ClusterError::JetStream { what: "append to a session's log", detail })
    }
}

/// The message id and stream sequence of the subject's last message (`None`: the subject is empty), read from the
/// stream's leader.
async fn last_message_id(stream: &Stream<()>, subject: &str) -> Result<Option<(String, u64)>, String> {
    match stream.get_last_raw_message_by_subject(subject).await {
        Ok(message) => {
            let id = message.headers.get(MSG_ID).map(|value| value.as_str().to_owned()).unwrap_or_default();
            Ok(Some((id, message.sequence)))
        }
        Err(error) if error.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
        Err(error) => Err(format!("read the subject's last message: {error}")),
    }
}
