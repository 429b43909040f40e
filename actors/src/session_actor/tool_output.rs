//! Live output of running tools: what each subscriber is sent, and what is kept for late or lagging ones.
//!
//! Output is not durable here (bounded `tool_call_progress` events are, separately). Every chunk goes to every
//! subscriber as `events.tool_output_delta`, encoded once. A subscriber whose queue has no room for a delta
//! loses it but keeps its subscription; before its next delta of that stream it is sent
//! `events.tool_output_gap` with the offset where it picks up again. The last 64 KiB of each running stream are
//! retained, and a subscriber that arrives while a tool runs gets them as `events.tool_output_snapshot`.
//! Named subscriptions to one call (`tool_output.subscribe`) are served from the same windows (`named_output`).

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::named_output::{self, CallRef, EndedCall, NamedRequest, NamedSubscriber, end_subscribers, remember_ended};
use super::subscribers::Subscriber;
use crate::byte_run::ByteRun;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytestring::ByteString;
use troupe_protocol::jsonrpc::encode_notification;
use troupe_protocol::notification::{ToolOutputDelta, ToolOutputGap, ToolOutputSnapshot};
use troupe_protocol::types::tool_output::{
    OutputStream, TOOL_OUTPUT_RETAINED_BYTES, ToolOutputDeltaParams, ToolOutputGapParams, ToolOutputSnapshotParams,
};

/// The retained tail of one running stream.
struct RetainedOutput {
    run_id: String,
    start_offset: u64,
    bytes: VecDeque<u8>,
}

#[derive(Default)]
pub(crate) struct ToolOutputStreams {
    streams: HashMap<(String, OutputStream), RetainedOutput>,
    /// Calls started and not ended, with their run: those a named subscription may follow.
    running: HashMap<String, String>,
    /// The newest ended calls' retained windows (`named_output`).
    ended: VecDeque<EndedCall>,
    /// Named subscriptions to running calls (`tool_output.subscribe`).
    named: Vec<NamedSubscriber>,
}

/// One chunk of a running tool's output.
pub(crate) struct OutputChunkRef<'a> {
    pub(crate) run_id: &'a str,
    pub(crate) tool_call_id: &'a str,
    pub(crate) stream: OutputStream,
    pub(crate) offset: u64,
    pub(crate) data: &'a [u8],
}

impl ToolOutputStreams {
    /// Retains the chunk and sends it to every subscriber; drops subscribers whose connection is gone.
    pub(crate) fn publish(&mut self, session_id: &str, chunk: OutputChunkRef<'_>, subscribers: &mut Vec<Subscriber>) {
        let key = (chunk.tool_call_id.to_owned(), chunk.stream);
        let retained = self.streams.entry(key.clone()).or_insert_with(|| RetainedOutput {
            run_id: chunk.run_id.to_owned(),
            start_offset: chunk.offset,
            bytes: VecDeque::new(),
        });
        retained.bytes.extend(chunk.data);
        let excess = retained.bytes.len().saturating_sub(TOOL_OUTPUT_RETAINED_BYTES);
        retained.bytes.drain(..excess);
        retained.start_offset = chunk.offset + chunk.data.len() as u64 - retained.bytes.len() as u64;

        self.named.retain_mut(|named| {
            !named.follows(chunk.tool_call_id, chunk.stream)
                || named_output::offer_chunk(session_id, named, chunk.stream, chunk.offset, chunk.data)
        });
        if subscribers.is_empty() {
            return;
        }
        let delta = ToolOutputDeltaParams {
            session_id: session_id.to_owned(),
            run_id: chunk.run_id.to_owned(),
            tool_call_id: chunk.tool_call_id.to_owned(),
            stream: chunk.stream,
            byte_offset: chunk.offset,
            data: BASE64.encode(chunk.data),
            subscription_id: None,
        };
        let Ok(delta_frame) = encode_notification::<ToolOutputDelta>(&delta) else {
            return;
        };
        let gap_frame = || {
            encode_notification::<ToolOutputGap>(&ToolOutputGapParams {
                session_id: session_id.to_owned(),
                run_id: chunk.run_id.to_owned(),
                tool_call_id: chunk.tool_call_id.to_owned(),
                stream: chunk.stream,
                next_offset: chunk.offset,
                subscription_id: None,
            })
            .ok()
        };
        subscribers.retain_mut(|subscriber| {
            if subscriber.missed.contains(&key) {
                let Some(gap) = gap_frame() else { return true };
                match subscriber.sink.offer_transient(&gap) {
                    Ok(true) => {
                        subscriber.missed.remove(&key);
                    }
                    // Still no room: this delta is missed too, and the gap notice waits for the next one.
                    Ok(false) => return true,
                    Err(_) => return false,
                }
            }
            match subscriber.sink.offer_transient(&delta_frame) {
                Ok(true) => true,
                Ok(false) => {
                    subscriber.missed.insert(key.clone());
                    true
                }
                Err(_) => false,
            }
        });
    }

    /// The snapshot notifications of every stream still running.
    pub(crate) fn snapshots(&self, session_id: &str) -> Vec<ByteString> {
        let mut streams: Vec<_> = self.streams.iter().collect();
        streams.sort_by_key(|((tool_call_id, stream), _)| (tool_call_id.clone(), *stream == OutputStream::Stderr));
        streams
            .into_iter()
            .filter_map(|((tool_call_id, stream), retained)| {
                let (front, back) = retained.bytes.as_slices();
                let mut data = Vec::with_capacity(retained.bytes.len());
                data.extend_from_slice(front);
                data.extend_from_slice(back);
                encode_notification::<ToolOutputSnapshot>(&ToolOutputSnapshotParams {
                    session_id: session_id.to_owned(),
                    run_id: retained.run_id.clone(),
                    tool_call_id: tool_call_id.clone(),
                    stream: *stream,
                    start_offset: retained.start_offset,
                    end_offset: retained.start_offset + data.len() as u64,
                    data: BASE64.encode(&data),
                    subscription_id: None,
                })
                .ok()
            })
            .collect()
    }

    /// A call started: named subscriptions may follow it.
    pub(crate) fn start_call(&mut self, tool_call_id: &str, run_id: &str) {
        self.running.insert(tool_call_id.to_owned(), run_id.to_owned());
    }

    /// The call ended: its output is no longer live, and nobody is owed a gap notice for it. Its retained windows
    /// are kept for late named subscriptions, and its named subscribers are sent the end.
    pub(crate) fn finish_call(&mut self, session_id: &str, tool_call_id: &str, subscribers: &mut [Subscriber]) {
        let mut windows = BTreeMap::new();
        let mut run_id = self.running.remove(tool_call_id);
        self.streams.retain(|(call, stream), retained| {
            if call != tool_call_id {
                return true;
            }
            run_id.get_or_insert_with(|| retained.run_id.clone());
            let start_offset = retained.start_offset;
            windows.insert(*stream, ByteRun { start: start_offset, bytes: std::mem::take(&mut retained.bytes).into() });
            false
        });
        for subscriber in subscribers {
            subscriber.missed.retain(|(call, _)| call != tool_call_id);
        }
        let Some(run_id) = run_id else { return };
        let ended = EndedCall { tool_call_id: tool_call_id.to_owned(), run_id, windows };
        let (ending, named) = std::mem::take(&mut self.named)
            .into_iter()
            .partition(|named: &NamedSubscriber| named.tool_call_id() == tool_call_id);
        self.named = named;
        end_subscribers(session_id, ending, &ended);
        remember_ended(&mut self.ended, ended);
    }

    /// Starts a named subscription. Returns whether the call is running (`Some(false)`: it ended, and the
    /// subscription was served whole); `None` when the session knows no such recent call.
    pub(crate) fn subscribe_named(&mut self, session_id: &str, request: NamedRequest) -> Option<bool> {
        if let Some(run_id) = self.running.get(&request.tool_call_id) {
            let windows: BTreeMap<OutputStream, ByteRun> = self
                .streams
                .iter()
                .filter(|((call, _), _)| *call == request.tool_call_id)
                .map(|((_, stream), retained)| {
                    let (front, back) = retained.bytes.as_slices();
                    (*stream, ByteRun { start: retained.start_offset, bytes: [front, back].concat() })
                })
                .collect();
            let tool_call_id = request.tool_call_id.clone();
            let call = CallRef { session_id, run_id, tool_call_id: &tool_call_id };
            if let Some(named) = named_output::follow_running(&call, request, &windows) {
                self.named.push(named);
            }
            return Some(true);
        }
        let ended = self.ended.iter().find(|ended| ended.tool_call_id == request.tool_call_id)?;
        named_output::serve_ended(session_id, request, ended);
        Some(false)
    }
}
