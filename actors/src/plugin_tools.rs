//! The plugins as runs and the engine see them, below the plugin hosts that write it: each configured plugin's
//! status (for `session.producers`' `plugin_recovery`) and the tools of the ready ones (`tool`), which a run calls
//! with a [`CallTool`] message to a host it knows only as a recipient (`call`).

mod call;
mod tool;

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::RwLock;
use troupe_protocol::types::producers::{PluginRecoveryState, PluginRecoveryStatus};
use troupe_runtime::tools::ToolDefinition;

pub use call::{CallTool, PeerError, PluginCallError};
pub use tool::{
    CallIdentity, MAX_TOOL_NAME_CHARS, PLUGIN_TOOL_PREFIX, PluginTool, ToolRef, into_result, model_tool_name,
    plugin_resource, validate_tool_name,
};

/// Every configured plugin's status, and the tools of the ready ones. Shared by the hosts (writers), runs and
/// `session.producers` (readers).
#[derive(Default)]
pub struct PluginDirectory {
    statuses: RwLock<BTreeMap<String, PluginRecoveryStatus>>,
    /// By the name the model calls them (`plugin__<plugin>__<tool>`).
    tools: RwLock<BTreeMap<String, Arc<PluginTool>>>,
}

impl PluginDirectory {
    /// One entry per configured plugin, in name order.
    pub fn recovery_states(&self) -> Vec<PluginRecoveryState> {
        self.statuses
            .read()
            .iter()
            .map(|(plugin, status)| PluginRecoveryState { plugin: plugin.clone(), status: *status })
            .collect()
    }

    pub fn status(&self, plugin: &str) -> Option<PluginRecoveryStatus> {
        self.statuses.read().get(plugin).copied()
    }

    /// The plugin tool the model calls `name`, while its plugin is ready.
    pub fn tool(&self, name: &str) -> Option<Arc<PluginTool>> {
        self.tools.read().get(name).cloned()
    }

    /// The definitions of every ready plugin's tools, in name order.
    pub fn tool_definitions(&self) -> Vec<ToolDefinition> {
        self.tools.read().values().map(|tool| tool.definition()).collect()
    }

    /// Sets a status; returns the previous one.
    pub(crate) fn set_status(&self, plugin: &str, status: PluginRecoveryStatus) -> Option<PluginRecoveryStatus> {
        self.statuses.write().insert(plugin.to_owned(), status)
    }

    /// Replaces the tools of `plugin` (empty when it is not ready).
    pub(crate) fn set_tools(&self, plugin: &str, tools: Vec<Arc<PluginTool>>) {
        let mut all = self.tools.write();
        all.retain(|_, tool| tool.plugin != plugin);
        for tool in tools {
            all.insert(model_tool_name(plugin, &tool.declaration.name), tool);
        }
    }
}
