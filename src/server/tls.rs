//! TLS for the Postgres and HTTP ports: the configured PEM certificate chain and
//! key loaded into rustls acceptors (TLS 1.3), and the first-byte check that lets
//! the HTTP port serve HTTPS and, unless `tls_require`, plain HTTP side by side.

use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::{self, ServerConfig};

use crate::config::TlsFiles;
use crate::error::{Error, Result};

/// A TLS handshake (or the first byte of a plain request) must arrive in this time.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Acceptors for each port (they differ in the ALPN protocol they offer).
#[derive(Clone)]
pub struct Acceptors {
    pub pg: TlsAcceptor,
    pub http: TlsAcceptor,
}

/// Loads the certificate and key; an unreadable or mismatched pair is a start-up
/// error naming the file.
pub fn load(files: &TlsFiles) -> Result<Acceptors> {
    let bad = |what: &str, path: &std::path::Path, e: String| {
        Error::Config(format!("TLS {what} {}: {e}", path.display()))
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| bad("certificate", &files.cert, e.to_string()))?
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| bad("certificate", &files.cert, e.to_string()))?;
    if certs.is_empty() {
        return Err(bad(
            "certificate",
            &files.cert,
            "no certificate in the file".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| bad("key", &files.key, e.to_string()))?;
    let config = |alpn: &[u8]| -> Result<TlsAcceptor> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut c = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Config(format!("TLS: {e}")))?
            .with_no_client_auth()
            .with_single_cert(certs.clone(), key.clone_key())
            .map_err(|e| bad("certificate and key", &files.cert, e.to_string()))?;
        c.alpn_protocols = vec![alpn.to_vec()];
        Ok(TlsAcceptor::from(Arc::new(c)))
    };
    Ok(Acceptors {
        pg: config(b"postgresql")?,
        http: config(b"http/1.1")?,
    })
}

/// A byte stream, encrypted or not.
pub trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}

/// What the start of an HTTP connection turned out to be.
pub enum Opened<S> {
    Tls(Box<tokio_rustls::server::TlsStream<S>>),
    Plain(S),
    /// Plain text while TLS is required, or a failed handshake: closed.
    Refused,
}

/// Looks at the first byte of a connection: a TLS handshake record (0x16) is
/// answered with TLS, anything else is plain HTTP (refused when `require`). `wrap`
/// turns the socket into the stream served (an idle timeout around it).
pub async fn open<S>(
    sock: TcpStream,
    wrap: impl FnOnce(TcpStream) -> S,
    acceptor: &TlsAcceptor,
    require: bool,
) -> Opened<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut first = [0u8; 1];
    let peeked = tokio::time::timeout(HANDSHAKE_TIMEOUT, sock.peek(&mut first)).await;
    match peeked {
        Ok(Ok(1)) if first[0] == 0x16 => {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(wrap(sock))).await {
                Ok(Ok(s)) => Opened::Tls(Box::new(s)),
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "TLS handshake failed");
                    Opened::Refused
                }
                Err(_) => Opened::Refused,
            }
        }
        Ok(Ok(1)) if !require => Opened::Plain(wrap(sock)),
        _ => Opened::Refused,
    }
}
