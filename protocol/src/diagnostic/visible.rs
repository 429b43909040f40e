//! Untrusted text shown with every character seen: what a person approves must read as what runs.
//!
//! [`strip_terminal_controls`](super::strip_terminal_controls) removes controls, which is right for a model's prose
//! but wrong for a command waiting for approval: `ls\rrm -rf ~` would read as `lsrm -rf ~`, a bidi override would
//! be gone without a trace, and a newline folded into a one-line summary hides the second command. Here nothing is
//! removed: each line of the text is its own line, and every character that a terminal or a browser would not show
//! as itself (controls, bidi and zero-width format characters, spaces other than U+0020, unassigned and private-use
//! code points) is written as an escape in angle brackets: `⟨CR⟩`, `⟨ESC⟩`, `⟨TAB⟩` for the common controls and
//! `⟨U+202E⟩` for the rest, the form the web console uses (web/src/shown.js mirrors this module). A text longer
//! than a view's [`ShowLimits`] is cut, and [`ShownText::left_out`] says how much is missing, so the view can say
//! where the whole text is.

use std::borrow::Cow;

use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// How much of a text a view shows before it stops and says what it left out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShowLimits {
    /// Lines shown at most.
    pub max_lines: usize,
    /// UTF-8 bytes of shown text (escapes included) at most, over all lines.
    pub max_bytes: usize,
}

impl ShowLimits {
    /// No limit: the whole text (`troupe approvals --full`).
    pub const WHOLE: ShowLimits = ShowLimits { max_lines: usize::MAX, max_bytes: usize::MAX };
    /// An operation waiting for approval in a listing or a watcher: a long script still fits on a screen.
    pub const APPROVAL: ShowLimits = ShowLimits { max_lines: 24, max_bytes: 2048 };
}

/// A text as shown: its lines with every invisible character escaped, and what was cut.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShownText {
    /// The shown lines; none holds a control or format character. At least one (empty for an empty text).
    pub lines: Vec<String>,
    /// What the limits left out, `None` when the text is shown whole.
    pub left_out: Option<LeftOut>,
    /// How many characters are shown as escapes.
    pub escaped: usize,
}

/// The part of a text a view did not show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeftOut {
    /// UTF-8 bytes of the original text not shown.
    pub bytes: usize,
    /// Lines not shown at all (a line cut part way is counted as shown).
    pub lines: usize,
}

impl LeftOut {
    /// "3,412 more bytes, 40 more lines".
    pub fn describe(&self) -> String {
        let plural = |count: usize, word: &str| {
            format!("{} more {word}{}", thousands(count as u64), if count == 1 { "" } else { "s" })
        };
        match self.lines {
            0 => plural(self.bytes, "byte"),
            lines => format!("{}, {}", plural(self.bytes, "byte"), plural(lines, "line")),
        }
    }
}

/// `text` as lines with every invisible character escaped, cut at `limits`.
///
/// Lines are split at `\n` only (a `\r` is shown, never taken as a line end); a single trailing newline ends the
/// last line rather than starting an empty one, as a shell reads it.
pub fn show_visibly(text: &str, limits: ShowLimits) -> ShownText {
    let body = text.strip_suffix('\n').unwrap_or(text);
    let total_lines = body.split('\n').count();
    let mut shown = ShownText { lines: Vec::new(), left_out: None, escaped: 0 };
    let mut budget = limits.max_bytes;
    // Bytes of `text` shown so far, each line's newline included.
    let mut consumed = 0;
    for line in body.split('\n') {
        if shown.lines.len() == limits.max_lines || budget == 0 {
            break;
        }
        let mut out = String::new();
        let mut whole = true;
        for (at, c) in line.char_indices() {
            let escaped = escape_of(c);
            let size = escaped.as_ref().map_or(c.len_utf8(), |escaped| escaped.len());
            if size > budget {
                consumed += at;
                whole = false;
                break;
            }
            budget -= size;
            match escaped {
                Some(escaped) => {
                    shown.escaped += 1;
                    out.push_str(&escaped);
                }
                None => out.push(c),
            }
        }
        shown.lines.push(out);
        if !whole {
            break;
        }
        consumed = (consumed + line.len() + 1).min(text.len());
    }
    if shown.lines.is_empty() {
        shown.lines.push(String::new());
    }
    if consumed < text.len() {
        // A line cut part way counts as shown; the lines after it are the ones left out.
        let lines = total_lines - shown.lines.len();
        shown.left_out = Some(LeftOut { bytes: text.len() - consumed, lines });
    }
    shown
}

/// One line for a table cell: the first line of `text` with its invisible characters escaped, cut to `max_chars`
/// characters (marked `…`), and `[+N lines]` when the text goes on, so neither a second command nor a control
/// hides behind a tidy cell.
pub fn visible_line(text: &str, max_chars: usize) -> String {
    let body = text.strip_suffix('\n').unwrap_or(text);
    let mut lines = body.split('\n');
    let first = lines.next().unwrap_or("");
    let more = lines.count();
    let escaped: String = first.chars().map(escape).collect();
    let mut line: String = escaped.chars().take(max_chars).collect();
    if line.len() < escaped.len() {
        line.push('…');
    }
    match more {
        0 => line,
        1 => format!("{line} [+1 line]"),
        more => format!("{line} [+{more} lines]"),
    }
}

/// How `c` is shown: itself, or an escape in angle brackets when a reader would not see it for what it is.
pub fn escape(c: char) -> Cow<'static, str> {
    escape_of(c).unwrap_or_else(|| Cow::Owned(c.to_string()))
}

/// The escape `c` is shown as, `None` when it is shown as itself.
fn escape_of(c: char) -> Option<Cow<'static, str>> {
    let named = match c {
        '\t' => "⟨TAB⟩",
        '\r' => "⟨CR⟩",
        '\u{1b}' => "⟨ESC⟩",
        '\0' => "⟨NUL⟩",
        '\u{7}' => "⟨BEL⟩",
        '\u{8}' => "⟨BS⟩",
        '\u{b}' => "⟨VT⟩",
        '\u{c}' => "⟨FF⟩",
        '\u{7f}' => "⟨DEL⟩",
        c if is_invisible(c) => return Some(Cow::Owned(format!("⟨U+{:04X}⟩", c as u32))),
        _ => return None,
    };
    Some(Cow::Borrowed(named))
}

/// Characters a reader would not see for what they are: every control (a newline included: callers split lines
/// first), format characters (bidi overrides and isolates, zero-width characters, BOMs, tags), line and paragraph
/// separators, spaces other than U+0020 (a no-break space joins what looks like two words), private-use and
/// unassigned code points, and the default-ignorable characters outside those categories (the combining grapheme
/// joiner, Hangul fillers, variation selectors), which render as nothing.
pub fn is_invisible(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_control();
    }
    matches!(
        c.general_category(),
        GeneralCategory::Control
            | GeneralCategory::Format
            | GeneralCategory::LineSeparator
            | GeneralCategory::ParagraphSeparator
            | GeneralCategory::SpaceSeparator
            | GeneralCategory::PrivateUse
            | GeneralCategory::Unassigned
            | GeneralCategory::Surrogate
    ) || matches!(
        c,
        '\u{34f}'
            | '\u{115f}'
            | '\u{1160}'
            | '\u{17b4}'
            | '\u{17b5}'
            | '\u{180b}'..='\u{180f}'
            | '\u{3164}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{ffa0}'
            | '\u{e0100}'..='\u{e01ef}'
    )
}

/// `3412` → `"3,412"`: a count as people read it, here and in the CLI's tables.
pub fn thousands(count: u64) -> String {
    let digits = count.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(text: &str) -> ShownText {
        show_visibly(text, ShowLimits::WHOLE)
    }

    #[test]
    fn each_line_is_its_own_line_and_a_carriage_return_is_seen() {
        let shown = whole("ls\nrm -rf ~\r\necho done");
        assert_eq!(shown.lines, ["ls", "rm -rf ~⟨CR⟩", "echo done"]);
        assert_eq!((shown.left_out, shown.escaped), (None, 1));
        // A CR that would send the cursor back over a harmless-looking prefix is shown where it is.
        assert_eq!(whole("rm -rf ~ \r echo hi").lines, ["rm -rf ~ ⟨CR⟩ echo hi"]);
        // One trailing newline ends the last line; a second one is an empty line, shown.
        assert_eq!(whole("ls\n").lines, ["ls"]);
        assert_eq!(whole("ls\n\n").lines, ["ls", ""]);
        assert_eq!(whole("").lines, [""]);
    }

    #[test]
    fn bidi_controls_and_zero_width_characters_are_shown_as_code_points() {
        let shown = whole("echo \u{202e}gnp.exe\u{202c} \u{2066}x\u{2069} a\u{200b}b\u{200d}c\u{feff}");
        assert_eq!(shown.lines, ["echo ⟨U+202E⟩gnp.exe⟨U+202C⟩ ⟨U+2066⟩x⟨U+2069⟩ a⟨U+200B⟩b⟨U+200D⟩c⟨U+FEFF⟩"]);
        assert_eq!(shown.escaped, 7);
        // Line and paragraph separators do not break the line a reader sees; they are seen.
        assert_eq!(whole("a\u{2028}b\u{2029}c").lines, ["a⟨U+2028⟩b⟨U+2029⟩c"]);
        // A no-break space makes one word look like two; a Hangul filler and a variation selector render as nothing.
        assert_eq!(whole("rm\u{a0}-rf x\u{3164}\u{fe0f}").lines, ["rm⟨U+00A0⟩-rf x⟨U+3164⟩⟨U+FE0F⟩"]);
        // Tag characters and private-use code points.
        assert_eq!(whole("\u{e0041}\u{e000}").lines, ["⟨U+E0041⟩⟨U+E000⟩"]);
    }

    #[test]
    fn escape_sequences_and_other_controls_are_shown_byte_by_byte_and_nothing_is_removed() {
        let shown = whole("\u{1b}[2J\u{1b}]0;title\u{7}\tx\u{8}\0\u{7f}\u{9b}31m\u{b}\u{c}\u{1}");
        assert_eq!(shown.lines, ["⟨ESC⟩[2J⟨ESC⟩]0;title⟨BEL⟩⟨TAB⟩x⟨BS⟩⟨NUL⟩⟨DEL⟩⟨U+009B⟩31m⟨VT⟩⟨FF⟩⟨U+0001⟩"]);
        assert_eq!(shown.escaped, 11);
        // Ordinary text, accents, scripts and emoji are themselves.
        let plain = "ls -la ~/é 漢字 😀 ⟨already⟩";
        assert_eq!(whole(plain), ShownText { lines: vec![plain.to_owned()], left_out: None, escaped: 0 });
        for line in whole("a\u{1b}\u{202e}\u{9b}\u{2028}\r\tb").lines {
            assert!(!line.chars().any(|c| c.is_control() || super::super::is_format_control(c)), "{line:?}");
        }
    }

    #[test]
    fn long_text_is_cut_at_the_limits_and_says_what_is_left_out() {
        let script: String = (1..=100).map(|n| format!("echo line {n}\n")).collect();
        let shown = show_visibly(&script, ShowLimits { max_lines: 3, max_bytes: 10_000 });
        assert_eq!(shown.lines, ["echo line 1", "echo line 2", "echo line 3"]);
        let left_out = shown.left_out.expect("cut");
        assert_eq!(left_out.lines, 97);
        assert_eq!(left_out.bytes, script.len() - "echo line 1\necho line 2\necho line 3\n".len());
        assert_eq!(left_out.describe(), format!("{} more bytes, 97 more lines", thousands(left_out.bytes as u64)));

        // One long line: cut by bytes, on a character boundary, escapes counted at their shown size.
        let line = format!("{}\u{202e}{}", "é".repeat(10), "x".repeat(5000));
        // 20 bytes of `é`, then 12 of `⟨U+202E⟩`.
        let shown = show_visibly(&line, ShowLimits { max_lines: 10, max_bytes: 32 });
        assert_eq!(shown.lines, [format!("{}⟨U+202E⟩", "é".repeat(10))]);
        assert_eq!(shown.left_out, Some(LeftOut { bytes: 5000, lines: 0 }));
        assert_eq!(shown.left_out.unwrap().describe(), "5,000 more bytes");
        let shown = show_visibly(&line, ShowLimits { max_lines: 10, max_bytes: 31 });
        assert_eq!(shown.lines, ["é".repeat(10)]);
        assert_eq!(shown.left_out, Some(LeftOut { bytes: 5003, lines: 0 }));

        // Exactly at the limits is whole.
        let shown = show_visibly("ab\ncd\n", ShowLimits { max_lines: 2, max_bytes: 4 });
        assert_eq!((shown.lines.len(), shown.left_out), (2, None));
        let shown = show_visibly("ab\ncd\nef", ShowLimits { max_lines: 2, max_bytes: 100 });
        assert_eq!(shown.left_out, Some(LeftOut { bytes: 2, lines: 1 }));
        assert_eq!(shown.left_out.unwrap().describe(), "2 more bytes, 1 more line");
        assert_eq!(LeftOut { bytes: 1, lines: 0 }.describe(), "1 more byte");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
    }

    #[test]
    fn a_table_cell_marks_further_lines_and_shows_controls() {
        assert_eq!(visible_line("run ls\nrm -rf ~", 80), "run ls [+1 line]");
        assert_eq!(visible_line("a\r\nb\nc\n", 80), "a⟨CR⟩ [+2 lines]");
        assert_eq!(visible_line("abcdef", 3), "abc…");
        assert_eq!(visible_line("\u{202e}txt", 80), "⟨U+202E⟩txt");
        assert_eq!(visible_line("ls", 80), "ls");
    }
}
