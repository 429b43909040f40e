//! Bind mounts a test makes as someone outside the sandbox would (the `mount` command, as root), undone when the
//! test ends. Shared by the sandbox tests (`sandbox_support::mounts`) and `tools_protected.rs` (`#[path]`).

#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use super::unavailable;

/// Unmounts a bind mount when the test ends, passed or not.
pub struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// Bind-mounts `source` on a new folder `mount_point`; `None` (the test is skipped) without the privileges.
pub fn bind_mount(source: &Path, mount_point: &Path) -> Option<Unmount> {
    std::fs::create_dir(mount_point).expect("the mount point is made");
    bind_mount_on(source, mount_point)
}

/// Bind-mounts `source` (a file or a folder) on `mount_point`, which exists already and is of the same kind; `None`
/// (the test is skipped) without the privileges.
pub fn bind_mount_on(source: &Path, mount_point: &Path) -> Option<Unmount> {
    mount(&[OsStr::new("--bind"), source.as_os_str()], mount_point)
}

/// Mounts a fresh tmpfs on the existing folder `mount_point`; `None` (the test is skipped) without the privileges.
pub fn mount_tmpfs(mount_point: &Path) -> Option<Unmount> {
    mount(&[OsStr::new("-t"), OsStr::new("tmpfs"), OsStr::new("tmpfs")], mount_point)
}

/// `mount ARGUMENTS MOUNT_POINT`, unmounted when the test ends; `None` (the test is skipped) without the privileges.
fn mount(arguments: &[&OsStr], mount_point: &Path) -> Option<Unmount> {
    let mounted = std::process::Command::new("mount")
        .args(arguments)
        .arg(mount_point)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !mounted {
        unavailable::skip(unavailable::Missing::Mount);
        return None;
    }
    Some(Unmount(mount_point.to_path_buf()))
}

/// Bind-mounts `source` on a new folder `mount_point`, read-only; `None` (the test is skipped) without the
/// privileges.
pub fn bind_mount_read_only(source: &Path, mount_point: &Path) -> Option<Unmount> {
    let mounted = bind_mount(source, mount_point)?;
    let read_only = std::process::Command::new("mount")
        .args(["-o", "remount,bind,ro"])
        .arg(mount_point)
        .status()
        .is_ok_and(|status| status.success());
    assert!(read_only, "a bind mount made by root can be remounted read-only");
    Some(mounted)
}
