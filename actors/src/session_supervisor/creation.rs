//! New root sessions: `session.create` (a log whose first event is `session_created`) and `session.fork` (a log
//! that starts with another session's prefix). The supervisor starts the new session's actor and indexes the session
//! once its log is durable. Child sessions are created in `children.rs`.

use actix::prelude::*;
use troupe_protocol::types::common::{RunSelection, SessionMeta, SessionOrigin};
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::origin::Origin;
use troupe_runtime::clock::{new_id, now_rfc3339};

use super::SessionSupervisor;
use crate::error::EngineError;
use crate::session_actor::{GetMeta, Opening};

/// Creates a root session and replies once its log is durable.
#[derive(Message)]
#[rtype(result = "Result<SessionMeta, EngineError>")]
pub struct CreateSession {
    pub selection: RunSelection,
    pub cwd: String,
}

impl Handler<CreateSession> for SessionSupervisor {
    type Result = ResponseActFuture<Self, Result<SessionMeta, EngineError>>;

    fn handle(&mut self, message: CreateSession, ctx: &mut Context<Self>) -> Self::Result {
        let session_id = new_id();
        let first = StoredEvent {
            session_id: session_id.clone(),
            run_id: None,
            seq: 1,
            timestamp: now_rfc3339(),
            origin: Some(Origin::User.to_string()),
            payload: EventPayload::SessionCreated {
                origin: SessionOrigin::Root,
                cwd: message.cwd,
                selection: message.selection,
            },
        };
        self.start_new_session(session_id, Opening::Create { first: Box::new(first) }, ctx)
    }
}

impl SessionSupervisor {
    /// Starts the actor of a session that is not on disk yet and indexes the session once its log is durable.
    pub(crate) fn start_new_session(
        &mut self,
        session_id: String,
        opening: Opening,
        ctx: &mut Context<Self>,
    ) -> ResponseActFuture<Self, Result<SessionMeta, EngineError>> {
        let addr = self.start_actor(&session_id, opening, ctx).addr;
        Box::pin(addr.send(GetMeta).into_actor(self).map(move |reply, supervisor, _| {
            let created = reply.unwrap_or_else(|_| {
                Err(EngineError::Unavailable {
                    session_id: session_id.clone(),
                    detail: "the new session stopped while starting".into(),
                })
            });
            // The reply names the node that hosts the session, as its listing does (in a cluster).
            let created = created.map(|mut meta| {
                meta.node = meta.node.or_else(|| supervisor.own_node());
                meta
            });
            match &created {
                Ok(meta) => supervisor.index_meta(meta.clone()),
                Err(_) => {
                    supervisor.live.remove(&session_id);
                }
            }
            created
        }))
    }
}

/// `session.fork`: a new root session whose log starts with `source`'s prefix; replies once it is durable.
#[derive(Message)]
#[rtype(result = "Result<SessionMeta, EngineError>")]
pub struct ForkSession {
    pub source: troupe_runtime::fork::ForkSource,
}

impl Handler<ForkSession> for SessionSupervisor {
    type Result = ResponseActFuture<Self, Result<SessionMeta, EngineError>>;

    fn handle(&mut self, message: ForkSession, ctx: &mut Context<Self>) -> Self::Result {
        self.start_new_session(new_id(), Opening::Fork { source: Box::new(message.source) }, ctx)
    }
}
