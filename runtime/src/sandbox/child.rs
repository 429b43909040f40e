//! What a tool process does to itself between clone and exec: leave the daemon's session (and so its controlling
//! terminal), die with the daemon, set up the namespaces it was cloned into (a PID namespace whose init it is, so
//! that nothing it starts can outlive it; a network namespace when the network is off, with loopback up), drop the
//! capabilities that would reach around the sandbox (as root), refuse Unix sockets where Landlock cannot govern
//! them and the set-id bits of a file's mode (seccomp), and enter its Landlock domain. Its mount namespace is set
//! up by [`super::mounts`]. [`super::spawn`] clones the child straight into its namespaces, so the command itself
//! is the PID namespace's init: when it ends, the kernel kills everything left in the namespace, and no second
//! process (a copy of the daemon's memory) waits beside it.
//!
//! With a PID namespace comes, where the system allows it, a mount namespace of its own with a fresh procfs on
//! `/proc` (as bubblewrap does): the command's `/proc` then lists only the processes of its namespace, so the
//! command lines and environments of the user's other processes (a `troupe --token`, a browser opened on a
//! sign-in link) are not there to read. The mount tree is made private first, so nothing mounted here reaches the
//! host. Mounting needs no more than the namespaces themselves: root has the right, anyone else gets it in the user
//! namespace entered with them.
//!
//! Everything here runs in a child that shares the daemon's memory (`CLONE_VM`, the daemon's thread suspended until
//! exec) or, for unconfined processes started through `std`, in the forked child of a multi-threaded daemon: only
//! async-signal-safe calls are allowed, raw syscalls on data prepared before, no allocation, no locks, no write to
//! memory the daemon reads but the error word of [`super::spawn`]. Every failure is returned as the `errno` it
//! came with, which makes the spawn fail: a command never runs with less confinement than asked.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use super::mounts::CommandMounts;

/// The capabilities a tool process that runs as root keeps in its bounding set (so after exec): what a root
/// program ordinarily needs for files and processes of its own (as a container runtime would keep), and none that
/// reaches around the sandbox: no raw or packet sockets (sniffing the daemon's loopback traffic), no network or
/// system administration, no ptrace, no module loading, no raw I/O, no bpf or perf, no clock or log access, and
/// no `CAP_FSETID` (a write into a set-id file clears its bits).
const KEPT_CAPABILITIES: [libc::c_int; 10] = [
    0,  // CAP_CHOWN
    1,  // CAP_DAC_OVERRIDE
    3,  // CAP_FOWNER
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
    /// The daemon's pid: a child whose parent is already another process must not run (outside a PID namespace;
    /// inside one, the daemon's pidfd tells).
    parent_pid: libc::pid_t,
    /// Namespaces the child is cloned into (`CLONE_NEWPID`, `CLONE_NEWNS`, `CLONE_NEWNET`), 0 for none.
    /// `CLONE_NEWNS` comes only with `CLONE_NEWPID`: the namespace's init mounts its own `/proc`.
    namespaces: libc::c_int,
    /// The id maps of a user namespace, for when the namespaces need one (the daemon is not root).
    id_maps: IdMaps,
    /// Whether the process runs as root, whose bounding set is trimmed.
    as_root: bool,
    /// The seccomp filter refusing Unix sockets (and io_uring), where Landlock cannot govern them.
    refuse_unix_sockets: bool,
    /// The seccomp filter refusing the set-user-ID and set-group-ID bits, made before the fork (confined only).
    setid_filter: &'static [super::seccomp::SockFilter],
    /// The command's mount namespace (with `CLONE_NEWNS`): read-only but its writable roots, the denied paths
    /// read-only inside them. Landlock governs reading and writing, not a file's mode, owner, times or extended
    /// attributes.
    mounts: CommandMounts,
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
    pub(super) fn confined(ruleset: Arc<OwnedFd>, isolation: Isolation, mounts: CommandMounts) -> ChildSetup {
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
        open_daemon_pidfd();
        ChildSetup {
            namespaces,
            as_root: euid == 0,
            refuse_unix_sockets: isolation.refuse_unix_sockets,
            setid_filter: super::seccomp::setid_program(),
            mounts,
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
            setid_filter: &[],
            mounts: CommandMounts::default(),
            ruleset: None,
            proc_access: 0,
        }
    }

    /// A child that only enters a PID namespace (and, with `private_proc`, a mount namespace with its own `/proc`),
    /// to learn at start whether this system allows it.
    pub(super) fn isolation_probe(private_proc: bool) -> ChildSetup {
        let namespaces = libc::CLONE_NEWPID | if private_proc { libc::CLONE_NEWNS } else { 0 };
        open_daemon_pidfd();
        // With the mount namespace, also the mounts a confined child makes (see `CommandMounts::probe`).
        let mounts = if private_proc { CommandMounts::probe() } else { CommandMounts::default() };
        ChildSetup { namespaces, mounts, ..ChildSetup::unconfined() }
    }

    /// The namespaces the child is cloned into (`CLONE_NEWPID`, `CLONE_NEWNS`, `CLONE_NEWNET`), 0 for none.
    pub(super) fn namespaces(&self) -> libc::c_int {
        self.namespaces
    }

    /// Runs in the child between clone and exec ([`super::spawn`]), or between fork and exec for a setup without
    /// namespaces (a `pre_exec` hook: [`super::PreparedSandbox::install_death_signal`]). `entered` says how the
    /// namespaces were entered. Async-signal-safe: raw syscalls on prepared data only.
    pub(super) fn apply(&self, entered: Entered) -> io::Result<()> {
        let user_namespace = match entered {
            Entered::Nothing if self.namespaces != 0 => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
            Entered::Nothing => false,
            Entered::ByClone { user_namespace } => user_namespace,
        };
        // A session of its own: no controlling terminal, so nothing can reach the user's terminal through
        // `/dev/tty` (TIOCSTI injection, reading keystrokes); it also leads a new process group. In a new PID
        // namespace the command is its init and leads its session there as well.
        // SAFETY: setsid takes no arguments; the child is not a group leader (no process_group was set).
        if unsafe { libc::setsid() } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: prctl with integer arguments only; PR_SET_PDEATHSIG takes a signal number.
        check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) })?;
        // The daemon may have died between the clone and the line above; then nothing would kill this process.
        if !self.daemon_alive() {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        // Descriptors the daemon inherited (a supervisor's socket, a launcher's pipe) must not reach the command:
        // every one above stdio closes at exec. (The daemon's own are close-on-exec already.)
        close_inherited_descriptors_on_exec();
        if user_namespace {
            write_file(c"/proc/self/setgroups", b"deny")?;
            write_file(c"/proc/self/uid_map", &self.id_maps.uid_map)?;
            write_file(c"/proc/self/gid_map", &self.id_maps.gid_map)?;
        }
        if self.namespaces & libc::CLONE_NEWNET != 0 {
            bring_loopback_up()?;
        }
        if self.namespaces & libc::CLONE_NEWNS != 0 {
            self.mounts.apply()?;
        }
        if self.as_root {
            drop_capabilities()?;
        }
        // Inside the PID namespace (the command is its init), whose procfs this is; before Landlock, which forbids
        // mounting.
        if self.namespaces & libc::CLONE_NEWPID != 0 && self.namespaces & libc::CLONE_NEWNS != 0 {
            super::mounts::mount_own_proc()?;
            if let Some(ruleset) = &self.ruleset
                && self.proc_access != 0
            {
                grant_beneath(ruleset.as_raw_fd(), c"/proc", self.proc_access)?;
            }
        }
        if let Some(ruleset) = &self.ruleset {
            // SAFETY: prctl with integer arguments only.
            check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0) })?;
            if self.refuse_unix_sockets {
                super::seccomp::install_unix_socket_filter()?;
            }
            super::seccomp::install_setid_filter(self.setid_filter)?;
            // SAFETY: the ruleset descriptor is open and owned by this setup; flags 0 is the only defined value.
            let outcome = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) };
            if outcome != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// Whether the daemon still lives, asked from the child after its death signal is set. In the daemon's PID
    /// namespace the parent's pid tells (a dead daemon's children are reparented); from a new one `getppid` is
    /// always 0, and the daemon's pidfd, readable once it has exited, tells instead.
    fn daemon_alive(&self) -> bool {
        if self.namespaces & libc::CLONE_NEWPID == 0 {
            // SAFETY: getppid cannot fail.
            return unsafe { libc::getppid() } == self.parent_pid;
        }
        let Some(daemon) = daemon_pidfd() else {
            // No pidfd on this kernel (before 5.3): the clone's pidfd would have failed first.
            return true;
        };
        let mut poll = libc::pollfd { fd: daemon, events: libc::POLLIN, revents: 0 };
        // SAFETY: `poll` is one valid pollfd; timeout 0 only asks.
        let ready = unsafe { libc::poll(&mut poll, 1, 0) };
        ready == 0
    }
}

/// How the child entered its namespaces, for [`ChildSetup::apply`].
#[derive(Clone, Copy, Debug)]
pub(super) enum Entered {
    /// A plain fork: the setup must ask for no namespaces.
    Nothing,
    /// Cloned into the setup's namespaces, and into a user namespace that maps the daemon's ids when
    /// `user_namespace` (the daemon is not root).
    ByClone { user_namespace: bool },
}

/// A pidfd of the daemon itself, which a child in another PID namespace polls to learn whether the daemon has
/// exited. Opened in the daemon ([`open_daemon_pidfd`]) before any child that reads it is cloned: the child shares
/// the daemon's memory and must only read it. `None` inside: the kernel has no `pidfd_open` (before 5.3).
static DAEMON_PIDFD: std::sync::OnceLock<Option<OwnedFd>> = std::sync::OnceLock::new();

/// Opens [`DAEMON_PIDFD`] once. In the daemon, never in a child.
fn open_daemon_pidfd() {
    DAEMON_PIDFD.get_or_init(|| {
        // SAFETY: pidfd_open with our own pid and no flags; the result is a new descriptor we own.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0u32) };
        let fd = libc::c_int::try_from(fd).ok().filter(|fd| *fd >= 0)?;
        // SAFETY: `fd` was just opened and nothing else owns it.
        Some(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
    });
}

/// The daemon's pidfd, read in the child (no initialisation there: it was opened before the clone).
fn daemon_pidfd() -> Option<libc::c_int> {
    DAEMON_PIDFD.get()?.as_ref().map(AsRawFd::as_raw_fd)
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
