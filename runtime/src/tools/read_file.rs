//! `read_file`: the text of a file inside the cwd, optionally a window of its lines.

use std::io::{BufRead, BufReader};
use std::path::Path;

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::json;
use troupe_protocol::types::approval::PermissionAction;
use troupe_protocol::types::run::PersistedToolResult;

use super::error::ToolError;
use super::file_tool::{execute_here, on_blocking_pool, path_permission};
use super::fs_access::{io_error, open_for_read, resolve_for_execute};
use super::results::{self, parse_arguments};
use super::{InPlaceTool, PermissionRequest, Tool, ToolContext, ToolDefinition};
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

    fn in_place(&self) -> Option<&dyn InPlaceTool> {
        Some(self)
    }

    fn execute(&self, arguments: serde_json::Value, context: ToolContext) -> BoxFuture<'static, PersistedToolResult> {
        on_blocking_pool(move || work(arguments, context))
    }
}

impl InPlaceTool for ReadFileTool {
    fn execute_in_place(&self, arguments: serde_json::Value, context: ToolContext) -> PersistedToolResult {
        work(arguments, context)
    }
}

/// The whole call, on a thread that may block.
fn work(arguments: serde_json::Value, context: ToolContext) -> PersistedToolResult {
    execute_here(NAME, arguments, context, Some("cancelled before reading"), |arguments: Arguments, context| {
        let protected = context.sandbox.protected();
        read(&context.cwd, &arguments, context.limits.max_read_bytes, context.approved_request.as_ref(), protected)
    })
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
    let Lines { text, line_number, stopped_at, cut_line } =
        match take_lines(&mut reader, first_line, limit_lines, max_bytes) {
            Ok(lines) => lines,
            Err(error) => return io_error("read", &arguments.path, &error),
        };

    let mut output = String::from_utf8_lossy(&text).into_owned();
    if line_number < first_line && first_line > 1 {
        return results::error(format!(
            "{} has {line_number} lines; offset_line {first_line} is past the end",
            arguments.path
        ));
    }
    if let Some(next) = stopped_at {
        if cut_line.is_some() {
            // A cut mark right after the cut, as every cut of the daemon has, so a secret the cut split is masked
            // in what is left of it (`redact.rs`, pieces beside a cut).
            output.push('…');
        }
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

/// Consumes the next line through its `\n` without keeping it; false at the end of the file.
fn skip_line(reader: &mut impl BufRead) -> std::io::Result<bool> {
    let mut consumed_any = false;
    loop {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            return Ok(consumed_any);
        }
        consumed_any = true;
        match buffer.iter().position(|byte| *byte == b'\n') {
            Some(end) => {
                reader.consume(end + 1);
                return Ok(true);
            }
            None => {
                let length = buffer.len();
                reader.consume(length);
            }
        }
    }
}

/// Reads the next line through its `\n`, or its first `cap` bytes when it is longer (the rest stays unread).
/// Returns how many bytes were read; 0 at the end of the file.
fn read_line_capped(reader: &mut impl BufRead, line: &mut Vec<u8>, cap: usize) -> std::io::Result<usize> {
    let start = line.len();
    while line.len() - start < cap {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            break;
        }
        let wanted = buffer.len().min(cap - (line.len() - start));
        let (taken, done) = match buffer[..wanted].iter().position(|byte| *byte == b'\n') {
            Some(end) => (end + 1, true),
            None => (wanted, false),
        };
        line.extend_from_slice(&buffer[..taken]);
        reader.consume(taken);
        if done {
            break;
        }
    }
    Ok(line.len() - start)
}

/// What [`take_lines`] read.
struct Lines {
    text: Vec<u8>,
    /// The number of the last line read (counted, kept or not).
    line_number: u64,
    /// The line to continue from when the output stops early, for the note.
    stopped_at: Option<u64>,
    /// The line cut at the byte budget, when one was.
    cut_line: Option<u64>,
}

/// Lines `first_line..` (at most `limit_lines`, at most `max_bytes` in all). Memory stays within the budget
/// whatever the file: lines before `first_line` are counted, not kept, and a line is read at most one byte past
/// the room left, so a file that is one huge line is never buffered whole.
fn take_lines(
    reader: &mut impl BufRead,
    first_line: u64,
    limit_lines: u64,
    max_bytes: usize,
) -> std::io::Result<Lines> {
    let mut lines = Lines { text: Vec::new(), line_number: 0, stopped_at: None, cut_line: None };
    let mut line = Vec::new();
    let mut lines_taken = 0u64;
    loop {
        if lines.line_number + 1 < first_line {
            if !skip_line(reader)? {
                break;
            }
            lines.line_number += 1;
            continue;
        }
        if lines_taken == limit_lines {
            if !reader.fill_buf()?.is_empty() {
                lines.stopped_at = Some(lines.line_number + 1);
            }
            break;
        }
        let room = max_bytes - lines.text.len();
        line.clear();
        if read_line_capped(reader, &mut line, room + 1)? == 0 {
            break;
        }
        lines.line_number += 1;
        if line.len() > room {
            // A line longer than the whole budget is cut, so that one huge line still shows something.
            if lines_taken == 0 {
                lines.text.extend_from_slice(&line[..room]);
                lines.cut_line = Some(lines.line_number);
                lines.stopped_at = Some(lines.line_number + 1);
            } else {
                lines.stopped_at = Some(lines.line_number);
            }
            break;
        }
        lines.text.extend_from_slice(&line);
        lines_taken += 1;
    }
    Ok(lines)
}
