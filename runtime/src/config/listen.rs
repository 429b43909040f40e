//! Where the daemon listens: a TCP address, or a unix socket for a reverse proxy on the same host.
//!
//! Written the same way everywhere (`config.toml`'s `listen`, `troupe serve --listen`, client URLs):
//! `127.0.0.1:7419`, `[::1]:7419`, or `unix:/run/troupe/troupe.sock`. A unix socket path must be absolute, so
//! the daemon and its clients (which may start in other directories) name the same file.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

/// The prefix that marks a unix socket path.
pub const UNIX_PREFIX: &str = "unix:";

/// A listen address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    /// A TCP address; port 0 picks a free port.
    Tcp(SocketAddr),
    /// An absolute path where the daemon creates its socket (mode 0660).
    Unix(PathBuf),
}

impl Listen {
    /// The TCP address, when this is one.
    pub fn tcp(&self) -> Option<SocketAddr> {
        match self {
            Listen::Tcp(address) => Some(*address),
            Listen::Unix(_) => None,
        }
    }
}

impl From<SocketAddr> for Listen {
    fn from(address: SocketAddr) -> Self {
        Listen::Tcp(address)
    }
}

impl fmt::Display for Listen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Listen::Tcp(address) => write!(f, "{address}"),
            Listen::Unix(path) => write!(f, "{UNIX_PREFIX}{}", path.display()),
        }
    }
}

impl FromStr for Listen {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if let Some(path) = text.strip_prefix(UNIX_PREFIX) {
            let path = PathBuf::from(path);
            if !path.is_absolute() {
                return Err("a unix socket must be an absolute path, as in `unix:/run/troupe/troupe.sock`".to_owned());
            }
            return Ok(Listen::Unix(path));
        }
        text.parse::<SocketAddr>().map(Listen::Tcp).map_err(|_| {
            "not a listen address: use `host:port` with an IP address (`127.0.0.1:7419`, `[::1]:7419`) or \
             `unix:/absolute/path`"
                .to_owned()
        })
    }
}

impl<'de> serde::Deserialize<'de> for Listen {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_and_unix_forms_parse_and_print_back() {
        for text in ["127.0.0.1:7419", "[::1]:0", "unix:/run/troupe/troupe.sock"] {
            assert_eq!(text.parse::<Listen>().unwrap().to_string(), text);
        }
        assert_eq!("unix:/tmp/t.sock".parse::<Listen>().unwrap(), Listen::Unix(PathBuf::from("/tmp/t.sock")));
    }

    #[test]
    fn relative_sockets_and_host_names_are_refused() {
        assert!("unix:troupe.sock".parse::<Listen>().unwrap_err().contains("absolute"));
        assert!("unix:".parse::<Listen>().is_err());
        assert!("localhost:7419".parse::<Listen>().is_err());
    }
}
