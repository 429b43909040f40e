//! troupe extension: files a client attaches to a run's input or a steer (`run.start` and `run.steer`'s
//! `attachments`), and the stored files the input's events name (`run_started`, `user_input_*`'s `attachments`).
//!
//! A client sends each file's bytes base64-encoded with its name and MIME type. The daemon checks the bytes are of
//! that type (by their first bytes, not by the name), stores each as a content-addressed artifact
//! (`artifacts/<sha-256>.<extension>`, the directory tool-emitted file parts name) and records the references, so a
//! replay, a restart, a fork or a compaction sees the same files. Only the kinds both OpenAI and Anthropic take are
//! accepted: PNG, JPEG, GIF and WebP images, and PDF.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The most files one input may attach.
pub const MAX_INPUT_ATTACHMENTS: usize = 8;

/// The most bytes (decoded) of all the files one input attaches together. Base64 makes them a third larger on the
/// wire, so with the rest of the request they fit the default 16 MiB frame; each is also sent base64-encoded in
/// every later request of the session.
pub const MAX_INPUT_ATTACHMENT_BYTES: usize = 10 * 1024 * 1024;

/// The longest attachment name, in bytes.
pub const MAX_ATTACHMENT_NAME_BYTES: usize = 255;

/// One file a client attaches (`run.start`/`run.steer` `attachments`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InputAttachment {
    /// The file's name as the user knows it (shown in transcripts and sent to the model): at most 255 bytes, no
    /// control characters, no `/`.
    pub name: String,
    /// One of `image/png`, `image/jpeg`, `image/gif`, `image/webp`, `application/pdf`; the bytes must be of it.
    pub mime_type: String,
    /// The file's bytes, base64 (standard alphabet, padded).
    pub data: String,
}

/// A file an input attached, as its events record it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct AttachedFile {
    /// The stored artifact: `artifacts/<sha-256 in hex>.<extension>`.
    pub path: String,
    pub mime_type: String,
    /// The name the client gave.
    pub name: String,
    /// The file's size in bytes.
    pub size: u64,
}

/// `session.attachment` params: a file a session's input attached, by the `path` its event names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionAttachmentParams {
    pub session_id: String,
    /// `artifacts/<name>`, as an `attachments` entry (or a tool's file part) names it.
    pub path: String,
}

/// `session.attachment` result: the stored file's bytes, for a client to show (an image's thumbnail).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionAttachmentResult {
    pub path: String,
    /// What the bytes are (by their signature); `application/octet-stream` when none of the attachable types.
    pub mime_type: String,
    pub size: u64,
    /// The bytes, base64.
    pub data: String,
}

/// `session.files` params: a folder of the session's cwd, for completing `@path` in a composer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionFilesParams {
    pub session_id: String,
    /// Relative to the session's cwd; omitted or empty for the cwd itself.
    #[serde(default)]
    pub dir: String,
}

/// What a folder entry is: its own type (a symbolic link is not followed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FileEntryKind {
    File,
    Dir,
    Symlink,
    Other,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FileEntry {
    pub name: String,
    pub kind: FileEntryKind,
}

/// `session.files` result: the folder's entries sorted by name, at most 1,000.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionFilesResult {
    pub dir: String,
    pub entries: Vec<FileEntry>,
    /// True when the folder has more entries than were listed.
    pub truncated: bool,
}

/// `session.file` params: an image or a PDF of the session's cwd, read to attach it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionFileParams {
    pub session_id: String,
    /// Relative to the session's cwd.
    pub path: String,
}

/// `session.file` result: the file as an attachment (`name` is its file name), ready for `run.start`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionFileResult {
    pub path: String,
    pub size: u64,
    pub attachment: InputAttachment,
}

/// The kinds of file an input may attach, known by their first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttachmentType {
    Png,
    Jpeg,
    Gif,
    Webp,
    Pdf,
}

impl AttachmentType {
    pub const ALL: [AttachmentType; 5] =
        [AttachmentType::Png, AttachmentType::Jpeg, AttachmentType::Gif, AttachmentType::Webp, AttachmentType::Pdf];

    /// The accepted MIME types, for messages: "image/png, image/jpeg, image/gif, image/webp, application/pdf".
    pub const SUPPORTED: &'static str = "image/png, image/jpeg, image/gif, image/webp, application/pdf";

    pub fn mime_type(self) -> &'static str {
        match self {
            AttachmentType::Png => "image/png",
            AttachmentType::Jpeg => "image/jpeg",
            AttachmentType::Gif => "image/gif",
            AttachmentType::Webp => "image/webp",
            AttachmentType::Pdf => "application/pdf",
        }
    }

    /// The extension of its stored artifact (and what a CLI recognizes a path by).
    pub fn extension(self) -> &'static str {
        match self {
            AttachmentType::Png => "png",
            AttachmentType::Jpeg => "jpg",
            AttachmentType::Gif => "gif",
            AttachmentType::Webp => "webp",
            AttachmentType::Pdf => "pdf",
        }
    }

    /// The type a MIME type names (case and parameters ignored; `image/jpg` is taken for `image/jpeg`).
    pub fn of_mime(mime_type: &str) -> Option<AttachmentType> {
        let essence = mime_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
        match essence.as_str() {
            "image/jpg" => Some(AttachmentType::Jpeg),
            essence => AttachmentType::ALL.into_iter().find(|kind| kind.mime_type() == essence),
        }
    }

    /// The type the bytes are, by their signature; `None` for anything else.
    pub fn sniff(bytes: &[u8]) -> Option<AttachmentType> {
        if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(AttachmentType::Png)
        } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
            Some(AttachmentType::Jpeg)
        } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
            Some(AttachmentType::Gif)
        } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
            Some(AttachmentType::Webp)
        } else if bytes.starts_with(b"%PDF-") {
            Some(AttachmentType::Pdf)
        } else {
            None
        }
    }
}

/// Whether an attachment name is one a transcript can show as is: 1 to 255 bytes, no control or format
/// characters, no `/`.
pub fn valid_attachment_name(name: &str) -> bool {
    !name.trim().is_empty()
        && name.len() <= MAX_ATTACHMENT_NAME_BYTES
        && !name.contains('/')
        && !name.chars().any(|c| c.is_control() || crate::diagnostic::is_format_control(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_known_by_their_signature_and_their_mime_type() {
        assert_eq!(AttachmentType::sniff(b"\x89PNG\r\n\x1a\nrest"), Some(AttachmentType::Png));
        assert_eq!(AttachmentType::sniff(&[0xFF, 0xD8, 0xFF, 0xE0]), Some(AttachmentType::Jpeg));
        assert_eq!(AttachmentType::sniff(b"GIF89a.."), Some(AttachmentType::Gif));
        assert_eq!(AttachmentType::sniff(b"RIFF\0\0\0\0WEBPVP8 "), Some(AttachmentType::Webp));
        assert_eq!(AttachmentType::sniff(b"%PDF-1.7"), Some(AttachmentType::Pdf));
        assert_eq!(AttachmentType::sniff(b"RIFF\0\0\0\0WAVE"), None);
        assert_eq!(AttachmentType::sniff(b"hello"), None);
        assert_eq!(AttachmentType::of_mime("IMAGE/PNG"), Some(AttachmentType::Png));
        assert_eq!(AttachmentType::of_mime("image/jpg"), Some(AttachmentType::Jpeg));
        assert_eq!(AttachmentType::of_mime("application/pdf; x=y"), Some(AttachmentType::Pdf));
        assert_eq!(AttachmentType::of_mime("image/tiff"), None);
    }

    #[test]
    fn names_are_plain() {
        assert!(valid_attachment_name("chart 1.png"));
        for bad in ["", "  ", "a/b.png", "a\nb", "a\u{202e}b", &"x".repeat(256)] {
            assert!(!valid_attachment_name(bad), "{bad:?}");
        }
    }
}
