//! Which addresses `web_fetch` may connect to. The daemon makes the request itself, from the machine it runs on,
//! so a page of the model's choosing could otherwise reach what only this machine reaches: the daemon's own port,
//! another local service, the LAN, a cloud's metadata endpoint (169.254.169.254). Unless `[tools] web_fetch_local`
//! allows them, loopback, private, link-local, shared (CGNAT), unspecified, multicast and broadcast addresses are
//! refused, whatever the mode or the rules say of the host: a name is judged by every address it resolves to
//! (through the client's resolver, so a redirect or a DNS answer that changes between checks is judged too), and an
//! address written in the URL before anything is sent.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Whether `address` is one only this machine or its network reaches (see the module doc).
pub fn is_local(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => is_local_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_local_v4(v4),
            None => is_local_v6(v6),
        },
    }
}

fn is_local_v4(address: Ipv4Addr) -> bool {
    let [first, second, ..] = address.octets();
    address.is_loopback()
        || address.is_private()
        || address.is_link_local()
        || address.is_unspecified()
        || address.is_multicast()
        || address.is_broadcast()
        // 0.0.0.0/8 ("this network") and 100.64.0.0/10 (carrier-grade NAT, shared address space).
        || first == 0
        || (first == 100 && (64..128).contains(&second))
}

fn is_local_v6(address: Ipv6Addr) -> bool {
    let first = address.segments()[0];
    address.is_loopback()
        || address.is_unspecified()
        || address.is_multicast()
        // fc00::/7 unique local, fe80::/10 link-local.
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
}

/// Words for a refused address, naming the setting that allows it.
pub fn refusal(host: &str, address: IpAddr) -> String {
    // A host written as the address itself is not said twice (`127.0.0.1 is 127.0.0.1`).
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let what = if bare.parse::<IpAddr>() == Ok(address) { address.to_string() } else { format!("{host} is {address}") };
    format!(
        "refused: {what}, an address of this machine or its local network; web_fetch reaches only public addresses \
         unless `[tools] web_fetch_local = true` is set in troupe's config.toml"
    )
}

/// Judges `host` (a URL's: a name, an IPv4 address, or an IPv6 address in brackets) by every address it resolves to
/// now: the refusal of the first local one. For requests a proxy makes, whose names the client does not resolve.
pub async fn judge_host(host: &str) -> Result<(), String> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(address) = bare.parse::<IpAddr>() {
        return if is_local(address) { Err(refusal(host, address)) } else { Ok(()) };
    }
    let resolved = tokio::net::lookup_host((bare, 0))
        .await
        .map_err(|error| format!("refused: {host} could not be resolved to judge its address ({error})"))?;
    for address in resolved {
        if is_local(address.ip()) {
            return Err(refusal(host, address.ip()));
        }
    }
    Ok(())
}

/// The client's resolver: the system's, with every local address of a name refused (see the module doc).
pub struct PublicOnly;

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some(local) = resolved.iter().find(|address| is_local(address.ip())) {
                return Err(refusal(&host, local.ip()).into());
            }
            let addresses: Addrs = Box::new(resolved.into_iter());
            Ok(addresses)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_and_public_addresses() {
        for local in [
            "127.0.0.1",
            "127.8.9.10",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            assert!(is_local(local.parse().expect("address")), "{local} is local");
        }
        for public in ["1.1.1.1", "93.184.216.34", "100.128.0.1", "172.32.0.1", "2606:4700::1111", "::ffff:8.8.8.8"] {
            assert!(!is_local(public.parse().expect("address")), "{public} is public");
        }
    }
}
