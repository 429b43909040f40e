//! Plugin tools as the model sees them: named `plugin__<plugin>__<tool>` (no built-in tool starts with
//! `plugin__`, and plugin names have no `__`, so a name belongs to exactly one plugin's tool), checked by the
//! ordinary policy as `execute` on the resource `plugin:<plugin>/<tool>`, and called with `plugin/tools/call`.

use std::path::Path;
use std::sync::Arc;

use actix::prelude::*;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use troupe_protocol::types::approval::PermissionAction;
use troupe_protocol::types::plugin::{
    PluginToolCallParams, PluginToolCallResult, PluginToolDeclaration, PluginToolOutput,
};
use troupe_protocol::types::run::{PersistedToolResult, ToolResultStatus};
use troupe_runtime::tools::{PermissionRequest, Tool, ToolDefinition, ToolError};

use super::call::{CallTool, PluginCallError};

/// The prefix of every plugin tool's name.
pub const PLUGIN_TOOL_PREFIX: &str = "plugin__";
/// The longest tool name a plugin may declare (with the prefix and a 20-character plugin name: 64).
pub const MAX_TOOL_NAME_CHARS: usize = 40;

/// The name the model calls a plugin's tool by.
pub fn model_tool_name(plugin: &str, tool: &str) -> String {
    format!("{PLUGIN_TOOL_PREFIX}{plugin}__{tool}")
}

/// The permission resource of a plugin's tool.
pub fn plugin_resource(plugin: &str, tool: &str) -> String {
    format!("plugin:{plugin}/{tool}")
}

/// Checks a declared tool name: `[A-Za-z0-9_-]`, 1 to 40 characters.
pub fn validate_tool_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_TOOL_NAME_CHARS {
        return Err(format!("a tool name has 1 to {MAX_TOOL_NAME_CHARS} characters"));
    }
    if !name.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-') {
        return Err("a tool name uses only A-Z, a-z, 0-9, `_` and `-`".into());
    }
    Ok(())
}

/// Who is calling: the run and the model's tool call.
pub struct CallIdentity<'a> {
    pub session_id: &'a str,
    pub run_id: &'a str,
    pub tool_call_id: &'a str,
}

/// One tool a ready plugin declared.
pub struct PluginTool {
    pub plugin: String,
    pub declaration: PluginToolDeclaration,
    /// The plugin's host, which makes the call.
    pub host: Recipient<CallTool>,
}

impl PluginTool {
    pub fn definition(&self) -> ToolDefinition {
        let description = if self.declaration.description.is_empty() {
            format!("A tool of the plugin {}.", self.plugin)
        } else {
            format!("{} (plugin {})", self.declaration.description, self.plugin)
        };
        ToolDefinition {
            name: model_tool_name(&self.plugin, &self.declaration.name),
            description,
            parameters: self.declaration.input_schema.clone().unwrap_or_else(|| json!({"type": "object"})),
        }
    }

    pub fn permission(&self, arguments: &serde_json::Value) -> Result<PermissionRequest, ToolError> {
        if !arguments.is_object() {
            return Err(ToolError::InvalidArguments {
                tool: "plugin tool",
                message: "the arguments must be a JSON object".into(),
            });
        }
        Ok(PermissionRequest {
            action: PermissionAction::Execute,
            resource: plugin_resource(&self.plugin, &self.declaration.name),
            summary: format!("run the tool {} of the plugin {}", self.declaration.name, self.plugin),
            // Not a path: the policy judges the resource itself.
            inside_cwd: true,
        })
    }

    /// Calls the tool; every outcome (the plugin's error, a timeout, its exit, a cancellation) is a result.
    pub async fn call(
        &self,
        identity: CallIdentity<'_>,
        arguments: serde_json::Value,
        cancel: CancellationToken,
    ) -> PersistedToolResult {
        let params = PluginToolCallParams {
            tool: self.declaration.name.clone(),
            session_id: identity.session_id.to_owned(),
            run_id: identity.run_id.to_owned(),
            tool_call_id: identity.tool_call_id.to_owned(),
            arguments,
            resource: plugin_resource(&self.plugin, &self.declaration.name),
        };
        let answer = match self.host.send(CallTool { params, cancel }).await {
            Ok(answer) => answer,
            Err(_) => Err(PluginCallError::NotRunning),
        };
        match answer {
            Ok(result) => into_result(result),
            Err(PluginCallError::Cancelled) => {
                plain(ToolResultStatus::Cancelled, "the run was cancelled while the plugin tool ran".into())
            }
            Err(error) => plain(ToolResultStatus::Error, format!("the plugin {} failed: {error}", self.plugin)),
        }
    }
}

fn plain(status: ToolResultStatus, output: String) -> PersistedToolResult {
    PersistedToolResult { status, output, display: None, output_ref: None, additional_messages: Vec::new() }
}

/// A plugin's answer as the result stored and shown to the model: a single output as is, named outputs as
/// `[name]` sections in name order; the display and the additional messages when the plugin gave them (their
/// bounds and artifacts are checked with every tool's, when the run records the result).
pub fn into_result(result: PluginToolCallResult) -> PersistedToolResult {
    let output = match result.output {
        PluginToolOutput::Single { text } => text,
        PluginToolOutput::Named { outputs } => {
            outputs.into_iter().map(|(name, text)| format!("[{name}]\n{text}")).collect::<Vec<_>>().join("\n\n")
        }
    };
    let status = if result.is_error { ToolResultStatus::Error } else { ToolResultStatus::Ok };
    PersistedToolResult {
        display: result.display,
        additional_messages: result.additional_messages,
        ..plain(status, output)
    }
}

/// A tool a run can call: a built-in one, a plugin's, or an MCP server's.
pub enum ToolRef<'a> {
    Builtin(&'a dyn Tool),
    Plugin(Arc<PluginTool>),
    Mcp(Arc<troupe_runtime::mcp::McpTool>),
}

impl ToolRef<'_> {
    pub fn permission(&self, arguments: &serde_json::Value, cwd: &Path) -> Result<PermissionRequest, ToolError> {
        match self {
            ToolRef::Builtin(tool) => tool.permission(arguments, cwd),
            ToolRef::Plugin(tool) => tool.permission(arguments),
            ToolRef::Mcp(tool) => tool.permission(arguments, cwd),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn named_outputs_become_sections_and_errors_keep_their_display() {
        let outputs = BTreeMap::from([("b".to_owned(), "two".to_owned()), ("a".to_owned(), "one".to_owned())]);
        let result = into_result(PluginToolCallResult {
            output: PluginToolOutput::Named { outputs },
            display: Some("shown".into()),
            is_error: true,
            additional_messages: Vec::new(),
        });
        assert_eq!(result.output, "[a]\none\n\n[b]\ntwo");
        assert_eq!((result.status, result.display.as_deref()), (ToolResultStatus::Error, Some("shown")));
    }

    #[test]
    fn tool_names_are_prefixed_and_checked() {
        assert_eq!(model_tool_name("watch", "tail"), "plugin__watch__tail");
        assert_eq!(plugin_resource("watch", "tail"), "plugin:watch/tail");
        assert!(validate_tool_name("read_file").is_ok());
        assert!(validate_tool_name("a b").is_err() && validate_tool_name("").is_err());
        assert!(validate_tool_name(&"x".repeat(41)).is_err());
    }
}
