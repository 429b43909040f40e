//! The web console's sign-ins shared by every node ([`troupe_gateway::ConsoleShare`]), in the key-value bucket
//! [`names::CONSOLE_BUCKET`], so a code minted on one node signs a browser in on any node, and a browser stays
//! signed in whichever node a load balancer sends it to.
//!
//! Keys are `<scope>.code.<digest>` and `<scope>.session.<digest>`, the scope being the gateway's digest of the
//! token (nodes started with another token share nothing). Values are what the gateway's book keeps, as JSON: a
//! code's expiry; a session's expiry and the digest of its page key. No value is a credential.
//!
//! A code is redeemed by deleting its key with the revision just read as the expected last one: of two nodes
//! redeeming one code at once, JetStream accepts exactly one delete. A sign-out deletes the session's key; every
//! node follows the bucket's session keys and mirrors them in its book, so it refuses the session as soon as the
//! delete reaches it. Entries past their expiry are ignored when read; the bucket's `max_age` (the longest
//! `[console] session_hours`) removes them, delete markers included.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;
use troupe_gateway::{ConsoleShare, Digest, ShareChange, ShareError, ShareFuture, ShareSink, SharedSession};

use crate::connection::Cluster;
use crate::error::ClusterError;
use crate::kv::{Record, bounded, bucket, entry, follow_keys};
use crate::names;

/// How long a broken follow, or a sign-out the cluster did not take, waits before it is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// A code's value.
#[derive(Serialize, Deserialize)]
struct StoredCode {
    expires_unix: u64,
}

/// A session's value.
#[derive(Serialize, Deserialize)]
struct StoredSession {
    key: String,
    expires_unix: u64,
}

/// The console's bucket, opened once, on the cluster's runtime.
#[derive(Clone, Debug)]
pub struct NatsConsoleShare {
    cluster: Cluster,
    store: Arc<OnceCell<kv::Store>>,
}

impl NatsConsoleShare {
    pub fn new(cluster: Cluster) -> NatsConsoleShare {
        NatsConsoleShare { cluster, store: Arc::default() }
    }

    /// Runs `work` with the bucket on the cluster's runtime, and returns its outcome as the gateway takes it.
    fn run<T, F>(&self, scope: &str, work: impl FnOnce(kv::Store, String) -> F + Send + 'static) -> ShareFuture<T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, ClusterError>> + Send + 'static,
    {
        let (share, scope) = (self.clone(), scope.to_owned());
        let task = self.cluster.handle().spawn(async move {
            if !names::is_subject_token(&scope) {
                return Err(ClusterError::Settings(format!("{scope:?} cannot be a console scope in NATS")));
            }
            let store = share.store().await?;
            work(store, scope).await
        });
        let cluster = self.cluster.clone();
        Box::pin(async move {
            match task.await {
                Ok(outcome) => outcome.map_err(|error| share_error(error, cluster.is_connected())),
                Err(error) => Err(ShareError::Failed(format!("the cluster's console task failed: {error}"))),
            }
        })
    }

    async fn store(&self) -> Result<kv::Store, ClusterError> {
        self.store.get_or_try_init(|| bucket(&self.cluster, names::CONSOLE_BUCKET)).await.cloned()
    }
}

impl ConsoleShare for NatsConsoleShare {
    fn add_code(&self, scope: &str, code: Digest, expires_unix: u64) -> ShareFuture<()> {
        self.run(scope, move |store, scope| async move {
            let value = encode(&StoredCode { expires_unix })?;
            bounded("record a console sign-in code", store.put(code_key(&scope, &code), value)).await.map(drop)
        })
    }

    fn take_code(&self, scope: &str, code: Digest) -> ShareFuture<Option<u64>> {
        self.run(scope, move |store, scope| async move {
            let key = code_key(&scope, &code);
            let Some(record) = entry(&store, &key).await? else { return Ok(None) };
            if record.removed {
                return Ok(None);
            }
            let stored: StoredCode = decode(&record, "a console sign-in code")?;
            // The compare-and-set: only the delete at the revision read is accepted, once, cluster-wide.
            let deleted = tokio::time::timeout(
                crate::connection::REQUEST_TIMEOUT,
                store.delete_expect_revision(&key, Some(record.revision)),
            )
            .await;
            match deleted {
                Ok(Ok(())) => Ok(Some(stored.expires_unix)),
                Ok(Err(error)) if error.kind() == kv::DeleteErrorKind::WrongLastRevision => Ok(None),
                Ok(Err(error)) => {
                    Err(ClusterError::JetStream { what: "use a console sign-in code up", detail: error.to_string() })
                }
                Err(_) => Err(crate::kv::unreachable("use a console sign-in code up")),
            }
        })
    }

    fn add_session(&self, scope: &str, session: Digest, live: SharedSession) -> ShareFuture<()> {
        self.run(scope, move |store, scope| async move {
            let value = encode(&StoredSession { key: live.key.hex(), expires_unix: live.expires_unix })?;
            bounded("record a console sign-in", store.put(session_key(&scope, &session), value)).await.map(drop)
        })
    }

    fn end_session(&self, scope: &str, session: Digest, until_unix: u64) -> ShareFuture<()> {
        self.run(scope, move |store, scope| async move {
            let key = session_key(&scope, &session);
            let first = bounded("record a console sign-out", store.delete(&key)).await;
            if first.is_err() {
                // The browser is signed out here already; the other nodes hear of it once NATS takes the delete.
                tokio::spawn(async move {
                    while crate::kv::now_unix_ms() / 1000 < until_unix {
                        tokio::time::sleep(RETRY).await;
                        match bounded("record a console sign-out", store.delete(&key)).await {
                            Ok(()) => {
                                tracing::info!("a console sign-out reached the cluster");
                                return;
                            }
                            Err(error) => tracing::debug!(%error, "a console sign-out is still not recorded"),
                        }
                    }
                });
            }
            first
        })
    }

    fn session(&self, scope: &str, session: Digest) -> ShareFuture<Option<SharedSession>> {
        self.run(scope, move |store, scope| async move {
            match entry(&store, &session_key(&scope, &session)).await? {
                Some(record) if !record.removed => live_of(&record).map(Some),
                _ => Ok(None),
            }
        })
    }

    fn follow(&self, scope: &str, sink: ShareSink) {
        let (share, scope) = (self.clone(), scope.to_owned());
        self.cluster.handle().spawn(async move {
            if !names::is_subject_token(&scope) {
                tracing::error!(%scope, "the console's scope cannot be a key in NATS; no sign-in is mirrored");
                return;
            }
            let prefix = format!("{scope}.session.");
            // A follow whose feed ended (NATS gone for long) starts again; it begins with every current session,
            // delete markers included, so sign-outs missed meanwhile arrive too.
            loop {
                match share.follow_once(&prefix, &sink).await {
                    Ok(()) => tracing::debug!("the console's follow ended; following again"),
                    Err(error) => tracing::warn!(%error, "cannot follow the cluster's console sign-ins; retrying"),
                }
                tokio::time::sleep(RETRY).await;
            }
        });
    }
}

impl NatsConsoleShare {
    /// Feeds `sink` every session key under `prefix`, then every change, until the feed ends.
    async fn follow_once(&self, prefix: &str, sink: &ShareSink) -> Result<(), ClusterError> {
        let store = self.store().await?;
        let (_, mut records) = follow_keys(&self.cluster, &store, &format!("{prefix}*")).await?;
        while let Some(record) = records.next().await {
            let record = match record {
                Ok((record, _)) => record,
                Err(error) => {
                    tracing::debug!(%error, "the console's follow was interrupted");
                    continue;
                }
            };
            let Some(session) = record.key.strip_prefix(prefix).and_then(Digest::from_hex) else {
                tracing::warn!(key = %record.key, "skipping a console entry whose key is not a session digest");
                continue;
            };
            if record.removed {
                sink(ShareChange::Ended { session });
                continue;
            }
            match live_of(&record) {
                Ok(live) => sink(ShareChange::Started { session, live }),
                Err(error) => tracing::warn!(%error, "skipping an unreadable console session"),
            }
        }
        Ok(())
    }
}

fn code_key(scope: &str, code: &Digest) -> String {
    format!("{scope}.code.{}", code.hex())
}

fn session_key(scope: &str, session: &Digest) -> String {
    format!("{scope}.session.{}", session.hex())
}

fn live_of(record: &Record) -> Result<SharedSession, ClusterError> {
    let stored: StoredSession = decode(record, "a console session")?;
    let key = Digest::from_hex(&stored.key).ok_or_else(|| ClusterError::Corrupt {
        what: "a console session",
        detail: format!("{}: the page key is not a digest", record.key),
    })?;
    Ok(SharedSession { key, expires_unix: stored.expires_unix })
}

fn encode<T: Serialize>(value: &T) -> Result<bytes::Bytes, ClusterError> {
    serde_json::to_vec(value)
        .map(Into::into)
        .map_err(|error| ClusterError::Corrupt { what: "a console entry", detail: error.to_string() })
}

fn decode<T: serde::de::DeserializeOwned>(record: &Record, what: &'static str) -> Result<T, ClusterError> {
    serde_json::from_slice(&record.value)
        .map_err(|error| ClusterError::Corrupt { what, detail: format!("{}: {error}", record.key) })
}

/// The gateway's kind of a cluster failure: unreachable (retry later: no answer in time, or no connection to NATS
/// now, whatever the failed request said), or anything else.
fn share_error(error: ClusterError, connected: bool) -> ShareError {
    match error {
        ClusterError::Unreachable { .. } => ShareError::Unreachable(error.to_string()),
        other if !connected => ShareError::Unreachable(other.to_string()),
        other => ShareError::Failed(other.to_string()),
    }
}
