//! What a tool process does to itself between fork and exec: die with the daemon, leave the network, drop the
//! capabilities that would reach around the sandbox (as root), and enter its Landlock domain.
//!
//! Everything here runs in the forked child of a multi-threaded daemon, where only async-signal-safe calls are
//! allowed: raw syscalls on data prepared before the fork, no allocation, no locks. Every failure is returned as
//! the `errno` it came with, which makes the spawn fail: a command never runs with less confinement than asked.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// Capabilities dropped from the bounding set of a tool process that runs as root, so that the program it execs
/// cannot load kernel code, touch raw I/O or kernel memory, or administer the system around Landlock.
const DROPPED_CAPABILITIES: [libc::c_int; 6] = [
    16, // CAP_SYS_MODULE
    17, // CAP_SYS_RAWIO
    21, // CAP_SYS_ADMIN
    22, // CAP_SYS_BOOT
    38, // CAP_PERFMON
    39, // CAP_BPF
];

/// The user and group id maps of a new user namespace, written as text before the fork.
#[derive(Debug)]
struct IdMaps {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

/// Everything the child needs, prepared in the parent.
#[derive(Debug)]
pub(super) struct ChildSetup {
    /// The daemon's pid: a child whose parent is already another process must not run.
    parent_pid: libc::pid_t,
    /// `Some` when the process must run in a network namespace of its own (loopback only).
    network_isolation: Option<IdMaps>,
    /// Whether the process runs as root, whose bounding set is trimmed.
    as_root: bool,
    /// The Landlock ruleset; `None` only when the mode is `off`.
    ruleset: Option<OwnedFd>,
}

impl ChildSetup {
    /// The setup of a confined child. Call it in the parent, right before spawning.
    pub(super) fn confined(ruleset: OwnedFd, isolate_network: bool) -> ChildSetup {
        // SAFETY: getuid, getgid, geteuid and getpid cannot fail and touch no memory of ours.
        let (uid, gid, euid, pid) = unsafe { (libc::getuid(), libc::getgid(), libc::geteuid(), libc::getpid()) };
        let network_isolation = isolate_network.then(|| IdMaps {
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        });
        ChildSetup { parent_pid: pid, network_isolation, as_root: euid == 0, ruleset: Some(ruleset) }
    }

    /// The setup of an unconfined child (mode `off`): it only dies with the daemon.
    pub(super) fn death_signal_only() -> ChildSetup {
        // SAFETY: getpid cannot fail and touches no memory of ours.
        let pid = unsafe { libc::getpid() };
        ChildSetup { parent_pid: pid, network_isolation: None, as_root: false, ruleset: None }
    }

    /// Runs in the child between fork and exec. Async-signal-safe: raw syscalls on prepared data only.
    pub(super) fn apply(&self) -> io::Result<()> {
        // SAFETY: prctl with integer arguments only; PR_SET_PDEATHSIG takes a signal number.
        check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) })?;
        // The daemon may have died between the fork and the line above; then nothing would kill this process.
        // SAFETY: getppid cannot fail.
        if unsafe { libc::getppid() } != self.parent_pid {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        if let Some(maps) = &self.network_isolation {
            leave_network(maps)?;
        }
        if self.as_root {
            drop_dangerous_capabilities()?;
        }
        if let Some(ruleset) = &self.ruleset {
            // SAFETY: prctl with integer arguments only.
            check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0) })?;
            // SAFETY: the ruleset descriptor is open and owned by this setup; flags 0 is the only defined value.
            let outcome = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) };
            if outcome != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// Enters a new network namespace and brings its loopback up. Root (with `CAP_SYS_ADMIN`) needs only the network
/// namespace; anyone else first enters a user namespace that maps their own ids, which gives the rights over the
/// new network namespace that bringing `lo` up needs. Those rights end at exec for a non-root user.
fn leave_network(maps: &IdMaps) -> io::Result<()> {
    // SAFETY: unshare takes flags only; the child is single-threaded, as CLONE_NEWUSER requires.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EPERM) {
            return Err(error);
        }
        // SAFETY: as above.
        check(unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) })?;
        write_file(c"/proc/self/setgroups", b"deny")?;
        write_file(c"/proc/self/uid_map", &maps.uid_map)?;
        write_file(c"/proc/self/gid_map", &maps.gid_map)?;
    }
    bring_loopback_up()
}

/// Sets `IFF_UP` on `lo`, so that 127.0.0.1 works inside the namespace.
fn bring_loopback_up() -> io::Result<()> {
    // SAFETY: socket takes integer arguments only.
    let socket = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if socket < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: ifreq is plain data for which all zeroes is a valid value.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: `request` is a valid ifreq naming `lo`; SIOCGIFFLAGS fills its flags.
    let mut outcome = unsafe { libc::ioctl(socket, libc::SIOCGIFFLAGS as _, &mut request) };
    if outcome == 0 {
        // SAFETY: SIOCGIFFLAGS just wrote the flags member of the union.
        unsafe { request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
        // SAFETY: `request` is a valid ifreq naming `lo` with the flags to set.
        outcome = unsafe { libc::ioctl(socket, libc::SIOCSIFFLAGS as _, &request) };
    }
    let error = (outcome != 0).then(io::Error::last_os_error);
    // SAFETY: `socket` was opened above and is closed once.
    unsafe { libc::close(socket) };
    error.map_or(Ok(()), Err)
}

/// Drops [`DROPPED_CAPABILITIES`] from the bounding set. A capability this kernel does not know (`EINVAL`) or a
/// process that may not change its bounding set (`EPERM`: it lacks `CAP_SETPCAP`, as in most containers, and then
/// lacks these too) is not an error.
fn drop_dangerous_capabilities() -> io::Result<()> {
    for capability in DROPPED_CAPABILITIES {
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, capability as libc::c_ulong, 0, 0, 0) } != 0 {
            let error = io::Error::last_os_error();
            if !matches!(error.raw_os_error(), Some(libc::EINVAL | libc::EPERM)) {
                return Err(error);
            }
        }
    }
    Ok(())
}

/// Writes `contents` to the file at `path` in one `write`, as `/proc` id maps require.
fn write_file(path: &CStr, contents: &[u8]) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated; these flags need no mode argument.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `contents` is valid for reads of its length; `fd` is open for writing.
    let written = unsafe { libc::write(fd, contents.as_ptr().cast(), contents.len()) };
    let error = (usize::try_from(written).ok() != Some(contents.len())).then(io::Error::last_os_error);
    // SAFETY: `fd` was opened above and is closed once.
    unsafe { libc::close(fd) };
    error.map_or(Ok(()), Err)
}

/// Turns a `-1` return into the current `errno`.
fn check(outcome: libc::c_int) -> io::Result<()> {
    if outcome == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}
