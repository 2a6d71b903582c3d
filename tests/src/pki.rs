//! A throwaway OVS PKI for TLS tests: `ovs-pki` in a temp dir (one CA, as OVN deployments make
//! them), identities signed by it with the name as the certificate's common name (`-u`: no UUID
//! appended, so the name is what OVSDB's RBAC compares with a chassis name), and an expired
//! certificate made with `openssl` from the same request.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result};
use tempfile::TempDir;

use crate::process;

/// A private key and the certificate signed for it.
#[derive(Clone, Debug)]
pub struct Identity {
    pub key: PathBuf,
    pub cert: PathBuf,
}

/// A CA and what it signed, removed on drop.
#[derive(Debug)]
pub struct Pki {
    dir: TempDir,
}

impl Pki {
    /// A new CA (`ovs-pki init`).
    pub fn create() -> Result<Self> {
        let dir = tempfile::Builder::new().prefix("ovnbpf-pki-").tempdir()?;
        let pki = Self { dir };
        pki.ovs_pki(&["init"]).context("ovs-pki init")?;
        Ok(pki)
    }

    fn ovs_pki(&self, args: &[&str]) -> Result<String> {
        let dir = format!("--dir={}", self.dir.path().join("pki").display());
        process::output(
            Command::new("ovs-pki")
                .current_dir(self.dir.path())
                .arg(dir)
                .args(args),
        )
    }

    /// The CA certificate peers check against.
    #[must_use]
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.path().join("pki/switchca/cacert.pem")
    }

    fn files(&self, name: &str) -> Identity {
        Identity {
            key: self.dir.path().join(format!("{name}-privkey.pem")),
            cert: self.dir.path().join(format!("{name}-cert.pem")),
        }
    }

    /// A key and a certificate with common name `name`, signed by this CA.
    pub fn sign(&self, name: &str) -> Result<Identity> {
        self.ovs_pki(&["-u", "req+sign", name, "switch"])
            .with_context(|| format!("ovs-pki req+sign {name}"))?;
        Ok(self.files(name))
    }

    /// Like [`Self::sign`], but the certificate expired a day ago.
    pub fn sign_expired(&self, name: &str) -> Result<Identity> {
        self.ovs_pki(&["-u", "req", name])
            .with_context(|| format!("ovs-pki req {name}"))?;
        let identity = self.files(name);
        let ca = self.dir.path().join("pki/switchca");
        // X.509 v3 like ovs-pki's (a v1 certificate would be refused for its version instead).
        let extensions = self.dir.path().join(format!("{name}-ext.cnf"));
        std::fs::write(
            &extensions,
            format!("basicConstraints=CA:FALSE\nsubjectAltName=DNS:{name}\n"),
        )?;
        process::output(
            Command::new("openssl")
                .args(["x509", "-req", "-days", "-1", "-set_serial", "4242"])
                .arg("-extfile")
                .arg(&extensions)
                .arg("-in")
                .arg(self.dir.path().join(format!("{name}-req.pem")))
                .arg("-CA")
                .arg(ca.join("cacert.pem"))
                .arg("-CAkey")
                .arg(ca.join("private/cakey.pem"))
                .arg("-out")
                .arg(&identity.cert),
        )
        .context("signing an expired certificate")?;
        Ok(identity)
    }

    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
