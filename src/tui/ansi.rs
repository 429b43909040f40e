//! Tool output with its colours kept and nothing else: SGR sequences (`ESC [ … m`) become ratatui styles; every
//! other escape or control sequence (cursor moves, title changes, OSC, …) is dropped, so a tool cannot move the
//! TUI's cursor or rewrite its screen. Unicode format characters (bidi overrides, zero-width ones) are dropped as
//! [`crate::style::clean`] drops them, so a tool cannot reorder or hide what is shown either.

use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use troupe_protocol::diagnostic::is_format_control;

/// Splits `text` into styled lines.
pub fn styled_lines(text: &str) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    let mut spans: Vec<Span<'static>> = Vec::new();
    let mut current = String::new();
    let mut style = Style::default();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' => {
                flush(&mut spans, &mut current, style);
                lines.push(Line::from(std::mem::take(&mut spans)));
            }
            '\t' => current.push_str("    "),
            // ESC [ and its one-character form, the C1 CSI.
            '\u{1b}' if chars.next_if_eq(&'[').is_some() => csi(&mut chars, &mut spans, &mut current, &mut style),
            '\u{9b}' => csi(&mut chars, &mut spans, &mut current, &mut style),
            // OSC and the other string sequences (DCS, SOS, PM, APC): up to BEL or ST. Any other escape is two
            // characters.
            '\u{1b}' => {
                if let Some(']' | 'P' | 'X' | '^' | '_') = chars.next() {
                    while let Some(next) = chars.next() {
                        if next == '\u{7}' || (next == '\u{1b}' && chars.next_if_eq(&'\\').is_some()) {
                            break;
                        }
                    }
                }
            }
            c if c.is_control() || is_format_control(c) => {}
            c => current.push(c),
        }
    }
    flush(&mut spans, &mut current, style);
    if !spans.is_empty() {
        lines.push(Line::from(spans));
    }
    lines
}

/// A control sequence whose introducer was consumed: an SGR one (`… m`) changes the style, any other is dropped.
fn csi(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    spans: &mut Vec<Span<'static>>,
    current: &mut String,
    style: &mut Style,
) {
    let mut params = String::new();
    let mut last = None;
    for next in chars.by_ref() {
        if ('\u{40}'..='\u{7e}').contains(&next) {
            last = Some(next);
            break;
        }
        params.push(next);
    }
    if last == Some('m') {
        flush(spans, current, *style);
        *style = apply_sgr(*style, &params);
    }
}

fn flush(spans: &mut Vec<Span<'static>>, current: &mut String, style: Style) {
    if !current.is_empty() {
        spans.push(Span::styled(std::mem::take(current), style));
    }
}

fn apply_sgr(mut style: Style, params: &str) -> Style {
    let codes: Vec<u16> = params.split(';').map(|code| code.parse().unwrap_or(0)).collect();
    let mut index = 0;
    while index < codes.len() {
        match codes[index] {
            0 => style = Style::default(),
            1 => style = style.add_modifier(Modifier::BOLD),
            2 => style = style.add_modifier(Modifier::DIM),
            3 => style = style.add_modifier(Modifier::ITALIC),
            4 => style = style.add_modifier(Modifier::UNDERLINED),
            7 => style = style.add_modifier(Modifier::REVERSED),
            22 => style = style.remove_modifier(Modifier::BOLD | Modifier::DIM),
            23 => style = style.remove_modifier(Modifier::ITALIC),
            24 => style = style.remove_modifier(Modifier::UNDERLINED),
            27 => style = style.remove_modifier(Modifier::REVERSED),
            code @ 30..=37 => style = style.fg(basic(code - 30, false)),
            code @ 90..=97 => style = style.fg(basic(code - 90, true)),
            code @ 40..=47 => style = style.bg(basic(code - 40, false)),
            code @ 100..=107 => style = style.bg(basic(code - 100, true)),
            39 => style = style.fg(Color::Reset),
            49 => style = style.bg(Color::Reset),
            code @ (38 | 48) => {
                let color = match codes.get(index + 1) {
                    Some(5) => {
                        index += 2;
                        codes.get(index).map(|n| Color::Indexed(*n as u8))
                    }
                    Some(2) => {
                        index += 4;
                        match (codes.get(index - 2), codes.get(index - 1), codes.get(index)) {
                            (Some(r), Some(g), Some(b)) => Some(Color::Rgb(*r as u8, *g as u8, *b as u8)),
                            _ => None,
                        }
                    }
                    _ => None,
                };
                if let Some(color) = color {
                    style = if code == 38 { style.fg(color) } else { style.bg(color) };
                }
            }
            _ => {}
        }
        index += 1;
    }
    style
}

fn basic(index: u16, bright: bool) -> Color {
    match (index, bright) {
        (0, false) => Color::Black,
        (1, false) => Color::Red,
        (2, false) => Color::Green,
        (3, false) => Color::Yellow,
        (4, false) => Color::Blue,
        (5, false) => Color::Magenta,
        (6, false) => Color::Cyan,
        (7, false) => Color::Gray,
        (0, true) => Color::DarkGray,
        (1, true) => Color::LightRed,
        (2, true) => Color::LightGreen,
        (3, true) => Color::LightYellow,
        (4, true) => Color::LightBlue,
        (5, true) => Color::LightMagenta,
        (6, true) => Color::LightCyan,
        _ => Color::White,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_are_kept_and_other_controls_dropped() {
        let lines = styled_lines("\u{1b}[31mred\u{1b}[0m plain\u{1b}[2J\u{1b}]0;title\u{7}\r\nnext");
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].spans[0].content, "red");
        assert_eq!(lines[0].spans[0].style.fg, Some(Color::Red));
        assert_eq!(lines[0].spans[1].content, " plain");
        assert_eq!(lines[0].spans[1].style.fg, None);
        assert_eq!(lines[1].spans[0].content, "next");
    }

    #[test]
    fn string_sequences_c1_csi_and_format_characters_are_dropped() {
        let text = "a\u{1b}Pdcs\u{1b}\\b\u{1b}Xsos\u{7}c\u{9b}2Jd\u{9b}32me\u{202e}f\u{200b}g\u{1b}_apc\u{1b}\\h";
        let lines = styled_lines(text);
        let shown: String = lines.iter().flat_map(|line| line.spans.iter()).map(|span| span.content.as_ref()).collect();
        assert_eq!(shown, "abcdefgh");
        let green = lines[0].spans.iter().find(|span| span.content.starts_with('e')).unwrap();
        assert_eq!(green.style.fg, Some(Color::Green));
        for span in lines.iter().flat_map(|line| line.spans.iter()) {
            assert!(!span.content.chars().any(|c| c.is_control() || is_format_control(c)), "{span:?}");
        }
    }
}
