//! Plugins: subprocesses configured in `[plugins.<name>]` that speak the extension protocol (version 0.0.6,
//! `docs/plugins.md`) as newline-delimited JSON-RPC 2.0 over their stdin and stdout.
//!
//! - `process`: starting the process (environment cleared apart from the configured `env`) and its stdio framing.
//! - `peer`: the JSON-RPC peer (requests both ways, ids, timeouts).
//! - `host`: the [`PluginHost`] actor, one per enabled plugin: handshake, restarts with backoff, shutdown; its
//!   stdout reader (`host/pump`) and tool calls (`host/calls`).
//! - `requests`: what a plugin may ask (`plugin/emit`, `plugin/recovery/complete`, producer requests);
//!   `limits`: the emit bounds; `producers`: producer messaging.
//! - `tool`: the plugin's tools as the model sees them.
//!
//! The [`PluginDirectory`] is what the rest of the engine reads: each configured plugin's status (for
//! `session.producers`' `plugin_recovery`) and the tools of the ready ones (for runs).

mod host;
mod limits;
mod peer;
mod process;
mod producers;
mod requests;
mod tool;

use std::collections::BTreeMap;
use std::sync::Arc;

use actix::prelude::*;
use parking_lot::RwLock;
use troupe_protocol::types::producers::{PluginRecoveryState, PluginRecoveryStatus};
use troupe_runtime::config::PluginConfig;
use troupe_runtime::tools::ToolDefinition;

pub use crate::session_router::SessionRouter;
pub use host::{CallTool, PluginCallError, PluginHost, Shutdown};
pub use tool::{CallIdentity, PLUGIN_TOOL_PREFIX, PluginTool, ToolRef, model_tool_name, plugin_resource};

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
    fn set_status(&self, plugin: &str, status: PluginRecoveryStatus) -> Option<PluginRecoveryStatus> {
        self.statuses.write().insert(plugin.to_owned(), status)
    }

    /// Replaces the tools of `plugin` (empty when it is not ready).
    fn set_tools(&self, plugin: &str, tools: Vec<Arc<PluginTool>>) {
        let mut all = self.tools.write();
        all.retain(|_, tool| tool.plugin != plugin);
        for tool in tools {
            all.insert(model_tool_name(plugin, &tool.declaration.name), tool);
        }
    }
}

/// What every host reaches beyond its plugin: the sessions, and the engine's producer registrations.
#[derive(Clone)]
pub struct PluginContext {
    pub sessions: SessionRouter,
    pub producers: Arc<crate::producers::ProducerRegistry>,
    /// The largest producer message body (`[limits] max_input_bytes`, as for `run.start`).
    pub max_body_bytes: usize,
}

impl crate::producers::PluginRecoverySource for PluginDirectory {
    /// A plugin's handshake is per process, not per session: every session sees the same states.
    fn recovery_states(&self, _session_id: &str) -> Vec<PluginRecoveryState> {
        PluginDirectory::recovery_states(self)
    }
}

/// The running hosts, started with the engine and stopped with it.
#[derive(Default)]
pub struct PluginHosts {
    hosts: Vec<Addr<PluginHost>>,
}

impl PluginHosts {
    /// Starts a host per enabled plugin (each starts its process at once); disabled ones are listed as such.
    pub fn start(
        configs: &BTreeMap<String, PluginConfig>,
        directory: Arc<PluginDirectory>,
        context: PluginContext,
    ) -> Self {
        let mut hosts = Vec::new();
        for (name, config) in configs {
            if !config.enabled {
                directory.set_status(name, PluginRecoveryStatus::Disabled);
                tracing::info!(plugin = %name, "plugin disabled in config.toml");
                continue;
            }
            directory.set_status(name, PluginRecoveryStatus::Starting);
            let host = PluginHost::new(name.clone(), config.clone(), directory.clone(), context.clone());
            hosts.push(host.start());
        }
        PluginHosts { hosts }
    }

    /// Stops every plugin (`plugin/shutdown`, then SIGKILL after its grace), all at once.
    pub async fn shutdown(&self) {
        let stops = self.hosts.iter().map(|host| host.send(Shutdown));
        futures::future::join_all(stops).await;
    }
}
