//! Following a session's log from any node (the runtime's [`LogReplica::follow`](troupe_runtime::event_log::LogReplica)):
//! how a node offers its subscribers the events of a session another node hosts.
//!
//! A JetStream ordered push consumer on the session's subject, from the message holding the first event wanted
//! (found through the reader's index, [`LogReader`]): JetStream sends each stored message once, in stream order, and
//! the client makes the consumer again, from after the last message it got, when a sequence is skipped or the
//! connection comes back. Each message is decoded into its events; events at or before the last one delivered are
//! skipped (a consumer made again from the subject's start after a reconnect sends them again), and a message that
//! starts past the next event ends the follow with an error, since the follower cannot go on in order.
//!
//! The follow runs as a task on the cluster's runtime and calls `deliver` there; dropping its guard stops it, and it
//! deletes its consumer as it goes.

use async_nats::jetstream::consumer::DeliverPolicy;
use async_nats::jetstream::consumer::push::{OrderedConfig, OrderedErrorKind};
use futures::StreamExt;
use tokio::sync::oneshot;
use troupe_runtime::event_log::{FollowControl, FollowDeliver, FollowGuard};

use crate::error::ClusterError;
use crate::log::LogReader;

/// How long a stopping follow waits for its consumer's deletion.
const DELETE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(2);

/// Starts following `reader`'s session after event `after`, delivering to `deliver` until it says stop, the follow
/// fails (then `deliver` is given the error) or the guard is dropped.
pub(crate) fn follow(reader: LogReader, after: u64, mut deliver: FollowDeliver) -> FollowGuard {
    let (stop, stopped) = oneshot::channel();
    reader.cluster().handle().spawn(async move {
        if let Err(error) = follow_messages(&reader, after, &mut deliver, stopped).await {
            tracing::debug!(session_id = reader.session_id(), %error, "a follow of a session's log ended");
            deliver(Err(error.into_replica_error()));
        }
    });
    Box::new(Following(Some(stop)))
}

/// A running follow; dropping it stops the task.
struct Following(Option<oneshot::Sender<()>>);

impl Drop for Following {
    fn drop(&mut self) {
        if let Some(stop) = self.0.take() {
            let _ = stop.send(());
        }
    }
}

/// Delivers every event after `after`, in order; `Ok` when `deliver` said stop or `stopped` fired (the consumer is
/// deleted then, rather than left for the server to forget).
async fn follow_messages(
    reader: &LogReader,
    after: u64,
    deliver: &mut FollowDeliver,
    mut stopped: oneshot::Receiver<()>,
) -> Result<(), ClusterError> {
    let failed = |what: &'static str, error: &dyn std::fmt::Display| ClusterError::JetStream {
        what,
        detail: format!("session {}: {error}", reader.session_id()),
    };
    let start_sequence = reader.follow_start(after).await?;
    let stream = reader.stream().await?;
    let consumer = stream
        .create_consumer(OrderedConfig {
            deliver_subject: reader.cluster().client().new_inbox(),
            filter_subject: reader.subject().to_owned(),
            deliver_policy: DeliverPolicy::ByStartSequence { start_sequence },
            ..Default::default()
        })
        .await
        .map_err(|error| failed("follow a session's log", &error))?;
    let name = consumer.cached_info().name.clone();
    let mut messages = consumer.messages().await.map_err(|error| failed("follow a session's log", &error))?;
    let mut delivered = after;
    loop {
        let next = tokio::select! {
            next = messages.next() => next,
            _ = &mut stopped => break,
        };
        let Some(message) = next else {
            return Err(ClusterError::Unreachable {
                what: "follow a session's log",
                detail: "the consumer's subscription ended".into(),
            });
        };
        let message = match message {
            Ok(message) => message,
            // NATS is away: the client makes the consumer again, from after the last message, once it is back.
            Err(error) if error.kind() == OrderedErrorKind::MissingHeartbeat => continue,
            Err(error) => {
                return Err(ClusterError::Unreachable { what: "follow a session's log", detail: error.to_string() });
            }
        };
        let stream_seq = message.info().map_err(|error| failed("read a followed message", &error))?.stream_sequence;
        let headers = message.headers.clone().unwrap_or_default();
        let (first, last, events) = reader.decode(stream_seq, &headers, &message.payload)?;
        if last <= delivered {
            continue;
        }
        if first > delivered + 1 {
            return Err(ClusterError::Corrupt {
                what: "a followed session's log",
                detail: format!(
                    "session {}: stream message {stream_seq} starts at event {first} where event {} was next",
                    reader.session_id(),
                    delivered + 1
                ),
            });
        }
        let fresh: Vec<_> = events.into_iter().filter(|entry| entry.seq > delivered).collect();
        delivered = last;
        if deliver(Ok(fresh)) == FollowControl::Stop {
            break;
        }
    }
    // Best effort: a consumer the client made again after a reconnect has another name, and the server forgets it
    // once it has had no interest for a while.
    drop(messages);
    let _ = tokio::time::timeout(DELETE_DEADLINE, stream.delete_consumer(&name)).await;
    Ok(())
}
