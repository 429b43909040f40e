//! The files a client attaches to a run's input or a steer: checked, then stored as content-addressed artifacts.
//!
//! [`check_attachments`] is pure: it decodes each file's base64, bounds the count and the total size
//! ([`MAX_INPUT_ATTACHMENTS`], [`MAX_INPUT_ATTACHMENT_BYTES`]), and compares the declared MIME type with what the
//! first bytes say, so a renamed file or a type no vendor takes is refused before anything is written.
//! [`store_attachments`] (blocking) writes each as `<data_dir>/artifacts/<sha-256>.<extension>` through a
//! temporary file that is fsynced and renamed, the directory fsynced after, before the event naming it is appended:
//! an event never names a file a crash could have lost. The same bytes are one file, whoever sends them, so a fork
//! and a redelivered request name the same artifact. Runs read them back like any artifact
//! ([`crate::model::attachments`]).

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest as _, Sha256};
use troupe_protocol::types::attachment::{
    AttachedFile, AttachmentType, InputAttachment, MAX_ATTACHMENT_NAME_BYTES, MAX_INPUT_ATTACHMENT_BYTES,
    MAX_INPUT_ATTACHMENTS, valid_attachment_name,
};

use crate::data_dir::{Durability, replace_file};
use crate::error::RuntimeError;
use crate::model::attachments::ARTIFACTS_DIR;

/// Why the attachments of a request are refused. Messages name the attachment by position and name, never quote
/// its bytes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AttachmentError {
    #[error("{count} files are attached; at most {MAX_INPUT_ATTACHMENTS} are accepted per input")]
    TooMany { count: usize },
    #[error(
        "the attached files are {bytes} bytes together; at most {MAX_INPUT_ATTACHMENT_BYTES} (10 MiB) are accepted \
         per input"
    )]
    TooLarge { bytes: usize },
    #[error(
        "attachment {index}: the name must be 1 to {MAX_ATTACHMENT_NAME_BYTES} bytes without `/` or control \
         characters"
    )]
    BadName { index: usize },
    #[error("attachment {index} ({name}): `data` is not standard base64")]
    NotBase64 { index: usize, name: String },
    #[error("attachment {index} ({name}) is empty")]
    Empty { index: usize, name: String },
    #[error(
        "attachment {index} ({name}): {mime_type} is not accepted; the accepted types are {}",
        AttachmentType::SUPPORTED
    )]
    Unsupported { index: usize, name: String, mime_type: String },
    #[error("attachment {index} ({name}) is declared {declared} but its bytes are {}", found.map_or("of no accepted type", |found| found.mime_type()))]
    Mismatch { index: usize, name: String, declared: &'static str, found: Option<AttachmentType> },
}

impl AttachmentError {
    /// The position of the attachment at fault, when one is.
    pub fn index(&self) -> Option<usize> {
        match self {
            AttachmentError::TooMany { .. } | AttachmentError::TooLarge { .. } => None,
            AttachmentError::BadName { index }
            | AttachmentError::NotBase64 { index, .. }
            | AttachmentError::Empty { index, .. }
            | AttachmentError::Unsupported { index, .. }
            | AttachmentError::Mismatch { index, .. } => Some(*index),
        }
    }

    /// The bound that was passed, when one was.
    pub fn limit(&self) -> Option<usize> {
        match self {
            AttachmentError::TooMany { .. } => Some(MAX_INPUT_ATTACHMENTS),
            AttachmentError::TooLarge { .. } => Some(MAX_INPUT_ATTACHMENT_BYTES),
            _ => None,
        }
    }
}

/// An attachment that passed the checks: its bytes and what its artifact will be.
#[derive(Clone, PartialEq, Eq)]
pub struct CheckedAttachment {
    pub file: AttachedFile,
    pub bytes: Vec<u8>,
}

impl std::fmt::Debug for CheckedAttachment {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("CheckedAttachment").field("file", &self.file).finish_non_exhaustive()
    }
}

/// Decodes and checks a request's attachments, in order. Pure.
pub fn check_attachments(attachments: &[InputAttachment]) -> Result<Vec<CheckedAttachment>, AttachmentError> {
    if attachments.len() > MAX_INPUT_ATTACHMENTS {
        return Err(AttachmentError::TooMany { count: attachments.len() });
    }
    // Bounded before decoding: base64 is 4 bytes for every 3.
    let encoded: usize = attachments.iter().map(|attachment| attachment.data.len() / 4 * 3).sum();
    if encoded > MAX_INPUT_ATTACHMENT_BYTES + 3 * attachments.len() {
        return Err(AttachmentError::TooLarge { bytes: encoded });
    }
    let mut checked = Vec::with_capacity(attachments.len());
    let mut total = 0;
    for (index, attachment) in attachments.iter().enumerate() {
        if !valid_attachment_name(&attachment.name) {
            return Err(AttachmentError::BadName { index });
        }
        let name = attachment.name.clone();
        let Some(declared) = AttachmentType::of_mime(&attachment.mime_type) else {
            let mime_type: String = attachment.mime_type.chars().take(80).filter(|c| !c.is_control()).collect();
            return Err(AttachmentError::Unsupported { index, name, mime_type });
        };
        let bytes = STANDARD
            .decode(attachment.data.trim())
            .map_err(|_| AttachmentError::NotBase64 { index, name: name.clone() })?;
        if bytes.is_empty() {
            return Err(AttachmentError::Empty { index, name });
        }
        let found = AttachmentType::sniff(&bytes);
        if found != Some(declared) {
            return Err(AttachmentError::Mismatch { index, name, declared: declared.mime_type(), found });
        }
        total += bytes.len();
        if total > MAX_INPUT_ATTACHMENT_BYTES {
            return Err(AttachmentError::TooLarge { bytes: total });
        }
        let file = AttachedFile {
            path: artifact_path(&bytes, declared.extension()),
            mime_type: declared.mime_type().to_owned(),
            name,
            size: bytes.len() as u64,
        };
        checked.push(CheckedAttachment { file, bytes });
    }
    Ok(checked)
}

/// Writes each checked attachment as its artifact, durably (the file, its rename and the directory fsynced), and
/// returns the references in order. Blocking: call it on a blocking thread.
pub fn store_attachments(
    data_dir: &Path,
    attachments: Vec<CheckedAttachment>,
) -> Result<Vec<AttachedFile>, RuntimeError> {
    crate::blocking::assert_may_block();
    if attachments.is_empty() {
        return Ok(Vec::new());
    }
    let dir = data_dir.join(ARTIFACTS_DIR);
    ensure_dir(&dir)?;
    let mut stored = Vec::with_capacity(attachments.len());
    for attachment in attachments {
        // The name is the content's digest: writing it again, for a redelivery or another session, writes the
        // same bytes, so the file is replaced whole rather than trusted as found. The new file is also young, which
        // keeps an old unnamed one that is reused from being collected before its event is appended
        // (`artifact_collection`).
        replace_file(&data_dir.join(&attachment.file.path), &attachment.bytes, Durability::Durable)?;
        stored.push(attachment.file);
    }
    Ok(stored)
}

/// The content-addressed path of an artifact holding `bytes`: `artifacts/<sha-256>.<extension>`.
pub fn artifact_path(bytes: &[u8], extension: &str) -> String {
    let digest = Sha256::digest(bytes);
    let hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("{ARTIFACTS_DIR}/{hex}.{extension}")
}

/// Writes `bytes` as the artifact at their content-addressed path ([`artifact_path`]) durably, as attachments are
/// written (a new file even when the same bytes are there, so it is young for [`crate::artifact_collection`]), and
/// returns that path: a tool's output (an MCP server's image) is stored like a client's input. Blocking.
pub fn store_artifact(data_dir: &Path, bytes: &[u8], extension: &str) -> Result<String, RuntimeError> {
    crate::blocking::assert_may_block();
    ensure_dir(&data_dir.join(ARTIFACTS_DIR))?;
    let path = artifact_path(bytes, extension);
    replace_file(&data_dir.join(&path), bytes, Durability::Durable)?;
    Ok(path)
}

/// Why a stored attachment cannot be read back.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReadAttachmentError {
    #[error("`{path}` is not an attachment's path: {reason}")]
    BadPath { path: String, reason: troupe_protocol::types::run::FileReferenceError },
    #[error("no stored attachment `{path}`: {reason}")]
    NotFound { path: String, reason: String },
}

impl ReadAttachmentError {
    /// The refusal of a path the asking session's log does not name: word for word what a missing file gets, so
    /// that a client learns nothing of the files other sessions attached (not even that they exist).
    pub fn not_named(path: &str) -> ReadAttachmentError {
        let missing = std::io::Error::from_raw_os_error(libc::ENOENT);
        ReadAttachmentError::NotFound { path: path.to_owned(), reason: crate::model::attachments::unopenable(&missing) }
    }
}

/// The bytes of a stored artifact (`artifacts/<name>`), read without following a symlink and bounded as a run
/// reads them. Blocking: call it on a blocking thread.
pub fn read_stored_attachment(data_dir: &Path, path: &str) -> Result<Vec<u8>, ReadAttachmentError> {
    crate::blocking::assert_may_block();
    let name = troupe_protocol::types::run::artifact_name(path)
        .map_err(|reason| ReadAttachmentError::BadPath { path: path.to_owned(), reason })?;
    crate::model::attachments::read_artifact(&data_dir.join(ARTIFACTS_DIR).join(name))
        .map_err(|reason| ReadAttachmentError::NotFound { path: path.to_owned(), reason })
}

/// Creates the artifacts directory (private) when it is missing, its creation made durable.
fn ensure_dir(dir: &Path) -> Result<(), RuntimeError> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(crate::data_dir::PRIVATE_DIR_MODE).create(dir) {
        Ok(()) => match dir.parent() {
            Some(parent) => crate::data_dir::sync_dir(parent),
            None => Ok(()),
        },
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(RuntimeError::io("create", dir, error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";

    fn attachment(name: &str, mime_type: &str, bytes: &[u8]) -> InputAttachment {
        InputAttachment { name: name.into(), mime_type: mime_type.into(), data: STANDARD.encode(bytes) }
    }

    #[test]
    fn checked_attachments_are_named_by_their_digest_and_typed_by_their_bytes() {
        let checked =
            check_attachments(&[attachment("a.png", "image/png", PNG), attachment("b", "image/jpg", b"\xff\xd8\xff")])
                .unwrap();
        assert_eq!(checked[0].file.mime_type, "image/png");
        assert!(checked[0].file.path.starts_with("artifacts/") && checked[0].file.path.ends_with(".png"));
        assert_eq!(checked[0].file.path.len(), "artifacts/".len() + 64 + ".png".len());
        assert_eq!(checked[1].file.mime_type, "image/jpeg");
        assert_eq!(checked[1].file.size, 3);
    }

    #[test]
    fn every_refusal_says_which_attachment_and_why() {
        let refused = |attachments: &[InputAttachment]| check_attachments(attachments).unwrap_err();
        assert!(matches!(
            refused(&[attachment("x.png", "image/jpeg", PNG)]),
            AttachmentError::Mismatch { index: 0, declared: "image/jpeg", found: Some(AttachmentType::Png), .. }
        ));
        assert!(matches!(refused(&[attachment("x.txt", "text/plain", b"hi")]), AttachmentError::Unsupported { .. }));
        let message = refused(&[attachment("x.tif", "image/tiff", b"II*")]).to_string();
        assert!(message.contains("image/png, image/jpeg, image/gif, image/webp, application/pdf"), "{message}");
        let bad = InputAttachment { name: "x.png".into(), mime_type: "image/png".into(), data: "***".into() };
        assert!(matches!(refused(&[bad]), AttachmentError::NotBase64 { index: 0, .. }));
        assert!(matches!(refused(&[attachment("a/b.png", "image/png", PNG)]), AttachmentError::BadName { index: 0 }));
        assert!(matches!(refused(&[attachment("e.png", "image/png", b"")]), AttachmentError::Empty { .. }));
        let many = vec![attachment("a.png", "image/png", PNG); MAX_INPUT_ATTACHMENTS + 1];
        assert_eq!(refused(&many), AttachmentError::TooMany { count: MAX_INPUT_ATTACHMENTS + 1 });
        let mut big = PNG.to_vec();
        big.resize(MAX_INPUT_ATTACHMENT_BYTES / 2 + 1, 0);
        let two = [attachment("a.png", "image/png", &big), attachment("b.png", "image/png", &big)];
        assert!(matches!(refused(&two), AttachmentError::TooLarge { .. }));
    }

    #[test]
    fn stored_attachments_are_whole_files_under_their_digest() {
        let data_dir = tempfile::tempdir().unwrap();
        let checked = check_attachments(&[attachment("a.png", "image/png", PNG)]).unwrap();
        let stored = store_attachments(data_dir.path(), checked.clone()).unwrap();
        assert_eq!(std::fs::read(data_dir.path().join(&stored[0].path)).unwrap(), PNG);
        // Again: the same file, no temporary left behind.
        assert_eq!(store_attachments(data_dir.path(), checked).unwrap(), stored);
        assert_eq!(std::fs::read_dir(data_dir.path().join(ARTIFACTS_DIR)).unwrap().count(), 1);
        crate::model::attachments::check_artifact(data_dir.path(), &stored[0].path).unwrap();
        assert_eq!(read_stored_attachment(data_dir.path(), &stored[0].path).unwrap(), PNG);
        assert!(matches!(
            read_stored_attachment(data_dir.path(), "artifacts/../config.toml"),
            Err(ReadAttachmentError::BadPath { .. })
        ));
        let missing = read_stored_attachment(data_dir.path(), "artifacts/missing.png").unwrap_err();
        assert_eq!(missing, ReadAttachmentError::not_named("artifacts/missing.png"), "the same words either way");
    }
}
