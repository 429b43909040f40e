//! The flags every client command shares: where the daemon is and how to authenticate to it.

use std::path::PathBuf;

use crate::commands::Connection;

/// The help section of the connection flags: every client command has them, under one heading apart from its own.
const CONNECTION: &str = "Connection (every client command)";

/// `--url`, `--token`, `--token-file`, `--data-dir` and `--ca-cert`, flattened into every client command and into `troupe`
/// itself. They are `global`, so they are taken before the subcommand too (`troupe --url X sessions`): clap hands a
/// value given there down to the subcommand's own copy of the flag.
#[derive(clap::Args, Clone, Debug)]
pub struct ClientArgs {
    /// The daemon's URL: ws://HOST:PORT/ws, wss:// through a TLS proxy, or unix:/PATH for a daemon listening on a
    /// unix socket [default: the daemon running on the data dir (its `daemon/url`), else the data dir's configured
    /// `listen`, else ws://127.0.0.1:7419/ws].
    #[arg(long, env = "TROUPE_URL", global = true, help_heading = CONNECTION)]
    pub url: Option<String>,
    /// The bearer token; by default read from the data directory. Prefer TROUPE_TOKEN or --token-file: a value
    /// on the command line can be read by every process of this machine (`ps`, /proc/PID/cmdline).
    // A base64url token may start with `-` (troupe's own never do, but an older or hand-made one can).
    #[arg(long, env = "TROUPE_TOKEN", hide_env_values = true, global = true, allow_hyphen_values = true, help_heading = CONNECTION)]
    pub token: Option<String>,
    /// A file holding the bearer token (e.g. another machine's, saved with mode 0600).
    #[arg(long, env = "TROUPE_TOKEN_FILE", value_name = "FILE", global = true, conflicts_with = "token", help_heading = CONNECTION)]
    pub token_file: Option<PathBuf>,
    /// The daemon's data directory: its token and its `listen` address are read from there (never created).
    #[arg(long, env = "TROUPE_HOME", global = true, help_heading = CONNECTION)]
    pub data_dir: Option<PathBuf>,
    /// For a wss:// URL: a PEM file of certificate authorities to trust besides the system's (a private CA, or
    /// the self-signed certificate of the proxy in front of the daemon).
    #[arg(long, env = "TROUPE_CA_CERT", value_name = "FILE", global = true, help_heading = CONNECTION)]
    pub ca_cert: Option<PathBuf>,
}

impl ClientArgs {
    pub fn connection(&self) -> Connection {
        if let Some(token) = self.token.as_deref().filter(|token| !token.is_empty()) {
            warn_of_token_in_arguments(token);
        }
        Connection {
            url: self.url.clone(),
            token: self.token.clone(),
            token_file: self.token_file.clone(),
            data_dir: self.data_dir.clone(),
            ca_cert: self.ca_cert.clone(),
        }
    }
}

/// Says once, on stderr, that a token given with `--token` is readable by every process of the machine (as
/// `docker login -p` does): a tool of any agent on it reads `/proc/*/cmdline`. A token that `TROUPE_TOKEN` holds
/// came from the environment, which other users' processes cannot read.
fn warn_of_token_in_arguments(token: &str) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    let from_environment = std::env::var(troupe_runtime::token::TOKEN_ENV).is_ok_and(|value| value == token);
    if !from_environment {
        WARNED.call_once(|| {
            eprintln!(
                "warning: --token puts the token on the command line, where every process of this machine can read it \
                 (ps, /proc/PID/cmdline); use --token-file FILE or the TROUPE_TOKEN environment variable instead"
            );
        });
    }
}
