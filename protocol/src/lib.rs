//! troupe-protocol: everything both ends of the troupe protocol share.
//!
//! - [`types`]: wire types of protocol 20 (params, results, notifications, stored events).
//! - [`methods`]: the one table declaring every method and notification.
//! - [`jsonrpc`], [`error`]: the JSON-RPC 2.0 envelope and error codes.
//! - [`transport`]: frame-level transports (in-process, WebSocket client).
//! - [`server`]: the server session layer ([`server::serve`], [`server::ServerConnection`]).
//! - [`client`]: the shared client with ordered deliveries, replay and gap recovery.
//!
//! This crate knows no actix and no engine: the daemon implements [`server::ServerProtocol`].

pub mod client;
pub mod diagnostic;
pub mod encoded;
pub mod error;
pub mod error_code;
pub mod jsonrpc;
pub mod methods;
pub mod schema;
pub mod server;
pub mod transport;
pub mod types;

#[cfg(test)]
mod allocations;

pub use encoded::Encoded;
pub use error::RpcError;
pub use jsonrpc::{Method, Notification};
pub use methods::{method, notification};
pub use types::runtime::PROTOCOL_VERSION;
