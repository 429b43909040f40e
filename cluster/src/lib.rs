//! troupe's cluster on NATS JetStream: any node serves any session, and no acknowledged event dies with a node.
//!
//! Without `[cluster]` settings the daemon is one process on its file store, and nothing here runs. With them, each
//! node connects to NATS ([`connection`]) and:
//! - writes each session's events to one JetStream stream, a subject per session, appended with the expected last
//!   subject sequence so that two writers can never both append the same event sequence ([`log`]);
//! - holds a lease per session it hosts, in a key-value bucket, renewed by heartbeat and taken over by another node
//!   once it expires ([`lease`]);
//! - publishes every session's metadata and owner to a directory bucket that every node reads ([`directory`]);
//! - sends a request for a session another node hosts to that node, and answers those sent to it ([`forward`]);
//! - follows a session another node hosts for its own subscribers, from JetStream (`follow.rs`);
//! - publishes the live output of the tools it runs, and hears other nodes' for its own followers ([`live_output`]);
//! - shares who follows which session, so that presence lists are cluster-wide ([`presence`]);
//! - shares the web console's sign-ins with every node through a key-value bucket, for the gateway's book
//!   ([`console_share`]);
//! - shares provider connections (and the answers given under client ids) with every node, in key-value buckets
//!   that every node follows ([`providers`], [`provider_share`]).
//!
//! Everything here talks to NATS on the cluster's own small tokio runtime (the actix arbiters are single-threaded
//! and the log writers are plain threads); the synchronous calls block the calling thread, never an arbiter.

mod error;
pub use error::ClusterError;

pub mod connection;
pub use connection::{Cluster, ClusterSettings};

pub mod names;

pub mod console_share;
pub use console_share::NatsConsoleShare;
pub mod directory;
mod follow;
pub mod forward;
mod kv;
pub mod live_output;
pub use forward::{NatsForwarder, serve_forwarded};
pub use live_output::NatsLiveOutput;
pub mod lease;
pub mod log;
pub mod nodes;
pub mod presence;
pub use presence::NatsPresence;
pub mod provider_share;
pub use provider_share::NatsProviderShare;
pub mod providers;
pub mod replica;
pub use replica::JetStreamReplica;
pub mod session_directory;
pub use session_directory::NatsDirectory;
