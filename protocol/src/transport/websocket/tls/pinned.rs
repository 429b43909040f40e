//! Trusting a self-signed server certificate given as a "CA".
//!
//! The common recipe (`openssl req -x509 … -subj /CN=host -addext subjectAltName=…`, as deploy/README gives it)
//! makes a certificate with `CA:TRUE`. Given as `--ca-cert`, it is a trust anchor, but when the server presents
//! that same certificate as its leaf webpki refuses it (`CaUsedAsEndEntity`): a CA must not be an end entity. The
//! user's intent is plain, so a leaf byte-equal to a certificate of the CA file is accepted, pinned: the normal
//! verification still runs first and must fail only for that reason (webpki checks the validity dates before
//! the basic constraints, so an expired or not yet valid certificate still fails as such), and the server name is
//! still checked. Everything else goes through the normal WebPki verifier unchanged.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, DigitallySignedStruct, Error, SignatureScheme};

/// The WebPki verifier, and the certificates of the CA file, which it also accepts as the server's own leaf.
#[derive(Debug)]
pub(super) struct PinnedOrWebPki {
    webpki: Arc<WebPkiServerVerifier>,
    pinned: Vec<CertificateDer<'static>>,
}

impl PinnedOrWebPki {
    pub(super) fn new(webpki: Arc<WebPkiServerVerifier>, pinned: Vec<CertificateDer<'static>>) -> Self {
        PinnedOrWebPki { webpki, pinned }
    }
}

/// Whether webpki refused the leaf only for being a CA.
fn is_ca_used_as_end_entity(error: &Error) -> bool {
    match error {
        Error::InvalidCertificate(CertificateError::Other(other)) => {
            matches!(other.0.downcast_ref::<webpki::Error>(), Some(webpki::Error::CaUsedAsEndEntity))
        }
        _ => false,
    }
}

impl ServerCertVerifier for PinnedOrWebPki {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        match self.webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(error)
                if is_ca_used_as_end_entity(&error)
                    && self.pinned.iter().any(|pinned| pinned.as_ref() == end_entity.as_ref()) =>
            {
                rustls::client::verify_server_name(&ParsedCertificate::try_from(end_entity)?, server_name)?;
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use rustls::pki_types::PrivateKeyDer;
    use rustls::pki_types::pem::PemObject;
    use rustls::{ClientConnection, ServerConfig, ServerConnection, StreamOwned};

    use super::super::client_config;
    use super::{Arc, CertificateDer, ServerName};

    /// A fresh directory for one test's files.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("troupe-pinned-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// deploy/README's recipe: a self-signed certificate for `localhost`, which openssl makes with `CA:TRUE`.
    fn self_signed(dir: &Path, stem: &str) -> (PathBuf, PathBuf) {
        let (cert, key) = (dir.join(format!("{stem}.pem")), dir.join(format!("{stem}-key.pem")));
        let status = Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "30"])
            .args(["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .output()
            .expect("openssl runs");
        assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
        let text = Command::new("openssl").arg("x509").arg("-in").arg(&cert).arg("-noout").arg("-text").output();
        assert!(String::from_utf8_lossy(&text.unwrap().stdout).contains("CA:TRUE"), "the recipe makes a CA");
        (cert, key)
    }

    /// Serves one TLS connection with `cert` on a loopback port, echoing one line; returns the port.
    fn serve_once(cert: &Path, key: &Path) -> u16 {
        let chain = vec![CertificateDer::from_pem_file(cert).unwrap()];
        let key = PrivateKeyDer::from_pem_file(key).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (tcp, _) = listener.accept().unwrap();
            tcp.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
            let mut tls = StreamOwned::new(ServerConnection::new(Arc::new(config)).unwrap(), tcp);
            let mut byte = [0u8; 5];
            if tls.read_exact(&mut byte).is_ok() {
                let _ = tls.write_all(&byte);
                let _ = tls.flush();
            }
        });
        port
    }

    /// Connects to `port` as `name`, trusting `ca_file`, and sends "hello" through; the echo, or the TLS error.
    fn connect(port: u16, name: &str, ca_file: &Path) -> Result<String, String> {
        let config = client_config(Some(ca_file)).map_err(|error| error.to_string())?;
        let server_name = ServerName::try_from(name.to_owned()).unwrap();
        let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
        tcp.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        let mut tls = StreamOwned::new(ClientConnection::new(config, server_name).unwrap(), tcp);
        tls.write_all(b"hello").map_err(|error| error.to_string())?;
        let mut echoed = [0u8; 5];
        tls.read_exact(&mut echoed).map_err(|error| error.to_string())?;
        Ok(String::from_utf8_lossy(&echoed).into_owned())
    }

    #[test]
    fn the_servers_own_self_signed_ca_certificate_is_accepted_pinned_and_its_name_still_checked() {
        let dir = scratch("leaf");
        let (cert, key) = self_signed(&dir, "server");
        assert_eq!(connect(serve_once(&cert, &key), "localhost", &cert), Ok("hello".to_owned()));
        assert_eq!(connect(serve_once(&cert, &key), "127.0.0.1", &cert), Ok("hello".to_owned()));
        let wrong_name = connect(serve_once(&cert, &key), "elsewhere.example", &cert).unwrap_err();
        assert!(wrong_name.contains("not valid for name"), "{wrong_name}");
        // Another self-signed certificate in the file pins nothing for this server: webpki's own refusal stands.
        let (other, _) = self_signed(&dir, "other");
        let unknown = connect(serve_once(&cert, &key), "localhost", &other).unwrap_err();
        assert!(unknown.contains("CaUsedAsEndEntity"), "{unknown}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
