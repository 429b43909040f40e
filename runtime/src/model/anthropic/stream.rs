//! Parsing a Messages event stream.
//!
//! Events are named (`event: <type>`) and their data repeats the type:
//!
//! - `message_start`: `message.usage` with the prompt's `input_tokens`, `cache_creation_input_tokens` and
//!   `cache_read_input_tokens`.
//! - `content_block_start` / `content_block_delta` / `content_block_stop`, per `index`: `text` blocks grow by
//!   `text_delta`, `thinking` blocks by `thinking_delta`, `tool_use` blocks start with `id` and `name` and grow
//!   by `input_json_delta.partial_json`; the call is emitted whole at its `content_block_stop`.
//! - `message_delta`: `delta.stop_reason` and the cumulative `usage.output_tokens`; usage is emitted here.
//! - `message_stop`: the end. `ping` is ignored; `error` fails the stream (`overloaded_error` is `overload`).
//!
//! Anthropic's `input_tokens` excludes cached tokens; [`TokenUsage::input_tokens`] includes them, so the three
//! counts are added up.

use std::collections::HashMap;

use serde_json::Value;

use crate::model::error::{ErrorStage, ModelError, ModelErrorKind, classify_vendor_failure};
use crate::model::http::VendorErrorBody;
use crate::model::sse::{SseEvent, StreamOutput, VendorStreamParser};
use crate::model::{StreamEvent, TokenUsage, ToolCallRequest, parse_tool_arguments};

/// A `tool_use` block whose input is still arriving.
#[derive(Debug)]
struct PartialToolUse {
    id: String,
    name: String,
    partial_json: String,
}

#[derive(Debug, Default)]
pub(super) struct AnthropicStreamParser {
    /// Open `tool_use` blocks by their content block index.
    tool_uses: HashMap<u64, PartialToolUse>,
    /// Prompt-side counts from `message_start`, completed by `message_delta`.
    usage: TokenUsage,
    stop_reason: Option<String>,
}

impl VendorStreamParser for AnthropicStreamParser {
    fn on_event(&mut self, event: SseEvent, output: &mut StreamOutput) {
        let data: Value = match serde_json::from_str(&event.data) {
            Ok(data) => data,
            Err(error) => {
                output.push_back(Err(ModelError::new(
                    ModelErrorKind::InvalidResponse,
                    ErrorStage::Stream,
                    format!("a stream event is not JSON: {error}"),
                )));
                return;
            }
        };
        // The data's `type` is authoritative; the `event:` line only repeats it.
        let event_type = data["type"].as_str().map(str::to_owned).or(event.event).unwrap_or_default();
        match event_type.as_str() {
            "message_start" => self.on_message_start(&data["message"]["usage"]),
            "content_block_start" => self.on_block_start(&data),
            "content_block_delta" => self.on_block_delta(&data, output),
            "content_block_stop" => self.on_block_stop(&data, output),
            "message_delta" => self.on_message_delta(&data, output),
            "message_stop" => output.push_back(Ok(StreamEvent::Finished { stop_reason: self.stop_reason.take() })),
            "error" => output.push_back(Err(stream_error(&data))),
            // `ping`, and event types newer than this parser.
            _ => {}
        }
    }

    fn on_end_of_body(&mut self, output: &mut StreamOutput) {
        output.push_back(Err(ModelError::new(
            ModelErrorKind::UnexpectedEof,
            ErrorStage::Stream,
            "the stream ended before `message_stop`",
        )));
    }
}

impl AnthropicStreamParser {
    fn on_message_start(&mut self, usage: &Value) {
        let count = |field: &str| usage[field].as_u64().unwrap_or(0);
        self.usage.cache_write_tokens = count("cache_creation_input_tokens");
        self.usage.cache_read_tokens = count("cache_read_input_tokens");
        self.usage.input_tokens = count("input_tokens") + self.usage.cache_write_tokens + self.usage.cache_read_tokens;
        self.usage.output_tokens = count("output_tokens");
    }

    fn on_block_start(&mut self, data: &Value) {
        let block = &data["content_block"];
        if block["type"].as_str() != Some("tool_use") {
            // Text and thinking blocks start empty in practice; their content comes as deltas.
            return;
        }
        let Some(index) = data["index"].as_u64() else {
            return;
        };
        self.tool_uses.insert(
            index,
            PartialToolUse {
                id: block["id"].as_str().unwrap_or_default().to_owned(),
                name: block["name"].as_str().unwrap_or_default().to_owned(),
                partial_json: String::new(),
            },
        );
    }

    fn on_block_delta(&mut self, data: &Value, output: &mut StreamOutput) {
        let delta = &data["delta"];
        match delta["type"].as_str() {
            Some("text_delta") => {
                if let Some(text) = delta["text"].as_str()
                    && !text.is_empty()
                {
                    output.push_back(Ok(StreamEvent::TextDelta(text.to_owned())));
                }
            }
            Some("thinking_delta") => {
                if let Some(thinking) = delta["thinking"].as_str()
                    && !thinking.is_empty()
                {
                    output.push_back(Ok(StreamEvent::ReasoningDelta(thinking.to_owned())));
                }
            }
            Some("input_json_delta") => {
                let tool_use = data["index"].as_u64().and_then(|index| self.tool_uses.get_mut(&index));
                if let (Some(tool_use), Some(fragment)) = (tool_use, delta["partial_json"].as_str()) {
                    tool_use.partial_json.push_str(fragment);
                }
            }
            // `signature_delta` authenticates thinking for replay, which this crate does not do yet.
            _ => {}
        }
    }

    fn on_block_stop(&mut self, data: &Value, output: &mut StreamOutput) {
        let Some(tool_use) = data["index"].as_u64().and_then(|index| self.tool_uses.remove(&index)) else {
            return;
        };
        output.push_back(Ok(StreamEvent::ToolCall(ToolCallRequest {
            tool_call_id: tool_use.id,
            tool: tool_use.name,
            arguments: parse_tool_arguments(&tool_use.partial_json),
        })));
    }

    fn on_message_delta(&mut self, data: &Value, output: &mut StreamOutput) {
        if let Some(reason) = data["delta"]["stop_reason"].as_str() {
            self.stop_reason = Some(reason.to_owned());
        }
        let usage = &data["usage"];
        if let Some(output_tokens) = usage["output_tokens"].as_u64() {
            self.usage.output_tokens = output_tokens;
        }
        output.push_back(Ok(StreamEvent::Usage(self.usage)));
    }
}

/// An `error` event: the request failed after the stream started, typically `overloaded_error`.
fn stream_error(data: &Value) -> ModelError {
    let vendor_error = VendorErrorBody::from_value(data);
    let message =
        vendor_error.message.clone().unwrap_or_else(|| "the model reported an error in the stream".to_owned());
    let (kind, retryable) = classify_vendor_failure(None, vendor_error.code.as_deref(), &message);
    let mut error = ModelError::new(kind, ErrorStage::Stream, message);
    error.retryable = retryable;
    error.vendor_code = vendor_error.code;
    error.response_body = Some(troupe_protocol::diagnostic::sanitize_diagnostic(&data.to_string()));
    error
}
