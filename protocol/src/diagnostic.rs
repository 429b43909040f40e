//! Terminal-safe, bounded diagnostic text.
//!
//! Error details (`data.detail`) and model error bodies (`DiagnosticText`) are shown to people in terminals and
//! browsers, so they must never carry escape sequences, bidi overrides or other format controls that could
//! rewrite what the reader sees, and they must stay small. Newlines and tabs are kept because they carry meaning
//! in multi-line diagnostics.
//!
//! Text a person must judge rather than read past (a command waiting for approval) is not cleaned but shown
//! whole, every control visible: [`show_visibly`] and [`visible_line`] (module `visible`).

mod visible;

pub use visible::{LeftOut, ShowLimits, ShownText, escape, is_invisible, show_visibly, thousands, visible_line};

/// Upper bound, in UTF-8 bytes, of a diagnostic string including the truncation marker.
pub const MAX_DIAGNOSTIC_BYTES: usize = 4096;

/// Appended when a diagnostic had to be cut to fit [`MAX_DIAGNOSTIC_BYTES`].
pub const TRUNCATION_MARKER: &str = "…[truncated]";

/// Returns `text` with format controls removed and cut to at most [`MAX_DIAGNOSTIC_BYTES`] bytes.
///
/// Control characters other than `\n` and `\t` are dropped (a `\r\n` pair becomes `\n`), and so are Unicode
/// format characters (bidi overrides, zero-width joiners, BOMs). ANSI escape sequences are removed as a whole,
/// not just their ESC byte, so no `[31m` residue remains.
pub fn sanitize_diagnostic(text: &str) -> String {
    truncate_with_marker(strip_controls(text, MAX_DIAGNOSTIC_BYTES + 1))
}

/// The same cleaning as [`sanitize_diagnostic`] without the size bound: for untrusted text of any length (a
/// model's answer, a tool's output, a file) that a client prints to a terminal.
pub fn strip_terminal_controls(text: &str) -> String {
    strip_controls(text, usize::MAX)
}

/// Cleans `text`, stopping once the result holds more than `stop_after` bytes.
fn strip_controls(text: &str, stop_after: usize) -> String {
    let mut cleaned = String::with_capacity(text.len().min(stop_after.saturating_add(16)));
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => skip_escape_sequence(&mut chars),
            // C1 control sequence introducer: same shape as ESC [.
            '\u{9b}' => skip_csi_body(&mut chars),
            '\n' | '\t' => cleaned.push(c),
            c if c.is_control() || is_format_control(c) => {}
            c => cleaned.push(c),
        }
        if cleaned.len() > stop_after {
            break;
        }
    }
    cleaned
}

fn truncate_with_marker(mut text: String) -> String {
    if text.len() <= MAX_DIAGNOSTIC_BYTES {
        return text;
    }
    let mut cut = MAX_DIAGNOSTIC_BYTES - TRUNCATION_MARKER.len();
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str(TRUNCATION_MARKER);
    text
}

/// Skips the rest of an escape sequence whose ESC has been consumed: CSI (`ESC [ ... final`), OSC
/// (`ESC ] ... BEL` or `ESC ] ... ESC \`), and two-byte escapes.
fn skip_escape_sequence(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    match chars.peek().copied() {
        Some('[') => {
            chars.next();
            skip_csi_body(chars);
        }
        Some(']') | Some('P') | Some('X') | Some('^') | Some('_') => {
            chars.next();
            // String-type sequences end with BEL or ST (ESC \).
            while let Some(c) = chars.next() {
                if c == '\u{7}' {
                    break;
                }
                if c == '\u{1b}' {
                    if chars.peek() == Some(&'\\') {
                        chars.next();
                    }
                    break;
                }
            }
        }
        Some(_) => {
            chars.next();
        }
        None => {}
    }
}

fn skip_csi_body(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    // Parameter and intermediate bytes are 0x20..=0x3F; the final byte is 0x40..=0x7E.
    for c in chars.by_ref() {
        if ('\u{40}'..='\u{7e}').contains(&c) || !('\u{20}'..='\u{3f}').contains(&c) {
            break;
        }
    }
}

/// Unicode format characters (general category Cf: bidi overrides and isolates, zero-width characters, BOMs, tag
/// characters, ...) and the line and paragraph separators (Zl, Zp), which can reorder, hide or break text. Decided by
/// the character's Unicode property, so characters added to the category are covered too.
pub fn is_format_control(c: char) -> bool {
    use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};
    // No ASCII character is in these categories (ASCII's controls are Cc), and most text is ASCII: no table lookup.
    !c.is_ascii()
        && matches!(
            c.general_category(),
            GeneralCategory::Format | GeneralCategory::LineSeparator | GeneralCategory::ParagraphSeparator
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_ansi_sequences_whole_and_keeps_newlines_and_tabs() {
        let input = "\u{1b}[31mred\u{1b}[0m\tok\r\nnext\u{1b}]0;title\u{7}line\u{202e}x";
        assert_eq!(sanitize_diagnostic(input), "red\tok\nnextlinex");
    }

    #[test]
    fn strip_terminal_controls_keeps_long_text_whole() {
        let input = format!("{}\u{1b}[2J{}", "a".repeat(5000), "b".repeat(5000));
        let out = strip_terminal_controls(&input);
        assert_eq!(out.len(), 10_000);
        assert!(!out.contains('\u{1b}'));
    }

    #[test]
    fn truncates_to_the_byte_limit_including_the_marker_on_a_char_boundary() {
        let input = "é".repeat(5000);
        let out = sanitize_diagnostic(&input);
        assert!(out.len() <= MAX_DIAGNOSTIC_BYTES, "{} bytes", out.len());
        assert!(out.ends_with(TRUNCATION_MARKER));
        assert!(out.len() > MAX_DIAGNOSTIC_BYTES - TRUNCATION_MARKER.len() - 4);
    }

    #[test]
    fn format_controls_are_found_by_property() {
        for c in [
            '\u{202e}',
            '\u{200b}',
            '\u{2066}',
            '\u{feff}',
            '\u{e0041}',
            '\u{2028}',
            '\u{2029}',
            '\u{110bd}',
            '\u{1d173}',
        ] {
            assert!(is_format_control(c), "{:x}", c as u32);
        }
        for c in ['a', ' ', 'é', '\n', '漢', '😀'] {
            assert!(!is_format_control(c), "{:x}", c as u32);
        }
        // The ASCII shortcut agrees with the table.
        use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};
        for c in (0u8..=127).map(char::from) {
            let category = c.general_category();
            assert!(!matches!(
                category,
                GeneralCategory::Format | GeneralCategory::LineSeparator | GeneralCategory::ParagraphSeparator
            ));
        }
    }

    #[test]
    fn short_clean_text_is_unchanged() {
        assert_eq!(sanitize_diagnostic("session not found"), "session not found");
    }
}
