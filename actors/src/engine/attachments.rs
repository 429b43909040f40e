//! `session.attachment` (troupe extension): the bytes of a file an input attached, so a client can show it (the
//! web console's thumbnails). Read from the data directory's artifacts on a blocking thread, bounded as a run
//! reads them.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use troupe_protocol::RpcError;
use troupe_protocol::types::attachment::{AttachmentType, SessionAttachmentParams, SessionAttachmentResult};
use troupe_runtime::input_files::read_stored_attachment;

use super::Engine;
use crate::error::EngineError;
use crate::session_supervisor::IndexedMeta;

impl Engine {
    pub(super) async fn read_attachment(
        &self,
        params: SessionAttachmentParams,
    ) -> Result<SessionAttachmentResult, RpcError> {
        let SessionAttachmentParams { session_id, path } = params;
        // An unknown session is `session_not_found`, as for every session method.
        self.supervisor_ask(IndexedMeta { session_id }).await??;
        let data_dir = self.services.data_dir.clone();
        let wanted = path.clone();
        let bytes = tokio::task::spawn_blocking(move || read_stored_attachment(&data_dir, &wanted))
            .await
            .map_err(|error| EngineError::Internal { detail: format!("reading the attachment failed: {error}") })?
            .map_err(EngineError::ReadAttachment)?;
        let mime_type = AttachmentType::sniff(&bytes).map_or("application/octet-stream", AttachmentType::mime_type);
        Ok(SessionAttachmentResult {
            path,
            mime_type: mime_type.to_owned(),
            size: bytes.len() as u64,
            data: STANDARD.encode(&bytes),
        })
    }
}
