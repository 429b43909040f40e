//! The `troupe` binary's command line: its definition (`command.rs`), running it (`dispatch.rs`) and the daemon
//! in the foreground (`serve.rs`). The commands themselves live in the library (`troupe::…`), so tests run
//! exactly what the binary runs.

pub(crate) mod command;
pub(crate) mod dispatch;
mod serve;
