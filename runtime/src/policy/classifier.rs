//! The built-in classifier of the `auto_approve` modes: which operations are low risk enough to run unasked.
//!
//! The module docs of [`super`] list exactly what it approves. It judges the text of the call, and asks the
//! caller's resolver ([`ClassifierContext::resolve`]) where each path really leads; it never touches the file
//! system itself, and it errs towards "not low risk" whenever the text leaves room for doubt. Shell commands are
//! read with a shell grammar ([`super::shell_ast`]), options are normalised by each program's rules
//! ([`super::command_options`]) and checked against an allowlist ([`super::command_allowlist`]), and every path
//! must stay inside the cwd both by its text and physically ([`super::cwd_paths`]).

use std::fmt;
use std::path::{Path, PathBuf};

use brush_parser::ast::CommandPrefixOrSuffixItem;
use serde_json::Value;
use troupe_protocol::types::approval::PermissionAction;

use super::SHELL_TOOL;
use super::command_allowlist::is_read_only;
use super::command_options::Argument;
use super::cwd_paths::resolved_path_is_safe;
use super::shell_ast::{ShellWord, decode_word, sole_simple_command};
use crate::tools::PermissionRequest;

/// What the classifier knows besides the call: where it runs, what it must never touch, and how to learn where a
/// path really leads.
#[derive(Clone, Copy)]
pub struct ClassifierContext<'a> {
    /// The session's canonical working directory.
    pub cwd: &'a Path,
    /// Canonical absolute paths no tool may read: the daemon's data dir and the sandbox's deny list.
    pub denied: &'a [PathBuf],
    /// The physical path of an absolute path, existing or not yet existing: every symlink followed (`..` after a
    /// symlink included) as the kernel would. `None` when it cannot be resolved, which makes the call not low
    /// risk. The caller supplies it (it does blocking I/O); the classifier does no file-system access itself.
    pub resolve: &'a dyn Fn(&Path) -> Option<PathBuf>,
}

impl fmt::Debug for ClassifierContext<'_> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("ClassifierContext")
            .field("cwd", &self.cwd)
            .field("denied", &self.denied)
            .finish_non_exhaustive()
    }
}

/// True for operations the `auto_approve` classifier approves without asking: reads by file tools inside the
/// cwd that touch no denied path, and shell commands that are one allowlisted read-only simple command whose
/// paths stay inside the cwd, by their text and physically (see the module docs of [`super`]). Writes are never
/// low risk. It may call `context.resolve` once per path argument, so callers with a blocking resolver run it on
/// a blocking thread.
pub fn is_low_risk(
    tool: &str,
    request: &PermissionRequest,
    arguments: &Value,
    context: &ClassifierContext<'_>,
) -> bool {
    match request.action {
        // Writes change things; a request to another machine may carry anything it was told to.
        PermissionAction::Write | PermissionAction::Network => false,
        PermissionAction::Read => {
            request.inside_cwd && tool != SHELL_TOOL && resolved_path_is_safe(Path::new(&request.resource), context)
        }
        PermissionAction::Execute => {
            // The command judged must be the command that runs; a request that disagrees with its own arguments
            // is not something to approve unasked.
            let command_argument = arguments.get("command").and_then(Value::as_str);
            tool == SHELL_TOOL
                && command_argument.is_none_or(|command| command == request.resource)
                && is_read_only_command(&request.resource, context)
        }
    }
}

/// A single simple command from the read-only allowlist whose words are all known now and whose paths stay
/// inside the cwd.
fn is_read_only_command(line: &str, context: &ClassifierContext<'_>) -> bool {
    let Some(command) = sole_simple_command(line) else { return false };
    // No assignments (`A=b ls`) and no redirections before the name.
    if command.prefix.is_some() {
        return false;
    }
    let Some(name) = command.word_or_name.as_ref().map(decode_word) else { return false };
    let mut words = vec![name];
    for item in command.suffix.iter().flat_map(|suffix| &suffix.0) {
        match item {
            CommandPrefixOrSuffixItem::Word(word) => words.push(decode_word(word)),
            // Redirections (`>`, `>|`, `<`, `<<`, `<<<`), assignments and process substitutions.
            _ => return false,
        }
    }
    if !words.iter().all(is_known_now) || has_comment(line, &words) {
        return false;
    }
    let Some((program, arguments)) = words.split_first() else { return false };
    if program.unquoted_glob {
        return false;
    }
    let arguments: Vec<Argument> =
        arguments.iter().map(|word| Argument { text: word.text.clone(), glob: word.unquoted_glob }).collect();
    is_read_only(&program.text, &arguments, context)
}

/// A word whose value is its text: no expansion, substitution, ANSI-C quoting, brace expansion or tilde.
fn is_known_now(word: &ShellWord) -> bool {
    !word.expands && !word.unquoted_brace && word.substitutions.is_empty() && word.opaque.is_empty()
}

/// Whether `line` holds a `#` comment, which the grammar drops: `#` in the line but not in any word.
fn has_comment(line: &str, words: &[ShellWord]) -> bool {
    let in_words: usize = words.iter().map(|word| word.raw.matches('#').count()).sum();
    line.matches('#').count() > in_words
}
