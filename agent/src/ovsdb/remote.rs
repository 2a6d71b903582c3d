//! OVSDB remotes as ovn-controller accepts them: `unix:PATH`, `tcp:HOST:PORT`, `ssl:HOST:PORT`, or
//! a comma-separated list of those (the members of a clustered database, or relays), and opening
//! a byte stream to one (TLS through [`super::tls`]).

use std::{fmt, path::PathBuf};

use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite};

use super::tls::TlsClient;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum RemoteError {
    #[error("empty remote list")]
    Empty,
    #[error("remote {0:?}: expected unix:PATH, tcp:HOST:PORT or ssl:HOST:PORT")]
    Syntax(String),
}

/// One server address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Remote {
    Unix(PathBuf),
    Tcp {
        host: String,
        port: u16,
    },
    /// TLS over TCP (the private key, certificate and CA come with the connection's options).
    Ssl {
        host: String,
        port: u16,
    },
}

impl fmt::Display for Remote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Remote::Unix(path) => write!(f, "unix:{}", path.display()),
            Remote::Tcp { host, port } if host.contains(':') => write!(f, "tcp:[{host}]:{port}"),
            Remote::Tcp { host, port } => write!(f, "tcp:{host}:{port}"),
            Remote::Ssl { host, port } if host.contains(':') => write!(f, "ssl:[{host}]:{port}"),
            Remote::Ssl { host, port } => write!(f, "ssl:{host}:{port}"),
        }
    }
}

impl Remote {
    /// Parses one remote.
    pub fn parse(text: &str) -> Result<Self, RemoteError> {
        let text = text.trim();
        let syntax = || RemoteError::Syntax(text.to_string());
        if let Some(path) = text.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(syntax());
            }
            return Ok(Remote::Unix(PathBuf::from(path)));
        }
        let (ssl, address) = match (text.strip_prefix("tcp:"), text.strip_prefix("ssl:")) {
            (Some(address), _) => (false, address),
            (None, Some(address)) => (true, address),
            (None, None) => return Err(syntax()),
        };
        let (host, port) = if let Some(rest) = address.strip_prefix('[') {
            let (host, port) = rest.split_once("]:").ok_or_else(syntax)?;
            (host, port)
        } else {
            address.rsplit_once(':').ok_or_else(syntax)?
        };
        if host.is_empty() {
            return Err(syntax());
        }
        let port = port.parse().map_err(|_| syntax())?;
        let host = host.to_string();
        Ok(if ssl {
            Remote::Ssl { host, port }
        } else {
            Remote::Tcp { host, port }
        })
    }

    /// Whether this remote needs TLS settings.
    #[must_use]
    pub fn is_ssl(&self) -> bool {
        matches!(self, Remote::Ssl { .. })
    }

    /// Parses a comma-separated list (at least one remote).
    pub fn parse_list(text: &str) -> Result<Vec<Self>, RemoteError> {
        let remotes = text
            .split(',')
            .filter(|part| !part.trim().is_empty())
            .map(Self::parse)
            .collect::<Result<Vec<_>, _>>()?;
        if remotes.is_empty() {
            return Err(RemoteError::Empty);
        }
        Ok(remotes)
    }

    /// Opens a byte stream to the server (`tls` is needed for `ssl:` remotes).
    pub async fn connect(&self, tls: Option<&TlsClient>) -> std::io::Result<Box<dyn Transport>> {
        let tcp = |host: &str, port: u16| {
            let host = host.to_string();
            async move {
                let stream = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
                stream.set_nodelay(true)?;
                Ok::<_, std::io::Error>(stream)
            }
        };
        Ok(match self {
            Remote::Unix(path) => Box::new(tokio::net::UnixStream::connect(path).await?),
            Remote::Tcp { host, port } => Box::new(tcp(host, *port).await?),
            Remote::Ssl { host, port } => {
                let tls = tls.ok_or_else(|| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        "an ssl: remote needs a private key, a certificate and a CA certificate",
                    )
                })?;
                Box::new(tls.connect(tcp(host, *port).await?, host).await?)
            }
        })
    }
}

/// A connected byte stream (TCP or unix socket).
pub trait Transport: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Transport for T {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remotes_parse_like_ovn_controller() {
        let list = Remote::parse_list(
            "tcp:10.0.0.1:6642, tcp:[::1]:6642,unix:/run/ovn/sb.sock,ssl:ovn-sb.kube-system:6642",
        )
        .unwrap();
        assert_eq!(
            list,
            [
                Remote::Tcp {
                    host: "10.0.0.1".into(),
                    port: 6642
                },
                Remote::Tcp {
                    host: "::1".into(),
                    port: 6642
                },
                Remote::Unix("/run/ovn/sb.sock".into()),
                Remote::Ssl {
                    host: "ovn-sb.kube-system".into(),
                    port: 6642
                },
            ]
        );
        assert_eq!(list[3].to_string(), "ssl:ovn-sb.kube-system:6642");
        assert!(list[3].is_ssl() && !list[0].is_ssl());
        assert_eq!(list[1].to_string(), "tcp:[::1]:6642");
    }

    #[test]
    fn bad_remotes_are_rejected() {
        for bad in [
            "",
            "tcp:host",
            "tcp::6642",
            "tcp:h:99999",
            "udp:h:1",
            "unix:",
            "ssl:host",
        ] {
            assert!(Remote::parse_list(bad).is_err(), "{bad:?}");
        }
    }
}
