//! troupe-runtime: the parts of the engine that need no actors.
//!
//! - [`data_dir`]: where everything durable lives, and the private directories inside it.
//! - [`config`]: `config.toml`, read once at start.
//! - [`token`]: the bearer token that authenticates every WebSocket upgrade.
//! - [`event_log`]: a session's durable append-only log, `events.jsonl`.
//! - [`meta_cache`]: `meta.json`, a cache of a session's metadata so that listing does not read every log.
//! - [`catalog`]: the built-in providers, models and agents, and selection checks against a snapshot.
//! - [`clock`]: timestamps and identifiers, so that every event is stamped the same way.
//! - [`session_state`]: the projection of a session's events into its metadata.
//!
//! Everything here is synchronous and blocking: the actors call into it from `spawn_blocking` where it touches
//! the disk on a hot path. Errors are [`error::RuntimeError`], whose messages carry paths and operating-system
//! errors but never file contents or secrets.

pub mod catalog;
pub mod clock;
pub mod config;
pub mod data_dir;
pub mod error;
pub mod event_log;
pub mod meta_cache;
pub mod session_state;
pub mod token;

pub use error::RuntimeError;
