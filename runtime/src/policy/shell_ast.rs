//! Command lines read with a real shell grammar (`brush-parser`), for the hard denies, the classifier and rules.
//!
//! Two views of a parsed line:
//!
//! - [`super::shell_walk::walk`] finds every simple command anywhere in the line, for callers that deny;
//! - [`sole_simple_command`] returns the line's simple command when the line is exactly one simple command and
//!   nothing else, for callers that approve.
//!
//! This module holds the parser entry and the word decoding both share.
//!
//! Nothing is ever expanded or executed. The parser is a third-party crate; a panic inside it is caught and
//! treated as "cannot parse".

use std::panic::{AssertUnwindSafe, catch_unwind};

use brush_parser::ast::{Command, SeparatorOperator, SimpleCommand};
use brush_parser::word::{WordPiece, WordPieceWithSource};
use brush_parser::{ParserOptions, ast};

/// The most nesting marks (`(`, `{`, backticks, compound-command keywords) a line may hold to be parsed. The
/// parser recurses per level and a stack overflow cannot be caught: this keeps it far from the limit of a
/// 2 MiB thread stack (around 400 levels in a debug build).
pub(super) const MAX_NESTING_MARKS: usize = 100;

/// Keywords that open a nesting level of the grammar.
const NESTING_KEYWORDS: [&str; 11] =
    ["if", "then", "else", "elif", "while", "until", "for", "do", "case", "select", "!"];

/// One word after quote removal, with whatever could make its value differ at run time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct ShellWord {
    /// The word after quote removal. Expansions keep their source text (`$HOME`, `$(id)`, `~`), so that a deny
    /// can still recognise `rm -rf "$HOME"`.
    pub text: String,
    /// The raw source of the word, quotes included.
    pub raw: String,
    /// A parameter, command or arithmetic expansion, a tilde prefix, ANSI-C (`$'…'`) or gettext (`$"…"`)
    /// quoting, or a word the parser rejected: `text` is not what the command will see.
    pub expands: bool,
    /// An unquoted `*`, `?`, `[` or `(` (extended globs): pathname expansion may replace the word.
    pub unquoted_glob: bool,
    /// An unquoted `{` or `}`: brace expansion may replace the word.
    pub unquoted_brace: bool,
    /// The scripts of the command substitutions in the word (`$( )` and backticks).
    pub substitutions: Vec<String>,
    /// Expansions whose inside may hold a substitution the word parser does not expose (`${x:-$(...)}`,
    /// `$(( $(...) ))`): their source text.
    pub opaque: Vec<String>,
}

pub(super) fn parser_options() -> ParserOptions {
    ParserOptions::default()
}

/// Parses `line` as a shell program, or `None` when the parser rejects it (or panics).
pub(super) fn parse(line: &str) -> Option<ast::Program> {
    if nesting_marks(line) > MAX_NESTING_MARKS {
        return None;
    }
    let options = parser_options();
    catch_unwind(AssertUnwindSafe(|| {
        let tokens = brush_parser::uncached_tokenize_str(line, &options.tokenizer_options()).ok()?;
        brush_parser::parse_tokens(&tokens, &options).ok()
    }))
    .ok()
    .flatten()
}

/// An upper bound of how deeply `line` nests, counting quoted text too.
pub(super) fn nesting_marks(line: &str) -> usize {
    let brackets = line.chars().filter(|c| matches!(c, '(' | '{' | '`')).count();
    let keywords = line
        .split(|c: char| c.is_whitespace() || matches!(c, ';' | '&' | '|'))
        .filter(|word| NESTING_KEYWORDS.contains(word))
        .count();
    brackets + keywords
}

/// Reads one word of the AST: quote removal, and marks for everything that may expand.
pub(super) fn decode_word(word: &ast::Word) -> ShellWord {
    decode_raw(&word.value)
}

fn decode_raw(raw: &str) -> ShellWord {
    let options = parser_options();
    let shallow = nesting_marks(raw) <= MAX_NESTING_MARKS;
    let pieces = shallow
        .then(|| catch_unwind(AssertUnwindSafe(|| brush_parser::word::parse(raw, &options).ok())).ok().flatten())
        .flatten();
    let mut word = ShellWord { raw: raw.to_owned(), ..ShellWord::default() };
    match pieces {
        Some(pieces) => decode_pieces(raw, &pieces, false, &mut word),
        None => {
            word.expands = true;
            word.text = brush_parser::unquote_str(raw);
            word.opaque.push(raw.to_owned());
        }
    }
    word
}

pub(super) fn decode_pieces(raw: &str, pieces: &[WordPieceWithSource], quoted: bool, word: &mut ShellWord) {
    for piece in pieces {
        let source = raw.get(piece.start_index..piece.end_index).unwrap_or_default();
        match &piece.piece {
            WordPiece::Text(text) => {
                if !quoted {
                    word.unquoted_glob |= text.contains(['*', '?', '[', '(']);
                    word.unquoted_brace |= text.contains(['{', '}']);
                }
                word.text.push_str(text);
            }
            WordPiece::SingleQuotedText(text) => word.text.push_str(text),
            WordPiece::EscapeSequence(escaped) => word.text.push_str(escaped.strip_prefix('\\').unwrap_or(escaped)),
            WordPiece::DoubleQuotedSequence(inner) => decode_pieces(raw, inner, true, word),
            WordPiece::GettextDoubleQuotedSequence(inner) => {
                word.expands = true;
                decode_pieces(raw, inner, true, word);
            }
            WordPiece::AnsiCQuotedText(text) => {
                word.expands = true;
                word.text.push_str(&decode_ansi_c_best_effort(text));
            }
            WordPiece::CommandSubstitution(script) | WordPiece::BackquotedCommandSubstitution(script) => {
                word.expands = true;
                word.substitutions.push(script.clone());
                word.text.push_str(source);
            }
            WordPiece::TildeExpansion(_) => {
                word.expands = true;
                word.text.push_str(source);
            }
            WordPiece::ParameterExpansion(_) | WordPiece::ArithmeticExpression(_) => {
                word.expands = true;
                if source.contains("$(") || source.contains('`') || source.contains("<(") || source.contains(">(") {
                    word.opaque.push(source.to_owned());
                }
                word.text.push_str(source);
            }
        }
    }
}

/// `$'…'` text with the common escapes decoded, for denies only (approvals refuse ANSI-C quoting outright).
fn decode_ansi_c_best_effort(text: &str) -> String {
    let mut decoded = String::new();
    let mut chars = text.chars();
    while let Some(character) = chars.next() {
        if character != '\\' {
            decoded.push(character);
            continue;
        }
        match chars.next() {
            Some('n') => decoded.push('\n'),
            Some('t') => decoded.push('\t'),
            Some(other) => decoded.push(other),
            None => decoded.push('\\'),
        }
    }
    decoded
}

/// The line's simple command when the whole line is exactly one simple command: no list, `&&`, `||`, pipeline,
/// `!`, `time`, background `&`, compound command or function definition. A trailing `;` is allowed.
pub(super) fn sole_simple_command(line: &str) -> Option<SimpleCommand> {
    let program = parse(line)?;
    let [complete_command] = program.complete_commands.as_slice() else { return None };
    let [ast::CompoundListItem(and_or, SeparatorOperator::Sequence)] = complete_command.0.as_slice() else {
        return None;
    };
    if !and_or.additional.is_empty() || and_or.first.bang || and_or.first.timed.is_some() {
        return None;
    }
    match and_or.first.seq.as_slice() {
        [Command::Simple(simple)] => Some(simple.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_lone_simple_command_is_sole() {
        assert!(sole_simple_command("ls -la").is_some());
        assert!(sole_simple_command("ls -la;").is_some());
        for line in ["ls; ls", "ls && ls", "ls | ls", "ls &", "! ls", "time ls", "{ ls; }", "(ls)", "f() { ls; }", ""] {
            assert!(sole_simple_command(line).is_none(), "{line}");
        }
    }
}
