//! Compaction without actors: the token estimate that decides when a request no longer fits, the summary request
//! sent to the session's model, and the message a checkpoint puts in place of the history it replaces.
//!
//! # The estimate
//!
//! Providers count tokens with their own tokenizers, which the daemon does not have, so a request is *estimated*
//! before it is sent: one token per [`BYTES_PER_TOKEN`] bytes of text (system prompt, message texts, tool call
//! arguments, tool results, tool specs as JSON), plus [`MESSAGE_OVERHEAD_TOKENS`] per message for the vendor's
//! framing and [`FILE_PART_TOKENS`] per attachment. English text and code average three to four bytes per token, so
//! the estimate errs on the low side for dense text; the answer reserve and the overflow recovery (a provider's
//! context-length error compacts and retries once) cover the difference.

use std::sync::Arc;

use crate::model::ToolSpec;
use crate::model::{ChatMessage, ModelRequest, UserPart, json_text_len};
use crate::transcript::Transcript;

/// Bytes of text per estimated token.
pub const BYTES_PER_TOKEN: u64 = 4;
/// Tokens added per message for the vendor's framing (role, separators).
pub const MESSAGE_OVERHEAD_TOKENS: u64 = 4;
/// Tokens counted for each attachment, whatever its size (images are billed by their pixels, not their bytes).
pub const FILE_PART_TOKENS: u64 = 1_000;
/// The most tokens a summary may take, asked of the model.
pub const SUMMARY_MAX_OUTPUT_TOKENS: u32 = 4_096;

fn text_tokens(text: &str) -> u64 {
    bytes_tokens(text.len())
}

fn bytes_tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(BYTES_PER_TOKEN)
}

/// The estimated input tokens of a request with this system prompt, history and tools.
pub fn estimate_tokens(system: Option<&str>, messages: &[ChatMessage], tools: &[ToolSpec]) -> u64 {
    let mut tokens = system.map_or(0, text_tokens);
    for message in messages {
        tokens += MESSAGE_OVERHEAD_TOKENS;
        tokens += match message {
            ChatMessage::User { parts } => parts
                .iter()
                .map(|part| match part {
                    UserPart::Text(text) => text_tokens(text),
                    UserPart::File { .. } => FILE_PART_TOKENS,
                })
                .sum(),
            ChatMessage::Assistant { text, tool_calls } => {
                text_tokens(text)
                    + tool_calls
                        .iter()
                        .map(|call| text_tokens(&call.tool) + bytes_tokens(json_text_len(&call.arguments)))
                        .sum::<u64>()
            }
            ChatMessage::ToolResult { tool, content, .. } => text_tokens(tool) + text_tokens(content),
        };
    }
    for tool in tools {
        tokens +=
            text_tokens(&tool.name) + text_tokens(&tool.description) + bytes_tokens(json_text_len(&tool.parameters));
    }
    tokens
}

/// The tokens kept free for the answer in a window of `context_window`: `reserve` when configured, else a quarter
/// of the window, at most 16,384.
pub fn answer_reserve(context_window: u64, reserve: Option<u64>) -> u64 {
    reserve.unwrap_or((context_window / 4).min(16_384))
}

/// Whether a request estimated at `estimate` tokens leaves too little of `context_window` for the answer.
pub fn exceeds_window(estimate: u64, context_window: u64, reserve: u64) -> bool {
    estimate.saturating_add(reserve) > context_window
}

/// The user message a checkpoint puts in place of the history it replaced: says it is a summary, how much it
/// replaced, and that attachments before it are gone.
pub fn checkpoint_message(summary: &str, compacted_messages: u64, elided_tool_results: u64) -> ChatMessage {
    let text = format!(
        "[Summary of the earlier conversation. It replaces {compacted_messages} earlier messages, including \
         {elided_tool_results} tool results (with any messages their tools emitted) whose full output is no longer \
         available; files and images attached before this point are not available either. Continue the work from \
         here.]\n\n{summary}"
    );
    ChatMessage::User { parts: vec![UserPart::Text(text)] }
}

/// The system prompt of a summary request.
pub fn summary_system_prompt() -> String {
    "You compact a coding agent's conversation. The conversation so far will be replaced by your summary, and the \
     agent will continue the work from the summary alone. Write a summary that lets it: the user's requests and \
     goals (quote the latest request), what was done and found (files read or changed, commands run and their \
     outcomes, decisions and why), the current state, and what remains to do next. Keep exact file paths, names, \
     identifiers and error messages that matter. Do not call tools; answer with the summary only."
        .to_owned()
}

/// The last user message of a summary request: what to summarize, the focus, and how many tool results were left
/// out to fit.
pub fn summary_instruction(focus: Option<&str>, elided: usize) -> ChatMessage {
    let mut text = "Summarize the conversation above so that the work can continue from the summary alone.".to_owned();
    if elided > 0 {
        text.push_str(&format!(
            " {elided} of the oldest tool results (with the messages their tools emitted) were elided to fit this \
             request: say so where it matters."
        ));
    }
    if let Some(focus) = focus.map(str::trim).filter(|focus| !focus.is_empty()) {
        text.push_str(&format!("\n\nFocus the summary on: {focus}"));
    }
    ChatMessage::User { parts: vec![UserPart::Text(text)] }
}

/// The summary request for `transcript`'s history. When a context window is known and the whole history does not
/// fit it (less `reserve`), the fewest oldest tool units are elided that make it fit (all of them at most; the
/// request is then sent as it is and the provider decides). Returns the request and how many units were elided.
pub fn summary_request(
    transcript: &Transcript,
    model_id: String,
    variant: Option<String>,
    focus: Option<&str>,
    fit: Option<(u64, u64)>,
    tool_units: usize,
) -> (ModelRequest, usize) {
    let system = summary_system_prompt();
    let build = |elided: usize| {
        let mut messages = transcript.messages_eliding(elided);
        messages.push(summary_instruction(focus, elided));
        messages
    };
    let fits = |messages: &[ChatMessage]| match fit {
        Some((window, reserve)) => !exceeds_window(estimate_tokens(Some(&system), messages, &[]), window, reserve),
        None => true,
    };
    let mut messages = build(0);
    let mut elided = 0;
    if !fits(&messages) && tool_units > 0 {
        // The fewest elided units that fit, by bisection: eliding more never makes a request larger.
        let (mut low, mut high) = (1, tool_units);
        while low < high {
            let middle = low + (high - low) / 2;
            if fits(&build(middle)) {
                high = middle;
            } else {
                low = middle + 1;
            }
        }
        elided = low;
        messages = build(elided);
    }
    let request = ModelRequest {
        model_id,
        variant,
        system: Some(system),
        messages: Arc::new(messages),
        tools: Arc::new(Vec::new()),
        max_output_tokens: Some(SUMMARY_MAX_OUTPUT_TOKENS),
    };
    (request, elided)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> ChatMessage {
        ChatMessage::User { parts: vec![UserPart::Text(text.into())] }
    }

    #[test]
    fn the_estimate_counts_bytes_over_four_plus_framing() {
        assert_eq!(estimate_tokens(None, &[], &[]), 0);
        assert_eq!(estimate_tokens(Some("abcd"), &[user("12345678")], &[]), 1 + MESSAGE_OVERHEAD_TOKENS + 2);
        let file = ChatMessage::User {
            parts: vec![UserPart::File {
                path: "artifacts/a.png".into(),
                mime_type: "image/png".into(),
                name: None,
                content: Default::default(),
            }],
        };
        assert_eq!(estimate_tokens(None, &[file], &[]), MESSAGE_OVERHEAD_TOKENS + FILE_PART_TOKENS);
    }

    #[test]
    fn the_reserve_is_a_quarter_of_the_window_at_most_16k_unless_configured() {
        assert_eq!(answer_reserve(1_000, None), 250);
        assert_eq!(answer_reserve(200_000, None), 16_384);
        assert_eq!(answer_reserve(200_000, Some(100)), 100);
        assert!(exceeds_window(751, 1_000, 250));
        assert!(!exceeds_window(750, 1_000, 250));
    }

    #[test]
    fn the_checkpoint_message_says_what_it_replaced_and_that_attachments_are_gone() {
        let ChatMessage::User { parts } = checkpoint_message("We fixed the parser.", 12, 3) else { panic!() };
        let UserPart::Text(text) = &parts[0] else { panic!() };
        assert!(text.starts_with("[Summary of the earlier conversation."), "{text}");
        assert!(text.contains("12 earlier messages") && text.contains("3 tool results"), "{text}");
        assert!(text.contains("attached before this point are not available"), "{text}");
        assert!(text.ends_with("We fixed the parser."), "{text}");
    }

    #[test]
    fn the_instruction_carries_the_focus_and_the_elision_marker() {
        let ChatMessage::User { parts } = summary_instruction(Some(" the tests "), 2) else { panic!() };
        let UserPart::Text(text) = &parts[0] else { panic!() };
        assert!(text.contains("2 of the oldest tool results"), "{text}");
        assert!(text.ends_with("Focus the summary on: the tests"), "{text}");
        let ChatMessage::User { parts } = summary_instruction(Some("  "), 0) else { panic!() };
        assert_eq!(parts.len(), 1);
        assert!(!format!("{parts:?}").contains("Focus"));
    }
}
