//! The cluster's shared provider connections: what `providers.json` holds, kept once for every node of a cluster so
//! that a provider connected through any node is connected on all of them (runs execute on the node that hosts
//! their session, which may not be the one that answered `provider.connect`). Implemented by the cluster
//! (`cluster/`, on JetStream key-value buckets); a single node has none, and its `providers.json` is all there is.
//!
//! The share holds each provider's latest state (a disconnection is a state too, so that it wins over an older
//! connection everywhere) and the answers recorded under client ids, so that a request redelivered to another node
//! gets the first answer. Every node follows the providers' states and applies them as a local change.

use serde::{Deserialize, Serialize};

use crate::provider_store::{RecordedAnswer, StoredConnection};

/// One provider's state as the cluster shares it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedProvider {
    /// The generation of the latest connect or disconnect, so generations keep increasing on every node.
    pub generation: u64,
    /// `None`: disconnected.
    pub connection: Option<StoredConnection>,
}

/// A change of the shared providers, as a node's follow sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum ShareChange {
    /// `provider_id`'s state, stored at `revision` (revisions order every change of every provider: the later one
    /// wins).
    Provider { provider_id: String, state: Box<SharedProvider>, revision: u64 },
    /// Every provider the share held when the follow began was delivered; what follows is new. (A follow started
    /// again after NATS came back delivers everything and this again.)
    CaughtUp,
}

/// Where `follow` delivers changes; called on the share's own threads, so it must not block.
pub type ShareSink = Box<dyn Fn(ShareChange) + Send + Sync>;

/// The share could not be read or written now (NATS unreachable, JetStream refusing): nothing was stored.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{detail}")]
pub struct ShareUnavailable {
    pub detail: String,
}

/// What [`ProviderShare::store`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum Stored {
    /// The answer was recorded and the provider's state stored at this revision.
    Stored { revision: u64 },
    /// The client id already had an answer (recorded by any node): nothing was stored.
    AlreadyAnswered(RecordedAnswer),
}

/// A change of one provider to store, with the answer it gives under its client id.
#[derive(Clone, Debug)]
pub struct ShareWrite {
    pub client_key: String,
    pub answer: RecordedAnswer,
    pub provider_id: String,
    pub state: SharedProvider,
}

/// The shared providers as the runtime actor uses them.
pub trait ProviderShare: Send + Sync + std::fmt::Debug + 'static {
    /// The answer recorded under a client id by any node, if any.
    fn answer(
        &self,
        client_key: &str,
    ) -> futures::future::BoxFuture<'static, Result<Option<RecordedAnswer>, ShareUnavailable>>;
    /// Records the answer under its client id unless one is recorded already (then returns that one and stores
    /// nothing), then stores the provider's state. Acknowledged once both are stored; on an error, nothing is.
    fn store(&self, write: ShareWrite) -> futures::future::BoxFuture<'static, Result<Stored, ShareUnavailable>>;
    /// Stores `state` as `provider_id`'s unless the share has a state for it already (which then wins): how a node
    /// that ran alone offers its connections. The revision stored, `None` when the share had one.
    fn offer(
        &self,
        provider_id: &str,
        state: SharedProvider,
    ) -> futures::future::BoxFuture<'static, Result<Option<u64>, ShareUnavailable>>;
    /// Feeds `sink` every provider's state, then every later change, until the daemon stops.
    fn follow(&self, sink: ShareSink);
}
