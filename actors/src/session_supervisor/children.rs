//! Child sessions: a run's `delegate` call asks the supervisor for a session in its own session's tree.
//!
//! The supervisor derives the child's place from its index, not from the caller: the root and depth come from
//! the parent's indexed origin, the cwd is the parent's. The child is indexed under its parent once its log is
//! durable, so `session.children` and `session.tree` list it and `session.list` (roots only) does not.

use actix::prelude::*;
use troupe_protocol::types::common::{RunSelection, SessionMeta, SessionOrigin};
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_runtime::clock::{new_id, now_rfc3339};

use super::SessionSupervisor;
use crate::error::EngineError;
use crate::session_actor::Opening;

/// The origin of the events the engine writes for a delegation in the child's log (its creation, its run's start).
pub const DELEGATE_ORIGIN: &str = "engine:delegate";

/// Creates a child session of `parent_session_id` for the tool call `parent_tool_call_id` of `parent_run_id`, and
/// replies with its metadata once its log is durable.
#[derive(Message)]
#[rtype(result = "Result<SessionMeta, EngineError>")]
pub struct CreateChildSession {
    pub parent_session_id: String,
    pub parent_run_id: String,
    pub parent_tool_call_id: String,
    pub selection: RunSelection,
}

impl Handler<CreateChildSession> for SessionSupervisor {
    type Result = ResponseActFuture<Self, Result<SessionMeta, EngineError>>;

    fn handle(&mut self, message: CreateChildSession, ctx: &mut Context<Self>) -> Self::Result {
        let parent = match self.meta(&message.parent_session_id) {
            Ok(parent) => parent,
            Err(error) => return Box::pin(actix::fut::ready(Err(error))),
        };
        let (root_session_id, depth) = match &parent.origin {
            SessionOrigin::Root => (parent.session_id.clone(), 1),
            SessionOrigin::Delegated { root_session_id, depth, .. } => (root_session_id.clone(), depth + 1),
        };
        let cwd = parent.cwd.clone();
        let session_id = new_id();
        let first = StoredEvent {
            session_id: session_id.clone(),
            run_id: None,
            seq: 1,
            timestamp: now_rfc3339(),
            origin: Some(DELEGATE_ORIGIN.to_owned()),
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
        self.start_new_session(session_id, Opening::Create { first: Box::new(first) }, ctx)
    }
}
