//! TLS for `ssl:` remotes, with the semantics of OVS's stream-ssl (what ovn-controller uses): the
//! client presents its certificate and private key (ovsdb-server requires one, and its RBAC
//! identifies the chassis by the certificate's common name), and accepts the server when its
//! chain leads to the configured CA and is valid now. Like stream-ssl, it does not match the
//! server's name against the remote's host: OVN's certificates (`ovs-pki`) name the daemon, not
//! its address. Built on rustls (ring's primitives); loads PEM files once at start. Touches
//! nothing but the files it reads.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
    client::{
        WebPkiServerVerifier,
        danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    },
    pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime, pem::PemObject},
};
use thiserror::Error;
use tokio::net::TcpStream;
use tokio_rustls::{TlsConnector, client::TlsStream};

/// The three files ovn-controller takes (`--private-key`, `--certificate`, `--ca-cert`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub private_key: PathBuf,
    pub certificate: PathBuf,
    pub ca_cert: PathBuf,
}

#[derive(Debug, Error)]
pub enum TlsError {
    #[error("reading the {what} {path}: {reason}")]
    Read {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("the {what} {path} holds no PEM {expected}")]
    Empty {
        what: &'static str,
        path: PathBuf,
        expected: &'static str,
    },
    #[error("the CA certificate {path} cannot be used: {reason}")]
    Ca { path: PathBuf, reason: String },
    #[error("the private key does not fit the certificate: {0}")]
    Identity(String),
}

/// A client TLS configuration for OVSDB servers, shared by every connection.
#[derive(Clone)]
pub struct TlsClient {
    connector: TlsConnector,
}

impl std::fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsClient")
    }
}

impl TlsClient {
    /// Reads the key, the certificate (chain) and the CA certificate(s).
    pub fn load(files: &TlsFiles) -> Result<Self, TlsError> {
        let certificates = read_certificates("certificate", &files.certificate)?;
        let ca_certificates = read_certificates("CA certificate", &files.ca_cert)?;
        let key = PrivateKeyDer::from_pem_file(&files.private_key).map_err(|e| TlsError::Read {
            what: "private key",
            path: files.private_key.clone(),
            reason: e.to_string(),
        })?;
        let mut roots = RootCertStore::empty();
        for ca in ca_certificates {
            roots.add(ca).map_err(|e| TlsError::Ca {
                path: files.ca_cert.clone(),
                reason: e.to_string(),
            })?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| TlsError::Ca {
                path: files.ca_cert.clone(),
                reason: e.to_string(),
            })?;
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Identity(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainToCa { webpki }))
            .with_client_auth_cert(certificates, key)
            .map_err(|e| TlsError::Identity(e.to_string()))?;
        Ok(Self {
            connector: TlsConnector::from(Arc::new(config)),
        })
    }

    /// The TLS handshake over a connected TCP stream to `host`.
    pub async fn connect(
        &self,
        stream: TcpStream,
        host: &str,
    ) -> std::io::Result<TlsStream<TcpStream>> {
        let name = ServerName::try_from(host.to_string()).map_err(|e| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{host}: {e}"))
        })?;
        self.connector.connect(name, stream).await
    }
}

fn read_certificates(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certificates = CertificateDer::pem_file_iter(path)
        .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError::Read {
            what,
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    if certificates.is_empty() {
        return Err(TlsError::Empty {
            what,
            path: path.to_path_buf(),
            expected: "CERTIFICATE",
        });
    }
    Ok(certificates)
}

/// Accepts a server whose chain leads to the CA and is valid now, whatever name it carries
/// (stream-ssl's check); every other failure (unknown issuer, expired, bad signature) stands.
#[derive(Debug)]
struct ChainToCa {
    webpki: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for ChainToCa {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_empty_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let files = TlsFiles {
            private_key: dir.path().join("absent-key.pem"),
            certificate: empty.clone(),
            ca_cert: empty.clone(),
        };
        let error = TlsClient::load(&files).unwrap_err().to_string();
        assert!(
            error.contains("certificate") && error.contains("empty.pem"),
            "{error}"
        );
        let files = TlsFiles {
            certificate: dir.path().join("absent-cert.pem"),
            ..files
        };
        let error = TlsClient::load(&files).unwrap_err().to_string();
        assert!(error.contains("absent-cert.pem"), "{error}");
    }
}
