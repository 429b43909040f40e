//! The session's folder as a client completing `@path` sees it: a directory's entries, and an image or a PDF read
//! to attach (`session.files`, `session.file`). Both stay inside the cwd and follow the file tools' rules
//! ([`super::fs_access`]): the path is resolved again, opened beneath the cwd with no symlink on the way, and the
//! sandbox's denied paths are refused by identity. Blocking: call them on a blocking thread.

use std::io::Read;
use std::path::Path;

use rustix::fs::FileType;

use super::dir_handle;
use super::fs_access::{io_error, open_directory, open_for_read};
use super::paths::{ResolvedPath, resolve_path};
use crate::sandbox::ProtectedPaths;

/// The most entries one listing returns.
pub const MAX_CWD_ENTRIES: usize = 1000;

/// What an entry is (its own type: a symlink is not followed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CwdEntryKind {
    File,
    Directory,
    Symlink,
    Other,
}

/// A directory of the cwd, listed: its entries sorted by name, at most [`MAX_CWD_ENTRIES`], and whether more were
/// left out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CwdListing {
    pub entries: Vec<(String, CwdEntryKind)>,
    pub truncated: bool,
}

/// Why a path of the cwd cannot be listed or read: a sentence naming the path, never a file's contents.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CwdFileRefusal(pub String);

fn inside(cwd: &Path, requested: &str) -> Result<ResolvedPath, CwdFileRefusal> {
    let resolved = resolve_path(cwd, requested).map_err(|error| CwdFileRefusal(error.into_result().output))?;
    if !resolved.inside_cwd {
        return Err(CwdFileRefusal(format!("{requested} is outside the session's folder")));
    }
    Ok(resolved)
}

/// The entries of `dir` (relative to the cwd; `""` or `.` for the cwd itself).
pub fn list_cwd_dir(cwd: &Path, dir: &str, protected: &ProtectedPaths) -> Result<CwdListing, CwdFileRefusal> {
    crate::blocking::assert_may_block();
    let requested = if dir.is_empty() { "." } else { dir };
    let resolved = inside(cwd, requested)?;
    let directory =
        open_directory(&resolved, requested, protected).map_err(|refusal| CwdFileRefusal(refusal.output))?;
    let listed =
        dir_handle::list(&directory).map_err(|error| CwdFileRefusal(io_error("list", requested, &error).output))?;
    let mut entries: Vec<(String, CwdEntryKind)> = listed
        .into_iter()
        .map(|(name, kind)| {
            let kind = match kind {
                FileType::RegularFile => CwdEntryKind::File,
                FileType::Directory => CwdEntryKind::Directory,
                FileType::Symlink => CwdEntryKind::Symlink,
                _ => CwdEntryKind::Other,
            };
            (name.to_string_lossy().into_owned(), kind)
        })
        .collect();
    entries.sort_by(|left, right| left.0.cmp(&right.0));
    let truncated = entries.len() > MAX_CWD_ENTRIES;
    entries.truncate(MAX_CWD_ENTRIES);
    Ok(CwdListing { entries, truncated })
}

/// The bytes of the regular file `path` (relative to the cwd), at most `max_bytes`.
pub fn read_cwd_file(
    cwd: &Path,
    path: &str,
    protected: &ProtectedPaths,
    max_bytes: u64,
) -> Result<Vec<u8>, CwdFileRefusal> {
    crate::blocking::assert_may_block();
    let resolved = inside(cwd, path)?;
    let file = open_for_read(&resolved, path, protected).map_err(|refusal| CwdFileRefusal(refusal.output))?;
    let mut bytes = Vec::new();
    file.take(max_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| CwdFileRefusal(io_error("read", path, &error).output))?;
    if bytes.len() as u64 > max_bytes {
        return Err(CwdFileRefusal(format!("{path} is larger than {max_bytes} bytes, more than can be attached")));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_of_the_cwd_is_listed_and_its_files_read_but_nothing_outside() {
        let root = tempfile::tempdir().unwrap();
        let cwd = root.path().join("project");
        std::fs::create_dir_all(cwd.join("docs")).unwrap();
        std::fs::write(cwd.join("docs/a.png"), b"\x89PNG").unwrap();
        std::fs::write(cwd.join("b.txt"), b"b").unwrap();
        std::fs::write(root.path().join("secret.png"), b"s").unwrap();
        std::os::unix::fs::symlink(root.path().join("secret.png"), cwd.join("link.png")).unwrap();
        let protected = ProtectedPaths::new(Vec::new());
        let listing = list_cwd_dir(&cwd, "", &protected).unwrap();
        assert_eq!(
            listing.entries,
            [
                ("b.txt".to_owned(), CwdEntryKind::File),
                ("docs".to_owned(), CwdEntryKind::Directory),
                ("link.png".to_owned(), CwdEntryKind::Symlink)
            ]
        );
        assert_eq!(list_cwd_dir(&cwd, "docs", &protected).unwrap().entries, [("a.png".to_owned(), CwdEntryKind::File)]);
        assert_eq!(read_cwd_file(&cwd, "docs/a.png", &protected, 100).unwrap(), b"\x89PNG");
        assert!(read_cwd_file(&cwd, "../secret.png", &protected, 100).unwrap_err().0.contains("outside"));
        assert!(read_cwd_file(&cwd, "link.png", &protected, 100).is_err());
        assert!(list_cwd_dir(&cwd, "..", &protected).is_err());
        assert!(read_cwd_file(&cwd, "docs/a.png", &protected, 2).unwrap_err().0.contains("larger than 2 bytes"));
    }
}
