//! The mount namespace of a tool process: what it sets up there between clone and exec ([`super::child`]).
//!
//! Landlock governs reading and writing files, not their mode, owner, times or extended attributes. Outside the
//! folders a command may write, those are kept by mounts: in its own namespace everything is read-only but the
//! writable roots, which are attached again over themselves as they were (each cloned, with all beneath it, before
//! the rest turned read-only, so a mount the host has read-only stays so), and the denied paths are bound
//! read-only over themselves inside them. A `chmod 666 ~/.bashrc` or a `chown` of a system file (as root) fails
//! with `EROFS`. Device nodes, fifos and sockets are written on read-only mounts as anywhere (the kernel checks a
//! mount's read-only flag for files, folders and links only), so `/dev/null` and a terminal work as before.
//!
//! Async-signal-safe like all of the child's setup: raw syscalls on paths prepared before the fork; the descriptors
//! of the clones are kept in slots allocated before it, which only the child writes.

use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};

use super::plan::{SYSTEM_FOLDERS, in_kernel_folder};

/// `struct mount_attr` of the kernel's uapi, for `mount_setattr` (Linux 5.12, before Landlock's 5.13).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
/// `open_tree`: a detached copy of the mount tree at the path (a bind mount not yet attached).
const OPEN_TREE_CLONE: libc::c_uint = 1;
/// `move_mount`: the mount to move, and the place to attach it, are the descriptors themselves.
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;

/// The mounts of one command's namespace, prepared in the parent.
#[derive(Debug, Default)]
pub(super) struct CommandMounts {
    /// Whether to turn everything read-only but the writable roots: not when `/` is one (a session in `/`), since a
    /// clone attached over `/` would stay hidden beneath the process's root; only the kernel's folders then.
    read_only_root: bool,
    /// The writable roots outside the kernel's folders, none beneath another (a clone holds all beneath it).
    writable: Vec<CString>,
    /// The kernel's folders beneath a writable root (a cwd of `/`): read-only again once the roots are attached.
    kernel_folders: Vec<CString>,
    /// The writable roots inside the kernel's folders (`/dev/shm`), attached after those turned read-only.
    writable_in_kernel_folders: Vec<CString>,
    /// The denied paths, bound read-only over themselves last (they may lie in a writable root).
    denied: Vec<CString>,
    /// One slot per writable root for its clone's descriptor, written by the child only.
    clones: Box<[AtomicI32]>,
}

impl CommandMounts {
    /// The mounts of a confined command that may write `writable` (canonical) and must not change `denied`.
    pub(super) fn new<'a>(writable: impl IntoIterator<Item = &'a Path>, denied: &[PathBuf]) -> CommandMounts {
        let (late, early): (Vec<&Path>, Vec<&Path>) = writable.into_iter().partition(|path| in_kernel_folder(path));
        let read_only_root = !early.iter().any(|root| root.parent().is_none());
        let writable = if read_only_root { outermost(&early) } else { Vec::new() };
        let writable_in_kernel_folders = outermost(&late);
        let kernel_folders = SYSTEM_FOLDERS
            .iter()
            .map(Path::new)
            .filter(|folder| early.iter().any(|root| folder.starts_with(root)))
            .filter_map(c_path)
            .collect();
        let clones = (0..writable.len() + writable_in_kernel_folders.len()).map(|_| AtomicI32::new(-1)).collect();
        CommandMounts {
            read_only_root,
            writable,
            kernel_folders,
            writable_in_kernel_folders,
            denied: denied.iter().filter_map(|path| c_path(path)).collect(),
            clones,
        }
    }

    /// Sets up the namespace the child was cloned into: private, read-only but the writable roots, the denied paths
    /// read-only over themselves. Between clone and exec only.
    pub(super) fn apply(&self) -> io::Result<()> {
        make_mounts_private()?;
        let roots = self.writable.iter().chain(&self.writable_in_kernel_folders);
        for (root, slot) in roots.zip(self.clones.iter()) {
            slot.store(clone_tree(root)?, Ordering::Relaxed);
        }
        if self.read_only_root {
            set_read_only(c"/", true)?;
        }
        let (early, late) = self.clones.split_at(self.writable.len());
        for (root, slot) in self.writable.iter().zip(early) {
            attach(slot.load(Ordering::Relaxed), root)?;
        }
        for folder in &self.kernel_folders {
            unless_nothing_there(set_read_only(folder, true))?;
        }
        for (root, slot) in self.writable_in_kernel_folders.iter().zip(late) {
            attach(slot.load(Ordering::Relaxed), root)?;
        }
        for path in &self.denied {
            bind_read_only(path)?;
        }
        Ok(())
    }

    /// The isolation probe's: the same steps with the temp dir writable and `/etc` denied, so a system that refuses
    /// one of them (a container's seccomp profile) gives commands no mount namespace instead of failing each one.
    pub(super) fn probe() -> CommandMounts {
        let temp = std::env::temp_dir();
        CommandMounts::new([temp.as_path()], &[PathBuf::from("/etc")])
    }
}

/// The roots none of the others holds, each once: a root beneath another is in that one's clone.
fn outermost(roots: &[&Path]) -> Vec<CString> {
    let mut kept: Vec<&Path> = Vec::new();
    for root in roots {
        if !kept.contains(root) && !roots.iter().any(|outer| outer != root && root.starts_with(outer)) {
            kept.push(root);
        }
    }
    kept.into_iter().filter_map(c_path).collect()
}

fn c_path(path: &Path) -> Option<CString> {
    CString::new(path.as_os_str().as_bytes()).ok()
}

/// Whether an error on a prepared path means it has nothing to protect: gone since the plan, or not this user's
/// to reach (another account's folder).
fn nothing_there(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR | libc::EACCES | libc::ELOOP | libc::ENAMETOOLONG))
}

/// `outcome`, with an error that means [`nothing_there`] taken as done.
fn unless_nothing_there(outcome: io::Result<()>) -> io::Result<()> {
    match outcome {
        Err(error) if nothing_there(&error) => Ok(()),
        outcome => outcome,
    }
}

/// Makes every mount of the new mount namespace private (recursively), so that what is mounted in it never
/// propagates to the mount namespace the daemon shares with the host.
fn make_mounts_private() -> io::Result<()> {
    // SAFETY: mount with static NUL-terminated strings and null source, type and data: only changes propagation.
    check(unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    })
}

/// A detached copy of the mount tree at `path` (its last component not followed), with each mount's flags as
/// they are now; -1 when there is nothing there.
fn clone_tree(path: &CStr) -> io::Result<libc::c_int> {
    let flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | libc::AT_RECURSIVE as libc::c_uint;
    let flags = flags | libc::AT_SYMLINK_NOFOLLOW as libc::c_uint;
    // SAFETY: a NUL-terminated path prepared before the fork; the kernel returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, path.as_ptr(), flags) } as libc::c_int;
    if fd >= 0 {
        return Ok(fd);
    }
    let error = io::Error::last_os_error();
    if nothing_there(&error) { Ok(-1) } else { Err(error) }
}

/// Attaches the clone `fd` of `path` over `path` again, if `path` still leads to the folder it was cloned from
/// (else the root stays read-only: less access, never more), and closes the descriptors.
fn attach(fd: libc::c_int, path: &CStr) -> io::Result<()> {
    if fd < 0 {
        return Ok(());
    }
    // SAFETY: a NUL-terminated path; O_PATH opens nothing for reading or writing.
    let target = unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
    let outcome = if target < 0 {
        unless_nothing_there(Err(io::Error::last_os_error()))
    } else if same_inode(fd, target)? {
        // SAFETY: two descriptors this child holds and empty NUL-terminated paths.
        check(unsafe {
            libc::syscall(
                libc::SYS_move_mount,
                fd,
                c"".as_ptr(),
                target,
                c"".as_ptr(),
                MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
            ) as libc::c_int
        })
    } else {
        Ok(())
    };
    // SAFETY: descriptors opened by this child, each closed once.
    unsafe {
        libc::close(fd);
        if target >= 0 {
            libc::close(target);
        }
    }
    outcome
}

fn same_inode(one: libc::c_int, other: libc::c_int) -> io::Result<bool> {
    // SAFETY: zeroed stat buffers of this frame, filled by fstat.
    let (mut first, mut second): (libc::stat, libc::stat) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    // SAFETY: as above, on descriptors this child holds.
    if unsafe { libc::fstat(one, &mut first) } != 0 || unsafe { libc::fstat(other, &mut second) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((first.st_dev, first.st_ino) == (second.st_dev, second.st_ino))
}

/// Makes the mount at `path` and every mount beneath it read-only, and without set-id programs (which
/// `no_new_privs` refuses anyway); also without devices when `devices` is false (never for `/dev`).
fn set_read_only(path: &CStr, devices: bool) -> io::Result<()> {
    let attributes = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | if devices { 0 } else { MOUNT_ATTR_NODEV },
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: the path is NUL-terminated and `attributes` a valid `struct mount_attr` of the size passed.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::AT_RECURSIVE as libc::c_uint,
            &attributes as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        ) as libc::c_int
    })
}

/// Binds `path` over itself, read-only with all beneath it, in this (private) mount namespace: a change of mode,
/// owner, times or extended attributes there fails with `EROFS`. A path gone since the plan, or one this user
/// cannot reach (another user's folder), has nothing to protect from this command.
fn bind_read_only(path: &CStr) -> io::Result<()> {
    // SAFETY: mount with a NUL-terminated path prepared before the fork and null type and data: a bind mount.
    let bound = unsafe {
        libc::mount(path.as_ptr(), path.as_ptr(), std::ptr::null(), libc::MS_BIND | libc::MS_REC, std::ptr::null())
    };
    if bound != 0 {
        return unless_nothing_there(Err(io::Error::last_os_error()));
    }
    // Removed since the bind (which the kernel then detaches): nothing left to protect.
    unless_nothing_there(set_read_only(path, false))
}

/// Mounts a fresh procfs of the current PID namespace on `/proc`, over the one inherited from the host, so the
/// command sees only its own processes there. No set-user-id, device or executable files from it.
pub(super) fn mount_own_proc() -> io::Result<()> {
    // SAFETY: mount with static NUL-terminated strings and null data.
    check(unsafe {
        libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        )
    })
}

/// Turns a `-1` return into the current `errno`.
fn check(outcome: libc::c_int) -> io::Result<()> {
    if outcome == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(paths: &[CString]) -> Vec<&str> {
        paths.iter().map(|path| path.to_str().unwrap()).collect()
    }

    #[test]
    fn a_root_beneath_another_is_cloned_with_it_and_the_kernels_folders_come_apart() {
        let writable = ["/home/me/project", "/home/me/project/out", "/dev/shm", "/tmp/run", "/home/me/project"];
        let mounts = CommandMounts::new(writable.map(Path::new), &[PathBuf::from("/home/me/project/.troupe")]);
        assert!(mounts.read_only_root);
        assert_eq!(shown(&mounts.writable), ["/home/me/project", "/tmp/run"]);
        assert_eq!(shown(&mounts.writable_in_kernel_folders), ["/dev/shm"]);
        assert!(mounts.kernel_folders.is_empty());
        assert_eq!(mounts.clones.len(), 3);
        assert_eq!(shown(&mounts.denied), ["/home/me/project/.troupe"]);

        let mounts = CommandMounts::new(["/", "/dev/shm", "/srv"].map(Path::new), &[]);
        assert!(!mounts.read_only_root);
        assert!(mounts.writable.is_empty(), "a clone over `/` would stay hidden");
        assert_eq!(shown(&mounts.kernel_folders), ["/dev", "/proc", "/sys"]);
        assert_eq!(shown(&mounts.writable_in_kernel_folders), ["/dev/shm"]);
    }
}
