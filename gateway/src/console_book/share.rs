//! The port through which the books of a cluster's nodes share sign-ins, so that a browser signs in on any node and
//! stays signed in whichever node its requests reach (a load balancer without sticky sessions in front of them).
//!
//! The gateway only defines it; the daemon gives the book an implementation when the node is in a cluster
//! (`troupe-cluster`'s `console_share.rs`, on a JetStream key-value bucket). What crosses it is what the book keeps
//! anyway: SHA-256 digests of codes, session values and page keys, and when they expire; never a credential.
//!
//! Every call names the book's scope (a digest of the token, see `ConsoleBook::open`), so that nodes started with
//! another token neither see nor accept these sign-ins, and replacing the token signs every browser out.

use futures::future::BoxFuture;
use sha2::Digest as _;

/// A SHA-256 digest: what the book keeps of a code, a session's cookie value or a page key.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest([u8; 32]);

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest(sha2::Sha256::digest(bytes).into())
    }

    /// Lowercase hex, 64 characters: how a digest is written down (a file, a key of a bucket).
    pub fn hex(&self) -> String {
        self.0.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    /// A digest written by [`Digest::hex`]; `None` for anything else.
    pub fn from_hex(text: &str) -> Option<Digest> {
        if text.len() != 64 {
            return None;
        }
        let mut bytes = [0u8; 32];
        for (index, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(text.get(index * 2..index * 2 + 2)?, 16).ok()?;
        }
        Some(Digest(bytes))
    }

    /// Compares in constant time: a page key's digest is checked against what a request offers.
    pub(crate) fn matches(&self, other: &Digest) -> bool {
        subtle::ConstantTimeEq::ct_eq(&self.0[..], &other.0[..]).into()
    }
}

impl std::fmt::Debug for Digest {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "Digest({}…)", &self.hex()[..8])
    }
}

/// A signed-in browser session as the cluster shares it: the digest of its page key and when it ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedSession {
    pub key: Digest,
    /// Seconds since the Unix epoch.
    pub expires_unix: u64,
}

/// A change of the cluster's sessions, as a node's book mirrors them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShareChange {
    /// A browser signed in (on any node); `session` is the digest of its cookie value.
    Started { session: Digest, live: SharedSession },
    /// A browser signed out (on any node).
    Ended { session: Digest },
}

/// Where a follow delivers the changes, from whatever thread the implementation runs on.
pub type ShareSink = std::sync::Arc<dyn Fn(ShareChange) + Send + Sync>;

/// Why the cluster could not do what the book asked.
#[derive(Debug, thiserror::Error)]
pub enum ShareError {
    /// The shared store cannot be reached, or did not answer in time: nothing was recorded.
    #[error("the cluster cannot be reached: {0}")]
    Unreachable(String),
    /// It answered, with a failure.
    #[error("the cluster could not record it: {0}")]
    Failed(String),
}

/// A call to the shared store; it runs wherever the implementation likes (the book only awaits it).
pub type ShareFuture<T> = BoxFuture<'static, Result<T, ShareError>>;

/// The cluster-wide store of one daemon's sign-ins (see the module's documentation).
pub trait ConsoleShare: Send + Sync + std::fmt::Debug {
    /// Records a fresh code, redeemable on any node until `expires_unix`.
    fn add_code(&self, scope: &str, code: Digest, expires_unix: u64) -> ShareFuture<()>;

    /// Takes `code` out of the store, as one compare-and-set: `Some(its expiry)` for the one call, on whichever
    /// node, that removed it; `None` when it is unknown or another call took it first.
    fn take_code(&self, scope: &str, code: Digest) -> ShareFuture<Option<u64>>;

    /// Records a new browser session, keyed by the digest of its cookie value.
    fn add_session(&self, scope: &str, session: Digest, live: SharedSession) -> ShareFuture<()>;

    /// Ends a session on every node. `until_unix`: when it would have expired anyway, so an implementation that
    /// keeps trying after a failure knows when it may stop.
    fn end_session(&self, scope: &str, session: Digest, until_unix: u64) -> ShareFuture<()>;

    /// The session of this cookie digest as the store has it now (`None`: unknown or ended), for a cookie the
    /// book's mirror does not know yet.
    fn session(&self, scope: &str, session: Digest) -> ShareFuture<Option<SharedSession>>;

    /// Delivers every session in the store now, then every change, to `sink`, for as long as the process runs
    /// (an implementation starts again by itself after an outage).
    fn follow(&self, scope: &str, sink: ShareSink);
}
