//! Landlock rules for tool processes: the kernel probe, the ruleset built in the daemon from a [`SandboxPlan`],
//! and the setup that carries it into the child, applied between clone and exec by [`child`](super::child).
//!
//! The ruleset handles every filesystem access right of the kernel's Landlock ABI, so anything a rule does not
//! grant is refused, and with ABI 6 or later it also scopes signals and abstract Unix sockets: a tool process
//! cannot signal the daemon or any process outside its own command, nor connect to an abstract socket outside it.
//! Creating device nodes is never granted. Below ABI 9 Landlock does not govern Unix socket files, so a seccomp
//! filter refuses creating Unix sockets instead ([`super::seccomp`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::plan::{PlannedRule, SandboxPlan, TempRoot};
use super::plan_cache::Planned;
use super::{Sandbox, Support};

/// The rules of one tool process, prepared before it is started ([`super::spawn::ToolCommand::spawn`]), which
/// enters them between clone and exec.
#[derive(Debug)]
pub struct PreparedSandbox {
    /// The rules every command in this cwd gets (cached, see [`super::plan_cache`]).
    base: Arc<Planned>,
    /// The rules of this call's temp dir, and what became of it as a root.
    temp_rules: Vec<PlannedRule>,
    temp_root: TempRoot,
    #[cfg(target_os = "linux")]
    setup: super::child::ChildSetup,
}

impl PreparedSandbox {
    /// The rules this process gets, as paths and grants (for logs and tests).
    pub fn rules(&self) -> impl Iterator<Item = &PlannedRule> {
        self.base.plan.rules.iter().chain(&self.temp_rules)
    }

    /// The writable roots dropped because a denied path holds them.
    pub fn dropped_writable(&self) -> impl Iterator<Item = &PathBuf> {
        self.base.plan.dropped_writable.iter().chain(self.temp_root.dropped())
    }

    /// The part of the plan every command of this cwd shares: the very same plan while the cache reuses it.
    pub fn base_plan(&self) -> &SandboxPlan {
        &self.base.plan
    }

    /// What the child does to itself between clone and exec ([`super::spawn`]): die with SIGKILL when the
    /// spawning thread ends, set up the namespaces it was cloned into, drop the dangerous capabilities of root, set
    /// `no_new_privs` and enter the Landlock domain. Any failure fails the spawn: the command never runs unconfined.
    #[cfg(target_os = "linux")]
    pub(super) fn into_setup(self) -> super::child::ChildSetup {
        self.setup
    }

    /// For a process started through `std` or tokio (a plugin, which is not a tool process): the child is not
    /// confined but still gets a session of its own and dies with the daemon (`PR_SET_PDEATHSIG`, which fires when
    /// the *thread* that forked ends: spawn from a thread that lives as long as the daemon). Tool processes start
    /// through [`super::spawn::ToolCommand`] instead, which does the same without a fork. A no-op outside Linux.
    pub fn install_death_signal(command: &mut tokio::process::Command) {
        #[cfg(target_os = "linux")]
        {
            let setup = super::child::ChildSetup::unconfined();
            // SAFETY: the closure runs between fork and exec and only makes raw, async-signal-safe syscalls on
            // data prepared before the fork (see `ChildSetup::apply`); it allocates nothing and takes no lock.
            unsafe {
                command.pre_exec(move || setup.apply(super::child::Entered::Nothing));
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = command;
    }
}

/// Whether tool processes can get a PID namespace of their own here (as root, or through an unprivileged user
/// namespace), with `private_proc` also a mount namespace with their own `/proc`: starts `/bin/true` as the init
/// of a new one. `Err` says why not.
#[cfg(target_os = "linux")]
pub(super) fn probe_pid_namespace(private_proc: bool) -> Result<(), String> {
    let setup = super::child::ChildSetup::isolation_probe(private_proc);
    match super::spawn::ToolCommand::new("/bin/true").run_blocking(&setup) {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("a process in a new PID namespace ended with {status}")),
        Err(error) if private_proc => Err(format!("a new PID namespace with its own /proc could not be made: {error}")),
        Err(error) => Err(format!("a new PID namespace could not be made: {error}")),
    }
}

#[cfg(not(target_os = "linux"))]
pub(super) fn probe_pid_namespace(_private_proc: bool) -> Result<(), String> {
    Err("PID namespaces exist only on Linux".to_owned())
}

/// The Landlock ABI of the running kernel.
#[cfg(target_os = "linux")]
pub(super) fn probe() -> Support {
    // SAFETY: with a null attribute, size 0 and LANDLOCK_CREATE_RULESET_VERSION (1), the syscall only returns
    // the ABI version or an error; it reads no memory.
    let version =
        unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<libc::c_void>(), 0usize, 1u32) };
    if let Ok(abi @ 1..) = u32::try_from(version) {
        return Support::Landlock { abi };
    }
    let reason = match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EOPNOTSUPP) => {
            "Landlock is built into this kernel but disabled (add `landlock` to the `lsm=` boot parameter)".to_owned()
        }
        Some(libc::ENOSYS) => "this kernel has no Landlock (it needs Linux 5.13 or later built with \
                               CONFIG_SECURITY_LANDLOCK)"
            .to_owned(),
        _ => format!("probing Landlock failed: {}", std::io::Error::last_os_error()),
    };
    Support::Unavailable { reason }
}

#[cfg(not(target_os = "linux"))]
pub(super) fn probe() -> Support {
    Support::Unavailable { reason: "the sandbox uses Landlock, which exists only on Linux".to_owned() }
}

/// Plans the rules of a process started in `cwd` with `temp_dir` and builds its Landlock ruleset. Blocking I/O.
#[cfg(target_os = "linux")]
pub(super) fn prepare(
    sandbox: &Sandbox,
    cwd: &Path,
    temp_dir: &Path,
    extra_writable: &[std::path::PathBuf],
) -> Result<PreparedSandbox, String> {
    let Support::Landlock { abi } = sandbox.support() else {
        return Err("Landlock is not available on this system".to_owned());
    };
    let base = sandbox.base_plan(cwd, extra_writable);
    let (temp_rules, temp_root) = super::plan::temp_dir_rules(sandbox, &base.plan, temp_dir);
    let rules = base.plan.rules.iter().chain(&temp_rules);
    let ruleset = match base.ruleset(temp_dir) {
        Some(ruleset) => ruleset,
        None => {
            // Rules beneath a listed folder are covered by its stamp; the others are compared at each reuse.
            let listed = base.listed_folders().map(Path::as_os_str).collect();
            let built = ruleset::build(*abi, rules, &base.plan.denied, &listed, &base.carved_inodes())
                .map_err(|error| format!("the sandbox rules could not be built: {error}"))?;
            let ruleset = Arc::new(built.fd);
            base.keep_ruleset(temp_dir, Arc::clone(&ruleset), built.rules, built.roots);
            ruleset
        }
    };
    let isolation = super::child::Isolation {
        network: sandbox.network(),
        pid_namespace: sandbox.pid_namespace(),
        private_proc: sandbox.private_proc(),
        // The command's own /proc, mounted in the child after this ruleset is built, is an inode no rule names
        // (Landlock matches inodes and skips mount points on the way up): the child grants it the read access the
        // plan grants the daemon's /proc, and nothing when the plan grants none.
        proc_access: if base.grants_proc_read() { ruleset::read_access(*abi) } else { 0 },
        // From ABI 9 the ruleset governs connecting to Unix sockets; before, only seccomp can refuse them.
        refuse_unix_sockets: *abi < 9,
    };
    let writable = base.plan.write_roots.iter().chain(temp_root.writable()).map(PathBuf::as_path);
    let mounts = super::mounts::CommandMounts::new(writable, &base.plan.denied);
    let setup = super::child::ChildSetup::confined(ruleset, isolation, mounts);
    Ok(PreparedSandbox { base, temp_rules, temp_root, setup })
}

#[cfg(not(target_os = "linux"))]
pub(super) fn prepare(
    _sandbox: &Sandbox,
    _cwd: &Path,
    _temp_dir: &Path,
    _extra_writable: &[std::path::PathBuf],
) -> Result<PreparedSandbox, String> {
    Err("the sandbox uses Landlock, which exists only on Linux".to_owned())
}

#[cfg(target_os = "linux")]
mod ruleset;
