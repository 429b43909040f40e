//! `--attach FILE`: the images and PDFs a prompt carries, read on the client and sent with `run.start` or
//! `run.steer` (the daemon may be on another machine, so it is sent the bytes, not a path).
//!
//! Everything the daemon would refuse is refused here first, in words naming the file and the fix: a file that is
//! missing or not a file, larger than the daemon takes, or of a type it does not take (known by its first bytes,
//! as the daemon knows it, so a renamed file is caught too).

use std::path::{Path, PathBuf};

use anyhow::anyhow;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use troupe_protocol::types::attachment::{
    AttachmentType, InputAttachment, MAX_INPUT_ATTACHMENT_BYTES, MAX_INPUT_ATTACHMENTS,
};

/// Reads each file and makes it an attachment, in order.
pub fn read_attachments(paths: &[PathBuf]) -> anyhow::Result<Vec<InputAttachment>> {
    if paths.len() > MAX_INPUT_ATTACHMENTS {
        return Err(anyhow!(
            "{} files are attached; at most {MAX_INPUT_ATTACHMENTS} can go with one prompt\n  hint: attach fewer \
             files, or send the others with `troupe steer --attach FILE` while the run works",
            paths.len()
        ));
    }
    let mut total = 0;
    let mut attachments = Vec::with_capacity(paths.len());
    for path in paths {
        let bytes = read_one(path)?;
        total += bytes.len();
        if total > MAX_INPUT_ATTACHMENT_BYTES {
            return Err(anyhow!(
                "the attached files are {total} bytes together; at most {} MiB can go with one prompt\n  hint: \
                 attach fewer or smaller files (a screenshot or a single page makes a smaller file)",
                MAX_INPUT_ATTACHMENT_BYTES / (1024 * 1024)
            ));
        }
        let Some(kind) = AttachmentType::sniff(&bytes) else {
            return Err(anyhow!(
                "--attach {}: not an image or PDF the daemon accepts\n  hint: attach PNG, JPEG, GIF, WebP or PDF \
                 files ({}); for text, put its path in the prompt instead",
                path.display(),
                AttachmentType::SUPPORTED
            ));
        };
        attachments.push(InputAttachment {
            name: attachment_name(path),
            mime_type: kind.mime_type().to_owned(),
            data: STANDARD.encode(&bytes),
        });
    }
    Ok(attachments)
}

/// The file's bytes, refused in words when it cannot be attached.
fn read_one(path: &Path) -> anyhow::Result<Vec<u8>> {
    let shown = path.display();
    let metadata = std::fs::metadata(path).map_err(|error| match error.kind() {
        std::io::ErrorKind::NotFound => anyhow!("--attach {shown}: no such file"),
        _ => anyhow!("--attach {shown}: cannot be read ({error})"),
    })?;
    if !metadata.is_file() {
        return Err(anyhow!("--attach {shown}: not a file"));
    }
    if metadata.len() > MAX_INPUT_ATTACHMENT_BYTES as u64 {
        return Err(anyhow!(
            "--attach {shown}: the file is {} bytes; at most {} MiB can be attached\n  hint: attach a smaller file \
             (a screenshot or a single page makes a smaller file)",
            metadata.len(),
            MAX_INPUT_ATTACHMENT_BYTES / (1024 * 1024)
        ));
    }
    std::fs::read(path).map_err(|error| anyhow!("--attach {shown}: cannot be read ({error})"))
}

/// The name the model and the transcripts see: the file's own name, made plain (the daemon refuses control
/// characters and `/`).
fn attachment_name(path: &Path) -> String {
    let name = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    let plain: String = name.chars().filter(|c| !c.is_control()).take(200).collect();
    if plain.trim().is_empty() { "attachment".to_owned() } else { plain }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_read_typed_by_their_bytes_and_refused_in_words() {
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("shot.dat");
        std::fs::write(&png, b"\x89PNG\r\n\x1a\nrest").unwrap();
        let read = read_attachments(std::slice::from_ref(&png)).unwrap();
        assert_eq!((read[0].name.as_str(), read[0].mime_type.as_str()), ("shot.dat", "image/png"));
        assert_eq!(STANDARD.decode(&read[0].data).unwrap(), b"\x89PNG\r\n\x1a\nrest");

        let missing = read_attachments(&[dir.path().join("nope.png")]).unwrap_err().to_string();
        assert!(missing.ends_with("nope.png: no such file"), "{missing}");
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, "hello").unwrap();
        let refused = read_attachments(&[text]).unwrap_err().to_string();
        assert!(refused.contains("not an image or PDF") && refused.contains("application/pdf"), "{refused}");
        let folder = read_attachments(&[dir.path().to_path_buf()]).unwrap_err().to_string();
        assert!(folder.ends_with("not a file"), "{folder}");
        let big = dir.path().join("big.png");
        std::fs::File::create(&big).unwrap().set_len(MAX_INPUT_ATTACHMENT_BYTES as u64 + 1).unwrap();
        let large = read_attachments(&[big]).unwrap_err().to_string();
        assert!(large.contains("at most 10 MiB can be attached"), "{large}");
    }
}
