//! Tool-emitted messages with attachments, as each provider sends them: files as the vendor's image, file or
//! document parts where its API takes them, a clear text note otherwise, and a turn's tool results before the
//! user turns its tools emitted.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

mod model_support;

use std::sync::Arc;

use model_support::{TEST_TIMEOUT, collect};
use serde_json::{Value, json};
use troupe_runtime::model::anthropic::{Anthropic, AnthropicConfig};
use troupe_runtime::model::openai::{OpenAiCompatible, OpenAiCompatibleConfig};
use troupe_runtime::model::{ApiKey, ChatMessage, FileContent, ModelProvider, ModelRequest, ToolCallRequest, UserPart};
use troupe_test_support::{FakeResponse, FakeServer};

const PNG: &[u8] = b"\x89PNG\r\n\x1a\nfake";
const PDF: &[u8] = b"%PDF-1.7 fake";

fn file(path: &str, mime_type: &str, content: FileContent) -> UserPart {
    UserPart::File { path: path.into(), mime_type: mime_type.into(), name: None, content }
}

fn loaded(bytes: &[u8]) -> FileContent {
    FileContent::Loaded(Arc::from(bytes))
}

/// A turn with two calls, both results, then what the tools emitted: an image with text, a PDF, a text file, an
/// archive, and an artifact that could not be read.
fn history() -> Vec<ChatMessage> {
    let call = |id: &str| ToolCallRequest { tool_call_id: id.into(), tool: "probe".into(), arguments: json!({}) };
    let result = |id: &str| ChatMessage::ToolResult {
        tool_call_id: id.into(),
        tool: "probe".into(),
        content: format!("result {id}"),
        is_error: false,
    };
    vec![
        ChatMessage::User { parts: vec![UserPart::Text("look".into())] },
        ChatMessage::Assistant { text: String::new(), tool_calls: vec![call("c1"), call("c2")] },
        result("c1"),
        result("c2"),
        ChatMessage::User {
            parts: vec![UserPart::Text("the chart".into()), file("artifacts/chart.png", "image/png", loaded(PNG))],
        },
        ChatMessage::User {
            parts: vec![UserPart::File {
                path: "artifacts/r1".into(),
                mime_type: "application/pdf".into(),
                name: Some("report.pdf".into()),
                content: loaded(PDF),
            }],
        },
        ChatMessage::User { parts: vec![file("artifacts/notes", "text/plain", loaded(b"line one"))] },
        ChatMessage::User { parts: vec![file("artifacts/a.zip", "application/zip", loaded(b"PK"))] },
        ChatMessage::User {
            parts: vec![file("artifacts/gone.png", "image/png", FileContent::Unavailable("it is missing".into()))],
        },
    ]
}

fn request(messages: Vec<ChatMessage>) -> ModelRequest {
    ModelRequest {
        model_id: "m".into(),
        variant: None,
        system: None,
        messages: messages.into(),
        tools: Default::default(),
        max_output_tokens: None,
    }
}

async fn sent_body(provider: &dyn ModelProvider, server: &FakeServer, messages: Vec<ChatMessage>) -> Value {
    let stream = tokio::time::timeout(TEST_TIMEOUT, provider.stream(request(messages)))
        .await
        .expect("answered in time")
        .expect("a stream");
    collect(stream).await;
    server.requests()[0].json()
}

#[tokio::test]
async fn openai_gets_image_url_and_file_parts_and_text_notes_after_the_tool_messages() {
    let server = FakeServer::start(vec![FakeResponse::sse(&["data: [DONE]\n\n"])]).await;
    let provider = OpenAiCompatible::new(OpenAiCompatibleConfig::keyless(format!("{}/v1", server.base_url))).unwrap();
    let body = sent_body(&provider, &server, history()).await;
    let messages = body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages.iter().map(|message| message["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "tool", "user", "user", "user", "user", "user"]);
    assert_eq!(messages[0]["content"], "look", "a text-only message stays a string");
    assert_eq!(
        messages[4]["content"],
        json!([
            {"type": "text", "text": "the chart"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgpmYWtl"}}
        ])
    );
    assert_eq!(
        messages[5]["content"],
        json!([{"type": "file", "file": {"filename": "report.pdf", "file_data": "data:application/pdf;base64,JVBERi0xLjcgZmFrZQ=="}}])
    );
    assert_eq!(messages[6]["content"], "[file: artifacts/notes (text/plain)]\nline one");
    let archive = messages[7]["content"].as_str().unwrap();
    assert!(archive.starts_with("[file: artifacts/a.zip (application/zip); not attached:"), "{archive}");
    assert_eq!(messages[8]["content"], "[file: artifacts/gone.png (image/png); not attached: it is missing]");
}

#[tokio::test]
async fn anthropic_gets_image_and_document_blocks_with_the_tool_results_first() {
    let server = FakeServer::start(vec![FakeResponse::sse(&[])]).await;
    let mut config = AnthropicConfig::new(ApiKey::new("sk-ant-test"));
    config.base_url = server.base_url.clone();
    let provider = Anthropic::new(config).unwrap();
    // Even a history that put an emitted message between two results is sent with the results first.
    let mut history = history();
    history.swap(3, 4);
    let body = sent_body(&provider, &server, history).await;
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "user, assistant, then one merged user turn: {body}");
    let blocks = messages[2]["content"].as_array().unwrap();
    let kinds: Vec<&str> = blocks.iter().map(|block| block["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["tool_result", "tool_result", "text", "image", "document", "text", "text", "text"]);
    assert_eq!(blocks[0]["tool_use_id"], "c1");
    assert_eq!(blocks[1]["tool_use_id"], "c2");
    assert_eq!(blocks[3]["source"], json!({"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgpmYWtl"}));
    assert_eq!(
        blocks[4]["source"],
        json!({"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjcgZmFrZQ=="})
    );
    assert_eq!(blocks[5]["text"], "[file: artifacts/notes (text/plain)]\nline one");
}
