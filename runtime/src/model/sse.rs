//! Server-sent events: decoding the byte stream, and driving a vendor parser over it.
//!
//! Both HTTP vendors stream `text/event-stream`. [`SseDecoder`] cuts bytes into events as the SSE spec says
//! (`event:` and `data:` fields, a blank line ends an event, `:` starts a comment); a vendor's
//! [`VendorStreamParser`] turns events into [`StreamEvent`]s; [`drive_event_stream`] joins them into a
//! [`ModelStream`] that reads the body only as fast as it is consumed, so dropping it drops the connection.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;

use super::error::{ErrorStage, ModelError, ModelErrorKind};
use super::http::transport_error;
use super::secret::ApiKey;
use super::{ModelStream, StreamEvent};

/// A line longer than this is not a sane event; refusing it bounds the memory a broken server can make us use.
const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// One dispatched event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event:` field, when the server names its events (Anthropic does, OpenAI does not).
    pub event: Option<String>,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
}

/// Incremental SSE decoder: bytes in, complete events out.
#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    /// Bytes of the current, unfinished line. Lines are decoded as UTF-8 only once complete, so a character
    /// split across two network reads is never cut.
    partial_line: Vec<u8>,
    event_name: Option<String>,
    data: Option<String>,
}

impl SseDecoder {
    /// Feeds a chunk of the body, appending every event it completes to `events`.
    pub fn feed(&mut self, chunk: &[u8], events: &mut Vec<SseEvent>) -> Result<(), String> {
        let mut rest = chunk;
        while let Some(newline) = rest.iter().position(|&byte| byte == b'\n') {
            self.partial_line.extend_from_slice(&rest[..newline]);
            rest = &rest[newline + 1..];
            let mut line = std::mem::take(&mut self.partial_line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let line = String::from_utf8(line).map_err(|_| "the event stream is not valid UTF-8".to_owned())?;
            self.handle_line(&line, events);
        }
        self.partial_line.extend_from_slice(rest);
        if self.partial_line.len() > MAX_LINE_BYTES {
            return Err(format!("an event stream line is longer than {MAX_LINE_BYTES} bytes"));
        }
        Ok(())
    }

    /// Called at the end of the body: dispatches an event that was not closed by a blank line. The SSE spec
    /// would drop it, but some servers omit the final blank line and the vendor parser decides whether the
    /// stream was complete anyway.
    pub fn finish(&mut self, events: &mut Vec<SseEvent>) {
        if !self.partial_line.is_empty() {
            let line = String::from_utf8_lossy(&std::mem::take(&mut self.partial_line)).into_owned();
            self.handle_line(line.trim_end_matches('\r'), events);
        }
        self.dispatch(events);
    }

    fn handle_line(&mut self, line: &str, events: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.dispatch(events);
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.event_name = Some(value.to_owned()),
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            // `id` and `retry` matter for reconnecting EventSource clients; a model stream is never resumed.
            _ => {}
        }
    }

    fn dispatch(&mut self, events: &mut Vec<SseEvent>) {
        let event = self.event_name.take();
        if let Some(data) = self.data.take() {
            events.push(SseEvent { event, data });
        }
    }
}

/// What a vendor parser yields: events, or the error that ends the stream.
pub(crate) type StreamOutput = VecDeque<Result<StreamEvent, ModelError>>;

/// A vendor's translation of SSE events into [`StreamEvent`]s.
pub(crate) trait VendorStreamParser: Send + 'static {
    /// Handles one event. Pushing `Finished` or an error ends the stream: nothing after it is read.
    fn on_event(&mut self, event: SseEvent, output: &mut StreamOutput);

    /// Called when the body ends before the parser pushed `Finished`: push `Finished` when what was seen
    /// amounts to a complete answer, else an `UnexpectedEof` error.
    fn on_end_of_body(&mut self, output: &mut StreamOutput);
}

struct DriverState<Parser> {
    body: BoxStream<'static, reqwest::Result<Bytes>>,
    decoder: SseDecoder,
    parser: Parser,
    pending: StreamOutput,
    body_ended: bool,
    /// Set once `Finished` or an error was yielded.
    finished: bool,
    idle_timeout: Duration,
    api_key: Option<ApiKey>,
}

/// Turns a streaming response into a [`ModelStream`] through `parser`.
///
/// The body is read only when the consumer asks for the next event, and a read that takes longer than
/// `idle_timeout` fails the stream with `Timeout`: a vendor that stops sending without closing would otherwise
/// hang the run forever. Errors have `api_key` removed from their texts.
pub(crate) fn drive_event_stream<Parser: VendorStreamParser>(
    response: reqwest::Response,
    parser: Parser,
    idle_timeout: Duration,
    api_key: Option<ApiKey>,
) -> ModelStream {
    let state = DriverState {
        body: response.bytes_stream().boxed(),
        decoder: SseDecoder::default(),
        parser,
        pending: VecDeque::new(),
        body_ended: false,
        finished: false,
        idle_timeout,
        api_key,
    };
    futures::stream::unfold(state, next_event).boxed()
}

async fn next_event<Parser: VendorStreamParser>(
    mut state: DriverState<Parser>,
) -> Option<(Result<StreamEvent, ModelError>, DriverState<Parser>)> {
    loop {
        if state.finished {
            return None;
        }
        if let Some(item) = state.pending.pop_front() {
            let item = match item {
                Ok(event) => {
                    if matches!(event, StreamEvent::Finished { .. }) {
                        state.finished = true;
                    }
                    Ok(event)
                }
                Err(error) => {
                    state.finished = true;
                    Err(super::http::redact_error(error, state.api_key.as_ref()))
                }
            };
            return Some((item, state));
        }
        if state.body_ended {
            return None;
        }
        let mut events = Vec::new();
        match tokio::time::timeout(state.idle_timeout, state.body.next()).await {
            Err(_elapsed) => {
                state.pending.push_back(Err(ModelError::new(
                    ModelErrorKind::Timeout,
                    ErrorStage::Stream,
                    format!("the model sent nothing for {} ms", state.idle_timeout.as_millis()),
                )));
                continue;
            }
            Ok(None) => {
                state.body_ended = true;
                state.decoder.finish(&mut events);
            }
            Ok(Some(Err(error))) => {
                state.pending.push_back(Err(transport_error(&error, ErrorStage::Stream)));
                continue;
            }
            Ok(Some(Ok(chunk))) => {
                if let Err(reason) = state.decoder.feed(&chunk, &mut events) {
                    state.pending.push_back(Err(ModelError::new(
                        ModelErrorKind::InvalidResponse,
                        ErrorStage::Stream,
                        reason,
                    )));
                    continue;
                }
            }
        }
        for event in events {
            state.parser.on_event(event, &mut state.pending);
        }
        if state.body_ended && !ends_stream(&state.pending) {
            state.parser.on_end_of_body(&mut state.pending);
        }
    }
}

/// Whether `pending` already holds the stream's last item.
fn ends_stream(pending: &StreamOutput) -> bool {
    pending.iter().any(|item| matches!(item, Err(_) | Ok(StreamEvent::Finished { .. })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::default();
        let mut events = Vec::new();
        for chunk in chunks {
            decoder.feed(chunk, &mut events).unwrap();
        }
        decoder.finish(&mut events);
        events
    }

    #[test]
    fn events_split_across_reads_and_multibyte_characters_survive() {
        let text = "event: a\r\ndata: {\"t\":\"é\"}\r\n\r\n: comment\n\ndata: x\ndata: y\n\ndata: tail";
        let bytes = text.as_bytes();
        // Cut inside the two-byte `é`.
        let cut = text.find('é').unwrap() + 1;
        let events = decode(&[&bytes[..cut], &bytes[cut..]]);
        assert_eq!(
            events,
            vec![
                SseEvent { event: Some("a".into()), data: "{\"t\":\"é\"}".into() },
                SseEvent { event: None, data: "x\ny".into() },
                SseEvent { event: None, data: "tail".into() },
            ]
        );
    }
}
