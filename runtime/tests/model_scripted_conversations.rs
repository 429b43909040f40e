//! `local/scripted` with `by_input`: conversations that share one script (a parent and its delegated children)
//! each play their own turns, selected by their first user message.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

mod model_support;

use model_support::{TEST_TIMEOUT, collect, text_of};
use serde_json::json;
use troupe_runtime::model::local::ScriptedModel;
use troupe_runtime::model::{ChatMessage, ModelProvider, ModelRequest, UserPart};

fn request(messages: Vec<ChatMessage>) -> ModelRequest {
    ModelRequest {
        model_id: "scripted".into(),
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

async fn answer(model: &ScriptedModel, messages: Vec<ChatMessage>) -> String {
    let stream = tokio::time::timeout(TEST_TIMEOUT, model.stream(request(messages)))
        .await
        .expect("answered in time")
        .expect("stream");
    text_of(&collect(stream).await).0
}

#[tokio::test]
async fn the_first_user_message_selects_the_conversation_and_others_play_the_top_level_turns() {
    let script = json!({
        "turns": [{"text": "parent one"}, {"text": "parent two"}],
        "by_input": {"child task": {"turns": [{"text": "child one"}, {"text": "child two"}]}}
    });
    let model = ScriptedModel::new(serde_json::from_value(script).expect("a valid script"));
    assert_eq!(answer(&model, vec![user("hello")]).await, "parent one");
    assert_eq!(answer(&model, vec![user("hello"), assistant("parent one"), user("more")]).await, "parent two");
    assert_eq!(answer(&model, vec![user("child task")]).await, "child one");
    // Only the first user message counts: a later message equal to a key does not switch conversations.
    assert_eq!(answer(&model, vec![user("child task"), assistant("child one"), user("x")]).await, "child two");
    assert_eq!(answer(&model, vec![user("hello"), assistant("parent one"), user("child task")]).await, "parent two");
}

#[test]
fn a_conversation_holds_only_turns() {
    let nested = json!({"turns": [], "by_input": {"a": {"turns": [], "by_input": {}}}});
    assert!(serde_json::from_value::<troupe_runtime::model::local::Script>(nested).is_err());
}
