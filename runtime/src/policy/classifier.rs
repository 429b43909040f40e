//! The built-in classifier of the `auto_approve` modes: which operations are low risk enough to run unasked.
//!
//! The module docs of [`super`] list exactly what it approves. It judges the text of the call only: it does not
//! look at the file system, so it errs towards "not low risk" whenever the text leaves room for doubt.

use serde_json::Value;
use troupe_protocol::types::approval::PermissionAction;

use super::SHELL_TOOL;
use super::shell_words::{Word, lex};
use crate::tools::PermissionRequest;

/// Programs that only read, run with no options that would make them write or run something else.
const READ_ONLY_PROGRAMS: [&str; 17] = [
    "ls", "pwd", "cat", "head", "tail", "wc", "grep", "rg", "find", "git", "echo", "which", "stat", "file", "du", "df",
    "tree",
];

/// `git` subcommands that only read.
const READ_ONLY_GIT_SUBCOMMANDS: [&str; 4] = ["status", "diff", "log", "show"];

/// `find` primaries that delete, run programs or write files.
const FIND_FORBIDDEN: [&str; 9] =
    ["-exec", "-execdir", "-ok", "-okdir", "-delete", "-fls", "-fprint", "-fprint0", "-fprintf"];

/// True for operations the `auto_approve` classifier approves without asking.
pub fn is_low_risk(tool: &str, request: &PermissionRequest, arguments: &Value) -> bool {
    match request.action {
        PermissionAction::Write => false,
        PermissionAction::Read => request.inside_cwd && tool != SHELL_TOOL,
        PermissionAction::Execute => {
            // The command judged must be the command that runs; a request that disagrees with its own arguments
            // is not something to approve unasked.
            let command_argument = arguments.get("command").and_then(Value::as_str);
            tool == SHELL_TOOL
                && command_argument.is_none_or(|command| command == request.resource)
                && is_read_only_command(&request.resource)
        }
    }
}

/// A single simple command from the read-only allowlist whose words cannot reach outside the cwd.
fn is_read_only_command(command: &str) -> bool {
    let lexed = lex(command);
    if !lexed.complete || lexed.has_comment || lexed.has_operators() {
        return false;
    }
    let words: Vec<&Word> = lexed.words().collect();
    let Some((program, arguments)) = words.split_first() else { return false };
    if !words.iter().all(|word| stays_inside_cwd(word)) {
        return false;
    }
    let has = |predicate: &dyn Fn(&str) -> bool| arguments.iter().any(|argument| predicate(&argument.text));
    match program.text.as_str() {
        name if !READ_ONLY_PROGRAMS.contains(&name) => false,
        "find" => !has(&|argument| FIND_FORBIDDEN.contains(&argument)),
        // `--pre` runs a preprocessor program on every file.
        "rg" => !has(&|argument| argument.starts_with("--pre")),
        "git" => {
            arguments.first().is_some_and(|subcommand| READ_ONLY_GIT_SUBCOMMANDS.contains(&subcommand.text.as_str()))
                && !has(&|argument| argument.starts_with("--output") || argument == "--ext-diff")
        }
        // `-C`/`--compile` writes a compiled magic file.
        "file" => !has(&|argument| argument.starts_with("-C") || argument == "--compile"),
        // `-o` writes the listing to a file; `-R` with `-H` writes HTML files into every directory.
        "tree" => {
            !has(&|argument| argument.starts_with("-o") || argument.starts_with("-R") || argument.starts_with("-H"))
        }
        _ => true,
    }
}

/// Whether a word's value is known now and names nothing outside the cwd: no expansion (`$`, backticks, braces,
/// a leading `~`), no `..` anywhere, no absolute path (as the word, after `=`, or inside an option), and no glob
/// that could match a dot entry such as `..`.
fn stays_inside_cwd(word: &Word) -> bool {
    let text = word.text.as_str();
    let glob_may_match_dot_entries = word.unquoted_glob
        && text.split('/').any(|component| component.starts_with(['.', '[']) || component.contains('['));
    !word.expands
        && !word.unquoted_brace
        && !word.leading_tilde
        && !glob_may_match_dot_entries
        && !text.contains("..")
        && !text.starts_with('/')
        && !text.contains("=/")
        && !text.contains("=~")
        && !(text.starts_with('-') && text.contains('/'))
}
