//! troupe's extensions for attaching files: `session.attachment`, the bytes of a file an input attached, so a
//! client can show it (the web console's thumbnails), read from the data directory's artifacts, and only a file
//! the session's own log names (its session actor answers that: `troupe_runtime::artifact_names`); a path the log
//! does not name gets the very answer a missing file gets, so a client learns nothing of other sessions' files.
//! And `session.files`
//! and `session.file`, a folder of the session's cwd and an image or PDF in it, for completing `@path` in a
//! composer and attaching the file chosen, under the file tools' rules (`troupe_runtime::tools::cwd_files`). All
//! read on a blocking thread.

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use troupe_protocol::RpcError;
use troupe_protocol::types::attachment::{
    AttachmentType, FileEntry, FileEntryKind, InputAttachment, MAX_INPUT_ATTACHMENT_BYTES, SessionAttachmentParams,
    SessionAttachmentResult, SessionFileParams, SessionFileResult, SessionFilesParams, SessionFilesResult,
};
use troupe_runtime::input_files::{ReadAttachmentError, read_stored_attachment};
use troupe_runtime::tools::cwd_files::{CwdEntryKind, list_cwd_dir, read_cwd_file};

use super::Engine;
use crate::error::EngineError;
use crate::session_actor::NamesArtifact;
use crate::session_supervisor::IndexedMeta;

impl Engine {
    pub(super) async fn read_attachment(
        &self,
        params: SessionAttachmentParams,
    ) -> Result<SessionAttachmentResult, RpcError> {
        let SessionAttachmentParams { session_id, path } = params;
        // An unknown session is `session_not_found`, as for every session method; then a path that is no artifact's
        // is refused as such, before anything is asked of the session.
        self.supervisor_ask(IndexedMeta { session_id: session_id.clone() }).await??;
        if let Err(reason) = troupe_protocol::types::run::artifact_name(&path) {
            return Err(EngineError::ReadAttachment(ReadAttachmentError::BadPath { path, reason }).into());
        }
        let wanted = path.clone();
        if !self.router().ask(&session_id, || NamesArtifact { path: wanted.clone() }).await? {
            return Err(EngineError::ReadAttachment(ReadAttachmentError::not_named(&path)).into());
        }
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

    /// `session.files`: a folder of the session's cwd.
    pub(super) async fn list_cwd_files(&self, params: SessionFilesParams) -> Result<SessionFilesResult, RpcError> {
        let SessionFilesParams { session_id, dir } = params;
        let cwd = self.supervisor_ask(IndexedMeta { session_id: session_id.clone() }).await??.cwd;
        let sandbox = self.services.sandbox.clone();
        let wanted = dir.clone();
        let listed = tokio::task::spawn_blocking(move || list_cwd_dir(Path::new(&cwd), &wanted, sandbox.protected()))
            .await
            .map_err(|error| EngineError::Internal { detail: format!("listing the folder failed: {error}") })?
            .map_err(|refusal| EngineError::CwdPathUnusable { session_id, path: dir.clone(), reason: refusal.0 })?;
        let entries = listed
            .entries
            .into_iter()
            .map(|(name, kind)| FileEntry {
                name,
                kind: match kind {
                    CwdEntryKind::File => FileEntryKind::File,
                    CwdEntryKind::Directory => FileEntryKind::Dir,
                    CwdEntryKind::Symlink => FileEntryKind::Symlink,
                    CwdEntryKind::Other => FileEntryKind::Other,
                },
            })
            .collect();
        Ok(SessionFilesResult { dir, entries, truncated: listed.truncated })
    }

    /// `session.file`: an image or a PDF of the session's cwd, as an attachment; any other file is refused with the
    /// accepted types (`invalid_attachment`), so a client inserts its path as text instead.
    pub(super) async fn read_cwd_file(&self, params: SessionFileParams) -> Result<SessionFileResult, RpcError> {
        let SessionFileParams { session_id, path } = params;
        let cwd = self.supervisor_ask(IndexedMeta { session_id: session_id.clone() }).await??.cwd;
        let sandbox = self.services.sandbox.clone();
        let wanted = path.clone();
        let limit = MAX_INPUT_ATTACHMENT_BYTES as u64;
        let bytes =
            tokio::task::spawn_blocking(move || read_cwd_file(Path::new(&cwd), &wanted, sandbox.protected(), limit))
                .await
                .map_err(|error| EngineError::Internal { detail: format!("reading the file failed: {error}") })?
                .map_err(|refusal| EngineError::CwdPathUnusable {
                    session_id,
                    path: path.clone(),
                    reason: refusal.0,
                })?;
        let name =
            Path::new(&path).file_name().map_or_else(|| path.clone(), |name| name.to_string_lossy().into_owned());
        let Some(kind) = AttachmentType::sniff(&bytes) else {
            let reason = troupe_runtime::input_files::AttachmentError::Unsupported {
                index: 0,
                name,
                mime_type: "this file's type".into(),
            };
            return Err(EngineError::InvalidAttachment(reason).into());
        };
        Ok(SessionFileResult {
            path,
            size: bytes.len() as u64,
            attachment: InputAttachment { name, mime_type: kind.mime_type().to_owned(), data: STANDARD.encode(&bytes) },
        })
    }
}
