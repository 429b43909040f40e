//! The answer to `plugin/initialize`: checked (the extension version exactly, the name equal to the config key,
//! tool names valid and unique), then the declared tools offered to runs, `plugin/recovery/start` sent and pings
//! scheduled. An answer that breaks these rules fails the start; one a restart cannot fix fails the plugin for good.

use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use serde_json::{Value, json};
use troupe_protocol::types::plugin::{EXTENSION_VERSION, PluginInitializeResult, methods};
use troupe_protocol::types::producers::PluginRecoveryStatus;

use super::PluginHost;
use crate::plugin_host::peer::PeerError;
use crate::plugin_tools::{PluginTool, validate_tool_name};

impl PluginHost {
    pub(super) fn initialized(&mut self, ctx: &mut Context<Self>, generation: u64, answer: Result<Value, PeerError>) {
        if self.peer_of(generation).is_none() {
            return;
        }
        let result = answer.map_err(|error| (error.to_string(), false)).and_then(|value| self.check_initialize(value));
        let result = match result {
            Ok(result) => result,
            Err((reason, permanent)) => {
                tracing::warn!(plugin = %self.name, %reason, "plugin/initialize failed");
                self.permanently_failed |= permanent;
                self.set_status(PluginRecoveryStatus::Failed, "initialize failed");
                self.kill();
                return;
            }
        };
        tracing::info!(plugin = %self.name, version = %result.version, tools = result.tools.len(), "plugin ready");
        let tools: Vec<Arc<PluginTool>> = result
            .tools
            .iter()
            .map(|declaration| {
                Arc::new(PluginTool {
                    plugin: self.name.clone(),
                    declaration: declaration.clone(),
                    host: ctx.address().recipient(),
                })
            })
            .collect();
        self.directory.set_tools(&self.name, if result.capabilities.tools { tools } else { Vec::new() });
        let Some(connection) = self.connection.as_mut() else { return };
        connection.ready_at = Some(Instant::now());
        connection.capabilities = result.capabilities;
        connection.tools = result.tools.iter().map(|tool| tool.name.clone()).collect();
        connection.peer.notify(methods::RECOVERY_START, &json!({}));
        // A plugin that sends no producer messages has nothing to recover: it is ready as soon as it initialized.
        if !result.capabilities.producer_messaging {
            self.set_status(PluginRecoveryStatus::Ready, "initialized");
        }
        self.ping_later(ctx, generation);
    }

    /// Checks the initialize answer; the error says whether a restart could fix it.
    fn check_initialize(&self, value: Value) -> Result<PluginInitializeResult, (String, bool)> {
        let result: PluginInitializeResult =
            serde_json::from_value(value).map_err(|error| (format!("the answer does not decode: {error}"), false))?;
        if result.protocol_version != EXTENSION_VERSION {
            return Err((
                format!(
                    "the plugin speaks extension version {:?}; this daemon speaks exactly {EXTENSION_VERSION}",
                    result.protocol_version.chars().take(32).collect::<String>()
                ),
                true,
            ));
        }
        if result.name != self.name {
            return Err(("the plugin's name differs from its key in config.toml".to_owned(), true));
        }
        let mut seen = std::collections::HashSet::new();
        for tool in &result.tools {
            validate_tool_name(&tool.name).map_err(|problem| (format!("a declared tool: {problem}"), true))?;
            if !seen.insert(tool.name.as_str()) {
                return Err((format!("the tool {} is declared twice", tool.name), true));
            }
        }
        Ok(result)
    }
}
