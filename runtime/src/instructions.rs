//! Project instructions: the `AGENTS.md` files a run's system prompt carries (`system_prompt.rs`).
//!
//! `AGENTS.md` is the convention several coding agents share: a Markdown file of instructions for agents, in a
//! project's folders. A run gathers them at its start, so a file changed between runs is seen by the next one:
//!
//! - the user's own file, `<data dir>/AGENTS.md`, beside `config.toml`: written by the operator (no tool may write
//!   the data directory), read as it is, but never through a symbolic link;
//! - one file per folder from the repository's root (the nearest folder above the session's cwd, or the cwd itself,
//!   that holds `.git`) down to the session's cwd: `AGENTS.md`, or `CLAUDE.md` where a folder has no `AGENTS.md`.
//!   Without a repository only the cwd's own file counts. A project's files are text anyone who could change the
//!   project wrote, so they are read as the file tools read: never from a denied path (the data directory,
//!   `~/.ssh`, ...), judged by the identity of the file opened, so a symlink or a hard link does not lead into one;
//!   and a symlink is followed only to a file within the project (its outermost folder), never out of it.
//!
//! They are listed outermost first (the user's, the root's, ..., the cwd's), so that nearer, more specific files
//! come later and win where they disagree. Together they hold at most [`MAX_INSTRUCTIONS_BYTES`]: the budget goes
//! to the nearest files first, and a file that did not fit whole keeps its beginning and says where it was cut.
//! A file that cannot be read, or is not UTF-8, is skipped with a log line: instructions are a help, never a
//! reason for a run to fail.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::regular_file::{Links, open_regular};
use crate::sandbox::ProtectedPaths;

/// The file each folder may hold.
pub const INSTRUCTIONS_FILE: &str = "AGENTS.md";

/// Read instead where a folder has no [`INSTRUCTIONS_FILE`].
pub const FALLBACK_INSTRUCTIONS_FILE: &str = "CLAUDE.md";

/// The most bytes of instructions a system prompt carries, all files together.
pub const MAX_INSTRUCTIONS_BYTES: usize = 32 * 1024;

/// Whose file it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstructionSource {
    /// `<data dir>/AGENTS.md`: the user's instructions for every project.
    User,
    /// A folder of the session's repository, from its root down to the cwd.
    Project,
}

/// One file's instructions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstructionFile {
    pub path: PathBuf,
    pub source: InstructionSource,
    /// The file's text, or its beginning when it was cut.
    pub text: String,
    /// The file's size in bytes when `text` is only its beginning (the total budget ran out).
    pub cut_from: Option<u64>,
}

/// The instructions of a run, outermost first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProjectInstructions {
    pub files: Vec<InstructionFile>,
}

/// Gathers the instructions for a run in `cwd` (canonical, as sessions record it) of the daemon whose data
/// directory is `data_dir`, refusing the project files `protected` denies. Blocking I/O; never fails.
pub fn gather(cwd: &Path, data_dir: &Path, protected: &ProtectedPaths) -> ProjectInstructions {
    crate::blocking::assert_may_block();
    let mut candidates: Vec<(PathBuf, InstructionSource)> = Vec::new();
    // A daemon always has an absolute data dir; a test's unconfined sandbox has none, and no user file then.
    if data_dir.is_absolute() {
        candidates.push((data_dir.join(INSTRUCTIONS_FILE), InstructionSource::User));
    }
    let folders = project_folders(cwd);
    candidates
        .extend(folders.iter().filter_map(|folder| folder_file(folder)).map(|path| (path, InstructionSource::Project)));
    // The outermost folder: a project file must lie beneath it, wherever a link points.
    let project_root = folders.first().map_or(cwd, PathBuf::as_path);
    let mut budget = MAX_INSTRUCTIONS_BYTES;
    let mut files = Vec::new();
    // Nearest first, so the cwd's own file is the last to be cut.
    for (path, source) in candidates.into_iter().rev() {
        let opened = match source {
            InstructionSource::User => open_regular(&path, Links::Refuse),
            InstructionSource::Project => open_project_file(&path, project_root, protected),
        };
        let file = match opened {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "an instructions file was skipped: it cannot be read");
                continue;
            }
        };
        match read_within(file, budget) {
            Ok((text, size)) => {
                let cut = (text.len() as u64) < size;
                if text.trim().is_empty() && !cut {
                    continue;
                }
                budget -= text.len();
                files.push(InstructionFile { path, source, text, cut_from: cut.then_some(size) });
            }
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "an instructions file was skipped");
            }
        }
    }
    files.reverse();
    ProjectInstructions { files }
}

/// The folders whose files count, outermost first: from the repository's root (the nearest folder holding `.git`,
/// a folder or a worktree's file) down to `cwd`; only `cwd` when no folder above it holds one.
pub fn project_folders(cwd: &Path) -> Vec<PathBuf> {
    let root = cwd.ancestors().position(|folder| std::fs::symlink_metadata(folder.join(".git")).is_ok());
    let mut folders: Vec<PathBuf> = match root {
        Some(depth) => cwd.ancestors().take(depth + 1).map(Path::to_path_buf).collect(),
        None => vec![cwd.to_path_buf()],
    };
    folders.reverse();
    folders
}

/// The instructions file of `folder`: `AGENTS.md`, else `CLAUDE.md`, else none.
fn folder_file(folder: &Path) -> Option<PathBuf> {
    [INSTRUCTIONS_FILE, FALLBACK_INSTRUCTIONS_FILE]
        .into_iter()
        .map(|name| folder.join(name))
        .find(|path| std::fs::symlink_metadata(path).is_ok())
}

/// Opens a project's instructions file as the file tools would read it: refused when its path or the file opened
/// (by device and inode, and the folders above its real location) is or lies in a denied path. A symlink is
/// followed (a `CLAUDE.md` linked to `AGENTS.md` is common), since the file opened is what is checked, but only to
/// a file beneath `root` (the project's outermost folder): the file tools read elsewhere only with an approval,
/// and a link a command left in the project must not carry a file from outside it into the prompt unasked.
fn open_project_file(path: &Path, root: &Path, protected: &ProtectedPaths) -> io::Result<File> {
    let requested = path.to_string_lossy();
    if let Some(refusal) = protected.refusal_for_path(path, &requested) {
        return Err(io::Error::new(io::ErrorKind::PermissionDenied, refusal));
    }
    let file = open_regular(path, Links::Follow)?;
    // Where the file opened really is (the descriptor's own link, so a link swapped meanwhile changes nothing).
    let real = std::fs::read_link(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&file)))?;
    if !real.starts_with(root) {
        let refusal = format!("{requested} leads to {}, outside the project {}", real.display(), root.display());
        return Err(io::Error::new(io::ErrorKind::PermissionDenied, refusal));
    }
    match protected.refusal_for_open(&file, &requested) {
        Some(refusal) => Err(io::Error::new(io::ErrorKind::PermissionDenied, refusal)),
        None => Ok(file),
    }
}

/// At most `budget` bytes of `file` as text, cut at a character boundary, and the file's size. A file that is not
/// UTF-8 (in the part read) is an error.
fn read_within(file: File, budget: usize) -> io::Result<(String, u64)> {
    let size = file.metadata()?.len();
    let mut bytes = Vec::new();
    // One byte past the budget tells a file that grew since its size was taken from one that fits exactly.
    file.take(budget as u64 + 1).read_to_end(&mut bytes)?;
    let size = size.max(bytes.len() as u64);
    bytes.truncate(budget);
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        // A cut through a character leaves an incomplete one at the end: that is the cut, not bad text.
        Err(error) if error.utf8_error().error_len().is_none() => {
            let valid = error.utf8_error().valid_up_to();
            let mut bytes = error.into_bytes();
            bytes.truncate(valid);
            String::from_utf8(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8"))?
        }
        Err(_) => return Err(io::Error::new(io::ErrorKind::InvalidData, "the file is not UTF-8 text")),
    };
    Ok((text, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nothing_protected() -> ProtectedPaths {
        ProtectedPaths::new(Vec::new())
    }

    fn layout() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().canonicalize().unwrap();
        let data_dir = root.join("data");
        let repo = root.join("repo");
        let cwd = repo.join("crates").join("core");
        std::fs::create_dir_all(&data_dir).unwrap();
        std::fs::create_dir_all(&cwd).unwrap();
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        (temp, data_dir, repo, cwd)
    }

    fn texts(instructions: &ProjectInstructions) -> Vec<(&str, InstructionSource)> {
        instructions.files.iter().map(|file| (file.text.as_str(), file.source)).collect()
    }

    #[test]
    fn the_user_s_file_then_each_folder_from_the_repository_root_down_to_the_cwd() {
        let (_temp, data_dir, repo, cwd) = layout();
        std::fs::write(data_dir.join("AGENTS.md"), "user").unwrap();
        std::fs::write(repo.join("AGENTS.md"), "root").unwrap();
        // A folder without AGENTS.md offers its CLAUDE.md; one with both offers AGENTS.md only.
        std::fs::write(repo.join("crates").join("CLAUDE.md"), "crates").unwrap();
        std::fs::write(cwd.join("AGENTS.md"), "core").unwrap();
        std::fs::write(cwd.join("CLAUDE.md"), "not read").unwrap();
        // Above the repository's root nothing counts.
        std::fs::write(repo.parent().unwrap().join("AGENTS.md"), "outside").unwrap();
        let gathered = gather(&cwd, &data_dir, &nothing_protected());
        use InstructionSource::{Project, User};
        assert_eq!(texts(&gathered), [("user", User), ("root", Project), ("crates", Project), ("core", Project)]);
        assert_eq!(gathered.files[1].path, repo.join("AGENTS.md"));
        assert!(gathered.files.iter().all(|file| file.cut_from.is_none()));
    }

    #[test]
    fn without_a_repository_only_the_cwd_s_own_file_counts() {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().canonicalize().unwrap();
        let cwd = root.join("project");
        std::fs::create_dir_all(&cwd).unwrap();
        std::fs::write(root.join("AGENTS.md"), "parent").unwrap();
        std::fs::write(cwd.join("AGENTS.md"), "here").unwrap();
        assert_eq!(project_folders(&cwd), std::slice::from_ref(&cwd));
        let gathered = gather(&cwd, &root.join("no-data-dir"), &nothing_protected());
        assert_eq!(texts(&gathered), [("here", InstructionSource::Project)]);
    }

    #[test]
    fn the_budget_goes_to_the_nearest_files_and_a_cut_file_says_its_size() {
        let (_temp, data_dir, repo, cwd) = layout();
        // 9 bytes are left for the root's file, then 1 for the user's.
        let near = "n".repeat(MAX_INSTRUCTIONS_BYTES - 9);
        std::fs::write(cwd.join("AGENTS.md"), &near).unwrap();
        // 'é' is two bytes: the cut falls inside one and must not split it.
        std::fs::write(repo.join("AGENTS.md"), "abcdefghé and more").unwrap();
        std::fs::write(data_dir.join("AGENTS.md"), "left out").unwrap();
        let gathered = gather(&cwd, &data_dir, &nothing_protected());
        let user = &gathered.files[0];
        assert_eq!((user.text.as_str(), user.cut_from), ("l", Some(8)));
        let root = &gathered.files[1];
        assert_eq!((root.text.as_str(), root.cut_from), ("abcdefgh", Some(19)));
        assert_eq!((gathered.files[2].text.len(), gathered.files[2].cut_from), (near.len(), None));
    }

    #[test]
    fn non_utf8_unreadable_and_denied_files_are_skipped() {
        let (_temp, data_dir, repo, cwd) = layout();
        std::fs::write(repo.join("AGENTS.md"), b"\xff\xfe binary").unwrap();
        std::fs::create_dir(cwd.join("AGENTS.md")).unwrap();
        let secret = repo.parent().unwrap().join("secret");
        std::fs::create_dir_all(&secret).unwrap();
        std::fs::write(secret.join("notes.md"), "private").unwrap();
        std::fs::create_dir_all(repo.join("crates")).unwrap();
        std::os::unix::fs::symlink(secret.join("notes.md"), repo.join("crates").join("AGENTS.md")).unwrap();
        let protected = ProtectedPaths::new(vec![data_dir.clone(), secret.clone()]);
        let gathered = gather(&cwd, &data_dir, &protected);
        assert!(gathered.files.is_empty(), "{gathered:?}");
        // Unprotected, a link out of the repository is still not followed into the prompt; one that stays inside
        // it is read like any other file.
        assert!(gather(&cwd, &data_dir, &nothing_protected()).files.is_empty());
        std::fs::write(repo.join("shared.md"), "private").unwrap();
        std::fs::remove_file(repo.join("crates").join("AGENTS.md")).unwrap();
        std::os::unix::fs::symlink(repo.join("shared.md"), repo.join("crates").join("AGENTS.md")).unwrap();
        let gathered = gather(&cwd, &data_dir, &nothing_protected());
        assert_eq!(texts(&gathered), [("private", InstructionSource::Project)]);
    }

    #[test]
    fn the_user_s_file_is_never_read_through_a_symbolic_link() {
        let (_temp, data_dir, repo, cwd) = layout();
        std::fs::write(repo.join("elsewhere.md"), "linked").unwrap();
        std::os::unix::fs::symlink(repo.join("elsewhere.md"), data_dir.join("AGENTS.md")).unwrap();
        assert!(gather(&cwd, &data_dir, &nothing_protected()).files.is_empty());
    }
}
