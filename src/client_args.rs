//! The flags every client command shares: where the daemon is and how to authenticate to it.

use std::path::PathBuf;

use crate::commands::Connection;

/// `--url`, `--token`, `--data-dir` and `--ca-cert`, flattened into every client command and into `troupe`
/// itself. They are `global`, so they are taken before the subcommand too (`troupe --url X sessions`): clap hands a
/// value given there down to the subcommand's own copy of the flag.
#[derive(clap::Args, Clone, Debug)]
pub struct ClientArgs {
    /// The daemon's URL: ws://HOST:PORT/ws, wss:// through a TLS proxy, or unix:/PATH for a daemon listening on a
    /// unix socket [default: the data dir's configured `listen`, else ws://127.0.0.1:7419/ws].
    #[arg(long, env = "TROUPE_URL", global = true)]
    pub url: Option<String>,
    /// The bearer token; by default read from the data directory.
    // A base64url token may start with `-` (troupe's own never do, but an older or hand-made one can).
    #[arg(long, env = "TROUPE_TOKEN", hide_env_values = true, global = true, allow_hyphen_values = true)]
    pub token: Option<String>,
    /// The daemon's data directory: its token and its `listen` address are read from there (never created).
    #[arg(long, env = "TROUPE_HOME", global = true)]
    pub data_dir: Option<PathBuf>,
    /// For a wss:// URL: a PEM file of certificate authorities to trust besides the system's (a private CA, or
    /// the self-signed certificate of the proxy in front of the daemon).
    #[arg(long, env = "TROUPE_CA_CERT", value_name = "FILE", global = true)]
    pub ca_cert: Option<PathBuf>,
}

impl ClientArgs {
    pub fn connection(&self) -> Connection {
        Connection {
            url: self.url.clone(),
            token: self.token.clone(),
            data_dir: self.data_dir.clone(),
            ca_cert: self.ca_cert.clone(),
        }
    }
}
