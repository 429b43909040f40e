//! The folder of a daemon's run temp dirs, `<system temp>/troupe-<uid>-<hash of the data dir>`, and the leftovers
//! of daemons whose data directory is gone.
//!
//! A run's temp dir lives outside the data directory (which is denied to tools), in a folder of this user that
//! only this user can enter. A daemon clears its own folder at start (what a killed daemon's runs left) and writes
//! beside the runs' dirs a note naming its data directory. A data directory deleted while its folder remained (a
//! test's temporary data dir, a `--data-dir` tried once) would leave that folder in the system temp dir for good,
//! and a temp dir crowded with them makes every listing of it slower; so each start also removes the folders of
//! this user whose note names a data directory that is no longer one, and folders without a note (made by older
//! daemons): empty ones that nothing touched for [`UNNOTED_MIN_AGE`], and those holding only runs' temp dirs that
//! nothing touched for [`UNNOTED_LEFTOVERS_MIN_AGE`].

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::data_dirs::is_data_dir;

/// The note in a temp root naming the data directory it belongs to.
pub const OWNER_NOTE: &str = ".data-dir";

/// How long an empty temp root without a note stays untouched before another daemon removes it.
pub const UNNOTED_MIN_AGE: Duration = Duration::from_secs(3600);

/// The largest note read.
const MAX_NOTE_BYTES: u64 = 16 * 1024;

/// `<system temp>/troupe-<uid>-<first 16 hex digits of the SHA-256 of the data directory's path>`: where the runs of
/// the daemon of `data_dir` (canonical) make their temp dirs.
pub fn temp_root_of(data_dir: &Path) -> PathBuf {
    temp_root_in(&std::env::temp_dir(), data_dir)
}

fn temp_root_in(system_temp: &Path, data_dir: &Path) -> PathBuf {
    use sha2::{Digest, Sha256};
    use std::os::unix::ffi::OsStrExt;
    let digest = Sha256::digest(data_dir.as_os_str().as_bytes());
    let hash: String = digest.iter().take(8).map(|byte| format!("{byte:02x}")).collect();
    system_temp.join(format!("{}{hash}", name_prefix()))
}

/// `troupe-<uid>-`: the start of every temp root of this user.
fn name_prefix() -> String {
    // SAFETY: geteuid cannot fail and touches no memory of ours.
    let uid = unsafe { libc::geteuid() };
    format!("troupe-{uid}-")
}

/// Whether `metadata` is a real directory of this user that only this user can enter.
fn is_private_folder(metadata: &std::fs::Metadata) -> bool {
    // SAFETY: geteuid cannot fail and touches no memory of ours.
    let uid = unsafe { libc::geteuid() };
    metadata.is_dir() && metadata.uid() == uid && metadata.mode() & 0o077 == 0
}

/// `root`, created (0700) if missing, and refused unless it is a private folder of this user (the system temp dir
/// is shared: another user could have planted a symlink or a folder of theirs). Blocking I/O.
pub fn ensure(root: &Path) -> std::io::Result<PathBuf> {
    match std::fs::DirBuilder::new().mode(0o700).create(root) {
        Ok(()) => return Ok(root.to_path_buf()),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(error),
    }
    let metadata = std::fs::symlink_metadata(root)?;
    if !is_private_folder(&metadata) {
        return Err(std::io::Error::other(format!("{} is not a private folder of this user", root.display())));
    }
    Ok(root.to_path_buf())
}

/// Removes what a previous daemon of `data_dir` left in its temp root (runs that never ended) and writes the owner
/// note. Called once at start, while the data directory's lock is held, so no live run uses the folder.
pub fn clear(root: &Path, data_dir: &Path) -> std::io::Result<()> {
    let root = ensure(root)?;
    for entry in std::fs::read_dir(&root)? {
        let path = entry?.path();
        match std::fs::symlink_metadata(&path) {
            Ok(metadata) if metadata.is_dir() => std::fs::remove_dir_all(&path)?,
            Ok(_) => std::fs::remove_file(&path)?,
            Err(_) => {}
        }
    }
    write_note(&root, data_dir)
}

fn write_note(root: &Path, data_dir: &Path) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;
    let mut note = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(root.join(OWNER_NOTE))?;
    note.write_all(data_dir.as_os_str().as_bytes())
}

/// Removes the temp roots of this user in `system_temp`, other than `own`, whose data directory is gone (see the
/// module doc). Returns how many were removed. Blocking I/O: one `lstat` per entry of the system temp dir named
/// like a temp root.
pub fn prune_orphans(system_temp: &Path, own: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(system_temp) else { return 0 };
    let prefix = name_prefix();
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(hash) = name.to_str().and_then(|name| name.strip_prefix(prefix.as_str())) else { continue };
        let path = entry.path();
        if hash.len() != 16 || !hash.bytes().all(|byte| byte.is_ascii_hexdigit()) || path == own {
            continue;
        }
        match std::fs::symlink_metadata(&path) {
            Ok(metadata) if is_private_folder(&metadata) => {}
            _ => continue,
        }
        if remove_orphan(&path, judge(&path, system_temp)) {
            removed += 1;
        }
    }
    removed
}

/// What a temp root of this user is, judged for removal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Judged {
    /// In use, or its daemon's data dir is still there: kept.
    Kept,
    /// Its note names a data dir that is gone (or a folder that is not its own): removed whole.
    Noted,
    /// No note, empty and old: removed with `rmdir` (never what a daemon made meanwhile).
    EmptyUnnoted,
    /// No note, and nothing in it but runs' and MCP servers' temp dirs that nothing touched for
    /// [`UNNOTED_LEFTOVERS_MIN_AGE`]: what an older daemon killed mid-run left. Removed whole.
    UnnotedLeftovers,
}

/// How long an older daemon's leftover run dirs stay untouched before another daemon removes them: longer than
/// any run (a live older daemon's run dir changes whenever its commands make or remove a file in it).
pub const UNNOTED_LEFTOVERS_MIN_AGE: Duration = Duration::from_secs(24 * 3600);

fn older_than(path: &Path, age: Duration) -> bool {
    std::fs::symlink_metadata(path)
        .and_then(|metadata| metadata.modified())
        .is_ok_and(|modified| SystemTime::now().duration_since(modified).is_ok_and(|elapsed| elapsed >= age))
}

/// Judges the temp root `root` (see [`Judged`]).
fn judge(root: &Path, system_temp: &Path) -> Judged {
    use std::io::Read;
    use std::os::unix::ffi::OsStrExt;
    let note = root.join(OWNER_NOTE);
    let Ok(file) = std::fs::File::open(&note) else {
        let Ok(entries) = std::fs::read_dir(root) else { return Judged::Kept };
        let entries: Vec<std::fs::DirEntry> = entries.flatten().collect();
        if entries.is_empty() {
            return if older_than(root, UNNOTED_MIN_AGE) { Judged::EmptyUnnoted } else { Judged::Kept };
        }
        let leftover = |entry: &std::fs::DirEntry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            (name.starts_with("run-") || name.starts_with("mcp-"))
                && entry.file_type().is_ok_and(|kind| kind.is_dir())
                && older_than(&entry.path(), UNNOTED_LEFTOVERS_MIN_AGE)
        };
        return if entries.iter().all(leftover) { Judged::UnnotedLeftovers } else { Judged::Kept };
    };
    let mut bytes = Vec::new();
    if file.take(MAX_NOTE_BYTES).read_to_end(&mut bytes).is_err() {
        return Judged::Kept;
    }
    let data_dir = Path::new(std::ffi::OsStr::from_bytes(&bytes));
    // A note naming a live data dir whose folder this is: in use, or reused at that daemon's next start.
    if data_dir.is_absolute() && is_data_dir(data_dir) && temp_root_in(system_temp, data_dir) == root {
        Judged::Kept
    } else {
        Judged::Noted
    }
}

/// Removes an orphaned temp root as [`judge`] said; whether it is gone.
fn remove_orphan(root: &Path, judged: Judged) -> bool {
    match judged {
        Judged::Kept => false,
        Judged::EmptyUnnoted => std::fs::remove_dir(root).is_ok(),
        Judged::Noted | Judged::UnnotedLeftovers => std::fs::remove_dir_all(root).is_ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data_dir_in(parent: &Path, name: &str) -> PathBuf {
        let dir = parent.join(name);
        std::fs::create_dir(&dir).unwrap();
        super::super::data_dirs::write_marker(&dir).unwrap();
        dir.canonicalize().unwrap()
    }

    fn set_old(path: &Path) {
        let old = SystemTime::now() - UNNOTED_MIN_AGE - Duration::from_secs(60);
        std::fs::File::open(path).unwrap().set_modified(old).unwrap();
    }

    #[test]
    fn the_folders_of_deleted_data_dirs_are_removed_and_live_ones_kept() {
        let system_temp = tempfile::tempdir().unwrap();
        let homes = tempfile::tempdir().unwrap();
        let own_dir = data_dir_in(homes.path(), "own");
        let live_dir = data_dir_in(homes.path(), "live");
        let gone_dir = data_dir_in(homes.path(), "gone");
        let own = temp_root_in(system_temp.path(), &own_dir);
        let live = temp_root_in(system_temp.path(), &live_dir);
        let gone = temp_root_in(system_temp.path(), &gone_dir);
        for (root, data_dir) in [(&own, &own_dir), (&live, &live_dir), (&gone, &gone_dir)] {
            clear(root, data_dir).unwrap();
            std::fs::DirBuilder::new().mode(0o700).create(root.join("run-1")).unwrap();
        }
        std::fs::remove_dir_all(&gone_dir).unwrap();
        // A folder named like a temp root with a note naming a live data dir that is not its own: a copy, removed.
        let copied = system_temp.path().join(format!("{}{}", name_prefix(), "0123456789abcdef"));
        std::fs::DirBuilder::new().mode(0o700).create(&copied).unwrap();
        write_note(&copied, &live_dir).unwrap();

        assert_eq!(prune_orphans(system_temp.path(), &own), 2);
        assert!(own.join("run-1").is_dir(), "this daemon's own folder is never touched");
        assert!(live.join("run-1").is_dir(), "a live data dir's folder is kept");
        assert!(!gone.exists(), "the folder of a deleted data dir is removed with its leftovers");
        assert!(!copied.exists());
    }

    #[test]
    fn folders_without_a_note_go_only_when_empty_and_old_and_others_are_left_alone() {
        let system_temp = tempfile::tempdir().unwrap();
        let root = |hash: &str| system_temp.path().join(format!("{}{hash}", name_prefix()));
        let empty_old = root("00000000000000aa");
        let empty_new = root("00000000000000bb");
        let full_old = root("00000000000000cc");
        let shared = root("00000000000000dd");
        let not_ours = system_temp.path().join("troupe-shell-00000000000000ee");
        for folder in [&empty_old, &empty_new, &full_old, &not_ours] {
            std::fs::DirBuilder::new().mode(0o700).create(folder).unwrap();
        }
        // Open to others: not a folder a daemon of this user made, so not one to remove.
        std::fs::DirBuilder::new().mode(0o755).create(&shared).unwrap();
        std::fs::write(full_old.join("left"), "x").unwrap();
        for folder in [&empty_old, &full_old, &shared, &not_ours] {
            set_old(folder);
        }

        assert_eq!(prune_orphans(system_temp.path(), Path::new("/nowhere")), 1);
        assert!(!empty_old.exists());
        assert!(empty_new.exists() && full_old.exists() && shared.exists() && not_ours.exists());

        // An older daemon killed mid-run: only run dirs left, untouched for a day, go; a recent one stays.
        let leftovers = root("00000000000000ff");
        let recent = root("0000000000000100");
        for (folder, age) in [(&leftovers, UNNOTED_LEFTOVERS_MIN_AGE), (&recent, Duration::from_secs(60))] {
            std::fs::DirBuilder::new().mode(0o700).create(folder).unwrap();
            let run = folder.join("run-1");
            std::fs::DirBuilder::new().mode(0o700).create(&run).unwrap();
            std::fs::File::open(&run).unwrap().set_modified(SystemTime::now() - age - Duration::from_secs(60)).unwrap();
        }
        assert_eq!(prune_orphans(system_temp.path(), Path::new("/nowhere")), 1);
        assert!(!leftovers.exists() && recent.exists());
    }

    #[test]
    fn clearing_keeps_the_folder_private_and_notes_its_data_dir() {
        let system_temp = tempfile::tempdir().unwrap();
        let homes = tempfile::tempdir().unwrap();
        let data_dir = data_dir_in(homes.path(), "own");
        let root = temp_root_in(system_temp.path(), &data_dir);
        clear(&root, &data_dir).unwrap();
        std::fs::DirBuilder::new().mode(0o700).create(root.join("run-1")).unwrap();
        clear(&root, &data_dir).unwrap();
        let names: Vec<_> = std::fs::read_dir(&root).unwrap().map(|entry| entry.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from(OWNER_NOTE)]);
        assert_eq!(std::fs::read(root.join(OWNER_NOTE)).unwrap(), data_dir.as_os_str().as_encoded_bytes());
        std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        assert!(ensure(&root).is_err(), "a folder others can enter is refused");
    }
}
