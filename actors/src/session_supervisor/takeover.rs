//! `[cluster] takeover = "at_once"`: this node takes over the sessions of a node that died as soon as their leases
//! expire, without waiting for a client's request. Every [`LOOK_EVERY`], while other nodes' sessions are indexed,
//! it reads which nodes are alive; each session indexed as hosted by a node that is not, and whose workspace is a
//! directory on this machine, is a candidate. Its lease is read first (one key-value read): one still held is left
//! alone until it expires, so a dead node's sessions cost a read each while their leases run out, not an opening
//! each second; one whose lease can be taken is opened here. Opening takes the lease, which only one node can: the
//! others' openings are refused (`session_hosted_elsewhere`, now naming the winner) and they leave it. The session
//! actor that opened it appends `run_interrupted` for runs that were in flight, once, as a takeover on request does.
//! At most [`CANDIDATES_PER_LOOK`] sessions are read and opened per look, so a large dead node is taken over in
//! steps rather than all at once.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures::future::join_all;

use super::SessionSupervisor;
use crate::session_actor::GetMeta;

/// How often this node looks for dead nodes' sessions.
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// How long one look waits for the live nodes, or for the leases, before the next look tries again.
const LOOK_WITHIN: Duration = Duration::from_secs(5);
/// Sessions whose leases one look reads (and opens, when they can be taken).
const CANDIDATES_PER_LOOK: usize = 32;

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
            let now = Instant::now();
            let dead_nodes_sessions: Vec<(String, String)> = match live {
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
            // A session that is no candidate any more (taken over, or its node came back) needs no reminder.
            let still: HashSet<&str> = dead_nodes_sessions.iter().map(|(id, _)| id.as_str()).collect();
            supervisor.takeover_not_before.retain(|id, _| still.contains(id.as_str()));
            let due: Vec<(String, String)> = dead_nodes_sessions
                .into_iter()
                .filter(|(id, _)| supervisor.takeover_not_before.get(id).is_none_or(|at| *at <= now))
                .take(CANDIDATES_PER_LOOK)
                .collect();
            let directory = directory.clone();
            async move {
                // Whether a workspace is here is a look at the file system: on a blocking thread.
                let here = tokio::task::spawn_blocking(move || -> Vec<String> {
                    due.into_iter().filter(|(_, cwd)| Path::new(cwd).is_dir()).map(|(id, _)| id).collect()
                })
                .await
                .unwrap_or_default();
                let leases = join_all(here.iter().map(|id| directory.lease_remaining(id)));
                let leases = tokio::time::timeout(LOOK_WITHIN, leases).await.unwrap_or_default();
                here.into_iter().zip(leases).collect::<Vec<_>>()
            }
            .into_actor(supervisor)
        });
        ctx.spawn(look.map(|leases, supervisor, ctx| {
            supervisor.takeover_looking = false;
            let now = Instant::now();
            for (session_id, lease) in leases {
                match lease {
                    Ok(None) => supervisor.take_over(&session_id, ctx),
                    Ok(Some(left)) => {
                        supervisor.takeover_not_before.insert(session_id, now + left);
                    }
                    Err(detail) => tracing::debug!(%session_id, %detail, "not taken over this time"),
                }
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
