//! `PluginHost`: one actor per enabled plugin. It starts the process, runs the `plugin/initialize` handshake
//! (the version checked exactly, the name equal to the config key), offers the declared tools, sends
//! `plugin/recovery/start`, pings the plugin while it runs, restarts it with backoff when it exits or misbehaves,
//! and stops it at daemon stop (`plugin/shutdown`, then SIGKILL after the grace).
//!
//! Every connection has a generation; messages about an older process are ignored, so a late line or exit of a
//! killed process never touches its successor. A failed start or an answer that breaks the protocol never
//! reaches the daemon beyond this actor: the plugin is marked failed or restarted, and tool calls waiting on it
//! get an error result at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::EngineError;
use actix::prelude::*;
use serde_json::json;
use tokio::sync::oneshot;
use troupe_protocol::types::plugin::{EXTENSION_VERSION, ExtensionCapabilities, PluginInitializeParams, methods};
use troupe_protocol::types::producers::PluginRecoveryStatus;
use troupe_runtime::config::PluginConfig;

use super::PluginContext;
use super::limits::EmitLimiter;
use super::peer::{Incoming, Peer};
use super::process;
use crate::plugin_tools::PluginDirectory;

mod calls;
mod handshake;
mod pump;

/// The first restart delay; doubled after each start that did not last, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A plugin that ran this long counts as healthy again: its next restart starts from the first delay.
const HEALTHY_AFTER: Duration = Duration::from_secs(60);
/// How often a ready plugin is pinged; a ping unanswered within the startup timeout restarts it.
const PING_EVERY: Duration = Duration::from_secs(15);
/// Requests of one plugin being handled at once; the pump reads no further line while all are taken, so a flood
/// slows the plugin down at its pipe instead of growing the daemon's memory.
const MAX_IN_FLIGHT: usize = 32;
/// Consecutive starts that never became ready before the status says `failed` (restarts go on).
const FAILED_AFTER: u32 = 3;

/// Stops the plugin for good: `plugin/shutdown`, then SIGKILL after the grace. Replies once it exited.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Shutdown;

/// A message from the plugin (not an answer). It holds one of the plugin's [`MAX_IN_FLIGHT`] permits until it is
/// answered.
#[derive(Message)]
#[rtype(result = "()")]
struct FromPlugin {
    generation: u64,
    incoming: Incoming,
    permit: tokio::sync::OwnedSemaphorePermit,
}

/// The plugin broke the framing (a line too long or not UTF-8).
#[derive(Message)]
#[rtype(result = "()")]
struct Garbage {
    generation: u64,
    reason: String,
}

/// The process of `generation` exited.
#[derive(Message)]
#[rtype(result = "()")]
struct Exited {
    generation: u64,
    status: String,
}

/// The running process.
struct Connection {
    generation: u64,
    peer: Peer,
    /// Kills the process (its pump task waits for it to exit, then reports `Exited`).
    kill: Option<oneshot::Sender<()>>,
    /// Set when `plugin/initialize` succeeded.
    ready_at: Option<Instant>,
    capabilities: ExtensionCapabilities,
    tools: Vec<String>,
}

pub struct PluginHost {
    name: String,
    config: PluginConfig,
    directory: Arc<PluginDirectory>,
    pub(super) context: PluginContext,
    connection: Option<Connection>,
    generation: u64,
    /// Consecutive starts that did not last [`HEALTHY_AFTER`].
    failures: u32,
    /// The plugin answered initialize in a way a restart cannot fix (wrong version or name): not restarted.
    permanently_failed: bool,
    stopping: bool,
    exit_waiters: Vec<oneshot::Sender<()>>,
    pub(super) limiter: EmitLimiter,
}

impl PluginHost {
    pub fn new(name: String, config: PluginConfig, directory: Arc<PluginDirectory>, context: PluginContext) -> Self {
        PluginHost {
            name,
            config,
            directory,
            context,
            connection: None,
            generation: 0,
            failures: 0,
            permanently_failed: false,
            stopping: false,
            exit_waiters: Vec::new(),
            limiter: EmitLimiter::default(),
        }
    }

    fn set_status(&self, status: PluginRecoveryStatus, why: &str) {
        let previous = self.directory.set_status(&self.name, status);
        if previous != Some(status) {
            tracing::info!(plugin = %self.name, ?status, "plugin status: {why}");
        }
    }

    /// The peer of the running process of `generation`, if it is still the current one.
    pub(super) fn peer_of(&self, generation: u64) -> Option<&Peer> {
        self.connection.as_ref().filter(|connection| connection.generation == generation).map(|c| &c.peer)
    }

    pub(super) fn is_ready(&self, generation: u64) -> bool {
        self.connection.as_ref().is_some_and(|c| c.generation == generation && c.ready_at.is_some())
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    pub(super) fn recovery_completed(&self, generation: u64, ready: bool, detail: Option<&str>) {
        if !self.is_ready(generation) {
            return;
        }
        if ready {
            self.set_status(PluginRecoveryStatus::Ready, "recovery completed");
        } else {
            tracing::warn!(plugin = %self.name, detail = detail.unwrap_or(""), "the plugin reported a failed recovery");
            self.set_status(PluginRecoveryStatus::Failed, "recovery failed");
        }
    }

    fn launch(&mut self, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        self.generation += 1;
        let generation = self.generation;
        // A plugin that keeps failing stays `failed` while it is retried, until a start becomes ready.
        if self.failures < FAILED_AFTER {
            self.set_status(PluginRecoveryStatus::Starting, "starting");
        }
        let spawned = match process::spawn(&self.name, &self.config) {
            Ok(spawned) => spawned,
            Err(error) => {
                tracing::warn!(plugin = %self.name, %error, "the plugin could not be started");
                self.schedule_restart(ctx);
                return;
            }
        };
        let peer = Peer::new(spawned.stdin);
        let (kill, killed) = oneshot::channel();
        self.connection = Some(Connection {
            generation,
            peer: peer.clone(),
            kill: Some(kill),
            ready_at: None,
            capabilities: ExtensionCapabilities::default(),
            tools: Vec::new(),
        });
        tokio::spawn(pump::pump(ctx.address(), generation, peer.clone(), spawned.child, spawned.stdout, killed));
        let params = PluginInitializeParams {
            protocol_version: EXTENSION_VERSION.to_owned(),
            engine_version: env!("CARGO_PKG_VERSION").to_owned(),
            capabilities: ExtensionCapabilities { tools: true, producer_messaging: true },
        };
        let timeout = self.config.startup_timeout();
        let initialize = async move { peer.request(methods::INITIALIZE, &params, timeout).await };
        ctx.spawn(initialize.into_actor(self).map(move |answer, host, ctx| host.initialized(ctx, generation, answer)));
    }
    fn ping_later(&self, ctx: &mut Context<Self>, generation: u64) {
        ctx.run_later(PING_EVERY, move |host, ctx| {
            let Some(peer) = host.peer_of(generation).cloned() else { return };
            let timeout = host.config.startup_timeout();
            let ping = async move { peer.request(methods::PING, &json!({}), timeout).await };
            ctx.spawn(ping.into_actor(host).map(move |answer, host, ctx| {
                if host.peer_of(generation).is_none() {
                    return;
                }
                match answer {
                    Ok(_) => host.ping_later(ctx, generation),
                    Err(error) => {
                        tracing::warn!(plugin = %host.name, %error, "plugin/ping failed; restarting the plugin");
                        host.kill();
                    }
                }
            }));
        });
    }

    /// Kills the current process; its exit is reported as usual.
    fn kill(&mut self) {
        if let Some(kill) = self.connection.as_mut().and_then(|connection| connection.kill.take()) {
            let _ = kill.send(());
        }
    }

    fn schedule_restart(&mut self, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        if self.permanently_failed {
            self.set_status(PluginRecoveryStatus::Failed, "not restarted: fix the plugin or its config");
            return;
        }
        self.failures = self.failures.saturating_add(1);
        if self.failures >= FAILED_AFTER {
            self.set_status(PluginRecoveryStatus::Failed, "it keeps exiting; restarting with backoff");
        } else {
            self.set_status(PluginRecoveryStatus::Starting, "restarting");
        }
        let delay = FIRST_BACKOFF.saturating_mul(1 << (self.failures - 1).min(8)).min(MAX_BACKOFF);
        tracing::info!(plugin = %self.name, ?delay, failures = self.failures, "restarting the plugin");
        ctx.run_later(delay, |host, ctx| host.launch(ctx));
    }
}

impl Actor for PluginHost {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.launch(ctx);
    }
}

impl Handler<Exited> for PluginHost {
    type Result = ();

    fn handle(&mut self, message: Exited, ctx: &mut Context<Self>) {
        if self.connection.as_ref().is_none_or(|connection| connection.generation != message.generation) {
            return;
        }
        let connection = self.connection.take();
        let lasted = connection.as_ref().and_then(|c| c.ready_at).is_some_and(|at| at.elapsed() >= HEALTHY_AFTER);
        if lasted {
            self.failures = 0;
        }
        self.directory.set_tools(&self.name, Vec::new());
        super::producers::plugin_exited(self);
        for waiter in self.exit_waiters.drain(..) {
            let _ = waiter.send(());
        }
        if self.stopping {
            tracing::info!(plugin = %self.name, status = %message.status, "plugin stopped");
            return;
        }
        tracing::warn!(plugin = %self.name, status = %message.status, "plugin exited");
        self.schedule_restart(ctx);
    }
}

impl Handler<Garbage> for PluginHost {
    type Result = ();

    fn handle(&mut self, message: Garbage, _: &mut Context<Self>) {
        if self.peer_of(message.generation).is_some() {
            tracing::warn!(plugin = %self.name, reason = %message.reason, "the plugin wrote garbage on stdout; restarting it");
            self.kill();
        }
    }
}

impl Handler<FromPlugin> for PluginHost {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, message: FromPlugin, _: &mut Context<Self>) -> Self::Result {
        let generation = message.generation;
        let permit = message.permit;
        let Some(peer) = self.peer_of(generation).cloned() else { return Box::pin(actix::fut::ready(())) };
        match message.incoming {
            Incoming::Request { id, method, params } => {
                let answer = if self.is_ready(generation) {
                    super::requests::handle(self, generation, &method, params)
                } else {
                    Box::pin(futures::future::ready(Err(EngineError::PluginNotInitialized.into())))
                };
                // An answer the plugin does not read within the startup timeout is dropped (its permit freed) and
                // the plugin, which no longer reads its stdin, is restarted.
                let wait = self.config.startup_timeout();
                let answering = async move {
                    let delivered = peer.respond(id, answer.await, wait).await;
                    drop(permit);
                    delivered
                };
                Box::pin(answering.into_actor(self).map(move |delivered, host, _| {
                    // Once per process: the other answers it left unread end the same way.
                    let live = host.connection.as_ref().is_some_and(|c| c.generation == generation && c.kill.is_some());
                    if !delivered && live {
                        tracing::warn!(plugin = %host.name, "the plugin does not read its stdin; restarting it");
                        host.kill();
                    }
                }))
            }
            Incoming::Notification { method, .. } => {
                tracing::debug!(plugin = %self.name, method = %method.chars().take(64).collect::<String>(), "ignored a notification");
                Box::pin(actix::fut::ready(()))
            }
            Incoming::Invalid { reason } => {
                tracing::warn!(plugin = %self.name, %reason, "the plugin broke the protocol; restarting it");
                self.kill();
                Box::pin(actix::fut::ready(()))
            }
        }
    }
}

impl Handler<Shutdown> for PluginHost {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) -> Self::Result {
        self.stopping = true;
        let Some(connection) = self.connection.as_ref() else { return Box::pin(async {}) };
        connection.peer.notify(methods::SHUTDOWN, &json!({}));
        let (sender, exited) = oneshot::channel();
        self.exit_waiters.push(sender);
        let grace = self.config.shutdown_grace();
        let generation = connection.generation;
        ctx.run_later(grace, move |host, _| {
            if host.peer_of(generation).is_some() {
                tracing::warn!(plugin = %host.name, "the plugin did not exit within its shutdown grace; killing it");
                host.kill();
            }
        });
        Box::pin(async move {
            let _ = tokio::time::timeout(grace + Duration::from_secs(5), exited).await;
        })
    }
}
