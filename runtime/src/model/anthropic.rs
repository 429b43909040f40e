//! The Anthropic Messages API.
//!
//! One request is `POST {base_url}/v1/messages` with `stream: true`, the key in `x-api-key` and
//! `anthropic-version: 2023-06-01`. `max_tokens` is required by the API: 8192 when the request sets none.
//!
//! The system prompt is the top-level `system` field. Messages are content blocks: user text, attached images as
//! `image` and PDFs as `document` blocks (base64; any other file as its text note), assistant `text` and `tool_use {id, name, input}` blocks, and tool results as
//! `tool_result {tool_use_id, content, is_error}` blocks inside a *user* message. The API wants user and
//! assistant turns to alternate, so consecutive user-side messages (several tool results, and any
//! tool-emitted user message after them) are merged into one user message, tool results first.
//! Tool `input` must be an object: arguments that are not (the raw text of a call whose arguments were never
//! JSON) are sent as `{"_raw": <value>}`.
//!
//! The stream is parsed in the private `stream` submodule.

mod stream;

use futures::FutureExt;
use futures::future::BoxFuture;
use reqwest::header::HeaderValue;
use serde_json::{Value, json};

use super::attachments::{AttachmentKind, base64, media_type};
use super::error::{ErrorStage, ModelError, ModelErrorKind, ProviderSetupError};
use super::http::{HttpTimeouts, build_http_client, checked_base_url, read_json_body, send_checked};
use super::secret::ApiKey;
use super::sse::drive_event_stream;
use super::{ChatMessage, FileContent, ModelProvider, ModelRequest, ModelStream, UserPart, user_parts_text};

/// Anthropic's own endpoint; the `/v1/...` paths are appended to it.
pub const ANTHROPIC_DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The API version every request declares.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// `max_tokens` when the request does not set a cap; the API has no default of its own.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 8192;

/// Where and how to reach the Messages API.
#[derive(Clone, Debug)]
pub struct AnthropicConfig {
    /// Without the `/v1` segment, e.g. `https://api.anthropic.com`. Must be https, or http to a loopback host.
    pub base_url: String,
    pub api_key: ApiKey,
    pub timeouts: HttpTimeouts,
    /// Accept a plain `http` base URL off loopback (the operator's `allow_insecure_http`).
    pub allow_insecure_http: bool,
}

impl AnthropicConfig {
    pub fn new(api_key: ApiKey) -> AnthropicConfig {
        AnthropicConfig {
            base_url: ANTHROPIC_DEFAULT_BASE_URL.to_owned(),
            api_key,
            timeouts: HttpTimeouts::default(),
            allow_insecure_http: false,
        }
    }
}

/// A provider speaking the Anthropic Messages API. Cheap to clone: clones share the connection pool.
#[derive(Clone, Debug)]
pub struct Anthropic {
    client: reqwest::Client,
    base_url: String,
    api_key: ApiKey,
    timeouts: HttpTimeouts,
}

impl Anthropic {
    pub fn new(config: AnthropicConfig) -> Result<Anthropic, ProviderSetupError> {
        Ok(Anthropic {
            client: build_http_client(&config.timeouts)?,
            base_url: checked_base_url(&config.base_url, config.allow_insecure_http, "anthropic")?,
            api_key: config.api_key,
            timeouts: config.timeouts,
        })
    }

    /// The ids of the models this key may use (`GET /v1/models`, `data[].id`). Only the first page is read.
    pub async fn list_models(&self) -> Result<Vec<String>, ModelError> {
        let request = self.with_headers(self.client.get(format!("{}/v1/models?limit=1000", self.base_url)))?;
        let response = send_checked(request, &self.timeouts, Some(&self.api_key)).await?;
        let body = read_json_body(response, &self.timeouts).await?;
        let Some(entries) = body["data"].as_array() else {
            return Err(ModelError::new(
                ModelErrorKind::InvalidResponse,
                ErrorStage::Request,
                "the model list has no `data` array",
            ));
        };
        Ok(entries.iter().filter_map(|entry| entry["id"].as_str().map(str::to_owned)).collect())
    }

    fn with_headers(&self, request: reqwest::RequestBuilder) -> Result<reqwest::RequestBuilder, ModelError> {
        let mut key = HeaderValue::from_str(self.api_key.expose()).map_err(|_| {
            ModelError::new(
                ModelErrorKind::Auth,
                ErrorStage::Request,
                "the API key contains characters that cannot be sent in an HTTP header",
            )
        })?;
        // Marked sensitive so reqwest never prints it.
        key.set_sensitive(true);
        Ok(request.header("x-api-key", key).header("anthropic-version", ANTHROPIC_VERSION))
    }
}

impl ModelProvider for Anthropic {
    fn stream(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelStream, ModelError>> {
        let provider = self.clone();
        async move {
            let body = messages_body(&request);
            let http_request = provider.with_headers(
                provider
                    .client
                    .post(format!("{}/v1/messages", provider.base_url))
                    .header(reqwest::header::ACCEPT, "text/event-stream")
                    .json(&body),
            )?;
            let response = send_checked(http_request, &provider.timeouts, Some(&provider.api_key)).await?;
            Ok(drive_event_stream(
                response,
                stream::AnthropicStreamParser::default(),
                provider.timeouts.stream_idle,
                Some(provider.api_key.clone()),
            ))
        }
        .boxed()
    }
}

/// The JSON body of a streaming Messages request.
pub(crate) fn messages_body(request: &ModelRequest) -> Value {
    let mut body = json!({
        "model": request.model_id,
        "max_tokens": request.max_output_tokens.unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS),
        "messages": alternating_messages(&request.messages),
        "stream": true,
    });
    if let Some(system) = &request.system {
        body["system"] = json!(system);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": tool.parameters,
                })
            })
            .collect();
    }
    body
}

/// Maps the history to content-block messages, merging consecutive messages of the same role.
fn alternating_messages(history: &[ChatMessage]) -> Vec<Value> {
    let mut messages: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in history {
        let (role, blocks) = content_blocks(message);
        // An assistant turn with neither text nor calls has nothing to send, and the API rejects empty content.
        if blocks.is_empty() {
            continue;
        }
        match messages.last_mut() {
            Some((last_role, last_blocks)) if *last_role == role => last_blocks.extend(blocks),
            _ => messages.push((role, blocks)),
        }
    }
    messages
        .into_iter()
        .map(|(role, mut content)| {
            // The API wants a user message's tool results before anything else in it. The history already puts a
            // turn's results before the messages its tools emitted; this keeps any other order from being sent.
            content.sort_by_key(|block| block["type"] != "tool_result");
            json!({"role": role, "content": content})
        })
        .collect()
}

/// A user message's blocks. One text block when every part is text; otherwise a block per part: `text`, `image`
/// for an image and `document` for a PDF (both base64), and the text note of any other or unreadable file. The
/// API rejects empty text blocks, so there are none.
fn user_blocks(parts: &[UserPart]) -> Vec<Value> {
    let attached = |part: &UserPart| match part {
        UserPart::File { mime_type, content: FileContent::Loaded(_), .. } => {
            matches!(AttachmentKind::of(mime_type), AttachmentKind::Image | AttachmentKind::Pdf)
        }
        _ => false,
    };
    if !parts.iter().any(attached) {
        let text = user_parts_text(parts);
        return if text.is_empty() { Vec::new() } else { vec![json!({"type": "text", "text": text})] };
    }
    parts
        .iter()
        .filter_map(|part| match part {
            UserPart::File { mime_type, content: FileContent::Loaded(bytes), .. } if attached(part) => {
                let kind = if AttachmentKind::of(mime_type) == AttachmentKind::Image { "image" } else { "document" };
                Some(json!({"type": kind, "source": {
                    "type": "base64",
                    "media_type": media_type(mime_type),
                    "data": base64(bytes),
                }}))
            }
            other => {
                let text = other.as_prompt_text();
                (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
            }
        })
        .collect()
}

fn content_blocks(message: &ChatMessage) -> (&'static str, Vec<Value>) {
    match message {
        ChatMessage::User { parts } => ("user", user_blocks(parts)),
        ChatMessage::Assistant { text, tool_calls } => {
            let mut blocks = Vec::with_capacity(tool_calls.len() + 1);
            if !text.is_empty() {
                blocks.push(json!({"type": "text", "text": text}));
            }
            for call in tool_calls {
                let input = match &call.arguments {
                    Value::Object(_) => call.arguments.clone(),
                    other => json!({"_raw": other}),
                };
                blocks.push(json!({
                    "type": "tool_use",
                    "id": call.tool_call_id,
                    "name": call.tool,
                    "input": input,
                }));
            }
            ("assistant", blocks)
        }
        ChatMessage::ToolResult { tool_call_id, content, is_error, .. } => (
            "user",
            vec![json!({
                "type": "tool_result",
                "tool_use_id": tool_call_id,
                "content": content,
                "is_error": is_error,
            })],
        ),
    }
}
