//! The cluster's session directory in the supervisor's index: this node's sessions are published to it, and the
//! sessions other nodes host are indexed from it, so that `session.list` shows every session of the cluster (each
//! with its `node`) and a request for another node's session reaches its session actor here, whose opening is
//! refused with the hosting node's name (the request is then forwarded there), or takes the session over when that
//! node's lease expired.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use parking_lot::Mutex;
use tokio::sync::oneshot;
use troupe_protocol::types::common::SessionMeta;
use troupe_runtime::session_directory::{DirectoryChange, SessionDirectory};

use super::SessionSupervisor;

/// Gives the supervisor the cluster's directory; it publishes its sessions there from now on and indexes the other
/// nodes' sessions.
#[derive(Message)]
#[rtype(result = "()")]
pub struct InstallDirectory {
    pub directory: Arc<dyn SessionDirectory>,
    /// When this node takes over a dead node's sessions (`takeover.rs`).
    pub takeover: troupe_runtime::config::cluster::Takeover,
}

/// A change the directory's watch saw.
#[derive(Message)]
#[rtype(result = "()")]
struct DirectoryChanged(DirectoryChange);

/// How long a starting node waits for the directory's current entries before it serves without them (they then
/// arrive one by one).
const FIRST_LOAD_WITHIN: Duration = Duration::from_secs(5);

impl Handler<InstallDirectory> for SessionSupervisor {
    type Result = ();

    /// Starts the watch and indexes the directory's current entries before anything else is handled (`ctx.wait`):
    /// a request for another node's session right after this node starts finds it. Later changes come as messages.
    fn handle(&mut self, message: InstallDirectory, ctx: &mut Context<Self>) {
        let supervisor = ctx.address();
        let (loaded, first_load) = oneshot::channel();
        let first: FirstLoad = Arc::new(Mutex::new(Some((Vec::new(), loaded))));
        message.directory.watch(Box::new(move |change| {
            let mut first = first.lock();
            match (first.take(), change) {
                (Some((entries, loaded)), DirectoryChange::CaughtUp) => {
                    // Too late for the first load (it gave up waiting): they come as messages, in order.
                    if let Err(entries) = loaded.send(entries) {
                        for change in entries {
                            supervisor.do_send(DirectoryChanged(change));
                        }
                        supervisor.do_send(DirectoryChanged(DirectoryChange::CaughtUp));
                    }
                }
                (Some((mut entries, loaded)), change) => {
                    entries.push(change);
                    *first = Some((entries, loaded));
                }
                (None, change) => supervisor.do_send(DirectoryChanged(change)),
            }
        }));
        // What this node hosts was indexed from its own disk: the directory hears of it now.
        let own_node = message.directory.node().to_owned();
        for meta in self.index.values_mut().filter(|meta| meta.node.is_none()) {
            message.directory.publish(meta);
            meta.node = Some(own_node.clone());
        }
        self.directory = Some(message.directory);
        // Answers about other nodes' sessions depend on the directory's state: only this actor gives them.
        self.view.turn_off();
        if message.takeover == troupe_runtime::config::cluster::Takeover::AtOnce {
            self.take_over_at_once(ctx);
        }
        let first_load = async move { tokio::time::timeout(FIRST_LOAD_WITHIN, first_load).await };
        ctx.wait(first_load.into_actor(self).map(|loaded, supervisor, _| match loaded {
            Ok(Ok(entries)) => {
                tracing::info!(entries = entries.len(), "the cluster's session directory is loaded");
                for change in entries {
                    supervisor.directory_changed(change);
                }
                supervisor.directory_loaded = true;
            }
            _ => tracing::warn!("the cluster's session directory did not load in time; its entries come as they can"),
        }));
    }
}

/// The entries a watch delivered before its `CaughtUp`, and where to hand them over; `None` once handed over.
type FirstLoad = Arc<Mutex<Option<(Vec<DirectoryChange>, oneshot::Sender<Vec<DirectoryChange>>)>>>;

impl Handler<DirectoryChanged> for SessionSupervisor {
    type Result = ();

    fn handle(&mut self, DirectoryChanged(change): DirectoryChanged, _: &mut Context<Self>) {
        self.directory_changed(change);
    }
}

impl SessionSupervisor {
    /// [`open`](SessionSupervisor::open), and in a cluster, for a session this node does not know yet (created on
    /// another node a moment ago, before the watch delivered it), the directory's entry read now, then opened.
    pub(super) fn open_or_look_up(
        &mut self,
        session_id: String,
        ctx: &mut Context<Self>,
    ) -> ResponseActFuture<Self, Result<crate::session_supervisor::LiveSession, crate::error::EngineError>> {
        let opened = self.open(&session_id, ctx);
        let directory = match (&opened, &self.directory) {
            (Err(crate::error::EngineError::SessionNotFound { .. }), Some(directory)) => directory.clone(),
            _ => return Box::pin(fut::ready(opened)),
        };
        let lookup = directory.lookup(&session_id);
        Box::pin(lookup.into_actor(self).map(move |found, supervisor, ctx| match found {
            Ok(Some(entry)) if entry.meta.session_id == session_id => {
                supervisor.directory_changed(DirectoryChange::Put { meta: Box::new(entry.meta), node: entry.node });
                supervisor.open(&session_id, ctx)
            }
            Ok(_) => opened,
            // Not known here, and the directory cannot say now (NATS down, or electing a leader): not a
            // `session_not_found`, which a client would take as final.
            Err(detail) => Err(crate::error::EngineError::ClusterUnavailable { session_id, detail }),
        }))
    }

    fn directory_changed(&mut self, change: DirectoryChange) {
        let Some(own_node) = self.own_node() else { return };
        match change {
            DirectoryChange::Put { mut meta, node } => {
                // This node's own sessions are known better from their actors; a session live here is this
                // node's, whatever an older entry says.
                if node == own_node || self.live.contains_key(&meta.session_id) {
                    return;
                }
                meta.node = Some(node);
                self.index_meta(*meta);
            }
            DirectoryChange::Removed { session_id } => {
                if self.hosted_elsewhere(&session_id).is_some() {
                    self.forget_session(&session_id);
                }
            }
            DirectoryChange::CaughtUp => self.directory_loaded = true,
        }
    }

    /// A session this node does not know while the cluster's directory is still loading may exist elsewhere: the
    /// client should retry, not take `session_not_found` for an answer.
    pub(super) fn unknown_session(&self, session_id: &str) -> crate::error::EngineError {
        match &self.directory {
            Some(_) if !self.directory_loaded => crate::error::EngineError::ClusterUnavailable {
                session_id: session_id.to_owned(),
                detail: "this node is still loading the cluster's session directory".to_owned(),
            },
            _ => crate::error::EngineError::SessionNotFound { session_id: session_id.to_owned() },
        }
    }

    /// The name this node's sessions carry in listings: `None` on a single node.
    pub(super) fn own_node(&self) -> Option<String> {
        self.directory.as_ref().map(|directory| directory.node().to_owned())
    }

    /// The node that hosts `session_id` when it is another one (as the directory last said); `None` on a single node
    /// and for this node's sessions.
    pub(super) fn hosted_elsewhere(&self, session_id: &str) -> Option<String> {
        let own_node = self.own_node()?;
        let node = self.index.get(session_id)?.node.as_ref()?;
        (*node != own_node && !self.live.contains_key(session_id)).then(|| node.clone())
    }

    /// Whether what the index holds of other nodes' sessions may be behind: the directory cannot be followed now.
    pub(super) fn directory_behind(&self) -> bool {
        self.directory.as_ref().is_some_and(|directory| !directory.is_current())
    }

    /// `meta` as this node answers it: marked `may_be_stale` when another node hosts it and `behind`
    /// ([`directory_behind`](Self::directory_behind)), and with a live session's newest progress.
    pub(super) fn served_meta(&self, meta: &SessionMeta, behind: bool) -> SessionMeta {
        let mut meta = meta.clone();
        meta.may_be_stale = behind && self.hosted_elsewhere(&meta.session_id).is_some();
        // A live session reports a batch that only moved its progress within 100 ms (`session_actor/meta.rs`);
        // what it published at that batch is newer than the index until then.
        if let Some(live) = self.live.get(&meta.session_id)
            && let Some((last_event_seq, last_activity_at)) = live.meta.progress()
            && last_event_seq > meta.last_event_seq
        {
            meta.last_event_seq = last_event_seq;
            meta.last_activity_at = last_activity_at;
        }
        meta
    }

    /// Publishes a session this node hosts to the cluster's directory (nothing on a single node).
    pub(super) fn publish_to_directory(&self, meta: &SessionMeta) {
        if let Some(directory) = &self.directory {
            directory.publish(meta);
        }
    }

    /// Takes a deleted session out of the cluster's directory.
    pub(super) fn remove_from_directory(&self, session_id: &str) {
        if let Some(directory) = &self.directory {
            directory.remove(session_id);
        }
    }
}
