//! Helpers shared by troupe's test suites (a dev-dependency only; never part of a shipped binary).
//!
//! - [`wait`]: every wait bounded ([`within`]) and polling for a condition with a deadline ([`eventually`],
//!   [`eventually_some`], [`eventually_blocking`], or [`holds_within`] to word the failure oneself) instead of
//!   sleeping to synchronise.
//! - [`child_daemon`]: the real `troupe serve` as a child process ([`ChildDaemon`]) with its data dir, config,
//!   flags, environment and log capture; killed and reaped on drop, restartable.
//! - [`fake_vendor`]: a fake model vendor over plain HTTP/1.1 ([`FakeServer`]) that answers scripted responses and
//!   records the requests; [`replies`] builds those responses in the real OpenAI and Anthropic wire formats.
//! - [`shared_buffer`]: an in-memory writer shared by its clones ([`SharedBuffer`]), to capture a logger's output.
//! - [`nats`]: real `nats-server` processes with JetStream on loopback, one ([`NatsServer`]) or a cluster
//!   ([`NatsCluster`]), for the cluster's tests.
//!
//! It depends on no workspace crate, so any of them can use it in its tests without a dependency cycle; helpers
//! that speak troupe's protocol (clients, sessions, runs) stay in the suites that have the protocol crate.

// A helper fails the test it serves by panicking, as the test itself would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod child_daemon;
pub mod fake_vendor;
pub mod git;
pub mod nats;
pub mod replies;
pub mod shared_buffer;
pub mod wait;

pub use child_daemon::{ChildDaemon, DaemonLog, ServeCommand, exit_status_within, token_of};
pub use fake_vendor::{FakeResponse, FakeServer, RecordedRequest};
pub use git::git;
pub use nats::{NatsCluster, NatsServer};
pub use shared_buffer::SharedBuffer;
pub use wait::{WAIT, eventually, eventually_blocking, eventually_some, holds_within, holds_within_blocking, within};
