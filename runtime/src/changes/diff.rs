//! A file change as a unified diff ([`similar`], Myers with a time bound), with its line counts, for approvals,
//! tool results and `session.diff`.
//!
//! A side that is not UTF-8 text or holds a NUL byte makes the change binary: sizes only, no text. The text is cut
//! at [`MAX_UNIFIED_BYTES`] on a line boundary (the counts stay whole), so an approval or a result never carries a
//! whole large file.

use std::path::Path;
use std::time::Duration;

use similar::{ChangeTag, TextDiff};
use troupe_protocol::types::changes::{FileChangeKind, FileDiff};

/// The most bytes of unified diff text one file's diff carries.
pub const MAX_UNIFIED_BYTES: usize = 32 * 1024;

/// How long the diff algorithm may look for a minimal diff before it settles for a coarser one.
const DIFF_TIMEOUT: Duration = Duration::from_millis(500);

/// The change from `before` to `after` of the file `path` (`None`: no file on that side). The unified text names
/// the file as `git diff` run in `cwd` would (`a/src/x.rs`, so that `git apply` and `patch -p1` take it there); a
/// file outside `cwd`, or with no `cwd`, by its absolute path (`a/home/me/x.rs`). `FileDiff.path` stays absolute.
pub fn file_diff(path: &str, cwd: Option<&Path>, before: Option<&[u8]>, after: Option<&[u8]>) -> FileDiff {
    let kind = match (before, after) {
        (None, _) => FileChangeKind::Created,
        (Some(_), None) => FileChangeKind::Deleted,
        (Some(_), Some(_)) => FileChangeKind::Modified,
    };
    let mut diff = FileDiff {
        path: path.to_owned(),
        kind,
        lines_added: 0,
        lines_removed: 0,
        bytes_before: before.map_or(0, |content| content.len() as u64),
        bytes_after: after.map_or(0, |content| content.len() as u64),
        binary: false,
        unified: None,
        truncated: false,
        note: None,
    };
    let (Some(old), Some(new)) = (text_of(before), text_of(after)) else {
        diff.binary = true;
        return diff;
    };
    let text = TextDiff::configure().timeout(DIFF_TIMEOUT).diff_lines(old, new);
    for change in text.iter_all_changes() {
        match change.tag() {
            ChangeTag::Insert => diff.lines_added += 1,
            ChangeTag::Delete => diff.lines_removed += 1,
            ChangeTag::Equal => {}
        }
    }
    let shown = shown_name(path, cwd);
    let old_name = if before.is_some() { format!("a/{shown}") } else { "/dev/null".to_owned() };
    let new_name = if after.is_some() { format!("b/{shown}") } else { "/dev/null".to_owned() };
    let mut unified = text.unified_diff().context_radius(3).header(&old_name, &new_name).to_string();
    if unified.len() > MAX_UNIFIED_BYTES {
        let cut = unified[..MAX_UNIFIED_BYTES].rfind('\n').map_or(0, |end| end + 1);
        unified.truncate(cut);
        diff.truncated = true;
    }
    diff.unified = Some(unified);
    diff
}

/// `path` relative to `cwd` when it lies below it, else without its leading `/`.
fn shown_name(path: &str, cwd: Option<&Path>) -> String {
    let relative =
        cwd.and_then(|cwd| Path::new(path).strip_prefix(cwd).ok()).filter(|rest| !rest.as_os_str().is_empty());
    match relative {
        Some(relative) => relative.to_string_lossy().into_owned(),
        None => path.trim_start_matches('/').to_owned(),
    }
}

/// A diff whose one side could not be read: counts and text unknown, `note` says why.
pub fn unknown_diff(path: &str, kind: FileChangeKind, bytes_before: u64, bytes_after: u64, note: String) -> FileDiff {
    FileDiff {
        path: path.to_owned(),
        kind,
        lines_added: 0,
        lines_removed: 0,
        bytes_before,
        bytes_after,
        binary: false,
        unified: None,
        truncated: false,
        note: Some(note),
    }
}

/// The text of one side: empty for no file; `None` when it is not text.
fn text_of(content: Option<&[u8]>) -> Option<&str> {
    let content = content.unwrap_or_default();
    if content.contains(&0) {
        return None;
    }
    std::str::from_utf8(content).ok()
}

/// The diff's counts in a few words, for a tool result and a CLI line: `+3 -1`, `new file, +2`, `binary, 10 → 12
/// bytes`.
pub fn stats(diff: &FileDiff) -> String {
    if diff.binary {
        return match diff.kind {
            FileChangeKind::Created => format!("new binary file, {} bytes", diff.bytes_after),
            FileChangeKind::Deleted => format!("binary file removed, {} bytes", diff.bytes_before),
            FileChangeKind::Modified => format!("binary, {} → {} bytes", diff.bytes_before, diff.bytes_after),
        };
    }
    if diff.unified.is_none() {
        return format!("{} → {} bytes", diff.bytes_before, diff.bytes_after);
    }
    match diff.kind {
        FileChangeKind::Created => format!("new file, +{}", diff.lines_added),
        FileChangeKind::Deleted => format!("removed, -{}", diff.lines_removed),
        FileChangeKind::Modified => format!("+{} -{}", diff.lines_added, diff.lines_removed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overwriting_two_lines_by_one_removes_two_and_adds_one() {
        let diff = file_diff("/w/a.txt", None, Some(b"one\ntwo\n"), Some(b"three\n"));
        assert_eq!((diff.kind, diff.lines_added, diff.lines_removed), (FileChangeKind::Modified, 1, 2));
        assert_eq!(stats(&diff), "+1 -2");
        assert_eq!(diff.unified.as_deref(), Some("--- a/w/a.txt\n+++ b/w/a.txt\n@@ -1,2 +1 @@\n-one\n-two\n+three\n"));
    }

    #[test]
    fn a_new_file_is_all_additions_from_dev_null() {
        let diff = file_diff("/w/new.txt", Some(Path::new("/w")), None, Some(b"x\ny"));
        assert_eq!((diff.kind, diff.lines_added, diff.lines_removed), (FileChangeKind::Created, 2, 0));
        assert_eq!(stats(&diff), "new file, +2");
        let unified = diff.unified.unwrap();
        assert!(unified.starts_with("--- /dev/null\n+++ b/new.txt\n"), "{unified}");
        assert!(unified.contains("\\ No newline at end of file"), "{unified}");
    }

    #[test]
    fn files_are_named_as_git_diff_names_them_in_the_cwd_and_absolute_outside_it() {
        let named = |path: &str| {
            let diff = file_diff(path, Some(Path::new("/w/project")), Some(b"a\n"), Some(b"b\n"));
            diff.unified.unwrap().lines().take(2).collect::<Vec<_>>().join("|")
        };
        assert_eq!(named("/w/project/src/x.rs"), "--- a/src/x.rs|+++ b/src/x.rs");
        assert_eq!(named("/w/projectile/x.rs"), "--- a/w/projectile/x.rs|+++ b/w/projectile/x.rs");
        assert_eq!(named("/etc/hosts"), "--- a/etc/hosts|+++ b/etc/hosts");
    }

    #[test]
    fn binary_content_has_sizes_but_no_text() {
        let diff = file_diff("/w/b.bin", None, Some(b"\x00\x01"), Some(b"\x00\x02\x03"));
        assert!(diff.binary && diff.unified.is_none());
        assert_eq!(stats(&diff), "binary, 2 → 3 bytes");
    }

    #[test]
    fn a_long_diff_is_cut_on_a_line_and_says_so() {
        let after: String = (0..20_000).map(|line| format!("line {line}\n")).collect();
        let diff = file_diff("/w/long.txt", None, None, Some(after.as_bytes()));
        let unified = diff.unified.as_deref().unwrap();
        assert!(diff.truncated && unified.len() <= MAX_UNIFIED_BYTES && unified.ends_with('\n'));
        assert_eq!(diff.lines_added, 20_000, "the counts stay whole");
    }
}
