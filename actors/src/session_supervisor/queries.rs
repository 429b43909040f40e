//! What the engine asks of the index, answered without loading any log: one session's metadata, the root
//! sessions, a session's children and tree, and how many sessions are loaded.

use std::collections::HashSet;

use actix::prelude::*;
use troupe_protocol::types::common::{SessionMeta, SessionOrigin};
use troupe_protocol::types::session::{PermissionMode, SessionChildSummary, SessionTreeNode};

use super::SessionSupervisor;
use crate::error::EngineError;
use crate::ports::supervisor::GetTree;

/// How many sessions known on disk are loaded and how many are not (`daemon.status`).
#[derive(Message)]
#[rtype(result = "SessionCounts")]
pub struct CountSessions;

/// The answer to [`CountSessions`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionCounts {
    pub live: usize,
    pub hibernated: usize,
}

/// The indexed metadata of one session, without loading it.
#[derive(Message)]
#[rtype(result = "Result<SessionMeta, EngineError>")]
pub struct IndexedMeta {
    pub session_id: String,
}

/// Root sessions, most recently active first, optionally only those with this exact cwd; archived ones only
/// when asked.
#[derive(Message)]
#[rtype(result = "Vec<SessionMeta>")]
pub struct ListRootSessions {
    pub cwd: Option<String>,
    pub include_archived: bool,
}

#[derive(Message)]
#[rtype(result = "Result<Vec<SessionChildSummary>, EngineError>")]
pub struct ListChildren {
    pub session_id: String,
}

impl SessionSupervisor {
    /// Every root session on disk.
    pub(crate) fn root_session_ids(&self) -> Vec<String> {
        let roots = self.index.values().filter(|meta| meta.origin == SessionOrigin::Root);
        roots.map(|meta| meta.session_id.clone()).collect()
    }

    pub(super) fn meta(&self, session_id: &str) -> Result<&SessionMeta, EngineError> {
        self.index.get(session_id).ok_or_else(|| self.unknown_session(session_id))
    }

    pub(super) fn root_of(&self, session_id: &str) -> Result<String, EngineError> {
        let meta = self.meta(session_id)?;
        Ok(meta.origin.root_session_id().unwrap_or(&meta.session_id).to_owned())
    }

    fn tree(&self, session_id: &str, visited: &mut HashSet<String>) -> Result<SessionTreeNode, EngineError> {
        let session = self.served_meta(self.meta(session_id)?, self.directory_behind());
        visited.insert(session_id.to_owned());
        let mut children = Vec::new();
        for child in self.children.get(session_id).into_iter().flatten() {
            // A damaged index must not loop forever.
            if !visited.contains(child) {
                children.push(self.tree(child, visited)?);
            }
        }
        Ok(SessionTreeNode { session, children })
    }
}

impl Handler<IndexedMeta> for SessionSupervisor {
    type Result = Result<SessionMeta, EngineError>;

    fn handle(&mut self, message: IndexedMeta, _: &mut Context<Self>) -> Self::Result {
        Ok(self.served_meta(self.meta(&message.session_id)?, self.directory_behind()))
    }
}

impl Handler<CountSessions> for SessionSupervisor {
    type Result = MessageResult<CountSessions>;

    fn handle(&mut self, _: CountSessions, _: &mut Context<Self>) -> Self::Result {
        let live = self.index.keys().filter(|session_id| self.live.contains_key(*session_id)).count();
        MessageResult(SessionCounts { live, hibernated: self.index.len() - live })
    }
}

impl Handler<ListRootSessions> for SessionSupervisor {
    type Result = MessageResult<ListRootSessions>;

    fn handle(&mut self, message: ListRootSessions, _: &mut Context<Self>) -> Self::Result {
        let behind = self.directory_behind();
        let mut sessions: Vec<SessionMeta> = self
            .index
            .values()
            .filter(|meta| meta.origin == SessionOrigin::Root)
            .filter(|meta| message.cwd.as_ref().is_none_or(|cwd| &meta.cwd == cwd))
            .filter(|meta| message.include_archived || !meta.archived)
            .map(|meta| self.served_meta(meta, behind))
            .collect();
        // RFC 3339 UTC timestamps of one format sort chronologically as strings.
        sessions
            .sort_by(|a, b| b.last_activity_at.cmp(&a.last_activity_at).then_with(|| a.session_id.cmp(&b.session_id)));
        MessageResult(sessions)
    }
}

impl Handler<ListChildren> for SessionSupervisor {
    type Result = Result<Vec<SessionChildSummary>, EngineError>;

    fn handle(&mut self, message: ListChildren, _: &mut Context<Self>) -> Self::Result {
        self.meta(&message.session_id)?;
        Ok(self
            .children
            .get(&message.session_id)
            .into_iter()
            .flatten()
            .filter_map(|child| self.index.get(child))
            .map(|meta| SessionChildSummary {
                session_id: meta.session_id.clone(),
                agent: meta.creation_selection.agent.clone(),
                title: meta.title.clone(),
                status: meta.status,
            })
            .collect())
    }
}

impl Handler<GetTree> for SessionSupervisor {
    type Result = Result<(SessionTreeNode, PermissionMode), EngineError>;

    fn handle(&mut self, message: GetTree, _: &mut Context<Self>) -> Self::Result {
        let tree = self.tree(&message.session_id, &mut HashSet::new())?;
        let root = self.root_of(&message.session_id)?;
        Ok((tree, self.approvals.mode(&root)))
    }
}
