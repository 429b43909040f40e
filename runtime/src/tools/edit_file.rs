//! `edit_file`: exact string replacement in a text file inside the cwd.
//!
//! An edit names the text it replaces rather than line numbers, so it fails loudly instead of landing in the
//! wrong place when the file changed since the model read it; an ambiguous match is refused unless every
//! occurrence is meant.

use std::io::Read;
use std::path::Path;

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::json;
use troupe_protocol::types::approval::PermissionAction;
use troupe_protocol::types::run::PersistedToolResult;

use super::error::ToolError;
use super::file_tool::{execute_blocking, path_permission};
use super::fs_access::{self, io_error, open_for_read, resolve_for_execute};
use super::results::{self, parse_arguments};
use super::{PermissionRequest, Tool, ToolContext, ToolDefinition};
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

    fn execute(&self, arguments: serde_json::Value, context: ToolContext) -> BoxFuture<'static, PersistedToolResult> {
        execute_blocking(NAME, arguments, context, Some("cancelled before editing"), |arguments: Arguments, context| {
            if let Some(refusal) = context.sandbox.file_write_refusal() {
                return super::results::denied(refusal);
            }
            edit(&context.cwd, &arguments, context.approved_request.as_ref(), context.sandbox.protected())
        })
    }
}

fn edit(
    cwd: &Path,
    arguments: &Arguments,
    approved: Option<&PermissionRequest>,
    protected: &ProtectedPaths,
) -> PersistedToolResult {
    if arguments.old_string.is_empty() {
        return results::error("old_string is empty; use write_file to create or replace a whole file");
    }
    if arguments.old_string == arguments.new_string {
        return results::error("old_string and new_string are identical; nothing to change");
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

    let matches = text.matches(arguments.old_string.as_str()).count();
    if matches == 0 {
        return results::error(format!(
            "old_string was not found in {}; read the file again and copy the text exactly",
            arguments.path
        ));
    }
    if matches > 1 && !arguments.replace_all {
        return results::error(format!(
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
    if let Err(failure) = fs_access::write_file(&resolved, &arguments.path, edited.as_bytes(), protected) {
        return failure;
    }
    let occurrences = if matches == 1 { "1 occurrence".to_owned() } else { format!("{matches} occurrences") };
    results::ok(format!("replaced {occurrences} in {}", resolved.display_for_model()))
}
