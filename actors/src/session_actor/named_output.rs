//! Named tool-output subscriptions (`tool_output.subscribe`): one tool call's output, to one connection, from a
//! byte offset, apart from `events.subscribe` (which gets every call's output).
//!
//! A subscription to a running call gets the retained window of each stream it follows (at most the last 64 KiB;
//! only bytes at or after its `from_offset`) as `events.tool_output_snapshot`, then each later chunk as
//! `events.tool_output_delta`, every notice carrying its `subscription_id`. Like a session subscriber, it may miss
//! deltas when its connection's queue is full and is then sent `events.tool_output_gap` before its next delta. When
//! the call ends, it is sent `events.tool_output_end` with each stream's length and forgotten. The retained windows
//! of the last [`ENDED_CALLS_KEPT`] ended calls are kept, so a subscription that arrives just after its call ended
//! still gets what remains, then the end at once. Older calls' output is in the log (`tool_call_progress`) and,
//! when the result was cut, in its stored whole output (`output_ref`).

use std::collections::{BTreeMap, HashSet, VecDeque};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytestring::ByteString;
use troupe_protocol::jsonrpc::encode_notification;
use troupe_protocol::notification::{ToolOutputDelta, ToolOutputEnd, ToolOutputGap, ToolOutputSnapshot};
use troupe_protocol::server::OutputSink;
use troupe_protocol::types::tool_output::{
    OutputStream, ToolOutputDeltaParams, ToolOutputEndParams, ToolOutputGapParams, ToolOutputSnapshotParams,
};

use crate::byte_run::ByteRun;

/// Ended calls whose retained windows are kept for late named subscriptions.
pub(super) const ENDED_CALLS_KEPT: usize = 4;

/// A call that ended, with what was retained of its streams.
pub(super) struct EndedCall {
    pub(super) tool_call_id: String,
    pub(super) run_id: String,
    pub(super) windows: BTreeMap<OutputStream, ByteRun>,
}

/// What a named subscription asked for.
pub(crate) struct NamedRequest {
    pub(crate) sink: OutputSink,
    pub(crate) subscription_id: String,
    pub(crate) tool_call_id: String,
    pub(crate) stream: Option<OutputStream>,
    pub(crate) from_offset: u64,
}

/// One live named subscription.
pub(super) struct NamedSubscriber {
    request: NamedRequest,
    run_id: String,
    /// Streams on which it missed bytes since its last delta.
    missed: HashSet<OutputStream>,
}

impl NamedSubscriber {
    pub(super) fn follows(&self, tool_call_id: &str, stream: OutputStream) -> bool {
        self.request.tool_call_id == tool_call_id && self.request.stream.is_none_or(|wanted| wanted == stream)
    }

    pub(super) fn tool_call_id(&self) -> &str {
        &self.request.tool_call_id
    }
}

/// Identifies the call a notice is about.
pub(super) struct CallRef<'a> {
    pub(super) session_id: &'a str,
    pub(super) run_id: &'a str,
    pub(super) tool_call_id: &'a str,
}

/// Offers the snapshots a new subscription is owed from `windows`. Returns false when its connection is gone.
fn offer_snapshots(call: &CallRef<'_>, request: &NamedRequest, windows: &BTreeMap<OutputStream, ByteRun>) -> bool {
    for (stream, window) in windows {
        if request.stream.is_some_and(|wanted| wanted != *stream) {
            continue;
        }
        let Some((start, bytes)) = window.from(request.from_offset) else { continue };
        let snapshot = ToolOutputSnapshotParams {
            session_id: call.session_id.to_owned(),
            run_id: call.run_id.to_owned(),
            tool_call_id: call.tool_call_id.to_owned(),
            stream: *stream,
            start_offset: start,
            end_offset: start + bytes.len() as u64,
            data: BASE64.encode(bytes),
            subscription_id: Some(request.subscription_id.clone()),
        };
        if let Ok(frame) = encode_notification::<ToolOutputSnapshot>(&snapshot)
            && request.sink.offer_transient(&frame).is_err()
        {
            return false;
        }
    }
    true
}

/// Offers the end notice of a subscription to a call whose streams ended at `windows`' ends.
fn offer_end(call: &CallRef<'_>, request: &NamedRequest, windows: &BTreeMap<OutputStream, ByteRun>) {
    let end_offsets = OutputStream::selected(request.stream)
        .into_iter()
        .map(|stream| (stream, windows.get(&stream).map_or(0, ByteRun::end)))
        .collect();
    let end = ToolOutputEndParams {
        session_id: call.session_id.to_owned(),
        run_id: call.run_id.to_owned(),
        tool_call_id: call.tool_call_id.to_owned(),
        subscription_id: request.subscription_id.clone(),
        end_offsets,
    };
    if let Ok(frame) = encode_notification::<ToolOutputEnd>(&end) {
        let _ = request.sink.offer_end(&frame);
    }
}

/// Starts a subscription to a running call: its snapshots now, its deltas later. `None` when the connection is
/// already gone.
pub(super) fn follow_running(
    call: &CallRef<'_>,
    request: NamedRequest,
    windows: &BTreeMap<OutputStream, ByteRun>,
) -> Option<NamedSubscriber> {
    offer_snapshots(call, &request, windows).then(|| NamedSubscriber {
        request,
        run_id: call.run_id.to_owned(),
        missed: HashSet::new(),
    })
}

/// Serves a subscription to a call that already ended: what was retained, then the end.
pub(super) fn serve_ended(session_id: &str, request: NamedRequest, ended: &EndedCall) {
    let call = CallRef { session_id, run_id: &ended.run_id, tool_call_id: &ended.tool_call_id };
    if offer_snapshots(&call, &request, &ended.windows) {
        offer_end(&call, &request, &ended.windows);
    }
}

/// Offers one chunk to a subscriber that follows its stream (the part at or after its `from_offset`). Returns
/// false when the subscription is over (unsubscribed, replaced, or its connection gone).
pub(super) fn offer_chunk(
    session_id: &str,
    subscriber: &mut NamedSubscriber,
    stream: OutputStream,
    offset: u64,
    data: &[u8],
) -> bool {
    let from = subscriber.request.from_offset.max(offset);
    let Ok(skip) = usize::try_from(from - offset) else { return true };
    let Some(data) = data.get(skip..).filter(|rest| !rest.is_empty()) else { return true };
    let request = &subscriber.request;
    if subscriber.missed.contains(&stream) {
        let gap = ToolOutputGapParams {
            session_id: session_id.to_owned(),
            run_id: subscriber.run_id.clone(),
            tool_call_id: request.tool_call_id.clone(),
            stream,
            next_offset: from,
            subscription_id: Some(request.subscription_id.clone()),
        };
        let Ok(gap) = encode_notification::<ToolOutputGap>(&gap) else { return true };
        match request.sink.offer_transient(&gap) {
            Ok(true) => {
                subscriber.missed.remove(&stream);
            }
            // Still no room: this delta is missed too, and the gap notice waits for the next one.
            Ok(false) => return true,
            Err(_) => return false,
        }
    }
    let delta = ToolOutputDeltaParams {
        session_id: session_id.to_owned(),
        run_id: subscriber.run_id.clone(),
        tool_call_id: request.tool_call_id.clone(),
        stream,
        byte_offset: from,
        data: BASE64.encode(data),
        subscription_id: Some(request.subscription_id.clone()),
    };
    let Ok(frame): Result<ByteString, _> = encode_notification::<ToolOutputDelta>(&delta) else { return true };
    match subscriber.request.sink.offer_transient(&frame) {
        Ok(true) => true,
        Ok(false) => {
            subscriber.missed.insert(stream);
            true
        }
        Err(_) => false,
    }
}

/// The call ended: each of its subscribers is sent the end.
pub(super) fn end_subscribers(session_id: &str, subscribers: Vec<NamedSubscriber>, ended: &EndedCall) {
    let call = CallRef { session_id, run_id: &ended.run_id, tool_call_id: &ended.tool_call_id };
    for subscriber in subscribers {
        offer_end(&call, &subscriber.request, &ended.windows);
    }
}

/// Keeps `ended` to the newest [`ENDED_CALLS_KEPT`] calls.
pub(super) fn remember_ended(kept: &mut VecDeque<EndedCall>, ended: EndedCall) {
    kept.retain(|call| call.tool_call_id != ended.tool_call_id);
    if kept.len() == ENDED_CALLS_KEPT {
        kept.pop_front();
    }
    kept.push_back(ended);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_newest_ended_calls_are_kept() {
        let mut kept = VecDeque::new();
        for index in 0..ENDED_CALLS_KEPT + 2 {
            let call = EndedCall { tool_call_id: format!("c{index}"), run_id: "r".into(), windows: BTreeMap::new() };
            remember_ended(&mut kept, call);
        }
        let ids: Vec<&str> = kept.iter().map(|call| call.tool_call_id.as_str()).collect();
        assert_eq!(ids, ["c2", "c3", "c4", "c5"]);
    }
}

/// Starts a named tool-output subscription. Replies whether the call is still running.
#[derive(actix::Message)]
#[rtype(result = "Result<bool, crate::error::EngineError>")]
pub struct SubscribeToolOutput {
    pub sink: OutputSink,
    pub subscription_id: String,
    pub tool_call_id: String,
    pub stream: Option<OutputStream>,
    pub from_offset: u64,
}

impl actix::Handler<SubscribeToolOutput> for super::SessionActor {
    type Result = Result<bool, crate::error::EngineError>;

    fn handle(&mut self, message: SubscribeToolOutput, _: &mut actix::Context<Self>) -> Self::Result {
        // A session that could not be opened here (in a cluster: another node hosts it) says why, as for every
        // request, rather than that it knows no such call.
        self.ready_state()?;
        let SubscribeToolOutput { sink, subscription_id, tool_call_id, stream, from_offset } = message;
        let request = NamedRequest { sink, subscription_id, tool_call_id: tool_call_id.clone(), stream, from_offset };
        self.tool_output.subscribe_named(&self.session_id, request).ok_or_else(|| {
            crate::error::EngineError::ToolCallNotFound { session_id: self.session_id.clone(), tool_call_id }
        })
    }
}
