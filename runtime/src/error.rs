//! The one error type of the runtime crate.
//!
//! Messages name paths, operations and positions, and carry the operating system's error, because that is what
//! an operator needs to fix a problem. They never carry the contents of a file (an event line may hold user text
//! or tool output, a token file holds a secret) nor the value of an environment variable. Callers turn these
//! errors into JSON-RPC errors in exactly one place, so the variants stay about causes rather than wire codes.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong in the runtime crate.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A file-system operation failed. `operation` is a short verb phrase such as "create directory".
    #[error("could not {operation} {}: {source}", path.display())]
    Io {
        operation: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// Neither `--data-dir`, `TROUPE_HOME` nor `HOME` says where the data directory is.
    #[error("cannot locate the data directory: HOME is not set; pass --data-dir or set TROUPE_HOME")]
    HomeNotSet,

    /// A relative data directory could not be made absolute.
    #[error("could not make the data directory {} absolute: {source}", path.display())]
    AbsolutePath {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// `config.toml` is not valid TOML or does not match the expected shape. `message` is the parser's own
    /// description (it names the offending key for unknown keys); the source text is not included.
    #[error("invalid configuration in {} at line {line}, column {column}: {message}", path.display())]
    ConfigSyntax { path: PathBuf, line: usize, column: usize, message: String },

    /// `config.toml` parsed but a value is out of range.
    #[error("invalid configuration in {}: {detail}", path.display())]
    ConfigInvalid { path: PathBuf, detail: String },

    /// The token file exists but holds nothing but whitespace.
    #[error("the token file {} is empty; delete it to have a new token created", path.display())]
    TokenEmpty { path: PathBuf },

    /// A token (from the file or from `TROUPE_TOKEN`) holds characters that cannot travel in an HTTP header or
    /// a WebSocket subprotocol name. `source_name` says where it came from, never what it is.
    #[error("the token from {source_name} must be printable ASCII without spaces")]
    TokenInvalid { source_name: String },

    /// The operating system's random number generator failed.
    #[error("could not obtain random bytes for a new token: {0}")]
    Random(getrandom::Error),

    /// There is no session log at this path.
    #[error("no session log in {}", session_dir.display())]
    SessionNotFound { session_dir: PathBuf },

    /// The cluster's replica of the session logs refused or failed (`event_log::replica`).
    #[error("{0}")]
    Replica(crate::event_log::ReplicaError),

    /// A session directory was to be created but already exists.
    #[error("the session directory {} already exists", session_dir.display())]
    SessionAlreadyExists { session_dir: PathBuf },

    /// An event handed to the log is not one line of JSON; writing it would corrupt the line format. This is a
    /// bug in the caller, and nothing of the batch was written.
    #[error("event {index} of the batch for {} contains a newline and cannot be stored as one log line", path.display())]
    EventNotOneLine { path: PathBuf, index: usize },

    /// An earlier write or fsync of this log failed, so what is on disk is unknown. The writer refuses everything
    /// until the session is reloaded from disk.
    #[error("the event log {} is unusable after an earlier I/O error; the session must be reloaded", path.display())]
    LogPoisoned { path: PathBuf },
    /// Another writer still holds the log: an earlier instance of the session finishing its last write (or another
    /// process writing the same data directory).
    #[error(
        "the event log {} is still held by another writer (an earlier instance of the session finishing a write, or \
         another process using this data directory); try again",
        path.display()
    )]
    LogInUse { path: PathBuf },
}

impl RuntimeError {
    /// Builds [`RuntimeError::Io`]; a function rather than a closure at every call site keeps them short.
    pub(crate) fn io(operation: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        RuntimeError::Io { operation, path: path.into(), source }
    }
}
