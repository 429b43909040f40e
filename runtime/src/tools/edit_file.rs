//! `edit_file`: exact string replacement in a text file inside the cwd.
//!
//! An edit names the text it replaces rather than line numbers, so it fails loudly instead of landing in the
//! wrong place when the file changed since the model read it; an ambiguous match is refused unless every
//! occurrence is meant. What the file held is recorded first (`crate::changes`), and the result carries the diff.

use std::io::Read;
use std::path::Path;

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::json;
use troupe_protocol::types::approval::PermissionAction;
use troupe_protocol::types::run::PersistedToolResult;

use super::error::ToolError;
use super::file_tool::{execute_write_here, on_blocking_pool, path_permission};
use super::fs_access::{io_error, open_for_read, resolve_for_execute};
use super::recorded_write::{Target, preview, read_limit, recorded_write};
use super::results::{self, parse_arguments};
use super::{InPlaceTool, PermissionRequest, Tool, ToolContext, ToolDefinition};
use crate::changes::{ChangeRecorder, Prior};
use crate::sandbox::ProtectedPaths;

const NAME: &str = "edit_file";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Arguments {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

pub struct EditFileTool;

impl Tool for EditFileTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: NAME.to_owned(),
            description: "Replace an exact string in a text file. old_string must occur exactly once unless \
                          replace_all is true; include enough surrounding text to make it unique."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, relative to the working directory or absolute."},
                    "old_string": {"type": "string", "description": "The exact text to replace, whitespace included."},
                    "new_string": {"type": "string", "description": "The replacement text."},
                    "replace_all": {"type": "boolean", "description": "Replace every occurrence. Default false."}
                },
                "required": ["path", "old_string", "new_string"],
                "additionalProperties": false
            }),
        }
    }

    fn permission(&self, arguments: &serde_json::Value, cwd: &Path) -> Result<PermissionRequest, ToolError> {
        let arguments: Arguments = parse_arguments(NAME, arguments)?;
        path_permission(cwd, &arguments.path, PermissionAction::Write, |path| format!("edit {path}"))
    }

    fn preview(
        &self,
        arguments: &serde_json::Value,
        cwd: &Path,
        protected: &ProtectedPaths,
    ) -> Option<troupe_protocol::types::changes::FileDiff> {
        let arguments: Arguments = parse_arguments(NAME, arguments).ok()?;
        preview(cwd, &arguments.path, protected, |prior| {
            let text = std::str::from_utf8(prior.content()?).ok()?;
            apply(text, &arguments).ok().map(|(edited, _)| edited.into_bytes())
        })
    }

    fn in_place(&self) -> Option<&dyn InPlaceTool> {
        Some(self)
    }

    fn execute(&self, arguments: serde_json::Value, context: ToolContext) -> BoxFuture<'static, PersistedToolResult> {
        on_blocking_pool(move || work(arguments, context))
    }
}

impl InPlaceTool for EditFileTool {
    fn execute_in_place(&self, arguments: serde_json::Value, context: ToolContext) -> PersistedToolResult {
        work(arguments, context)
    }
}

/// The whole call, on a thread that may block.
fn work(arguments: serde_json::Value, context: ToolContext) -> PersistedToolResult {
    execute_write_here(NAME, arguments, context, "cancelled before editing", edit)
}

/// Refuses strings that make no edit whatever the file holds, before the file is read.
fn check_strings(arguments: &Arguments) -> Result<(), String> {
    if arguments.old_string.is_empty() {
        return Err("old_string is empty; use write_file to create or replace a whole file".to_owned());
    }
    if arguments.old_string == arguments.new_string {
        return Err("old_string and new_string are identical; nothing to change".to_owned());
    }
    Ok(())
}

/// The text after the edit and how many occurrences it replaced, or why the edit cannot be made.
fn apply(text: &str, arguments: &Arguments) -> Result<(String, usize), String> {
    check_strings(arguments)?;
    let matches = text.matches(arguments.old_string.as_str()).count();
    if matches == 0 {
        return Err(format!(
            "old_string was not found in {}; read the file again and copy the text exactly",
            arguments.path
        ));
    }
    if matches > 1 && !arguments.replace_all {
        return Err(format!(
            "old_string occurs {matches} times in {}; add surrounding context to make it unique, or set \
             replace_all to replace all {matches}",
            arguments.path
        ));
    }
    let edited = if arguments.replace_all {
        text.replace(&arguments.old_string, &arguments.new_string)
    } else {
        text.replacen(&arguments.old_string, &arguments.new_string, 1)
    };
    Ok((edited, matches))
}

fn edit(
    cwd: &Path,
    arguments: &Arguments,
    approved: Option<&PermissionRequest>,
    recorder: Option<&ChangeRecorder>,
    protected: &ProtectedPaths,
) -> PersistedToolResult {
    if let Err(refusal) = check_strings(arguments) {
        return results::error(refusal);
    }
    let resolved = match resolve_for_execute(cwd, &arguments.path, approved) {
        Ok(resolved) => resolved,
        Err(refusal) => return refusal,
    };
    let mut file = match open_for_read(&resolved, &arguments.path, protected) {
        Ok(file) => file,
        Err(refusal) => return refusal,
    };
    let mut bytes = Vec::new();
    if let Err(error) = file.read_to_end(&mut bytes) {
        return io_error("read", &arguments.path, &error);
    }
    drop(file);
    // Lossy decoding would silently rewrite every invalid byte, so only valid UTF-8 is edited.
    let Ok(text) = String::from_utf8(bytes) else {
        return results::error(format!("{} is not valid UTF-8; edit_file only edits text files", arguments.path));
    };

    let (edited, matches) = match apply(&text, arguments) {
        Ok(edited) => edited,
        Err(refusal) => return results::error(refusal),
    };
    let size = text.len() as u64;
    let prior = if size > read_limit(recorder) { Prior::TooLarge { size } } else { Prior::Content(text.into_bytes()) };
    let occurrences = if matches == 1 { "1 occurrence".to_owned() } else { format!("{matches} occurrences") };
    let summary = format!("replaced {occurrences} in {}", resolved.display_for_model());
    let target = Target { tool: NAME, resolved: &resolved, requested: &arguments.path, recorder, protected };
    recorded_write(&target, &prior, edited.as_bytes(), summary)
}
