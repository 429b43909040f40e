//! `session.archive` and `session.delete` (troupe extensions): both act on whole trees, named by their root.
//!
//! Archiving is a durable event of the root session (`session_actor/admin.rs`); deleting is the supervisor's
//! (`session_supervisor/removal.rs`).

use troupe_protocol::RpcError;
use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::session::{SessionArchiveParams, SessionDeleteResult, SessionResult};

use super::Engine;
use crate::error::EngineError;
use crate::session_actor::SetArchived;
use crate::session_supervisor::{DeleteTree, IndexedMeta};

impl Engine {
    pub(super) async fn archive_session(&self, params: SessionArchiveParams) -> Result<SessionResult, RpcError> {
        let meta = self.supervisor_ask(IndexedMeta { session_id: params.session_id.clone() }).await??;
        if let Some(root_session_id) = meta.origin.root_session_id() {
            return Err(EngineError::ChildSession {
                session_id: params.session_id,
                root_session_id: root_session_id.to_owned(),
                action: "archiving",
            }
            .into());
        }
        let archived = params.archived;
        let session = self.ask_session(&params.session_id, || SetArchived { archived }).await?;
        Ok(SessionResult { session })
    }

    pub(super) async fn delete_session(&self, params: SessionIdParams) -> Result<SessionDeleteResult, RpcError> {
        let deleted_session_ids = self.supervisor_ask(DeleteTree { session_id: params.session_id }).await??;
        Ok(SessionDeleteResult { deleted_session_ids })
    }
}
