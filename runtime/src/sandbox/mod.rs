//! The safety boundary: what tool processes and in-process file tools may touch, enforced by the kernel.
//!
//! A model's output is untrusted input. The permission policy ([`crate::policy`]) decides whether a call runs;
//! this module bounds what it can do once it runs, whatever the policy, the mode or the user said:
//!
//! - every process a tool starts runs under Landlock ([`landlock`]), set up between clone and exec ([`spawn`]:
//!   cloned, not forked, so its cost does not grow with the daemon's memory): it may read
//!   everything except the denied paths (the data directory, always, and `[sandbox] deny_read` with its built-in
//!   defaults), and write only the session's cwd, the run's temp dir and `[sandbox] writable`, never inside a
//!   denied path. With `network = false` it runs in a network namespace of its own (loopback only);
//! - in-process file tools check the file they opened (device and inode, and those of its directories) against
//!   the same denied paths ([`protected`]), so a hard link or a bind mount does not lead around them;
//! - every other troupe data directory is a denied path too, wherever it is and whichever daemon made it
//!   ([`data_dirs`]: a per-user registry and their layout find them), and their secrets are masked;
//! - tool processes run in a session of their own (no controlling terminal) and, where the system allows it, in
//!   a PID namespace whose init is the command, so that nothing they start outlives them (`setsid` included),
//!   with a mount namespace and a `/proc` of their own, so that they see no other process (its command line and
//!   environment included);
//!   they die with the daemon (`PR_SET_PDEATHSIG`), and each live process group is recorded durably
//!   ([`process_groups`]) so that the next start kills what a SIGKILLed daemon left behind before it marks the
//!   run interrupted;
//! - below Landlock ABI 9, which cannot govern Unix sockets, a seccomp filter refuses creating them.
//!
//! On a kernel without Landlock, tool processes are refused unless `[sandbox] mode = "off"` says to run them
//! unconfined: never a silent downgrade.

#[cfg(target_os = "linux")]
mod child;
mod clear_folders;
pub mod data_dirs;
pub mod environment;
mod landlock;
mod link_index;
mod mount_roots;
#[cfg(target_os = "linux")]
mod mounts;
pub mod plan;
mod plan_cache;
pub mod process_groups;
pub mod protected;
mod pseudo_fs;
pub mod repository;
#[cfg(target_os = "linux")]
mod seccomp;
#[cfg(target_os = "linux")]
pub mod spawn;
pub mod temp_roots;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use troupe_protocol::types::runtime::{SandboxEnforcement, SandboxStatus};

use crate::config::{EnclosingGitDir, SandboxConfig, SandboxMode};
use crate::redact::Secrets;

pub use self::data_dirs::DataDirFinder;
pub use self::landlock::PreparedSandbox;
pub use self::process_groups::ProcessGroups;
pub use self::protected::ProtectedPaths;
#[cfg(target_os = "linux")]
pub use self::spawn::{ToolCommand, ToolProcess};
pub use self::temp_roots::temp_root_of;

/// Paths under the daemon user's home that tool processes never read, whatever the configuration adds: keys and
/// cloud credentials, and the default data directory of troupe (another daemon's token, when this one uses
/// another data directory).
pub const DEFAULT_DENY_READ: [&str; 5] = ["~/.ssh", "~/.aws", "~/.config/gcloud", "~/.gnupg", "~/.troupe"];

/// Whether this kernel can enforce the sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Support {
    /// Landlock is enabled, with this ABI version.
    Landlock { abi: u32 },
    /// Landlock cannot be used; the reason is for the operator.
    Unavailable { reason: String },
}

/// The daemon-wide sandbox: built once at start from `[sandbox]` and the data directory, shared by every run.
#[derive(Debug)]
pub struct Sandbox {
    mode: SandboxMode,
    network: bool,
    /// The data directory, canonical where it exists.
    data_dir: PathBuf,
    /// Absolute paths no tool may read or write: the data directory first, then the defaults and `deny_read`.
    denied: Vec<PathBuf>,
    /// Absolute paths tool processes may write besides the cwd and the run's temp dir.
    writable: Vec<PathBuf>,
    /// Whether commands may write the git dir of a repository holding the cwd when it lies outside it.
    enclosing_git_dir: EnclosingGitDir,
    /// The daemon user's home folder (canonical): a repository holding it never gets its git dir written.
    home: Option<PathBuf>,
    /// `[sandbox] env`: the daemon's variables tool processes get besides the built-in allowlist.
    env: Vec<String>,
    support: Support,
    /// Why tool processes get no PID namespace of their own, or `None` when they do.
    no_pid_namespace: Option<String>,
    /// Why tool processes see the host's `/proc` (every process of the machine), or `None` when they get their own.
    no_private_proc: Option<String>,
    protected: ProtectedPaths,
    /// Finds the other troupe data dirs a command could reach; `None` for an unconfined sandbox.
    data_dirs: Option<DataDirFinder>,
    groups: Option<ProcessGroups>,
    /// Where runs make their temp dirs: `<system temp>/troupe-<uid>-<hash of the data dir>`, one per data dir, so
    /// that a daemon cleans up after a predecessor that died.
    temp_root: Option<PathBuf>,
    /// The plans of recent cwds, reused while still true.
    plans: plan_cache::PlanCache,
}

impl Sandbox {
    /// Builds the sandbox of a daemon whose data directory is `data_dir`; `home` expands `~/`. Probes the kernel
    /// for Landlock once.
    pub fn new(config: &SandboxConfig, data_dir: &Path, home: Option<&Path>) -> Sandbox {
        let data_dir = data_dir.canonicalize().unwrap_or_else(|_| data_dir.to_path_buf());
        let expand = |path: &String| -> Option<PathBuf> {
            match path.strip_prefix("~/") {
                Some(rest) => home.map(|home| home.join(rest)),
                None if path == "~" => home.map(Path::to_path_buf),
                None => Some(PathBuf::from(path)),
            }
        };
        let canonical = |path: PathBuf| path.canonicalize().unwrap_or(path);
        let mut denied = vec![data_dir.clone()];
        // The data directory named by TROUPE_HOME, when this daemon was given another one.
        let troupe_home = std::env::var(crate::data_dir::DATA_DIR_ENV).ok().filter(|path| path.starts_with('/'));
        let defaults = DEFAULT_DENY_READ.iter().map(|path| (*path).to_owned()).chain(troupe_home);
        for path in defaults.chain(config.deny_read.iter().cloned()) {
            // Where it leads now, and as written: a symlink on the way may lead elsewhere later.
            for path in expand(&path).into_iter().flat_map(|written| [canonical(written.clone()), written]) {
                if !denied.contains(&path) {
                    denied.push(path);
                }
            }
        }
        let writable = config.writable.iter().filter_map(expand).map(canonical).collect();
        let support = landlock::probe();
        let (no_pid_namespace, no_private_proc) = match (&support, config.mode) {
            (_, SandboxMode::Off) => (Some("the sandbox is off".to_owned()), Some("the sandbox is off".to_owned())),
            (Support::Unavailable { reason }, _) => (Some(reason.clone()), Some(reason.clone())),
            // The whole isolation first; where the system refuses the mount, a PID namespace alone still keeps
            // detached processes from outliving the command (the status then says that /proc is shared).
            (Support::Landlock { .. }, _) => match landlock::probe_pid_namespace(true) {
                Ok(()) => (None, None),
                Err(no_proc) => match landlock::probe_pid_namespace(false) {
                    Ok(()) => (None, Some(no_proc)),
                    Err(reason) => (Some(reason), Some(no_proc)),
                },
            },
        };
        // File tools run inside the daemon, whose own `/proc/self` (environment, memory, descriptors) no tool may
        // read; tool processes read their own `/proc` and are kept from the daemon's by Landlock.
        let mut file_tool_denied = denied.clone();
        file_tool_denied.push(PathBuf::from("/proc"));
        let protected = ProtectedPaths::new(file_tool_denied);
        let groups = ProcessGroups::new(data_dir.join("daemon").join("process-groups"));
        let temp_root = temp_root_of(&data_dir);
        let data_dirs = DataDirFinder::new(&data_dir, home);
        Sandbox {
            mode: config.mode,
            network: config.network,
            data_dir,
            denied,
            writable,
            enclosing_git_dir: config.enclosing_git_dir,
            home: home.map(|home| canonical(home.to_path_buf())),
            env: config.env.clone(),
            support,
            no_pid_namespace,
            no_private_proc,
            protected,
            data_dirs: Some(data_dirs),
            groups: Some(groups),
            temp_root: Some(temp_root),
            plans: plan_cache::PlanCache::default(),
        }
    }

    /// No kernel sandbox and nothing protected: for tool tests that are not about the sandbox.
    pub fn unconfined() -> Sandbox {
        Sandbox {
            mode: SandboxMode::Off,
            network: true,
            data_dir: PathBuf::new(),
            denied: Vec::new(),
            writable: Vec::new(),
            enclosing_git_dir: EnclosingGitDir::default(),
            home: None,
            env: Vec::new(),
            support: Support::Unavailable { reason: "not probed".to_owned() },
            no_pid_namespace: Some("not probed".to_owned()),
            no_private_proc: Some("not probed".to_owned()),
            protected: ProtectedPaths::new(Vec::new()),
            data_dirs: None,
            groups: None,
            temp_root: None,
            plans: plan_cache::PlanCache::default(),
        }
    }

    /// The same sandbox as if the kernel probe had found `support`: for tests of the refusal path.
    #[doc(hidden)]
    pub fn with_support(mut self, support: Support) -> Sandbox {
        self.support = support;
        self
    }

    pub fn mode(&self) -> SandboxMode {
        self.mode
    }

    pub fn network(&self) -> bool {
        self.network
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The denied paths, the data directory first.
    pub fn denied(&self) -> &[PathBuf] {
        &self.denied
    }

    /// The denied paths of a command started in `cwd`: [`Sandbox::denied`], then every other troupe data dir it
    /// could reach ([`DataDirFinder::around`]), whose secrets are masked from now on. Blocking I/O, cached.
    pub fn denied_around(&self, cwd: &Path) -> Vec<PathBuf> {
        // Resolved again now: a path that did not exist at start (`~/.config/gcloud` before the first login), or
        // whose folders include a symlink, is denied where it leads today, and as written too.
        let mut denied = Vec::with_capacity(self.denied.len() + 4);
        for path in &self.denied {
            for path in [resolved_now(path), path.clone()] {
                if !denied.contains(&path) {
                    denied.push(path);
                }
            }
        }
        let found = self.data_dirs.as_ref().map(|finder| finder.around(cwd)).unwrap_or_default();
        for dir in found {
            if !plan::is_within_any(&dir, &denied) {
                denied.push(dir);
            }
        }
        denied
    }

    /// Finds the other troupe data dirs a run in `cwd` could reach, so that their secrets are masked from now on
    /// (file tools need no list: they check the layout above each file they open). Blocking I/O, cached.
    pub fn mask_secrets_around(&self, cwd: &Path) {
        drop(self.denied_around(cwd));
    }

    /// Masks the tokens and provider keys of the other troupe data dirs in `secrets`: those found now (the
    /// registry, the home folder, the temp dir) and those found when commands are planned. Blocking I/O.
    pub fn mask_other_data_dirs_in(&self, secrets: Secrets) {
        if let Some(finder) = &self.data_dirs {
            finder.mask_secrets_in(secrets);
        }
    }

    /// Masks the secrets of other data dirs registered or laid out in the home folder or the temp dir since the
    /// last look (see `DataDirFinder::refresh_secrets`). Blocking I/O, a few `stat`s when nothing changed.
    pub fn refresh_masked_secrets(&self) {
        if let Some(finder) = &self.data_dirs {
            finder.refresh_secrets();
        }
    }

    pub fn writable(&self) -> &[PathBuf] {
        &self.writable
    }

    pub fn enclosing_git_dir(&self) -> EnclosingGitDir {
        self.enclosing_git_dir
    }

    /// The environment a tool process gets of the daemon's: the allowlist and `[sandbox] env` (see
    /// [`environment`]); the caller adds `TMPDIR`.
    pub fn tool_environment(&self) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
        environment::tool_environment(std::env::vars_os(), &self.env)
    }

    pub fn support(&self) -> &Support {
        &self.support
    }

    /// Whether tool processes run in a PID namespace of their own (everything they start dies with them).
    pub fn pid_namespace(&self) -> bool {
        self.no_pid_namespace.is_none()
    }

    /// Why tool processes get no PID namespace, when they do not.
    pub fn no_pid_namespace(&self) -> Option<&str> {
        self.no_pid_namespace.as_deref()
    }

    /// Whether tool processes get a `/proc` of their own (in their own mount namespace), which lists only the
    /// processes of their PID namespace. Once promised here, a process for which it cannot be set up does not start.
    pub fn private_proc(&self) -> bool {
        self.pid_namespace() && self.no_private_proc.is_none()
    }

    /// Why tool processes see the `/proc` of the whole machine, when they do.
    pub fn no_private_proc(&self) -> Option<&str> {
        self.no_private_proc.as_deref()
    }

    /// The denied paths by file identity, for in-process file tools.
    pub fn protected(&self) -> &ProtectedPaths {
        &self.protected
    }

    /// The folder of the runs' temp dirs, when this sandbox belongs to a daemon: created (0700) if missing, and
    /// refused unless it is a private folder of this user ([`temp_roots::ensure`]). Blocking I/O.
    pub fn temp_root(&self) -> std::io::Result<PathBuf> {
        let root = self.temp_root.as_deref().ok_or_else(|| std::io::Error::other("no temp root"))?;
        temp_roots::ensure(root)
    }

    /// Removes the runs' temp dirs a previous daemon of this data directory left (it died before its runs ended),
    /// notes the data directory in the folder, and removes the folders of data directories that are gone
    /// ([`temp_roots`]). Called once at start, while the data directory's lock is held, so no live run uses them.
    /// Returns how many such folders were removed.
    pub fn clear_temp_root(&self) -> std::io::Result<usize> {
        let Some(root) = self.temp_root.as_deref() else {
            return Ok(0);
        };
        temp_roots::clear(root, &self.data_dir)?;
        let system_temp = root.parent().unwrap_or(Path::new("/"));
        Ok(temp_roots::prune_orphans(system_temp, root))
    }

    /// Where live process groups are recorded, when this sandbox belongs to a daemon.
    pub fn groups(&self) -> Option<&ProcessGroups> {
        self.groups.as_ref()
    }

    /// The sandbox as the runtime snapshot reports it.
    pub fn status(&self) -> SandboxStatus {
        let (enforcement, landlock_abi) = match (&self.mode, &self.support) {
            (SandboxMode::Off, Support::Landlock { abi }) => (SandboxEnforcement::None, Some(*abi)),
            (SandboxMode::Off, Support::Unavailable { .. }) => (SandboxEnforcement::None, None),
            (_, Support::Landlock { abi }) => (SandboxEnforcement::Landlock, Some(*abi)),
            (_, Support::Unavailable { .. }) => (SandboxEnforcement::None, None),
        };
        let shown = |paths: &[PathBuf]| paths.iter().map(|path| path.display().to_string()).collect();
        SandboxStatus {
            mode: self.mode,
            enforcement,
            landlock_abi,
            network: self.network,
            denied: shown(&self.denied),
            writable: shown(&self.writable),
            enclosing_git_dir: self.enclosing_git_dir,
            env: self.env.clone(),
            tools_refused: self.refusal(),
            pid_namespace: self.pid_namespace(),
            private_proc: self.private_proc(),
        }
    }

    /// Why file tools may not write at all, or `None`: in `read-only` mode nothing of the project changes, whether
    /// a command or a file tool would change it.
    pub fn file_write_refusal(&self) -> Option<String> {
        (self.mode == SandboxMode::ReadOnly).then(|| {
            "refused by the sandbox: it is in read-only mode, so tools change no files (set `[sandbox] mode = \
             \"workspace-write\"` in troupe's config.toml to allow writes in the session's directory)"
                .to_owned()
        })
    }

    /// Why tool processes may not start at all, or `None`: the mode asks for a sandbox this kernel cannot give.
    pub fn refusal(&self) -> Option<String> {
        match (&self.mode, &self.support) {
            (SandboxMode::Off, _) | (_, Support::Landlock { .. }) => None,
            (mode, Support::Unavailable { reason }) => Some(format!(
                "the sandbox (mode {}) cannot be enforced on this system: {reason}; tool processes are refused. \
                 Set `[sandbox] mode = \"off\"` in config.toml to run them without a kernel sandbox",
                mode.as_str()
            )),
        }
    }

    /// The kernel rules for one tool process started in `cwd`, with `temp_dir` as its run's temp dir; `None` when
    /// the mode is `off`. An error means the process must not start (the reason is for the model and the user).
    /// `extra_writable` are the git directories of the repository that holds the cwd when they lie outside it
    /// ([`repository::git_dirs_outside`]): written in `workspace-write` only when `[sandbox] enclosing_git_dir`
    /// says so and the repository does not hold the home folder ([`repository::writable_git_dirs`]), and dropped
    /// when they lie in a denied path. Does blocking I/O (opens every rule's path): call it from a blocking thread.
    pub fn prepare(
        &self,
        cwd: &Path,
        temp_dir: &Path,
        extra_writable: &[PathBuf],
    ) -> Result<Option<PreparedSandbox>, String> {
        if let Some(refusal) = self.refusal() {
            return Err(refusal);
        }
        if self.mode == SandboxMode::Off {
            // Nothing confines the command, but what it prints of another data dir's secrets is still masked.
            self.mask_secrets_around(cwd);
            return Ok(None);
        }
        let git_dirs = repository::writable_git_dirs(extra_writable, self.enclosing_git_dir, self.home.as_deref());
        landlock::prepare(self, cwd, temp_dir, &git_dirs).map(Some)
    }
}

/// `path` as it reaches the file system now: its longest existing part with the symlinks resolved, then the rest as
/// written (`..` taken lexically there, since nothing there exists to follow). `path` itself when nothing of it
/// resolves.
fn resolved_now(path: &Path) -> PathBuf {
    let components: Vec<std::path::Component<'_>> = path.components().collect();
    for split in (1..=components.len()).rev() {
        let head: PathBuf = components[..split].iter().collect();
        let Ok(mut resolved) = head.canonicalize() else {
            continue;
        };
        let mut appended = 0usize;
        for component in &components[split..] {
            match component {
                // Never above the part that exists: `/missing/..` must not become `/`.
                std::path::Component::ParentDir if appended == 0 => return path.to_path_buf(),
                std::path::Component::ParentDir => {
                    resolved.pop();
                    appended -= 1;
                }
                std::path::Component::Normal(name) => {
                    resolved.push(name);
                    appended += 1;
                }
                _ => {}
            }
        }
        return resolved;
    }
    path.to_path_buf()
}

impl Sandbox {
    /// The rules of a command started in `cwd` other than those of its temp dir: the plan made for an earlier
    /// command of this cwd while it is still true ([`plan_cache`]), else a new one, kept when it can be. The denied
    /// paths around `cwd` are looked up again every time (other data dirs come and go). Blocking I/O.
    fn base_plan(&self, cwd: &Path, extra_writable: &[PathBuf]) -> Arc<plan_cache::Planned> {
        let denied = self.denied_around(cwd);
        if let Some(planned) = self.plans.get(cwd, extra_writable, &denied) {
            return planned;
        }
        let identities = plan_cache::identities(&denied);
        let mut listed = Vec::new();
        let plan = plan::base_plan(self, cwd, denied, extra_writable, &mut listed);
        let planned = Arc::new(plan_cache::Planned::new(plan, &listed, identities));
        self.plans.insert(cwd, extra_writable, Arc::clone(&planned), &listed);
        planned
    }
}
