//! A small, conservative reader of `/bin/sh` command lines, for the hard denies, the classifier and command rules.
//!
//! It is not a shell parser. It splits a line into words and operators the way `sh` would for the cases that
//! matter here (quotes, backslashes, `;`, `&&`, `||`, `|`, `&`, redirections, parentheses, comments) and records,
//! per word, whatever could make its meaning depend on run-time state: expansions (`$`, backticks), unquoted
//! globs, braces and a leading `~`. Callers that approve something treat any such mark as "cannot tell" and refuse;
//! callers that deny something look only at the literal text. Nothing is ever expanded or executed.

/// One word after quote removal. `text` keeps `$NAME` and backticks literally, because nothing is expanded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Word {
    pub text: String,
    /// `$` or a backtick outside single quotes: the word's value is only known at run time.
    pub expands: bool,
    /// `*`, `?` or `[` outside quotes: pathname expansion may replace the word.
    pub unquoted_glob: bool,
    /// `{` or `}` outside quotes: brace expansion (bash) may replace the word.
    pub unquoted_brace: bool,
    /// An unquoted `~` at the start: tilde expansion to a home directory.
    pub leading_tilde: bool,
}

/// The control and redirection operators, which end a word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Operator {
    /// `;` or a newline.
    Sequence,
    And,
    Or,
    Pipe,
    Background,
    /// `>`, `>>`, `>|`, `&>`, `>&`: the next word is where output goes.
    RedirectOut,
    /// `<`, `<<`, `<<<`, `<&`.
    RedirectIn,
    OpenParen,
    CloseParen,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Token {
    Word(Word),
    Operator(Operator),
}

/// A command line read into tokens.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Lexed {
    pub tokens: Vec<Token>,
    /// False when a quote was left open or the line ends in a lone backslash: `sh` would reject the line, and
    /// nothing about it is judged safe.
    pub complete: bool,
    /// An unquoted `#` started a comment somewhere.
    pub has_comment: bool,
}

impl Lexed {
    pub fn has_operators(&self) -> bool {
        self.tokens.iter().any(|token| matches!(token, Token::Operator(_)))
    }

    pub fn words(&self) -> impl Iterator<Item = &Word> {
        self.tokens.iter().filter_map(|token| match token {
            Token::Word(word) => Some(word),
            Token::Operator(_) => None,
        })
    }

    /// The simple commands of the line: the words between control operators, without redirections and their
    /// targets.
    pub fn simple_commands(&self) -> Vec<Vec<&Word>> {
        let mut commands = vec![Vec::new()];
        let mut skip_next_word = false;
        for token in &self.tokens {
            match token {
                Token::Word(_) if skip_next_word => skip_next_word = false,
                Token::Word(word) => {
                    if let Some(command) = commands.last_mut() {
                        command.push(word);
                    }
                }
                Token::Operator(Operator::RedirectOut | Operator::RedirectIn) => skip_next_word = true,
                Token::Operator(_) => {
                    skip_next_word = false;
                    commands.push(Vec::new());
                }
            }
        }
        commands.retain(|command| !command.is_empty());
        commands
    }

    /// The words right after an output redirection: the files or devices the line writes to.
    pub fn redirect_targets(&self) -> impl Iterator<Item = &Word> {
        self.tokens.windows(2).filter_map(|pair| match pair {
            [Token::Operator(Operator::RedirectOut), Token::Word(word)] => Some(word),
            _ => None,
        })
    }
}

/// Reads `line` into words and operators.
pub(super) fn lex(line: &str) -> Lexed {
    let mut lexed = Lexed { complete: true, ..Lexed::default() };
    let mut chars = line.chars().peekable();
    let mut word: Option<Word> = None;

    fn finish(word: &mut Option<Word>, tokens: &mut Vec<Token>) {
        if let Some(word) = word.take() {
            tokens.push(Token::Word(word));
        }
    }

    while let Some(character) = chars.next() {
        match character {
            ' ' | '\t' => finish(&mut word, &mut lexed.tokens),
            '\n' | ';' => {
                finish(&mut word, &mut lexed.tokens);
                lexed.tokens.push(Token::Operator(Operator::Sequence));
            }
            '#' if word.is_none() => {
                lexed.has_comment = true;
                while chars.next_if(|next| *next != '\n').is_some() {}
            }
            '&' | '|' | '<' | '>' | '(' | ')' => {
                finish(&mut word, &mut lexed.tokens);
                let operator = match character {
                    '&' if chars.next_if_eq(&'&').is_some() => Operator::And,
                    '&' if chars.next_if_eq(&'>').is_some() => {
                        chars.next_if_eq(&'>');
                        Operator::RedirectOut
                    }
                    '&' => Operator::Background,
                    '|' if chars.next_if_eq(&'|').is_some() => Operator::Or,
                    '|' => Operator::Pipe,
                    '>' => {
                        let _ = chars.next_if(|next| matches!(next, '>' | '|' | '&'));
                        Operator::RedirectOut
                    }
                    '<' => {
                        while chars.next_if(|next| matches!(next, '<' | '&')).is_some() {}
                        Operator::RedirectIn
                    }
                    '(' => Operator::OpenParen,
                    _ => Operator::CloseParen,
                };
                lexed.tokens.push(Token::Operator(operator));
            }
            '\'' => {
                let current = word.get_or_insert_with(Word::default);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(quoted) => current.text.push(quoted),
                        None => {
                            lexed.complete = false;
                            break;
                        }
                    }
                }
            }
            '"' => {
                let current = word.get_or_insert_with(Word::default);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some('\n') => {}
                            Some(escaped @ ('$' | '`' | '"' | '\\')) => current.text.push(escaped),
                            Some(other) => {
                                current.text.push('\\');
                                current.text.push(other);
                            }
                            None => {
                                lexed.complete = false;
                                break;
                            }
                        },
                        Some(quoted) => {
                            if matches!(quoted, '$' | '`') {
                                current.expands = true;
                            }
                            current.text.push(quoted);
                        }
                        None => {
                            lexed.complete = false;
                            break;
                        }
                    }
                }
            }
            '\\' => match chars.next() {
                // A backslash-newline joins lines and leaves nothing behind.
                Some('\n') => {}
                Some(escaped) => word.get_or_insert_with(Word::default).text.push(escaped),
                None => lexed.complete = false,
            },
            other => {
                let starts_word = word.is_none();
                let current = word.get_or_insert_with(Word::default);
                match other {
                    '$' | '`' => current.expands = true,
                    '*' | '?' | '[' => current.unquoted_glob = true,
                    '{' | '}' => current.unquoted_brace = true,
                    '~' if starts_word => current.leading_tilde = true,
                    _ => {}
                }
                current.text.push(other);
            }
        }
    }
    finish(&mut word, &mut lexed.tokens);
    lexed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(line: &str) -> Vec<Vec<String>> {
        lex(line)
            .simple_commands()
            .into_iter()
            .map(|command| command.into_iter().map(|word| word.text.clone()).collect())
            .collect()
    }

    #[test]
    fn quotes_and_escapes_are_removed_and_operators_split_commands() {
        assert_eq!(texts(r#"grep -r 'a b' "c d" e\ f"#), [["grep", "-r", "a b", "c d", "e f"]]);
        assert_eq!(texts("a && b || c | d & e; f\ng"), [["a"], ["b"], ["c"], ["d"], ["e"], ["f"], ["g"]]);
        assert_eq!(texts("cat x > out 2>&1 < in"), [["cat", "x", "2"]]);
    }

    #[test]
    fn marks_record_what_may_expand() {
        let lexed = lex(r#"echo $HOME "$(id)" '$x' *.rs {a,b} ~/x"#);
        let words: Vec<&Word> = lexed.words().collect();
        assert!(!words[0].expands);
        assert!(words[1].expands && words[2].expands);
        assert!(!words[3].expands, "single quotes do not expand");
        assert!(words[4].unquoted_glob);
        assert!(words[5].unquoted_brace);
        assert!(words[6].leading_tilde);
        assert!(!lex("echo '*'").words().any(|word| word.unquoted_glob));
    }

    #[test]
    fn open_quotes_and_comments_are_reported() {
        assert!(!lex("echo 'open").complete);
        assert!(!lex("echo \"open").complete);
        assert!(lex("ls # rm -rf /").has_comment);
        assert!(!lex("echo a#b").has_comment);
        assert_eq!(
            lex("echo hi > /dev/sda").redirect_targets().map(|w| w.text.as_str()).collect::<Vec<_>>(),
            ["/dev/sda"]
        );
    }
}
