//! Turning a plan into a Landlock ruleset descriptor.
//!
//! Each rule opens the inode it attaches to. A plan beside a large folder holds a rule for each of its entries,
//! often twice (read beneath `/`, write beneath the cwd), so the entries of a listed folder are opened relative to
//! the folder's own descriptor, checked once, and a path planned with several grants is opened once and gets one
//! rule with all their rights (what the kernel makes of two rules on one inode anyway).

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset, RulesetAttr, RulesetCreated,
    RulesetCreatedAttr, Scope,
};
use rustix::fs::{FileType, Mode, OFlags};

use super::super::plan::{Grant, PlannedRule, is_within_any, names_holding};
use super::super::plan_cache::Identity;

/// A ruleset built from a plan.
pub(in super::super) struct Built {
    /// Its descriptor (close-on-exec).
    pub fd: OwnedFd,
    /// The identity of what each *root* rule named (`None`: nothing there, a symlink, or a path that no longer
    /// resolves to itself): the rules that are not entries of a listed folder, whose stamp covers those.
    pub roots: Vec<(PathBuf, Identity)>,
    /// How many rules it holds.
    pub rules: usize,
}

/// Creates the ruleset (handling every filesystem right of `abi`, and signal scoping from ABI 6) and adds one
/// rule per planned path that still is what was planned.
///
/// `listed` are the folders whose entries the plan listed (those that hold a denied path), and `carved` the
/// inodes of the denied paths and of those folders. A legitimate rule never names one of these inodes: the carving
/// gives them none. A path that reaches one all the same (a bind mount of the data dir, or of the home that holds
/// it, made by someone outside the sandbox) gets no read or write grant, since a rule on that inode would open it,
/// or all beneath it, under every path.
pub(in super::super) fn build<'a>(
    abi: u32,
    rules: impl Iterator<Item = &'a PlannedRule>,
    denied: &[PathBuf],
    listed: &HashSet<&OsStr>,
    carved: &HashSet<(u64, u64)>,
) -> Result<Built, String> {
    let abi = ABI::from(i32::try_from(abi).unwrap_or(i32::MAX));
    let rights = Rights::of(abi);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(rights.handled)
        .map_err(|error| error.to_string())?;
    if !Scope::from_all(abi).is_empty() {
        // Signals and abstract Unix sockets (an X server, a D-Bus bus) reach nothing outside the sandbox.
        ruleset = ruleset.scope(Scope::Signal | Scope::AbstractUnixSocket).map_err(|error| error.to_string())?;
    }
    let mut created = ruleset.create().map_err(|error| error.to_string())?;
    let (roots, folders) = grouped(rules, listed);
    let mut identities = Vec::with_capacity(roots.len());
    let mut added = 0;
    for (path, grants) in roots {
        let opened = open_as_planned(path);
        identities.push((path.to_path_buf(), opened.as_ref().map(|opened| opened.identity)));
        let Some(opened) = opened else {
            continue;
        };
        // A read or write grant whose path holds or lies in a denied path is skipped, whatever the plan said.
        let broad = !is_within_any(path, denied)
            && !denied.iter().any(|denied| denied.starts_with(path))
            && !carved.contains(&opened.identity);
        created = add(created, &rights, opened, grants, broad, &mut added)?;
    }
    for (folder, entries) in folders {
        // The folder itself is checked like a root; then each entry is its name beneath this very inode.
        let Some(folder_fd) = open_as_planned(folder).filter(|opened| opened.is_dir) else {
            continue;
        };
        let folder_denied = is_within_any(folder, denied);
        let holding = names_holding(folder, denied);
        for (name, grants) in entries {
            let Some(opened) = open_entry(&folder_fd.fd, name) else {
                continue;
            };
            let broad = !folder_denied && !holding.contains(name) && !carved.contains(&opened.identity);
            created = add(created, &rights, opened, grants, broad, &mut added)?;
        }
    }
    let fd = Option::<OwnedFd>::from(created).ok_or_else(|| "the kernel gave no ruleset".to_owned())?;
    Ok(Built { fd, roots: identities, rules: added })
}

/// The bits of [`Grant::Read`] for `abi`, for a rule the child adds itself (on its own `/proc`).
pub(in super::super) fn read_access(abi: u32) -> u64 {
    Rights::of(ABI::from(i32::try_from(abi).unwrap_or(i32::MAX))).read.bits()
}

/// The grants planned for one path.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
struct Grants(u8);

impl Grants {
    const ALL: [Grant; 4] = [Grant::ListNames, Grant::Read, Grant::Write, Grant::Device];

    fn bit(grant: Grant) -> u8 {
        match grant {
            Grant::ListNames => 1,
            Grant::Read => 2,
            Grant::Write => 4,
            Grant::Device => 8,
        }
    }

    fn with(self, grant: Grant) -> Grants {
        Grants(self.0 | Grants::bit(grant))
    }

    fn iter(self) -> impl Iterator<Item = Grant> {
        Grants::ALL.into_iter().filter(move |grant| self.0 & Grants::bit(*grant) != 0)
    }
}

/// The roots: paths that are no entry of a listed folder, with their grants.
type Roots<'a> = Vec<(&'a Path, Grants)>;

/// The entries of one listed folder, by name, with their grants.
type Entries<'a> = Vec<(&'a OsStr, Grants)>;

/// The planned paths with their grants merged (in the order first planned), split into the roots and, per listed
/// folder, its entries. Paths are compared as written: the plan writes each path one way.
fn grouped<'a>(
    rules: impl Iterator<Item = &'a PlannedRule>,
    listed: &HashSet<&OsStr>,
) -> (Roots<'a>, Vec<(&'a Path, Entries<'a>)>) {
    let mut merged: Vec<(&'a Path, Grants)> = Vec::new();
    let mut index: HashMap<&'a OsStr, usize> = HashMap::new();
    for rule in rules {
        let slot = *index.entry(rule.path.as_os_str()).or_insert_with(|| {
            merged.push((rule.path.as_path(), Grants::default()));
            merged.len() - 1
        });
        merged[slot].1 = merged[slot].1.with(rule.grant);
    }
    let mut roots = Vec::new();
    let mut folders: Vec<(&'a Path, Entries<'a>)> = Vec::new();
    let mut folder_index: HashMap<&'a OsStr, usize> = HashMap::new();
    for (path, grants) in merged {
        let entry = path.parent().zip(path.file_name()).filter(|(folder, _)| listed.contains(folder.as_os_str()));
        let Some((folder, name)) = entry else {
            roots.push((path, grants));
            continue;
        };
        let slot = *folder_index.entry(folder.as_os_str()).or_insert_with(|| {
            folders.push((folder, Vec::new()));
            folders.len() - 1
        });
        folders[slot].1.push((name, grants));
    }
    (roots, folders)
}

/// An opened rule path: its `O_PATH` descriptor and what `fstat` said of it.
struct Opened {
    fd: OwnedFd,
    identity: (u64, u64),
    is_dir: bool,
    /// A file with several names (not a folder).
    linked: bool,
}

/// Adds one rule on `opened` with the rights of `grants` (counted in `added`): on a file only a file's rights, and
/// no read or write grant on a file with several names (it may be a denied file under another name: a rule would
/// open it under every name) nor, unless `broad`, at all.
fn add(
    created: RulesetCreated,
    rights: &Rights,
    opened: Opened,
    grants: Grants,
    broad: bool,
    added: &mut usize,
) -> Result<RulesetCreated, String> {
    let mut access = BitFlags::<AccessFs>::empty();
    for grant in grants.iter() {
        let is_broad = matches!(grant, Grant::Read | Grant::Write);
        if is_broad && (!broad || opened.linked) {
            continue;
        }
        if opened.is_dir {
            access |= rights.of_grant(grant);
        } else if grant != Grant::ListNames {
            access |= rights.of_grant(grant) & rights.file;
        }
    }
    if access.is_empty() {
        return Ok(created);
    }
    *added += 1;
    created.add_rule(PathBeneath::new(opened.fd, access)).map_err(|error| error.to_string())
}

/// The access rights of each grant for one ABI.
struct Rights {
    handled: BitFlags<AccessFs>,
    read: BitFlags<AccessFs>,
    write: BitFlags<AccessFs>,
    device: BitFlags<AccessFs>,
    file: BitFlags<AccessFs>,
}

impl Rights {
    fn of(abi: ABI) -> Rights {
        let handled = AccessFs::from_all(abi);
        // Connecting to a Unix socket lets something outside the sandbox act for the process (a Docker or
        // D-Bus socket): allowed only where the process may write anyway (its own sockets in the cwd or
        // $TMPDIR), never under /run or a user's runtime dir.
        let read = AccessFs::from_read(abi) & handled & !AccessFs::ResolveUnix;
        let never = AccessFs::MakeChar | AccessFs::MakeBlock | AccessFs::IoctlDev;
        let write = (AccessFs::from_write(abi) | (handled & AccessFs::ResolveUnix)) & !never;
        let device = (AccessFs::WriteFile | AccessFs::IoctlDev) & handled;
        Rights { handled, read, write, device, file: AccessFs::from_file(abi) }
    }

    fn of_grant(&self, grant: Grant) -> BitFlags<AccessFs> {
        match grant {
            Grant::ListNames => AccessFs::ReadDir.into(),
            Grant::Read => self.read,
            Grant::Write => self.write,
            Grant::Device => self.device,
        }
    }
}

/// Opens the rule's path (`O_PATH`, not following a final symlink), or `None` when it is missing, a symlink, or
/// now resolves elsewhere than planned (a folder on the way was swapped): such a rule is skipped, which only ever
/// takes access away.
fn open_as_planned(path: &Path) -> Option<Opened> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let metadata = file.metadata().ok()?;
    let kind = metadata.file_type();
    if kind.is_symlink() {
        return None;
    }
    let resolved = std::fs::read_link(format!("/proc/self/fd/{}", file.as_fd().as_raw_fd())).ok()?;
    if resolved != path {
        return None;
    }
    Some(Opened {
        fd: OwnedFd::from(file),
        identity: (metadata.dev(), metadata.ino()),
        is_dir: kind.is_dir(),
        linked: !kind.is_dir() && metadata.nlink() > 1,
    })
}

/// Opens the entry `name` of the folder open as `folder` (`O_PATH`, not following a symlink), or `None` when it is
/// gone or a symlink. A name from a listing is one component, so the entry is that folder's, whatever became of
/// the folder's path since it was checked. Its link count is read from the descriptor itself, so a link made after
/// the plan was drawn is caught too.
fn open_entry(folder: &OwnedFd, name: &OsStr) -> Option<Opened> {
    let fd = rustix::fs::openat(folder, name, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()).ok()?;
    let stat = rustix::fs::fstat(&fd).ok()?;
    let kind = FileType::from_raw_mode(stat.st_mode);
    if kind == FileType::Symlink {
        return None;
    }
    let is_dir = kind == FileType::Directory;
    Some(Opened { fd, identity: (stat.st_dev, stat.st_ino), is_dir, linked: !is_dir && stat.st_nlink > 1 })
}

#[cfg(test)]
#[path = "../../../tests/sandbox_support/unavailable.rs"]
mod unavailable;

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "a test panics to fail")]
mod tests {
    use super::*;

    fn rule(path: &str, grant: Grant) -> PlannedRule {
        PlannedRule { path: PathBuf::from(path), grant }
    }

    #[test]
    fn a_path_planned_twice_is_one_rule_and_entries_go_with_their_listed_folder() {
        let rules = [
            rule("/", Grant::ListNames),
            rule("/home/me/project/a", Grant::Read),
            rule("/home/me/project", Grant::Write),
            rule("/home/me/project/a", Grant::Write),
            rule("/home/me/project/b", Grant::Read),
            rule("/usr", Grant::Read),
            rule("/dev/null", Grant::Read),
            rule("/dev/null", Grant::Device),
        ];
        let listed: HashSet<&OsStr> = [OsStr::new("/"), OsStr::new("/home/me/project")].into_iter().collect();
        let (roots, folders) = grouped(rules.iter(), &listed);
        let roots: Vec<_> = roots.iter().map(|(path, grants)| (path.to_str().unwrap(), grants.0)).collect();
        assert_eq!(roots, [("/", 1), ("/home/me/project", 4), ("/dev/null", 2 | 8)]);
        let folders: Vec<_> = folders
            .iter()
            .map(|(folder, entries)| {
                let entries: Vec<_> = entries.iter().map(|(name, grants)| (name.to_str().unwrap(), grants.0)).collect();
                (folder.to_str().unwrap(), entries)
            })
            .collect();
        assert_eq!(folders, [("/home/me/project", vec![("a", 2 | 4), ("b", 2)]), ("/", vec![("usr", 2)])]);
    }

    #[test]
    fn an_entry_is_what_its_folder_holds_under_that_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("file"), "x").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::os::unix::fs::symlink("file", dir.path().join("link")).unwrap();
        std::fs::write(dir.path().join("twice"), "x").unwrap();
        std::fs::hard_link(dir.path().join("twice"), dir.path().join("twice-again")).unwrap();
        let folder = open_as_planned(dir.path()).unwrap();
        assert!(folder.is_dir);
        let file = open_entry(&folder.fd, OsStr::new("file")).unwrap();
        let metadata = std::fs::symlink_metadata(dir.path().join("file")).unwrap();
        assert_eq!(file.identity, (metadata.dev(), metadata.ino()));
        assert!(!file.is_dir && !file.linked);
        assert!(open_entry(&folder.fd, OsStr::new("sub")).unwrap().is_dir);
        assert!(open_entry(&folder.fd, OsStr::new("link")).is_none(), "a symlink gets no rule");
        assert!(open_entry(&folder.fd, OsStr::new("missing")).is_none());
        assert!(open_entry(&folder.fd, OsStr::new("twice")).unwrap().linked);
        // A path that resolves elsewhere than written (through a symlinked folder) is not what was planned.
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join("sub/inner"), "x").unwrap();
        std::os::unix::fs::symlink(root.join("sub"), root.join("sub-link")).unwrap();
        assert!(open_as_planned(&root.join("sub/inner")).is_some());
        assert!(open_as_planned(&root.join("sub-link/inner")).is_none());
    }

    /// Enters `ruleset` on a thread of its own (a Landlock domain confines the thread that enters it and what it
    /// starts) and returns what `probe` finds there.
    fn confined<T: Send + 'static>(ruleset: OwnedFd, probe: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(move || {
            // SAFETY: plain syscalls on this thread with integer arguments and a descriptor it owns.
            unsafe {
                assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
                assert_eq!(libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32), 0);
            }
            probe()
        })
        .join()
        .unwrap()
    }

    #[test]
    fn the_ruleset_grants_a_listed_folders_entries_all_their_grants_and_never_a_denied_or_linked_one() {
        let abi = match super::super::probe() {
            super::super::super::Support::Landlock { abi } => abi,
            super::super::super::Support::Unavailable { reason } => {
                return super::unavailable::skip(super::unavailable::Missing::Landlock { reason });
            }
        };
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().canonicalize().unwrap().join("project");
        std::fs::create_dir_all(project.join("sub")).unwrap();
        for name in ["a.txt", "secret", "sub/b.txt", "unplanned", "two-names", "carved"] {
            std::fs::write(project.join(name), "x").unwrap();
        }
        std::fs::hard_link(project.join("two-names"), dir.path().join("elsewhere")).unwrap();
        let at = |name: &str| project.join(name).display().to_string();
        // As a plan carved around `secret` would list them, and two a plan never holds: the denied file itself and
        // a file with two names. The ruleset skips both whatever the plan says.
        let rules = [
            PlannedRule { path: project.join("a.txt"), grant: Grant::Read },
            PlannedRule { path: project.join("sub"), grant: Grant::Read },
            PlannedRule { path: project.join("a.txt"), grant: Grant::Write },
            PlannedRule { path: project.join("secret"), grant: Grant::Read },
            PlannedRule { path: project.join("two-names"), grant: Grant::Read },
            PlannedRule { path: project.join("carved"), grant: Grant::Read },
        ];
        let listed: HashSet<&OsStr> = [project.as_os_str()].into_iter().collect();
        // An inode the carving kept closed (as a bind mount of the data dir would show it, under another path).
        let metadata = std::fs::metadata(project.join("carved")).unwrap();
        let carved = HashSet::from([(metadata.dev(), metadata.ino())]);
        let built = build(abi, rules.iter(), &[project.join("secret")], &listed, &carved).unwrap();
        assert!(built.roots.is_empty(), "every rule is an entry of the listed folder: {:?}", built.roots);
        assert_eq!(built.rules, 2, "a.txt (read and write in one rule) and sub");
        let paths: Vec<String> = ["a.txt", "sub/b.txt", "secret", "two-names", "unplanned", "carved"].map(at).into();
        let (read, written) = confined(built.fd, move || {
            let read: Vec<bool> = paths.iter().map(|path| std::fs::read(path).is_ok()).collect();
            let written = std::fs::OpenOptions::new().append(true).open(&paths[0]).is_ok();
            (read, written)
        });
        assert_eq!(
            read,
            [true, true, false, false, false, false],
            "a.txt, sub/b.txt, secret, two-names, unplanned, carved"
        );
        assert!(written, "a.txt's read and write grants are one rule with both");
    }
}
