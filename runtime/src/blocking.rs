//! The regression catcher for blocking file I/O on the engine's async threads.
//!
//! Everything in this crate that touches the disk is synchronous, and the engine must run it on blocking threads
//! (`spawn_blocking`, or a writer thread of its own): a `fsync` or a `stat` on a slow disk run on an actor's
//! thread stalls every actor and connection sharing that thread. This crate knows nothing about actors, so it
//! cannot tell such a thread from a blocking one by itself. The engine installs a checker at start that can
//! ([`install_checker`]: "is this thread an actix arbiter?"), and the blocking functions of this crate call
//! [`assert_may_block`] first. In debug builds (tests included) a call on a forbidden thread panics, naming the
//! blocking function (the backtrace shows its caller); in release builds the check compiles to nothing.
//!
//! Startup code that runs before anything is served (reading `config.toml`, the token, `providers.json`) is not
//! checked: only functions that the engine calls while handling requests carry the assertion.

use std::sync::OnceLock;

/// Says whether the current thread must not block (an async executor's thread).
pub type BlockingChecker = fn() -> bool;

static CHECKER: OnceLock<BlockingChecker> = OnceLock::new();

/// Installs the checker consulted by [`assert_may_block`]. The first installation wins: the checker is a
/// property of the process (which threads are async executors), not of one engine, so later engines in the same
/// process (tests start many) install the same function again.
pub fn install_checker(checker: BlockingChecker) {
    let _ = CHECKER.set(checker);
}

/// Whether blocking here is allowed: no checker is installed, or it says this thread may block.
pub fn may_block() -> bool {
    CHECKER.get().is_none_or(|forbidden| !forbidden())
}

/// Panics (in debug builds only) when called on a thread where blocking is forbidden. Call it first thing in a
/// function that blocks on the file system.
#[track_caller]
#[inline]
pub fn assert_may_block() {
    #[cfg(debug_assertions)]
    if !may_block() {
        panic!(
            "blocking file-system call on an async executor thread (an actix arbiter), at {}: run it on a blocking \
             thread (`spawn_blocking`) instead",
            std::panic::Location::caller()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Before any checker is installed, everything may block (the CLI, plain tests, the daemon's startup).
    #[test]
    fn without_a_checker_everything_may_block() {
        // This test binary never installs a checker.
        assert!(may_block());
        assert_may_block();
    }
}
