//! What the hard denies guard, recognised by text: the root, the top-level system directories and home
//! directories (as targets of a recursive removal) and disk devices (as targets of a write).
//!
//! Paths are normalised lexically first: empty and `.` components are dropped and `..` removes the component
//! before it (at `/` it stays at `/`), so `//dev/sda`, `/./dev/sda` and `/usr/../*` read as `/dev/sda`,
//! `/dev/sda` and `/*`. A component with a pattern (`*`, `?`, `[`), a brace (`{usr,etc}`) or an expansion (`$X`)
//! may stand for anything, so it counts as a wildcard.

/// Top-level directories whose recursive removal ruins the system (`/lib*` too: `lib`, `lib32`, `lib64`, ...).
const SYSTEM_DIRECTORIES: [&str; 16] = [
    "usr", "etc", "bin", "sbin", "boot", "var", "home", "root", "opt", "srv", "dev", "proc", "sys", "Users", "System",
    "Library",
];

/// Top-level directories whose children are home directories.
const HOME_PARENTS: [&str; 2] = ["home", "Users"];

/// Name prefixes (under `/dev/`) of disks, partitions and the devices that map onto them.
const DISK_DEVICE_PREFIXES: [&str; 13] =
    ["sd", "hd", "vd", "xvd", "nvme", "mmcblk", "disk", "rdisk", "dm-", "md", "mapper/", "loop", "nbd"];

/// Where a path word starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Base {
    Root,
    /// `~`, `~user`, `$HOME`, `${HOME}`, `${HOME:?}`, `${HOME:-x}`, ...
    Home,
    /// A relative path, `$PWD` or `${PWD}`.
    Cwd,
    /// Another expansion: nothing is known about it.
    Unknown,
}

/// `rest` split at `/` and normalised: how many `..` climbed above the start, and the components that remain.
fn normalise(rest: &str) -> (usize, Vec<&str>) {
    let mut names: Vec<&str> = Vec::new();
    let mut climbs = 0;
    for component in rest.split('/') {
        match component {
            "" | "." => {}
            ".." => {
                if names.pop().is_none() {
                    climbs += 1;
                }
            }
            name => names.push(name),
        }
    }
    (climbs, names)
}

/// A component that may stand for any name: a pattern, a brace expansion or an expansion.
fn is_wildcard(component: &str) -> bool {
    component.contains(['*', '?', '[', '{', '}']) || component.starts_with(['$', '`'])
}

/// The name of the variable a word starts with (`$HOME/x`, `${HOME:?}/x`) and the rest after it.
fn leading_variable(word: &str) -> Option<(&str, &str)> {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    if let Some(braced) = word.strip_prefix("${") {
        let end = braced.find('}')?;
        let inner = braced.get(..end)?;
        let name_end = inner.find(|c: char| !is_name(c)).unwrap_or(inner.len());
        return Some((inner.get(..name_end)?, braced.get(end + 1..)?));
    }
    let plain = word.strip_prefix('$')?;
    let name_end = plain.find(|c: char| !is_name(c)).unwrap_or(plain.len());
    Some((plain.get(..name_end)?, plain.get(name_end..)?))
}

fn split_base(target: &str) -> (Base, &str) {
    if target.starts_with('/') {
        return (Base::Root, target);
    }
    if let Some(tilde) = target.strip_prefix('~') {
        let rest = tilde.find('/').and_then(|slash| tilde.get(slash..)).unwrap_or_default();
        return (Base::Home, rest);
    }
    match leading_variable(target) {
        Some(("HOME", rest)) => (Base::Home, rest),
        Some(("PWD", rest)) => (Base::Cwd, rest),
        Some(_) => (Base::Unknown, target),
        None if target.starts_with('`') => (Base::Unknown, target),
        None => (Base::Cwd, target),
    }
}

/// Whether a recursive removal of `target` ruins the system or a home: `/`, a wildcard directly under `/`, a
/// top-level system directory or everything in it, a home directory or everything in it (in any spelling), or a
/// directory above the cwd (`..`, `$PWD/../..`) or everything in it.
///
/// A home named by its absolute path (`/home/me`) counts; `~/x`, `/home/me/project` and `$TMPDIR/x` do not.
pub(super) fn is_catastrophic_removal_target(target: &str) -> bool {
    let (base, rest) = split_base(target);
    let (climbs, names) = normalise(rest);
    let all_wildcards = |names: &[&str]| names.iter().all(|name| is_wildcard(name));
    match base {
        Base::Root => is_system_path(&names),
        // Above a home lie the other homes, `/home` and `/`.
        Base::Home => all_wildcards(&names) || (climbs > 0 && names.len() <= 1),
        Base::Cwd => climbs > 0 && all_wildcards(&names),
        Base::Unknown => false,
    }
}

/// `/`, `/*`, `/{usr,etc}`, `/usr`, `/usr/*`, `/home/me`, `/home/me/*` (components after normalisation).
fn is_system_path(names: &[&str]) -> bool {
    let all_wildcards = |names: &[&str]| names.iter().all(|name| is_wildcard(name));
    match names {
        [] => true,
        [first, rest @ ..] if is_wildcard(first) || SYSTEM_DIRECTORIES.contains(first) || first.starts_with("lib") => {
            all_wildcards(rest)
                || (HOME_PARENTS.contains(first) && rest.split_first().is_some_and(|(_, below)| all_wildcards(below)))
        }
        _ => false,
    }
}

/// The device name below `/dev/` that `target` normalises to (`//dev/./sda` is `sda`), or `None`.
pub(super) fn device_name(target: &str) -> Option<String> {
    if !target.starts_with('/') {
        return None;
    }
    let (_, names) = normalise(target);
    match names.split_first() {
        Some((&"dev", rest)) if !rest.is_empty() => Some(rest.join("/")),
        _ => None,
    }
}

/// A disk, a partition or a device mapped onto one (`/dev/sda`, `/dev/nvme0n1p1`, `/dev/mapper/x`,
/// `/dev/disk/by-id/...`, `/dev/loop0`), in any spelling that normalises to it, or a pattern directly in `/dev`.
pub(super) fn is_disk_device(target: &str) -> bool {
    device_name(target).is_some_and(|name| {
        name.starts_with(['*', '?', '[', '{']) || DISK_DEVICE_PREFIXES.iter().any(|prefix| name.starts_with(prefix))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_system_and_home_targets_are_recognised_in_any_spelling() {
        for target in [
            "/",
            "//",
            "/.",
            "/*",
            "/./*",
            "/usr/../*",
            "/[a-z]*",
            "/{usr,etc,bin}",
            "/usr",
            "/etc/",
            "/lib64",
            "/var/*",
            "/home",
            "/home/me",
            "/home/me/*",
            "/root",
            "~",
            "~/",
            "~/*",
            "~root",
            "~root/*",
            "~/..",
            "$HOME",
            "${HOME}",
            "${HOME:?}",
            "${HOME:-x}",
            "$HOME/*",
            "$PWD/../../../..",
            "${PWD}/../*",
            "../..",
            "/$X",
        ] {
            assert!(is_catastrophic_removal_target(target), "{target}");
        }
        for target in [
            "./build",
            "build",
            "$TMPDIR/x",
            "${TMPDIR}",
            "/tmp/x",
            "/usr/local/src/x",
            "~/.cache",
            "$HOME/project/target",
            "$PWD/target",
            "../sibling",
            "$HOMEDIR",
            "/home/me/project",
        ] {
            assert!(!is_catastrophic_removal_target(target), "{target}");
        }
    }

    #[test]
    fn disk_devices_are_recognised_after_normalisation() {
        for target in ["/dev/sda", "//dev/sda", "/dev/./sda", "/./dev/nvme0n1", "/tmp/../dev/sdb", "/dev/disk/by-id/x"]
        {
            assert!(is_disk_device(target), "{target}");
        }
        for target in ["/dev/null", "/dev/zero", "/dev/tty", "dev/sda", "./disk.img", "/dev/shm/x", "/dev"] {
            assert!(!is_disk_device(target), "{target}");
        }
    }
}
