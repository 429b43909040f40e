//! In a cluster, a request for a session another node hosts is refused here with `session_hosted_elsewhere`; the
//! JSON-RPC layer sends it on to that node through the forwarder installed here (troupe-protocol's
//! `server::forward`), so that every method works for every session from every node. A single node installs none
//! and answers the refusal itself (it never makes one).

use std::sync::Arc;

use troupe_protocol::server::RequestForwarder;

use super::Engine;

impl Engine {
    /// Sends requests for sessions other nodes host to them (the daemon installs the cluster's, once it has
    /// joined). The first call wins.
    pub fn set_forwarder(&self, forwarder: Arc<dyn RequestForwarder>) {
        let _ = self.forwarder.set(forwarder);
    }
}
