//! The offline models: echo streaming, scripted turn selection and scripted failures.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

mod model_support;

use model_support::{TEST_TIMEOUT, collect, text_of};
use serde_json::json;
use troupe_runtime::model::local::{EchoModel, ScriptError, ScriptedModel};
use troupe_runtime::model::{
    ChatMessage, ErrorStage, FailurePolicy, ModelError, ModelErrorKind, ModelProvider, ModelRequest, ModelStream,
    StreamEvent, ToolCallRequest, UserPart,
};

fn request(messages: Vec<ChatMessage>) -> ModelRequest {
    ModelRequest {
        model_id: "echo".into(),
        variant: None,
        system: None,
        messages: messages.into(),
        tools: Default::default(),
        max_output_tokens: None,
    }
}

fn user(text: &str) -> ChatMessage {
    ChatMessage::User { parts: vec![UserPart::Text(text.into())] }
}

fn assistant(text: &str) -> ChatMessage {
    ChatMessage::Assistant { text: text.into(), tool_calls: Vec::new() }
}

async fn start(provider: &dyn ModelProvider, request: ModelRequest) -> Result<ModelStream, ModelError> {
    tokio::time::timeout(TEST_TIMEOUT, provider.stream(request)).await.expect("answered in time")
}

fn write_script(script: serde_json::Value) -> (tempfile::TempDir, ScriptedModel) {
    let directory = tempfile::tempdir().expect("tempdir");
    let path = directory.path().join("script.json");
    std::fs::write(&path, script.to_string()).expect("write script");
    let model = ScriptedModel::from_file(&path).expect("script loads");
    (directory, model)
}

#[tokio::test]
async fn echo_streams_the_latest_user_message_in_word_chunks() {
    let events = collect(
        start(&EchoModel, request(vec![user("first"), assistant("first"), user("hello there world")]))
            .await
            .expect("stream"),
    )
    .await;
    assert_eq!(text_of(&events), ("hello there world".to_owned(), 3));
    let Some(Ok(StreamEvent::Usage(usage))) = events.get(3) else {
        panic!("usage after the text");
    };
    assert_eq!(usage.output_tokens, 5); // 17 bytes / 4, rounded up
    assert!(usage.input_tokens > 0);
    assert_eq!(events.last(), Some(&Ok(StreamEvent::Finished { stop_reason: Some("stop".into()) })));
}

#[tokio::test]
async fn echo_answers_done_after_a_tool_result() {
    let events = collect(
        start(
            &EchoModel,
            request(vec![
                user("run it"),
                ChatMessage::ToolResult {
                    tool_call_id: "c".into(),
                    tool: "shell".into(),
                    content: "ok".into(),
                    is_error: false,
                },
            ]),
        )
        .await
        .expect("stream"),
    )
    .await;
    assert_eq!(text_of(&events).0, "done");
}

#[tokio::test]
async fn scripted_turns_are_chosen_by_the_number_of_assistant_messages() {
    let (_directory, model) = write_script(json!({"turns": [
        {"reasoning": "look first", "text": "Listing files.",
         "tool_calls": [{"tool": "shell", "arguments": {"command": "ls"}}, {"tool": "pwd"}]},
        {"text": "All done.", "delay_ms": 5}
    ]}));

    let first = collect(start(&model, request(vec![user("go")])).await.expect("stream")).await;
    assert_eq!(first[0], Ok(StreamEvent::ReasoningDelta("look first".into())));
    assert_eq!(text_of(&first).0, "Listing files.");
    let calls: Vec<_> = first
        .iter()
        .filter_map(|event| match event {
            Ok(StreamEvent::ToolCall(call)) => Some(call.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        calls,
        vec![
            ToolCallRequest {
                tool_call_id: "call-1-1".into(),
                tool: "shell".into(),
                arguments: json!({"command": "ls"}),
            },
            ToolCallRequest { tool_call_id: "call-1-2".into(), tool: "pwd".into(), arguments: json!({}) },
        ]
    );
    assert_eq!(first.last(), Some(&Ok(StreamEvent::Finished { stop_reason: Some("tool_calls".into()) })));

    // A replay of the same history plays the same turn.
    let replay = collect(start(&model, request(vec![user("go")])).await.expect("stream")).await;
    assert_eq!(replay, first);

    let second_history = vec![
        user("go"),
        ChatMessage::Assistant { text: "Listing files.".into(), tool_calls: calls },
        ChatMessage::ToolResult {
            tool_call_id: "call-1-1".into(),
            tool: "shell".into(),
            content: "a.txt".into(),
            is_error: false,
        },
    ];
    let second = collect(start(&model, request(second_history)).await.expect("stream")).await;
    assert_eq!(text_of(&second).0, "All done.");

    // Past the end: an error that says which turn is missing and where to add it.
    let past_end = match start(&model, request(vec![user("a"), assistant("x"), assistant("y")])).await {
        Ok(_) => panic!("turn 3 is past the end"),
        Err(error) => error,
    };
    assert_eq!(past_end.kind, ModelErrorKind::InvalidRequest);
    assert!(!past_end.retryable);
    assert!(
        past_end.message.starts_with("the script has no reply for turn 3 (it has 2); add one to /")
            && past_end.message.ends_with("script.json"),
        "{}",
        past_end.message
    );
}

#[tokio::test]
async fn an_edited_script_takes_effect_at_the_next_request() {
    let (directory, model) = write_script(json!({"turns": [{"text": "first version"}]}));
    let answer = collect(start(&model, request(vec![user("go")])).await.expect("stream")).await;
    assert_eq!(text_of(&answer).0, "first version");
    // A longer file, so the size changes even where modification times are coarse.
    std::fs::write(
        directory.path().join("script.json"),
        json!({"turns": [{"text": "the second version"}]}).to_string(),
    )
    .expect("rewrite");
    let answer = collect(start(&model, request(vec![user("go")])).await.expect("stream")).await;
    assert_eq!(text_of(&answer).0, "the second version");
    // A broken edit fails the turn with the reason, and a fixed one plays again.
    std::fs::write(directory.path().join("script.json"), "{\"turns\": [").expect("rewrite");
    let broken = match start(&model, request(vec![user("go")])).await {
        Ok(_) => panic!("a broken script cannot play"),
        Err(error) => error,
    };
    assert!(broken.message.contains("is not a valid script"), "{}", broken.message);
    std::fs::write(directory.path().join("script.json"), json!({"turns": [{"text": "fixed"}]}).to_string())
        .expect("rewrite");
    let answer = collect(start(&model, request(vec![user("go")])).await.expect("stream")).await;
    assert_eq!(text_of(&answer).0, "fixed");
}

#[tokio::test]
async fn scripted_error_turns_fail_every_attempt_with_their_error() {
    let (_directory, model) = write_script(json!({"turns": [
        {"error": {"kind": "rate_limited", "http_status": 429, "message": "slow down",
                   "retry_after_ms": 100}},
        {"text": "half an ans", "error": {"kind": "overload", "stage": "stream"}},
        {"error": {"kind": "auth", "http_status": 401}}
    ]}));
    for _ in 0..2 {
        let error = match start(&model, request(vec![user("go")])).await {
            Ok(_) => panic!("turn 0 is an error"),
            Err(error) => error,
        };
        assert_eq!(error.kind, ModelErrorKind::RateLimited);
        assert_eq!(error.http_status, Some(429));
        assert_eq!(error.retry_after_ms, Some(100));
        assert_eq!(error.message, "slow down");
        assert!(error.retryable);
        assert_eq!(error.stage, ErrorStage::Request);
        assert_eq!(error.policy(), FailurePolicy::RetrySameModel);
    }

    let midway = collect(
        start(&model, request(vec![user("go"), assistant("")])).await.expect("a stream-stage error starts streaming"),
    )
    .await;
    assert_eq!(text_of(&midway).0, "half an ans");
    let error = midway.last().expect("events").clone().expect_err("error last");
    assert_eq!(error.kind, ModelErrorKind::Overload);
    assert_eq!(error.stage, ErrorStage::Stream);

    let auth = match start(&model, request(vec![assistant(""), assistant("")])).await {
        Ok(_) => panic!("turn 2 is an error"),
        Err(error) => error,
    };
    assert_eq!(auth.kind, ModelErrorKind::Auth);
    assert_eq!(auth.policy(), FailurePolicy::NextModel);
}

#[test]
fn script_errors_name_the_path_but_not_the_content() {
    let directory = tempfile::tempdir().expect("tempdir");
    let missing = directory.path().join("missing.json");
    assert!(matches!(ScriptedModel::from_file(&missing), Err(ScriptError::Read { .. })));
    let bad = directory.path().join("bad.json");
    std::fs::write(&bad, "{\"turns\": [{\"txet\": \"secret-ish content\"}]}").expect("write");
    let error = ScriptedModel::from_file(&bad).expect_err("unknown field");
    let message = error.to_string();
    assert!(message.contains("bad.json"));
    assert!(!message.contains("secret-ish content"));
}
