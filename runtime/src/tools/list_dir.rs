//! `list_dir`: the entries of a directory inside the cwd, sorted, without recursion.

use std::path::Path;

use futures::future::BoxFuture;
use rustix::fs::FileType;
use serde::Deserialize;
use serde_json::json;
use troupe_protocol::types::approval::PermissionAction;
use troupe_protocol::types::run::PersistedToolResult;

use super::dir_handle;
use super::error::ToolError;
use super::file_tool::{execute_here, on_blocking_pool, path_permission};
use super::fs_access::{io_error, open_directory, resolve_for_execute};
use super::results::{self, parse_arguments};
use super::{InPlaceTool, PermissionRequest, Tool, ToolContext, ToolDefinition};
use crate::sandbox::ProtectedPaths;

const NAME: &str = "list_dir";

/// The most entries one listing returns; a huge directory is better explored with `search` or `shell`.
pub const MAX_LIST_ENTRIES: usize = 1000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Arguments {
    #[serde(default)]
    path: Option<String>,
}

impl Arguments {
    fn path(&self) -> &str {
        self.path.as_deref().unwrap_or(".")
    }
}

pub struct ListDirTool;

impl Tool for ListDirTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: NAME.to_owned(),
            description: format!(
                "List a directory's entries, sorted by name. Directories end with '/', symbolic links with \
                 '@'. At most {MAX_LIST_ENTRIES} entries."
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Directory path, relative to the working directory or absolute. Default: the working directory."}
                },
                "additionalProperties": false
            }),
        }
    }

    fn permission(&self, arguments: &serde_json::Value, cwd: &Path) -> Result<PermissionRequest, ToolError> {
        let arguments: Arguments = parse_arguments(NAME, arguments)?;
        path_permission(cwd, arguments.path(), PermissionAction::Read, |path| format!("list {path}"))
    }

    fn in_place(&self) -> Option<&dyn InPlaceTool> {
        Some(self)
    }

    fn execute(&self, arguments: serde_json::Value, context: ToolContext) -> BoxFuture<'static, PersistedToolResult> {
        on_blocking_pool(move || work(arguments, context))
    }
}

impl InPlaceTool for ListDirTool {
    fn execute_in_place(&self, arguments: serde_json::Value, context: ToolContext) -> PersistedToolResult {
        work(arguments, context)
    }
}

/// The whole call, on a thread that may block.
fn work(arguments: serde_json::Value, context: ToolContext) -> PersistedToolResult {
    execute_here(NAME, arguments, context, Some("cancelled before listing"), |arguments: Arguments, context| {
        list(&context.cwd, &arguments, context.approved_request.as_ref(), context.sandbox.protected())
    })
}

fn list(
    cwd: &Path,
    arguments: &Arguments,
    approved: Option<&PermissionRequest>,
    protected: &ProtectedPaths,
) -> PersistedToolResult {
    let requested = arguments.path();
    let resolved = match resolve_for_execute(cwd, requested, approved) {
        Ok(resolved) => resolved,
        Err(refusal) => return refusal,
    };
    // A denied path is refused here; a folder that merely holds one is listed, names only, as for any folder.
    let directory = match open_directory(&resolved, requested, protected) {
        Ok(directory) => directory,
        Err(refusal) => return refusal,
    };
    // Listed from the descriptor that was checked, so a folder swapped since is not what gets listed.
    let entries = match dir_handle::list(&directory) {
        Ok(entries) => entries,
        Err(error) => return io_error("list", requested, &error),
    };
    let mut names = Vec::with_capacity(entries.len());
    for (name, kind) in entries {
        let mut name = name.to_string_lossy().into_owned();
        // The entry's own type, not its target's: a symlinked directory is shown as a link, since following it
        // may leave the cwd.
        match kind {
            FileType::Directory => name.push('/'),
            FileType::Symlink => name.push('@'),
            _ => {}
        }
        names.push(name);
    }
    names.sort();
    let total = names.len();
    if total == 0 {
        return results::ok(format!("{} is empty", resolved.display_for_model()));
    }
    let mut output = names.iter().take(MAX_LIST_ENTRIES).map(String::as_str).collect::<Vec<_>>().join("\n");
    if total > MAX_LIST_ENTRIES {
        output.push_str(&format!("\n[{} more entries not shown; {total} in all]", total - MAX_LIST_ENTRIES));
    }
    results::ok(output)
}
