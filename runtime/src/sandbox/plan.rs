//! The rules of one tool process as paths and what each allows: computed from the sandbox, the cwd and the temp
//! dir, before any kernel object exists, so that it can be printed and tested on its own.
//!
//! Landlock only grants access beneath a file hierarchy; it cannot take access away from a subtree. So "read
//! everything except the denied paths" is carved: `/` may only list names, and every subtree that holds no denied
//! path gets the full grant. For each folder that holds a denied path (an *ancestor*), each existing entry that is
//! neither denied nor an ancestor gets the grant, and the carving goes on inside the ancestors. Writable roots are
//! carved the same way. The consequence, which `troupe sandbox explain` states: an entry created in an ancestor after
//! the rules were made is not covered (not readable, not writable) for that command.
//!
//! Landlock rules attach to inodes. An entry of an ancestor that is a file with several links may be a denied file
//! under another name, so it gets no rule at all; one that is a bind mount of a denied path or of an ancestor (the
//! same inode) gets no read or write grant when the ruleset is built. Beyond the ancestors the kernel sees paths
//! only: a hard link to a denied file made before the command (the sandbox forbids making one), or a bind mount of
//! a denied folder or of a folder inside one, inside a granted subtree is reachable there (and a bind mount of a
//! folder inside a denied one as an ancestor's entry is reachable at both paths). File tools check inodes, and
//! secrets are masked in tool output.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use super::Sandbox;
use crate::config::SandboxMode;

/// The devices every tool process may read besides nothing else of `/dev` (and [`SHARED_MEMORY`]): raw disks and
/// memory stay closed even to a process running as root.
///
/// No terminal is among them: tool processes run in a session of their own with pipes for stdio, and a terminal
/// device would reach the user's terminal (reading keystrokes, injecting input with TIOCSTI).
pub const READABLE_DEVICES: [&str; 5] = ["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"];

/// Devices every tool process may write (and send ioctls to, where the kernel governs ioctls), in every mode.
pub const WRITABLE_DEVICES: [&str; 3] = ["/dev/null", "/dev/zero", "/dev/full"];

/// Shared memory: readable in every mode, and a write root like the cwd in `workspace-write` only (a `read-only`
/// command that could write it would leave files behind, readable by the next command, like any other write).
/// Carved like every root, so a denied path inside it stays closed.
pub const SHARED_MEMORY: &str = "/dev/shm";

/// The folder whose entries are not readable unless listed in [`READABLE_DEVICES`].
const DEVICES: &str = "/dev";

/// The kernel's own folders: never written through a write root, even a cwd of `/` (as root, a write there reaches
/// raw disks, kernel settings and devices). Only [`SHARED_MEMORY`] and the [`WRITABLE_DEVICES`] are written in
/// `/dev`, by rules of their own.
pub(super) const SYSTEM_FOLDERS: [&str; 3] = [DEVICES, "/proc", "/sys"];

/// Whether `path` is one of the kernel's folders ([`SYSTEM_FOLDERS`]) or lies in one.
pub(super) fn in_kernel_folder(path: &Path) -> bool {
    SYSTEM_FOLDERS.iter().any(|folder| path.starts_with(folder))
}

/// What one rule allows beneath its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Grant {
    /// List the entries of directories: names are visible, contents are not.
    ListNames,
    /// Read files, list directories, execute files (and connect to Unix sockets where the kernel governs it).
    Read,
    /// Write and truncate files; create, remove, rename and link files, directories, symlinks, fifos and sockets
    /// (never device nodes).
    Write,
    /// Write to a device and send it ioctls (`/dev/null`).
    Device,
}

/// One rule: `grant` beneath `path`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlannedRule {
    pub path: PathBuf,
    pub grant: Grant,
}

/// Every rule of one tool process, the writable roots that were dropped because a denied path holds them, and the
/// denied paths the rules were carved around (the sandbox's own, then the other troupe data dirs found).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SandboxPlan {
    pub rules: Vec<PlannedRule>,
    /// The roots written (before carving), which a command's mount namespace keeps writable.
    pub write_roots: Vec<PathBuf>,
    pub dropped_writable: Vec<PathBuf>,
    pub denied: Vec<PathBuf>,
}

/// The roots a mode lets tool processes write besides the run's temp dir (see [`temp_dir_rules`]), canonical where
/// they exist, and those dropped because they lie in a denied path (the deny wins) or a kernel folder.
fn write_roots(sandbox: &Sandbox, denied: &[PathBuf], cwd: &Path, extra: &[PathBuf]) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let candidates: Vec<PathBuf> = match sandbox.mode() {
        // The cwd as recorded (canonical when the session was made), not resolved again: a cwd replaced by a
        // symlink since would otherwise grant the folder it leads to. The ruleset opens every rule's path and
        // skips one that no longer resolves to itself, so such a cwd gets no rule at all.
        SandboxMode::WorkspaceWrite => [cwd.to_path_buf(), PathBuf::from(SHARED_MEMORY)]
            .into_iter()
            .chain(sandbox.writable().iter().cloned())
            // A further root (a repository's git dir) never holds a denied path: not `/`, not a home folder.
            .chain(
                extra
                    .iter()
                    .map(|path| canonical(path))
                    .filter(|path| !denied.iter().any(|denied| denied.starts_with(path))),
            )
            .collect(),
        SandboxMode::ReadOnly | SandboxMode::Off => Vec::new(),
    };
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for root in candidates {
        let system = in_kernel_folder(&root) && !root.starts_with(SHARED_MEMORY);
        if is_within_any(&root, denied) || system {
            push_unique(&mut dropped, root);
        } else {
            push_unique(&mut kept, root);
        }
    }
    (kept, dropped)
}

fn canonical(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

/// The rules of a process started in `cwd` with `temp_dir`. Lists the folders that hold denied paths (blocking
/// I/O). An entry that cannot be listed or is a symlink gets no rule: less access, never more. The denied paths are
/// the sandbox's and every other troupe data dir the command could reach ([`Sandbox::denied_around`]).
///
/// `extra_writable` are roots the process may write besides the mode's (in `workspace-write` only): the git
/// directory of the repository that holds the cwd, when it lies outside it.
pub fn plan(sandbox: &Sandbox, cwd: &Path, temp_dir: &Path, extra_writable: &[PathBuf]) -> SandboxPlan {
    let denied = sandbox.denied_around(cwd);
    let mut plan = base_plan(sandbox, cwd, denied, extra_writable, &mut Vec::new());
    let (rules, temp_root) = temp_dir_rules(sandbox, &plan, temp_dir);
    plan.rules.extend(rules);
    plan.dropped_writable.extend(temp_root.dropped().cloned());
    plan
}

/// A folder whose entries a plan lists, as it was right before they were listed: what the plan cache compares to
/// know whether the entries can have changed since (see [`super::plan_cache`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Listed {
    pub path: PathBuf,
    /// The folder's identity and times, `None` when it could not be read.
    pub stamp: Option<DirStamp>,
    /// The system clock right before `stamp` was read.
    pub read_at: std::time::SystemTime,
}

/// What changes when a folder's entries change: a new, removed or renamed entry changes its mtime and ctime; a
/// folder put in its place has another device or inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct DirStamp {
    pub dev: u64,
    pub ino: u64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

impl DirStamp {
    /// The folder at `path`, following a final symlink as listing it does.
    pub(super) fn of(path: &Path) -> Option<DirStamp> {
        let metadata = std::fs::metadata(path).ok()?;
        Some(DirStamp {
            dev: metadata.dev(),
            ino: metadata.ino(),
            mtime: (metadata.mtime(), metadata.mtime_nsec()),
            ctime: (metadata.ctime(), metadata.ctime_nsec()),
        })
    }
}

/// The rules that do not depend on the run's temp dir, carved around `denied`; every folder whose entries were
/// listed is added to `listed` (stamped before it was listed).
pub(super) fn base_plan(
    sandbox: &Sandbox,
    cwd: &Path,
    denied: Vec<PathBuf>,
    extra_writable: &[PathBuf],
    listed: &mut Vec<Listed>,
) -> SandboxPlan {
    let mut rules = vec![PlannedRule { path: PathBuf::from("/"), grant: Grant::ListNames }];
    let mut unreadable = denied.clone();
    unreadable.push(PathBuf::from(DEVICES));
    carve(Path::new("/"), Grant::Read, &unreadable, &mut rules, listed);
    for device in READABLE_DEVICES {
        rules.push(PlannedRule { path: PathBuf::from(device), grant: Grant::Read });
    }
    carve(Path::new(SHARED_MEMORY), Grant::Read, &denied, &mut rules, listed);
    for device in WRITABLE_DEVICES {
        rules.push(PlannedRule { path: PathBuf::from(device), grant: Grant::Device });
    }
    let (write_roots, dropped_writable) = write_roots(sandbox, &denied, cwd, extra_writable);
    for root in &write_roots {
        // A root that holds a kernel folder (`/`) is carved around it as around a denied path.
        let system = SYSTEM_FOLDERS.iter().map(PathBuf::from).filter(|folder| folder.starts_with(root));
        let excluded: Vec<PathBuf> = denied.iter().cloned().chain(system).collect();
        carve(root, Grant::Write, &excluded, &mut rules, listed);
    }
    SandboxPlan { rules, write_roots, dropped_writable, denied }
}

/// The run's temp dir as a write root: canonical, and whether it is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum TempRoot {
    /// Written by the command (in every mode but `off`).
    Writable(PathBuf),
    /// Not written: a denied path holds it (the deny wins).
    Dropped(PathBuf),
    /// Mode `off`: nothing is confined.
    Unconfined,
}

impl TempRoot {
    /// The temp dir when a denied path holds it.
    pub(super) fn dropped(&self) -> Option<&PathBuf> {
        match self {
            TempRoot::Dropped(root) => Some(root),
            TempRoot::Writable(_) | TempRoot::Unconfined => None,
        }
    }

    /// The temp dir when the command writes it.
    pub(super) fn writable(&self) -> Option<&PathBuf> {
        match self {
            TempRoot::Writable(root) => Some(root),
            TempRoot::Dropped(_) | TempRoot::Unconfined => None,
        }
    }
}

/// The rules the run's temp dir adds to `base` (a write root in every mode but `off`), and what became of it as a
/// root. Made for each call (runs have temp dirs of their own), so a folder listed here is never cached.
pub(super) fn temp_dir_rules(sandbox: &Sandbox, base: &SandboxPlan, temp_dir: &Path) -> (Vec<PlannedRule>, TempRoot) {
    let mut rules = Vec::new();
    if sandbox.mode() == SandboxMode::Off {
        return (rules, TempRoot::Unconfined);
    }
    let root = canonical(temp_dir);
    if is_within_any(&root, &base.denied) {
        return (rules, TempRoot::Dropped(root));
    }
    // Already granted as a root (a temp dir that is the cwd): the same rules again would add nothing.
    if !base.rules.iter().any(|rule| rule.grant == Grant::Write && rule.path == root) {
        carve(&root, Grant::Write, &base.denied, &mut rules, &mut Vec::new());
    }
    (rules, TempRoot::Writable(root))
}

/// Grants `grant` beneath `root`, except beneath the `excluded` paths: a root inside an excluded path gets
/// nothing, a root holding one is split into its entries (and recorded in `listed`, stamped first).
fn carve(root: &Path, grant: Grant, excluded: &[PathBuf], rules: &mut Vec<PlannedRule>, listed: &mut Vec<Listed>) {
    if is_within_any(root, excluded) {
        return;
    }
    if !excluded.iter().any(|path| path.starts_with(root)) {
        rules.push(PlannedRule { path: root.to_path_buf(), grant });
        return;
    }
    // Stamped before the listing: an entry made after the stamp changes the folder's times, so a plan reused
    // while the stamp holds never misses one (the cache also refuses stamps too close to the clock).
    let read_at = std::time::SystemTime::now();
    listed.push(Listed { path: root.to_path_buf(), stamp: DirStamp::of(root), read_at });
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    // The root is not in an excluded path, so an entry is in one or holds one only when its name is among these:
    // the others are granted whole, without comparing their paths to every excluded path.
    let holding = names_holding(root, excluded);
    for entry in entries.flatten() {
        let kind = entry.file_type();
        // A symlink's target, when it may be granted, is reached on its own path; following the link could lead
        // into a denied path or out of a writable root.
        if kind.as_ref().is_ok_and(|kind| kind.is_symlink()) {
            continue;
        }
        // Landlock attaches a rule to the inode, not the name: a rule on a hard link to a denied file (the token,
        // linked into the cwd) would open that file under every name. Such entries get no rule. (A folder cannot
        // have other names, so its link count needs no `stat`.)
        if !kind.is_ok_and(|kind| kind.is_dir())
            && entry.metadata().is_ok_and(|metadata| !metadata.is_dir() && metadata.nlink() > 1)
        {
            continue;
        }
        let name = entry.file_name();
        if holding.contains(name.as_os_str()) {
            carve(&root.join(name), grant, excluded, rules, listed);
        } else {
            rules.push(PlannedRule { path: root.join(name), grant });
        }
    }
}

/// The names of `folder`'s entries that are one of `paths` or hold one: the first component below `folder` of
/// each path that lies beneath it (compared by components, as [`Path::starts_with`] does). For a folder that is
/// in none of `paths`, an entry `folder/name` is in or holds one of them exactly when `name` is in this set.
pub(super) fn names_holding<'a>(folder: &Path, paths: &'a [PathBuf]) -> HashSet<&'a OsStr> {
    paths
        .iter()
        .filter_map(|path| path.strip_prefix(folder).ok())
        .filter_map(|rest| match rest.components().find(|component| *component != Component::CurDir) {
            Some(component @ (Component::Normal(_) | Component::ParentDir)) => Some(component.as_os_str()),
            _ => None,
        })
        .collect()
}

/// Whether `path` is one of `roots` or lies beneath one.
pub(crate) fn is_within_any(path: &Path, roots: &[PathBuf]) -> bool {
    roots.iter().any(|root| path.starts_with(root))
}

fn push_unique(paths: &mut Vec<PathBuf>, path: PathBuf) {
    if !paths.contains(&path) {
        paths.push(path);
    }
}

impl std::fmt::Display for SandboxPlan {
    /// One rule a line: `read /usr`, `write /home/me/project`.
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for rule in &self.rules {
            let grant = match rule.grant {
                Grant::ListNames => "list-names",
                Grant::Read => "read",
                Grant::Write => "write",
                Grant::Device => "device",
            };
            writeln!(formatter, "{grant} {}", rule.path.display())?;
        }
        for path in &self.dropped_writable {
            writeln!(formatter, "dropped-writable {}", path.display())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_holding_a_path_are_what_starts_with_would_say() {
        let paths: Vec<PathBuf> = [
            "/home/me/.troupe",
            "/home/me/project/./vault/key",
            "/home/other/",
            "/srv//data/x",
            "/x/../y",
            "/opt/app/.",
        ]
        .into_iter()
        .map(PathBuf::from)
        .collect();
        let names = |folder: &str| {
            let mut names: Vec<&str> =
                names_holding(Path::new(folder), &paths).into_iter().filter_map(OsStr::to_str).collect();
            names.sort_unstable();
            names
        };
        assert_eq!(names("/home/me"), [".troupe", "project"]);
        assert_eq!(names("/home/me/project"), ["vault"]);
        assert_eq!(names("/home/me/project/"), ["vault"]);
        assert_eq!(names("/home"), ["me", "other"]);
        assert_eq!(names("/srv"), ["data"]);
        assert_eq!(names("/"), ["home", "opt", "srv", "x"]);
        // Each agrees with comparing every entry's path to every path, as the carving did before, for every folder
        // that is in none of the paths (the carving lists no other).
        let folders = ["/", "/home", "/home/me", "/home/me/project", "/home/me/project/vault", "/srv", "/srv/data"];
        let more = ["/x", "/x/..", "/opt", "/home/me/project/.", "//home//me"];
        let entries = ["home", "me", "other", ".troupe", "project", "vault", "key", "srv", "data", "x", "..", "y"];
        for folder in folders.into_iter().chain(more) {
            let folder = Path::new(folder);
            assert!(!is_within_any(folder, &paths), "{folder:?}");
            for name in entries.into_iter().chain(["opt", "app", "z"]) {
                let entry = folder.join(name);
                let holds = is_within_any(&entry, &paths) || paths.iter().any(|path| path.starts_with(&entry));
                assert_eq!(names_holding(folder, &paths).contains(OsStr::new(name)), holds, "{entry:?}");
            }
        }
    }
}
