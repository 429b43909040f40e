//! The two steps every file tool (`read_file`, `write_file`, `edit_file`, `list_dir`, `search`) takes alike.
//!
//! A file tool names one path and does blocking work on it. Its permission is therefore that path resolved, and its
//! execution is guarded blocking work, run on tokio's blocking pool or in place by a caller already on a blocking
//! thread. Both live here once, so that how a path argument is
//! judged or how file work is started cannot change for one tool and silently stay behind in another; each tool
//! keeps only what is its own: its arguments, its summary wording and its work.

use std::path::{Display, Path};

use futures::FutureExt;
use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use troupe_protocol::types::approval::PermissionAction;
use troupe_protocol::types::run::PersistedToolResult;

use super::error::ToolError;
use super::paths::resolve_path;
use super::results::{self, parse_arguments, run_blocking};
use super::{PermissionRequest, ToolContext};

/// What a call doing `action` on the path argument `requested` would touch, without touching it.
///
/// The resource is the resolved absolute path rather than the argument as written, because that is what
/// [`super::fs_access::resolve_for_execute`] compares an approval against at execute time: a policy or a user
/// approves exactly the file that will be opened. `summarize` words the one-line summary around the resolved
/// path's display, which is the only part that differs between tools.
pub(crate) fn path_permission(
    cwd: &Path,
    requested: &str,
    action: PermissionAction,
    summarize: impl FnOnce(Display<'_>) -> String,
) -> Result<PermissionRequest, ToolError> {
    let resolved = resolve_path(cwd, requested)?;
    Ok(PermissionRequest {
        action,
        resource: resolved.path.to_string_lossy().into_owned(),
        summary: summarize(resolved.path.display()),
        inside_cwd: resolved.inside_cwd,
    })
}

/// Executes a file tool's call on the calling thread, which may block (tokio's blocking pool, via
/// [`on_blocking_pool`] from `execute`, or a caller already on a blocking thread, via
/// `InPlaceTool::execute_in_place`): answers `cancelled_before` if the call was cancelled before it started, turns
/// arguments that do not parse into an `error` result, and runs `work`.
///
/// `cancelled_before` is `None` for a tool that watches `context.cancel` itself while it works (`search`, whose
/// walk can be long); such a call reports bad arguments, or whatever `work` refuses before its first check, even
/// when it was cancelled first.
/// `work` receives the whole context and must resolve its path again with
/// [`super::fs_access::resolve_for_execute`]: nothing decided at permission time is trusted here.
pub(crate) fn execute_here<Arguments>(
    tool: &'static str,
    arguments: serde_json::Value,
    context: ToolContext,
    cancelled_before: Option<&'static str>,
    work: impl FnOnce(Arguments, ToolContext) -> PersistedToolResult,
) -> PersistedToolResult
where
    Arguments: DeserializeOwned,
{
    crate::blocking::assert_may_block();
    if let Some(message) = cancelled_before
        && context.cancel.is_cancelled()
    {
        return results::cancelled(message);
    }
    match parse_arguments(tool, &arguments) {
        Ok(arguments) => work(arguments, context),
        Err(error) => error.into_result(),
    }
}

/// What a file tool that changes a file (`write_file`, `edit_file`) gets to do its write with: the cwd, its
/// arguments, the request it was approved as, where the file's prior content is recorded, and the paths no tool
/// writes.
pub(crate) type Write<Arguments> = fn(
    &Path,
    &Arguments,
    Option<&PermissionRequest>,
    Option<&crate::changes::ChangeRecorder>,
    &crate::sandbox::ProtectedPaths,
) -> PersistedToolResult;

/// [`execute_here`] for a tool that changes a file: a sandbox that forbids file writes refuses the call before
/// `write` is given it. Cancellation is checked once, before anything changes: a write is not abandoned halfway.
pub(crate) fn execute_write_here<Arguments: DeserializeOwned>(
    tool: &'static str,
    arguments: serde_json::Value,
    context: ToolContext,
    cancelled_before: &'static str,
    write: Write<Arguments>,
) -> PersistedToolResult {
    execute_here(tool, arguments, context, Some(cancelled_before), |arguments: Arguments, context| {
        if let Some(refusal) = context.sandbox.file_write_refusal() {
            return results::denied(refusal);
        }
        let approved = context.approved_request.as_ref();
        write(&context.cwd, &arguments, approved, context.changes.as_ref(), context.sandbox.protected())
    })
}

/// Runs a file tool's whole call on tokio's blocking pool, so that file I/O never stalls an actor thread: what
/// `execute` does with [`execute_here`].
pub(crate) fn on_blocking_pool(
    call: impl FnOnce() -> PersistedToolResult + Send + 'static,
) -> BoxFuture<'static, PersistedToolResult> {
    run_blocking(call).boxed()
}
