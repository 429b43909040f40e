//! One tool call's durable record, read from the cluster's replica of a session's log by a node that does not host
//! the session (`remote_named_follow.rs`): the call's `tool_call_started` (its run), its `tool_call_progress` chunks
//! (the first 64 KiB of each stream), its `tool_output_elided` counts, and its end (`tool_call_terminated`, or its
//! run's end when the run ended without one, as a run interrupted by its node's death does).
//!
//! The log is read backwards, a window of [`SCAN_WINDOW_SEQS`] events at a time (each window forwards, at most
//! [`SCAN_PAGE_BYTES`] of event text a read), until the window holding the call's start: a call a client names is
//! usually recent, so the read costs the events since it started, not the session's history. Only what concerns
//! the call is kept; an event is decoded only when its text names the call or a run's end.

use serde::Deserialize;
use troupe_protocol::types::tool_output::OutputStream;
use troupe_runtime::event_log::{LogEntry, LogReplica, ReplicaError};

/// Events read per window of the backward scan.
const SCAN_WINDOW_SEQS: u64 = 512;
/// Bytes of event text read at a time.
const SCAN_PAGE_BYTES: usize = 256 * 1024;

/// What a logged event says about the followed call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum CallEvent {
    /// Its `tool_call_started`, with its run.
    Started { run_id: String },
    /// A durable chunk of one stream. `bytes` is `None` when the chunk's text is not the bytes the tool printed
    /// (they were not UTF-8, and the log holds them with replacement characters): its bytes, and so its length, are
    /// unknown.
    Progress { stream: OutputStream, offset: u64, bytes: Option<Vec<u8>> },
    /// Bytes of a stream after its durable chunks that the log does not hold.
    Elided { stream: OutputStream, elided_bytes: u64 },
    /// The call ended.
    Ended,
}

/// One event of the log, as far as the followed call is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Logged {
    Call(CallEvent),
    /// A run ended (completed, failed, cancelled or interrupted): a call of it that has no result ended with it.
    RunEnded {
        run_id: String,
    },
}

/// The call's record up to `through`, the last event read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct CallRecord {
    pub(super) run_id: String,
    /// What the log says of the call after its start, in log order; [`CallEvent::Ended`] ends it.
    pub(super) events: Vec<CallEvent>,
    pub(super) through: u64,
}

impl CallRecord {
    pub(super) fn ended(&self) -> bool {
        self.events.contains(&CallEvent::Ended)
    }

    /// Adds what `entries` (the events after `through`, in order) say of the call.
    pub(super) fn extend(&mut self, tool_call_id: &str, entries: &[LogEntry]) {
        for entry in entries {
            if let Some(event) = read_call_event(entry, tool_call_id, &self.run_id) {
                self.events.push(event);
            }
            self.through = self.through.max(entry.seq);
        }
    }

    /// The record from the events found (in log order, the call's start among them); `None` without its start.
    fn from_logged(found: Vec<Logged>, through: u64) -> Option<CallRecord> {
        let mut found = found.into_iter();
        let run_id = found.by_ref().find_map(|logged| match logged {
            Logged::Call(CallEvent::Started { run_id }) => Some(run_id),
            _ => None,
        })?;
        let events = found
            .filter_map(|logged| match logged {
                Logged::Call(CallEvent::Started { .. }) => None,
                Logged::Call(event) => Some(event),
                Logged::RunEnded { run_id: ended } => (ended == run_id).then_some(CallEvent::Ended),
            })
            .collect();
        Some(CallRecord { run_id, events, through })
    }
}

/// What `entry` says of call `tool_call_id` of run `run_id`.
pub(super) fn read_call_event(entry: &LogEntry, tool_call_id: &str, run_id: &str) -> Option<CallEvent> {
    match read_logged(entry, tool_call_id)? {
        Logged::Call(event) => Some(event),
        Logged::RunEnded { run_id: ended } => (ended == run_id).then_some(CallEvent::Ended),
    }
}

/// What `entry` says of call `tool_call_id`, or of a run's end.
pub(super) fn read_logged(entry: &LogEntry, tool_call_id: &str) -> Option<Logged> {
    #[derive(Deserialize)]
    struct Event {
        run_id: Option<String>,
        payload: Payload,
    }
    #[derive(Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    enum Payload {
        ToolCallStarted {
            tool_call_id: String,
        },
        ToolCallProgress {
            tool_call_id: String,
            stream: OutputStream,
            offset: u64,
            text: String,
        },
        ToolOutputElided {
            tool_call_id: String,
            stream: OutputStream,
            elided_bytes: u64,
        },
        ToolCallTerminated {
            tool_call_id: String,
        },
        RunCompleted {},
        RunFailed {},
        RunCancelled {},
        RunInterrupted {},
        #[serde(other)]
        Other,
    }
    const RUN_ENDS: [&str; 4] = [
        "\"type\":\"run_completed\"",
        "\"type\":\"run_failed\"",
        "\"type\":\"run_cancelled\"",
        "\"type\":\"run_interrupted\"",
    ];
    let text = entry.json.as_str();
    if !text.contains(tool_call_id) && !RUN_ENDS.iter().any(|kind| text.contains(kind)) {
        return None;
    }
    let event: Event = serde_json::from_str(text).ok()?;
    let about = |call: &str| call == tool_call_id;
    let call = match event.payload {
        Payload::ToolCallStarted { tool_call_id } if about(&tool_call_id) => {
            CallEvent::Started { run_id: event.run_id? }
        }
        Payload::ToolCallProgress { tool_call_id, stream, offset, text } if about(&tool_call_id) => {
            // A replacement character may be one the tool printed, but the bytes cannot be told apart from a lossy
            // decoding: they are not offered as the tool's bytes.
            let bytes = (!text.contains(char::REPLACEMENT_CHARACTER)).then(|| text.into_bytes());
            CallEvent::Progress { stream, offset, bytes }
        }
        Payload::ToolOutputElided { tool_call_id, stream, elided_bytes } if about(&tool_call_id) => {
            CallEvent::Elided { stream, elided_bytes }
        }
        Payload::ToolCallTerminated { tool_call_id } if about(&tool_call_id) => CallEvent::Ended,
        Payload::RunCompleted {} | Payload::RunFailed {} | Payload::RunCancelled {} | Payload::RunInterrupted {} => {
            return Some(Logged::RunEnded { run_id: event.run_id? });
        }
        _ => return None,
    };
    Some(Logged::Call(call))
}

/// Reads call `tool_call_id`'s record from the replica, through the session's last event; `None` when the log has
/// no such call. Blocking.
pub(super) fn read_call_record(
    replica: &dyn LogReplica,
    session_id: &str,
    tool_call_id: &str,
) -> Result<Option<CallRecord>, ReplicaError> {
    let through = replica.last_seq(session_id)?;
    let mut found: Vec<Logged> = Vec::new();
    let mut high = through;
    while high > 0 {
        let low = high.saturating_sub(SCAN_WINDOW_SEQS);
        let mut window = Vec::new();
        read_forward(replica, session_id, low, high, |entry| window.extend(read_logged(entry, tool_call_id)))?;
        let started = window.iter().any(|logged| matches!(logged, Logged::Call(CallEvent::Started { .. })));
        window.append(&mut found);
        found = window;
        if started {
            return Ok(CallRecord::from_logged(found, through));
        }
        high = low;
    }
    Ok(None)
}

/// Adds the events stored after `record.through` to the record, through the session's last event. Blocking.
pub(super) fn read_record_on(
    replica: &dyn LogReplica,
    session_id: &str,
    tool_call_id: &str,
    record: &mut CallRecord,
) -> Result<(), ReplicaError> {
    let through = replica.last_seq(session_id)?;
    let after = record.through;
    read_forward(replica, session_id, after, through, |entry| record.extend(tool_call_id, std::slice::from_ref(entry)))
}

/// Gives `each` the events with `after < seq <= through`, in order, a page at a time.
fn read_forward(
    replica: &dyn LogReplica,
    session_id: &str,
    mut after: u64,
    through: u64,
    mut each: impl FnMut(&LogEntry),
) -> Result<(), ReplicaError> {
    while after < through {
        let page = replica.read_range(session_id, after, through, SCAN_PAGE_BYTES)?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        page.iter().for_each(&mut each);
    }
    Ok(())
}

#[cfg(test)]
#[path = "call_record_tests.rs"]
mod tests;
