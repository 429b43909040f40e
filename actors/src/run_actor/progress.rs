//! Bounded, durable `tool_call_progress` events from a tool's live output.

use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::tool_output::OutputStream;
use troupe_runtime::tools::OutputChunk;

/// Durable `tool_call_progress` text kept per stream of one tool call; the rest is counted as elided.
const DURABLE_OUTPUT_CAP: usize = 64 * 1024;
/// Output is coalesced into progress events of about this size.
const PROGRESS_CHUNK: usize = 16 * 1024;

/// Turns a tool's output stream into bounded, durable `tool_call_progress` events.
pub(super) struct ProgressRecorder {
    tool_call_id: String,
    streams: [StreamProgress; 2],
}

#[derive(Default)]
struct StreamProgress {
    pending: Vec<u8>,
    pending_offset: u64,
    recorded: usize,
    elided: u64,
}

impl ProgressRecorder {
    pub(super) fn new(tool_call_id: String) -> Self {
        ProgressRecorder { tool_call_id, streams: Default::default() }
    }

    fn index(stream: OutputStream) -> usize {
        match stream {
            OutputStream::Stdout => 0,
            OutputStream::Stderr => 1,
        }
    }

    pub(super) fn record(&mut self, chunk: OutputChunk) -> Option<EventPayload> {
        let tool_call_id = self.tool_call_id.clone();
        let progress = &mut self.streams[Self::index(chunk.stream)];
        let room = DURABLE_OUTPUT_CAP.saturating_sub(progress.recorded + progress.pending.len());
        let kept = chunk.data.len().min(room);
        if progress.pending.is_empty() {
            progress.pending_offset = chunk.offset;
        }
        progress.pending.extend_from_slice(&chunk.data[..kept]);
        progress.elided += (chunk.data.len() - kept) as u64;
        (progress.pending.len() >= PROGRESS_CHUNK).then(|| Self::flush(&tool_call_id, chunk.stream, progress))?
    }

    fn flush(tool_call_id: &str, stream: OutputStream, progress: &mut StreamProgress) -> Option<EventPayload> {
        if progress.pending.is_empty() {
            return None;
        }
        let bytes = std::mem::take(&mut progress.pending);
        progress.recorded += bytes.len();
        Some(EventPayload::ToolCallProgress {
            tool_call_id: tool_call_id.to_owned(),
            stream,
            offset: progress.pending_offset,
            text: String::from_utf8_lossy(&bytes).into_owned(),
        })
    }

    pub(super) fn finish(&mut self) -> Vec<EventPayload> {
        let mut payloads = Vec::new();
        for stream in [OutputStream::Stdout, OutputStream::Stderr] {
            let tool_call_id = self.tool_call_id.clone();
            let progress = &mut self.streams[Self::index(stream)];
            payloads.extend(Self::flush(&tool_call_id, stream, progress));
            if progress.elided > 0 {
                payloads.push(EventPayload::ToolOutputElided { tool_call_id, stream, elided_bytes: progress.elided });
            }
        }
        payloads
    }
}
