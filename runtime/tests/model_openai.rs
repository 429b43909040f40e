//! The OpenAI-compatible provider against a fake server speaking Chat Completions SSE.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

mod model_support;

use futures::StreamExt;
use model_support::{TEST_TIMEOUT, collect, text_of};
use serde_json::json;
use troupe_runtime::model::openai::{OpenAiCompatible, OpenAiCompatibleConfig};
use troupe_runtime::model::{
    ApiKey, ChatMessage, ErrorStage, FailurePolicy, FileContent, ModelError, ModelErrorKind, ModelProvider,
    ModelRequest, StreamEvent, TokenUsage, ToolCallRequest, ToolSpec, UserPart,
};
use troupe_test_support::replies::escape_laden_body;
use troupe_test_support::{FakeResponse, FakeServer};

const TEST_KEY: &str = "sk-test-openai-0123456789";

fn provider(server: &FakeServer, with_key: bool) -> OpenAiCompatible {
    let mut config = OpenAiCompatibleConfig::keyless(format!("{}/v1", server.base_url));
    if with_key {
        config.api_key = Some(ApiKey::new(TEST_KEY));
    }
    OpenAiCompatible::new(config).expect("provider")
}

fn simple_request(text: &str) -> ModelRequest {
    ModelRequest {
        model_id: "gpt-4o".into(),
        variant: None,
        system: None,
        messages: vec![ChatMessage::User { parts: vec![UserPart::Text(text.into())] }].into(),
        tools: Default::default(),
        max_output_tokens: None,
    }
}

fn data(chunk: serde_json::Value) -> String {
    format!("data: {chunk}\n\n")
}

fn content_chunk(text: &str) -> String {
    data(json!({"id": "c1", "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]}))
}

fn finish_chunk(reason: &str) -> String {
    data(json!({"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}))
}

fn usage_chunk() -> String {
    data(json!({"id": "c1", "choices": [], "usage": {
        "prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150,
        "prompt_tokens_details": {"cached_tokens": 100},
        "completion_tokens_details": {"reasoning_tokens": 12}}}))
}

async fn start_stream(
    provider: &OpenAiCompatible,
    request: ModelRequest,
) -> Result<troupe_runtime::model::ModelStream, ModelError> {
    tokio::time::timeout(TEST_TIMEOUT, provider.stream(request)).await.expect("the request was answered in time")
}

async fn request_error(response: FakeResponse) -> ModelError {
    let server = FakeServer::start(vec![response]).await;
    match start_stream(&provider(&server, true), simple_request("hi")).await {
        Ok(_) => panic!("the request should have failed"),
        Err(error) => error,
    }
}

#[tokio::test]
async fn text_streams_as_several_deltas_with_usage_and_the_bearer_key() {
    let pieces = [
        content_chunk("Hel"),
        content_chunk("lo, "),
        content_chunk("world"),
        finish_chunk("stop"),
        usage_chunk(),
        "data: [DONE]\n\n".to_owned(),
    ];
    let server = FakeServer::start(vec![FakeResponse::Sse { pieces: pieces.to_vec() }]).await;
    let stream = start_stream(&provider(&server, true), simple_request("hi")).await.expect("stream");
    let events = collect(stream).await;
    assert_eq!(text_of(&events), ("Hello, world".to_owned(), 3));
    let tail = events[3..].to_vec();
    assert_eq!(
        tail,
        vec![
            Ok(StreamEvent::Usage(TokenUsage {
                input_tokens: 120,
                output_tokens: 30,
                reasoning_tokens: 12,
                cache_read_tokens: 100,
                cache_write_tokens: 0,
            })),
            Ok(StreamEvent::Finished { stop_reason: Some("stop".into()) }),
        ]
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].method, "POST");
    assert_eq!(requests[0].path, "/v1/chat/completions");
    // Compared without printing the key on failure.
    let expected_authorization = format!("Bearer {TEST_KEY}");
    assert!(
        requests[0].header("authorization") == Some(expected_authorization.as_str()),
        "the bearer header is missing or wrong"
    );
    let body = requests[0].json();
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn a_tool_call_in_three_argument_fragments_is_emitted_whole() {
    let fragment = |value: serde_json::Value| {
        data(json!({"choices": [{"index": 0, "delta": {"tool_calls": [value]}, "finish_reason": null}]}))
    };
    let pieces = vec![
        data(json!({"choices": [{"index": 0, "delta": {"role": "assistant", "reasoning_content": "think"}}]})),
        fragment(json!({"index": 0, "id": "call_abc", "type": "function",
            "function": {"name": "shell", "arguments": ""}})),
        fragment(json!({"index": 0, "function": {"arguments": "{\"comm"}})),
        fragment(json!({"index": 0, "function": {"arguments": "and\": \"ls"}})),
        fragment(json!({"index": 0, "function": {"arguments": " -la\"}"}})),
        fragment(json!({"index": 1, "id": "call_def", "type": "function",
            "function": {"name": "read", "arguments": "not json"}})),
        finish_chunk("tool_calls"),
        "data: [DONE]\n\n".to_owned(),
    ];
    let server = FakeServer::start(vec![FakeResponse::Sse { pieces }]).await;
    let stream = start_stream(&provider(&server, false), simple_request("list")).await.expect("stream");
    let events = collect(stream).await;
    assert_eq!(
        events,
        vec![
            Ok(StreamEvent::ReasoningDelta("think".into())),
            Ok(StreamEvent::ToolCall(ToolCallRequest {
                tool_call_id: "call_abc".into(),
                tool: "shell".into(),
                arguments: json!({"command": "ls -la"}),
            })),
            Ok(StreamEvent::ToolCall(ToolCallRequest {
                tool_call_id: "call_def".into(),
                tool: "read".into(),
                arguments: json!("not json"),
            })),
            Ok(StreamEvent::Finished { stop_reason: Some("tool_calls".into()) }),
        ]
    );
}

#[tokio::test]
async fn the_request_body_maps_history_and_tools_and_a_keyless_server_gets_no_auth() {
    let pieces = vec![finish_chunk("stop"), "data: [DONE]\n\n".to_owned()];
    let server = FakeServer::start(vec![FakeResponse::Sse { pieces }]).await;
    let request = ModelRequest {
        model_id: "llama3".into(),
        variant: Some("high".into()),
        system: Some("be brief".into()),
        messages: vec![
            ChatMessage::User {
                parts: vec![
                    UserPart::Text("look at this".into()),
                    UserPart::File {
                        path: "artifacts/a1".into(),
                        mime_type: "image/png".into(),
                        name: None,
                        content: FileContent::NotLoaded,
                    },
                ],
            },
            ChatMessage::Assistant {
                text: String::new(),
                tool_calls: vec![ToolCallRequest {
                    tool_call_id: "call_1".into(),
                    tool: "shell".into(),
                    arguments: json!({"command": "ls"}),
                }],
            },
            ChatMessage::ToolResult {
                tool_call_id: "call_1".into(),
                tool: "shell".into(),
                content: "a.txt".into(),
                is_error: false,
            },
        ]
        .into(),
        tools: vec![ToolSpec {
            name: "shell".into(),
            description: "Runs a command".into(),
            parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}}),
        }]
        .into(),
        max_output_tokens: Some(256),
    };
    let stream = start_stream(&provider(&server, false), request).await.expect("stream");
    collect(stream).await;
    let recorded = &server.requests()[0];
    assert_eq!(recorded.header("authorization"), None);
    assert_eq!(
        recorded.json(),
        json!({
            "model": "llama3",
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_tokens": 256,
            "reasoning_effort": "high",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "look at this\n\n[file: artifacts/a1 (image/png)]"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "shell", "arguments": "{\"command\":\"ls\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"}
            ],
            "tools": [{"type": "function", "function": {
                "name": "shell",
                "description": "Runs a command",
                "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}
            }}]
        })
    );
}

#[tokio::test]
async fn a_500_with_escape_sequences_is_a_retryable_provider_error_with_a_clean_bounded_body() {
    let error = request_error(FakeResponse::status(500, &[("x-request-id", "req_500")], escape_laden_body())).await;
    assert_eq!(error.kind, ModelErrorKind::Provider);
    assert!(error.retryable);
    assert_eq!(error.policy(), FailurePolicy::RetrySameModel);
    assert_eq!(error.http_status, Some(500));
    assert_eq!(error.stage, ErrorStage::Request);
    assert_eq!(error.request_id.as_deref(), Some("req_500"));
    assert_eq!(error.summary().kind, "provider");
    let body = error.response_body.expect("the body is kept");
    assert!(body.len() <= 4096, "body is {} bytes", body.len());
    assert!(!body.contains('\u{1b}') && !body.contains("[31m") && !body.contains('\u{202e}'));
    assert!(body.starts_with("{\"error\":{\"message\":\"server exploded\""));
}

#[tokio::test]
async fn a_401_is_auth_and_moves_to_the_next_model_without_echoing_the_key() {
    let body = json!({"error": {
        "message": format!("Incorrect API key provided: {TEST_KEY}."),
        "type": "invalid_request_error", "code": "invalid_api_key"}})
    .to_string();
    let error = request_error(FakeResponse::status(401, &[], body)).await;
    assert_eq!(error.kind, ModelErrorKind::Auth);
    assert!(!error.retryable);
    assert_eq!(error.policy(), FailurePolicy::NextModel);
    assert_eq!(error.vendor_code.as_deref(), Some("invalid_api_key"));
    let everything = format!("{error} {error:?}");
    assert!(!everything.contains(TEST_KEY), "the error repeats the API key");
    assert!(error.message.contains("<redacted>"));
}

#[tokio::test]
async fn a_429_with_retry_after_is_rate_limited_with_the_wait() {
    let body = json!({"error": {"message": "Rate limit reached", "type": "requests",
        "code": "rate_limit_exceeded"}})
    .to_string();
    let error = request_error(FakeResponse::status(429, &[("Retry-After", "2")], body)).await;
    assert_eq!(error.kind, ModelErrorKind::RateLimited);
    assert_eq!(error.retry_after_ms, Some(2000));
    assert_eq!(error.policy(), FailurePolicy::RetrySameModel);
}

#[tokio::test]
async fn context_length_fails_the_run() {
    let body = json!({"error": {"message": "This model's maximum context length is 128000 tokens.",
        "type": "invalid_request_error", "code": "context_length_exceeded"}})
    .to_string();
    let error = request_error(FakeResponse::status(400, &[], body)).await;
    assert_eq!(error.kind, ModelErrorKind::ContextLength);
    assert_eq!(error.policy(), FailurePolicy::FailRun);
}

#[tokio::test]
async fn a_stream_cut_before_done_is_an_unexpected_eof() {
    let pieces = vec![content_chunk("partial "), content_chunk("answer")];
    let server = FakeServer::start(vec![FakeResponse::Sse { pieces }]).await;
    let stream = start_stream(&provider(&server, true), simple_request("hi")).await.expect("stream");
    let events = collect(stream).await;
    assert_eq!(text_of(&events).0, "partial answer");
    let last = events.last().expect("events").clone().expect_err("an error last");
    assert_eq!(last.kind, ModelErrorKind::UnexpectedEof);
    assert_eq!(last.stage, ErrorStage::Stream);
    assert_eq!(last.policy(), FailurePolicy::RetrySameModel);
}

#[tokio::test]
async fn dropping_the_stream_closes_the_connection() {
    let server = FakeServer::start(vec![FakeResponse::SseThenHold { pieces: vec![content_chunk("first")] }]).await;
    let gone = server.client_gone.clone();
    let notified = gone.notified();
    let mut stream = start_stream(&provider(&server, true), simple_request("hi")).await.expect("stream");
    let first = tokio::time::timeout(TEST_TIMEOUT, stream.next()).await.expect("first event in time");
    assert_eq!(first, Some(Ok(StreamEvent::TextDelta("first".into()))));
    drop(stream);
    tokio::time::timeout(TEST_TIMEOUT, notified).await.expect("the server saw the client go away");
}

#[tokio::test]
async fn list_models_reads_data_ids() {
    let body = json!({"object": "list", "data": [
        {"id": "gpt-4o", "object": "model"}, {"id": "gpt-4o-mini", "object": "model"}]})
    .to_string();
    let server = FakeServer::start(vec![FakeResponse::status(200, &[], body)]).await;
    let models = tokio::time::timeout(TEST_TIMEOUT, provider(&server, true).list_models())
        .await
        .expect("in time")
        .expect("models");
    assert_eq!(models, vec!["gpt-4o", "gpt-4o-mini"]);
    let recorded = &server.requests()[0];
    assert_eq!((recorded.method.as_str(), recorded.path.as_str()), ("GET", "/v1/models"));
}

#[tokio::test]
async fn a_refused_connection_is_a_retryable_transport_error() {
    // Bind and drop a listener so the port is very likely closed.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let config = OpenAiCompatibleConfig::keyless(format!("http://127.0.0.1:{port}/v1"));
    let provider = OpenAiCompatible::new(config).expect("provider");
    let error = match start_stream(&provider, simple_request("hi")).await {
        Ok(_) => panic!("nothing listens there"),
        Err(error) => error,
    };
    assert_eq!(error.kind, ModelErrorKind::Transport);
    assert_eq!(error.stage, ErrorStage::Connect);
    assert_eq!(error.policy(), FailurePolicy::RetrySameModel);
}
