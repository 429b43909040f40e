//! One tool of a ready MCP server as a [`Tool`] runs call: its definition (`mcp__<server>__<tool>` with the server's
//! JSON Schema), its permission request (`execute` on `mcp:<server>/<tool>`, the arguments in the summary an
//! approval shows) and its execution, a `tools/call` within the server's tool timeout that always ends in a result:
//! the server's answer, its error, a timeout, the server gone mid-call, or the run's cancellation.

use std::path::Path;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{Peer, RoleClient, ServiceError};
use serde_json::Value;
use troupe_protocol::types::approval::PermissionAction;
use troupe_protocol::types::run::PersistedToolResult;

use super::names::{mcp_resource, model_tool_name};
use crate::tools::results;
use crate::tools::{PermissionRequest, Tool, ToolContext, ToolDefinition, ToolError};

/// The longest description offered the model; a longer one is cut.
const MAX_DESCRIPTION_BYTES: usize = 4 * 1024;
/// How much of the arguments an approval's summary shows.
const SUMMARY_ARGUMENT_CHARS: usize = 400;

/// A tool of a ready server, bound to that server's connection: a call made after the server went away fails
/// with an error result instead of reaching its successor.
pub struct McpTool {
    server: String,
    name: String,
    called_as: String,
    description: Option<String>,
    schema: Value,
    peer: Peer<RoleClient>,
    timeout: Duration,
}

impl McpTool {
    pub(super) fn new(server: &str, tool: rmcp::model::Tool, peer: Peer<RoleClient>, timeout: Duration) -> McpTool {
        let mut schema = Value::Object((*tool.input_schema).clone());
        // Model APIs want an object schema at the top; a server that leaves out `type` still means one.
        if let Some(object) = schema.as_object_mut() {
            object.entry("type").or_insert_with(|| Value::String("object".into()));
        }
        McpTool {
            server: server.to_owned(),
            called_as: model_tool_name(server, &tool.name),
            name: tool.name.into_owned(),
            description: tool.description.map(|description| description.into_owned()),
            schema,
            peer,
            timeout,
        }
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    /// The tool's name on its server.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name the model calls it by.
    pub fn called_as(&self) -> &str {
        &self.called_as
    }
}

impl Tool for McpTool {
    fn definition(&self) -> ToolDefinition {
        let description = match self.description.as_deref().map(str::trim).filter(|text| !text.is_empty()) {
            Some(text) => {
                let mut text = text.to_owned();
                if text.len() > MAX_DESCRIPTION_BYTES {
                    let mut end = MAX_DESCRIPTION_BYTES;
                    while !text.is_char_boundary(end) {
                        end -= 1;
                    }
                    text.truncate(end);
                    text.push('…');
                }
                format!("{text} (MCP server {})", self.server)
            }
            None => format!("The tool {} of the MCP server {}.", self.name, self.server),
        };
        ToolDefinition { name: self.called_as.clone(), description, parameters: self.schema.clone() }
    }

    fn permission(&self, arguments: &Value, _cwd: &Path) -> Result<PermissionRequest, ToolError> {
        if !arguments.is_object() {
            return Err(ToolError::InvalidArguments {
                tool: "MCP tool",
                message: "the arguments must be a JSON object".into(),
            });
        }
        let mut shown: String = arguments.to_string().chars().take(SUMMARY_ARGUMENT_CHARS + 1).collect();
        if shown.chars().count() > SUMMARY_ARGUMENT_CHARS {
            shown = shown.chars().take(SUMMARY_ARGUMENT_CHARS).collect();
            shown.push('…');
        }
        Ok(PermissionRequest {
            action: PermissionAction::Execute,
            resource: mcp_resource(&self.server, &self.name),
            summary: format!("call the tool {} of the MCP server {} with {shown}", self.name, self.server),
            // Not a path: the policy judges the resource itself.
            inside_cwd: true,
        })
    }

    fn execute(&self, arguments: Value, context: ToolContext) -> BoxFuture<'static, PersistedToolResult> {
        let (server, name, called_as) = (self.server.clone(), self.name.clone(), self.called_as.clone());
        let (peer, timeout) = (self.peer.clone(), self.timeout);
        async move {
            let Value::Object(arguments) = arguments else {
                return results::error("invalid arguments: the arguments must be a JSON object");
            };
            if context.cancel.is_cancelled() {
                return results::cancelled("cancelled before the MCP tool was called");
            }
            let params = CallToolRequestParams::new(name.clone()).with_arguments(arguments);
            let answer = tokio::select! {
                answer = tokio::time::timeout(timeout, peer.call_tool(params)) => answer,
                () = context.cancel.cancelled() => {
                    return results::cancelled(format!("the run was cancelled while the MCP server {server} ran {name}"));
                }
            };
            let answer = match answer {
                Ok(Ok(answer)) => answer,
                Ok(Err(error)) => return results::error(failure(&server, &name, &error)),
                Err(_) => {
                    return results::error(format!(
                        "the MCP server {server} did not answer the call of {name} within {} (its tool_timeout_sec)",
                        describe(timeout)
                    ));
                }
            };
            let data_dir = context.sandbox.data_dir().to_path_buf();
            let max_output_bytes = context.limits.max_output_bytes;
            results::run_blocking(move || super::results::into_result(answer, &called_as, &data_dir, max_output_bytes))
                .await
        }
        .boxed()
    }
}

/// Why a call got no answer, for the model.
fn failure(server: &str, name: &str, error: &ServiceError) -> String {
    match error {
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => format!(
            "the MCP server {server} went away during the call of {name} (its process exited or its connection \
             closed); troupe restarts it, so the call may be tried again later"
        ),
        ServiceError::McpError(error) => {
            format!("the MCP server {server} refused the call of {name}: {} (code {})", error.message, error.code.0)
        }
        other => format!("the call of {name} on the MCP server {server} failed: {other}"),
    }
}

fn describe(duration: Duration) -> String {
    if duration.subsec_millis() == 0 {
        format!("{} s", duration.as_secs())
    } else {
        format!("{} ms", duration.as_millis())
    }
}
