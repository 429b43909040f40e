//! Constructors for tool results and the one way arguments are parsed, so every tool words them alike.

use serde::de::DeserializeOwned;
use troupe_protocol::types::run::{PersistedToolResult, ToolResultStatus};

use super::error::ToolError;

pub(crate) fn result(status: ToolResultStatus, output: String) -> PersistedToolResult {
    PersistedToolResult { status, output, display: None, output_ref: None, additional_messages: Vec::new() }
}

pub(crate) fn ok(output: impl Into<String>) -> PersistedToolResult {
    result(ToolResultStatus::Ok, output.into())
}

pub(crate) fn error(output: impl Into<String>) -> PersistedToolResult {
    result(ToolResultStatus::Error, output.into())
}

pub(crate) fn denied(output: impl Into<String>) -> PersistedToolResult {
    result(ToolResultStatus::Denied, output.into())
}

pub(crate) fn cancelled(output: impl Into<String>) -> PersistedToolResult {
    result(ToolResultStatus::Cancelled, output.into())
}

/// Parses a call's arguments into the tool's argument type.
pub(crate) fn parse_arguments<T: DeserializeOwned>(
    tool: &'static str,
    arguments: &serde_json::Value,
) -> Result<T, ToolError> {
    T::deserialize(arguments).map_err(|error| ToolError::InvalidArguments { tool, message: error.to_string() })
}

/// Runs blocking file work on tokio's blocking pool. A panic there becomes an `error` result rather than taking
/// the run loop down with it.
pub(crate) async fn run_blocking(work: impl FnOnce() -> PersistedToolResult + Send + 'static) -> PersistedToolResult {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        Err(join_error) => error(format!("the tool failed internally: {join_error}")),
    }
}
