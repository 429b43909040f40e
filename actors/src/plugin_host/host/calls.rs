//! Plugin tool calls: `plugin/tools/call` within the tool timeout, `plugin/tools/cancel` when the run is cancelled
//! or the call times out, and an error (never a wait) when the plugin is not running or exits mid-call.

use actix::prelude::*;
use troupe_protocol::types::plugin::{PluginToolCallResult, PluginToolCancelParams, methods};

use super::PluginHost;
use crate::plugin_tools::{CallTool, PeerError, PluginCallError};

impl Handler<CallTool> for PluginHost {
    type Result = ResponseFuture<Result<PluginToolCallResult, PluginCallError>>;

    fn handle(&mut self, message: CallTool, _: &mut Context<Self>) -> Self::Result {
        let Some(connection) = self.connection.as_ref().filter(|connection| connection.ready_at.is_some()) else {
            return Box::pin(async { Err(PluginCallError::NotRunning) });
        };
        if !connection.tools.contains(&message.params.tool) {
            let tool = message.params.tool;
            return Box::pin(async move { Err(PluginCallError::UnknownTool(tool)) });
        }
        let peer = connection.peer.clone();
        let timeout = self.config.tool_timeout();
        Box::pin(async move {
            let cancel_params = PluginToolCancelParams { tool_call_id: message.params.tool_call_id.clone() };
            let answer = tokio::select! {
                answer = peer.request(methods::TOOLS_CALL, &message.params, timeout) => answer,
                _ = message.cancel.cancelled() => {
                    peer.notify(methods::TOOLS_CANCEL, &cancel_params);
                    return Err(PluginCallError::Cancelled);
                }
            };
            match answer {
                Ok(value) => serde_json::from_value(value)
                    .map_err(|error| PluginCallError::Peer(PeerError::Malformed(error.to_string()))),
                Err(error) => {
                    if matches!(error, PeerError::Timeout { .. }) {
                        peer.notify(methods::TOOLS_CANCEL, &cancel_params);
                    }
                    Err(error.into())
                }
            }
        })
    }
}
