//! The write `write_file` and `edit_file` share: record what the file held (`crate::changes`), then write, then
//! say what changed as a diff; and the same diff before the write, for an approval.
//!
//! The result's `output` (what the model reads) ends with the diff's counts (`+1 -2`, `new file, +3`); its
//! `display` (what a transcript shows) adds the unified diff. A file outside the session's cwd shows counts only:
//! its content is not copied into the session's log.

use troupe_protocol::types::changes::{FileChangeKind, FileDiff};
use troupe_protocol::types::run::PersistedToolResult;

use super::fs_access;
use super::paths::ResolvedPath;
use super::results;
use crate::changes::diff::{file_diff, stats, unknown_diff};
use crate::changes::{ChangeLimits, ChangeRecorder, Prior, Write};
use crate::sandbox::ProtectedPaths;

/// The most bytes of a file read to preview its change when no recorder says otherwise.
pub(crate) fn read_limit(recorder: Option<&ChangeRecorder>) -> u64 {
    recorder.map_or(ChangeLimits::default().max_blob_bytes, ChangeRecorder::max_blob_bytes)
}

/// Where a write goes and under which rules.
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    pub tool: &'static str,
    pub resolved: &'a ResolvedPath,
    /// The path as the model wrote it, for messages.
    pub requested: &'a str,
    pub recorder: Option<&'a ChangeRecorder>,
    pub protected: &'a ProtectedPaths,
}

/// Records the change from `prior` to `content` at the target, writes it, and words the result: `summary` (what
/// was done, for the model) followed by the diff's counts.
pub(crate) fn recorded_write(
    target: &Target<'_>,
    prior: &Prior,
    content: &[u8],
    summary: String,
) -> PersistedToolResult {
    let Target { tool, resolved, requested, recorder, protected } = *target;
    let note = recorder.and_then(|recorder| {
        recorder.record(Write {
            tool,
            path: &resolved.path,
            inside_cwd: resolved.inside_cwd,
            before: prior,
            after: content,
        })
    });
    if let Err(failure) = fs_access::write_file(resolved, requested, content, protected) {
        return failure;
    }
    let diff = change_diff(resolved, prior, content);
    let mut output = format!("{summary} ({})", stats(&diff));
    if let Some(note) = note {
        output.push('\n');
        output.push_str(&note);
    }
    let mut result = results::ok(output);
    if let Some(unified) = &diff.unified {
        result.display = Some(format!("{}\n{unified}", result.output));
    }
    result
}

/// The change from `prior` to `after` at `resolved`, as an approval or a result shows it.
pub(crate) fn change_diff(resolved: &ResolvedPath, prior: &Prior, after: &[u8]) -> FileDiff {
    let path = resolved.path.to_string_lossy();
    let mut diff = match prior {
        Prior::TooLarge { size } => unknown_diff(
            &path,
            FileChangeKind::Modified,
            *size,
            after.len() as u64,
            format!("the file holds {size} bytes, too many to compare"),
        ),
        // Named by the absolute path: an approval or a transcript shows the file by its header, and a path relative to
        // the cwd could not be told from an absolute one written git's way. `session.diff` names it relative.
        Prior::Absent | Prior::Content(_) => file_diff(&path, None, prior.content(), Some(after)),
    };
    if !resolved.inside_cwd && diff.unified.is_some() {
        diff.unified = None;
        diff.truncated = false;
        diff.note = Some("outside the working directory: the content is not shown".to_owned());
    }
    diff
}

/// What a write of `after` (or, for an edit, of what `edit` makes of the current text) would change at
/// `requested`, for an approval; `None` when it cannot be told (the path or the file cannot be read, or the edit
/// would fail).
pub(crate) fn preview(
    cwd: &std::path::Path,
    requested: &str,
    protected: &ProtectedPaths,
    after: impl FnOnce(&Prior) -> Option<Vec<u8>>,
) -> Option<FileDiff> {
    let resolved = super::paths::resolve_path(cwd, requested).ok()?;
    let prior = fs_access::read_prior(&resolved, requested, protected, read_limit(None)).ok()?;
    let after = after(&prior)?;
    Some(change_diff(&resolved, &prior, &after))
}
