//! Replies of the fake vendor ([`crate::FakeServer`]) in the real wire formats: a model list, an OpenAI Chat
//! Completions text stream (optionally reporting usage) or tool call, an Anthropic Messages text stream, and an
//! OpenAI failure status. The OpenAI chunks are what the runtime's `openai` provider parses: `data:
//! {"choices": [{"index", "delta", "finish_reason"}]}` events ended by `data: [DONE]`.

use serde_json::{Value, json};

use crate::FakeResponse;

/// `GET /models`: the listed ids (OpenAI and Anthropic read the same `data[].id`).
pub fn models_list(ids: &[&str]) -> FakeResponse {
    let data: Vec<Value> = ids.iter().map(|id| json!({"id": id, "object": "model", "type": "model"})).collect();
    FakeResponse::status(200, &[], json!({"object": "list", "data": data}).to_string())
}

/// A streamed OpenAI answer of one text.
pub fn openai_text(text: &str) -> FakeResponse {
    let chunk = |delta: Value, finish: Value| {
        format!("data: {}\n\n", json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}))
    };
    FakeResponse::Sse {
        pieces: vec![
            chunk(json!({"content": text}), Value::Null),
            chunk(json!({}), json!("stop")),
            "data: [DONE]\n\n".to_owned(),
        ],
    }
}

/// A streamed OpenAI answer of one text whose last chunk reports `usage` (as `stream_options.include_usage` asks):
/// `{"prompt_tokens", "completion_tokens", "prompt_tokens_details": {"cached_tokens"},
/// "completion_tokens_details": {"reasoning_tokens"}}`.
pub fn openai_text_reporting(text: &str, usage: Value) -> FakeResponse {
    let chunk = |value: Value| format!("data: {value}\n\n");
    FakeResponse::Sse {
        pieces: vec![
            chunk(json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})),
            chunk(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})),
            chunk(json!({"choices": [], "usage": usage})),
            "data: [DONE]\n\n".to_owned(),
        ],
    }
}

/// A streamed Anthropic answer of one text.
pub fn anthropic_text(text: &str) -> FakeResponse {
    anthropic_events(&[
        json!({"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 9, "output_tokens": 0}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
        json!({"type": "message_stop"}),
    ])
}

/// Anthropic's Messages stream of `events`, each under its `type` as the SSE event name.
pub fn anthropic_events(events: &[Value]) -> FakeResponse {
    FakeResponse::Sse {
        pieces: events
            .iter()
            .map(|event| format!("event: {}\ndata: {event}\n\n", event["type"].as_str().unwrap_or_default()))
            .collect(),
    }
}

/// An OpenAI error status with its JSON error body.
pub fn openai_error(status: u16, message: &str) -> FakeResponse {
    FakeResponse::status(status, &[], json!({"error": {"message": message, "type": "error"}}).to_string())
}

/// A streamed OpenAI answer of one tool call (`arguments` sent as the JSON string the API uses).
pub fn openai_tool_call(tool: &str, arguments: Value) -> FakeResponse {
    let call = json!({"index": 0, "id": "call_1", "type": "function",
        "function": {"name": tool, "arguments": arguments.to_string()}});
    let chunk = |delta: Value, finish: Value| {
        format!("data: {}\n\n", json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}))
    };
    FakeResponse::Sse {
        pieces: vec![
            chunk(json!({"tool_calls": [call]}), Value::Null),
            chunk(json!({}), json!("tool_calls")),
            "data: [DONE]\n\n".to_owned(),
        ],
    }
}

/// A 10 KB error body made mostly of ANSI colour escapes, to check it comes out clean and bounded.
pub fn escape_laden_body() -> String {
    let mut body = String::from("{\"error\":{\"message\":\"server exploded\",\"type\":\"server_error\"}}");
    while body.len() < 10 * 1024 {
        body.push_str("\u{1b}[31mred\u{1b}[0m\u{202e}");
    }
    body
}
