//! TLS for `wss://`: which certificate authorities the client trusts, and what a failed handshake means in words.
//!
//! rustls with the ring provider, the same stack reqwest uses for the model providers, so the binary carries one
//! crypto library. Trusted: the Mozilla roots compiled in (webpki-roots), the system's roots (`/etc/ssl/certs`,
//! `SSL_CERT_FILE`, `SSL_CERT_DIR`; read once per process) and, when given, one more PEM file of certificate
//! authorities: a private CA or the self-signed certificate of a proxy in front of the daemon (the CLI's
//! `--ca-cert FILE` / `TROUPE_CA_CERT`).

use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::{CertificateError, ClientConfig, RootCertStore};

use crate::transport::TransportError;

/// The hint every "not trusted" error ends with: the one way to trust a private certificate.
const CA_CERT_HINT: &str = "to trust a private or self-signed certificate, give its CA as a PEM file \
                            (troupe CLI: --ca-cert FILE or TROUPE_CA_CERT; shared client: ClientOptions::ca_cert)";

/// The client configuration for one connection: the built-in and system roots plus the certificates in `ca_cert`.
pub(super) fn client_config(ca_cert: Option<&Path>) -> Result<Arc<ClientConfig>, TransportError> {
    let mut roots = RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    // A system certificate rustls cannot parse is skipped rather than failing every connection.
    let (_added, _ignored) = roots.add_parsable_certificates(system_roots().iter().cloned());
    if let Some(path) = ca_cert {
        for certificate in read_ca_file(path)? {
            roots.add(certificate).map_err(|error| {
                TransportError(format!(
                    "the CA certificate file {} holds an unusable certificate: {error}",
                    path.display()
                ))
            })?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| TransportError(format!("cannot set up TLS: {error}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
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
    let bytes = std::fs::read(path)
        .map_err(|error| TransportError(format!("cannot read the CA certificate file {}: {error}", path.display())))?;
    let certificates = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| TransportError(format!("the CA certificate file {} is not PEM: {error}", path.display())))?;
    if certificates.is_empty() {
        return Err(TransportError(format!(
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
            CertificateError::NotValidForNameContext { expected, presented } => format!(
                "{prefix}: its certificate is not valid for `{}` (it names {}); use a URL with one of those \
                 names",
                expected.to_str(),
                if presented.is_empty() { "no host at all".to_owned() } else { presented.join(", ") }
            ),
            other => format!("{prefix}: its certificate is not acceptable: {other:?}"),
        },
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
            format!("{prefix}: the server did not answer in TLS ({error}); is it a plain daemon? use ws:// for that")
        }
        other => format!("{prefix}: {other}"),
    }
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
        assert!(said.contains("not valid for `wrong.test`"), "{said}");
        assert!(said.contains("localhost"), "{said}");
    }
}
