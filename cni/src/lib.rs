//! The CNI contract shared by the `ovnbpf-cni` plugin binary and the agent's CNI server:
//! - [`wire`]: Kube-OVN's request/response JSON (the daemon API on the unix socket);
//! - [`netconf`]: the network configuration and `CNI_ARGS` the runtime hands the plugin;
//! - [`result`]: CNI results in every spec version the plugin speaks;
//! - [`error`]: CNI error codes and the error JSON;
//! - [`http`]: the plugin's HTTP/1.1 client over the unix socket (hyper).
//!
//! The specification's types (network configuration, results in the current and the legacy
//! layout, the error JSON) are `rscni-types`' (spec 1.1.0, results 0.3.0–1.1.0, as the
//! reference implementation writes them); Kube-OVN's keys and API are ours.

pub mod error;
pub mod http;
pub mod netconf;
pub mod result;
pub mod wire;

/// CNI spec versions the plugin speaks (results are converted to the config's version).
pub const SUPPORTED_VERSIONS: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];
/// The spec version the plugin implements.
pub const SPEC_VERSION: &str = "1.1.0";

/// Kube-OVN's default daemon socket.
pub const DEFAULT_SOCKET: &str = "/run/openvswitch/kube-ovn-daemon.sock";

/// Compares two dotted versions numerically (`0.4.0 < 1.0.0`); unparsable parts count as 0.
#[must_use]
pub fn version_at_least(version: &str, minimum: &str) -> bool {
    let parts = |v: &str| -> Vec<u32> { v.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    parts(version) >= parts(minimum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_numerically() {
        assert!(version_at_least("1.1.0", "1.1.0"));
        assert!(version_at_least("1.0.0", "0.4.0"));
        assert!(!version_at_least("0.3.1", "0.4.0"));
        assert!(!version_at_least("0.10.0", "1.0.0"));
        assert!(version_at_least("0.10.0", "0.4.0"));
    }
}
