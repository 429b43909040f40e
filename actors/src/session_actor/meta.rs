//! The session's metadata: `session.get` when the engine asks the actor, renames (idempotent by
//! `client_rename_id`), and publishing the metadata of every durable batch for `session.get` and the supervisor's
//! index.

use actix::prelude::*;
use troupe_protocol::types::common::SessionMeta;
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::origin::Origin;
use troupe_protocol::types::session::TitleChange;
use troupe_runtime::session_state::{SessionState, normalize_title};

use super::SessionActor;
use crate::error::EngineError;
use crate::ports::supervisor::SessionMetaChanged;

/// The session's metadata.
#[derive(Message)]
#[rtype(result = "Result<SessionMeta, EngineError>")]
pub struct GetMeta;

/// Sets, clears or resets the title; idempotent by `client_rename_id`. Replies once the event is durable.
#[derive(Message)]
#[rtype(result = "Result<SessionMeta, EngineError>")]
pub struct Rename {
    pub client_rename_id: String,
    pub change: TitleChange,
}

impl SessionActor {
    /// Publishes the metadata for `session.get` and tells the supervisor's index.
    pub(super) fn report_meta(&self) {
        if let Some(state) = &self.state {
            let meta = state.meta();
            self.published.publish(meta.clone());
            self.supervisor.do_send(SessionMetaChanged { meta });
        }
    }

    /// Publishes the metadata to `published` (the engine's view of this live session) from now on.
    pub fn publishing_to(mut self, published: crate::published_meta::PublishedMeta) -> Self {
        self.published = published;
        self
    }

    /// Accepts a rename, or recognizes its redelivery; returns the `seq` whose durability answers it.
    pub(super) fn accept_rename(&mut self, ctx: &mut Context<Self>, message: Rename) -> Result<u64, EngineError> {
        self.ready_state()?;
        let change = match message.change {
            TitleChange::Set { title } => TitleChange::Set {
                title: normalize_title(&title).map_err(|reason| EngineError::InvalidTitle {
                    session_id: self.session_id.clone(),
                    client_rename_id: message.client_rename_id.clone(),
                    reason,
                })?,
            },
            other => other,
        };
        let recorded = self.state.as_ref().and_then(|state| state.recorded_rename(&message.client_rename_id));
        if let Some(recorded) = recorded {
            if recorded.change != change {
                return Err(EngineError::RenameIdempotencyConflict {
                    session_id: self.session_id.clone(),
                    client_rename_id: message.client_rename_id,
                });
            }
            // A redelivery: answered like the original, once the original is durable.
            return Ok(recorded.seq);
        }
        let title = match &change {
            TitleChange::Set { title } => Some(title.clone()),
            TitleChange::Clear | TitleChange::Reset => None,
        };
        if change != TitleChange::Reset {
            // A client's title wins over an automatic one still being asked for.
            self.cancel_title_job();
        }
        let payload = EventPayload::SessionTitleCommitted {
            title,
            change: (&change).into(),
            client_rename_id: message.client_rename_id,
        };
        self.append(ctx, None, Some(Origin::User), payload)
    }
}

impl Handler<GetMeta> for SessionActor {
    type Result = Result<SessionMeta, EngineError>;

    fn handle(&mut self, _: GetMeta, _: &mut Context<Self>) -> Self::Result {
        Ok(self.ready_state()?.meta())
    }
}

impl Handler<Rename> for SessionActor {
    type Result = ResponseFuture<Result<SessionMeta, EngineError>>;

    fn handle(&mut self, message: Rename, ctx: &mut Context<Self>) -> Self::Result {
        let durable = self.accept_rename(ctx, message).map(|seq| self.when_durable(seq));
        let meta = self.state.as_ref().map(SessionState::meta);
        let session_id = self.session_id.clone();
        Box::pin(async move {
            durable?
                .await
                .map_err(|_| EngineError::Unavailable { session_id, detail: "the session stopped".into() })??;
            meta.ok_or(EngineError::ShuttingDown)
        })
    }
}
