//! Collecting artifacts: the files of `<data_dir>/artifacts/` that no session's log names any more (their sessions
//! were deleted) are removed. The mark is the caller's (the session supervisor holds every session's
//! [`NamedArtifacts`](crate::artifact_names::NamedArtifacts)); this is the sweep, blocking I/O for a blocking thread.
//!
//! A file is written before the event naming it is appended (attachments, an MCP server's images, a plugin's
//! files), so a file no log names yet may be about to be named. The sweep therefore keeps every file younger than a
//! grace period, by its modification time: a store writes a new file and renames it over the old one even when
//! the same bytes are there already ([`crate::input_files::store_artifact`]), so an old orphan that is reused is
//! young again before its new event is appended. A file that is old and unnamed is first renamed aside, then its
//! time is read again: a store that renamed a fresh copy into place between the two looks (same name, so the same
//! bytes) is put back instead of removed. Only regular files are removed; a symlink or a folder someone put there
//! is not the daemon's and is left alone.

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::model::attachments::ARTIFACTS_DIR;

/// What a sweep removed, and what it kept although unnamed (younger than the grace period).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Collected {
    pub removed: usize,
    pub removed_bytes: u64,
    pub kept_young: usize,
}

/// Removes every regular file of `<data_dir>/artifacts/` whose name `is_named` refuses and whose modification time
/// is at least `grace` before `now`. A missing directory is nothing to collect; an error only when the directory
/// cannot be listed (a file that cannot be removed is logged and skipped).
pub fn collect_unnamed(
    data_dir: &Path,
    is_named: impl Fn(&str) -> bool,
    grace: Duration,
    now: SystemTime,
) -> std::io::Result<Collected> {
    crate::blocking::assert_may_block();
    let dir = data_dir.join(ARTIFACTS_DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Collected::default()),
        Err(error) => return Err(error),
    };
    let young = |modified: SystemTime| now.duration_since(modified).map_or(true, |age| age < grace);
    let mut collected = Collected::default();
    for entry in entries.flatten() {
        let name = entry.file_name();
        // A name that is not UTF-8 is no artifact path's: no event can name it.
        if name.to_str().is_some_and(&is_named) {
            continue;
        }
        let path = entry.path();
        let Ok(metadata) = std::fs::symlink_metadata(&path) else { continue };
        if !metadata.is_file() {
            continue;
        }
        if metadata.modified().map_or(true, young) {
            collected.kept_young += 1;
            continue;
        }
        let mut aside_name = std::ffi::OsString::from(".");
        aside_name.push(&name);
        aside_name.push(format!(".{}.collect", crate::clock::new_id()));
        let aside = dir.join(aside_name);
        if let Err(error) = std::fs::rename(&path, &aside) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %path.display(), %error, "could not collect an unnamed artifact");
            }
            continue;
        }
        match std::fs::symlink_metadata(&aside) {
            // A store put a fresh copy in place just before the rename: the same bytes, wanted again.
            Ok(moved) if moved.modified().map_or(true, young) => {
                if let Err(error) = std::fs::rename(&aside, &path) {
                    tracing::warn!(path = %path.display(), %error, "could not put back an artifact stored again");
                }
                collected.kept_young += 1;
            }
            Ok(moved) => match std::fs::remove_file(&aside) {
                Ok(()) => {
                    collected.removed += 1;
                    collected.removed_bytes += moved.len();
                }
                Err(error) => tracing::warn!(path = %aside.display(), %error, "could not remove an unnamed artifact"),
            },
            Err(error) => tracing::warn!(path = %aside.display(), %error, "could not read an artifact set aside"),
        }
    }
    Ok(collected)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn write_aged(dir: &Path, name: &str, bytes: &[u8], age: Duration) {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(SystemTime::now() - age).unwrap();
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|entry| entry.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        names
    }

    #[test]
    fn old_unnamed_files_go_and_named_or_young_ones_stay() {
        let data_dir = tempfile::tempdir().unwrap();
        let dir = data_dir.path().join(ARTIFACTS_DIR);
        std::fs::create_dir(&dir).unwrap();
        write_aged(&dir, "named.png", b"kept", 2 * HOUR);
        write_aged(&dir, "orphan.png", b"12345", 2 * HOUR);
        write_aged(&dir, ".orphan.png.01.tmp", b"12", 2 * HOUR);
        write_aged(&dir, "young.png", b"new", Duration::from_secs(60));
        std::fs::create_dir(dir.join("folder")).unwrap();
        std::os::unix::fs::symlink(dir.join("named.png"), dir.join("link.png")).unwrap();
        let collected = collect_unnamed(data_dir.path(), |name| name == "named.png", HOUR, SystemTime::now()).unwrap();
        assert_eq!(collected, Collected { removed: 2, removed_bytes: 7, kept_young: 1 });
        assert_eq!(names(&dir), ["folder", "link.png", "named.png", "young.png"]);
        // With no grace, the young one goes too.
        let collected = collect_unnamed(data_dir.path(), |name| name == "named.png", Duration::ZERO, SystemTime::now());
        assert_eq!(collected.unwrap().removed, 1);
        assert_eq!(names(&dir), ["folder", "link.png", "named.png"]);
    }

    #[test]
    fn a_missing_directory_is_nothing_to_collect() {
        let data_dir = tempfile::tempdir().unwrap();
        let collected = collect_unnamed(data_dir.path(), |_| false, HOUR, SystemTime::now()).unwrap();
        assert_eq!(collected, Collected::default());
    }

    #[test]
    fn storing_an_old_orphan_again_makes_it_young_so_it_is_kept() {
        let data_dir = tempfile::tempdir().unwrap();
        let path = crate::input_files::store_artifact(data_dir.path(), b"\x89PNG\r\n\x1a\n", "png").unwrap();
        let file = std::fs::File::options().write(true).open(data_dir.path().join(&path)).unwrap();
        file.set_modified(SystemTime::now() - 2 * HOUR).unwrap();
        assert_eq!(crate::input_files::store_artifact(data_dir.path(), b"\x89PNG\r\n\x1a\n", "png").unwrap(), path);
        let collected = collect_unnamed(data_dir.path(), |_| false, HOUR, SystemTime::now()).unwrap();
        assert_eq!(collected, Collected { removed: 0, removed_bytes: 0, kept_young: 1 });
        assert!(data_dir.path().join(&path).is_file());
    }
}
