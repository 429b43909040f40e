//! Child sessions: a run's `delegate` call asks the supervisor for a session in its own session's tree.
//!
//! The supervisor derives the child's place from its index, not from the caller: the root and depth come from
//! the parent's indexed origin, the cwd is the parent's. The child is indexed under its parent once its log is
//! durable, so `session.children` and `session.tree` list it and `session.list` (roots only) does not.
//!
//! A tree holds at most `[delegation] max_sessions_per_tree` sessions besides its root. The count is the indexed
//! descendants of the root plus the children being created (not yet indexed), both kept by this actor and changed
//! in the same step when a creation ends, so concurrent `delegate` calls of any of the tree's runs cannot overshoot.

use actix::prelude::*;
use troupe_protocol::types::common::{SessionMeta, SessionOrigin};
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::origin::Origin;
use troupe_runtime::clock::{new_id, now_rfc3339};

use super::SessionSupervisor;
use crate::ports::supervisor::{ChildRefused, CreateChildSession};
use crate::session_actor::Opening;

impl Handler<CreateChildSession> for SessionSupervisor {
    type Result = ResponseActFuture<Self, Result<SessionMeta, ChildRefused>>;

    fn handle(&mut self, message: CreateChildSession, ctx: &mut Context<Self>) -> Self::Result {
        let parent = match self.meta(&message.parent_session_id) {
            Ok(parent) => parent.clone(),
            Err(error) => return Box::pin(actix::fut::ready(Err(error.into()))),
        };
        let (root_session_id, depth) = match &parent.origin {
            SessionOrigin::Root => (parent.session_id.clone(), 1),
            SessionOrigin::Delegated { root_session_id, depth, .. } => (root_session_id.clone(), depth + 1),
        };
        // A child being created is indexed when its actor reports it, which may come before its creation ends:
        // counted once, whichever step it is at.
        let creating = self.creating_children.get(&root_session_id);
        let creating = creating.map_or(0, |ids| ids.iter().filter(|id| !self.index.contains_key(*id)).count());
        let sessions = self.descendants_and_self(&root_session_id).len() - 1 + creating;
        if sessions >= message.max_sessions_per_tree as usize {
            let refused = ChildRefused::TreeFull { root_session_id, sessions, limit: message.max_sessions_per_tree };
            return Box::pin(actix::fut::ready(Err(refused)));
        }
        let tree = root_session_id.clone();
        let cwd = parent.cwd.clone();
        let session_id = new_id();
        self.creating_children.entry(root_session_id.clone()).or_default().insert(session_id.clone());
        let creating_id = session_id.clone();
        let first = StoredEvent {
            session_id: session_id.clone(),
            run_id: None,
            seq: 1,
            timestamp: now_rfc3339(),
            origin: Some(Origin::DELEGATE.to_string()),
            payload: EventPayload::SessionCreated {
                origin: SessionOrigin::Delegated {
                    root_session_id,
                    parent_session_id: message.parent_session_id,
                    parent_run_id: message.parent_run_id,
                    parent_tool_call_id: message.parent_tool_call_id,
                    depth,
                },
                cwd,
                selection: message.selection,
            },
        };
        let created = self.start_new_session(session_id, Opening::Create { first: Box::new(first) }, ctx);
        Box::pin(created.map(move |created, supervisor, _| {
            if let Some(creating) = supervisor.creating_children.get_mut(&tree) {
                creating.remove(&creating_id);
                if creating.is_empty() {
                    supervisor.creating_children.remove(&tree);
                }
            }
            Ok(created?)
        }))
    }
}
