//! The cluster's provider buckets ([`crate::providers`]) as the engine's [`ProviderShare`]: every call runs on the
//! cluster's runtime, and the follow starts again by itself after NATS comes back (from the bucket's whole
//! contents, which the runtime actor skips where it has applied them).

use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use troupe_runtime::provider_share::{
    ProviderShare, ShareChange, ShareSink, ShareUnavailable, ShareWrite, SharedProvider, Stored,
};
use troupe_runtime::provider_store::RecordedAnswer;

use crate::connection::Cluster;
use crate::error::ClusterError;
use crate::providers::{self, StoreOutcome};

/// How long a broken follow waits before it starts again.
const RETRY: Duration = Duration::from_secs(1);

/// This node's access to the cluster's shared provider connections.
#[derive(Debug)]
pub struct NatsProviderShare {
    cluster: Cluster,
}

impl NatsProviderShare {
    pub fn new(cluster: Cluster) -> NatsProviderShare {
        NatsProviderShare { cluster }
    }

    /// Runs `call` on the cluster's runtime (the caller may be an actix arbiter, which has no NATS client).
    fn run<T: Send + 'static>(
        &self,
        call: impl Future<Output = Result<T, ClusterError>> + Send + 'static,
    ) -> BoxFuture<'static, Result<T, ShareUnavailable>> {
        let running = self.cluster.handle().spawn(call);
        Box::pin(async move {
            match running.await {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(error)) => Err(ShareUnavailable { detail: error.to_string() }),
                Err(error) => Err(ShareUnavailable { detail: format!("the NATS call did not finish: {error}") }),
            }
        })
    }
}

impl ProviderShare for NatsProviderShare {
    fn answer(&self, client_key: &str) -> BoxFuture<'static, Result<Option<RecordedAnswer>, ShareUnavailable>> {
        let (cluster, client_key) = (self.cluster.clone(), client_key.to_owned());
        self.run(async move { providers::answer(&cluster, &client_key).await })
    }

    fn store(&self, write: ShareWrite) -> BoxFuture<'static, Result<Stored, ShareUnavailable>> {
        let cluster = self.cluster.clone();
        self.run(async move {
            let outcome =
                providers::store(&cluster, &write.client_key, &write.answer, &write.provider_id, &write.state).await?;
            Ok(match outcome {
                StoreOutcome::Stored { revision } => Stored::Stored { revision },
                StoreOutcome::AlreadyAnswered(recorded) => Stored::AlreadyAnswered(recorded),
            })
        })
    }

    fn offer(
        &self,
        provider_id: &str,
        state: SharedProvider,
    ) -> BoxFuture<'static, Result<Option<u64>, ShareUnavailable>> {
        let (cluster, provider_id) = (self.cluster.clone(), provider_id.to_owned());
        self.run(async move { providers::offer(&cluster, &provider_id, &state).await })
    }

    fn follow(&self, sink: ShareSink) {
        let cluster = self.cluster.clone();
        self.cluster.handle().spawn(async move {
            loop {
                if let Err(error) = follow_once(&cluster, &sink).await {
                    tracing::warn!(%error, "cannot follow the cluster's provider connections; retrying");
                }
                tokio::time::sleep(RETRY).await;
            }
        });
    }
}

/// Feeds `sink` the bucket's contents, [`ShareChange::CaughtUp`], then changes, until the follow breaks.
async fn follow_once(cluster: &Cluster, sink: &ShareSink) -> Result<(), ClusterError> {
    let (pending, mut records) = providers::follow_providers(cluster).await?;
    let mut caught_up = pending == 0;
    if caught_up {
        sink(ShareChange::CaughtUp);
    }
    while let Some(record) = records.next().await {
        let (record, left) = record?;
        if let Some(record) = record {
            sink(ShareChange::Provider {
                provider_id: record.provider_id,
                state: Box::new(record.state),
                revision: record.revision,
            });
        }
        if !caught_up && left == 0 {
            caught_up = true;
            sink(ShareChange::CaughtUp);
        }
    }
    Ok(())
}
