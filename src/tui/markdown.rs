//! The model's markdown as terminal lines, as the console renders it (`web/src/markdown.js`, with `marked`):
//! headings bold, `**strong**` bold, `*emphasis*` italic, `code` and code blocks in their own colour, list items
//! with a bullet or their number, block quotes behind a bar, links with their address, tables one row a line.
//! Raw HTML is shown as the text it is. Every piece of text is cleaned of terminal controls first.

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

use crate::style::clean;

/// `text` (markdown) as lines.
pub fn lines(text: &str) -> Vec<Line<'static>> {
    let mut writer = Writer::default();
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    for event in Parser::new_ext(text, options) {
        writer.event(event);
    }
    writer.finish()
}

/// Lines being written: the current one, the styles in force, the lists open.
#[derive(Default)]
struct Writer {
    lines: Vec<Line<'static>>,
    current: Vec<Span<'static>>,
    styles: Vec<Style>,
    /// Each open list: the next item's number, `None` for a bulleted one.
    lists: Vec<Option<u64>>,
    quote_depth: usize,
    in_code_block: bool,
    /// A link's address, shown after its text.
    link: Option<String>,
}

impl Writer {
    fn style(&self) -> Style {
        self.styles.iter().fold(Style::default(), |style, more| style.patch(*more))
    }

    fn push_text(&mut self, text: &str, style: Style) {
        self.current.push(Span::styled(clean(text), style));
    }

    /// Ends the current line (an empty one too, when `keep_empty`).
    fn break_line(&mut self, keep_empty: bool) {
        if self.current.is_empty() && !keep_empty {
            return;
        }
        let mut spans = Vec::new();
        if self.quote_depth > 0 {
            spans.push(Span::styled("│ ".repeat(self.quote_depth), Style::default().fg(Color::DarkGray)));
        }
        spans.append(&mut self.current);
        self.lines.push(Line::from(spans));
    }

    /// A blank line between blocks, not at the start and never two.
    fn gap(&mut self) {
        self.break_line(false);
        if self.lines.last().is_some_and(|line| !line.spans.is_empty()) && self.lists.is_empty() {
            self.lines.push(Line::default());
        }
    }

    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(text) if self.in_code_block => {
                let style = Style::default().fg(Color::Yellow);
                for (index, line) in text.split('\n').enumerate() {
                    if index > 0 {
                        self.break_line(true);
                    }
                    if !line.is_empty() {
                        self.push_text(&format!("  {line}"), style);
                    }
                }
            }
            Event::Text(text) => {
                let style = self.style();
                self.push_text(&text, style);
            }
            Event::Code(code) => self.push_text(&code, Style::default().fg(Color::Yellow)),
            // Raw HTML is text, as the console shows it.
            Event::Html(html) | Event::InlineHtml(html) => {
                let style = self.style();
                for (index, line) in html.split('\n').enumerate() {
                    if index > 0 {
                        self.break_line(false);
                    }
                    self.push_text(line, style);
                }
            }
            Event::SoftBreak => self.push_text(" ", Style::default()),
            Event::HardBreak => self.break_line(true),
            Event::Rule => {
                self.gap();
                self.lines.push(Line::styled("────────", Style::default().fg(Color::DarkGray)));
            }
            Event::TaskListMarker(done) => self.push_text(if done { "[x] " } else { "[ ] " }, Style::default()),
            Event::InlineMath(math) | Event::DisplayMath(math) => self.push_text(&math, Style::default()),
            Event::FootnoteReference(name) => self.push_text(&format!("[{name}]"), Style::default()),
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Paragraph => {}
            Tag::Heading { level, .. } => {
                self.gap();
                let style = Style::default().add_modifier(Modifier::BOLD);
                let style = if level == HeadingLevel::H1 { style.add_modifier(Modifier::UNDERLINED) } else { style };
                self.styles.push(style);
            }
            Tag::BlockQuote(_) => {
                self.gap();
                self.quote_depth += 1;
            }
            Tag::CodeBlock(kind) => {
                self.gap();
                self.in_code_block = true;
                if let CodeBlockKind::Fenced(language) = kind
                    && !language.is_empty()
                {
                    self.push_text(&format!("  {language}"), Style::default().fg(Color::DarkGray));
                    self.break_line(false);
                }
            }
            Tag::List(first) => {
                if self.lists.is_empty() {
                    self.gap();
                } else {
                    self.break_line(false);
                }
                self.lists.push(first);
            }
            Tag::Item => {
                self.break_line(false);
                let depth = self.lists.len().saturating_sub(1);
                let marker = match self.lists.last_mut() {
                    Some(Some(number)) => {
                        let marker = format!("{number}. ");
                        *number += 1;
                        marker
                    }
                    _ => "• ".to_owned(),
                };
                self.push_text(&format!("{}{marker}", "  ".repeat(depth)), Style::default());
            }
            Tag::Emphasis => self.styles.push(Style::default().add_modifier(Modifier::ITALIC)),
            Tag::Strong => self.styles.push(Style::default().add_modifier(Modifier::BOLD)),
            Tag::Strikethrough => self.styles.push(Style::default().add_modifier(Modifier::CROSSED_OUT)),
            Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. } => {
                self.styles.push(Style::default().fg(Color::Blue).add_modifier(Modifier::UNDERLINED));
                self.link = Some(dest_url.to_string());
            }
            Tag::Table(_) => self.gap(),
            Tag::TableRow | Tag::TableHead => self.break_line(false),
            Tag::TableCell if !self.current.is_empty() => {
                self.push_text(" │ ", Style::default().fg(Color::DarkGray));
            }
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Paragraph => {
                self.break_line(false);
                if self.lists.is_empty() {
                    self.gap();
                }
            }
            TagEnd::Heading(_) => {
                self.styles.pop();
                self.gap();
            }
            TagEnd::BlockQuote(_) => {
                self.break_line(false);
                self.quote_depth = self.quote_depth.saturating_sub(1);
                self.gap();
            }
            TagEnd::CodeBlock => {
                self.break_line(false);
                self.in_code_block = false;
                self.gap();
            }
            TagEnd::List(_) => {
                self.break_line(false);
                self.lists.pop();
                if self.lists.is_empty() {
                    self.gap();
                }
            }
            TagEnd::Item => self.break_line(false),
            TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough => {
                self.styles.pop();
            }
            TagEnd::Link | TagEnd::Image => {
                self.styles.pop();
                if let Some(url) = self.link.take() {
                    self.push_text(&format!(" ({url})"), Style::default().fg(Color::DarkGray));
                }
            }
            TagEnd::TableHead | TagEnd::TableRow => self.break_line(false),
            TagEnd::Table => self.gap(),
            _ => {}
        }
    }

    fn finish(mut self) -> Vec<Line<'static>> {
        self.break_line(false);
        while self.lines.last().is_some_and(|line| line.spans.is_empty()) {
            self.lines.pop();
        }
        self.lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(lines: &[Line<'_>]) -> Vec<String> {
        lines.iter().map(|line| line.spans.iter().map(|span| span.content.as_ref()).collect()).collect()
    }

    #[test]
    fn markdown_is_styled_not_shown_as_markup() {
        let lines = lines(
            "# Plan\n\nSome **bold** and `code`.\n\n- one\n- two\n\n1. first\n2. second\n\n```rust\nfn main() {}\n```\n\n> quoted\n\n[site](https://example.com) <b>raw</b>",
        );
        let shown = text(&lines);
        assert_eq!(
            shown,
            [
                "Plan",
                "",
                "Some bold and code.",
                "",
                "• one",
                "• two",
                "",
                "1. first",
                "2. second",
                "",
                "  rust",
                "  fn main() {}",
                "",
                "│ quoted",
                "",
                "site (https://example.com) <b>raw</b>",
            ],
            "{shown:#?}"
        );
        assert!(lines[0].spans[0].style.add_modifier.contains(Modifier::BOLD));
        let bold = lines[2].spans.iter().find(|span| span.content == "bold").expect("bold");
        assert!(bold.style.add_modifier.contains(Modifier::BOLD));
        let code = lines[2].spans.iter().find(|span| span.content == "code").expect("code");
        assert_eq!(code.style.fg, Some(Color::Yellow));
    }

    #[test]
    fn terminal_controls_in_markdown_are_cleaned() {
        let shown = text(&lines("**a\u{1b}]0;x\u{7}b**"));
        assert!(!shown.concat().contains('\u{1b}'), "{shown:?}");
    }
}
