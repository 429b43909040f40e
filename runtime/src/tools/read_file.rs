//! `read_file`: the text of a file inside the cwd, optionally a window of its lines.

use std::io::{BufRead, BufReader};
use std::path::Path;

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::json;
use troupe_protocol::types::approval::PermissionAction;
use troupe_protocol::types::run::PersistedToolResult;

use super::error::ToolError;
use super::file_tool::{execute_blocking, path_permission};
use super::fs_access::{io_error, open_for_read, resolve_for_execute};
use super::results::{self, parse_arguments};
use super::{PermissionRequest, Tool, ToolContext, ToolDefinition};
use crate::sandbox::ProtectedPaths;

const NAME: &str = "read_file";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Arguments {
    path: String,
    /// 1-based line to start at.
    #[serde(default)]
    offset_line: Option<u64>,
    #[serde(default)]
    limit_lines: Option<u64>,
}

pub struct ReadFileTool;

impl Tool for ReadFileTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: NAME.to_owned(),
            description: "Read a text file. Returns its contents (invalid UTF-8 replaced), capped in size with a \
                          note saying where to continue. Use offset_line and limit_lines to read part of a \
                          large file."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, relative to the working directory or absolute."},
                    "offset_line": {"type": "integer", "minimum": 1, "description": "First line to return (1-based). Default 1."},
                    "limit_lines": {"type": "integer", "minimum": 1, "description": "Most lines to return. Default: as many as fit."}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
        }
    }

    fn permission(&self, arguments: &serde_json::Value, cwd: &Path) -> Result<PermissionRequest, ToolError> {
        let arguments: Arguments = parse_arguments(NAME, arguments)?;
        path_permission(cwd, &arguments.path, PermissionAction::Read, |path| format!("read {path}"))
    }

    fn execute(&self, arguments: serde_json::Value, context: ToolContext) -> BoxFuture<'static, PersistedToolResult> {
        execute_blocking(NAME, arguments, context, Some("cancelled before reading"), |arguments: Arguments, context| {
            let protected = context.sandbox.protected();
            read(&context.cwd, &arguments, context.limits.max_read_bytes, context.approved_request.as_ref(), protected)
        })
    }
}

fn read(
    cwd: &Path,
    arguments: &Arguments,
    max_bytes: usize,
    approved: Option<&PermissionRequest>,
    protected: &ProtectedPaths,
) -> PersistedToolResult {
    let resolved = match resolve_for_execute(cwd, &arguments.path, approved) {
        Ok(resolved) => resolved,
        Err(refusal) => return refusal,
    };
    let file = match open_for_read(&resolved, &arguments.path, protected) {
        Ok(file) => file,
        Err(refusal) => return refusal,
    };
    let first_line = arguments.offset_line.unwrap_or(1).max(1);
    let limit_lines = arguments.limit_lines.unwrap_or(u64::MAX);

    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    let mut text = Vec::new();
    let mut line_number = 0u64;
    let mut lines_taken = 0u64;
    // The line to continue from when the output stops early, for the note.
    let mut stopped_at = None;
    let mut cut_line = None;
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(error) => return io_error("read", &arguments.path, &error),
        }
        line_number += 1;
        if line_number < first_line {
            continue;
        }
        if lines_taken == limit_lines {
            stopped_at = Some(line_number);
            break;
        }
        let room = max_bytes - text.len();
        if line.len() > room {
            // A line longer than the whole budget is cut, so that one huge line still shows something.
            if lines_taken == 0 {
                text.extend_from_slice(&line[..room]);
                cut_line = Some(line_number);
                stopped_at = Some(line_number + 1);
            } else {
                stopped_at = Some(line_number);
            }
            break;
        }
        text.extend_from_slice(&line);
        lines_taken += 1;
    }

    let mut output = String::from_utf8_lossy(&text).into_owned();
    if line_number < first_line && first_line > 1 {
        return results::error(format!(
            "{} has {line_number} lines; offset_line {first_line} is past the end",
            arguments.path
        ));
    }
    if let Some(next) = stopped_at {
        if !output.is_empty() && !output.ends_with('\n') {
            output.push('\n');
        }
        let last = next.saturating_sub(1);
        let cut = match cut_line {
            Some(cut) => format!(" (line {cut} cut after {max_bytes} bytes)"),
            None => String::new(),
        };
        output.push_str(&format!(
            "[truncated: showed lines {first_line}..={last}{cut}; continue with offset_line={next}]"
        ));
    }
    results::ok(output)
}
