//! Streaming model providers: one request in, a stream of text, reasoning, tool calls and usage out.
//!
//! The run loop speaks to every model through [`ModelProvider`]: it builds a vendor-neutral [`ModelRequest`]
//! from the session's history, calls [`ModelProvider::stream`], and consumes [`StreamEvent`]s until
//! [`StreamEvent::Finished`] or an error. Each provider translates both ways in one place:
//!
//! - [`openai::OpenAiCompatible`]: OpenAI Chat Completions, which Ollama, llama.cpp, vLLM and most gateways
//!   also speak.
//! - [`anthropic::Anthropic`]: the Anthropic Messages API.
//! - [`local::EchoModel`] and [`local::ScriptedModel`]: offline models for tests and for a daemon with no key.
//!
//! Failures are [`ModelError`]s, classified once (see [`error`]) so the run loop only asks
//! [`ModelError::policy`] whether to retry the same model, fall back to the next one in the agent's chain, or
//! fail the run; [`RetryPolicy`] says how long to wait before a retry. [`pricing`] turns [`TokenUsage`] into an
//! estimated cost.
//!
//! Unlike the rest of this crate the providers are asynchronous: they run on the caller's tokio runtime and
//! spawn no tasks of their own (reqwest resolves host names on tokio's blocking pool), and a [`ModelStream`]
//! reads its response only when polled, so dropping it is enough to cancel its HTTP request.
//!
//! API keys travel as [`ApiKey`], whose `Debug` is redacted and whose memory is zeroed on drop. No error,
//! log line or `Debug` output of this module contains a key; vendor error bodies that echo the key back have it
//! replaced before they are kept.

pub mod anthropic;
pub mod attachments;
pub mod context_window;
pub mod error;
pub mod local;
pub mod openai;
pub mod pricing;
pub mod retry;

pub(crate) mod http;
mod secret;
mod sse;

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::BoxStream;

pub use attachments::FileContent;
pub use error::{ErrorStage, FailurePolicy, ModelError, ModelErrorKind, ProviderSetupError};
pub use http::{HttpTimeouts, is_insecure_http};
pub use retry::RetryPolicy;
pub use secret::ApiKey;

/// One request to a model: the conversation so far and the tools it may call.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelRequest {
    /// The vendor's model id, without the `<provider>/` prefix of a catalog reference.
    pub model_id: String,
    /// A catalog variant such as a reasoning effort; providers that have no use for it ignore it.
    pub variant: Option<String>,
    /// The system prompt, sent in whatever place the vendor expects it.
    pub system: Option<String>,
    /// The history, oldest first. Shared, because a run sends its whole history with every request: a turn
    /// costs a reference count, not a copy of the history.
    pub messages: Arc<Vec<ChatMessage>>,
    /// The tools the model may call; empty means none. Shared for the same reason: it is the same for every
    /// request of a run.
    pub tools: Arc<Vec<ToolSpec>>,
    /// A cap on generated tokens; each provider has its own default when unset.
    pub max_output_tokens: Option<u32>,
}

/// One message of the history, in vendor-neutral form.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum ChatMessage {
    User {
        parts: Vec<UserPart>,
    },
    /// A previous model turn: its text and the tool calls it made, which the following
    /// [`ChatMessage::ToolResult`]s answer.
    Assistant {
        text: String,
        tool_calls: Vec<ToolCallRequest>,
    },
    ToolResult {
        tool_call_id: String,
        tool: String,
        content: String,
        is_error: bool,
    },
}

/// One part of a user message.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum UserPart {
    Text(String),
    /// An attachment: a stored artifact (see [`attachments`]). A provider sends its bytes as an image or file part
    /// when its API takes that kind of file, and otherwise the text note of [`UserPart::as_prompt_text`].
    File {
        /// `artifacts/<name>`, as the tool result recorded it.
        path: String,
        mime_type: String,
        name: Option<String>,
        /// The bytes, once the run has read them. Never in a projection snapshot: a restored history reads them
        /// again, as one rebuilt from the log does.
        #[serde(skip)]
        content: FileContent,
    },
}

impl UserPart {
    /// The text this part is sent as by a model that is not sent the file itself: the note
    /// `[file: path (mime)]`, saying why the file is not attached when it is not, with a text file's contents.
    pub fn as_prompt_text(&self) -> String {
        match self {
            UserPart::Text(text) => text.clone(),
            UserPart::File { path, mime_type, name, content } => {
                attachments::text_note(path, mime_type, name.as_deref(), content)
            }
        }
    }
}

/// What separates a user message's parts in its text: a blank line, so notes stay distinct.
const USER_PART_SEPARATOR: &str = "\n\n";

/// Joins a user message's parts into one text, parts separated by a blank line so notes stay distinct.
pub(crate) fn user_parts_text(parts: &[UserPart]) -> String {
    parts.iter().map(UserPart::as_prompt_text).collect::<Vec<_>>().join(USER_PART_SEPARATOR)
}

/// The length of [`user_parts_text`] of `parts`, without joining them (a file part's short note is still built).
pub(crate) fn user_parts_len(parts: &[UserPart]) -> usize {
    let texts: usize = parts
        .iter()
        .map(|part| match part {
            UserPart::Text(text) => text.len(),
            UserPart::File { .. } => part.as_prompt_text().len(),
        })
        .sum();
    texts + parts.len().saturating_sub(1) * USER_PART_SEPARATOR.len()
}

/// The length of `value`'s compact JSON text (`value.to_string().len()`), without building it: estimates that run
/// over a whole history every turn need the size of each call's arguments, not their text.
pub fn json_text_len(value: &serde_json::Value) -> usize {
    // Encoding a `Value` cannot fail (its map keys are strings).
    troupe_protocol::encoded::encoded_len(value).unwrap_or_default()
}

/// Tool arguments from the text a model streamed: empty means none (`{}`); text that is not JSON is kept as a
/// [`serde_json::Value::String`] for the tool layer to reject with a clear message.
pub(crate) fn parse_tool_arguments(raw: &str) -> serde_json::Value {
    if raw.trim().is_empty() {
        return serde_json::Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(raw).unwrap_or_else(|_| serde_json::Value::String(raw.to_owned()))
}

/// A tool the model may call.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// A JSON Schema object describing the arguments.
    pub parameters: serde_json::Value,
}

/// A complete tool call made by the model.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolCallRequest {
    /// The vendor's id for the call, echoed back in the matching [`ChatMessage::ToolResult`].
    pub tool_call_id: String,
    pub tool: String,
    /// The parsed arguments. When the model produced text that is not JSON, this is a
    /// [`serde_json::Value::String`] holding that text, so the tool layer can reject it with a clear message
    /// instead of the whole turn failing.
    pub arguments: serde_json::Value,
}

/// What a model stream yields.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent {
    TextDelta(String),
    ReasoningDelta(String),
    /// Emitted once the call's arguments are complete, never in pieces.
    ToolCall(ToolCallRequest),
    /// The request's token totals, sent once near the end when the vendor reports them (some
    /// OpenAI-compatible servers never do). Should one arrive twice, the later replaces the earlier.
    Usage(TokenUsage),
    /// The last event of a successful stream.
    Finished {
        /// The vendor's reason, e.g. `stop`, `tool_calls`, `end_turn`, `max_tokens`.
        stop_reason: Option<String>,
    },
}

/// Token counts of one request, normalized across vendors.
///
/// `input_tokens` counts the whole prompt, including the tokens read from or written to the prompt cache (as
/// OpenAI reports it; Anthropic's separate counts are added up), so the cache hit rate is
/// `cache_read_tokens / input_tokens`. Likewise `output_tokens` includes `reasoning_tokens`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TokenUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
}

/// The events of one model request. Dropping it cancels the request.
pub type ModelStream = BoxStream<'static, Result<StreamEvent, ModelError>>;

/// A model the run loop can call.
pub trait ModelProvider: Send + Sync + 'static {
    /// Starts one streaming request. Dropping the stream cancels the HTTP request.
    ///
    /// The future fails when the request cannot be sent or is refused (`connect` and `request` stages); once it
    /// yields a stream, later failures arrive as the stream's last item (`stream` stage).
    fn stream(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelStream, ModelError>>;
}
