//! Attachments: the files that tool-emitted messages carry, and how each reaches a model.
//!
//! A file part of a tool-emitted message names a stored artifact, `artifacts/<name>`, a file in the daemon's
//! `<data_dir>/artifacts/` directory. Nothing else is ever read: a part naming any other path (absolute, with
//! `..`, a subdirectory) is not attached, so a log or a tool cannot make the daemon send an arbitrary file to a
//! vendor. Artifacts are read (at most [`MAX_ATTACHMENT_BYTES`], never through a symlink) by
//! [`load_attachments`], on a blocking thread, when a run builds its history; the parts then carry the bytes.
//!
//! Each provider sends what its API accepts ([`AttachmentKind`]): images as image parts, PDFs as file or document
//! parts. Everything else, and every part that could not be read, is sent as a clear text note
//! ([`UserPart::as_prompt_text`](super::UserPart::as_prompt_text)), and a readable UTF-8 text file is inlined in
//! that note, so the model always knows what was attached and why it cannot see it otherwise.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use troupe_protocol::types::run::{FileReferenceError, artifact_name};

use super::{ChatMessage, UserPart};

/// The directory of artifacts, under the data directory, and the prefix of every attachable part path.
pub use troupe_protocol::types::run::ARTIFACTS_DIR;

/// The largest file that is attached. Vendors refuse much larger images (Anthropic: 5 MB each) anyway, and the
/// bytes travel base64-encoded in every request of the run.
pub const MAX_ATTACHMENT_BYTES: u64 = 10 * 1024 * 1024;

/// What a file part holds once a run has looked for its artifact.
#[derive(Clone, PartialEq, Eq, Default)]
pub enum FileContent {
    /// Not looked for yet (history rebuilt from the log and not yet prepared for a request).
    #[default]
    NotLoaded,
    /// The artifact's bytes.
    Loaded(Arc<[u8]>),
    /// Why it could not be attached: a sentence without file contents.
    Unavailable(String),
}

impl std::fmt::Debug for FileContent {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FileContent::NotLoaded => formatter.write_str("NotLoaded"),
            FileContent::Loaded(bytes) => write!(formatter, "Loaded({} bytes)", bytes.len()),
            FileContent::Unavailable(reason) => formatter.debug_tuple("Unavailable").field(reason).finish(),
        }
    }
}

/// How a provider may send a file, by its MIME type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachmentKind {
    /// PNG, JPEG, GIF or WebP: the image formats both OpenAI and Anthropic accept.
    Image,
    /// `application/pdf`: an OpenAI `file` part, an Anthropic `document` block.
    Pdf,
    /// `text/*` and JSON: inlined into the text note.
    Text,
    /// Anything else: a text note only.
    Other,
}

impl AttachmentKind {
    pub fn of(mime_type: &str) -> AttachmentKind {
        let essence = mime_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
        match essence.as_str() {
            "image/png" | "image/jpeg" | "image/gif" | "image/webp" => AttachmentKind::Image,
            "application/pdf" => AttachmentKind::Pdf,
            "application/json" => AttachmentKind::Text,
            other if other.starts_with("text/") => AttachmentKind::Text,
            _ => AttachmentKind::Other,
        }
    }
}

/// Where the artifact a part names lives, or why the part names none.
pub fn artifact_path(data_dir: &Path, part_path: &str) -> Result<PathBuf, String> {
    // The form of a reference is the protocol's (`artifact_name`), so a result refused at the edge and one refused
    // here are refused for the same reason.
    let name = artifact_name(part_path).map_err(|error| error.to_string())?;
    Ok(data_dir.join(ARTIFACTS_DIR).join(name))
}

/// Whether the artifact a part names is there to attach: a regular file (not a symlink) of at most
/// [`MAX_ATTACHMENT_BYTES`]. The check a tool's result gets when it is recorded, so a tool cannot record a reference
/// to nothing; a run still reads the file without following a symlink when it builds its history.
pub fn check_artifact(data_dir: &Path, part_path: &str) -> Result<(), FileReferenceError> {
    let name = artifact_name(part_path)?;
    match std::fs::symlink_metadata(data_dir.join(ARTIFACTS_DIR).join(name)) {
        Ok(metadata) if metadata.is_file() && metadata.len() <= MAX_ATTACHMENT_BYTES => Ok(()),
        _ => Err(FileReferenceError::Unavailable { max_bytes: MAX_ATTACHMENT_BYTES }),
    }
}

/// Reads the artifact of every file part not read yet. Blocking: call it on a blocking thread.
pub fn load_attachments(messages: &mut [ChatMessage], data_dir: &Path) {
    for message in messages {
        let ChatMessage::User { parts } = message else { continue };
        for part in parts {
            if let UserPart::File { path, content: content @ FileContent::NotLoaded, .. } = part {
                *content = match artifact_path(data_dir, path).and_then(|file| read_artifact(&file)) {
                    Ok(bytes) => FileContent::Loaded(bytes.into()),
                    Err(reason) => FileContent::Unavailable(reason),
                };
            }
        }
    }
}

/// The history as sent to a model that does not take files (`[models."<model>"] attachments = false`): every image
/// and PDF part becomes a text note saying it was not attached, so the vendor never meets a part it refuses. A
/// borrowed copy is made only when some part changes.
pub fn without_files(messages: &Arc<Vec<ChatMessage>>, model: &str) -> Arc<Vec<ChatMessage>> {
    let sendable = |part: &UserPart| {
        matches!(part, UserPart::File { mime_type, .. }
            if matches!(AttachmentKind::of(mime_type), AttachmentKind::Image | AttachmentKind::Pdf))
    };
    let any =
        messages.iter().any(|message| matches!(message, ChatMessage::User { parts } if parts.iter().any(sendable)));
    if !any {
        return messages.clone();
    }
    let mut copy = messages.as_ref().clone();
    for message in &mut copy {
        let ChatMessage::User { parts } = message else { continue };
        for part in parts.iter_mut().filter(|part| sendable(part)) {
            if let UserPart::File { content, .. } = part {
                *content = FileContent::Unavailable(format!(
                    "{model} is not sent images or PDFs (`attachments = false` in its [models] entry of config.toml)"
                ));
            }
        }
    }
    Arc::new(copy)
}

/// Reads one artifact without following a symlink, refusing anything but a regular file of bounded size.
pub(crate) fn read_artifact(file: &Path) -> Result<Vec<u8>, String> {
    let opened = crate::regular_file::open_regular(file, crate::regular_file::Links::Refuse).map_err(|error| {
        match error.kind() {
            std::io::ErrorKind::InvalidInput => "the artifact is not a regular file".to_owned(),
            _ => unopenable(&error),
        }
    })?;
    let metadata = opened.metadata().map_err(|error| format!("the artifact cannot be read ({error})"))?;
    if metadata.len() > MAX_ATTACHMENT_BYTES {
        return Err(format!("the artifact is {} bytes; at most {MAX_ATTACHMENT_BYTES} are attached", metadata.len()));
    }
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    // Bounded even if the file grows while it is read.
    opened
        .take(MAX_ATTACHMENT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| format!("the artifact cannot be read ({error})"))?;
    if bytes.len() as u64 > MAX_ATTACHMENT_BYTES {
        return Err(format!("the artifact grew past {MAX_ATTACHMENT_BYTES} bytes while it was read"));
    }
    Ok(bytes)
}

/// Why an artifact could not be opened, in the words [`read_artifact`] uses.
pub(crate) fn unopenable(error: &std::io::Error) -> String {
    format!("the artifact cannot be opened ({error})")
}

/// `data:<mime>;base64,<bytes>`, the form OpenAI takes inline images and files in.
pub(crate) fn data_url(mime_type: &str, bytes: &[u8]) -> String {
    format!("data:{};base64,{}", media_type(mime_type), STANDARD.encode(bytes))
}

pub(crate) fn base64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

/// The MIME type without parameters, lower-cased: what vendors compare against their lists.
pub(crate) fn media_type(mime_type: &str) -> String {
    mime_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase()
}

/// The file name a vendor shows for a part: its `name`, else the artifact's name.
pub(crate) fn file_name<'a>(path: &'a str, name: Option<&'a str>) -> &'a str {
    name.unwrap_or_else(|| path.rsplit('/').next().unwrap_or(path))
}

/// The text note of a file part, for a model that is not sent the file itself.
pub(crate) fn text_note(path: &str, mime_type: &str, name: Option<&str>, content: &FileContent) -> String {
    let label = match name {
        Some(name) => format!("{path} \"{name}\""),
        None => path.to_owned(),
    };
    match content {
        FileContent::NotLoaded => format!("[file: {label} ({mime_type})]"),
        FileContent::Unavailable(reason) => format!("[file: {label} ({mime_type}); not attached: {reason}]"),
        FileContent::Loaded(bytes) => match (AttachmentKind::of(mime_type), std::str::from_utf8(bytes)) {
            (AttachmentKind::Text, Ok(text)) => format!("[file: {label} ({mime_type})]\n{text}"),
            _ => format!("[file: {label} ({mime_type}); not attached: this model is not sent files of this type]"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_artifact_names_are_attachable() {
        let data_dir = Path::new("/data");
        assert_eq!(artifact_path(data_dir, "artifacts/ab12.png").unwrap(), Path::new("/data/artifacts/ab12.png"));
        for bad in ["/etc/passwd", "artifacts/../providers.json", "artifacts/a/b", "artifacts/", "artifacts/.x", "x"] {
            assert!(artifact_path(data_dir, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn kinds_follow_the_mime_essence() {
        assert_eq!(AttachmentKind::of("image/PNG"), AttachmentKind::Image);
        assert_eq!(AttachmentKind::of("application/pdf"), AttachmentKind::Pdf);
        assert_eq!(AttachmentKind::of("text/plain; charset=utf-8"), AttachmentKind::Text);
        assert_eq!(AttachmentKind::of("image/tiff"), AttachmentKind::Other);
    }

    #[test]
    fn loading_reads_artifacts_and_explains_what_it_cannot_read() {
        let data_dir = tempfile::tempdir().unwrap();
        let artifacts = data_dir.path().join(ARTIFACTS_DIR);
        std::fs::create_dir_all(&artifacts).unwrap();
        std::fs::write(artifacts.join("notes.txt"), "hello").unwrap();
        std::os::unix::fs::symlink(artifacts.join("notes.txt"), artifacts.join("link.txt")).unwrap();
        let part = |path: &str| UserPart::File {
            path: path.into(),
            mime_type: "text/plain".into(),
            name: None,
            content: FileContent::NotLoaded,
        };
        let mut messages = vec![ChatMessage::User {
            parts: vec![part("artifacts/notes.txt"), part("artifacts/link.txt"), part("artifacts/missing")],
        }];
        load_attachments(&mut messages, data_dir.path());
        let ChatMessage::User { parts } = &messages[0] else { unreachable!() };
        let texts: Vec<String> = parts.iter().map(UserPart::as_prompt_text).collect();
        assert_eq!(texts[0], "[file: artifacts/notes.txt (text/plain)]\nhello");
        assert!(texts[1].contains("not attached: the artifact cannot be opened"), "{}", texts[1]);
        assert!(texts[2].contains("not attached"), "{}", texts[2]);
    }

    #[test]
    fn a_model_without_files_gets_a_note_for_each_image_and_pdf_and_the_rest_unchanged() {
        let part = |path: &str, mime_type: &str| UserPart::File {
            path: path.into(),
            mime_type: mime_type.into(),
            name: Some("shown".into()),
            content: FileContent::Loaded(Arc::from(&b"bytes"[..])),
        };
        let text_only = Arc::new(vec![ChatMessage::User { parts: vec![UserPart::Text("hi".into())] }]);
        assert!(Arc::ptr_eq(&without_files(&text_only, "openai/m"), &text_only));
        let messages = Arc::new(vec![ChatMessage::User {
            parts: vec![
                part("artifacts/a.png", "image/png"),
                part("artifacts/b.pdf", "application/pdf"),
                part("artifacts/n", "text/plain"),
            ],
        }]);
        let sent = without_files(&messages, "openai/m");
        let ChatMessage::User { parts } = &sent[0] else { unreachable!() };
        let texts: Vec<String> = parts.iter().map(UserPart::as_prompt_text).collect();
        assert_eq!(
            texts[0],
            "[file: artifacts/a.png \"shown\" (image/png); not attached: openai/m is not sent images or PDFs \
             (`attachments = false` in its [models] entry of config.toml)]"
        );
        assert!(texts[1].contains("not attached: openai/m is not sent"), "{}", texts[1]);
        assert_eq!(texts[2], "[file: artifacts/n \"shown\" (text/plain)]\nbytes");
    }
}
