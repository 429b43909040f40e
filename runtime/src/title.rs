//! Automatic session titles without actors: the request that asks the session's model for a title, the cleaning
//! of its answer, and the fallback (the first line of the input) used when no model answers, for `local/*` models,
//! for delegated sessions and with `[titles] auto = false`. The session actor's side is in
//! `actors/src/session_actor/title.rs`.

use std::sync::Arc;

use troupe_protocol::diagnostic::is_format_control;

use crate::model::{ChatMessage, ModelRequest, UserPart};
use crate::session_state::MAX_TITLE_BYTES;

/// What the model is told: a few words, no quotes or decoration, in the language of the input.
pub const TITLE_SYSTEM_PROMPT: &str = "You name conversations. Reply with a title for the conversation that begins \
with the user's message below: at most 8 words, in the language of the message, plain text on one line, without \
quotes, without a final period, and nothing else.";

/// How much of the first input the model sees: its beginning is enough to name it, and a huge paste must not cost
/// a huge request.
pub const TITLE_INPUT_BYTES: usize = 2 * 1024;

/// The most output tokens asked for (a title is a handful; reasoning models may spend some before it).
pub const TITLE_MAX_OUTPUT_TOKENS: u32 = 256;

/// The longest fallback title, in characters, before "…".
pub const FALLBACK_TITLE_CHARS: usize = 60;

/// The longest title taken from a model's answer, in characters (a model that ignores "8 words" is cut).
const MODEL_TITLE_CHARS: usize = 80;

/// The request for a title of a session whose first input is `input`.
pub fn title_request(input: &str, model_id: String, variant: Option<String>) -> ModelRequest {
    let input = prefix_within(input, TITLE_INPUT_BYTES);
    ModelRequest {
        model_id,
        variant,
        system: Some(TITLE_SYSTEM_PROMPT.to_owned()),
        messages: Arc::new(vec![ChatMessage::User { parts: vec![UserPart::Text(input.to_owned())] }]),
        tools: Arc::new(Vec::new()),
        max_output_tokens: Some(TITLE_MAX_OUTPUT_TOKENS),
    }
}

/// The title in a model's answer: its first non-empty line, without control characters, surrounding quotes, a
/// `Title:` label or a final period, cut to a length a title list can show. `None` when nothing is left.
pub fn title_from_answer(answer: &str) -> Option<String> {
    let line = answer.lines().map(clean_line).find(|line| !line.is_empty())?;
    let mut line = line.as_str();
    for label in ["Title:", "title:", "TITLE:"] {
        line = line.strip_prefix(label).unwrap_or(line).trim();
    }
    let quotes: &[char] = &['"', '\'', '`', '“', '”', '‘', '’', '«', '»', '*', '#'];
    let line = line.trim_matches(|c: char| quotes.contains(&c) || c.is_whitespace());
    let line = line.strip_suffix('.').unwrap_or(line).trim();
    if line.is_empty() { None } else { Some(cut_at_word(line, MODEL_TITLE_CHARS)) }
}

/// The fallback title: the first non-empty line of `input`, cleaned, cut at a word boundary to about
/// [`FALLBACK_TITLE_CHARS`] characters with "…". `None` for an input with no visible text.
pub fn first_line_title(input: &str) -> Option<String> {
    let line = input.lines().map(clean_line).find(|line| !line.is_empty())?;
    Some(cut_at_word(&line, FALLBACK_TITLE_CHARS))
}

/// A line without control or invisible format characters, its whitespace runs made single spaces.
fn clean_line(line: &str) -> String {
    let visible: String = line.chars().map(|c| if c.is_control() || is_format_control(c) { ' ' } else { c }).collect();
    visible.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` (one clean line) when it has at most `max` characters, else its longest prefix ending at a word boundary
/// within `max` (a single long word is cut inside) followed by "…"; always within [`MAX_TITLE_BYTES`].
fn cut_at_word(text: &str, max: usize) -> String {
    let max = max.min(MAX_TITLE_BYTES / 4 - 1);
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let end = text.char_indices().nth(max).map_or(text.len(), |(index, _)| index);
    let head = &text[..end];
    let head = match head.rfind(' ') {
        Some(space) if space > 0 => &head[..space],
        _ => head,
    };
    format!("{}…", head.trim_end_matches(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | ':' | '-')))
}

/// The longest prefix of `text` of at most `bytes` bytes that ends on a character boundary.
fn prefix_within(text: &str, bytes: usize) -> &str {
    let mut end = text.len().min(bytes);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session_state::normalize_title;

    #[test]
    fn the_request_holds_the_prompt_and_a_bounded_input() {
        let input = "é".repeat(TITLE_INPUT_BYTES);
        let request = title_request(&input, "gpt-x".into(), None);
        assert_eq!(request.system.as_deref(), Some(TITLE_SYSTEM_PROMPT));
        assert!(request.tools.is_empty());
        let [ChatMessage::User { parts }] = request.messages.as_slice() else { panic!("one user message") };
        let [UserPart::Text(text)] = parts.as_slice() else { panic!("one text part") };
        assert_eq!(text.len(), TITLE_INPUT_BYTES, "cut on a character boundary within the bound");
    }

    #[test]
    fn answers_are_cleaned_into_titles() {
        assert_eq!(title_from_answer("\"Fix the flaky parser test.\"\n").as_deref(), Some("Fix the flaky parser test"));
        assert_eq!(title_from_answer("\n  Title: Réparer le build\n(more)").as_deref(), Some("Réparer le build"));
        assert_eq!(title_from_answer("a\u{1b}[31mred\u{202e}x").as_deref(), Some("a [31mred x"));
        assert_eq!(title_from_answer(" \n\t\u{7}\n"), None);
        assert_eq!(title_from_answer("\"\""), None);
        let long = title_from_answer(&"word ".repeat(50)).unwrap();
        assert!(long.ends_with('…') && long.chars().count() <= MODEL_TITLE_CHARS + 1, "{long}");
    }

    #[test]
    fn the_fallback_is_the_first_line_cut_at_a_word() {
        assert_eq!(first_line_title("\n\n  fix   the\ttests \nand more").as_deref(), Some("fix the tests"));
        let long = "Please refactor the configuration loader so that unknown keys are reported with their line";
        let title = first_line_title(long).unwrap();
        assert_eq!(title, "Please refactor the configuration loader so that unknown…");
        assert_eq!(first_line_title(&"x".repeat(100)).unwrap().chars().count(), FALLBACK_TITLE_CHARS + 1);
        assert_eq!(first_line_title("  \u{1}\n\u{200b}"), None);
        for input in ["a\u{202e}b\u{0}c", &"ü".repeat(1000)] {
            let title = first_line_title(input).unwrap();
            assert_eq!(normalize_title(&title).as_deref(), Ok(title.as_str()), "a valid title");
        }
    }
}
