//! Offline models: the daemon runs, and the tests run, with no key and no network.
//!
//! - [`EchoModel`] (`local/echo`) answers with the latest user message.
//! - [`ScriptedModel`] (`local/scripted`) plays turns from a JSON script, including tool calls and failures,
//!   so the run loop, tools, retries and fallback can be exercised end to end; see [`scripted`] for the format.
//!
//! Both report rough token counts (a token per four bytes) so usage accounting has something to add up.

pub mod scripted;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};

use super::{
    ChatMessage, ModelError, ModelProvider, ModelRequest, ModelStream, StreamEvent, TokenUsage, json_text_len,
    user_parts_len, user_parts_text,
};

pub use scripted::{Script, ScriptError, ScriptedModel};

/// Answers with the text of the latest user message, streamed a word at a time. It never calls tools; should
/// the history end with a tool result anyway, it answers `done`.
#[derive(Clone, Copy, Debug, Default)]
pub struct EchoModel;

impl ModelProvider for EchoModel {
    fn stream(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelStream, ModelError>> {
        let answer = match request.messages.last() {
            Some(ChatMessage::ToolResult { .. }) => "done".to_owned(),
            _ => request
                .messages
                .iter()
                .rev()
                .find_map(|message| match message {
                    ChatMessage::User { parts } => Some(user_parts_text(parts)),
                    _ => None,
                })
                .unwrap_or_default(),
        };
        let usage = TokenUsage {
            input_tokens: rough_token_count(request_bytes(&request)),
            output_tokens: rough_token_count(answer.len()),
            ..TokenUsage::default()
        };
        let mut events: Vec<Result<StreamEvent, ModelError>> =
            whitespace_chunks(&answer).into_iter().map(|chunk| Ok(StreamEvent::TextDelta(chunk))).collect();
        events.push(Ok(StreamEvent::Usage(usage)));
        events.push(Ok(StreamEvent::Finished { stop_reason: Some("stop".to_owned()) }));
        futures::future::ready(Ok(futures::stream::iter(events).boxed())).boxed()
    }
}

/// A token per four bytes, rounded up: the usual rule of thumb for English text.
pub(crate) fn rough_token_count(bytes: usize) -> u64 {
    bytes.div_ceil(4) as u64
}

/// The bytes of prompt text a request carries, for rough input counts. Counted in place: a run's every turn asks
/// this of its whole history, so nothing is built (no joined user text, no re-encoded tool arguments).
pub(crate) fn request_bytes(request: &ModelRequest) -> usize {
    let system = request.system.as_deref().map_or(0, str::len);
    let messages: usize = request
        .messages
        .iter()
        .map(|message| match message {
            ChatMessage::User { parts } => user_parts_len(parts),
            ChatMessage::Assistant { text, tool_calls } => {
                text.len()
                    + tool_calls.iter().map(|call| call.tool.len() + json_text_len(&call.arguments)).sum::<usize>()
            }
            ChatMessage::ToolResult { content, .. } => content.len(),
        })
        .sum();
    system + messages
}

/// Splits `text` into chunks that each end after a run of whitespace, so the chunks concatenate back to
/// `text` exactly, as a real stream's deltas do.
pub(crate) fn whitespace_chunks(text: &str) -> Vec<String> {
    let mut chunks = Vec::new();
    let mut current = String::new();
    for character in text.chars() {
        if !character.is_whitespace() && current.ends_with(char::is_whitespace) {
            chunks.push(std::mem::take(&mut current));
        }
        current.push(character);
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_end_after_whitespace_and_concatenate_back() {
        assert_eq!(whitespace_chunks("hello  big\nworld"), vec!["hello  ", "big\n", "world"]);
        assert!(whitespace_chunks("").is_empty());
    }

    #[test]
    fn request_bytes_counts_what_the_joined_texts_and_encoded_arguments_hold() {
        use std::sync::Arc;

        use crate::model::{ToolCallRequest, UserPart};

        let messages = vec![
            ChatMessage::User {
                parts: vec![UserPart::Text("read the file".into()), UserPart::Text("é, please".into())],
            },
            ChatMessage::Assistant {
                text: "on it".into(),
                tool_calls: vec![ToolCallRequest {
                    tool_call_id: "call-1".into(),
                    tool: "read_file".into(),
                    arguments: serde_json::json!({"path": "notes \"1\".txt", "limit": 200}),
                }],
            },
            ChatMessage::ToolResult {
                tool_call_id: "call-1".into(),
                tool: "read_file".into(),
                content: "hello".into(),
                is_error: false,
            },
            ChatMessage::User { parts: vec![] },
        ];
        let expected: usize = "system".len()
            + messages
                .iter()
                .map(|message| match message {
                    ChatMessage::User { parts } => user_parts_text(parts).len(),
                    ChatMessage::Assistant { text, tool_calls } => {
                        text.len()
                            + tool_calls
                                .iter()
                                .map(|call| call.tool.len() + call.arguments.to_string().len())
                                .sum::<usize>()
                    }
                    ChatMessage::ToolResult { content, .. } => content.len(),
                })
                .sum::<usize>();
        let request = ModelRequest {
            model_id: "scripted".into(),
            variant: None,
            system: Some("system".into()),
            messages: Arc::new(messages),
            tools: Arc::new(Vec::new()),
            max_output_tokens: None,
        };
        assert_eq!(request_bytes(&request), expected);
        assert_eq!(expected, 6 + 13 + 2 + 10 + 5 + 9 + 38 + 5);
    }
}
