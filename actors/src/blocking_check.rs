//! Tells the runtime which threads must not block: actix arbiters.
//!
//! Every actor of the engine, and every request the gateway hands to it, runs on an actix arbiter: a
//! single-threaded async executor shared by many actors and connections, so one `fsync` or `stat` there stalls
//! them all. The runtime's blocking file functions call `troupe_runtime::blocking::assert_may_block`, which (in
//! debug builds) consults the checker installed here: a call on an arbiter thread panics with its location. A
//! `spawn_blocking` thread, a writer thread, the CLI and plain tests are not arbiters and may block.

/// True on an actix arbiter thread (including the System's own), where blocking is forbidden.
fn on_arbiter_thread() -> bool {
    actix::Arbiter::try_current().is_some()
}

/// Installs the checker (idempotent). The engine does it at start; tests may call it directly.
pub fn install() {
    troupe_runtime::blocking::install_checker(on_arbiter_thread);
}
