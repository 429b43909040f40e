//! `session.delete` (troupe extension): a root session and its whole tree leave the disk and every index.
//!
//! The supervisor handles the deletion as one atomic step (no other message of its mailbox runs meanwhile, so no
//! session of the tree can be opened again halfway through):
//!
//! 1. every session of the tree gets an actor (a hibernated one is loaded) and is sealed (`session_actor/admin.rs`):
//!    a session with an active run, a compaction or an active goal refuses, and then the sessions already sealed
//!    serve again and the request fails with `session_busy`; a sealed session answers `session_not_found` to
//!    everything and has made all it accepted durable;
//! 2. the actors retire: their live subscribers get their `gap` notice (a resubscription finds no session) and they
//!    stop without writing their metadata cache;
//! 3. on a blocking thread, each directory is renamed to `.<id>.delete` (descendants first, the root last), the
//!    sessions directory is fsynced, and only then are the staged directories removed. A crash leaves either the
//!    session in place or nothing visible: the start's scan removes staged directories left behind;
//!    Then the blobs of the change records (`troupe_runtime::changes`) that no remaining session names are removed
//!    (a blob another session still names stays);
//! 4. the sessions leave the index, the children lists, the live registry, the usage index (so `usage.global`
//!    and `agent.usage` count the sessions that exist, before and after a restart alike) and the artifact index,
//!    and the tree's permission mode is forgotten; a collection of the artifacts no session names follows soon
//!    (`artifacts`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use actix::prelude::*;
use troupe_runtime::usage_book::UsageSummary;

use super::SessionSupervisor;
use crate::error::EngineError;
use crate::session_actor::{Opening, Retire, Seal, SessionActor, Unseal};

/// The suffix of a session directory being deleted: `sessions/.<id>.delete`.
pub const DELETE_DIR_SUFFIX: &str = ".delete";

/// How long a session of the tree may take to seal (finish its pending writes) before the deletion gives up.
const SEAL_TIMEOUT: Duration = Duration::from_secs(30);

/// Deletes a root session and its tree; replies with the ids deleted, the root first.
#[derive(Message)]
#[rtype(result = "Result<Vec<String>, EngineError>")]
pub struct DeleteTree {
    pub session_id: String,
}

impl SessionSupervisor {
    /// The tree's session ids, the root first, each session before its descendants.
    fn tree_ids(&self, root: &str) -> Vec<String> {
        let mut ids = vec![root.to_owned()];
        let mut next = 0;
        while next < ids.len() {
            let children = self.children.get(&ids[next]).into_iter().flatten();
            let new: Vec<String> = children.filter(|child| !ids.contains(child)).cloned().collect();
            ids.extend(new);
            next += 1;
        }
        ids
    }

    /// The session's live actor, or a new one loading its log.
    fn actor_for(&mut self, session_id: &str, ctx: &mut Context<Self>) -> Addr<SessionActor> {
        if let Some(live) = self.live.get(session_id)
            && live.addr.connected()
        {
            return live.addr.clone();
        }
        self.start_actor(session_id, Opening::Load, ctx).addr
    }

    /// Drops a deleted session from every book.
    pub(super) fn forget_session(&mut self, session_id: &str) {
        if let Some(meta) = self.index.remove(session_id)
            && let Some(parent) = meta.origin.parent_session_id()
            && let Some(siblings) = self.children.get_mut(parent)
        {
            siblings.retain(|sibling| sibling != session_id);
        }
        self.view.remove(session_id);
        self.children.remove(session_id);
        self.usage.set(session_id, UsageSummary::default());
        self.artifacts.forget(session_id);
        self.live.remove(session_id);
    }

    /// Drops a session deleted here from every book and from the cluster's directory.
    fn forget_deleted(&mut self, session_id: &str) {
        self.forget_session(session_id);
        self.remove_from_directory(session_id);
    }
}

impl Handler<DeleteTree> for SessionSupervisor {
    type Result = AtomicResponse<Self, Result<Vec<String>, EngineError>>;

    fn handle(&mut self, message: DeleteTree, ctx: &mut Context<Self>) -> Self::Result {
        let root = match self.meta(&message.session_id) {
            Err(error) => return AtomicResponse::new(Box::pin(fut::ready(Err(error)))),
            Ok(meta) => match meta.origin.root_session_id() {
                Some(root_session_id) => {
                    let error = EngineError::ChildSession {
                        session_id: message.session_id,
                        root_session_id: root_session_id.to_owned(),
                        action: "deletion",
                    };
                    return AtomicResponse::new(Box::pin(fut::ready(Err(error))));
                }
                None => message.session_id,
            },
        };
        // In a cluster, a tree another node hosts is deleted there (the request is sent on to it).
        if let Some(node) = self.hosted_elsewhere(&root) {
            let error = EngineError::SessionHostedElsewhere { session_id: root, node: Some(node) };
            return AtomicResponse::new(Box::pin(fut::ready(Err(error))));
        }
        let replica = self.run_context.as_ref().and_then(|context| context.services.log_replica.clone());
        let changes = self.run_context.as_ref().map(|context| context.services.changes.clone());
        let ids = self.tree_ids(&root);
        let actors: Vec<Addr<SessionActor>> = ids.iter().map(|id| self.actor_for(id, ctx)).collect();
        let sessions_dir = self.data_dir.sessions_dir();
        let seal_root = root.clone();
        let sealed = async move {
            let mut sealed = Vec::new();
            let mut refusal = None;
            for addr in &actors {
                let seal = addr.send(Seal { root_session_id: seal_root.clone() });
                match tokio::time::timeout(SEAL_TIMEOUT, seal).await {
                    Ok(Ok(Ok(()))) => sealed.push(addr.clone()),
                    Ok(Ok(Err(error))) => {
                        refusal = Some(error);
                        break;
                    }
                    // The actor stopped before it was sealed (it failed to open, or hibernated idle): nothing of it
                    // is live any more.
                    Ok(Err(_)) => {}
                    Err(_) => {
                        refusal = Some(EngineError::Unavailable {
                            session_id: seal_root.clone(),
                            detail: "a session of the tree did not settle in time; nothing was deleted, try again"
                                .into(),
                        });
                        break;
                    }
                }
            }
            if let Some(error) = refusal {
                for addr in &sealed {
                    addr.do_send(Unseal);
                }
                return Err(error);
            }
            for addr in &sealed {
                // Awaited, so that no actor of the tree is left running when its directory goes.
                let _ = addr.send(Retire).await;
            }
            let leaves_first: Vec<String> = ids.iter().rev().cloned().collect();
            tokio::task::spawn_blocking(move || {
                let staged = stage_removal(&sessions_dir, leaves_first);
                // The cluster's copy of each removed log goes too; one that cannot be removed now is logged: the
                // session is gone from every listing, and its events are unreachable without it.
                for session_id in staged.removed.iter().filter(|_| replica.is_some()) {
                    if let Some(Err(error)) = replica.as_ref().map(|replica| replica.remove(session_id)) {
                        tracing::warn!(%session_id, %error, "could not remove a deleted session's events from the cluster");
                    }
                }
                // The deleted sessions' journals are gone: what only they named goes too. A failure leaves blobs
                // that the next deletion collects.
                match changes.map(|changes| changes.collect_garbage()) {
                    Some(Ok(removed)) if removed > 0 => tracing::info!(removed, "removed unreferenced change blobs"),
                    Some(Err(error)) => tracing::warn!(%error, "could not collect the change blobs"),
                    _ => {}
                }
                staged
            })
            .await
                .map_err(|error| EngineError::Internal { detail: format!("the deletion thread failed: {error}") })
        };
        AtomicResponse::new(Box::pin(sealed.into_actor(self).map(move |outcome, supervisor, ctx| {
            let staged = outcome?;
            for session_id in &staged.removed {
                supervisor.forget_deleted(session_id);
            }
            if !staged.removed.is_empty() {
                supervisor.collect_after_deletion(ctx);
            }
            if let Some(detail) = staged.error {
                tracing::warn!(session_id = %root, %detail, "a deletion stopped part way");
                return Err(EngineError::Storage { session_id: root, detail });
            }
            supervisor.approvals.forget_mode(&root);
            tracing::info!(session_id = %root, sessions = staged.removed.len(), "deleted a session tree");
            let mut deleted = staged.removed;
            deleted.reverse();
            Ok(deleted)
        })))
    }
}

/// What the blocking step did: the sessions whose directory is gone (or staged), and the error that stopped it.
struct Staged {
    removed: Vec<String>,
    error: Option<String>,
}

/// Renames each session directory to its staging name (in the order given), fsyncs the sessions directory, then
/// removes the staged directories. A directory already missing counts as removed.
fn stage_removal(sessions_dir: &Path, session_ids: Vec<String>) -> Staged {
    troupe_runtime::blocking::assert_may_block();
    let mut staged: Vec<PathBuf> = Vec::new();
    let mut removed = Vec::new();
    let mut error = None;
    for session_id in session_ids {
        let from = sessions_dir.join(&session_id);
        let to = sessions_dir.join(format!(".{session_id}{DELETE_DIR_SUFFIX}"));
        match std::fs::rename(&from, &to) {
            Ok(()) => staged.push(to),
            Err(failure) if failure.kind() == std::io::ErrorKind::NotFound => {}
            Err(failure) => {
                error = Some(format!("cannot move {} aside: {failure}", from.display()));
                break;
            }
        }
        removed.push(session_id);
    }
    if let Err(failure) = std::fs::File::open(sessions_dir).and_then(|dir| dir.sync_all()) {
        tracing::warn!(path = %sessions_dir.display(), error = %failure, "could not sync the sessions directory");
    }
    for dir in staged {
        if let Err(failure) = std::fs::remove_dir_all(&dir) {
            // Invisible already; the next start removes it.
            tracing::warn!(path = %dir.display(), error = %failure, "could not remove a deleted session's directory");
        }
    }
    Staged { removed, error }
}

/// Whether a directory name in `sessions/` is a deletion's staging directory (the start's scan removes those a
/// crash left behind).
pub fn is_deletion_staging(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(DELETE_DIR_SUFFIX)
}
