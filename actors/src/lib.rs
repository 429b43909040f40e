//! troupe-actors: the engine as a tree of supervised actix actors.
//!
//! - [`runtime_actor::RuntimeActor`]: the runtime snapshot and `runtime.changed` broadcasts.
//! - [`session_supervisor::SessionSupervisor`]: the session index; starts, restarts and forgets session actors.
//! - [`session_actor::SessionActor`]: one per live session, the single writer of its log; owns the steering lane.
//! - [`approval_actor::ApprovalActor`]: one per root session tree in use: its permission mode and tree grants;
//!   routes answers to approvals. [`approval_trees`] starts it when a tree is used and stops it when idle.
//! - [`presence_actor::PresenceActor`]: which connections follow which session, for `session.presence`.
//! - [`run_registry::RunRegistry`]: the session of each active or recently ended run, bounded.
//! - [`run_actor::RunActor`]: one per active run, the agent loop (model, tools, steering boundaries).
//! - [`engine::Engine`]: implements the protocol's `ServerProtocol` by messaging those actors.
//!
//! Actor messages are plain Rust types and are never serialized; wire types come from `troupe-protocol`, and
//! durable records from `troupe-runtime`.

pub mod approval_actor;
pub mod approval_trees;
pub mod blocking_check;
mod byte_run;
pub mod compaction;
pub mod engine;
pub mod error;
pub mod goal_actor;
pub mod index_view;
mod log_writers;
pub mod plugin_host;
pub mod plugin_tools;
pub mod ports;
pub mod presence_actor;
pub mod producers;
pub mod published_meta;
pub mod published_usage;
pub mod run_actor;
pub mod run_registry;
pub mod run_services;
pub mod run_start;
mod run_workspace;
pub mod runtime_actor;
pub mod session_actor;
pub mod session_router;
pub mod session_supervisor;
#[cfg(test)]
mod test_support;
mod unbounded_mailbox;

#[cfg(feature = "test-hooks")]
pub use engine::test_hooks::EngineSizes;
pub use engine::{ClusterProbe, ConsoleCodeMinter, Engine, EngineConfig};
pub use error::EngineError;
pub use session_actor::{SessionLimits, StoredOutputLimits};
