//! The cluster's session directory in the supervisor's index: this node's sessions are published to it, and the
//! sessions other nodes host are indexed from it, so that `session.list` shows every session of the cluster (each
//! with its `node`) and a request for another node's session reaches its session actor here, whose opening is
//! refused with the hosting node's name (the request is then forwarded there), or takes the session over when that
//! node's lease expired.

use std::sync::Arc;

use actix::prelude::*;
use troupe_runtime::session_directory::{DirectoryChange, SessionDirectory};

use super::SessionSupervisor;

/// Gives the supervisor the cluster's directory; it publishes its sessions there from now on and indexes the other
/// nodes' sessions.
#[derive(Message)]
#[rtype(result = "()")]
pub struct InstallDirectory {
    pub directory: Arc<dyn SessionDirectory>,
}

/// A change the directory's watch saw.
#[derive(Message)]
#[rtype(result = "()")]
struct DirectoryChanged(DirectoryChange);

impl Handler<InstallDirectory> for SessionSupervisor {
    type Result = ();

    fn handle(&mut self, message: InstallDirectory, ctx: &mut Context<Self>) {
        let supervisor = ctx.address();
        message.directory.watch(Box::new(move |change| supervisor.do_send(DirectoryChanged(change))));
        // What this node hosts was indexed from its own disk: the directory hears of it now.
        let own_node = message.directory.node().to_owned();
        for meta in self.index.values_mut().filter(|meta| meta.node.is_none()) {
            message.directory.publish(meta);
            meta.node = Some(own_node.clone());
        }
        self.directory = Some(message.directory);
    }
}

impl Handler<DirectoryChanged> for SessionSupervisor {
    type Result = ();

    fn handle(&mut self, DirectoryChanged(change): DirectoryChanged, _: &mut Context<Self>) {
        let Some(own_node) = self.directory.as_ref().map(|directory| directory.node().to_owned()) else { return };
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
                let hosted_elsewhere = self
                    .index
                    .get(&session_id)
                    .is_some_and(|meta| meta.node.as_deref().is_some_and(|node| node != own_node));
                if hosted_elsewhere && !self.live.contains_key(&session_id) {
                    self.forget_session(&session_id);
                }
            }
        }
    }
}

impl SessionSupervisor {
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

    /// Publishes a session this node hosts to the cluster's directory (nothing on a single node).
    pub(super) fn publish_to_directory(&self, meta: &troupe_protocol::types::common::SessionMeta) {
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
