//! Why a tool call could not even be described: its arguments or its cwd are unusable.
//!
//! Everything that goes wrong while a call runs is a tool result instead, because the model must read it.

use std::io;
use std::path::PathBuf;

use troupe_protocol::types::run::PersistedToolResult;

use super::results;

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The arguments do not match the tool's schema. `message` is serde's description, which names the field.
    #[error("invalid arguments for {tool}: {message}")]
    InvalidArguments { tool: &'static str, message: String },

    /// A path argument is unusable before it reaches the file system (empty, or holds a NUL byte).
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath { path: String, reason: &'static str },

    /// The session's cwd cannot be resolved, so nothing can be confined to it.
    #[error("the working directory {} is not accessible: {source}", path.display())]
    Cwd {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// The session's cwd was replaced (a symlink on its path now) or is no longer a directory: nothing may be
    /// resolved against it.
    #[error(transparent)]
    CwdUnusable(#[from] super::session_cwd::CwdProblem),

    /// Resolving a path failed for a reason other than a missing component (permissions, a symlink loop).
    #[error("could not resolve {}: {source}", path.display())]
    Resolve {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl ToolError {
    /// The `error` result the model receives for this error.
    pub fn into_result(self) -> PersistedToolResult {
        results::error(self.to_string())
    }
}
