//! The cluster's provider connections in two key-value buckets: each provider's latest state in
//! [`names::PROVIDER_BUCKET`] under its provider id, and the answers recorded under client ids in
//! [`names::PROVIDER_ANSWER_BUCKET`] (kept as long as a node keeps them in `providers.json`, then expired by
//! JetStream), under the client id in hex: a client id may hold any character, and a key only `[-/_=.a-zA-Z0-9]`
//! with dots separating subject tokens.
//!
//! A change claims its client id first (create, which fails if the id has an answer), then puts the provider's
//! state, so two nodes given the same request store one change and answer both with it. A disconnection is a put of
//! a state without a connection, never a delete: its revision must win over an older connection on every node, and
//! the provider's generation must survive it. The values hold API keys: NATS must be secured (deploy/cluster.md).

use async_nats::jetstream::kv;
use serde::{Serialize, de::DeserializeOwned};
use troupe_runtime::provider_share::SharedProvider;
use troupe_runtime::provider_store::RecordedAnswer;

use crate::connection::Cluster;
use crate::error::ClusterError;
use crate::kv::{Record, bounded, bucket, entry, follow};
use crate::names;

/// What [`store`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum StoreOutcome {
    /// The answer is recorded and the state stored at this revision of the provider bucket.
    Stored { revision: u64 },
    /// The client id had an answer already: nothing was stored.
    AlreadyAnswered(RecordedAnswer),
}

/// The key of a client id's answer: the id's bytes in lowercase hex.
pub fn answer_key(client_key: &str) -> String {
    client_key.bytes().map(|byte| format!("{byte:02x}")).collect()
}

/// The answer recorded under `client_key`, if any.
pub async fn answer(cluster: &Cluster, client_key: &str) -> Result<Option<RecordedAnswer>, ClusterError> {
    let store = bucket(cluster, names::PROVIDER_ANSWER_BUCKET).await?;
    read_answer(&store, client_key).await
}

async fn read_answer(store: &kv::Store, client_key: &str) -> Result<Option<RecordedAnswer>, ClusterError> {
    match entry(store, &answer_key(client_key)).await? {
        Some(record) if !record.removed => decode(&record, "a recorded provider answer").map(Some),
        _ => Ok(None),
    }
}

/// Records `answer` under `client_key` unless an answer is recorded there already (returned then, and nothing is
/// stored), then stores `state` as `provider_id`'s. If the state cannot be stored the claim is withdrawn, so a retry
/// with the same client id is not answered with a change that never happened.
pub async fn store(
    cluster: &Cluster,
    client_key: &str,
    answer: &RecordedAnswer,
    provider_id: &str,
    state: &SharedProvider,
) -> Result<StoreOutcome, ClusterError> {
    let providers = provider_bucket(cluster, provider_id).await?;
    let answers = bucket(cluster, names::PROVIDER_ANSWER_BUCKET).await?;
    let key = answer_key(client_key);
    let recorded = encode(answer, "a recorded provider answer")?;
    crate::kv::connected(cluster, "record a provider answer").await?;
    let claimed = bounded("record a provider answer", async {
        match answers.create(&key, recorded.into()).await {
            Ok(_) => Ok(true),
            Err(error) if error.kind() == kv::CreateErrorKind::AlreadyExists => Ok(false),
            Err(error) => Err(error),
        }
    })
    .await?;
    if !claimed {
        return match read_answer(&answers, client_key).await? {
            Some(recorded) => Ok(StoreOutcome::AlreadyAnswered(recorded)),
            // Claimed and withdrawn (or expired) in between: the caller retries as a new request.
            None => Err(ClusterError::JetStream {
                what: "record a provider answer",
                detail: "the client id's answer changed while it was read; retry".to_owned(),
            }),
        };
    }
    let value = encode(state, "a provider's shared state")?;
    let stored = async {
        crate::kv::connected(cluster, "store a provider's state").await?;
        bounded("store a provider's state", providers.put(provider_id, value.into())).await
    };
    match stored.await {
        Ok(revision) => Ok(StoreOutcome::Stored { revision }),
        Err(error) => {
            if let Err(withdraw) = bounded("withdraw a provider answer", answers.delete(&key)).await {
                tracing::warn!(%withdraw, "a provider answer whose change was not stored could not be withdrawn");
            }
            Err(error)
        }
    }
}

/// Stores `state` as `provider_id`'s unless the bucket has a state for it (which wins). The revision stored, or
/// `None`.
pub async fn offer(cluster: &Cluster, provider_id: &str, state: &SharedProvider) -> Result<Option<u64>, ClusterError> {
    let providers = provider_bucket(cluster, provider_id).await?;
    let value = encode(state, "a provider's shared state")?;
    crate::kv::connected(cluster, "offer a provider's state").await?;
    bounded("offer a provider's state", async {
        match providers.create(provider_id, value.into()).await {
            Ok(revision) => Ok(Some(revision)),
            Err(error) if error.kind() == kv::CreateErrorKind::AlreadyExists => Ok(None),
            Err(error) => Err(error),
        }
    })
    .await
}

/// One provider's state as the bucket delivers it.
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderRecord {
    pub provider_id: String,
    pub state: SharedProvider,
    pub revision: u64,
}

/// The provider bucket's records as [`crate::kv::follow`] streams them, and how many of its current contents are
/// still to come after each.
pub type ProviderFollow = futures::stream::BoxStream<'static, Result<(Option<ProviderRecord>, u64), ClusterError>>;

/// Every provider's state now, then every change. A record that does not read as a provider's state (or names no
/// plain provider id) comes as `None`, logged, with its count of what is left.
pub async fn follow_providers(cluster: &Cluster) -> Result<(u64, ProviderFollow), ClusterError> {
    use futures::StreamExt;
    let store = bucket(cluster, names::PROVIDER_BUCKET).await?;
    let (pending, records) = follow(cluster, &store).await?;
    let records = records.map(|record| {
        record.map(|(record, left)| {
            let parsed = parse_provider(&record)
                .map_err(|error| tracing::warn!(key = %record.key, %error, "skipping a provider's shared state"))
                .ok()
                .flatten();
            (parsed, left)
        })
    });
    Ok((pending, records.boxed()))
}

fn parse_provider(record: &Record) -> Result<Option<ProviderRecord>, ClusterError> {
    if record.removed {
        // Nothing troupe writes: a state is never deleted. Whoever deleted it left the nodes as they are.
        return Ok(None);
    }
    if !names::is_subject_token(&record.key) {
        return Err(ClusterError::Corrupt { what: "a provider id", detail: format!("{:?}", record.key) });
    }
    let state = decode(record, "a provider's shared state")?;
    Ok(Some(ProviderRecord { provider_id: record.key.clone(), state, revision: record.revision }))
}

async fn provider_bucket(cluster: &Cluster, provider_id: &str) -> Result<kv::Store, ClusterError> {
    if !names::is_subject_token(provider_id) {
        return Err(ClusterError::Settings(format!("{provider_id:?} cannot be a provider id in NATS")));
    }
    bucket(cluster, names::PROVIDER_BUCKET).await
}

fn encode(value: &impl Serialize, what: &'static str) -> Result<Vec<u8>, ClusterError> {
    serde_json::to_vec(value).map_err(|error| ClusterError::Corrupt { what, detail: error.to_string() })
}

fn decode<T: DeserializeOwned>(record: &Record, what: &'static str) -> Result<T, ClusterError> {
    serde_json::from_slice(&record.value)
        .map_err(|error| ClusterError::Corrupt { what, detail: format!("{}: {error}", record.key) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_key_is_a_single_plain_token_for_any_client_id() {
        for id in ["c-1", "a.b.c", "with space/and*wild>", "é", ""] {
            let key = answer_key(id);
            assert!(key.chars().all(|c| c.is_ascii_hexdigit()), "{key}");
        }
        assert_ne!(answer_key("ab"), answer_key("a.b"));
        assert_eq!(answer_key("c-1"), "632d31");
    }
}
