//! Which mounts show a folder beneath a denied path under another path: bind mounts, told by the kernel's mount
//! table instead of by a walk of the denied paths.
//!
//! A folder has one name on its file system (folders cannot be hard-linked); another path to it goes through a
//! mount whose root is that folder or one above it. So of the folders above a location, only the roots of mounts
//! can lead into a denied path from outside it (one that is a denied path itself is caught by its identity,
//! [`super::protected`]); and a file with one name is elsewhere only as a mount's root itself (a file bind-mounted
//! on a file). `statx` says whether a folder is a mount's root, and which mount (Linux 5.8; the sandbox
//! needs 5.13). `/proc/self/mountinfo` says, for each mount, which folder of its file system it shows (its `root`
//! path there, `/` for the whole file system); that lies beneath a denied path when it lies at or below the denied
//! path's own place on the same file system, or on a file system mounted inside the denied path (whose root, shown
//! anywhere else, is then denied too).
//!
//! This replaced a walk of every folder beneath the denied paths at a daemon's first file tool call (a `stat` per
//! session folder, about 20 ms of CPU with 10,000 sessions, docs/performance.md figure 14), whose index also missed
//! folders made after it (a session's folder bind-mounted later) and stopped at 200,000 entries. The mount table
//! is read when a location passes a bind mount, so it is never out of date, and nothing is walked. The other mounts
//! of the same file system also say where the shown folder lies, so that the folders above it there can be checked
//! for another daemon's data dir, which is known by its layout rather than listed.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, CWD, Statx, StatxAttributes, StatxFlags};

/// Where a folder stands among the mounts, as `statx` tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum MountPlace {
    /// The folder is the root of the mount with this id (`mountinfo`'s first field).
    Root(u64),
    /// The folder is inside the mount with this id, not its root.
    Inside(u64),
}

/// Where the folder or file at `path` (links followed) stands, or `None` when it cannot be looked at or the kernel
/// does not say whether it is a mount's root (before Linux 5.8).
pub(super) fn mount_place(path: &Path) -> Option<MountPlace> {
    place(rustix::fs::statx(CWD, path, AtFlags::empty(), StatxFlags::MNT_ID).ok()?)
}

/// [`mount_place`] of an open file: the very file opened, with no path resolved again.
pub(super) fn mount_place_of(file: &File) -> Option<MountPlace> {
    place(rustix::fs::statx(file, "", AtFlags::EMPTY_PATH, StatxFlags::MNT_ID).ok()?)
}

fn place(stat: Statx) -> Option<MountPlace> {
    if !stat.stx_attributes_mask.contains(StatxAttributes::MOUNT_ROOT)
        || !StatxFlags::from_bits_retain(stat.stx_mask).contains(StatxFlags::MNT_ID)
    {
        return None;
    }
    Some(if stat.stx_attributes.contains(StatxAttributes::MOUNT_ROOT) {
        MountPlace::Root(stat.stx_mnt_id)
    } else {
        MountPlace::Inside(stat.stx_mnt_id)
    })
}

/// A place on a file system: its device (`major:minor`, as the mount table writes it) and its path from the file
/// system's root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Source {
    device: String,
    path: PathBuf,
}

impl Source {
    /// Whether this place is `other` or lies beneath it.
    pub(super) fn within(&self, other: &Source) -> bool {
        self.device == other.device && self.path.starts_with(&other.path)
    }
}

/// One line of the mount table.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Mount {
    device: String,
    /// The folder of its file system the mount shows; `None` when that folder was deleted since.
    root: Option<PathBuf>,
    mount_point: PathBuf,
}

/// The mounts of the daemon's mount namespace, by id, as the kernel shows them now.
#[derive(Debug, Default)]
pub(super) struct MountTable {
    mounts: HashMap<u64, Mount>,
}

/// What a mount's root shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Shown {
    /// A folder of a file system: its root (a whole file system, or a bind mount of its root) or one below it (a
    /// bind mount).
    Folder(Source),
    /// A folder deleted since it was mounted: on no path any more.
    Deleted,
}

impl MountTable {
    /// Reads `/proc/self/mountinfo`.
    pub(super) fn read() -> io::Result<MountTable> {
        Ok(MountTable::parse(&std::fs::read(PROC_MOUNTINFO)?))
    }

    fn parse(text: &[u8]) -> MountTable {
        let mounts = text.split(|&byte| byte == b'\n').filter_map(parse_line).collect();
        MountTable { mounts }
    }

    /// What the root of mount `id` shows; `None` when the table has no such mount (it went since `statx`).
    pub(super) fn shown_by(&self, id: u64) -> Option<Shown> {
        let mount = self.mounts.get(&id)?;
        Some(match &mount.root {
            None => Shown::Deleted,
            Some(root) => Shown::Folder(Source { device: mount.device.clone(), path: root.clone() }),
        })
    }

    /// Where the canonical `path`, which lies on mount `id`, is on its file system; `None` when the table cannot
    /// say (no such mount, a path outside the mount's point, a deleted root).
    pub(super) fn source_of(&self, id: u64, path: &Path) -> Option<Source> {
        let mount = self.mounts.get(&id)?;
        let within_mount = path.strip_prefix(&mount.mount_point).ok()?;
        let root = mount.root.as_ref()?;
        Some(Source { device: mount.device.clone(), path: root.join(within_mount) })
    }

    /// The paths at which mounts other than `except` show `source`: where it lies, seen through the mounts of its
    /// file system that show a folder at or above it.
    pub(super) fn paths_showing(&self, source: &Source, except: u64) -> Vec<PathBuf> {
        (self.mounts.iter())
            .filter(|(id, mount)| **id != except && mount.device == source.device)
            .filter_map(|(_, mount)| {
                let below = source.path.strip_prefix(mount.root.as_ref()?).ok()?;
                Some(mount.mount_point.join(below))
            })
            .collect()
    }

    /// Every place of a file system that the canonical `path` (on mount `id`) shows at or beneath it: its own, and
    /// the root of each mount whose point lies beneath it (another file system mounted inside a denied folder is
    /// denied too); `None` when the table cannot place `path`.
    pub(super) fn sources_within(&self, id: u64, path: &Path) -> Option<Vec<Source>> {
        let own = self.source_of(id, path)?;
        let mounted_inside = self
            .mounts
            .values()
            .filter(|mount| mount.mount_point.starts_with(path))
            .filter_map(|mount| Some(Source { device: mount.device.clone(), path: mount.root.clone()? }));
        Some(std::iter::once(own).chain(mounted_inside).collect())
    }
}

const PROC_MOUNTINFO: &str = "/proc/self/mountinfo";

/// The suffix the kernel gives a mount's root that was deleted.
const DELETED: &[u8] = b"//deleted";

/// `36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw`: id, parent id, device, root, mount
/// point, then options this module does not need.
fn parse_line(line: &[u8]) -> Option<(u64, Mount)> {
    let mut fields = line.split(|&byte| byte == b' ');
    let id = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
    let _parent = fields.next()?;
    let device = std::str::from_utf8(fields.next()?).ok()?.to_owned();
    let root = unescape(fields.next()?);
    let mount_point = PathBuf::from(OsStr::from_bytes(&unescape(fields.next()?)));
    let root = match root.strip_suffix(DELETED) {
        Some(_) => None,
        None => Some(PathBuf::from(OsStr::from_bytes(&root))),
    };
    Some((id, Mount { device, root, mount_point }))
}

/// A path of the mount table with its octal escapes (`\040` for a space, `\134` for a backslash) undone.
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(field.len());
    let mut rest = field;
    while let Some((&first, tail)) = rest.split_first() {
        if first == b'\\'
            && let [a, b, c, ..] = tail
            && [a, b, c].iter().all(|digit| (b'0'..=b'7').contains(*digit))
        {
            bytes.push((a - b'0') * 64 + (b - b'0') * 8 + (c - b'0'));
            rest = &tail[3..];
            continue;
        }
        bytes.push(first);
        rest = tail;
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &[u8] = b"\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 0:26 / /proc rw,nosuid - proc proc rw
41 22 254:0 /work/data/sessions/s1 /work/project/s1 rw,relatime shared:1 - ext4 /dev/vda rw
42 22 254:16 /srv/a\\040b /mnt/with\\040space rw - ext4 /dev/vdb rw
43 22 254:0 /work/gone//deleted /mnt/gone rw - ext4 /dev/vda rw
44 22 254:16 / /mnt/disk rw - ext4 /dev/vdb rw
";

    #[test]
    fn the_table_says_what_each_mount_shows() {
        let table = MountTable::parse(TABLE);
        assert_eq!(table.shown_by(22), Some(Shown::Folder(Source { device: "254:0".into(), path: "/".into() })));
        assert_eq!(table.shown_by(44), Some(Shown::Folder(Source { device: "254:16".into(), path: "/".into() })));
        assert_eq!(
            table.shown_by(41),
            Some(Shown::Folder(Source { device: "254:0".into(), path: "/work/data/sessions/s1".into() }))
        );
        assert_eq!(
            table.shown_by(42),
            Some(Shown::Folder(Source { device: "254:16".into(), path: "/srv/a b".into() })),
            "escapes undone"
        );
        assert_eq!(table.mounts[&42].mount_point, Path::new("/mnt/with space"));
        assert_eq!(table.shown_by(43), Some(Shown::Deleted));
        assert_eq!(table.shown_by(99), None);
    }

    #[test]
    fn a_path_is_placed_on_its_file_system_through_its_mount() {
        let table = MountTable::parse(TABLE);
        let data = table.source_of(22, Path::new("/work/data")).unwrap();
        assert_eq!(data, Source { device: "254:0".into(), path: "/work/data".into() });
        let Some(Shown::Folder(bound)) = table.shown_by(41) else { panic!("a bind mount") };
        assert!(bound.within(&data), "a session folder bound elsewhere is within the data dir");
        assert!(data.within(&data));
        assert!(!data.within(&bound));
        let elsewhere = Source { device: "254:0".into(), path: "/work/database".into() };
        assert!(!elsewhere.within(&data), "by components, not by bytes");
        let other_disk = Source { device: "254:16".into(), path: "/work/data/x".into() };
        assert!(!other_disk.within(&data), "the same path on another file system");

        // Through a bind mount: /work/project/s1/sub is /work/data/sessions/s1/sub on the disk.
        let inside = table.source_of(41, Path::new("/work/project/s1/sub")).unwrap();
        assert_eq!(inside.path, Path::new("/work/data/sessions/s1/sub"));
        assert_eq!(table.source_of(41, Path::new("/elsewhere")), None, "not below the mount's point");
        assert_eq!(table.source_of(43, Path::new("/mnt/gone/x")), None, "a deleted root");
    }

    #[test]
    fn a_bind_mount_s_folder_is_found_where_it_lies_through_the_other_mounts() {
        let table = MountTable::parse(TABLE);
        let Some(Shown::Folder(bound)) = table.shown_by(41) else { panic!("a bind mount") };
        assert_eq!(table.paths_showing(&bound, 41), [PathBuf::from("/work/data/sessions/s1")]);
        let Some(Shown::Folder(other_disk)) = table.shown_by(42) else { panic!("a bind mount") };
        assert_eq!(table.paths_showing(&other_disk, 42), [PathBuf::from("/mnt/disk/srv/a b")]);
    }

    #[test]
    fn a_file_system_mounted_inside_a_path_is_within_it() {
        // /work/data/sessions is a tmpfs of its own; /work/project/s1 a bind mount of its folder s1.
        let table = MountTable::parse(
            b"22 1 254:0 / / rw - ext4 /dev/vda rw\n\
              60 22 0:50 / /work/data/sessions rw - tmpfs tmpfs rw\n\
              61 22 0:50 /s1 /work/project/s1 rw - tmpfs tmpfs rw\n",
        );
        let data = table.sources_within(22, Path::new("/work/data")).unwrap();
        assert_eq!(data.len(), 2, "{data:?}");
        let Some(Shown::Folder(bound)) = table.shown_by(61) else { panic!("a bind mount") };
        assert!(data.iter().any(|denied| bound.within(denied)));
        let project = table.sources_within(22, Path::new("/work/project")).unwrap();
        assert_eq!(project.len(), 2, "the bind mount inside it: {project:?}");
        let other = table.sources_within(22, Path::new("/work/database")).unwrap();
        assert_eq!(other.len(), 1, "by components: {other:?}");
        // The tmpfs's root, bound elsewhere, shows what the data dir's `sessions` holds.
        let root = Source { device: "0:50".into(), path: "/".into() };
        assert!(data.iter().any(|denied| root.within(denied)));
        let whole_disk = Source { device: "254:0".into(), path: "/".into() };
        assert!(!data.iter().any(|denied| whole_disk.within(denied)), "the disk's root is above the data dir");
    }

    #[test]
    fn malformed_lines_are_skipped_and_bad_escapes_kept_as_they_are() {
        let table = MountTable::parse(b"garbage\n\n50 1 8:1 /a\\09x /m\\\\ rw - ext4 x rw\n");
        assert_eq!(table.mounts.len(), 1);
        assert_eq!(table.mounts[&50].root.as_deref(), Some(Path::new("/a\\09x")));
        assert_eq!(table.mounts[&50].mount_point, Path::new("/m\\\\"));
    }

    #[test]
    fn this_machine_tells_mount_roots_and_its_table_knows_them() {
        // The sandbox needs Linux 5.13, which tells mount roots; `/proc` is mounted where file tools run.
        let Some(MountPlace::Root(proc_mount)) = mount_place(Path::new("/proc")) else {
            panic!("/proc is a mount's root: {:?}", mount_place(Path::new("/proc")))
        };
        let folder = tempfile::tempdir().unwrap();
        std::fs::create_dir(folder.path().join("sub")).unwrap();
        let Some(MountPlace::Inside(mount)) = mount_place(&folder.path().join("sub")) else {
            panic!("a new folder is no mount's root")
        };
        let opened = File::open(folder.path().join("sub")).unwrap();
        assert_eq!(mount_place_of(&opened), Some(MountPlace::Inside(mount)), "the same, asked of the open file");
        assert_eq!(mount_place_of(&File::open("/proc").unwrap()), Some(MountPlace::Root(proc_mount)));
        let table = MountTable::read().unwrap();
        assert!(table.shown_by(proc_mount).is_some());
        let canonical = folder.path().canonicalize().unwrap();
        assert!(table.source_of(mount, &canonical).is_some(), "{canonical:?} on mount {mount}: {table:?}");
        assert_eq!(mount_place(Path::new("/no/such/folder")), None);
    }
}
