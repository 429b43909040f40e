//! `<data dir>/daemon/url`: where the daemon running on a data dir listens, so that its clients reach a daemon
//! started with `--listen` or on port 0. The daemon records it once it listens (mode 0600, through a temporary
//! file and a rename, so a client never reads half of it) and removes it at a clean stop and when it takes the
//! lock (a killed daemon's record would otherwise look current until the new one is written). Clients trust it
//! only while a daemon holds the data dir's lock. Writing, reading and trusting it all happen here.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use troupe_runtime::config::Listen;
use troupe_runtime::data_dir::{DataDir, Durability};

use crate::config_check_cmd::{LocalDaemon, local_daemon};

/// The URL a client on this machine uses to reach a daemon listening at `listen`: `ws://HOST:PORT/ws` (a
/// wildcard address reached on loopback), or `unix:/path` for a unix socket, which the shared client dials.
pub fn client_url(listen: &Listen) -> String {
    match listen {
        Listen::Tcp(address) => {
            let mut address = *address;
            if address.ip().is_unspecified() {
                let loopback: IpAddr =
                    if address.is_ipv4() { Ipv4Addr::LOCALHOST.into() } else { Ipv6Addr::LOCALHOST.into() };
                address.set_ip(loopback);
            }
            format!("ws://{address}/ws")
        }
        Listen::Unix(_) => listen.to_string(),
    }
}

/// The HTTP(S) base a browser reaches the daemon at, from a client URL: `ws://host:port/ws` → `http://host:port/`,
/// `wss://host/agent/ws` → `https://host/agent/` (a proxy's path prefix kept). `None` for a unix socket or a URL
/// that does not end in `/ws`.
pub fn http_base(client_url: &str) -> Option<String> {
    let (scheme, rest) = client_url.split_once("://")?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "ws" | "http" => "http",
        "wss" | "https" => "https",
        _ => return None,
    };
    let rest = rest.split(['?', '#']).next()?;
    let prefix = rest.strip_suffix("/ws").or_else(|| rest.strip_suffix("/ws/"))?;
    Some(format!("{scheme}://{prefix}/"))
}

/// Records that the daemon of `data_dir` listens at `listen` (its [`client_url`]), replacing the file whole.
pub fn record(data_dir: &DataDir, listen: &Listen) -> Result<(), troupe_runtime::error::RuntimeError> {
    let contents = format!("{}\n", client_url(listen));
    troupe_runtime::data_dir::replace_file(&data_dir.url_path(), contents.as_bytes(), Durability::Durable)
}

/// Removes the record (a missing one is fine).
pub fn forget(data_dir: &DataDir) {
    let path = data_dir.url_path();
    if let Err(error) = std::fs::remove_file(&path)
        && error.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), %error, "could not remove the daemon's URL file");
    }
}

/// The URL the daemon running on `data_dir` recorded; `None` when no daemon runs there (a file a killed daemon
/// left is stale) or it recorded none. When whether one runs cannot be told, the file is trusted.
pub fn recorded(data_dir: &DataDir) -> Option<String> {
    let url = std::fs::read_to_string(data_dir.url_path()).ok()?;
    let url = url.trim();
    if url.is_empty() || local_daemon(data_dir) == LocalDaemon::NotRunning {
        return None;
    }
    Some(url.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_http_base_keeps_the_proxy_prefix() {
        assert_eq!(http_base("ws://127.0.0.1:7419/ws").as_deref(), Some("http://127.0.0.1:7419/"));
        assert_eq!(
            http_base("wss://troupe.example.com/agent/ws").as_deref(),
            Some("https://troupe.example.com/agent/")
        );
        assert_eq!(http_base("unix:/run/troupe.sock"), None);
        assert_eq!(http_base("ws://host/other"), None);
    }

    #[test]
    fn wildcard_addresses_are_reached_on_loopback_and_sockets_by_path() {
        let url = |text: &str| client_url(&text.parse::<Listen>().unwrap());
        assert_eq!(url("0.0.0.0:7419"), "ws://127.0.0.1:7419/ws");
        assert_eq!(url("[::]:7419"), "ws://[::1]:7419/ws");
        assert_eq!(url("10.0.0.5:9"), "ws://10.0.0.5:9/ws");
        assert_eq!(url("unix:/run/troupe/troupe.sock"), "unix:/run/troupe/troupe.sock");
    }
}
