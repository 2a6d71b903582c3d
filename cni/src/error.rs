//! CNI errors: the well-known codes of the spec and the JSON a plugin prints on stdout.

use serde_json::{Value, json};

/// Incompatible CNI version.
pub const INCOMPATIBLE_VERSION: u32 = 1;
/// Unsupported field in the network configuration.
pub const UNSUPPORTED_FIELD: u32 = 2;
/// Container unknown or does not exist.
pub const UNKNOWN_CONTAINER: u32 = 3;
/// Invalid necessary environment variables (CNI_COMMAND, CNI_CONTAINERID, CNI_ARGS, …).
pub const INVALID_ENVIRONMENT: u32 = 4;
/// I/O failure (e.g. reading stdin).
pub const IO_FAILURE: u32 = 5;
/// Failed to decode content (malformed JSON).
pub const DECODING_FAILURE: u32 = 6;
/// Invalid network config.
pub const INVALID_NETWORK_CONFIG: u32 = 7;
/// Try again later: a transient condition (the agent is unreachable or refused).
pub const TRY_AGAIN_LATER: u32 = 11;
/// STATUS: the plugin cannot service ADD requests.
pub const PLUGIN_NOT_AVAILABLE: u32 = 50;
/// ovnbpf's own (the spec leaves 100 and up to plugins): the agent cannot serve this pod as its
/// logical port is configured (no static address, no gateway in the Southbound); retrying does
/// not help until the configuration changes.
pub const POD_NOT_SERVABLE: u32 = 100;

/// A CNI error as the spec defines it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CniError {
    pub code: u32,
    pub msg: String,
    pub details: String,
}

impl CniError {
    #[must_use]
    pub fn new(code: u32, msg: impl Into<String>, details: impl Into<String>) -> Self {
        Self {
            code,
            msg: msg.into(),
            details: details.into(),
        }
    }

    /// The error JSON, tagged with `cni_version` (written by `rscni-types`' `ErrorResult`).
    #[must_use]
    pub fn to_json(&self, cni_version: &str) -> Value {
        let error =
            rscni_types::error::Error::Custom(self.code, self.msg.clone(), self.details.clone());
        let version = cni_version.parse().unwrap_or_default();
        serde_json::to_value(rscni_types::types::ErrorResult::new(version, &error)).unwrap_or_else(
            |_| json!({"cniVersion": cni_version, "code": self.code, "msg": self.msg, "details": self.details}),
        )
    }
}

impl std::fmt::Display for CniError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CNI error {}: {}", self.code, self.msg)?;
        if !self.details.is_empty() {
            write!(f, " ({})", self.details)?;
        }
        Ok(())
    }
}

impl std::error::Error for CniError {}
