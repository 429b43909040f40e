//! The one way a test gives up because this machine lacks what it needs: a kernel with Landlock (or a recent enough
//! Landlock ABI), PID namespaces for commands, root, the right to mount, or an address off loopback. Every such test
//! calls [`skip`] and returns; `tests/tidy/skips.rs` checks that no test prints "skipped" any other way.
//!
//! By default a skip prints `skipped: …` and the test passes, so the suite runs on a developer's laptop or in a
//! container. With `TROUPE_REQUIRE_SANDBOX=1` (CI sets it in `.ci/run`) a skip is a failure naming what is missing
//! and how to provide it, so the sandbox suite cannot pass by checking nothing.
//!
//! Shared by the runtime's tests (`mod sandbox_support`, or `#[path]` from tools_protected.rs) and the daemon's
//! end-to-end suite (`#[path]` from tests/suite/mod.rs).

#![allow(dead_code)]

use std::fmt;

/// The variable that turns every skip into a failure.
pub const REQUIRE_SANDBOX: &str = "TROUPE_REQUIRE_SANDBOX";

/// What a test found missing on this machine.
#[derive(Debug)]
pub enum Missing {
    /// The kernel does not enforce Landlock; the sandbox's probe says why.
    Landlock { reason: String },
    /// Landlock is enforced, but at an older ABI than the test needs.
    LandlockAbi { needed: u32, found: u32 },
    /// Commands get no PID namespace; the sandbox's probe says why.
    PidNamespace { reason: String },
    /// The test exercises what only a daemon started as root does, and runs as another user.
    Root,
    /// The test mounts a file system of its own (a bind mount, a small tmpfs) and may not.
    Mount,
    /// The test serves on an address of this machine off loopback (its default route's), and it has none.
    OffLoopbackAddress,
}

impl fmt::Display for Missing {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::Landlock { reason } => write!(
                formatter,
                "Landlock is unavailable ({reason}); boot a kernel built with CONFIG_SECURITY_LANDLOCK=y that lists \
                 landlock in /sys/kernel/security/lsm (the lsm= boot parameter)"
            ),
            Missing::LandlockAbi { needed, found } => {
                write!(
                    formatter,
                    "the test needs Landlock ABI {needed} and this kernel has ABI {found}; boot a newer kernel"
                )
            }
            Missing::PidNamespace { reason } => write!(
                formatter,
                "commands get no PID namespace ({reason}); run as root, or allow unprivileged user namespaces \
                 (sysctl kernel.unprivileged_userns_clone=1, kernel.apparmor_restrict_unprivileged_userns=0)"
            ),
            Missing::Root => write!(formatter, "the test needs root and runs as uid {}; run the tests as root", euid()),
            Missing::Mount => write!(
                formatter,
                "this process may not mount file systems; run the tests as root outside a container that drops \
                 CAP_SYS_ADMIN"
            ),
            Missing::OffLoopbackAddress => write!(
                formatter,
                "this machine has no address off loopback (no default route); run the tests with a network interface up"
            ),
        }
    }
}

/// Whether `TROUPE_REQUIRE_SANDBOX=1`: skipping is then a failure.
pub fn required() -> bool {
    std::env::var_os(REQUIRE_SANDBOX).is_some_and(|value| value == "1")
}

/// Gives the test up for `missing`: prints `skipped: …` and returns, after which the caller returns and the test
/// passes; under `TROUPE_REQUIRE_SANDBOX=1` it fails the test instead, naming what is missing.
#[track_caller]
pub fn skip(missing: Missing) {
    if required() {
        panic!("{REQUIRE_SANDBOX}=1, and this test cannot run here: {missing}");
    }
    eprintln!("skipped: {missing} ({REQUIRE_SANDBOX}=1 makes this a failure)");
}

/// Whether this process runs as root; when not, [`skip`] with [`Missing::Root`] says so.
pub fn is_root() -> bool {
    euid() == 0
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}
