//! Putting files back for `session.undo`, under the file tools' rules.
//!
//! An undo writes where a run wrote, so it goes where a file tool would: the recorded path is resolved again
//! against the session's cwd and opened beneath a verified handle ([`super::fs_access`]), never through a
//! symlink; the sandbox's denied paths are refused; and a path outside the cwd is used only when the run's write
//! was outside it too (it was approved for exactly that path), and only if it still resolves to itself.

use std::path::Path;

use troupe_protocol::types::approval::PermissionAction;

use super::PermissionRequest;
use super::fs_access::{self, resolve_for_execute};
use super::paths::ResolvedPath;
use crate::changes::plan::Current;
use crate::sandbox::ProtectedPaths;

/// Resolves a recorded path for an undo, with what the run's write was allowed.
fn resolve(cwd: &Path, path: &str, inside_cwd: bool) -> Result<ResolvedPath, String> {
    let approved = (!inside_cwd).then(|| PermissionRequest {
        action: PermissionAction::Write,
        resource: path.to_owned(),
        summary: String::new(),
        inside_cwd: false,
    });
    let resolved = resolve_for_execute(cwd, path, approved.as_ref()).map_err(|refusal| refusal.output)?;
    // A path recorded inside the cwd must still be that path: not one a symlink now leads elsewhere.
    if resolved.path != Path::new(path) {
        return Err(format!("refused: {path} now resolves to {}", resolved.path.display()));
    }
    Ok(resolved)
}

/// What the recorded file holds now.
pub fn current_state(cwd: &Path, path: &str, inside_cwd: bool, protected: &ProtectedPaths) -> Result<Current, String> {
    crate::blocking::assert_may_block();
    let resolved = resolve(cwd, path, inside_cwd)?;
    match fs_access::digest_file(&resolved, path, protected).map_err(|refusal| refusal.output)? {
        Some(digest) => Ok(Current::Digest(digest)),
        None => Ok(Current::Absent),
    }
}

/// Writes `content` back to the recorded file (creating its folders inside the cwd as a write would).
pub fn write_back(
    cwd: &Path,
    path: &str,
    inside_cwd: bool,
    content: &[u8],
    protected: &ProtectedPaths,
) -> Result<(), String> {
    crate::blocking::assert_may_block();
    let resolved = resolve(cwd, path, inside_cwd)?;
    fs_access::write_file(&resolved, path, content, protected).map_err(|refusal| refusal.output)
}

/// Removes the recorded file (a run created it); one already gone is fine.
pub fn remove(cwd: &Path, path: &str, inside_cwd: bool, protected: &ProtectedPaths) -> Result<(), String> {
    crate::blocking::assert_may_block();
    let resolved = resolve(cwd, path, inside_cwd)?;
    fs_access::remove_file(&resolved, path, protected).map_err(|refusal| refusal.output)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::changes::digest_of;

    #[test]
    fn a_file_is_read_written_back_and_removed_inside_the_cwd_only() {
        let cwd = tempfile::tempdir().unwrap();
        let cwd = cwd.path().canonicalize().unwrap();
        let protected = ProtectedPaths::new(Vec::new());
        let file = cwd.join("sub/a.bin");
        let path = file.to_str().unwrap();
        assert_eq!(current_state(&cwd, path, true, &protected).unwrap(), Current::Absent);
        write_back(&cwd, path, true, b"\x00\xffbytes", &protected).unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"\x00\xffbytes");
        assert_eq!(current_state(&cwd, path, true, &protected).unwrap(), Current::Digest(digest_of(b"\x00\xffbytes")));
        remove(&cwd, path, true, &protected).unwrap();
        assert!(!file.exists());
        remove(&cwd, path, true, &protected).unwrap();

        let outside = tempfile::tempdir().unwrap();
        let elsewhere = outside.path().canonicalize().unwrap().join("x");
        let refused = write_back(&cwd, elsewhere.to_str().unwrap(), true, b"no", &protected).unwrap_err();
        assert!(refused.contains("outside the working directory"), "{refused}");
        write_back(&cwd, elsewhere.to_str().unwrap(), false, b"yes", &protected).unwrap();
        assert_eq!(std::fs::read(&elsewhere).unwrap(), b"yes");
    }

    #[test]
    fn a_folder_swapped_for_a_symlink_is_not_followed() {
        let cwd = tempfile::tempdir().unwrap();
        let cwd = cwd.path().canonicalize().unwrap();
        let target = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(target.path(), cwd.join("sub")).unwrap();
        let path = cwd.join("sub/a.txt");
        let refused =
            write_back(&cwd, path.to_str().unwrap(), true, b"x", &ProtectedPaths::new(Vec::new())).unwrap_err();
        assert!(refused.starts_with("refused"), "{refused}");
        assert!(!target.path().join("a.txt").exists());
    }
}
