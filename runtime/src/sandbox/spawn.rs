//! Starting a tool process: cloned straight into its namespaces, never forked.
//!
//! A `fork` copies the page tables of the whole daemon, so its cost grows with the daemon's memory (a daemon that
//! holds many sessions paid tens of milliseconds per shell command), and a PID namespace needed a second fork to
//! get an init. Here the child is made with `clone(CLONE_VM | CLONE_VFORK)`, as `posix_spawn` does: it runs on a
//! small stack of its own in the daemon's memory while the spawning thread waits, sets itself up
//! ([`ChildSetup::apply`]) and execs; nothing is copied. With a PID namespace it is cloned into it (`CLONE_NEWPID`)
//! and so is the namespace's init itself: when it ends, the kernel kills everything left in the namespace.
//!
//! The daemon holds the child by a pidfd (`CLONE_PIDFD`): [`ToolProcess::wait`] waits for it to become readable
//! and reaps, and signals go through it. Dropping a [`ToolProcess`] that was not reaped kills and reaps it.
//!
//! While the child shares the daemon's memory, the daemon's signal handlers must not run in it: the spawning
//! thread blocks every signal around the clone, and the child sets every signal back to its default action before it
//! unblocks them for the command (so the command inherits nothing the daemon ignores either, `SIGPIPE` included).
//!
//! Like `PR_SET_PDEATHSIG`, the child is tied to the *thread* that spawned it: spawn from a thread that lives as
//! long as the daemon (a runtime worker, not a `spawn_blocking` thread).

use std::convert::Infallible;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicI32, Ordering};

use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

use super::PreparedSandbox;
use super::child::{ChildSetup, Entered};

/// The child's stack, on which it runs from the clone to the exec. Its own code needs a few kilobytes; the rest is
/// headroom (untouched pages cost nothing).
const STACK_BYTES: usize = 256 * 1024;

/// Where the command starts.
#[derive(Debug)]
enum WorkingDir<'a> {
    /// A folder opened and verified before (`fchdir`: never by a path that may lead elsewhere by now), and its
    /// path, by which a child in a mount namespace of its own enters it again (checked to be the same folder).
    Descriptor(BorrowedFd<'a>, PathBuf),
    Path(PathBuf),
}

/// A command to start as a tool process: the program, its arguments and environment (nothing inherited), its
/// working folder and whether its stdin is a pipe (else `/dev/null`). stdout and stderr are always pipes.
#[derive(Debug)]
pub struct ToolCommand<'a> {
    program: OsString,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    cwd: Option<WorkingDir<'a>>,
    piped_stdin: bool,
}

impl<'a> ToolCommand<'a> {
    /// A command running `program`: a path, or a name looked up in the command's own `PATH`.
    pub fn new(program: impl Into<OsString>) -> ToolCommand<'a> {
        ToolCommand { program: program.into(), args: Vec::new(), env: Vec::new(), cwd: None, piped_stdin: false }
    }

    pub fn arg(&mut self, arg: impl Into<OsString>) -> &mut Self {
        self.args.push(arg.into());
        self
    }

    pub fn args(&mut self, args: impl IntoIterator<Item = impl Into<OsString>>) -> &mut Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets a variable of the command's environment (which starts empty); a later value replaces an earlier one.
    pub fn env(&mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> &mut Self {
        let key = key.into();
        self.env.retain(|(existing, _)| *existing != key);
        self.env.push((key, value.into()));
        self
    }

    pub fn envs(
        &mut self,
        variables: impl IntoIterator<Item = (impl Into<OsString>, impl Into<OsString>)>,
    ) -> &mut Self {
        for (key, value) in variables {
            self.env(key, value);
        }
        self
    }

    /// Starts the command in the folder `cwd` is open on (which must stay open until [`ToolCommand::spawn`]
    /// returns: the borrow says so), found at `path`.
    ///
    /// A descriptor belongs to the daemon's mount namespace: a command in one of its own would walk the daemon's
    /// mounts from it (`../../proc` would be the daemon's `/proc`, not the command's). So such a child enters
    /// `path` again in its namespace, and refuses to start unless that is the very folder of the descriptor.
    pub fn cwd_descriptor(&mut self, cwd: BorrowedFd<'a>, path: impl Into<PathBuf>) -> &mut Self {
        self.cwd = Some(WorkingDir::Descriptor(cwd, path.into()));
        self
    }

    /// Starts the command in the folder at `cwd`.
    pub fn cwd(&mut self, cwd: impl Into<PathBuf>) -> &mut Self {
        self.cwd = Some(WorkingDir::Path(cwd.into()));
        self
    }

    /// Gives the command a pipe for stdin ([`ToolProcess::stdin`]) instead of `/dev/null`.
    pub fn piped_stdin(&mut self, piped: bool) -> &mut Self {
        self.piped_stdin = piped;
        self
    }

    /// Starts the command confined by `sandbox`, or, with `None` (mode `off`), unconfined but in a session of its
    /// own and dying with the daemon. Must run inside a tokio runtime (the pipes and the pidfd register with it).
    pub fn spawn(&self, sandbox: Option<PreparedSandbox>) -> io::Result<ToolProcess> {
        let setup = match sandbox {
            Some(prepared) => prepared.into_setup(),
            None => ChildSetup::unconfined(),
        };
        let (stdin_child, stdin_parent) = if self.piped_stdin {
            let (read, write) = new_pipe()?;
            (read, Some(write))
        } else {
            (open_null()?, None)
        };
        let (stdout_parent, stdout_child) = new_pipe()?;
        let (stderr_parent, stderr_child) = new_pipe()?;
        let started = self.start(&setup, [&stdin_child, &stdout_child, &stderr_child])?;
        drop((stdin_child, stdout_child, stderr_child));
        let stdin = stdin_parent.map(pipe::Sender::from_owned_fd).transpose()?;
        let stdout = pipe::Receiver::from_owned_fd(stdout_parent)?;
        let stderr = pipe::Receiver::from_owned_fd(stderr_parent)?;
        let (pid, pidfd) = started.into_parts();
        // SAFETY: the pidfd is owned here and moves into the AsyncFd, which neither replaces nor closes it while it
        // is registered (it is closed only when the AsyncFd drops it).
        let pidfd = match unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) } {
            Ok(pidfd) => pidfd,
            Err(refused) => {
                let (pidfd, error) = refused.into_parts();
                // Killed and reaped as it drops: a process nobody can wait for must not run.
                drop(Started { pid, pidfd: Some(pidfd) });
                return Err(error);
            }
        };
        Ok(ToolProcess { pid, pidfd: Some(pidfd), status: None, stdin, stdout: Some(stdout), stderr: Some(stderr) })
    }

    /// Starts the command with `setup` and `/dev/null` as its stdin, stdout and stderr, and waits for it to end,
    /// blocking: for probing what the system allows.
    pub(super) fn run_blocking(&self, setup: &ChildSetup) -> io::Result<ExitStatus> {
        let null = open_null()?;
        self.start(setup, [&null, &null, &null])?.wait_blocking()
    }

    /// Clones the child, which sets itself up and execs. Returns once it has exec'd, or fails with the error that
    /// kept it from doing so (after reaping it).
    fn start(&self, setup: &ChildSetup, stdio: [&OwnedFd; 3]) -> io::Result<Started> {
        let program = self.resolve_program()?;
        let argv: Vec<CString> = std::iter::once(&self.program)
            .chain(&self.args)
            .map(|arg| c_string(arg.as_bytes()))
            .collect::<Result<_, _>>()?;
        let envp: Vec<CString> = self
            .env
            .iter()
            .map(|(key, value)| c_string(&[key.as_bytes(), b"=", value.as_bytes()].concat()))
            .collect::<Result<_, _>>()?;
        let argv_pointers = null_terminated(&argv);
        let envp_pointers = null_terminated(&envp);
        let cwd_path = match &self.cwd {
            Some(WorkingDir::Path(path) | WorkingDir::Descriptor(_, path)) => {
                Some(c_string(path.as_os_str().as_bytes())?)
            }
            None => None,
        };
        let mut child = ChildArgs {
            setup,
            entered: Entered::ByClone { user_namespace: false },
            program: program.as_ptr(),
            argv: argv_pointers.as_ptr(),
            envp: envp_pointers.as_ptr(),
            cwd_fd: match &self.cwd {
                Some(WorkingDir::Descriptor(fd, _)) => fd.as_raw_fd(),
                _ => -1,
            },
            cwd_path: cwd_path.as_ref().map_or(std::ptr::null(), |path| path.as_ptr()),
            stdio: stdio.map(AsRawFd::as_raw_fd),
            error: AtomicI32::new(0),
        };
        let namespaces = setup.namespaces();
        let started = match clone_child(&mut child, namespaces) {
            // Without root, the namespaces need a user namespace of their own that maps the daemon's ids.
            Err(error) if error.raw_os_error() == Some(libc::EPERM) && namespaces != 0 => {
                child.entered = Entered::ByClone { user_namespace: true };
                clone_child(&mut child, namespaces | libc::CLONE_NEWUSER)?
            }
            other => other?,
        };
        match child.error.load(Ordering::Acquire) {
            0 => Ok(started),
            errno => {
                let _ = started.wait_blocking();
                Err(io::Error::from_raw_os_error(errno))
            }
        }
    }

    /// The program to exec: a path as given (relative to the working folder), or the first executable file of
    /// that name in the absolute folders of the command's `PATH` (the usual default when it has none).
    fn resolve_program(&self) -> io::Result<CString> {
        if self.program.as_bytes().contains(&b'/') {
            return c_string(self.program.as_bytes());
        }
        let path = self
            .env
            .iter()
            .find(|(key, _)| key == "PATH")
            .map_or(OsStr::new("/usr/local/bin:/usr/bin:/bin"), |(_, value)| value.as_os_str());
        std::env::split_paths(path)
            .filter(|folder| folder.is_absolute())
            .map(|folder| folder.join(&self.program))
            .find(|candidate| is_executable(candidate))
            .map_or_else(
                || {
                    Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("`{}` is not in the command's PATH", self.program.to_string_lossy()),
                    ))
                },
                |found| c_string(found.into_os_string().into_vec().as_slice()),
            )
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
}

fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in a command or its environment"))
}

fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings.iter().map(|string| string.as_ptr()).chain(std::iter::once(std::ptr::null())).collect()
}

fn new_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 just opened both, and nothing else owns them.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn open_null() -> io::Result<OwnedFd> {
    // SAFETY: a static NUL-terminated path; these flags need no mode argument.
    let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just opened, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// What the child reads (and the one word it writes), in the spawning thread's frame, which outlives the child's
/// use of it: the thread is suspended until the child execs or exits.
struct ChildArgs<'a> {
    setup: &'a ChildSetup,
    entered: Entered,
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    /// The working folder's descriptor, or -1.
    cwd_fd: RawFd,
    /// The working folder's path, or null.
    cwd_path: *const libc::c_char,
    stdio: [RawFd; 3],
    /// The errno that kept the child from exec'ing; 0 while it has not failed.
    error: AtomicI32,
}

/// A child that has exec'd, held by its pidfd. Dropped without [`Started::into_parts`] or a wait, it is killed
/// and reaped (blocking: it was just started).
struct Started {
    pid: libc::pid_t,
    pidfd: Option<OwnedFd>,
}

impl Started {
    fn into_parts(mut self) -> (libc::pid_t, OwnedFd) {
        let pidfd = self.pidfd.take().unwrap_or_else(|| unreachable!("taken only here and in drop"));
        (self.pid, pidfd)
    }

    fn wait_blocking(mut self) -> io::Result<ExitStatus> {
        self.pidfd = None;
        wait_blocking(self.pid)
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if let Some(pidfd) = self.pidfd.take() {
            let _ = send_kill(&pidfd);
            let _ = wait_blocking(self.pid);
        }
    }
}

fn wait_blocking(pid: libc::pid_t) -> io::Result<ExitStatus> {
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child, writing into a local.
        match unsafe { libc::waitpid(pid, &mut status, 0) } {
            waited if waited == pid => return Ok(ExitStatus::from_raw(status)),
            _ => {
                let error = io::Error::last_os_error();
                if error.kind() != io::ErrorKind::Interrupted {
                    return Err(error);
                }
            }
        }
    }
}

/// Reaps `pid` if it has ended.
fn try_reap(pid: libc::pid_t) -> io::Result<Option<ExitStatus>> {
    let mut status = 0;
    loop {
        // SAFETY: asks about our own child, writing into a local.
        match unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } {
            0 => return Ok(None),
            waited if waited == pid => return Ok(Some(ExitStatus::from_raw(status))),
            _ => {
                let error = io::Error::last_os_error();
                if error.kind() != io::ErrorKind::Interrupted {
                    return Err(error);
                }
            }
        }
    }
}

fn send_kill(pidfd: &OwnedFd) -> io::Result<()> {
    // SAFETY: pidfd_send_signal on our own pidfd with no siginfo and no flags.
    let outcome = unsafe {
        libc::syscall(libc::SYS_pidfd_send_signal, pidfd.as_raw_fd(), libc::SIGKILL, std::ptr::null::<()>(), 0u32)
    };
    if outcome == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// The child's stack: anonymous memory with a guard page at its low end.
struct Stack {
    base: *mut libc::c_void,
    length: usize,
}

impl Stack {
    fn new() -> io::Result<Stack> {
        // SAFETY: sysconf takes an integer.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let length = STACK_BYTES + page;
        // SAFETY: a fresh private anonymous mapping; no address is asked for.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                length,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack { base, length };
        // SAFETY: the first page of the mapping just made; an overflow then faults instead of writing below.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The top of the stack (it grows down), 16-byte aligned since the mapping is page-aligned.
    fn top(&self) -> *mut libc::c_void {
        // SAFETY: one past the end of the mapping, which is what clone takes.
        unsafe { self.base.cast::<u8>().add(self.length).cast() }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`, no longer used (the child has exec'd or exited).
        unsafe { libc::munmap(self.base, self.length) };
    }
}

/// Clones the child into `namespaces` with every signal blocked around the clone; returns once it has exec'd or
/// exited (`CLONE_VFORK`).
fn clone_child(child: &mut ChildArgs<'_>, namespaces: libc::c_int) -> io::Result<Started> {
    let stack = Stack::new()?;
    // SAFETY: sigset_t is plain data; sigfillset initialises it.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above, filled by pthread_sigmask.
    let mut previous: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: both point at valid sigsets of this frame.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut previous);
    }
    let mut pidfd: libc::c_int = -1;
    let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD | libc::SIGCHLD | namespaces;
    // SAFETY: `child_main` runs on `stack` (alive until this returns) with `child`, which this frame keeps alive
    // and unmoved while the child runs: the thread is suspended until it execs or exits (CLONE_VFORK). The child
    // only reads `child` but for its error word. With CLONE_PIDFD the pidfd is written to `pidfd`.
    let pid = unsafe {
        libc::clone(
            child_main,
            stack.top(),
            flags,
            (child as *mut ChildArgs<'_>).cast(),
            &mut pidfd as *mut libc::c_int,
        )
    };
    let error = (pid < 0).then(io::Error::last_os_error);
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut()) };
    drop(stack);
    if let Some(error) = error {
        return Err(error);
    }
    // SAFETY: the kernel opened the pidfd for us (CLONE_PIDFD) and nothing else owns it.
    let pidfd = (pidfd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(pidfd) });
    Ok(Started { pid, pidfd: Some(pidfd.ok_or_else(|| io::Error::other("the kernel gave no pidfd"))?) })
}

/// The child's entry point, on its own stack. Never returns: it execs or exits with 127 after writing why.
extern "C" fn child_main(argument: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `clone_child` passes its `ChildArgs`, alive and unmoved while this runs.
    let child = unsafe { &*argument.cast::<ChildArgs<'_>>() };
    let Err(error) = set_up_and_exec(child);
    child.error.store(error.raw_os_error().unwrap_or(libc::EINVAL), Ordering::Release);
    // SAFETY: ends this process at once, running nothing of the daemon's.
    unsafe { libc::_exit(127) }
}

/// Makes the working folder, entered by its descriptor (a mount of the daemon's namespace), the same folder reached
/// through this child's own mounts: by `path`, which must lead to the descriptor's device and inode (`ESTALE` when
/// it no longer does). Relative paths then walk the command's mounts: its `/proc`, its read-only denied paths.
fn enter_again_in_own_mounts(fd: RawFd, path: *const libc::c_char) -> io::Result<()> {
    // SAFETY: a NUL-terminated path the spawning thread keeps alive.
    if unsafe { libc::chdir(path) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: zeroed stat buffers of this frame, filled by fstat and stat on a descriptor and a static path.
    let (mut held, mut entered): (libc::stat, libc::stat) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut held) } != 0 || unsafe { libc::stat(c".".as_ptr(), &mut entered) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if (held.st_dev, held.st_ino) != (entered.st_dev, entered.st_ino) {
        return Err(io::Error::from_raw_os_error(libc::ESTALE));
    }
    Ok(())
}

/// Everything between clone and exec. Async-signal-safe: raw syscalls on prepared data only.
fn set_up_and_exec(child: &ChildArgs<'_>) -> io::Result<Infallible> {
    reset_signal_dispositions();
    for (target, fd) in (0..).zip(child.stdio) {
        let outcome = if fd == target {
            // SAFETY: clears close-on-exec on a descriptor this child holds.
            unsafe { libc::fcntl(fd, libc::F_SETFD, 0) }
        } else {
            // SAFETY: dup2 between descriptors this child holds; the copy is not close-on-exec.
            unsafe { libc::dup2(fd, target) }
        };
        if outcome < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    if child.cwd_fd >= 0 {
        // SAFETY: fchdir on a descriptor the spawning thread keeps open.
        if unsafe { libc::fchdir(child.cwd_fd) } != 0 {
            return Err(io::Error::last_os_error());
        }
    } else if !child.cwd_path.is_null() {
        // SAFETY: a NUL-terminated path the spawning thread keeps alive.
        if unsafe { libc::chdir(child.cwd_path) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    child.setup.apply(child.entered)?;
    if child.cwd_fd >= 0 && !child.cwd_path.is_null() && child.setup.namespaces() & libc::CLONE_NEWNS != 0 {
        enter_again_in_own_mounts(child.cwd_fd, child.cwd_path)?;
    }
    // The command starts with no signal blocked (the spawning thread blocked them all around the clone).
    // SAFETY: an empty sigset of this frame.
    unsafe {
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::execve(child.program, child.argv, child.envp);
    }
    Err(io::Error::last_os_error())
}

/// The kernel's `struct sigaction` (x86-64 and arm64 alike), for `rt_sigaction` itself: the C library's wrapper
/// refuses the signals it reserves (32 and 33), which a daemon may inherit ignored all the same.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[repr(C)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

/// Sets every signal back to its default action: a handler of the daemon's must never run in the child, which
/// shares its memory until exec, and the command must not inherit what the daemon ignores (`SIGPIPE`, ignored by
/// every Rust program; `SIGHUP` under `nohup`). This child has its own copy of the dispositions (no
/// `CLONE_SIGHAND`).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn reset_signal_dispositions() {
    let default = KernelSigaction { handler: libc::SIG_DFL, flags: 0, restorer: 0, mask: 0 };
    for signal in 1..=64 {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: rt_sigaction with a valid kernel sigaction of this frame, no old action asked, and the size of
        // the kernel's sigset (8 bytes); a signal that cannot be changed answers an error, which is ignored.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                signal,
                &default as *const KernelSigaction,
                std::ptr::null_mut::<KernelSigaction>(),
                std::mem::size_of::<u64>(),
            )
        };
    }
}

/// Elsewhere the kernel's struct differs: the C library's `sigaction`, which cannot reach the signals it reserves.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn reset_signal_dispositions() {
    for signal in 1..libc::SIGRTMAX() {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: a zeroed sigaction is SIG_DFL with no flags and an empty mask; sets this child's own disposition.
        unsafe {
            let default: libc::sigaction = std::mem::zeroed();
            libc::sigaction(signal, &default, std::ptr::null_mut());
        }
    }
}

/// A running tool process, held by its pidfd, with the daemon's ends of its pipes (take them, as from a
/// `tokio::process::Child`). Dropped before it was reaped, it is killed with SIGKILL and reaped in the background.
#[derive(Debug)]
pub struct ToolProcess {
    pid: libc::pid_t,
    /// `None` only while dropping.
    pidfd: Option<AsyncFd<OwnedFd>>,
    status: Option<ExitStatus>,
    pub stdin: Option<pipe::Sender>,
    pub stdout: Option<pipe::Receiver>,
    pub stderr: Option<pipe::Receiver>,
}

impl ToolProcess {
    /// The process's id in the daemon's PID namespace, which is also the id of the process group and the
    /// session it leads.
    pub fn id(&self) -> libc::pid_t {
        self.pid
    }

    /// Sends SIGKILL to the process (not its group), unless it was already reaped.
    pub fn start_kill(&mut self) -> io::Result<()> {
        match (&self.status, &self.pidfd) {
            (None, Some(pidfd)) => send_kill(pidfd.get_ref()),
            _ => Ok(()),
        }
    }

    /// Waits for the process to end and reaps it; its status once reaped. Cancel-safe.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.status {
                return Ok(status);
            }
            if let Some(status) = try_reap(self.pid)? {
                self.status = Some(status);
                return Ok(status);
            }
            let Some(pidfd) = &self.pidfd else {
                return Err(io::Error::other("the process is being dropped"));
            };
            pidfd.readable().await?.clear_ready();
        }
    }
}

impl Drop for ToolProcess {
    fn drop(&mut self) {
        if self.status.is_some() {
            return;
        }
        let _ = self.start_kill();
        if matches!(try_reap(self.pid), Ok(Some(_)) | Err(_)) {
            return;
        }
        let pid = self.pid;
        match (self.pidfd.take(), tokio::runtime::Handle::try_current()) {
            (Some(pidfd), Ok(runtime)) => drop(runtime.spawn(async move {
                while let Ok(mut ready) = pidfd.readable().await {
                    ready.clear_ready();
                    if !matches!(try_reap(pid), Ok(None)) {
                        return;
                    }
                }
            })),
            _ => drop(std::thread::spawn(move || wait_blocking(pid))),
        }
    }
}
