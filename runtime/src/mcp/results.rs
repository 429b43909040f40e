//! An MCP `tools/call` result as the tool result the model reads and the log keeps: text as the result's text, each
//! image stored as an artifact and attached in an additional message (so a model that takes images sees it), a
//! resource link or an embedded resource as a text line (an embedded text resource with its text), and
//! `isError: true` as an `error` result the model reads.

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use troupe_protocol::types::run::{
    MAX_MESSAGE_FILES, MAX_RESULT_FILES, MessagePart, MessageRole, PersistedToolResult, ToolEmittedMessage,
    ToolResultStatus,
};

use crate::model::attachments::{AttachmentKind, MAX_ATTACHMENT_BYTES};

/// What became of a result's content, before its images are stored: a line per block, in order, those of images
/// written once they are stored.
struct Converted {
    lines: Vec<Option<String>>,
    /// Each image's bytes, MIME type and line.
    images: Vec<(Vec<u8>, String, usize)>,
}

impl Converted {
    fn say(&mut self, line: impl Into<String>) {
        self.lines.push(Some(line.into()));
    }
}

/// The result of one call of `called_as`, its images written to `<data_dir>/artifacts/` (blocking I/O: call it on
/// a blocking thread). The text is cut to `max_output_bytes`, saying so.
pub(super) fn into_result(
    result: CallToolResult,
    called_as: &str,
    data_dir: &Path,
    max_output_bytes: usize,
) -> PersistedToolResult {
    let is_error = result.is_error == Some(true);
    let Converted { mut lines, images } = convert(result);
    let mut parts = Vec::new();
    let mut omitted = 0;
    for (index, (bytes, mime_type, line)) in images.into_iter().enumerate() {
        let shown = index + 1;
        let said = if parts.len() == MAX_RESULT_FILES {
            omitted += 1;
            format!("[image {shown}: {mime_type}, {} bytes, not attached: at most {MAX_RESULT_FILES} are]", bytes.len())
        } else {
            match store_artifact(data_dir, &bytes, &mime_type) {
                Ok(path) => {
                    let said = format!("[image {shown}: {mime_type}, {} bytes, attached as {path}]", bytes.len());
                    parts.push(MessagePart::File { path, mime_type, name: None });
                    said
                }
                Err(error) => {
                    tracing::warn!(tool = called_as, %error, "could not store an image an MCP tool returned");
                    format!("[image {shown}: {mime_type}, {} bytes, could not be stored: {error}]", bytes.len())
                }
            }
        };
        lines[line] = Some(said);
    }
    if omitted > 0 {
        tracing::debug!(tool = called_as, omitted, "an MCP tool returned more images than a result attaches");
    }
    let mut output = lines.into_iter().flatten().collect::<Vec<_>>().join("\n");
    if output.is_empty() {
        output = "(the tool returned no content)".to_owned();
    }
    cut(&mut output, max_output_bytes);
    let additional_messages = parts
        .chunks(MAX_MESSAGE_FILES)
        .map(|files| {
            let mut message_parts =
                vec![MessagePart::Text { text: format!("Images returned by the tool {called_as}:") }];
            message_parts.extend(files.iter().cloned());
            ToolEmittedMessage { role: MessageRole::User, parts: message_parts }
        })
        .collect();
    PersistedToolResult {
        status: if is_error { ToolResultStatus::Error } else { ToolResultStatus::Ok },
        output,
        display: None,
        output_ref: None,
        additional_messages,
    }
}

fn convert(result: CallToolResult) -> Converted {
    let mut converted = Converted { lines: Vec::new(), images: Vec::new() };
    let had_content = !result.content.is_empty();
    for block in result.content {
        match block {
            ContentBlock::Text(text) => converted.say(text.text),
            ContentBlock::Image(image) => match STANDARD.decode(image.data.as_bytes()) {
                Ok(bytes)
                    if AttachmentKind::of(&image.mime_type) == AttachmentKind::Image
                        && bytes.len() as u64 <= MAX_ATTACHMENT_BYTES =>
                {
                    converted.images.push((bytes, image.mime_type, converted.lines.len()));
                    converted.lines.push(None);
                }
                Ok(bytes) => converted.say(format!(
                    "[image: {}, {} bytes, not attached (only PNG, JPEG, GIF and WebP of at most {} MiB are)]",
                    label(&image.mime_type),
                    bytes.len(),
                    MAX_ATTACHMENT_BYTES / (1024 * 1024)
                )),
                Err(_) => converted.say(format!("[image: {}, not valid base64]", label(&image.mime_type))),
            },
            ContentBlock::Audio(audio) => {
                converted.say(format!("[audio: {}, not shown to the model]", label(&audio.mime_type)))
            }
            ContentBlock::ResourceLink(link) => {
                let mut line = format!("resource link: {} <{}>", link.name, link.uri);
                if let Some(mime_type) = &link.mime_type {
                    line.push_str(&format!(" ({})", label(mime_type)));
                }
                if let Some(description) = link.description.as_deref().filter(|text| !text.is_empty()) {
                    line.push_str(&format!(": {description}"));
                }
                converted.say(line);
            }
            ContentBlock::Resource(embedded) => match embedded.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => {
                    converted.say(format!("resource <{uri}>:\n{text}"))
                }
                ResourceContents::BlobResourceContents { uri, mime_type, blob, .. } => converted.say(format!(
                    "[resource <{uri}>: {}, {} base64 characters, not shown to the model]",
                    mime_type.as_deref().map_or("binary", label),
                    blob.len()
                )),
                _ => converted.say("[an embedded resource of a kind troupe does not know, not shown]".to_owned()),
            },
            _ => converted.say("[content of a kind troupe does not know, not shown]".to_owned()),
        }
    }
    // Servers should repeat structured content as text; one that gives only the structure is shown it as JSON.
    if !had_content && let Some(structured) = result.structured_content {
        converted.say(structured.to_string());
    }
    converted
}

/// A MIME type as shown in a line: at most 100 characters, no controls.
fn label(mime_type: &str) -> &str {
    let end = mime_type.char_indices().nth(100).map_or(mime_type.len(), |(index, _)| index);
    let shown = &mime_type[..end];
    if shown.chars().any(char::is_control) { "a type with control characters" } else { shown }
}

/// Cuts `text` to at most `max` bytes at a character boundary, saying how much was left out.
fn cut(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    let total = text.len();
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(&format!("\n[cut: the tool returned {total} bytes of text; the first {end} are shown]"));
}

/// Writes an image as an artifact, content-addressed and durable like an attached file
/// (`crate::input_files::store_artifact`), and returns the path a file part names it by.
fn store_artifact(data_dir: &Path, bytes: &[u8], mime_type: &str) -> Result<String, crate::error::RuntimeError> {
    // The extensions attachments use (`AttachmentType`); what the server calls anything else is kept as `bin`.
    let extension = troupe_protocol::types::attachment::AttachmentType::of_mime(mime_type)
        .filter(|kind| kind.mime_type().starts_with("image/"))
        .map_or("bin", |kind| kind.extension());
    crate::input_files::store_artifact(data_dir, bytes, extension)
}

#[cfg(test)]
mod tests {
    use rmcp::model::Resource;

    use super::*;

    fn result(content: Vec<ContentBlock>, is_error: Option<bool>) -> CallToolResult {
        let mut result = CallToolResult::default();
        result.content = content;
        result.is_error = is_error;
        result
    }

    #[test]
    fn text_images_and_resource_links_reach_the_model() {
        let data_dir = tempfile::tempdir().unwrap();
        let png = STANDARD.encode(b"\x89PNG fake");
        let mut link = Resource::new("file:///tmp/report.md", "report");
        link.description = Some("the weekly report".into());
        let content =
            vec![ContentBlock::text("hello"), ContentBlock::image(png, "image/png"), ContentBlock::ResourceLink(link)];
        let converted = into_result(result(content, None), "mcp__s__t", data_dir.path(), 10_000);
        assert_eq!(converted.status, ToolResultStatus::Ok);
        let lines: Vec<&str> = converted.output.lines().collect();
        assert_eq!(lines[0], "hello");
        assert!(lines[1].starts_with("[image 1: image/png, 9 bytes, attached as artifacts/"), "{lines:?}");
        assert_eq!(lines[2], "resource link: report <file:///tmp/report.md>: the weekly report");
        let [message] = converted.additional_messages.as_slice() else { panic!("one message") };
        let MessagePart::File { path, mime_type, .. } = &message.parts[1] else { panic!("a file part") };
        assert_eq!(mime_type, "image/png");
        assert_eq!(std::fs::read(data_dir.path().join(path)).unwrap(), b"\x89PNG fake");
        crate::model::attachments::check_artifact(data_dir.path(), path).unwrap();
    }

    #[test]
    fn an_error_result_is_an_error_and_long_text_is_cut() {
        let data_dir = tempfile::tempdir().unwrap();
        let converted =
            into_result(result(vec![ContentBlock::text("x".repeat(50))], Some(true)), "t", data_dir.path(), 10);
        assert_eq!(converted.status, ToolResultStatus::Error);
        assert!(converted.output.starts_with("xxxxxxxxxx\n[cut: the tool returned 50 bytes"), "{}", converted.output);
        let empty = into_result(result(Vec::new(), None), "t", data_dir.path(), 10_000);
        assert_eq!(empty.output, "(the tool returned no content)");
        let mut structured = result(Vec::new(), None);
        structured.structured_content = Some(serde_json::json!({"a": 1}));
        assert_eq!(into_result(structured, "t", data_dir.path(), 100).output, "{\"a\":1}");
    }
}
