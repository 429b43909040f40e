//! What a tool process does to itself between fork and exec: leave the daemon's session (and so its controlling
//! terminal), die with the daemon, enter namespaces of its own (a PID namespace, so that nothing it starts can
//! outlive it; a network namespace when the network is off), drop the capabilities that would reach around the
//! sandbox (as root), refuse Unix sockets where Landlock cannot govern them (seccomp), and enter its Landlock
//! domain. With a PID namespace, the process forks once more: the child becomes the namespace's init and execs
//! the command; the parent only waits for it and exits the way it did, so that everything in the namespace dies
//! when the command ends or when either process is killed.
//!
//! With a PID namespace comes, where the system allows it, a mount namespace of its own with a fresh procfs on
//! `/proc` (as bubblewrap does): the command's `/proc` then lists only the processes of its namespace, so the
//! command lines and environments of the user's other processes (a `troupe --token`, a browser opened on a
//! sign-in link) are not there to read. The mount tree is made private first, so nothing mounted here reaches the
//! host. Mounting needs no more than the namespaces themselves: root has the right, anyone else gets it in the user
//! namespace entered with them.
//!
//! Everything here runs in the forked child of a multi-threaded daemon, where only async-signal-safe calls are
//! allowed: raw syscalls on data prepared before the fork, no allocation, no locks. Every failure is returned as
//! the `errno` it came with, which makes the spawn fail: a command never runs with less confinement than asked.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

/// The capabilities a tool process that runs as root keeps in its bounding set (so after exec): what a root
/// program ordinarily needs for files and processes of its own (as a container runtime would keep), and none that
/// reaches around the sandbox: no raw or packet sockets (sniffing the daemon's loopback traffic), no network or
/// system administration, no ptrace, no module loading, no raw I/O, no bpf or perf, no clock or log access.
const KEPT_CAPABILITIES: [libc::c_int; 11] = [
    0,  // CAP_CHOWN
    1,  // CAP_DAC_OVERRIDE
    3,  // CAP_FOWNER
    4,  // CAP_FSETID
    5,  // CAP_KILL
    6,  // CAP_SETGID
    7,  // CAP_SETUID
    8,  // CAP_SETPCAP
    10, // CAP_NET_BIND_SERVICE
    18, // CAP_SYS_CHROOT
    29, // CAP_AUDIT_WRITE
];

/// The highest capability number tried when dropping (the kernel answers EINVAL beyond its last one).
const LAST_CAPABILITY: libc::c_int = 63;

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
    /// Namespaces to enter (`CLONE_NEWPID`, `CLONE_NEWNS`, `CLONE_NEWNET`), 0 for none. `CLONE_NEWNS` comes only
    /// with `CLONE_NEWPID`: the namespace's init mounts its own `/proc`.
    namespaces: libc::c_int,
    /// The id maps of a user namespace, for when the namespaces need one (the daemon is not root).
    id_maps: IdMaps,
    /// Whether the process runs as root, whose bounding set is trimmed.
    as_root: bool,
    /// The seccomp filter refusing Unix sockets (and io_uring), where Landlock cannot govern them.
    refuse_unix_sockets: bool,
    /// The Landlock ruleset (shared by the commands of a run: see `plan_cache`); `None` only when the mode is `off`.
    ruleset: Option<Arc<OwnedFd>>,
    /// What the ruleset grants beneath the command's own `/proc`, added once it is mounted (0: nothing).
    proc_access: u64,
}

/// What a confined child gets besides its ruleset.
#[derive(Clone, Copy, Debug)]
pub(super) struct Isolation {
    pub network: bool,
    pub pid_namespace: bool,
    /// A mount namespace with a fresh `/proc` of the PID namespace (only with `pid_namespace`).
    pub private_proc: bool,
    /// The Landlock access rights (bits) the fresh `/proc` gets, 0 for none: it is a new inode, which no rule of
    /// the ruleset built before the fork can name.
    pub proc_access: u64,
    pub refuse_unix_sockets: bool,
}

impl ChildSetup {
    /// The setup of a confined child. Call it in the parent, right before spawning.
    pub(super) fn confined(ruleset: Arc<OwnedFd>, isolation: Isolation) -> ChildSetup {
        // SAFETY: geteuid cannot fail and touches no memory of ours.
        let euid = unsafe { libc::geteuid() };
        let mut namespaces = 0;
        if !isolation.network {
            namespaces |= libc::CLONE_NEWNET;
        }
        if isolation.pid_namespace {
            namespaces |= libc::CLONE_NEWPID;
            if isolation.private_proc {
                namespaces |= libc::CLONE_NEWNS;
            }
        }
        ChildSetup {
            namespaces,
            as_root: euid == 0,
            refuse_unix_sockets: isolation.refuse_unix_sockets,
            ruleset: Some(ruleset),
            proc_access: isolation.proc_access,
            ..ChildSetup::unconfined()
        }
    }

    /// The setup of an unconfined child (mode `off`): its own session, and it dies with the daemon.
    pub(super) fn unconfined() -> ChildSetup {
        // SAFETY: getuid, getgid and getpid cannot fail and touch no memory of ours.
        let (uid, gid, pid) = unsafe { (libc::getuid(), libc::getgid(), libc::getpid()) };
        ChildSetup {
            parent_pid: pid,
            namespaces: 0,
            id_maps: IdMaps {
                uid_map: format!("{uid} {uid} 1\n").into_bytes(),
                gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            },
            as_root: false,
            refuse_unix_sockets: false,
            ruleset: None,
            proc_access: 0,
        }
    }

    /// A child that only enters a PID namespace (and, with `private_proc`, a mount namespace with its own `/proc`),
    /// to learn at start whether this system allows it.
    pub(super) fn isolation_probe(private_proc: bool) -> ChildSetup {
        let namespaces = libc::CLONE_NEWPID | if private_proc { libc::CLONE_NEWNS } else { 0 };
        ChildSetup { namespaces, ..ChildSetup::unconfined() }
    }

    /// Runs in the child between fork and exec. Async-signal-safe: raw syscalls on prepared data only.
    pub(super) fn apply(&self) -> io::Result<()> {
        // A session of its own: no controlling terminal, so nothing can reach the user's terminal through
        // `/dev/tty` (TIOCSTI injection, reading keystrokes); it also leads a new process group.
        // SAFETY: setsid takes no arguments; the child is not a group leader (no process_group was set).
        if unsafe { libc::setsid() } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: prctl with integer arguments only; PR_SET_PDEATHSIG takes a signal number.
        check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) })?;
        // The daemon may have died between the fork and the line above; then nothing would kill this process.
        // SAFETY: getppid cannot fail.
        if unsafe { libc::getppid() } != self.parent_pid {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        // Descriptors the daemon inherited (a supervisor's socket, a launcher's pipe) must not reach the command:
        // every one above stdio closes at exec. (The daemon's own are close-on-exec already.)
        close_inherited_descriptors_on_exec();
        if self.namespaces != 0 {
            enter_namespaces(self.namespaces, &self.id_maps)?;
        }
        if self.namespaces & libc::CLONE_NEWNET != 0 {
            bring_loopback_up()?;
        }
        if self.namespaces & libc::CLONE_NEWNS != 0 {
            make_mounts_private()?;
        }
        if self.as_root {
            drop_capabilities()?;
        }
        // With a PID namespace, fork first: the waiting parent is a copy of the daemon's memory (its token, provider
        // keys), so it must stay outside the command's Landlock domain, where the command cannot read it.
        if self.namespaces & libc::CLONE_NEWPID != 0 {
            become_namespace_init()?;
            // Now inside the PID namespace, whose procfs this is; before Landlock, which forbids mounting.
            if self.namespaces & libc::CLONE_NEWNS != 0 {
                mount_own_proc()?;
                if let Some(ruleset) = &self.ruleset
                    && self.proc_access != 0
                {
                    grant_beneath(ruleset.as_raw_fd(), c"/proc", self.proc_access)?;
                }
            }
        }
        if let Some(ruleset) = &self.ruleset {
            // SAFETY: prctl with integer arguments only.
            check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0) })?;
            if self.refuse_unix_sockets {
                super::seccomp::install_unix_socket_filter()?;
            }
            // SAFETY: the ruleset descriptor is open and owned by this setup; flags 0 is the only defined value.
            let outcome = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) };
            if outcome != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// Enters new namespaces (`flags`). Root (with `CAP_SYS_ADMIN`) needs nothing else; anyone else first enters a
/// user namespace that maps their own ids, which gives the rights over the new namespaces that setting them up
/// needs. Those rights end at exec for a non-root user.
fn enter_namespaces(flags: libc::c_int, maps: &IdMaps) -> io::Result<()> {
    // SAFETY: unshare takes flags only; the child is single-threaded, as CLONE_NEWUSER requires.
    if unsafe { libc::unshare(flags) } != 0 {
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EPERM) {
            return Err(error);
        }
        // SAFETY: as above.
        check(unsafe { libc::unshare(libc::CLONE_NEWUSER | flags) })?;
        write_file(c"/proc/self/setgroups", b"deny")?;
        write_file(c"/proc/self/uid_map", &maps.uid_map)?;
        write_file(c"/proc/self/gid_map", &maps.gid_map)?;
    }
    Ok(())
}

/// After `unshare(CLONE_NEWPID)` the next child is the namespace's init. Forks it: the child returns (and goes on
/// to exec the command as pid 1); this process closes every descriptor (the command's pipes, and the pipe through
/// which the daemon learns whether exec succeeded, which only the command must hold), waits for the command and
/// ends the way it ended. When the command (pid 1) ends, the kernel kills everything left in the namespace,
/// `setsid` or not; when this process is killed, the command dies by its own death signal.
fn become_namespace_init() -> io::Result<()> {
    // SAFETY: a raw clone with only SIGCHLD is fork without the libc fork handlers, which must not run in the
    // child of a multi-threaded process; no stack or tls arguments are passed.
    let pid = unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_ulong, 0usize, 0usize, 0usize, 0usize) };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // The command leads a session of its own inside the namespace too: the session the waiting parent made
        // is led from outside it, so the command's procfs would show its session as 0 (no leader in sight). It
        // is not a group leader (its group is the waiting parent's), so setsid cannot fail for that reason.
        // SAFETY: setsid takes no arguments.
        if unsafe { libc::setsid() } < 0 {
            return Err(io::Error::last_os_error());
        }
        // It dies with this waiting parent (which dies with the daemon).
        // SAFETY: prctl with integer arguments only.
        return check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) });
    }
    let pid = pid as libc::pid_t;
    // Not dumpable: its memory (a copy of the daemon's) cannot be read through /proc or ptrace without
    // CAP_SYS_PTRACE, which the command does not have; and the command is in a Landlock domain this process is not.
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong, 0, 0, 0) };
    // SAFETY: close_range with integer arguments; this process needs none of its descriptors any more.
    unsafe { libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) };
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: `status` is a valid int to write to.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        if waited == pid {
            break;
        }
        // SAFETY: reading errno of this thread.
        if waited < 0 && unsafe { *libc::__errno_location() } != libc::EINTR {
            // SAFETY: _exit ends the process without running anything of the parent's.
            unsafe { libc::_exit(127) };
        }
    }
    if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        // SAFETY: restoring the default action and signalling ourselves, so the daemon sees the same signal.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            libc::kill(libc::getpid(), signal);
            libc::_exit(128 + signal);
        }
    }
    // SAFETY: _exit ends the process with the command's exit code.
    unsafe { libc::_exit(libc::WEXITSTATUS(status)) }
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

/// Mounts a fresh procfs of the current PID namespace on `/proc`, over the one inherited from the host, so the
/// command sees only its own processes there. No set-user-id, device or executable files from it.
fn mount_own_proc() -> io::Result<()> {
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

/// `struct landlock_path_beneath_attr` of the kernel's uapi (packed).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: libc::c_int,
}

/// Adds to `ruleset` a rule granting `access` beneath `path` (as it is now, in this mount namespace).
fn grant_beneath(ruleset: libc::c_int, path: &CStr, access: u64) -> io::Result<()> {
    const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;
    // SAFETY: `path` is NUL-terminated; O_PATH opens nothing's contents and needs no mode argument.
    let fd =
        unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let attr = PathBeneathAttr { allowed_access: access, parent_fd: fd };
    // SAFETY: `attr` is a valid landlock_path_beneath_attr for the duration of the call; flags 0.
    let outcome = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        )
    };
    let error = (outcome != 0).then(io::Error::last_os_error);
    // SAFETY: `fd` was opened above and is closed once.
    unsafe { libc::close(fd) };
    error.map_or(Ok(()), Err)
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

/// Drops every capability but [`KEPT_CAPABILITIES`] from the bounding set. A capability this kernel does not know
/// (`EINVAL`) or a process that may not change its bounding set (`EPERM`: it lacks `CAP_SETPCAP`, as in most
/// containers, and then lacks the others too) is not an error.
fn drop_capabilities() -> io::Result<()> {
    for capability in (0..=LAST_CAPABILITY).filter(|capability| !KEPT_CAPABILITIES.contains(capability)) {
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, capability as libc::c_ulong, 0, 0, 0) } != 0 {
            let error = io::Error::last_os_error();
            match error.raw_os_error() {
                // Capabilities are numbered without gaps: past the kernel's last one there is nothing to drop.
                Some(libc::EINVAL) => break,
                Some(libc::EPERM) => {}
                _ => return Err(error),
            }
        }
    }
    Ok(())
}

/// Marks every descriptor from 3 up close-on-exec: `close_range` with `CLOSE_RANGE_CLOEXEC` (Linux 5.11), else one
/// `fcntl` per descriptor up to the limit.
fn close_inherited_descriptors_on_exec() {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range with integer arguments only; with CLOSE_RANGE_CLOEXEC it closes nothing now.
    if unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) } == 0 {
        return;
    }
    // SAFETY: getrlimit writes into a local struct.
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    let highest = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        limit.rlim_cur.min(65_536) as libc::c_int
    } else {
        1024
    };
    for descriptor in 3..highest {
        // SAFETY: fcntl on a descriptor number; an unused one answers EBADF, which is ignored.
        unsafe { libc::fcntl(descriptor, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
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
