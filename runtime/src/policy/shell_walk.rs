//! Every simple command of a command line, for the hard denies and rules: [`walk`] finds them in lists,
//! pipelines, `!`, `{ }`, subshells, `if`, `while`, `until`, `for`, `case`, function bodies, coprocesses, `$( )`,
//! backticks and process substitutions (parsed again, to a depth limit), with each command's words after quote
//! removal. What it cannot parse (the whole line, a substitution too deep, an arithmetic or parameter expansion
//! that holds a substitution) is handed back as [`Walked::unparsed`] text, so that a caller that denies can still
//! read it with the word lexer. It also notes what a fork bomb needs: which function each command is in, whether
//! it runs in a forked process, and loops that never end and start background jobs.

use std::panic::{AssertUnwindSafe, catch_unwind};

use brush_parser::ast::{
    self, AndOr, Command, CommandPrefixOrSuffixItem, CompoundCommand, CompoundList, ExtendedTestExpr,
    IoFileRedirectKind, IoFileRedirectTarget, IoRedirect, Pipeline, SeparatorOperator, SimpleCommand,
};

use super::shell_ast::{
    MAX_NESTING_MARKS, ShellWord, decode_pieces, decode_word, nesting_marks, parse, parser_options,
};

/// How deep command substitutions are parsed before the rest is handed back unparsed.
const MAX_SUBSTITUTION_DEPTH: usize = 4;

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
    /// Whether the command runs in a forked process: in a pipeline of two or more commands, in the background,
    /// or inside a compound command that does (`{ f; } &`).
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
    /// Loops that never end (`while :`, `while true`, `until false`, `for ((;;))`) whose body starts a
    /// background job without waiting for it.
    pub forking_loops: usize,
}

/// Every simple command, output redirection target and unparsable fragment of `line`.
pub(super) fn walk(line: &str) -> Walked {
    let mut walker = Walker { walked: Walked::default(), function: None, forked: false, background_jobs: 0 };
    walker.script(line, 0);
    walker.walked
}

struct Walker {
    walked: Walked,
    function: Option<String>,
    /// Inside a compound command that runs in the background or in a pipeline (a forked subshell).
    forked: bool,
    /// How many lists have been started with `&` so far.
    background_jobs: usize,
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
            self.background_jobs += usize::from(background);
            self.pipeline(&and_or.first, background, depth);
            for next in &and_or.additional {
                let (AndOr::And(pipeline) | AndOr::Or(pipeline)) = next;
                self.pipeline(pipeline, background, depth);
            }
        }
    }

    fn pipeline(&mut self, pipeline: &Pipeline, background: bool, depth: usize) {
        let in_pipeline_or_background = background || pipeline.seq.len() > 1 || self.forked;
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
                let outer = self.forked;
                self.forked |= in_pipeline_or_background;
                self.compound(compound, depth);
                self.forked = outer;
                for redirect in redirects.iter().flat_map(|list| &list.0) {
                    self.redirect(redirect, None, depth);
                }
            }
            Command::Function(definition) => {
                // The body runs where the function is called, not where it is defined.
                let outer = self.function.replace(decode_word(&definition.fname).text);
                let outer_forked = std::mem::replace(&mut self.forked, false);
                self.compound(&definition.body.0, depth);
                for redirect in definition.body.1.iter().flat_map(|list| &list.0) {
                    self.redirect(redirect, None, depth);
                }
                self.function = outer;
                self.forked = outer_forked;
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
                let unbounded = clause
                    .condition
                    .as_ref()
                    .is_none_or(|condition| condition.value.trim().is_empty() || is_nonzero_literal(&condition.value));
                self.loop_body(unbounded, |walker| walker.compound_list(&clause.body.list, depth));
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
                let until = matches!(compound, CompoundCommand::UntilClause(_));
                let unbounded = condition_is_constant(&clause.0, !until);
                self.loop_body(unbounded, |walker| {
                    walker.compound_list(&clause.0, depth);
                    walker.compound_list(&clause.1.list, depth);
                });
            }
            CompoundCommand::Coprocess(coprocess) => {
                self.command(&coprocess.body, true, None, depth);
            }
        }
    }

    /// Walks a loop's body; an `unbounded` loop whose body starts a background job and never `wait`s is counted
    /// in [`Walked::forking_loops`].
    fn loop_body(&mut self, unbounded: bool, walk_body: impl FnOnce(&mut Walker)) {
        let jobs_before = self.background_jobs;
        let commands_before = self.walked.commands.len();
        walk_body(self);
        let started_jobs = self.background_jobs > jobs_before;
        let waits = self
            .walked
            .commands
            .get(commands_before..)
            .unwrap_or_default()
            .iter()
            .any(|command| command.words.first().is_some_and(|word| word.text == "wait"));
        if unbounded && started_jobs && !waits {
            self.walked.forking_loops += 1;
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

/// Whether a loop condition always has the same outcome: its last command is `:` or `true` (`succeeds`) or
/// `false` (not `succeeds`), possibly negated with `!`, or an arithmetic command with a literal.
fn condition_is_constant(condition: &CompoundList, succeeds: bool) -> bool {
    let Some(ast::CompoundListItem(and_or, _)) = condition.0.last() else { return false };
    if !and_or.additional.is_empty() {
        return false;
    }
    let succeeds = succeeds != and_or.first.bang;
    match and_or.first.seq.as_slice() {
        [Command::Simple(simple)] => {
            let name = simple.word_or_name.as_ref().map(|word| decode_word(word).text);
            let program = name.as_deref().map(|name| name.rsplit('/').next().unwrap_or_default());
            if succeeds { matches!(program, Some(":" | "true")) } else { program == Some("false") }
        }
        [Command::Compound(CompoundCommand::Arithmetic(arithmetic), _)] => {
            let value = arithmetic.expr.value.trim();
            if succeeds { is_nonzero_literal(value) } else { value == "0" }
        }
        _ => false,
    }
}

/// `1`, `42`: an arithmetic expression that is a nonzero integer literal.
fn is_nonzero_literal(value: &str) -> bool {
    let value = value.trim();
    !value.is_empty() && value.chars().all(|c| c.is_ascii_digit()) && value.chars().any(|c| c != '0')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::shell_ast::sole_simple_command;

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
    fn forks_and_endless_forking_loops_are_noted() {
        let walked = walk("f() { { f; } & }; f");
        assert!(walked.commands.iter().any(|c| c.words[0].text == "f" && c.in_pipeline_or_background));
        for line in [
            "while :; do sleep 9 & done",
            "while true; do x & done",
            "until false; do x & done",
            "while ! false; do { x; } & done",
            "while ((1)); do x & done",
        ] {
            assert_eq!(walk(line).forking_loops, 1, "{line}");
        }
        for line in [
            "while read l; do echo $l; done < f",
            "while :; do x; done",
            "while :; do x & wait; done",
            "while test -f x; do y & done",
            "for ((i=0; i<3; i++)); do x & done",
        ] {
            assert_eq!(walk(line).forking_loops, 0, "{line}");
        }
    }
}
