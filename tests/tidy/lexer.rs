//! A token stream of Rust source that is just precise enough to find module paths: comments (line, block, nested,
//! doc) are dropped and string, byte-string, raw-string and char literals become one opaque token each, so that a
//! `crate::x` written in a comment, a doc link or a string never reads as an import.

/// What the reference finder needs to tell apart; every other character is `Other`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Ident(String),
    /// `::`
    PathSep,
    OpenBrace,
    CloseBrace,
    OpenBracket,
    CloseBracket,
    Comma,
    Semicolon,
    Star,
    Dollar,
    Hash,
    Equals,
    /// A string literal's raw text between its quotes (no unescaping: only `#[path = "…"]` reads it).
    Str(String),
    /// A char or byte literal.
    Char,
    Other(char),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub kind: Kind,
    /// 1-based line of the token's first character.
    pub line: usize,
}

impl Token {
    pub fn is_ident(&self, name: &str) -> bool {
        matches!(&self.kind, Kind::Ident(ident) if ident == name)
    }
}

/// Tokens of `source`. Malformed input (an unterminated literal or comment) ends the stream where it starts.
pub fn tokenize(source: &str) -> Vec<Token> {
    let chars: Vec<char> = source.chars().collect();
    let mut lexer = Lexer { chars: &chars, at: 0, line: 1, tokens: Vec::new() };
    lexer.run();
    lexer.tokens
}

struct Lexer<'a> {
    chars: &'a [char],
    at: usize,
    line: usize,
    tokens: Vec<Token>,
}

impl Lexer<'_> {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.at + ahead).copied()
    }

    /// Moves one character on, counting lines.
    fn bump(&mut self) {
        if self.peek(0) == Some('\n') {
            self.line += 1;
        }
        self.at += 1;
    }

    fn push(&mut self, kind: Kind, line: usize) {
        self.tokens.push(Token { kind, line });
    }

    fn run(&mut self) {
        while let Some(c) = self.peek(0) {
            let line = self.line;
            match c {
                '/' if self.peek(1) == Some('/') => self.skip_line_comment(),
                '/' if self.peek(1) == Some('*') => self.skip_block_comment(),
                '"' => {
                    self.bump();
                    let text = self.quoted('"');
                    self.push(Kind::Str(text), line);
                }
                '\'' => self.char_or_lifetime(),
                ':' if self.peek(1) == Some(':') => {
                    self.at += 2;
                    self.push(Kind::PathSep, line);
                }
                c if c == '_' || c.is_alphabetic() => self.word(),
                c if c.is_ascii_digit() => {
                    while self.peek(0).is_some_and(|c| c == '_' || c.is_alphanumeric()) {
                        self.bump();
                    }
                    self.push(Kind::Other('0'), line);
                }
                c if c.is_whitespace() => self.bump(),
                c => {
                    self.bump();
                    let kind = match c {
                        '{' => Kind::OpenBrace,
                        '}' => Kind::CloseBrace,
                        '[' => Kind::OpenBracket,
                        ']' => Kind::CloseBracket,
                        ',' => Kind::Comma,
                        ';' => Kind::Semicolon,
                        '*' => Kind::Star,
                        '$' => Kind::Dollar,
                        '#' => Kind::Hash,
                        '=' => Kind::Equals,
                        other => Kind::Other(other),
                    };
                    self.push(kind, line);
                }
            }
        }
    }

    fn skip_line_comment(&mut self) {
        while self.peek(0).is_some_and(|c| c != '\n') {
            self.bump();
        }
    }

    /// Block comments nest in Rust: `/* a /* b */ still a comment */`.
    fn skip_block_comment(&mut self) {
        let mut depth = 0usize;
        while let Some(c) = self.peek(0) {
            if c == '/' && self.peek(1) == Some('*') {
                depth += 1;
                self.at += 2;
            } else if c == '*' && self.peek(1) == Some('/') {
                depth -= 1;
                self.at += 2;
                if depth == 0 {
                    return;
                }
            } else {
                self.bump();
            }
        }
    }

    /// The text up to the closing `quote` (escapes honoured), which is consumed; the opening quote already is.
    fn quoted(&mut self, quote: char) -> String {
        let start = self.at;
        while let Some(c) = self.peek(0) {
            if c == '\\' {
                self.bump();
                self.bump();
            } else if c == quote {
                let text = self.chars[start..self.at].iter().collect();
                self.bump();
                return text;
            } else {
                self.bump();
            }
        }
        self.chars[start..].iter().collect()
    }

    /// `r"…"`, `r#"…"#` and so on; `self.at` is on the first `#` or the quote.
    fn raw_string(&mut self, line: usize) {
        let mut hashes = 0;
        while self.peek(0) == Some('#') {
            hashes += 1;
            self.at += 1;
        }
        self.bump(); // the opening quote
        let start = self.at;
        while let Some(c) = self.peek(0) {
            if c == '"' && (1..=hashes).all(|n| self.peek(n) == Some('#')) {
                let text = self.chars[start..self.at].iter().collect();
                self.at += 1 + hashes;
                self.push(Kind::Str(text), line);
                return;
            }
            self.bump();
        }
        self.push(Kind::Str(self.chars[start..].iter().collect()), line);
    }

    /// `'a'`, `'\n'`, `'\u{1F600}'` are chars; `'a` and `'static` are lifetimes (or labels), whose name then
    /// lexes as an identifier, which is harmless: it is never followed by `::`.
    fn char_or_lifetime(&mut self) {
        let line = self.line;
        if self.peek(1) == Some('\\') {
            self.at += 1;
            self.quoted('\'');
            self.push(Kind::Char, line);
        } else if self.peek(2) == Some('\'') {
            self.at += 3;
            self.push(Kind::Char, line);
        } else {
            self.at += 1;
            self.push(Kind::Other('\''), line);
        }
    }

    /// An identifier, keyword or raw identifier, or the prefix of a byte, C or raw string or byte literal.
    fn word(&mut self) {
        let line = self.line;
        let start = self.at;
        while self.peek(0).is_some_and(|c| c == '_' || c.is_alphanumeric()) {
            self.at += 1;
        }
        let word: String = self.chars[start..self.at].iter().collect();
        let next = self.peek(0);
        let raw_string_follows = next == Some('"') || (next == Some('#') && self.raw_hashes_then_quote());
        match word.as_str() {
            "r" | "br" | "cr" if raw_string_follows => self.raw_string(line),
            "b" | "c" if next == Some('"') => {
                self.bump();
                let text = self.quoted('"');
                self.push(Kind::Str(text), line);
            }
            "b" if next == Some('\'') => {
                self.at += 1;
                self.quoted('\'');
                self.push(Kind::Char, line);
            }
            "r" if next == Some('#') && self.peek(1).is_some_and(|c| c == '_' || c.is_alphabetic()) => {
                self.at += 1;
                let start = self.at;
                while self.peek(0).is_some_and(|c| c == '_' || c.is_alphanumeric()) {
                    self.at += 1;
                }
                self.push(Kind::Ident(self.chars[start..self.at].iter().collect()), line);
            }
            _ => self.push(Kind::Ident(word), line),
        }
    }

    fn raw_hashes_then_quote(&self) -> bool {
        let mut ahead = 0;
        while self.peek(ahead) == Some('#') {
            ahead += 1;
        }
        self.peek(ahead) == Some('"')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idents(source: &str) -> Vec<String> {
        tokenize(source)
            .into_iter()
            .filter_map(|token| match token.kind {
                Kind::Ident(name) => Some(name),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn comments_and_literals_hide_their_words() {
        let source = r####"
            // crate::line
            /// crate::doc [`X`](crate::link)
            //! crate::inner
            /* crate::block /* crate::nested */ crate::still_block */
            let a = "crate::string \" crate::escaped";
            let b = r#"crate::raw " crate::raw_quote"#;
            let c = b"crate::bytes";
            let d = br##"crate::raw_bytes"##;
            let e = '"'; let f = '\''; let g = b'"';
            fn h<'a>(x: &'a str) -> &'static str { keep }
        "####;
        assert_eq!(
            idents(source),
            [
                "let", "a", "let", "b", "let", "c", "let", "d", "let", "e", "let", "f", "let", "g", "fn", "h", "a",
                "x", "a", "str", "static", "str", "keep"
            ]
        );
    }

    #[test]
    fn lines_are_counted_through_multiline_comments_and_strings() {
        let tokens = tokenize("/* one\ntwo */ a\n\"x\ny\" b\nr#\"\n\"# c");
        let lines: Vec<(String, usize)> = tokens
            .into_iter()
            .filter_map(|token| match token.kind {
                Kind::Ident(name) => Some((name, token.line)),
                _ => None,
            })
            .collect();
        assert_eq!(lines, [("a".to_owned(), 2), ("b".to_owned(), 4), ("c".to_owned(), 6)]);
    }

    #[test]
    fn path_separators_and_raw_identifiers() {
        let kinds: Vec<Kind> = tokenize("crate::r#type::{a, *};").into_iter().map(|token| token.kind).collect();
        assert_eq!(
            kinds,
            [
                Kind::Ident("crate".into()),
                Kind::PathSep,
                Kind::Ident("type".into()),
                Kind::PathSep,
                Kind::OpenBrace,
                Kind::Ident("a".into()),
                Kind::Comma,
                Kind::Star,
                Kind::CloseBrace,
                Kind::Semicolon,
            ]
        );
    }
}
