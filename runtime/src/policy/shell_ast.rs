//! Command lines read with a real shell grammar (`brush-parser`), for the hard denies, the classifier and rules.
//!
//! Two views of a parsed line:
//!
//! - [`walk`] finds every simple command anywhere in the line: in lists, pipelines, `!`, `{ }`, subshells, `if`,
//!   `while`, `until`, `for`, `case`, function bodies, coprocesses, `$( )`, backticks and process substitutions
//!   (parsed again, to a depth limit), with each command's words after quote removal. What it cannot parse (the
//!   whole line, a substitution too deep, an arithmetic or parameter expansion that holds a substitution) is
//!   handed back as [`Walked::unparsed`] text, so that a caller that denies can still read it with the word lexer.
//! - [`sole_simple_command`] returns the line's simple command when the line is exactly one simple command and
//!   nothing else, for callers that approve.
//!
//! Nothing is ever expanded or executed. The parser is a third-party crate; a panic inside it is caught and
//! treated as "cannot parse".

use std::panic::{AssertUnwindSafe, catch_unwind};

use brush_parser::ast::{
    AndOr, Command, CommandPrefixOrSuffixItem, CompoundCommand, CompoundList, ExtendedTestExpr, IoFileRedirectKind,
    IoFileRedirectTarget, IoRedirect, Pipeline, SeparatorOperator, SimpleCommand,
};
use brush_parser::word::{WordPiece, WordPieceWithSource};
use brush_parser::{ParserOptions, ast};

/// How deep command substitutions are parsed before the rest is handed back unparsed.
const MAX_SUBSTITUTION_DEPTH: usize = 4;

/// The most nesting marks (`(`, `{`, backticks, compound-command keywords) a line may hold to be parsed. The
/// parser recurses per level and a stack overflow cannot be caught: this keeps it far from the limit of a
/// 2 MiB thread stack (around 400 levels in a debug build).
const MAX_NESTING_MARKS: usize = 100;

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

/// One simple command found by [`walk`].
#[derive(Clone, Debug, Default)]
pub(super) struct CommandView {
    /// The command name and its arguments, without assignments and redirections.
    pub words: Vec<ShellWord>,
    /// Text the command reads as standard input that may be a script: here-document bodies, here-strings, and
    /// the arguments of an `echo` or `printf` piped into it.
    pub stdin_scripts: Vec<String>,
    /// The name of the innermost function whose body holds the command.
    pub enclosing_function: Option<String>,
    /// Whether the command runs in a pipeline of two or more commands or in the background.
    pub in_pipeline_or_background: bool,
}

/// Everything [`walk`] found in a line.
#[derive(Clone, Debug, Default)]
pub(super) struct Walked {
    pub commands: Vec<CommandView>,
    /// The targets of output redirections (`>`, `>>`, `>|`, `<>`, `>&`, `&>`).
    pub output_targets: Vec<ShellWord>,
    /// Text that could not be parsed as shell: read it with the word lexer.
    pub unparsed: Vec<String>,
}

fn parser_options() -> ParserOptions {
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
fn nesting_marks(line: &str) -> usize {
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

fn decode_pieces(raw: &str, pieces: &[WordPieceWithSource], quoted: bool, word: &mut ShellWord) {
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

/// Every simple command, output redirection target and unparsable fragment of `line`.
pub(super) fn walk(line: &str) -> Walked {
    let mut walker = Walker { walked: Walked::default(), function: None };
    walker.script(line, 0);
    walker.walked
}

struct Walker {
    walked: Walked,
    function: Option<String>,
}

impl Walker {
    fn script(&mut self, script: &str, depth: usize) {
        if depth > MAX_SUBSTITUTION_DEPTH {
            self.walked.unparsed.push(script.to_owned());
            return;
        }
        match parse(script) {
            Some(program) => {
                for complete_command in &program.complete_commands {
                    self.compound_list(complete_command, depth);
                }
            }
            None => self.walked.unparsed.push(script.to_owned()),
        }
    }

    fn compound_list(&mut self, list: &CompoundList, depth: usize) {
        for ast::CompoundListItem(and_or, separator) in &list.0 {
            let background = matches!(separator, SeparatorOperator::Async);
            self.pipeline(&and_or.first, background, depth);
            for next in &and_or.additional {
                let (AndOr::And(pipeline) | AndOr::Or(pipeline)) = next;
                self.pipeline(pipeline, background, depth);
            }
        }
    }

    fn pipeline(&mut self, pipeline: &Pipeline, background: bool, depth: usize) {
        let in_pipeline_or_background = background || pipeline.seq.len() > 1;
        let mut piped_text: Option<String> = None;
        for command in &pipeline.seq {
            piped_text = self.command(command, in_pipeline_or_background, piped_text.take(), depth);
        }
    }

    /// Walks one command; returns the text it pipes onward when it is an `echo` or `printf`.
    fn command(
        &mut self,
        command: &Command,
        in_pipeline_or_background: bool,
        piped_in: Option<String>,
        depth: usize,
    ) -> Option<String> {
        match command {
            Command::Simple(simple) => return self.simple(simple, in_pipeline_or_background, piped_in, depth),
            Command::Compound(compound, redirects) => {
                self.compound(compound, depth);
                for redirect in redirects.iter().flat_map(|list| &list.0) {
                    self.redirect(redirect, None, depth);
                }
            }
            Command::Function(definition) => {
                let outer = self.function.replace(decode_word(&definition.fname).text);
                self.compound(&definition.body.0, depth);
                for redirect in definition.body.1.iter().flat_map(|list| &list.0) {
                    self.redirect(redirect, None, depth);
                }
                self.function = outer;
            }
            Command::ExtendedTest(test, redirects) => {
                self.extended_test(&test.expr, depth);
                for redirect in redirects.iter().flat_map(|list| &list.0) {
                    self.redirect(redirect, None, depth);
                }
            }
        }
        None
    }

    fn compound(&mut self, compound: &CompoundCommand, depth: usize) {
        match compound {
            CompoundCommand::Arithmetic(arithmetic) => self.opaque_text(&arithmetic.expr.value),
            CompoundCommand::ArithmeticForClause(clause) => {
                for expr in [&clause.initializer, &clause.condition, &clause.updater].into_iter().flatten() {
                    self.opaque_text(&expr.value);
                }
                self.compound_list(&clause.body.list, depth);
            }
            CompoundCommand::BraceGroup(group) => self.compound_list(&group.list, depth),
            CompoundCommand::Subshell(subshell) => self.compound_list(&subshell.list, depth),
            CompoundCommand::ForClause(clause) => {
                for value in clause.values.iter().flatten() {
                    self.word(value, depth);
                }
                self.compound_list(&clause.body.list, depth);
            }
            CompoundCommand::CaseClause(clause) => {
                self.word(&clause.value, depth);
                for item in &clause.cases {
                    for pattern in &item.patterns {
                        self.word(pattern, depth);
                    }
                    if let Some(list) = &item.cmd {
                        self.compound_list(list, depth);
                    }
                }
            }
            CompoundCommand::IfClause(clause) => {
                self.compound_list(&clause.condition, depth);
                self.compound_list(&clause.then, depth);
                for else_clause in clause.elses.iter().flatten() {
                    if let Some(condition) = &else_clause.condition {
                        self.compound_list(condition, depth);
                    }
                    self.compound_list(&else_clause.body, depth);
                }
            }
            CompoundCommand::WhileClause(clause) | CompoundCommand::UntilClause(clause) => {
                self.compound_list(&clause.0, depth);
                self.compound_list(&clause.1.list, depth);
            }
            CompoundCommand::Coprocess(coprocess) => {
                self.command(&coprocess.body, true, None, depth);
            }
        }
    }

    fn extended_test(&mut self, expr: &ExtendedTestExpr, depth: usize) {
        match expr {
            ExtendedTestExpr::And(left, right) | ExtendedTestExpr::Or(left, right) => {
                self.extended_test(left, depth);
                self.extended_test(right, depth);
            }
            ExtendedTestExpr::Not(inner) | ExtendedTestExpr::Parenthesized(inner) => self.extended_test(inner, depth),
            ExtendedTestExpr::UnaryTest(_, word) => {
                self.word(word, depth);
            }
            ExtendedTestExpr::BinaryTest(_, left, right) => {
                self.word(left, depth);
                self.word(right, depth);
            }
        }
    }

    fn simple(
        &mut self,
        simple: &SimpleCommand,
        in_pipeline_or_background: bool,
        piped_in: Option<String>,
        depth: usize,
    ) -> Option<String> {
        let mut view = CommandView {
            enclosing_function: self.function.clone(),
            in_pipeline_or_background,
            stdin_scripts: piped_in.into_iter().collect(),
            ..CommandView::default()
        };
        let prefix = simple.prefix.iter().flat_map(|prefix| &prefix.0);
        let suffix = simple.suffix.iter().flat_map(|suffix| &suffix.0);
        let mut items: Vec<&CommandPrefixOrSuffixItem> = prefix.collect();
        let name_index = items.len();
        items.extend(suffix);
        if let Some(name) = &simple.word_or_name {
            view.words.push(self.word(name, depth));
        }
        for (index, item) in items.into_iter().enumerate() {
            match item {
                CommandPrefixOrSuffixItem::Word(word) => {
                    let decoded = self.word(word, depth);
                    view.words.push(decoded);
                }
                CommandPrefixOrSuffixItem::AssignmentWord(assignment, word) => {
                    self.assignment(assignment, depth);
                    // A suffix assignment (`export A=b`, `env A=b`) is an argument of the command.
                    if index >= name_index {
                        view.words.push(decode_word(word));
                    }
                }
                CommandPrefixOrSuffixItem::IoRedirect(redirect) => self.redirect(redirect, Some(&mut view), depth),
                CommandPrefixOrSuffixItem::ProcessSubstitution(_, subshell) => {
                    self.compound_list(&subshell.list, depth);
                }
            }
        }
        let piped_out = match view.words.first().map(|word| word.text.as_str()) {
            Some("echo" | "printf") => {
                let arguments: Vec<&str> = view.words.iter().skip(1).map(|word| word.text.as_str()).collect();
                Some(arguments.join(" "))
            }
            _ => None,
        };
        self.walked.commands.push(view);
        piped_out
    }

    fn assignment(&mut self, assignment: &ast::Assignment, depth: usize) {
        match &assignment.value {
            ast::AssignmentValue::Scalar(word) => {
                self.word(word, depth);
            }
            ast::AssignmentValue::Array(elements) => {
                for (key, value) in elements {
                    if let Some(key) = key {
                        self.word(key, depth);
                    }
                    self.word(value, depth);
                }
            }
        }
    }

    fn redirect(&mut self, redirect: &IoRedirect, command: Option<&mut CommandView>, depth: usize) {
        match redirect {
            IoRedirect::File(_, kind, target) => match target {
                IoFileRedirectTarget::Filename(word) | IoFileRedirectTarget::Duplicate(word) => {
                    let decoded = self.word(word, depth);
                    let writes = !matches!(kind, IoFileRedirectKind::Read | IoFileRedirectKind::DuplicateInput);
                    if writes {
                        self.walked.output_targets.push(decoded);
                    }
                }
                IoFileRedirectTarget::Fd(_) => {}
                IoFileRedirectTarget::ProcessSubstitution(_, subshell) => self.compound_list(&subshell.list, depth),
            },
            IoRedirect::HereDocument(_, here_document) => {
                let body = if here_document.requires_expansion {
                    self.heredoc_body(&here_document.doc.value, depth)
                } else {
                    here_document.doc.value.clone()
                };
                if let Some(command) = command {
                    command.stdin_scripts.push(body);
                }
            }
            IoRedirect::HereString(_, word) => {
                let decoded = self.word(word, depth);
                if let Some(command) = command {
                    command.stdin_scripts.push(decoded.text);
                }
            }
            IoRedirect::OutputAndError(word, _) => {
                let decoded = self.word(word, depth);
                self.walked.output_targets.push(decoded);
            }
        }
    }

    /// An expanding here-document body: its substitutions are walked; the text is returned as written.
    fn heredoc_body(&mut self, body: &str, depth: usize) -> String {
        let options = parser_options();
        let shallow = nesting_marks(body) <= MAX_NESTING_MARKS;
        let pieces = shallow
            .then(|| catch_unwind(AssertUnwindSafe(|| brush_parser::word::parse_heredoc(body, &options).ok())).ok())
            .flatten()
            .flatten();
        match pieces {
            Some(pieces) => {
                let mut word = ShellWord::default();
                decode_pieces(body, &pieces, true, &mut word);
                self.substitutions(&word, depth);
            }
            None => self.walked.unparsed.push(body.to_owned()),
        }
        body.to_owned()
    }

    /// Decodes a word and walks the substitutions inside it.
    fn word(&mut self, word: &ast::Word, depth: usize) -> ShellWord {
        let decoded = decode_word(word);
        self.substitutions(&decoded, depth);
        decoded
    }

    fn substitutions(&mut self, word: &ShellWord, depth: usize) {
        for script in &word.substitutions {
            let outer = self.function.clone();
            self.script(script, depth + 1);
            self.function = outer;
        }
        self.walked.unparsed.extend(word.opaque.iter().cloned());
    }

    fn opaque_text(&mut self, text: &str) {
        if text.contains("$(") || text.contains('`') {
            self.walked.unparsed.push(text.to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each simple command's words, joined by single spaces.
    fn programs(line: &str) -> Vec<String> {
        walk(line)
            .commands
            .into_iter()
            .map(|command| command.words.into_iter().map(|word| word.text).collect::<Vec<_>>().join(" "))
            .collect()
    }

    #[test]
    fn simple_commands_are_found_inside_compound_commands_and_substitutions() {
        assert_eq!(programs("{ rm -rf /; }"), ["rm -rf /"]);
        assert_eq!(programs("if true; then rm x; else ls; fi"), ["true", "rm x", "ls"]);
        assert_eq!(programs("! a && (b || c) | d &"), ["a", "b", "c", "d"]);
        assert_eq!(programs("for x in $(ls); do echo \"`id`\"; done"), ["ls", "id", "echo `id`"]);
        assert_eq!(programs("f() { g; }; f; case x in y) h;; esac"), ["g", "f", "h"]);
        assert_eq!(programs("while a; do b; done; until c; do d; done"), ["a", "b", "c", "d"]);
        assert_eq!(programs("A=$(e) cat <(f) > >(g)"), ["e", "f", "g", "cat"]);
    }

    #[test]
    fn words_are_unquoted_and_marked() {
        let walked = walk(r#"echo 'a b' "c $HOME" d\ e ~/x *.rs {a,b} $'\x41'"#);
        let words = &walked.commands[0].words;
        let texts: Vec<&str> = words.iter().map(|word| word.text.as_str()).collect();
        assert_eq!(texts[..4], ["echo", "a b", "c $HOME", "d e"]);
        assert!(!words[1].expands && words[2].expands && !words[3].expands);
        assert!(words[4].expands && words[4].text == "~/x");
        assert!(words[5].unquoted_glob && words[6].unquoted_brace && words[7].expands);
        assert!(!walk("echo '*'").commands[0].words[1].unquoted_glob);
    }

    #[test]
    fn redirections_and_here_documents_are_recorded() {
        let walked = walk("cat x > /dev/sda 2>&1 < in");
        assert_eq!(walked.output_targets.iter().map(|word| word.text.as_str()).collect::<Vec<_>>(), ["/dev/sda", "1"]);
        let walked = walk("sh <<EOF\nrm -rf /\nEOF\n");
        assert_eq!(walked.commands[0].stdin_scripts, ["rm -rf /\n"]);
        assert_eq!(walk("echo 'rm -rf /' | sh").commands[1].stdin_scripts, ["rm -rf /"]);
        assert_eq!(walk("if").unparsed, ["if"]);
    }

    #[test]
    fn deep_nesting_is_survived() {
        for (open, close) in [("(", ")"), ("{ ", "; }"), ("$(", ")"), ("if true; then ", "; fi"), ("\"$(", ")\"")] {
            let line = format!("{}ls{}", open.repeat(3000), close.repeat(3000));
            assert!(parse(&line).is_none());
            let _ = walk(&line);
            let _ = sole_simple_command(&line);
        }
    }

    #[test]
    fn long_lines_are_quick() {
        let line = "ls a b 'c' \"d\" && ".repeat(5000) + "ls";
        let started = std::time::Instant::now();
        assert_eq!(walk(&line).commands.len(), 5001);
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn only_a_lone_simple_command_is_sole() {
        assert!(sole_simple_command("ls -la").is_some());
        assert!(sole_simple_command("ls -la;").is_some());
        for line in ["ls; ls", "ls && ls", "ls | ls", "ls &", "! ls", "time ls", "{ ls; }", "(ls)", "f() { ls; }", ""] {
            assert!(sole_simple_command(line).is_none(), "{line}");
        }
    }
}
