//! The Anthropic provider against a fake server speaking the Messages API's SSE.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

mod model_support;

use model_support::{TEST_TIMEOUT, collect, text_of};
use serde_json::json;
use troupe_runtime::model::anthropic::{Anthropic, AnthropicConfig};
use troupe_runtime::model::{
    ApiKey, ChatMessage, ErrorStage, FailurePolicy, ModelError, ModelErrorKind, ModelProvider, ModelRequest,
    ModelStream, StreamEvent, TokenUsage, ToolCallRequest, ToolSpec, UserPart,
};
use troupe_test_support::replies::escape_laden_body;
use troupe_test_support::{FakeResponse, FakeServer};

const TEST_KEY: &str = "sk-ant-test-0123456789";

fn provider(server: &FakeServer) -> Anthropic {
    let mut config = AnthropicConfig::new(ApiKey::new(TEST_KEY));
    config.base_url = server.base_url.clone();
    Anthropic::new(config).expect("provider")
}

fn simple_request(text: &str) -> ModelRequest {
    ModelRequest {
        model_id: "claude-sonnet-4-20250514".into(),
        variant: None,
        system: None,
        messages: vec![ChatMessage::User { parts: vec![UserPart::Text(text.into())] }].into(),
        tools: Default::default(),
        max_output_tokens: None,
    }
}

fn event(data: serde_json::Value) -> String {
    let name = data["type"].as_str().expect("typed event").to_owned();
    format!("event: {name}\ndata: {data}\n\n")
}

fn message_start() -> String {
    event(json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
        "role": "assistant", "content": [], "model": "claude-sonnet-4-20250514",
        "usage": {"input_tokens": 50, "cache_creation_input_tokens": 20,
                  "cache_read_input_tokens": 100, "output_tokens": 1}}}))
}

fn text_delta(index: u64, text: &str) -> String {
    event(json!({"type": "content_block_delta", "index": index,
        "delta": {"type": "text_delta", "text": text}}))
}

fn block_stop(index: u64) -> String {
    event(json!({"type": "content_block_stop", "index": index}))
}

fn message_end(stop_reason: &str) -> Vec<String> {
    vec![
        event(json!({"type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": 42}})),
        event(json!({"type": "message_stop"})),
    ]
}

async fn start_stream(provider: &Anthropic, request: ModelRequest) -> Result<ModelStream, ModelError> {
    tokio::time::timeout(TEST_TIMEOUT, provider.stream(request)).await.expect("the request was answered in time")
}

#[tokio::test]
async fn text_and_thinking_stream_as_deltas_with_usage_and_headers() {
    let mut pieces = vec![
        message_start(),
        event(json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "thinking", "thinking": ""}})),
        event(json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "hmm"}})),
        block_stop(0),
        event(json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "text", "text": ""}})),
        "event: ping\ndata: {\"type\": \"ping\"}\n\n".to_owned(),
        text_delta(1, "Hello"),
        text_delta(1, ", "),
        text_delta(1, "world"),
        block_stop(1),
    ];
    pieces.extend(message_end("end_turn"));
    let server = FakeServer::start(vec![FakeResponse::Sse { pieces }]).await;
    let stream = start_stream(&provider(&server), simple_request("hi")).await.expect("stream");
    let events = collect(stream).await;
    assert_eq!(events[0], Ok(StreamEvent::ReasoningDelta("hmm".into())));
    assert_eq!(text_of(&events), ("Hello, world".to_owned(), 3));
    assert_eq!(
        events[4..].to_vec(),
        vec![
            Ok(StreamEvent::Usage(TokenUsage {
                input_tokens: 170,
                output_tokens: 42,
                reasoning_tokens: 0,
                cache_read_tokens: 100,
                cache_write_tokens: 20,
            })),
            Ok(StreamEvent::Finished { stop_reason: Some("end_turn".into()) }),
        ]
    );
    let recorded = &server.requests()[0];
    assert_eq!((recorded.method.as_str(), recorded.path.as_str()), ("POST", "/v1/messages"));
    assert!(recorded.header("x-api-key") == Some(TEST_KEY), "the x-api-key header is missing or wrong");
    assert_eq!(recorded.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(recorded.header("authorization"), None);
    let body = recorded.json();
    assert_eq!(body["max_tokens"], json!(8192));
    assert_eq!(body["stream"], json!(true));
}

#[tokio::test]
async fn a_tool_use_in_three_json_fragments_is_emitted_at_block_stop() {
    let input_delta = |fragment: &str| {
        event(json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": fragment}}))
    };
    let mut pieces = vec![
        message_start(),
        event(json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}})),
        text_delta(0, "Listing."),
        block_stop(0),
        event(json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_01", "name": "shell", "input": {}}})),
        input_delta("{\"comm"),
        input_delta("and\": \"ls"),
        input_delta(" -la\"}"),
        block_stop(1),
    ];
    pieces.extend(message_end("tool_use"));
    let server = FakeServer::start(vec![FakeResponse::Sse { pieces }]).await;
    let events = collect(start_stream(&provider(&server), simple_request("list")).await.expect("stream")).await;
    assert_eq!(
        events[1],
        Ok(StreamEvent::ToolCall(ToolCallRequest {
            tool_call_id: "toolu_01".into(),
            tool: "shell".into(),
            arguments: json!({"command": "ls -la"}),
        }))
    );
    assert_eq!(events.last(), Some(&Ok(StreamEvent::Finished { stop_reason: Some("tool_use".into()) })));
}

#[tokio::test]
async fn the_request_body_merges_consecutive_tool_results_into_one_user_message() {
    let mut pieces = vec![message_start()];
    pieces.extend(message_end("end_turn"));
    let server = FakeServer::start(vec![FakeResponse::Sse { pieces }]).await;
    let call = |id: &str, command: &str| ToolCallRequest {
        tool_call_id: id.into(),
        tool: "shell".into(),
        arguments: json!({"command": command}),
    };
    let request = ModelRequest {
        model_id: "claude-3-5-haiku-latest".into(),
        variant: None,
        system: Some("be brief".into()),
        messages: vec![
            ChatMessage::User { parts: vec![UserPart::Text("check".into())] },
            ChatMessage::Assistant {
                text: "Two checks.".into(),
                tool_calls: vec![call("toolu_a", "ls"), call("toolu_b", "pwd")],
            },
            ChatMessage::ToolResult {
                tool_call_id: "toolu_a".into(),
                tool: "shell".into(),
                content: "a.txt".into(),
                is_error: false,
            },
            ChatMessage::ToolResult {
                tool_call_id: "toolu_b".into(),
                tool: "shell".into(),
                content: "no such dir".into(),
                is_error: true,
            },
        ]
        .into(),
        tools: vec![ToolSpec {
            name: "shell".into(),
            description: "Runs a command".into(),
            parameters: json!({"type": "object"}),
        }]
        .into(),
        max_output_tokens: Some(1024),
    };
    collect(start_stream(&provider(&server), request).await.expect("stream")).await;
    assert_eq!(
        server.requests()[0].json(),
        json!({
            "model": "claude-3-5-haiku-latest",
            "max_tokens": 1024,
            "stream": true,
            "system": "be brief",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "check"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Two checks."},
                    {"type": "tool_use", "id": "toolu_a", "name": "shell", "input": {"command": "ls"}},
                    {"type": "tool_use", "id": "toolu_b", "name": "shell", "input": {"command": "pwd"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_a", "content": "a.txt", "is_error": false},
                    {"type": "tool_result", "tool_use_id": "toolu_b", "content": "no such dir",
                     "is_error": true}
                ]}
            ],
            "tools": [{"name": "shell", "description": "Runs a command",
                       "input_schema": {"type": "object"}}]
        })
    );
}

#[tokio::test]
async fn an_overloaded_error_event_mid_stream_is_a_retryable_overload() {
    let pieces = vec![
        message_start(),
        event(json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}})),
        text_delta(0, "Start"),
        event(json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})),
        // Nothing after the error is read.
        text_delta(0, "ignored"),
    ];
    let server = FakeServer::start(vec![FakeResponse::Sse { pieces }]).await;
    let events = collect(start_stream(&provider(&server), simple_request("hi")).await.expect("stream")).await;
    assert_eq!(events.len(), 2);
    assert_eq!(events[0], Ok(StreamEvent::TextDelta("Start".into())));
    let error = events[1].clone().expect_err("the overload");
    assert_eq!(error.kind, ModelErrorKind::Overload);
    assert_eq!(error.stage, ErrorStage::Stream);
    assert_eq!(error.vendor_code.as_deref(), Some("overloaded_error"));
    assert!(error.retryable);
    assert_eq!(error.policy(), FailurePolicy::RetrySameModel);
}

#[tokio::test]
async fn http_errors_are_classified_with_request_id_and_retry_after() {
    let overloaded = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
    let too_long = json!({"type": "error", "error": {"type": "invalid_request_error",
        "message": "prompt is too long: 210000 tokens > 200000 maximum"}});
    let bad_key = json!({"type": "error", "error": {"type": "authentication_error",
        "message": "invalid x-api-key"}});
    let rate = json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}});
    let server = FakeServer::start(vec![
        FakeResponse::status(529, &[("request-id", "req_529")], overloaded.to_string()),
        FakeResponse::status(400, &[], too_long.to_string()),
        FakeResponse::status(401, &[], bad_key.to_string()),
        FakeResponse::status(429, &[("retry-after", "2")], rate.to_string()),
        FakeResponse::status(500, &[], escape_laden_body()),
    ])
    .await;
    let provider = provider(&server);
    let mut errors = Vec::new();
    for _ in 0..5 {
        match start_stream(&provider, simple_request("hi")).await {
            Ok(_) => panic!("every scripted answer is an error"),
            Err(error) => errors.push(error),
        }
    }
    assert_eq!(errors[0].kind, ModelErrorKind::Overload);
    assert_eq!(errors[0].request_id.as_deref(), Some("req_529"));
    assert_eq!(errors[0].http_status, Some(529));
    assert_eq!(errors[1].kind, ModelErrorKind::ContextLength);
    assert_eq!(errors[1].policy(), FailurePolicy::FailRun);
    assert_eq!(errors[2].kind, ModelErrorKind::Auth);
    assert_eq!(errors[2].policy(), FailurePolicy::NextModel);
    assert_eq!(errors[2].vendor_code.as_deref(), Some("authentication_error"));
    assert_eq!(errors[3].kind, ModelErrorKind::RateLimited);
    assert_eq!(errors[3].retry_after_ms, Some(2000));
    assert_eq!(errors[4].kind, ModelErrorKind::Provider);
    assert!(errors[4].retryable);
    let body = errors[4].response_body.clone().expect("body");
    assert!(body.len() <= 4096 && !body.contains('\u{1b}'));
}

#[tokio::test]
async fn a_stream_cut_before_message_stop_is_an_unexpected_eof() {
    let pieces = vec![
        message_start(),
        event(json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}})),
        text_delta(0, "partial"),
    ];
    let server = FakeServer::start(vec![FakeResponse::Sse { pieces }]).await;
    let events = collect(start_stream(&provider(&server), simple_request("hi")).await.expect("stream")).await;
    let error = events.last().expect("events").clone().expect_err("error last");
    assert_eq!(error.kind, ModelErrorKind::UnexpectedEof);
    assert_eq!(error.policy(), FailurePolicy::RetrySameModel);
}

#[tokio::test]
async fn list_models_reads_data_ids() {
    let body = json!({"data": [{"id": "claude-sonnet-4-20250514", "type": "model"}],
        "has_more": false})
    .to_string();
    let server = FakeServer::start(vec![FakeResponse::status(200, &[], body)]).await;
    let models =
        tokio::time::timeout(TEST_TIMEOUT, provider(&server).list_models()).await.expect("in time").expect("models");
    assert_eq!(models, vec!["claude-sonnet-4-20250514"]);
    assert!(server.requests()[0].path.starts_with("/v1/models"));
}
