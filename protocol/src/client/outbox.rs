//! The way out to the consumer (a part of the connection task). The task never waits for the consumer: the
//! [`Outbox`] hands deliveries to the bounded delivery stream with `try_send`, and what does not fit waits here,
//! in order, until the consumer makes room. The stream is *congested* while anything waits here.
//!
//! What may wait is bounded by what the task itself decides to queue: replays (one subscribe reply each, which
//! the daemon bounds in bytes), control notices (replay boundaries, connection changes) and the live events
//! read before congestion was noticed. While congested, the rest is not queued, but remembered with state of a
//! fixed size:
//!
//! - a subscribed session's live events: the session is marked *behind* at its cursor and re-subscribed once
//!   the consumer has caught up (see `subscriptions`);
//! - tool output (`events.tool_output_delta`, `…_snapshot`, `…_gap`): one record per output stream, the offset
//!   after the last byte dropped; once there is room the consumer gets a synthesized `ToolOutputGap` for the
//!   stream, before any later output of it;
//! - `runtime.changed`: only the newest is kept, and delivered once there is room (each carries a whole
//!   snapshot, so the newest says everything);
//! - `events.plugin`: dropped and counted; the count arrives as [`ClientDelivery::PluginEventsDropped`].

use std::collections::VecDeque;

use serde::Deserialize as _;
use serde_json::Value;
use tokio::sync::mpsc;

use super::delivery::ClientDelivery;
use super::incoming::ToolOutput;
use crate::types::runtime::RuntimeChangedParams;
use crate::types::tool_output::{OutputStream, ToolOutputDeltaParams, ToolOutputGapParams, ToolOutputSnapshotParams};

/// Output streams with dropped bytes remembered at once. Beyond this the oldest record is forgotten: it almost
/// certainly belongs to a tool call that has ended long ago.
const MAX_MISSED_OUTPUT_STREAMS: usize = 256;

/// The deliveries waiting for the consumer, and what was dropped while they wait.
pub(super) struct Outbox {
    /// `None` once the consumer dropped [`Deliveries`](super::Deliveries).
    sender: Option<mpsc::Sender<ClientDelivery>>,
    queue: VecDeque<ClientDelivery>,
    missed_output: VecDeque<ToolOutputGapParams>,
    runtime_changed: Option<RuntimeChangedParams>,
    dropped_plugin_events: u64,
}

impl Outbox {
    pub(super) fn new(sender: mpsc::Sender<ClientDelivery>) -> Self {
        Outbox {
            sender: Some(sender),
            queue: VecDeque::new(),
            missed_output: VecDeque::new(),
            runtime_changed: None,
            dropped_plugin_events: 0,
        }
    }

    /// Something waits for the consumer to make room.
    pub(super) fn congested(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Hands `delivery` to the consumer, or queues it behind what is already waiting. Never drops it (unless
    /// the consumer is gone): callers decide beforehand, with [`Outbox::congested`], what to queue.
    pub(super) fn push(&mut self, delivery: ClientDelivery) {
        let Some(sender) = &self.sender else {
            return;
        };
        if !self.queue.is_empty() {
            self.queue.push_back(delivery);
            return;
        }
        match sender.try_send(delivery) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(delivery)) => self.queue.push_back(delivery),
            Err(mpsc::error::TrySendError::Closed(_)) => self.consumer_gone(),
        }
    }

    /// Moves waiting deliveries into the stream while it has room; once nothing waits any more, delivers what
    /// was remembered while congested. Returns whether the stream is free of waiting deliveries.
    pub(super) fn flush(&mut self) -> bool {
        while let Some(sender) = &self.sender
            && let Some(delivery) = self.queue.pop_front()
        {
            match sender.try_send(delivery) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(delivery)) => {
                    self.queue.push_front(delivery);
                    return false;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => self.consumer_gone(),
            }
        }
        self.release_remembered();
        !self.congested()
    }

    /// Resolves once the stream has a free slot (or the consumer is gone). Never resolves while nothing waits:
    /// there is nothing to make room for.
    pub(super) async fn room(&self) {
        match &self.sender {
            Some(sender) if self.congested() => {
                // The permit is dropped at once: the task is the only sender, so the slot stays free for `flush`.
                let _ = sender.reserve().await;
            }
            _ => std::future::pending().await,
        }
    }

    /// The deliveries still waiting when the connection ended, for a last hand-over.
    pub(super) fn take_remaining(&mut self) -> (Option<mpsc::Sender<ClientDelivery>>, VecDeque<ClientDelivery>) {
        self.release_remembered_into_queue();
        (self.sender.clone(), std::mem::take(&mut self.queue))
    }

    pub(super) fn tool_output(&mut self, output: ToolOutput) {
        // The usual case, once per frame: room for it and no stream behind, so no key is decoded.
        if !self.congested() && self.missed_output.is_empty() {
            self.push(delivery_of(output));
            return;
        }
        let Some(stream) = StreamKey::of(&output) else {
            tracing::warn!("ignoring an undecodable tool output notification");
            return;
        };
        if self.congested() {
            let next_offset = match &output {
                ToolOutput::Delta(params) => delta_end(params),
                ToolOutput::Snapshot(params) => {
                    ToolOutputSnapshotParams::deserialize(params).ok().map(|snapshot| snapshot.end_offset)
                }
                ToolOutput::Gap(params) => ToolOutputGapParams::deserialize(params).ok().map(|gap| gap.next_offset),
            };
            self.remember_missed(stream, next_offset.unwrap_or(0));
            return;
        }
        // Output of a stream that lost bytes: the consumer first learns where it resumes.
        if let Some(index) = self.missed_output.iter().position(|missed| stream.matches(missed)) {
            let mut gap = self.missed_output.remove(index).unwrap_or_else(|| stream.gap(0));
            if let Some(start) = start_offset(&output) {
                gap.next_offset = gap.next_offset.max(start);
            }
            if !matches!(output, ToolOutput::Gap(_)) {
                self.push_gap(gap);
            }
        }
        self.push(delivery_of(output));
    }

    /// `events.tool_output_end` of a named subscription: never dropped, and after the gap of any output of the
    /// subscription dropped while congested.
    pub(super) fn tool_output_end(&mut self, params: Value) {
        let subscription_id = params.get("subscription_id").and_then(Value::as_str).map(str::to_owned);
        while let Some(index) = self
            .missed_output
            .iter()
            .position(|missed| subscription_id.is_some() && missed.subscription_id == subscription_id)
        {
            if let Some(gap) = self.missed_output.remove(index) {
                self.push_gap(gap);
            }
        }
        self.push(ClientDelivery::ToolOutputEnd(params));
    }

    pub(super) fn runtime_changed(&mut self, changed: RuntimeChangedParams) {
        if self.congested() {
            self.runtime_changed = Some(changed);
        } else {
            self.runtime_changed = None;
            self.push(ClientDelivery::RuntimeChanged(changed));
        }
    }

    pub(super) fn plugin_event(&mut self, params: Value) {
        if self.congested() {
            self.dropped_plugin_events += 1;
        } else {
            self.push(ClientDelivery::PluginEvent(params));
        }
    }

    fn remember_missed(&mut self, stream: StreamKey, next_offset: u64) {
        if let Some(missed) = self.missed_output.iter_mut().find(|missed| stream.matches(missed)) {
            missed.next_offset = missed.next_offset.max(next_offset);
            return;
        }
        if self.missed_output.len() >= MAX_MISSED_OUTPUT_STREAMS {
            self.missed_output.pop_front();
        }
        self.missed_output.push_back(stream.gap(next_offset));
    }

    fn push_gap(&mut self, gap: ToolOutputGapParams) {
        match serde_json::to_value(&gap) {
            Ok(value) => self.push(ClientDelivery::ToolOutputGap(value)),
            Err(error) => tracing::warn!(%error, "cannot encode a tool output gap"),
        }
    }

    /// Once nothing waits, what was remembered while congested goes out (it may congest the stream again).
    fn release_remembered(&mut self) {
        if self.congested() || self.sender.is_none() {
            return;
        }
        self.release_remembered_into_queue();
    }

    fn release_remembered_into_queue(&mut self) {
        while let Some(gap) = self.missed_output.pop_front() {
            self.push_gap(gap);
        }
        if let Some(changed) = self.runtime_changed.take() {
            self.push(ClientDelivery::RuntimeChanged(changed));
        }
        if self.dropped_plugin_events > 0 {
            let count = std::mem::take(&mut self.dropped_plugin_events);
            self.push(ClientDelivery::PluginEventsDropped { count });
        }
    }

    /// The consumer dropped [`Deliveries`](super::Deliveries): calls keep working, deliveries are discarded.
    fn consumer_gone(&mut self) {
        self.sender = None;
        self.queue.clear();
        self.missed_output.clear();
        self.runtime_changed = None;
        self.dropped_plugin_events = 0;
    }
}

/// Which output stream a notification belongs to.
struct StreamKey {
    session_id: String,
    run_id: String,
    tool_call_id: String,
    stream: OutputStream,
    /// A named subscription's output is accounted apart from `events.subscribe`'s output of the same stream.
    subscription_id: Option<String>,
}

impl StreamKey {
    fn of(output: &ToolOutput) -> Option<StreamKey> {
        #[derive(serde::Deserialize)]
        struct Key {
            session_id: String,
            run_id: String,
            tool_call_id: String,
            stream: OutputStream,
            #[serde(default)]
            subscription_id: Option<String>,
        }
        let params = match output {
            ToolOutput::Delta(params) | ToolOutput::Snapshot(params) | ToolOutput::Gap(params) => params,
        };
        let key = Key::deserialize(params).ok()?;
        Some(StreamKey {
            session_id: key.session_id,
            run_id: key.run_id,
            tool_call_id: key.tool_call_id,
            stream: key.stream,
            subscription_id: key.subscription_id,
        })
    }

    fn matches(&self, gap: &ToolOutputGapParams) -> bool {
        gap.tool_call_id == self.tool_call_id
            && gap.stream == self.stream
            && gap.run_id == self.run_id
            && gap.session_id == self.session_id
            && gap.subscription_id == self.subscription_id
    }

    fn gap(self, next_offset: u64) -> ToolOutputGapParams {
        ToolOutputGapParams {
            session_id: self.session_id,
            run_id: self.run_id,
            tool_call_id: self.tool_call_id,
            stream: self.stream,
            next_offset,
            subscription_id: self.subscription_id,
        }
    }
}

/// The delivery of a tool output notification, as is.
fn delivery_of(output: ToolOutput) -> ClientDelivery {
    match output {
        ToolOutput::Delta(params) => ClientDelivery::ToolOutputDelta(params),
        ToolOutput::Snapshot(params) => ClientDelivery::ToolOutputSnapshot(params),
        ToolOutput::Gap(params) => ClientDelivery::ToolOutputGap(params),
    }
}

/// The offset just past a delta's bytes, computed from the length of its base64 text.
fn delta_end(params: &Value) -> Option<u64> {
    let delta = ToolOutputDeltaParams::deserialize(params).ok()?;
    Some(delta.byte_offset + base64_decoded_len(&delta.data))
}

/// Where a notification's bytes start (a gap's: where output resumes).
fn start_offset(output: &ToolOutput) -> Option<u64> {
    match output {
        ToolOutput::Delta(params) => params.get("byte_offset")?.as_u64(),
        ToolOutput::Snapshot(params) => params.get("start_offset")?.as_u64(),
        ToolOutput::Gap(params) => params.get("next_offset")?.as_u64(),
    }
}

/// The number of bytes padded standard base64 `text` decodes to.
fn base64_decoded_len(text: &str) -> u64 {
    let text = text.trim_end();
    let padding = text.bytes().rev().take_while(|&byte| byte == b'=').count().min(2);
    ((text.len() / 4 * 3).saturating_sub(padding)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn delta(offset: u64, data: &str) -> ToolOutput {
        ToolOutput::Delta(json!({"session_id": "s", "run_id": "r", "tool_call_id": "t", "stream": "stdout",
            "byte_offset": offset, "data": data}))
    }

    #[test]
    fn base64_lengths_count_decoded_bytes() {
        assert_eq!(base64_decoded_len(""), 0);
        assert_eq!(base64_decoded_len("aGk="), 2);
        assert_eq!(base64_decoded_len("aGk/"), 3);
        assert_eq!(base64_decoded_len("aA=="), 1);
    }

    #[test]
    fn output_dropped_while_congested_is_reported_as_a_gap_before_later_output() {
        let (sender, mut receiver) = mpsc::channel(1);
        let mut outbox = Outbox::new(sender);
        outbox.push(ClientDelivery::Reconnected);
        outbox.push(ClientDelivery::Reconnected);
        assert!(outbox.congested());
        // "aGk=" is two bytes: 0..2 and 2..4 are dropped.
        outbox.tool_output(delta(0, "aGk="));
        outbox.tool_output(delta(2, "aGk="));
        outbox.plugin_event(json!({"x": 1}));

        assert_eq!(receiver.try_recv().unwrap(), ClientDelivery::Reconnected);
        assert!(!outbox.flush(), "the gap and the drop count wait behind the second notice");
        assert_eq!(receiver.try_recv().unwrap(), ClientDelivery::Reconnected);
        outbox.flush();
        let ClientDelivery::ToolOutputGap(gap) = receiver.try_recv().unwrap() else { panic!("expected a gap") };
        assert_eq!(gap["next_offset"], 4);
        assert_eq!(gap["tool_call_id"], "t");
        outbox.flush();
        assert_eq!(receiver.try_recv().unwrap(), ClientDelivery::PluginEventsDropped { count: 1 });
        assert!(outbox.flush());

        // Later output of the stream goes straight through.
        outbox.tool_output(delta(4, "aGk="));
        assert!(matches!(receiver.try_recv().unwrap(), ClientDelivery::ToolOutputDelta(_)));
    }
}
