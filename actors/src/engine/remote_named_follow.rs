//! `tool_output.subscribe` on a cluster node for a session another node hosts: the subscription is served here,
//! as `events.subscribe` is for such a session (`remote_follow.rs`), from the cluster's replica of the log and the
//! hosting node's live output. What its subscriber is sent is decided by `remote_named_output.rs`.
//!
//! In order, so that nothing printed after the reply is missed: the session's live output is heard first (its
//! follow in place, waited for at most [`OUTPUT_READY_WITHIN`]), then the call's record is read from the log
//! (`call_record.rs`): no start in the log is `tool_call_not_found`, as on the hosting node. A call that ended is
//! served whole from the record, and the reply says `running: false`. A running call is sent what is known of it
//! (before the reply, which the connection's gate keeps in order), then the log is followed from the last event
//! read, for the durable chunks and the call's end. A task holds both follows until the subscription is over (its
//! end sent) or closed (unsubscribed, replaced, or its connection gone: looked at every [`CLOSED_POLL`] and at
//! each delivery), then drops them, which ends the NATS subscriptions. A follow of the log that fails is started
//! again from its last event.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::Notify;
use troupe_protocol::server::OutputSink;
use troupe_runtime::event_log::{FollowControl, FollowGuard, LogEntry, LogReplica, ReplicaError};
use troupe_runtime::live_output_share::{OutputDeliver, OutputFollow, OutputFollowGuard};

use super::Engine;
use super::call_record::{CallRecord, read_call_event, read_call_record, read_record_on};
use super::remote_follow::{CLOSED_POLL, OUTPUT_READY_WITHIN, blocking};
use super::remote_named_output::{NamedTarget, Phase, RemoteNamedOutput};
use crate::error::EngineError;

impl Engine {
    /// Subscribes `sink` to `target`'s call, whose session another node hosts. Returns whether the call runs.
    /// `hosted_elsewhere` is the local refusal, answered as it is on a node without a replica.
    pub(super) async fn subscribe_remote_tool_output(
        &self,
        sink: OutputSink,
        target: NamedTarget,
        hosted_elsewhere: EngineError,
    ) -> Result<bool, EngineError> {
        let Some(replica) = self.services.log_replica.clone() else { return Err(hosted_elsewhere) };
        let subscription = Arc::new(Subscription {
            output: Mutex::new(RemoteNamedOutput::new(target.clone())),
            sink,
            wake: Notify::new(),
            after: AtomicU64::new(0),
            follow_failed: AtomicBool::new(false),
        });
        let hearing = match &self.services.live_output {
            Some(share) => {
                let OutputFollow { guard, ready } = share.follow(&target.session_id, subscription.hear());
                // A follow that cannot be in place is not waited for: what it misses is told as gaps.
                let _ = tokio::time::timeout(OUTPUT_READY_WITHIN, ready).await;
                Some(guard)
            }
            None => None,
        };
        let record = read_record(&replica, &target, None).await?.ok_or_else(|| EngineError::ToolCallNotFound {
            session_id: target.session_id.clone(),
            tool_call_id: target.tool_call_id.clone(),
        })?;
        let record = if subscription.output.lock().ended_heard() && !record.ended() {
            // The hosting node tells of the end once the call's result is stored: the log holds it now.
            read_record(&replica, &target, Some(record.clone())).await?.unwrap_or(record)
        } else {
            record
        };
        let served = subscription.output.lock().serve(&record, &subscription.sink);
        match served {
            Ok(true) => {}
            Ok(false) => return Ok(false),
            // The connection is gone: nobody reads the reply.
            Err(_) => return Ok(true),
        }
        subscription.after.store(record.through, Ordering::Release);
        let log = LogFollow {
            replica,
            session_id: target.session_id,
            tool_call_id: target.tool_call_id,
            run_id: record.run_id,
        };
        let following = log.start(&subscription).map_err(|error| EngineError::replica(&log.session_id, error))?;
        actix::spawn(subscription.watch(log, following, hearing));
        Ok(true)
    }
}

/// Reads the call's record from the replica on a blocking thread: from the end of the log back to its start, or,
/// given what was read already, the events stored since.
async fn read_record(
    replica: &Arc<dyn LogReplica>,
    target: &NamedTarget,
    known: Option<CallRecord>,
) -> Result<Option<CallRecord>, EngineError> {
    let (replica, session_id, tool_call_id) = (replica.clone(), target.session_id.clone(), target.tool_call_id.clone());
    blocking(&target.session_id, move || match known {
        None => read_call_record(replica.as_ref(), &session_id, &tool_call_id),
        Some(mut record) => {
            read_record_on(replica.as_ref(), &session_id, &tool_call_id, &mut record).map(|()| Some(record))
        }
    })
    .await
}

/// One remote named subscription, shared by the share's deliveries, the log's and the task that holds the follows.
struct Subscription {
    output: Mutex<RemoteNamedOutput>,
    sink: OutputSink,
    /// Woken when the subscription is over or its follow of the log failed.
    wake: Notify,
    /// The last event of the log given to the subscription.
    after: AtomicU64,
    follow_failed: AtomicBool,
}

impl Subscription {
    /// Where the session's live output is delivered.
    fn hear(self: &Arc<Self>) -> OutputDeliver {
        let subscription = self.clone();
        Box::new(move |shared| {
            let mut output = subscription.output.lock();
            let _ = output.on_shared(shared, &subscription.sink);
            if output.phase() == Phase::Over {
                subscription.wake.notify_one();
            }
        })
    }

    /// Gives the subscription the log's events in `entries`; whether to go on.
    fn on_entries(&self, log: &LogFollow, entries: &[LogEntry]) -> FollowControl {
        let mut output = self.output.lock();
        for entry in entries {
            self.after.fetch_max(entry.seq, Ordering::AcqRel);
            if let Some(event) = read_call_event(entry, &log.tool_call_id, &log.run_id) {
                let _ = output.on_logged(&event, &self.sink);
            }
        }
        if output.phase() == Phase::Over {
            self.wake.notify_one();
            return FollowControl::Stop;
        }
        FollowControl::Continue
    }

    /// Holds the follows until the subscription is over or closed; a failed follow of the log starts again.
    async fn watch(self: Arc<Self>, log: LogFollow, following: FollowGuard, _hearing: Option<OutputFollowGuard>) {
        let mut following = Some(following);
        loop {
            let _ = tokio::time::timeout(CLOSED_POLL, self.wake.notified()).await;
            if self.sink.is_closed() {
                self.output.lock().close();
                return;
            }
            if self.output.lock().phase() == Phase::Over {
                return;
            }
            if self.follow_failed.swap(false, Ordering::AcqRel) {
                drop(following.take());
                match log.start(&self) {
                    Ok(guard) => following = Some(guard),
                    Err(error) => {
                        tracing::warn!(session_id = %log.session_id, %error, "a remote tool-output subscription could not follow the log");
                        self.follow_failed.store(true, Ordering::Release);
                    }
                }
            }
        }
    }
}

/// How the subscription follows the session's log.
#[derive(Clone)]
struct LogFollow {
    replica: Arc<dyn LogReplica>,
    session_id: String,
    tool_call_id: String,
    run_id: String,
}

impl LogFollow {
    /// Follows the log from the last event the subscription was given.
    fn start(&self, subscription: &Arc<Subscription>) -> Result<FollowGuard, ReplicaError> {
        let (follower, log) = (subscription.clone(), self.clone());
        let after = subscription.after.load(Ordering::Acquire);
        self.replica.follow(
            &self.session_id,
            after,
            Box::new(move |batch| match batch {
                Ok(entries) => follower.on_entries(&log, &entries),
                Err(error) => {
                    tracing::warn!(session_id = %log.session_id, %error, "a remote tool-output subscription's follow ended");
                    follower.follow_failed.store(true, Ordering::Release);
                    follower.wake.notify_one();
                    FollowControl::Stop
                }
            }),
        )
    }
}
