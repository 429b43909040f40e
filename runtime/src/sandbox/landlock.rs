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

use super::plan::{PlannedRule, SandboxPlan};
use super::plan_cache::Planned;
use super::{Sandbox, Support};

/// The rules of one tool process, prepared before it is started ([`super::spawn::ToolCommand::spawn`]), which
/// enters them between clone and exec.
#[derive(Debug)]
pub struct PreparedSandbox {
    /// The rules every command in this cwd gets (cached, see [`super::plan_cache`]).
    base: Arc<Planned>,
    /// The rules of this call's temp dir, and the temp dir when a denied path holds it.
    temp_rules: Vec<PlannedRule>,
    temp_dropped: Vec<PathBuf>,
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
        self.base.plan.dropped_writable.iter().chain(&self.temp_dropped)
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
    let (temp_rules, temp_dropped) = super::plan::temp_dir_rules(sandbox, &base.plan, temp_dir);
    let rules = base.plan.rules.iter().chain(&temp_rules);
    let ruleset = match base.ruleset(temp_dir) {
        Some(ruleset) => ruleset,
        None => {
            // Rules beneath a listed folder are covered by its stamp; the others are compared at each reuse.
            let is_root = |rule: &PlannedRule| !base.is_listed_entry(rule);
            let (ruleset, roots) = ruleset::build(*abi, rules.clone(), &base.plan.denied, is_root)
                .map_err(|error| format!("the sandbox rules could not be built: {error}"))?;
            let ruleset = Arc::new(ruleset);
            base.keep_ruleset(temp_dir, Arc::clone(&ruleset), roots);
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
    let setup = super::child::ChildSetup::confined(ruleset, isolation);
    Ok(PreparedSandbox { base, temp_rules, temp_dropped, setup })
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
mod ruleset {
    //! Turning a plan into a Landlock ruleset descriptor.

    use std::os::fd::{AsFd, AsRawFd, OwnedFd};
    use std::path::PathBuf;

    use landlock::{
        ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset, RulesetAttr,
        RulesetCreatedAttr, Scope,
    };

    use super::super::plan::{Grant, PlannedRule, is_within_any};
    use super::super::plan_cache::Identity;

    /// Creates the ruleset (handling every filesystem right of `abi`, and signal scoping from ABI 6) and adds one
    /// rule per planned path that still is what was planned. Returns its descriptor (close-on-exec).
    /// With it, the identity of what each rule that `is_root` names was (`None`: nothing, or skipped).
    pub(super) fn build<'a>(
        abi: u32,
        rules: impl Iterator<Item = &'a PlannedRule>,
        denied: &[PathBuf],
        is_root: impl Fn(&PlannedRule) -> bool,
    ) -> Result<(OwnedFd, Vec<(PathBuf, Identity)>), String> {
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
        let mut roots = Vec::new();
        for rule in rules {
            let opened = open_as_planned(rule, denied);
            if is_root(rule) {
                roots.push((rule.path.clone(), opened.as_ref().map(|(_, identity, _)| *identity)));
            }
            let Some((fd, _, is_dir)) = opened else {
                continue;
            };
            let mut access = rights.of_grant(rule.grant);
            if !is_dir {
                access &= rights.file;
                if rule.grant == Grant::ListNames {
                    continue;
                }
            }
            if access.is_empty() {
                continue;
            }
            created = created.add_rule(PathBeneath::new(fd, access)).map_err(|error| error.to_string())?;
        }
        let ruleset = Option::<OwnedFd>::from(created).ok_or_else(|| "the kernel gave no ruleset".to_owned())?;
        Ok((ruleset, roots))
    }

    /// The bits of [`Grant::Read`] for `abi`, for a rule the child adds itself (on its own `/proc`).
    pub(super) fn read_access(abi: u32) -> u64 {
        Rights::of(ABI::from(i32::try_from(abi).unwrap_or(i32::MAX))).read.bits()
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

    /// Opens the rule's path (`O_PATH`, not following a final symlink) and returns it with whether it is a
    /// directory, or `None` when it is missing, a symlink, or now resolves elsewhere than planned (a folder on
    /// the way was swapped), or a file with several links: such a rule is skipped, which only ever takes access
    /// away. A read or write grant whose path holds or lies in a denied path is skipped too, whatever the plan
    /// said.
    fn open_as_planned(rule: &PlannedRule, denied: &[PathBuf]) -> Option<(OwnedFd, (u64, u64), bool)> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&rule.path)
            .ok()?;
        let metadata = file.metadata().ok()?;
        let kind = metadata.file_type();
        if kind.is_symlink() {
            return None;
        }
        // The rule attaches to this inode: a file with other names may be a denied file (a hard link to the
        // token), and a rule on it would open it under every name. Checked on the descriptor itself, so a link
        // made after the plan was drawn is caught too.
        if !kind.is_dir() && metadata.nlink() > 1 && matches!(rule.grant, Grant::Read | Grant::Write) {
            return None;
        }
        let resolved = std::fs::read_link(format!("/proc/self/fd/{}", file.as_fd().as_raw_fd())).ok()?;
        if resolved != rule.path {
            return None;
        }
        let broad = matches!(rule.grant, Grant::Read | Grant::Write);
        if broad && (is_within_any(&resolved, denied) || denied.iter().any(|path| path.starts_with(&resolved))) {
            return None;
        }
        Some((OwnedFd::from(file), (metadata.dev(), metadata.ino()), kind.is_dir()))
    }
}
