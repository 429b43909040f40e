//! `write_file`: replaces or creates a file inside the cwd, creating its parent directories. What the file held is
//! recorded first (`crate::changes`), and the result carries the diff.

use std::path::Path;

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::json;
use troupe_protocol::types::approval::PermissionAction;
use troupe_protocol::types::run::PersistedToolResult;

use super::error::ToolError;
use super::file_tool::{execute_write_here, on_blocking_pool, path_permission};
use super::fs_access::{self, resolve_for_execute};
use super::recorded_write::{Target, preview, read_limit, recorded_write};
use super::results::parse_arguments;
use super::{InPlaceTool, PermissionRequest, Tool, ToolContext, ToolDefinition};
use crate::changes::ChangeRecorder;
use crate::sandbox::ProtectedPaths;

const NAME: &str = "write_file";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Arguments {
    path: String,
    content: String,
}

pub struct WriteFileTool;

impl Tool for WriteFileTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: NAME.to_owned(),
            description: "Write a file, replacing its contents. Missing parent directories are created.".to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, relative to the working directory or absolute."},
                    "content": {"type": "string", "description": "The complete new contents."}
                },
                "required": ["path", "content"],
                "additionalProperties": false
            }),
        }
    }

    fn permission(&self, arguments: &serde_json::Value, cwd: &Path) -> Result<PermissionRequest, ToolError> {
        let arguments: Arguments = parse_arguments(NAME, arguments)?;
        path_permission(cwd, &arguments.path, PermissionAction::Write, |path| {
            format!("write {} bytes to {path}", arguments.content.len())
        })
    }

    fn preview(
        &self,
        arguments: &serde_json::Value,
        cwd: &Path,
        protected: &ProtectedPaths,
    ) -> Option<troupe_protocol::types::changes::FileDiff> {
        let arguments: Arguments = parse_arguments(NAME, arguments).ok()?;
        preview(cwd, &arguments.path, protected, |_| Some(arguments.content.clone().into_bytes()))
    }

    fn in_place(&self) -> Option<&dyn InPlaceTool> {
        Some(self)
    }

    fn execute(&self, arguments: serde_json::Value, context: ToolContext) -> BoxFuture<'static, PersistedToolResult> {
        on_blocking_pool(move || work(arguments, context))
    }
}

impl InPlaceTool for WriteFileTool {
    fn execute_in_place(&self, arguments: serde_json::Value, context: ToolContext) -> PersistedToolResult {
        work(arguments, context)
    }
}

/// The whole call, on a thread that may block.
fn work(arguments: serde_json::Value, context: ToolContext) -> PersistedToolResult {
    execute_write_here(NAME, arguments, context, "cancelled before writing", write)
}

fn write(
    cwd: &Path,
    arguments: &Arguments,
    approved: Option<&PermissionRequest>,
    recorder: Option<&ChangeRecorder>,
    protected: &ProtectedPaths,
) -> PersistedToolResult {
    let resolved = match resolve_for_execute(cwd, &arguments.path, approved) {
        Ok(resolved) => resolved,
        Err(refusal) => return refusal,
    };
    let prior = match fs_access::read_prior(&resolved, &arguments.path, protected, read_limit(recorder)) {
        Ok(prior) => prior,
        Err(refusal) => return refusal,
    };
    let target = Target { tool: NAME, resolved: &resolved, requested: &arguments.path, recorder, protected };
    let summary = format!("wrote {} bytes to {}", arguments.content.len(), resolved.display_for_model());
    recorded_write(&target, &prior, arguments.content.as_bytes(), summary)
}
