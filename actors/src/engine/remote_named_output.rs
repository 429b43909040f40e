//! A named subscription to one call's output (`tool_output.subscribe`) served by a node that does not host the
//! call's session (`remote_named_follow.rs`): what its subscriber is sent, from the call's durable record (read from
//! the cluster's replica of the log, `call_record.rs`) and its live output (heard from the hosting node through the
//! cluster's `LiveOutputShare`).
//!
//! It keeps the promises of a subscription the hosting node serves (`session_actor/named_output.rs`): the same
//! notices with its `subscription_id`, an `events.tool_output_snapshot` of each followed stream first, then each
//! later chunk as `events.tool_output_delta`, and `events.tool_output_end` once, last. What it cannot know is never
//! made up:
//! - the snapshot is the first run of known bytes at or after `from_offset`: the durable chunks (the first 64 KiB
//!   of each stream, whose text is the tool's bytes only when they were UTF-8) and what was heard live since the
//!   follow began. Its `start_offset` is above `from_offset` when the bytes before are not known here; a later run
//!   of known bytes comes as a delta after `events.tool_output_gap`;
//! - a delta that does not follow on from what was sent (a chunk dropped by the hosting node or NATS, or for room
//!   in the connection's queue) is preceded by `events.tool_output_gap` naming its offset. A durable chunk read
//!   from the log after the follow began fills a hole only when nothing after it was sent yet;
//! - the end comes when the hosting node says the call ended (the share's `Ended`) or when its result (or its
//!   run's end) is read from the log, whichever is first. Its `end_offsets` are each stream's length as far as this
//!   node knows it: the end of the last byte heard or read, or of the durable chunks plus the bytes the log says
//!   were elided after them.
//!
//! Plain state, driven under one lock by the share's deliveries, the log's, and the engine once the record is read.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytestring::ByteString;
use troupe_protocol::jsonrpc::{Notification, encode_notification};
use troupe_protocol::notification::{ToolOutputDelta, ToolOutputEnd, ToolOutputGap, ToolOutputSnapshot};
use troupe_protocol::server::OutputSink;
use troupe_protocol::types::tool_output::{
    OutputStream, ToolOutputDeltaParams, ToolOutputEndParams, ToolOutputGapParams, ToolOutputSnapshotParams,
    ToolOutputSubscribeParams,
};
use troupe_runtime::live_output_share::SharedOutput;

use super::call_record::{CallEvent, CallRecord};
use super::remote_output::SinkGone;
use crate::byte_run::{ByteRun, merge};

/// Where a named subscription's notices go: [`OutputSink`], or a test's queue.
pub(super) trait NamedSink {
    /// Queues an output notice: `Ok(true)` queued, `Ok(false)` no room (it is lost), `Err` the subscription is gone.
    fn offer_transient(&self, frame: &ByteString) -> Result<bool, SinkGone>;
    /// Queues the end notice, which is never dropped for room.
    fn offer_end(&self, frame: &ByteString);
}

impl NamedSink for OutputSink {
    fn offer_transient(&self, frame: &ByteString) -> Result<bool, SinkGone> {
        OutputSink::offer_transient(self, frame).map_err(|_| SinkGone)
    }

    fn offer_end(&self, frame: &ByteString) {
        let _ = OutputSink::offer_end(self, frame);
    }
}

/// What the subscription asked for: the request's own params (`stream: None` follows both streams).
pub(super) type NamedTarget = ToolOutputSubscribeParams;

/// Where the subscription is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Its live output is heard and kept while the call's record is read; nothing is sent yet.
    Hearing,
    /// Its snapshots were sent; chunks go out as they come.
    Serving,
    /// Its end was sent, or its connection is gone: nothing more is sent.
    Over,
}

/// One followed stream.
#[derive(Debug, Default)]
struct StreamState {
    /// The first byte not offered yet (bytes before it were sent, or are owed as a gap).
    next: u64,
    /// A gap notice is owed before the next delta.
    owed_gap: bool,
    /// The stream's length as far as this node knows it.
    known_end: u64,
    /// What was heard live while [`Phase::Hearing`]: the newest run, at most the last 64 KiB.
    heard: ByteRun,
    /// The end of the durable chunk of the highest offset, when its bytes are known.
    durable_end: Option<u64>,
}

/// One remote named subscription.
pub(super) struct RemoteNamedOutput {
    target: NamedTarget,
    phase: Phase,
    /// The call's run, once its record is read.
    run_id: String,
    streams: BTreeMap<OutputStream, StreamState>,
    /// The hosting node said the call ended while its record was being read.
    ended_heard: bool,
}

impl RemoteNamedOutput {
    pub(super) fn new(target: NamedTarget) -> RemoteNamedOutput {
        let streams = OutputStream::selected(target.stream)
            .into_iter()
            .map(|stream| (stream, StreamState { next: target.from_offset, ..StreamState::default() }))
            .collect();
        RemoteNamedOutput { target, phase: Phase::Hearing, run_id: String::new(), streams, ended_heard: false }
    }

    pub(super) fn phase(&self) -> Phase {
        self.phase
    }

    /// Whether the hosting node said the call ended before its record was read.
    pub(super) fn ended_heard(&self) -> bool {
        self.ended_heard
    }

    /// The hosting node sent `output` of the session.
    pub(super) fn on_shared(&mut self, output: SharedOutput, sink: &dyn NamedSink) -> Result<(), SinkGone> {
        match output {
            SharedOutput::Chunk { tool_call_id, stream, offset, data, .. }
                if tool_call_id == self.target.tool_call_id =>
            {
                match self.phase {
                    Phase::Hearing => {
                        if let Some(state) = self.streams.get_mut(&stream) {
                            state.known_end = state.known_end.max(offset + data.len() as u64);
                            state.heard.hear(offset, &data);
                        }
                        Ok(())
                    }
                    Phase::Serving => self.deliver(stream, offset, &data, sink),
                    Phase::Over => Ok(()),
                }
            }
            SharedOutput::Ended { tool_call_id } if tool_call_id == self.target.tool_call_id => {
                match self.phase {
                    Phase::Hearing => self.ended_heard = true,
                    Phase::Serving => self.end(sink),
                    Phase::Over => {}
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// The call's record was read: sends each followed stream's snapshot and what else is known, then the end when
    /// the call ended. Returns whether it is still running.
    pub(super) fn serve(&mut self, record: &CallRecord, sink: &dyn NamedSink) -> Result<bool, SinkGone> {
        debug_assert_eq!(self.phase, Phase::Hearing, "served twice");
        self.run_id = record.run_id.clone();
        self.phase = Phase::Serving;
        let mut known: BTreeMap<OutputStream, Vec<ByteRun>> = BTreeMap::new();
        for event in &record.events {
            if let CallEvent::Progress { stream, offset, bytes: Some(bytes) } = event {
                known.entry(*stream).or_default().push(ByteRun { start: *offset, bytes: bytes.clone() });
            }
            self.note_durable(event);
        }
        for (stream, state) in &mut self.streams {
            let heard = std::mem::take(&mut state.heard);
            if !heard.bytes.is_empty() {
                known.entry(*stream).or_default().push(heard);
            }
        }
        let mut later = Vec::new();
        for (stream, runs) in known {
            if !self.streams.contains_key(&stream) {
                continue;
            }
            let mut runs = merge(runs, self.target.from_offset).into_iter();
            if let Some(first) = runs.next() {
                self.snapshot(stream, &first, sink)?;
            }
            later.extend(runs.map(|run| (stream, run)));
        }
        for (stream, run) in later {
            self.deliver(stream, run.start, &run.bytes, sink)?;
        }
        if self.ended_heard || record.ended() {
            self.end(sink);
            return Ok(false);
        }
        Ok(true)
    }

    /// The log holds `event` of the call, after its record was read.
    pub(super) fn on_logged(&mut self, event: &CallEvent, sink: &dyn NamedSink) -> Result<(), SinkGone> {
        if self.phase != Phase::Serving {
            return Ok(());
        }
        self.note_durable(event);
        match event {
            CallEvent::Progress { stream, offset, bytes: Some(bytes) } => self.deliver(*stream, *offset, bytes, sink),
            CallEvent::Ended => {
                self.end(sink);
                Ok(())
            }
            CallEvent::Started { .. } | CallEvent::Progress { bytes: None, .. } | CallEvent::Elided { .. } => Ok(()),
        }
    }

    /// The subscription's connection is gone, or it was replaced or unsubscribed.
    pub(super) fn close(&mut self) {
        self.phase = Phase::Over;
    }

    /// What a durable event says of a stream's length.
    fn note_durable(&mut self, event: &CallEvent) {
        match event {
            CallEvent::Progress { stream, offset, bytes } => {
                let Some(state) = self.streams.get_mut(stream) else { return };
                match bytes {
                    Some(bytes) => {
                        let end = offset + bytes.len() as u64;
                        state.known_end = state.known_end.max(end);
                        if state.durable_end.is_none_or(|durable| durable <= end) {
                            state.durable_end = Some(end);
                        }
                    }
                    // Its length is unknown, so is where elided bytes would start.
                    None => state.durable_end = None,
                }
            }
            CallEvent::Elided { stream, elided_bytes } => {
                if let Some(state) = self.streams.get_mut(stream)
                    && let Some(durable_end) = state.durable_end
                {
                    state.known_end = state.known_end.max(durable_end + elided_bytes);
                }
            }
            CallEvent::Started { .. } | CallEvent::Ended => {}
        }
    }

    fn snapshot(&mut self, stream: OutputStream, run: &ByteRun, sink: &dyn NamedSink) -> Result<(), SinkGone> {
        let Some(state) = self.streams.get_mut(&stream) else { return Ok(()) };
        state.known_end = state.known_end.max(run.end());
        state.next = run.end();
        let snapshot = ToolOutputSnapshotParams {
            session_id: self.target.session_id.clone(),
            run_id: self.run_id.clone(),
            tool_call_id: self.target.tool_call_id.clone(),
            stream,
            start_offset: run.start,
            end_offset: run.end(),
            data: BASE64.encode(&run.bytes),
            subscription_id: Some(self.target.subscription_id.clone()),
        };
        if !offer::<ToolOutputSnapshot>(&snapshot, sink).inspect_err(|_| self.phase = Phase::Over)? {
            state.owed_gap = true;
        }
        Ok(())
    }

    /// Offers the part of a chunk at or after what was offered, after a gap notice when it does not follow on.
    fn deliver(
        &mut self,
        stream: OutputStream,
        offset: u64,
        data: &[u8],
        sink: &dyn NamedSink,
    ) -> Result<(), SinkGone> {
        let result = self.deliver_to_stream(stream, offset, data, sink);
        if result.is_err() {
            self.phase = Phase::Over;
        }
        result
    }

    fn deliver_to_stream(
        &mut self,
        stream: OutputStream,
        offset: u64,
        data: &[u8],
        sink: &dyn NamedSink,
    ) -> Result<(), SinkGone> {
        let Some(state) = self.streams.get_mut(&stream) else { return Ok(()) };
        let end = offset + data.len() as u64;
        state.known_end = state.known_end.max(end);
        let start = offset.max(state.next);
        let Some(data) = usize::try_from(start - offset).ok().and_then(|skip| data.get(skip..)) else { return Ok(()) };
        if data.is_empty() {
            return Ok(());
        }
        if start > state.next {
            state.owed_gap = true;
        }
        state.next = end;
        let (session_id, run_id, tool_call_id, subscription_id) = (
            &self.target.session_id,
            &self.run_id,
            &self.target.tool_call_id,
            Some(self.target.subscription_id.clone()),
        );
        if state.owed_gap {
            let gap = ToolOutputGapParams {
                session_id: session_id.clone(),
                run_id: run_id.clone(),
                tool_call_id: tool_call_id.clone(),
                stream,
                next_offset: start,
                subscription_id: subscription_id.clone(),
            };
            if !offer::<ToolOutputGap>(&gap, sink)? {
                // Still no room: this chunk is missed too, and the notice waits for the next one.
                return Ok(());
            }
            state.owed_gap = false;
        }
        let delta = ToolOutputDeltaParams {
            session_id: session_id.clone(),
            run_id: run_id.clone(),
            tool_call_id: tool_call_id.clone(),
            stream,
            byte_offset: start,
            data: BASE64.encode(data),
            subscription_id,
        };
        if !offer::<ToolOutputDelta>(&delta, sink)? {
            state.owed_gap = true;
        }
        Ok(())
    }

    /// Sends the end, once.
    fn end(&mut self, sink: &dyn NamedSink) {
        if self.phase == Phase::Over {
            return;
        }
        self.phase = Phase::Over;
        let end = ToolOutputEndParams {
            session_id: self.target.session_id.clone(),
            run_id: self.run_id.clone(),
            tool_call_id: self.target.tool_call_id.clone(),
            subscription_id: self.target.subscription_id.clone(),
            end_offsets: self.streams.iter().map(|(stream, state)| (*stream, state.known_end)).collect(),
        };
        if let Ok(frame) = encode_notification::<ToolOutputEnd>(&end) {
            sink.offer_end(&frame);
        }
    }
}

/// Encodes and offers one output notice; a notice that cannot be encoded counts as lost for room.
fn offer<N: Notification>(params: &N::Params, sink: &dyn NamedSink) -> Result<bool, SinkGone> {
    match encode_notification::<N>(params) {
        Ok(frame) => sink.offer_transient(&frame),
        Err(_) => Ok(false),
    }
}

#[cfg(test)]
#[path = "remote_named_output_tests.rs"]
mod tests;
