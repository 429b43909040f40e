//! `[cluster]`: a troupe cluster on NATS JetStream (`cluster/`, `deploy/cluster.md`). Without `nats`, the daemon is
//! a single node on its file store and nothing here is used.
//!
//! ```toml
//! [cluster]
//! nats = "nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222"  # or `tls://…`; `troupe serve --cluster`
//! node = "build-1"              # this node's name, unique in the cluster; `troupe serve --node` (default: hostname)
//! replicas = 3                  # JetStream replicas of the event stream and the buckets (1 on a single server)
//! credentials = "/etc/troupe/nats.creds"   # a NATS credentials file (JWT + nkey seed), as `nats --creds` takes
//! # or: nkey = "/etc/troupe/nats.nk"  (an nkey seed file); user = "troupe" + password_env = "TROUPE_NATS_PASSWORD";
//! #     token_env = "TROUPE_NATS_TOKEN"
//! tls_ca = "/etc/troupe/nats-ca.pem"       # trust this CA for the servers' certificates (`tls://` URLs)
//! tls_cert = "/etc/troupe/nats-client.pem" # a client certificate, for servers that verify clients
//! tls_key = "/etc/troupe/nats-client.key"
//! lease_ttl_secs = 10           # a dead node's sessions can be taken over this long after its last heartbeat
//! takeover = "at_once"          # take a dead node's sessions over as soon as their leases expire; the default,
//!                               # "on_request", waits for a client's next request for each
//! ```
//!
//! Secrets are never written in `config.toml` itself: a password or token is read from the environment variable
//! named here, so the file can be shared and checked in.

use std::path::PathBuf;

use serde::Deserialize;

/// The shortest lease: heartbeats go out every third of it, and a slower beat would let a live node lose its
/// sessions to a pause of the machine.
pub const MIN_LEASE_TTL_SECS: u64 = 3;
/// The longest lease: a dead node's sessions wait this long for another node.
pub const MAX_LEASE_TTL_SECS: u64 = 300;
/// The longest node name; it is part of NATS subjects and of every `session.list` entry.
pub const MAX_NODE_NAME_CHARS: usize = 64;

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// The NATS servers, comma-separated URLs; `None`: no cluster (the single-node file store).
    pub nats: Option<String>,
    /// This node's name; `None`: the host's name.
    pub node: Option<String>,
    /// Replicas of the event stream and the key-value buckets (1 to 5; the NATS cluster needs at least as many
    /// servers).
    pub replicas: Option<usize>,
    pub credentials: Option<PathBuf>,
    pub nkey: Option<PathBuf>,
    pub user: Option<String>,
    pub password_env: Option<String>,
    pub token_env: Option<String>,
    pub tls_ca: Option<PathBuf>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub lease_ttl_secs: Option<u64>,
    pub takeover: Takeover,
}

/// When a node takes over the sessions of a node that died (whose workspaces it has).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Takeover {
    /// At a client's next request for the session (and its runs that were in flight end `run_interrupted` then).
    #[default]
    OnRequest,
    /// As soon as the session's lease expires, with no request: its interrupted runs are recorded at once, and a
    /// follower on any node sees the session go on.
    AtOnce,
}

impl ClusterConfig {
    /// Whether the daemon runs as a cluster node.
    pub fn enabled(&self) -> bool {
        self.nats.is_some()
    }

    pub fn replicas(&self) -> usize {
        self.replicas.unwrap_or(1)
    }

    pub fn lease_ttl(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.lease_ttl_secs.unwrap_or(10))
    }
}

/// Whether `name` can name a node: 1 to 64 of `A-Z a-z 0-9 - _` (it becomes a NATS subject token).
pub fn validate_node_name(name: &str) -> Result<(), String> {
    let fits = !name.is_empty()
        && name.chars().count() <= MAX_NODE_NAME_CHARS
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if fits {
        Ok(())
    } else {
        Err(format!(
            "cluster.node must be 1 to {MAX_NODE_NAME_CHARS} letters, digits, '-' or '_' (it is part of NATS subjects)"
        ))
    }
}

/// The problems of `[cluster]`, in words.
pub(super) fn validate(config: &ClusterConfig) -> Result<(), String> {
    if let Some(nats) = &config.nats
        && nats.split(',').any(|url| url.trim().is_empty())
    {
        return Err("cluster.nats must be one or more comma-separated NATS URLs (nats://host:4222)".to_owned());
    }
    if let Some(node) = &config.node {
        validate_node_name(node)?;
    }
    if let Some(replicas) = config.replicas
        && !(1..=5).contains(&replicas)
    {
        return Err("cluster.replicas must be between 1 and 5 (JetStream's limit)".to_owned());
    }
    if let Some(ttl) = config.lease_ttl_secs
        && !(MIN_LEASE_TTL_SECS..=MAX_LEASE_TTL_SECS).contains(&ttl)
    {
        return Err(format!("cluster.lease_ttl_secs must be between {MIN_LEASE_TTL_SECS} and {MAX_LEASE_TTL_SECS}"));
    }
    let credentials =
        [config.credentials.is_some(), config.nkey.is_some(), config.user.is_some(), config.token_env.is_some()];
    if credentials.iter().filter(|given| **given).count() > 1 {
        return Err("cluster: give one of credentials, nkey, user (+ password_env) or token_env".to_owned());
    }
    if config.password_env.is_some() && config.user.is_none() {
        return Err("cluster.password_env needs cluster.user".to_owned());
    }
    if config.tls_cert.is_some() != config.tls_key.is_some() {
        return Err("cluster.tls_cert and cluster.tls_key go together".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_cluster_by_default_and_the_keys_are_checked() {
        assert!(!ClusterConfig::default().enabled());
        let parsed: ClusterConfig =
            toml::from_str("nats = \"nats://a:4222,nats://b:4222\"\nnode = \"build-1\"\nreplicas = 3").unwrap();
        assert!(parsed.enabled());
        assert_eq!(parsed.replicas(), 3);
        assert!(validate(&parsed).is_ok());
        assert!(toml::from_str::<ClusterConfig>("nat = \"x\"").is_err());
        assert_eq!(parsed.takeover, Takeover::OnRequest);
        let eager: ClusterConfig = toml::from_str("takeover = \"at_once\"").unwrap();
        assert_eq!(eager.takeover, Takeover::AtOnce);
        assert!(toml::from_str::<ClusterConfig>("takeover = \"eventually\"").is_err());
        assert!(validate(&ClusterConfig { node: Some("a.b".into()), ..parsed.clone() }).is_err());
        assert!(validate(&ClusterConfig { replicas: Some(7), ..parsed.clone() }).is_err());
        assert!(validate(&ClusterConfig { lease_ttl_secs: Some(1), ..parsed.clone() }).is_err());
        assert!(validate(&ClusterConfig { nats: Some("nats://a:4222,".into()), ..parsed.clone() }).is_err());
        let both = ClusterConfig { credentials: Some("/c".into()), token_env: Some("T".into()), ..parsed.clone() };
        assert!(validate(&both).is_err());
        assert!(validate(&ClusterConfig { password_env: Some("P".into()), ..parsed.clone() }).is_err());
        assert!(validate(&ClusterConfig { tls_cert: Some("/c".into()), ..parsed }).is_err());
    }
}
