//! The regression catcher for blocking file I/O on the engine's async threads, and the pool hot blocking work goes
//! to ([`spawn`]).
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

/// Runs `work` on a thread of the engine's own blocking pool; await the handle for its result. Use it for blocking
/// work on a hot path (a tool call's judging trip, a model request), in place of `tokio::task::spawn_blocking`.
///
/// Why a pool of its own: on an actix arbiter, `spawn_blocking` uses the arbiter's current-thread runtime, and
/// with tokio's `test-util` feature on (`async-nats` turns it on through its `tryhard` dependency, for every
/// build) each completion there also unparks that runtime's driver: one more `eventfd` write, and often one more
/// wake-up of the arbiter's thread, besides the wake of the task that awaits the result. The blocking pool of a
/// multi-thread runtime does not do that. Its one worker thread stays idle: nothing but blocking work is sent here.
pub fn spawn<F, R>(work: F) -> tokio::task::JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    static POOL: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    let pool = POOL.get_or_init(|| {
        let built =
            tokio::runtime::Builder::new_multi_thread().worker_threads(1).thread_name("troupe-blocking").build();
        built
            .inspect_err(|error| {
                tracing::warn!(%error, "could not start the blocking pool; blocking work goes to the caller's runtime")
            })
            .ok()
    });
    match pool {
        Some(pool) => pool.spawn_blocking(work),
        None => tokio::task::spawn_blocking(work),
    }
}

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

    /// The pool runs the work on one of its own threads, from a current-thread runtime as an arbiter is, and a
    /// panic there comes back as the handle's error.
    #[test]
    fn spawned_work_runs_on_the_pool_and_its_panic_is_an_error() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let here = std::thread::current().id();
            let (thread, name) =
                spawn(|| (std::thread::current().id(), std::thread::current().name().map(str::to_owned)))
                    .await
                    .unwrap();
            assert_ne!(thread, here);
            assert_eq!(name.as_deref(), Some("troupe-blocking"));
            let panicked = spawn(|| panic!("a tool's bug")).await;
            assert!(panicked.unwrap_err().is_panic());
        });
    }

    /// Before any checker is installed, everything may block (the CLI, plain tests, the daemon's startup).
    #[test]
    fn without_a_checker_everything_may_block() {
        // This test binary never installs a checker.
        assert!(may_block());
        assert_may_block();
    }
}
