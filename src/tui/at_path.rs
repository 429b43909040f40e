//! `@path` in the TUI's prompt: Tab completes the `@word` at the end of the line from the session's folder
//! (`session.files`: the folder is on the daemon's machine), and on Enter each `@path` naming an image or a PDF is
//! read by the daemon (`session.file`) and attached, its `@` dropped from the text; any other `@path` stays as typed.

use troupe_protocol::client::{ClientError, ClientProtocol};
use troupe_protocol::error_code::ErrorCode;
use troupe_protocol::types::attachment::{FileEntryKind, InputAttachment, SessionFileParams, SessionFilesParams};

/// The `@word` the line ends with: (its byte offset, the folder part, the name prefix). Pure.
pub fn last_at_word(line: &str) -> Option<(usize, &str, &str)> {
    let start = line.rfind(char::is_whitespace).map_or(0, |at| at + 1);
    let word = line[start..].strip_prefix('@')?;
    Some(match word.rfind('/') {
        Some(slash) => (start, &word[..slash], &word[slash + 1..]),
        None => (start, "", word),
    })
}

/// The longest prefix every name shares.
fn common_prefix<'a>(names: &[&'a str]) -> &'a str {
    let Some(first) = names.first() else { return "" };
    let mut end = first.len();
    for name in &names[1..] {
        end = end.min(first.bytes().zip(name.bytes()).take_while(|(a, b)| a == b).count());
    }
    while !first.is_char_boundary(end) {
        end -= 1;
    }
    &first[..end]
}

/// Completes the line's last `@word` in place; returns a notice listing the candidates when several remain.
pub async fn complete<C: ClientProtocol>(
    client: &C,
    session_id: &str,
    line: &mut String,
) -> anyhow::Result<Option<String>> {
    let Some((start, dir, prefix)) = last_at_word(line) else { return Ok(None) };
    let params = SessionFilesParams { session_id: session_id.to_owned(), dir: dir.to_owned() };
    let listing = client.session_files(params).await?;
    let hidden_ok = prefix.starts_with('.');
    let matches: Vec<_> = listing
        .entries
        .iter()
        .filter(|entry| entry.name.starts_with(prefix) && (hidden_ok || !entry.name.starts_with('.')))
        .collect();
    let folder = if dir.is_empty() { String::new() } else { format!("{dir}/") };
    match matches.as_slice() {
        [] => Ok(Some(format!("no file of the session's folder matches @{folder}{prefix}"))),
        [only] => {
            let slash = if only.kind == FileEntryKind::Dir { "/" } else { "" };
            line.replace_range(start.., &format!("@{folder}{}{slash}", only.name));
            Ok(None)
        }
        several => {
            let names: Vec<&str> = several.iter().map(|entry| entry.name.as_str()).collect();
            let shared = common_prefix(&names);
            line.replace_range(start.., &format!("@{folder}{shared}"));
            let shown: Vec<&str> = names.iter().take(8).copied().collect();
            let more = if names.len() > 8 { format!(" and {} more", names.len() - 8) } else { String::new() };
            Ok(Some(format!("@{folder}{shared}…: {}{more}", shown.join("  "))))
        }
    }
}

/// The attachments the line's `@path` words name (images and PDFs the daemon reads), and the line with their `@`
/// dropped. A word that is not such a file stays as typed.
pub async fn take_attachments<C: ClientProtocol>(
    client: &C,
    session_id: &str,
    line: &str,
) -> anyhow::Result<(String, Vec<InputAttachment>)> {
    let mut attachments = Vec::new();
    let mut words = Vec::new();
    for word in line.split(' ') {
        let Some(path) = word.strip_prefix('@').filter(|path| is_attachable(path)) else {
            words.push(word.to_owned());
            continue;
        };
        let params = SessionFileParams { session_id: session_id.to_owned(), path: path.to_owned() };
        match client.session_file(params).await {
            Ok(read) => {
                attachments.push(read.attachment);
                words.push(path.to_owned());
            }
            // Not an image or PDF after all: the path stays text.
            Err(ClientError::Rpc(error)) if error.error_code() == Some(ErrorCode::InvalidAttachment) => {
                words.push(word.to_owned());
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok((words.join(" "), attachments))
}

fn is_attachable(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    [".png", ".jpg", ".jpeg", ".gif", ".webp", ".pdf"].iter().any(|extension| lower.ends_with(extension))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_at_word_is_a_folder_and_a_prefix() {
        assert_eq!(last_at_word("look at @do"), Some((8, "", "do")));
        assert_eq!(last_at_word("@docs/ar"), Some((0, "docs", "ar")));
        assert_eq!(last_at_word("mail me@host"), None);
        assert_eq!(last_at_word("@docs "), None);
        assert_eq!(common_prefix(&["arch.png", "archive.pdf"]), "arch");
        assert!(is_attachable("docs/A.PNG") && !is_attachable("notes.txt"));
    }
}
