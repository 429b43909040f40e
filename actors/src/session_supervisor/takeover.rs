//! `[cluster] takeover = "at_once"`: this node takes over the sessions of a node that died as soon as their leases
//! expire, without waiting for a client's request. Every [`LOOK_EVERY`], while other nodes' sessions are indexed,
//! it reads which nodes are alive; each session indexed as hosted by a node that is not, and whose workspace is a
//! directory on this machine, is opened here. Opening takes the session's lease, which only one node can: the
//! others' openings are refused (`session_hosted_elsewhere`, now naming the winner) and they leave it. The session
//! actor that opened it appends `run_interrupted` for runs that were in flight, once, as a takeover on request does.
//! A session whose lease has not expired yet is refused too, and tried again at the next look.

use std::path::Path;
use std::time::Duration;

use actix::prelude::*;

use super::SessionSupervisor;
use crate::session_actor::GetMeta;

/// How often this node looks for dead nodes' sessions.
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// How long one look waits for the live nodes before the next look tries again.
const LOOK_WITHIN: Duration = Duration::from_secs(5);

impl SessionSupervisor {
    /// Starts looking for dead nodes' sessions to take over, for as long as the supervisor runs.
    pub(super) fn take_over_at_once(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(LOOK_EVERY, |supervisor, ctx| supervisor.look_for_dead_nodes_sessions(ctx));
    }

    fn look_for_dead_nodes_sessions(&mut self, ctx: &mut Context<Self>) {
        let (Some(directory), Some(own_node)) = (self.directory.clone(), self.own_node()) else { return };
        let hosted_elsewhere = self.index.values().any(|meta| meta.node.as_ref().is_some_and(|node| *node != own_node));
        if self.takeover_looking || !hosted_elsewhere {
            return;
        }
        self.takeover_looking = true;
        let live_nodes = tokio::time::timeout(LOOK_WITHIN, directory.live_nodes());
        let look = live_nodes.into_actor(self).then(move |live, supervisor, _| {
            let candidates: Vec<(String, String)> = match live {
                Ok(Ok(live)) => supervisor
                    .index
                    .values()
                    .filter(|meta| {
                        meta.node.as_ref().is_some_and(|node| *node != own_node && !live.contains(node))
                            && !supervisor.live.contains_key(&meta.session_id)
                    })
                    .map(|meta| (meta.session_id.clone(), meta.cwd.clone()))
                    .collect(),
                Ok(Err(detail)) => {
                    tracing::debug!(%detail, "cannot tell which nodes are alive; no takeover this time");
                    Vec::new()
                }
                Err(_) => {
                    tracing::debug!("the live nodes were not read in time; no takeover this time");
                    Vec::new()
                }
            };
            // Whether a workspace is here is a look at the file system: on a blocking thread.
            let here = tokio::task::spawn_blocking(move || -> Vec<String> {
                candidates.into_iter().filter(|(_, cwd)| Path::new(cwd).is_dir()).map(|(id, _)| id).collect()
            });
            async move { here.await.unwrap_or_default() }.into_actor(supervisor)
        });
        ctx.spawn(look.map(|ids, supervisor, ctx| {
            supervisor.takeover_looking = false;
            for session_id in ids {
                supervisor.take_over(&session_id, ctx);
            }
        }));
    }

    /// Opens `session_id` here and has it loaded (which takes its lease, or is refused).
    fn take_over(&mut self, session_id: &str, ctx: &mut Context<Self>) {
        match self.open(session_id, ctx) {
            Ok(live) => {
                let session_id = session_id.to_owned();
                actix::spawn(async move {
                    match live.addr.send(GetMeta).await {
                        Ok(Ok(_)) => tracing::info!(%session_id, "took over a dead node's session"),
                        Ok(Err(error)) => tracing::debug!(%session_id, %error, "not taken over (yet)"),
                        Err(_) => tracing::debug!(%session_id, "not taken over: its actor stopped"),
                    }
                });
            }
            Err(error) => tracing::debug!(%session_id, %error, "not taken over"),
        }
    }
}
