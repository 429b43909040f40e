//! TLS for `wss://`: which certificate authorities the client trusts, and what a failed handshake means in words.
//!
//! rustls with the ring provider, the same stack reqwest uses for the model providers, so the binary carries one
//! crypto library. Trusted: the Mozilla roots compiled in (webpki-roots), the system's roots (`/etc/ssl/certs`,
//! `SSL_CERT_FILE`, `SSL_CERT_DIR`; read once per process) and, when given, one more PEM file of certificate
//! authorities: a private CA or the self-signed certificate of a proxy in front of the daemon (the CLI's
//! `--ca-cert FILE` / `TROUPE_CA_CERT`), which is also accepted as the server's own certificate when that is a
//! self-signed one made with `CA:TRUE` (`pinned`).

use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::{CertificateError, ClientConfig, RootCertStore};

use crate::transport::TransportError;

/// The CA file's certificates accepted as the server's self-signed leaf.
mod pinned;

/// The hint every "not trusted" error ends with: the one way to trust a private certificate.
const CA_CERT_HINT: &str = "to trust a private or self-signed certificate, give its CA as a PEM file \
                            (troupe CLI: --ca-cert FILE or TROUPE_CA_CERT; shared client: ClientOptions::ca_cert)";

/// The client configuration for one connection: the built-in and system roots plus the certificates in `ca_cert`.
pub(super) fn client_config(ca_cert: Option<&Path>) -> Result<Arc<ClientConfig>, TransportError> {
    let mut roots = RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    // A system certificate rustls cannot parse is skipped rather than failing every connection.
    let (_added, _ignored) = roots.add_parsable_certificates(system_roots().iter().cloned());
    let mut pinned = Vec::new();
    if let Some(path) = ca_cert {
        for certificate in read_ca_file(path)? {
            roots.add(certificate.clone()).map_err(|error| {
                TransportError::new(format!(
                    "the CA certificate file {} holds an unusable certificate: {error}",
                    path.display()
                ))
            })?;
            pinned.push(certificate);
        }
    }
    let setup_error = |error: &dyn std::fmt::Display| TransportError::new(format!("cannot set up TLS: {error}"));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|error| setup_error(&error))?;
    if pinned.is_empty() {
        return Ok(Arc::new(builder.with_root_certificates(roots).with_no_client_auth()));
    }
    // The CA file's certificates may also be the server's own self-signed leaf (`pinned.rs`).
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|error| setup_error(&error))?;
    let verifier = Arc::new(pinned::PinnedOrWebPki::new(webpki, pinned));
    Ok(Arc::new(builder.dangerous().with_custom_certificate_verifier(verifier).with_no_client_auth()))
}

/// The system's trusted roots, loaded on first use. Missing or unreadable stores leave it empty (the built-in
/// roots still apply), which is logged at debug level only: most machines connect to a loopback `ws://`.
fn system_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let loaded = rustls_native_certs::load_native_certs();
        for error in &loaded.errors {
            tracing::debug!(%error, "skipped part of the system's certificate store");
        }
        loaded.certs
    })
}

/// Every certificate in a PEM file; a file with none is an error, since it would silently trust nothing more.
fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, TransportError> {
    let bytes = std::fs::read(path).map_err(|error| {
        TransportError::new(format!("cannot read the CA certificate file {}: {error}", path.display()))
    })?;
    let certificates = CertificateDer::pem_slice_iter(&bytes).collect::<Result<Vec<_>, _>>().map_err(|error| {
        TransportError::new(format!("the CA certificate file {} is not PEM: {error}", path.display()))
    })?;
    if certificates.is_empty() {
        return Err(TransportError::new(format!(
            "the CA certificate file {} holds no certificate (expected PEM: -----BEGIN CERTIFICATE-----)",
            path.display()
        )));
    }
    Ok(certificates)
}

/// The rustls error inside an I/O error of the TLS handshake, if that is what it is.
pub(super) fn handshake_error(error: &std::io::Error) -> Option<&rustls::Error> {
    error.get_ref()?.downcast_ref::<rustls::Error>()
}

/// A failed TLS handshake with `address`, in words: an untrusted certificate names the way to trust one, a
/// certificate for another name says which names it has.
pub(super) fn describe_handshake_error(address: &str, error: &rustls::Error) -> String {
    let prefix = format!("the TLS handshake with {address} failed");
    match error {
        rustls::Error::InvalidCertificate(problem) => match problem {
            CertificateError::UnknownIssuer | CertificateError::BadSignature => format!(
                "{prefix}: its certificate is not trusted (signed by an unknown authority, or self-signed); \
                 {CA_CERT_HINT}"
            ),
            CertificateError::NotValidForName => {
                format!("{prefix}: its certificate is not valid for the host name in the URL")
            }
            CertificateError::NotValidForNameContext { expected, presented } => {
                // The names are the server's, written by rustls-webpki as they are (not escaped): no controls.
                let names: Vec<PresentedName> = presented
                    .iter()
                    .map(|raw| PresentedName::parse(&crate::diagnostic::strip_terminal_controls(raw)))
                    .collect();
                format!("{prefix}: {}", describe_name_mismatch(&expected.to_str(), &names))
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                format!("{prefix}: its certificate has expired; renew it (or check this machine's clock)")
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                format!("{prefix}: its certificate is not valid yet; check the clocks of both machines")
            }
            other => format!("{prefix}: its certificate is not acceptable: {other}"),
        },
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
            format!("{prefix}: the server did not answer in TLS ({error}); is it a plain daemon? use ws:// for that")
        }
        other => format!("{prefix}: {other}"),
    }
}

/// One subjectAltName of the server's certificate. rustls-webpki reports them as debug text (`DnsName("x")`,
/// `IpAddress(1.2.3.4)`), which is parsed back here so a person reads the names as they would write them.
#[derive(Clone, Debug, PartialEq, Eq)]
enum PresentedName {
    Dns(String),
    Ip(String),
    /// A kind that never matches a host (a URI, a directory name), kept as rustls-webpki wrote it.
    Other(String),
}

impl PresentedName {
    fn parse(raw: &str) -> PresentedName {
        let inner = |prefix: &str| raw.strip_prefix(prefix).and_then(|rest| rest.strip_suffix(')'));
        if let Some(name) = inner("DnsName(").and_then(|quoted| quoted.strip_prefix('"')?.strip_suffix('"')) {
            PresentedName::Dns(name.to_owned())
        } else if let Some(address) = inner("IpAddress(") {
            PresentedName::Ip(address.to_owned())
        } else if let Some(uri) =
            inner("UniformResourceIdentifier(").and_then(|q| q.strip_prefix('"')?.strip_suffix('"'))
        {
            PresentedName::Other(format!("URI:{uri}"))
        } else {
            PresentedName::Other(raw.to_owned())
        }
    }

    /// The name as written in a certificate request: `DNS:x`/`IP:x` when `kinds` (the kinds differ from what the
    /// URL needs, so the kind is the point), else bare.
    fn written(&self, kinds: bool) -> String {
        match (self, kinds) {
            (PresentedName::Dns(name), true) => format!("DNS:{name}"),
            (PresentedName::Ip(address), true) => format!("IP:{address}"),
            (PresentedName::Dns(name) | PresentedName::Ip(name) | PresentedName::Other(name), _) => name.clone(),
        }
    }
}

/// Why a certificate does not fit the URL's host `expected`, and what fixes it. A host that is an IP address is
/// only ever matched by an IP subjectAltName: a DNS name spelled `127.0.0.1` does not count, which is the
/// mistake worth naming.
fn describe_name_mismatch(expected: &str, names: &[PresentedName]) -> String {
    let wants_ip = expected.parse::<std::net::IpAddr>().is_ok();
    let (kind, san) = if wants_ip { ("IP", format!("IP:{expected}")) } else { ("DNS", format!("DNS:{expected}")) };
    let head = format!("its certificate is not valid for {expected}");
    if names.is_empty() {
        return format!(
            "{head}: it has no subjectAltName (the Common Name is not used); the certificate needs \
             subjectAltName={san}"
        );
    }
    let same_kind = |name: &PresentedName| {
        matches!((name, wants_ip), (PresentedName::Ip(_), true) | (PresentedName::Dns(_), false))
    };
    let mixed = !names.iter().all(same_kind);
    let listed: Vec<String> = names.iter().map(|name| name.written(mixed)).collect();
    let listed = listed.join(", ");
    // Other names of the kind the URL can use: the URL could name one of them instead.
    let usable: Vec<String> = names
        .iter()
        .filter_map(|name| match name {
            PresentedName::Dns(name) if name.parse::<std::net::IpAddr>().is_err() && !name.starts_with('*') => {
                Some(name.clone())
            }
            PresentedName::Ip(address) => Some(address.clone()),
            _ => None,
        })
        .collect();
    if wants_ip && !names.iter().any(|name| matches!(name, PresentedName::Ip(_))) {
        let instead = if usable.is_empty() {
            String::new()
        } else {
            format!(", or use a URL with one of its names ({})", usable.join(", "))
        };
        return format!(
            "{head} (it names {listed}, and a DNS name never matches an IP address): a URL with an IP address needs \
             the certificate to have an IP subjectAltName (subjectAltName={san}){instead}"
        );
    }
    let instead = if usable.is_empty() { String::new() } else { "use a URL with one of those names, or ".to_owned() };
    format!("{head} (it names {listed}); {instead}give it a certificate with a {kind} subjectAltName {san}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_empty_ca_file_is_an_error_naming_it() {
        let error = client_config(Some(Path::new("/nonexistent/ca.pem"))).unwrap_err();
        assert!(error.0.contains("/nonexistent/ca.pem"), "{error}");

        let dir = std::env::temp_dir().join(format!("troupe-tls-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let error = client_config(Some(&empty)).unwrap_err();
        assert!(error.0.contains("holds no certificate"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unknown_issuer_names_the_ca_cert_option() {
        let said = describe_handshake_error(
            "example.test:443",
            &rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
        );
        assert!(said.contains("not trusted"), "{said}");
        assert!(said.contains("--ca-cert"), "{said}");
    }

    #[test]
    fn a_name_mismatch_lists_the_presented_names() {
        let expected = rustls::pki_types::ServerName::try_from("wrong.test").unwrap().to_owned();
        let said = describe_handshake_error(
            "wrong.test:443",
            &rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
                expected,
                presented: vec!["DnsName(\"localhost\")".to_owned()],
            }),
        );
        assert!(said.contains("not valid for wrong.test (it names localhost); use a URL with one"), "{said}");
        assert!(said.contains("DNS:wrong.test"), "{said}");
        assert!(!said.contains("DnsName"), "{said}");
    }

    /// The names exactly as rustls-webpki reports them.
    fn mismatch(expected: &str, presented: &[&str]) -> String {
        let expected = rustls::pki_types::ServerName::try_from(expected).unwrap().to_owned();
        describe_handshake_error(
            "host:443",
            &rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
                expected,
                presented: presented.iter().map(|name| (*name).to_owned()).collect(),
            }),
        )
    }

    #[test]
    fn an_ip_url_against_dns_names_asks_for_an_ip_subject_alt_name() {
        // The tryout's certificate: `DNS:127.0.0.1`, which looks right and never matches.
        let said = mismatch("127.0.0.1", &["DnsName(\"127.0.0.1\")"]);
        assert!(said.contains("not valid for 127.0.0.1 (it names DNS:127.0.0.1, and a DNS name never"), "{said}");
        assert!(said.contains("subjectAltName=IP:127.0.0.1"), "{said}");
        assert!(!said.contains("DnsName") && !said.contains("one of its names"), "{said}");
        let said = mismatch("127.0.0.1", &["DnsName(\"localhost\")", "DnsName(\"*.example.com\")"]);
        assert!(said.contains("it names DNS:localhost, DNS:*.example.com"), "{said}");
        assert!(
            said.contains("subjectAltName=IP:127.0.0.1), or use a URL with one of its names (localhost)"),
            "{said}"
        );
        let said = mismatch("::1", &["DnsName(\"localhost\")"]);
        assert!(said.contains("subjectAltName=IP:::1"), "{said}");
    }

    #[test]
    fn other_name_mismatches_read_as_written() {
        let said = mismatch("10.0.0.2", &["IpAddress(10.0.0.1)", "IpAddress(::1)"]);
        assert!(said.contains("not valid for 10.0.0.2 (it names 10.0.0.1, ::1); use a URL"), "{said}");
        assert!(said.contains("IP subjectAltName IP:10.0.0.2"), "{said}");
        let said = mismatch("troupe.test", &["IpAddress(10.0.0.1)", "DnsName(\"other.test\")"]);
        assert!(said.contains("it names IP:10.0.0.1, DNS:other.test"), "{said}");
        let said = mismatch("troupe.test", &[]);
        assert!(said.contains("no subjectAltName") && said.contains("subjectAltName=DNS:troupe.test"), "{said}");
        let said = mismatch("troupe.test", &["UniformResourceIdentifier(\"spiffe://x\")", "DirectoryName"]);
        assert!(said.contains("it names URI:spiffe://x, DirectoryName); give it"), "{said}");
        // rustls-webpki writes a certificate's names unescaped: a server's escape sequences never get through.
        let said = mismatch("troupe.test", &["DnsName(\"evil\u{1b}[2J\u{202e}.test\")"]);
        assert!(said.contains("it names evil.test)"), "{said}");
    }
}
