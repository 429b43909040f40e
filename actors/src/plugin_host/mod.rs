//! Plugins: subprocesses configured in `[plugins.<name>]` that speak the extension protocol (version 0.0.6,
//! `docs/plugins.md`) as newline-delimited JSON-RPC 2.0 over their stdin and stdout.
//!
//! - `process`: starting the process (environment cleared apart from the configured `env`) and its stdio framing.
//! - `peer`: the JSON-RPC peer (requests both ways, ids, timeouts).
//! - `host`: the [`PluginHost`] actor, one per enabled plugin: handshake, restarts with backoff, shutdown; the
//!   `plugin/initialize` answer (`host/handshake`), its stdout reader (`host/pump`) and tool calls (`host/calls`).
//! - `requests`: what a plugin may ask (`plugin/emit`, `plugin/recovery/complete`, producer requests);
//!   `limits`: the emit bounds; `producers`: producer messaging.
//!
//! What runs and the engine read of the plugins (their statuses and the ready ones' tools) is the
//! [`PluginDirectory`] of `plugin_tools`, which the hosts write; runs call a plugin's tool through it, by message,
//! without knowing the host actor.

mod host;
mod limits;
mod peer;
mod process;
mod producers;
mod requests;

use std::collections::BTreeMap;
use std::sync::Arc;

use actix::prelude::*;
use troupe_protocol::types::producers::{PluginRecoveryState, PluginRecoveryStatus};
use troupe_runtime::config::PluginConfig;

pub use crate::plugin_tools::{
    CallIdentity, CallTool, PLUGIN_TOOL_PREFIX, PluginCallError, PluginDirectory, PluginTool, ToolRef, model_tool_name,
    plugin_resource,
};
pub use crate::session_router::SessionRouter;
pub use host::{PluginHost, Shutdown};

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
