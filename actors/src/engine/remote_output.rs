//! The live tool output of a remote subscription (`remote_follow.rs`): what a client following, from this node, a
//! session another node hosts is sent of its running tools' output, heard from the hosting node through the
//! cluster's [`LiveOutputShare`](troupe_runtime::live_output_share::LiveOutputShare).
//!
//! It keeps the local subscribers' promises (`session_actor/tool_output.rs`, docs/runtime-semantics.md):
//! - a call's output is sent only after the subscriber was sent the call's `tool_call_started` event, and not after
//!   its `tool_call_terminated`. The output travels apart from the events (plain NATS against JetStream), so it
//!   often arrives first: it is kept, the last 64 KiB of each stream, and sent as `events.tool_output_snapshot`
//!   right after the started event; then each chunk as `events.tool_output_delta`;
//! - nothing is sent while the subscription is still being sent stored events (a local subscriber in replay gets
//!   no output either); when it turns live, each started call's kept output is its snapshot;
//! - a chunk that does not fit the connection's queue, or that never arrived (the hosting node or NATS dropped it:
//!   its offset does not follow on), is owed as `events.tool_output_gap` before the stream's next delta.
//!
//! It is plain state, driven under one lock by the follower's event deliveries and the share's output deliveries,
//! and it sends through the `offer` it is given: `Ok(true)` queued, `Ok(false)` no room, `Err` the sink is gone.

use std::collections::{HashMap, HashSet, VecDeque};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytestring::ByteString;
use serde::Deserialize;
use troupe_protocol::jsonrpc::encode_notification;
use troupe_protocol::notification::{ToolOutputDelta, ToolOutputGap, ToolOutputSnapshot};
use troupe_protocol::types::tool_output::{
    OutputStream, TOOL_OUTPUT_RETAINED_BYTES, ToolOutputDeltaParams, ToolOutputGapParams, ToolOutputSnapshotParams,
};
use troupe_runtime::event_log::LogEntry;
use troupe_runtime::live_output_share::SharedOutput;

/// The sink is gone: the subscription closed or was replaced.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct SinkGone;

/// Queues one frame: `Ok(true)` queued, `Ok(false)` no room now, `Err` the sink is gone.
pub(super) type Offer<'a> = dyn FnMut(&ByteString) -> Result<bool, SinkGone> + 'a;

/// The kept tail of one stream of a running call.
struct Window {
    run_id: String,
    start_offset: u64,
    bytes: VecDeque<u8>,
}

impl Window {
    fn end_offset(&self) -> u64 {
        self.start_offset + self.bytes.len() as u64
    }
}

/// One remote subscription's live output.
pub(super) struct RemoteOutput {
    session_id: String,
    /// Whether the subscriber was sent every stored event and follows live ones.
    live: bool,
    /// Calls whose `tool_call_started` the subscriber was sent and whose `tool_call_terminated` it was not, with
    /// their run.
    started: HashMap<String, String>,
    windows: HashMap<(String, OutputStream), Window>,
    /// Streams the subscriber is owed a gap notice for.
    missed: HashSet<(String, OutputStream)>,
}

impl RemoteOutput {
    pub(super) fn new(session_id: String) -> RemoteOutput {
        RemoteOutput {
            session_id,
            live: false,
            started: HashMap::new(),
            windows: HashMap::new(),
            missed: HashSet::new(),
        }
    }

    /// The subscriber was sent `entry` (a stored or a live event, in order).
    pub(super) fn after_event(&mut self, entry: &LogEntry, offer: &mut Offer<'_>) -> Result<(), SinkGone> {
        match CallEvent::read(entry) {
            Some(CallEvent::Started { tool_call_id, run_id }) => {
                self.started.insert(tool_call_id.clone(), run_id);
                if self.live {
                    self.send_snapshots(&tool_call_id, offer)?;
                }
            }
            Some(CallEvent::Terminated { tool_call_id }) => {
                self.started.remove(&tool_call_id);
                self.forget(&tool_call_id);
            }
            None => {}
        }
        Ok(())
    }

    /// The subscriber was sent `entry` while it is still sent stored events: it counts for the rules, and nothing
    /// is sent yet (output waits for [`go_live`](Self::go_live)).
    pub(super) fn note_replayed(&mut self, entry: &LogEntry) {
        debug_assert!(!self.live, "a replayed event after the subscription turned live");
        let _ = self.after_event(entry, &mut |_: &ByteString| Ok(false));
    }

    /// The subscriber was sent every stored event: from now on it gets output, starting with the snapshots of the
    /// calls running.
    pub(super) fn go_live(&mut self, offer: &mut Offer<'_>) -> Result<(), SinkGone> {
        self.live = true;
        let mut running: Vec<String> = self.started.keys().cloned().collect();
        running.sort();
        for tool_call_id in running {
            self.send_snapshots(&tool_call_id, offer)?;
        }
        Ok(())
    }

    /// The hosting node sent `output`.
    pub(super) fn on_output(&mut self, output: SharedOutput, offer: &mut Offer<'_>) -> Result<(), SinkGone> {
        let (run_id, tool_call_id, stream, offset, data) = match output {
            SharedOutput::Chunk { run_id, tool_call_id, stream, offset, data } => {
                (run_id, tool_call_id, stream, offset, data)
            }
            SharedOutput::Ended { tool_call_id } => {
                self.forget(&tool_call_id);
                return Ok(());
            }
        };
        let key = (tool_call_id, stream);
        let sending = self.live && self.started.contains_key(&key.0);
        let window = self.windows.entry(key.clone()).or_insert_with(|| Window {
            run_id: run_id.clone(),
            start_offset: offset,
            bytes: VecDeque::new(),
        });
        if window.end_offset() != offset {
            // A hole (or output seen again): what is kept no longer runs on into this chunk.
            window.start_offset = offset;
            window.bytes.clear();
            if sending {
                self.missed.insert(key.clone());
            }
        }
        window.bytes.extend(&data);
        let excess = window.bytes.len().saturating_sub(TOOL_OUTPUT_RETAINED_BYTES);
        window.bytes.drain(..excess);
        window.start_offset = offset + data.len() as u64 - window.bytes.len() as u64;
        if !sending {
            return Ok(());
        }
        if self.missed.contains(&key) {
            let gap = self.notice::<ToolOutputGap>(&ToolOutputGapParams {
                session_id: self.session_id.clone(),
                run_id: run_id.clone(),
                tool_call_id: key.0.clone(),
                stream,
                next_offset: offset,
                subscription_id: None,
            });
            match gap.map_or(Ok(false), |gap| offer(&gap))? {
                true => {
                    self.missed.remove(&key);
                }
                // Still no room: this chunk is missed too, and the notice waits for the next one.
                false => return Ok(()),
            }
        }
        let delta = self.notice::<ToolOutputDelta>(&ToolOutputDeltaParams {
            session_id: self.session_id.clone(),
            run_id,
            tool_call_id: key.0.clone(),
            stream,
            byte_offset: offset,
            data: BASE64.encode(&data),
            subscription_id: None,
        });
        if !delta.map_or(Ok(false), |delta| offer(&delta))? {
            self.missed.insert(key);
        }
        Ok(())
    }

    /// Sends what is kept of `tool_call_id`'s streams, stdout first.
    fn send_snapshots(&mut self, tool_call_id: &str, offer: &mut Offer<'_>) -> Result<(), SinkGone> {
        for stream in [OutputStream::Stdout, OutputStream::Stderr] {
            let key = (tool_call_id.to_owned(), stream);
            let Some(window) = self.windows.get(&key).filter(|window| !window.bytes.is_empty()) else { continue };
            let (front, back) = window.bytes.as_slices();
            let snapshot = self.notice::<ToolOutputSnapshot>(&ToolOutputSnapshotParams {
                session_id: self.session_id.clone(),
                run_id: window.run_id.clone(),
                tool_call_id: tool_call_id.to_owned(),
                stream,
                start_offset: window.start_offset,
                end_offset: window.end_offset(),
                data: BASE64.encode([front, back].concat()),
                subscription_id: None,
            });
            if !snapshot.map_or(Ok(false), |snapshot| offer(&snapshot))? {
                self.missed.insert(key);
            }
        }
        Ok(())
    }

    /// The call is over: nothing of it is kept or owed.
    fn forget(&mut self, tool_call_id: &str) {
        self.windows.retain(|(call, _), _| call != tool_call_id);
        self.missed.retain(|(call, _)| call != tool_call_id);
    }

    fn notice<N: troupe_protocol::jsonrpc::Notification>(&self, params: &N::Params) -> Option<ByteString> {
        encode_notification::<N>(params).ok()
    }
}

/// The start or end of a tool call, read from an event's text. Only events that can be one are decoded.
enum CallEvent {
    Started { tool_call_id: String, run_id: String },
    Terminated { tool_call_id: String },
}

impl CallEvent {
    fn read(entry: &LogEntry) -> Option<CallEvent> {
        #[derive(Deserialize)]
        struct Event {
            run_id: Option<String>,
            payload: Payload,
        }
        #[derive(Deserialize)]
        struct Payload {
            #[serde(rename = "type")]
            kind: String,
            tool_call_id: Option<String>,
        }
        let text = entry.json.as_str();
        if !text.contains("\"tool_call_started\"") && !text.contains("\"tool_call_terminated\"") {
            return None;
        }
        let event: Event = serde_json::from_str(text).ok()?;
        let tool_call_id = event.payload.tool_call_id?;
        match event.payload.kind.as_str() {
            "tool_call_started" => Some(CallEvent::Started { tool_call_id, run_id: event.run_id? }),
            "tool_call_terminated" => Some(CallEvent::Terminated { tool_call_id }),
            _ => None,
        }
    }
}

#[cfg(test)]
#[path = "remote_output_tests.rs"]
mod tests;
