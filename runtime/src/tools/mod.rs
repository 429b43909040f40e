//! The tools a model can call during a run: `shell`, `read_file`, `write_file`, `edit_file`, `list_dir`,
//! `search` and `web_fetch`.
//!
//! The run loop drives every call in two steps, and this module is shaped around them:
//!
//! 1. [`Tool::permission`] says what the call would do (a [`PermissionRequest`]: an action, a resource and
//!    whether it stays inside the session's working directory) without touching anything, so that the policy and
//!    the approval flow can decide before any side effect happens.
//! 2. [`Tool::execute`] does it with a [`ToolContext`] (cwd, limits, live output, stdin, cancellation) and always
//!    yields a [`PersistedToolResult`]: failures are results the model reads, never panics or Rust errors.
//!
//! **Confinement invariant:** file tools resolve every path with [`paths::resolve_path`], which follows symlinks
//! and `..` the way the kernel would, and report `inside_cwd: false` for anything that lands outside the
//! canonical cwd. `execute` resolves again and refuses with `denied` whatever escapes at that moment, then opens,
//! creates and lists only beneath a verified handle of the cwd, with the kernel refusing any symlink on the way
//! ([`dir_handle`]): a folder swapped for a symlink after the check is never followed, whenever the swap lands.
//!
//! Unlike the rest of this crate, tools are asynchronous: the shell owns a child process group, and blocking file
//! work runs on tokio's blocking pool so that a large search never stalls an actor thread.

mod context;
pub mod cwd_files;
mod cwd_handle;
mod dir_handle;
mod edit_file;
mod error;
mod file_tool;
mod fs_access;
mod list_dir;
pub mod paths;
mod read_file;
mod recorded_write;
mod registry;
pub mod restore;
pub(crate) mod results;
mod search;
mod session_cwd;
mod shell;
mod skill;
mod web_fetch;
mod write_file;

use std::path::Path;

use futures::future::BoxFuture;
use troupe_protocol::types::approval::PermissionAction;
use troupe_protocol::types::run::PersistedToolResult;

pub use context::{OutputChunk, StdinInput, ToolContext, ToolLimits};
pub use edit_file::EditFileTool;
pub use error::ToolError;
pub use list_dir::ListDirTool;
pub use read_file::ReadFileTool;
pub use registry::ToolRegistry;
pub use search::SearchTool;
pub use session_cwd::{CwdProblem, SessionCwd, check_session_cwd};
pub use shell::ShellTool;
pub use skill::{SkillTool, skill_resource};
pub use web_fetch::WebFetchTool;
pub use write_file::WriteFileTool;

/// What a model is told about a tool.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolDefinition {
    pub name: String,
    pub description: String,
    /// The JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// What executing one call would do, for the permission policy and the approval flow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PermissionRequest {
    pub action: PermissionAction,
    /// The resolved absolute path for file tools; the command line for `shell`.
    pub resource: String,
    /// One line for a human.
    pub summary: String,
    /// False when the resolved path lies outside the session's cwd (after `..` and symlinks). Always true for
    /// `shell`, whose reach the policy judges from the command itself.
    pub inside_cwd: bool,
}

/// The work of a tool whose whole call is blocking work ([`Tool::in_place`]).
pub trait InPlaceTool: Send + Sync {
    /// Runs the call on the calling thread, which must be one that may block: what the tool's `execute` does on
    /// tokio's blocking pool.
    fn execute_in_place(&self, arguments: serde_json::Value, context: ToolContext) -> PersistedToolResult;
}

/// A tool the model can call.
pub trait Tool: Send + Sync {
    fn definition(&self) -> ToolDefinition;

    /// The output channels the tool streams through [`ToolContext::output`] while it runs (`tools.list` shows
    /// them); none by default: the output arrives with the result.
    fn output_channels(&self) -> Vec<troupe_protocol::types::tool_output::OutputChannel> {
        Vec::new()
    }

    /// What executing this call would do, decided from the arguments and the session cwd without side effects.
    /// Errors are argument errors (bad JSON shape), reported to the model as an `error` tool result.
    fn permission(&self, arguments: &serde_json::Value, cwd: &Path) -> Result<PermissionRequest, ToolError>;

    /// Why no call of this tool can run under `sandbox`, whatever its arguments and whoever approves it (the
    /// sandbox's network is off for `web_fetch`), or `None`. Checked before the permission, so nobody is asked to
    /// approve a call that would be refused; `execute` checks again.
    fn refusal(&self, _sandbox: &crate::sandbox::Sandbox) -> Option<String> {
        None
    }

    /// What the call would change in a file, as a diff against its current content, for an approval to show
    /// (`write_file`, `edit_file`); `None` for tools that change no file. Reads, never writes; refuses (`None`)
    /// whatever `execute` would refuse to read.
    fn preview(
        &self,
        arguments: &serde_json::Value,
        cwd: &Path,
        protected: &crate::sandbox::ProtectedPaths,
    ) -> Option<troupe_protocol::types::changes::FileDiff> {
        let _ = (arguments, cwd, protected);
        None
    }

    /// Runs the call. Every outcome, including bad arguments, a path that now escapes the cwd, a failure or a
    /// cancellation, is a result for the model.
    fn execute(&self, arguments: serde_json::Value, context: ToolContext) -> BoxFuture<'static, PersistedToolResult>;

    /// The call's whole work as blocking work that can run on the calling thread, for a tool whose execution is
    /// only that (the file tools and `skill`); `None` for the others. A run judges such a call on a blocking
    /// thread already, and runs it there once allowed: one hand-off to the pool per call instead of two.
    fn in_place(&self) -> Option<&dyn InPlaceTool> {
        None
    }
}
