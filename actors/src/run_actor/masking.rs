//! Masking the daemon's secrets (its token, connected providers' keys) out of a tool call's live output and its
//! result, before either is stored, streamed or sent to a model. Defence in depth behind the sandbox: it catches
//! what reaches a tool anyway, such as a hard link to the token made before the daemon started.

use bytes::Bytes;
use troupe_protocol::types::run::{MessagePart, PersistedToolResult};
use troupe_protocol::types::tool_output::OutputStream;
use troupe_runtime::redact::{Secrets, StreamRedactor};
use troupe_runtime::tools::OutputChunk;

/// The masks of one call's two output streams. A secret split across chunks is caught: the tail of a chunk that
/// could begin a secret is held back until the next chunk or the end. Masks have the secret's length, so offsets
/// stay those of the real stream.
pub(super) struct OutputMasks {
    streams: [StreamMask; 2],
}

struct StreamMask {
    stream: OutputStream,
    redactor: StreamRedactor,
    /// Bytes of this stream passed on so far: the offset of the next chunk passed on.
    emitted: u64,
}

impl StreamMask {
    fn pass(&mut self, data: Vec<u8>) -> Option<OutputChunk> {
        if data.is_empty() {
            return None;
        }
        let chunk = OutputChunk { stream: self.stream, offset: self.emitted, data: Bytes::from(data) };
        self.emitted += chunk.data.len() as u64;
        Some(chunk)
    }
}

impl OutputMasks {
    pub(super) fn new(secrets: &Secrets) -> Self {
        let mask = |stream| StreamMask { stream, redactor: secrets.stream(), emitted: 0 };
        OutputMasks { streams: [mask(OutputStream::Stdout), mask(OutputStream::Stderr)] }
    }

    fn of(&mut self, stream: OutputStream) -> &mut StreamMask {
        match stream {
            OutputStream::Stdout => &mut self.streams[0],
            OutputStream::Stderr => &mut self.streams[1],
        }
    }

    /// What of `chunk` may be published now, masked; `None` while all of it is held back.
    pub(super) fn mask(&mut self, chunk: OutputChunk) -> Option<OutputChunk> {
        let mask = self.of(chunk.stream);
        let data = mask.redactor.push(&chunk.data);
        mask.pass(data)
    }

    /// The held-back ends of both streams, masked: the call has ended.
    pub(super) fn finish(&mut self) -> Vec<OutputChunk> {
        self.streams
            .iter_mut()
            .filter_map(|mask| {
                let data = mask.redactor.finish();
                mask.pass(data)
            })
            .collect()
    }

    /// What was masked in the live output, each label once.
    pub(super) fn labels(&self) -> Vec<String> {
        let mut labels: Vec<String> = Vec::new();
        for label in self.streams.iter().flat_map(|mask| mask.redactor.labels()) {
            if !labels.contains(label) {
                labels.push(label.clone());
            }
        }
        labels
    }
}

/// `result` with every secret masked in what the model and the UI see; when anything was masked (there, or in
/// the live output whose labels are `streamed`), the output ends with a note saying what, so the masking is on
/// record in the log.
pub(super) fn mask_result(
    secrets: &Secrets,
    mut result: PersistedToolResult,
    streamed: &[String],
) -> PersistedToolResult {
    let masked = secrets.redact(&result.output);
    let mut labels = masked.labels;
    result.output = masked.text;
    if let Some(display) = result.display.take() {
        let masked = secrets.redact(&display);
        labels.extend(masked.labels);
        result.display = Some(masked.text);
    }
    // The messages a tool emits reach the model and every client like its output does.
    for message in &mut result.additional_messages {
        for part in &mut message.parts {
            let text = match part {
                MessagePart::Text { text } => text,
                MessagePart::File { name: Some(name), .. } => name,
                MessagePart::File { name: None, .. } => continue,
            };
            let masked = secrets.redact(text);
            labels.extend(masked.labels);
            *text = masked.text;
        }
    }
    labels.extend(streamed.iter().cloned());
    labels.sort();
    labels.dedup();
    if !labels.is_empty() {
        tracing::warn!(secrets = %labels.join(", "), "masked secrets of the daemon in a tool's output");
        let note = format!(
            "\n(troupe masked its own secrets in this output: {}. Tools must not read them.)",
            labels.join(", ")
        );
        result.output.push_str(&note);
        if let Some(display) = &mut result.display {
            display.push_str(&note);
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use troupe_protocol::types::run::{MessageRole, ToolEmittedMessage, ToolResultStatus};

    use super::*;

    const TOKEN: &str = "tok-0123456789abcdef";

    fn secrets() -> Secrets {
        let secrets = Secrets::new();
        secrets.set("daemon token", TOKEN.to_owned());
        secrets
    }

    #[test]
    fn a_token_split_across_chunks_is_masked_and_offsets_stay_contiguous() {
        let secrets = secrets();
        let mut masks = OutputMasks::new(&secrets);
        let text = format!("before {TOKEN} after");
        let (first, second) = text.as_bytes().split_at(12);
        let mut published = Vec::new();
        for (offset, piece) in [(0u64, first), (12, second)] {
            let chunk = OutputChunk { stream: OutputStream::Stdout, offset, data: Bytes::copy_from_slice(piece) };
            published.extend(masks.mask(chunk));
        }
        published.extend(masks.finish());
        let mut expected_offset = 0;
        let mut all = Vec::new();
        for chunk in &published {
            assert_eq!(chunk.offset, expected_offset);
            expected_offset += chunk.data.len() as u64;
            all.extend_from_slice(&chunk.data);
        }
        let all = String::from_utf8(all).unwrap();
        assert_eq!(all.len(), text.len());
        assert!(!all.contains(TOKEN), "{all}");
        assert_eq!(masks.labels(), ["daemon token"]);
    }

    #[test]
    fn a_result_holding_a_secret_is_masked_and_says_so() {
        let result = PersistedToolResult {
            status: ToolResultStatus::Ok,
            output: format!("the token is {TOKEN}"),
            display: None,
            output_ref: None,
            additional_messages: Vec::new(),
        };
        let masked = mask_result(&secrets(), result, &[]);
        assert!(!masked.output.contains(TOKEN), "{}", masked.output);
        assert!(masked.output.contains("troupe masked its own secrets in this output: daemon token"));
    }

    #[test]
    fn the_text_of_emitted_messages_is_masked_too() {
        let message = ToolEmittedMessage {
            role: MessageRole::User,
            parts: vec![
                MessagePart::Text { text: format!("see {TOKEN}") },
                MessagePart::File {
                    path: "artifacts/a.txt".into(),
                    mime_type: "text/plain".into(),
                    name: Some(format!("{TOKEN}.txt")),
                },
            ],
        };
        let result = PersistedToolResult {
            status: ToolResultStatus::Ok,
            output: "done".into(),
            display: None,
            output_ref: None,
            additional_messages: vec![message],
        };
        let masked = mask_result(&secrets(), result, &[]);
        let shown = serde_json::to_string(&masked.additional_messages).unwrap();
        assert!(!shown.contains(TOKEN), "{shown}");
        assert!(masked.output.contains("troupe masked its own secrets in this output: daemon token"));
    }
}
