//! Checking Kubernetes manifests without a cluster: `kubernetes-validate` (the Kubernetes
//! OpenAPI schemas, packaged on PyPI) in a virtualenv that `cargo xtask setup` creates under
//! `$HOME/.cache/ovnbpf/venv`, and YAML read as JSON through that venv's PyYAML.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The `kubernetes-validate` release setup installs (its schemas cover Kubernetes up to 1.37).
pub const VALIDATOR_VERSION: &str = "1.37.0";

/// The virtualenv that holds the validator.
#[must_use]
pub fn venv() -> PathBuf {
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join(".cache/ovnbpf/venv")
}

/// The validator's executable.
#[must_use]
pub fn validator() -> PathBuf {
    venv().join("bin/kubernetes-validate")
}

/// Validates every document of `file` strictly (unknown fields are errors) against the schemas
/// of Kubernetes `version` (e.g. "1.27.0"); the validator's report on failure.
pub fn validate(file: &Path, version: &str) -> Result<String> {
    let output = std::process::Command::new(validator())
        .args(["--strict", "-k", version])
        .arg(file)
        .output()
        .with_context(|| {
            format!(
                "running {} (run `cargo xtask setup`)",
                validator().display()
            )
        })?;
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if !output.status.success() {
        bail!("{} does not validate:\n{report}", file.display());
    }
    Ok(report)
}

/// The documents of a YAML file, as JSON values.
pub fn documents(file: &Path) -> Result<Vec<serde_json::Value>> {
    const TO_JSON: &str =
        "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))";
    let output = std::process::Command::new(venv().join("bin/python"))
        .args(["-c", TO_JSON])
        .arg(file)
        .output()
        .context("running the venv's python")?;
    if !output.status.success() {
        bail!(
            "reading {} as YAML: {}",
            file.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    serde_json::from_slice(&output.stdout).context("the YAML converted to JSON")
}
