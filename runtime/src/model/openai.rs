//! OpenAI Chat Completions, and every server that speaks it (Ollama, llama.cpp, vLLM, LiteLLM, ...).
//!
//! One request is `POST {base_url}/chat/completions` with `stream: true` and
//! `stream_options.include_usage`, so the last chunk before `data: [DONE]` carries the token counts. The key,
//! when there is one, goes in `Authorization: Bearer`; local servers need none.
//!
//! The history maps onto chat messages: the system prompt first as `role: system`, user parts joined into one
//! content string (or, when the message attaches an image or a PDF, an array of `text`, `image_url` and `file`
//! content parts with the files as base64 data URLs), assistant turns with their `tool_calls` (arguments as a JSON string, as the API wants), and
//! tool results as `role: tool` messages. `max_output_tokens` is sent as `max_tokens`, which compatible servers
//! understand; a variant named `minimal`, `low`, `medium` or `high` is sent as `reasoning_effort`.
//!
//! The stream is parsed in the private `stream` submodule.

mod stream;

use futures::FutureExt;
use futures::future::BoxFuture;
use reqwest::header::{AUTHORIZATION, HeaderValue};
use serde_json::{Value, json};
use zeroize::Zeroizing;

use super::attachments::{AttachmentKind, data_url, file_name};
use super::error::{ErrorStage, ModelError, ModelErrorKind, ProviderSetupError};
use super::http::{HttpTimeouts, build_http_client, checked_base_url, read_json_body, send_checked};
use super::secret::ApiKey;
use super::sse::drive_event_stream;
use super::{ChatMessage, FileContent, ModelProvider, ModelRequest, ModelStream, UserPart, user_parts_text};

/// OpenAI's own endpoint.
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// Ollama's OpenAI-compatible endpoint on its default port.
pub const OLLAMA_DEFAULT_BASE_URL: &str = "http://localhost:11434/v1";

/// Variants that name a reasoning effort, sent as `reasoning_effort`.
const REASONING_EFFORT_VARIANTS: [&str; 4] = ["minimal", "low", "medium", "high"];

/// Where and how to reach an OpenAI-compatible server.
#[derive(Clone, Debug)]
pub struct OpenAiCompatibleConfig {
    /// Up to and including the version segment, e.g. `https://api.openai.com/v1`. Must be https, or http to a
    /// loopback host.
    pub base_url: String,
    /// Sent as a bearer token when set.
    pub api_key: Option<ApiKey>,
    pub timeouts: HttpTimeouts,
    /// Accept a plain `http` base URL off loopback (the operator's `allow_insecure_http`).
    pub allow_insecure_http: bool,
}

impl OpenAiCompatibleConfig {
    /// OpenAI itself.
    pub fn openai(api_key: ApiKey) -> OpenAiCompatibleConfig {
        OpenAiCompatibleConfig {
            base_url: OPENAI_DEFAULT_BASE_URL.to_owned(),
            api_key: Some(api_key),
            timeouts: HttpTimeouts::default(),
            allow_insecure_http: false,
        }
    }

    /// A server at `base_url` that needs no key, such as Ollama or llama.cpp.
    pub fn keyless(base_url: impl Into<String>) -> OpenAiCompatibleConfig {
        OpenAiCompatibleConfig {
            base_url: base_url.into(),
            api_key: None,
            timeouts: HttpTimeouts::default(),
            allow_insecure_http: false,
        }
    }
}

/// A provider speaking OpenAI Chat Completions. Cheap to clone: clones share the connection pool.
#[derive(Clone, Debug)]
pub struct OpenAiCompatible {
    client: reqwest::Client,
    base_url: String,
    api_key: Option<ApiKey>,
    timeouts: HttpTimeouts,
}

impl OpenAiCompatible {
    pub fn new(config: OpenAiCompatibleConfig) -> Result<OpenAiCompatible, ProviderSetupError> {
        Ok(OpenAiCompatible {
            client: build_http_client(&config.timeouts)?,
            base_url: checked_base_url(&config.base_url, config.allow_insecure_http, "openai")?,
            api_key: config.api_key,
            timeouts: config.timeouts,
        })
    }

    /// The ids of the models the server offers (`GET {base_url}/models`, `data[].id`), in its order.
    pub async fn list_models(&self) -> Result<Vec<String>, ModelError> {
        let request = self.with_auth(self.client.get(format!("{}/models", self.base_url)))?;
        let response = send_checked(request, &self.timeouts, self.api_key.as_ref()).await?;
        let body = read_json_body(response, &self.timeouts).await?;
        model_ids_from_list(&body)
    }

    fn with_auth(&self, request: reqwest::RequestBuilder) -> Result<reqwest::RequestBuilder, ModelError> {
        let Some(key) = &self.api_key else {
            return Ok(request);
        };
        // The formatted header is zeroed after use; the HeaderValue is marked sensitive so reqwest never
        // prints it.
        let header_text = Zeroizing::new(format!("Bearer {}", key.expose()));
        let mut value = HeaderValue::from_str(&header_text).map_err(|_| {
            ModelError::new(
                ModelErrorKind::Auth,
                ErrorStage::Request,
                "the API key contains characters that cannot be sent in an HTTP header",
            )
        })?;
        value.set_sensitive(true);
        Ok(request.header(AUTHORIZATION, value))
    }
}

impl ModelProvider for OpenAiCompatible {
    fn stream(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelStream, ModelError>> {
        let provider = self.clone();
        async move {
            let body = chat_completions_body(&request);
            let http_request = provider.with_auth(
                provider
                    .client
                    .post(format!("{}/chat/completions", provider.base_url))
                    .header(reqwest::header::ACCEPT, "text/event-stream")
                    .json(&body),
            )?;
            let response = send_checked(http_request, &provider.timeouts, provider.api_key.as_ref()).await?;
            Ok(drive_event_stream(
                response,
                stream::OpenAiStreamParser::default(),
                provider.timeouts.stream_idle,
                provider.api_key.clone(),
            ))
        }
        .boxed()
    }
}

/// The JSON body of a streaming Chat Completions request.
pub(crate) fn chat_completions_body(request: &ModelRequest) -> Value {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if let Some(system) = &request.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    for message in request.messages.iter() {
        messages.push(chat_message(message));
    }
    let mut body = json!({
        "model": request.model_id,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|tool| {
                json!({"type": "function", "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                }})
            })
            .collect();
    }
    if let Some(max_output_tokens) = request.max_output_tokens {
        body["max_tokens"] = json!(max_output_tokens);
    }
    if let Some(variant) = &request.variant
        && REASONING_EFFORT_VARIANTS.contains(&variant.as_str())
    {
        body["reasoning_effort"] = json!(variant);
    }
    body
}

fn chat_message(message: &ChatMessage) -> Value {
    match message {
        ChatMessage::User { parts } => json!({"role": "user", "content": user_content(parts)}),
        ChatMessage::Assistant { text, tool_calls } => {
            let mut value = json!({"role": "assistant", "content": text});
            if !tool_calls.is_empty() {
                // Some servers reject an empty string next to tool calls; null is what OpenAI itself sends.
                if text.is_empty() {
                    value["content"] = Value::Null;
                }
                value["tool_calls"] = tool_calls
                    .iter()
                    .map(|call| {
                        json!({"id": call.tool_call_id, "type": "function", "function": {
                            "name": call.tool,
                            "arguments": arguments_text(&call.arguments),
                        }})
                    })
                    .collect();
            }
            value
        }
        // The API has no error flag on tool messages; the tool layer words its output so the model can tell.
        ChatMessage::ToolResult { tool_call_id, content, .. } => {
            json!({"role": "tool", "tool_call_id": tool_call_id, "content": content})
        }
    }
}

/// A user message's content. One string when every part is text, which every compatible server understands;
/// otherwise an array of content parts: `text`, `image_url` with a data URL for an image, and `file` with a data
/// URL for a PDF. Other files, and files that could not be read, are their text notes.
fn user_content(parts: &[UserPart]) -> Value {
    let attached = |part: &UserPart| match part {
        UserPart::File { mime_type, content: FileContent::Loaded(_), .. } => {
            matches!(AttachmentKind::of(mime_type), AttachmentKind::Image | AttachmentKind::Pdf)
        }
        _ => false,
    };
    if !parts.iter().any(attached) {
        return json!(user_parts_text(parts));
    }
    parts
        .iter()
        .filter_map(|part| match part {
            UserPart::File { path, mime_type, name, content: FileContent::Loaded(bytes) } if attached(part) => {
                Some(match AttachmentKind::of(mime_type) {
                    AttachmentKind::Image => {
                        json!({"type": "image_url", "image_url": {"url": data_url(mime_type, bytes)}})
                    }
                    _ => json!({"type": "file", "file": {
                        "filename": file_name(path, name.as_deref()),
                        "file_data": data_url(mime_type, bytes),
                    }}),
                })
            }
            other => {
                let text = other.as_prompt_text();
                (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
            }
        })
        .collect()
}

/// Arguments as the API wants them: a JSON string. Arguments that were never valid JSON (kept as a string
/// when the model produced them) are sent back exactly as the model wrote them.
fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

fn model_ids_from_list(body: &Value) -> Result<Vec<String>, ModelError> {
    let Some(entries) = body["data"].as_array() else {
        return Err(ModelError::new(
            ModelErrorKind::InvalidResponse,
            ErrorStage::Request,
            "the model list has no `data` array",
        ));
    };
    Ok(entries.iter().filter_map(|entry| entry["id"].as_str().map(str::to_owned)).collect())
}
