//! Parsing a Chat Completions event stream.
//!
//! Each event is `data: {chunk}` and the stream ends with `data: [DONE]`. A chunk's `choices[0].delta` holds
//! new text (`content`), reasoning (`reasoning_content` from DeepSeek and llama.cpp, `reasoning` from Ollama
//! and OpenRouter) and tool-call fragments. A tool call arrives in pieces keyed by `index`: the first
//! carries its `id` and `function.name`, later ones append to `function.arguments`. The calls are emitted whole
//! once the choice has a `finish_reason`. With `include_usage`, a last chunk with empty `choices` carries
//! `usage`.
//!
//! A body that ends without `[DONE]` is still complete if a `finish_reason` was seen (some compatible servers
//! never send `[DONE]`); otherwise it was cut off, which is `UnexpectedEof`.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::model::error::{ErrorStage, ModelError, ModelErrorKind, classify_vendor_failure};
use crate::model::http::VendorErrorBody;
use crate::model::sse::{SseEvent, StreamOutput, VendorStreamParser};
use crate::model::{StreamEvent, TokenUsage, ToolCallRequest, parse_tool_arguments};

/// A tool call whose fragments are still arriving.
#[derive(Debug, Default)]
struct PartialToolCall {
    id: Option<String>,
    name: String,
    arguments: String,
}

#[derive(Debug, Default)]
pub(super) struct OpenAiStreamParser {
    /// By the vendor's `index`, so calls come out in the order the model made them.
    tool_calls: BTreeMap<u64, PartialToolCall>,
    stop_reason: Option<String>,
    saw_finish_reason: bool,
}

impl VendorStreamParser for OpenAiStreamParser {
    fn on_event(&mut self, event: SseEvent, output: &mut StreamOutput) {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.flush_tool_calls(output);
            output.push_back(Ok(StreamEvent::Finished { stop_reason: self.stop_reason.take() }));
            return;
        }
        let chunk: Value = match serde_json::from_str(data) {
            Ok(chunk) => chunk,
            Err(error) => {
                output.push_back(Err(ModelError::new(
                    ModelErrorKind::InvalidResponse,
                    ErrorStage::Stream,
                    format!("a stream chunk is not JSON: {error}"),
                )));
                return;
            }
        };
        if !chunk["error"].is_null() {
            output.push_back(Err(stream_error(&chunk)));
            return;
        }
        if let Some(choice) = first_choice(&chunk) {
            self.on_choice(choice, output);
        }
        if chunk["usage"].is_object() {
            output.push_back(Ok(StreamEvent::Usage(usage_from(&chunk["usage"]))));
        }
    }

    fn on_end_of_body(&mut self, output: &mut StreamOutput) {
        if self.saw_finish_reason {
            self.flush_tool_calls(output);
            output.push_back(Ok(StreamEvent::Finished { stop_reason: self.stop_reason.take() }));
        } else {
            output.push_back(Err(ModelError::new(
                ModelErrorKind::UnexpectedEof,
                ErrorStage::Stream,
                "the stream ended before the model finished its answer",
            )));
        }
    }
}

impl OpenAiStreamParser {
    fn on_choice(&mut self, choice: &Value, output: &mut StreamOutput) {
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str()
            && !text.is_empty()
        {
            output.push_back(Ok(StreamEvent::TextDelta(text.to_owned())));
        }
        let reasoning = delta["reasoning_content"].as_str().or_else(|| delta["reasoning"].as_str());
        if let Some(reasoning) = reasoning
            && !reasoning.is_empty()
        {
            output.push_back(Ok(StreamEvent::ReasoningDelta(reasoning.to_owned())));
        }
        if let Some(fragments) = delta["tool_calls"].as_array() {
            for (position, fragment) in fragments.iter().enumerate() {
                self.add_tool_call_fragment(position, fragment);
            }
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.saw_finish_reason = true;
            self.stop_reason = Some(reason.to_owned());
            self.flush_tool_calls(output);
        }
    }

    fn add_tool_call_fragment(&mut self, position: usize, fragment: &Value) {
        // `index` is required by the API; a server that omits it sends one fragment per call.
        let index = fragment["index"].as_u64().unwrap_or(position as u64);
        let call = self.tool_calls.entry(index).or_default();
        if let Some(id) = fragment["id"].as_str()
            && !id.is_empty()
        {
            call.id = Some(id.to_owned());
        }
        let function = &fragment["function"];
        if let Some(name) = function["name"].as_str() {
            // Names come whole in the first fragment, but appending tolerates servers that split them.
            call.name.push_str(name);
        }
        if let Some(arguments) = function["arguments"].as_str() {
            call.arguments.push_str(arguments);
        }
    }

    fn flush_tool_calls(&mut self, output: &mut StreamOutput) {
        for (index, call) in std::mem::take(&mut self.tool_calls) {
            output.push_back(Ok(StreamEvent::ToolCall(ToolCallRequest {
                // Ids are required by the API; a server that omits them still gets stable ones.
                tool_call_id: call.id.unwrap_or_else(|| format!("call_{index}")),
                tool: call.name,
                arguments: parse_tool_arguments(&call.arguments),
            })));
        }
    }
}

fn first_choice(chunk: &Value) -> Option<&Value> {
    let choices = chunk["choices"].as_array()?;
    choices.iter().find(|choice| choice["index"].as_u64() == Some(0)).or_else(|| choices.first())
}

fn usage_from(usage: &Value) -> TokenUsage {
    let count = |value: &Value| value.as_u64().unwrap_or(0);
    TokenUsage {
        input_tokens: count(&usage["prompt_tokens"]),
        output_tokens: count(&usage["completion_tokens"]),
        reasoning_tokens: count(&usage["completion_tokens_details"]["reasoning_tokens"]),
        cache_read_tokens: count(&usage["prompt_tokens_details"]["cached_tokens"]),
        cache_write_tokens: 0,
    }
}

/// An `{"error": {...}}` chunk, which some servers send instead of closing the stream with a status.
fn stream_error(chunk: &Value) -> ModelError {
    let vendor_error = VendorErrorBody::from_value(chunk);
    let message =
        vendor_error.message.clone().unwrap_or_else(|| "the server reported an error in the stream".to_owned());
    let (kind, retryable) = classify_vendor_failure(None, vendor_error.code.as_deref(), &message);
    let mut error = ModelError::new(kind, ErrorStage::Stream, message);
    error.retryable = retryable;
    error.vendor_code = vendor_error.code;
    error
}
