//! Denied paths that are whole pseudo file systems: refused by device instead of indexed.
//!
//! The file tools may never read `/proc` (the daemon's own environment, memory and descriptors are there), and a
//! configuration may deny `/sys`. The link index ([`super::link_index`]) walks each denied path for the identities
//! beneath it, so that another name for one of its entries (a bind mount, a hard link) is refused too. Walked that
//! way, `/proc` is every process's entries, tasks and descriptors: about 40,000 entries on an idle machine and the
//! walk's limit of 200,000 on a busy one, read at a daemon's first file tool call (about 170 ms of CPU there before
//! its first `read_file` answered, docs/performance.md figure 14), and out of date as soon as a process starts.
//!
//! Every file of a proc or sysfs instance lies beneath the root of its mount and carries the instance's device,
//! so a denied path that is such a root is refused by its device: a file opened on that device, or a folder on it
//! above a location, is beneath the denied path whatever path led there, processes started later included.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The device of `path` when it is the root of a proc or sysfs mount, whose every file is then beneath it.
pub(super) fn whole_device(path: &Path) -> Option<u64> {
    if !file_system_is(path, &[libc::PROC_SUPER_MAGIC, libc::SYSFS_MAGIC]) {
        return None;
    }
    let device = std::fs::metadata(path).ok()?.dev();
    // A folder inside the file system (`/proc/sys`) is not its root: the files of its device outside it are not
    // denied.
    let parent_device = match path.parent() {
        Some(parent) => std::fs::metadata(parent).ok()?.dev(),
        None => return Some(device),
    };
    (parent_device != device).then_some(device)
}

/// Whether the file system `path` is on is of one of `kinds` (`statfs` magic numbers, whose integer type differs
/// between C libraries); false when it cannot be asked.
pub(super) fn file_system_is<Kind: Copy + Into<i128>>(path: &Path, kinds: &[Kind]) -> bool {
    rustix::fs::statfs(path).is_ok_and(|stat| kinds.iter().any(|kind| (*kind).into() == i128::from(stat.f_type)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_of_proc_is_a_whole_device_and_a_folder_in_it_or_an_ordinary_folder_is_not() {
        let folder = tempfile::tempdir().unwrap();
        assert_eq!(whole_device(folder.path()), None);
        assert_eq!(whole_device(Path::new("/no/such/folder")), None);
        // The file tools need `/proc` (descriptor checks), so a machine that runs them has it mounted.
        let proc_device = std::fs::metadata("/proc").unwrap().dev();
        assert_eq!(whole_device(Path::new("/proc")), Some(proc_device));
        assert_eq!(whole_device(Path::new("/proc/self/fd")), None);
    }
}
