//! The daemon API of Kube-OVN, which the agent serves on its unix socket: `POST /api/v1/add`
//! (200 + [`CniResponse`]), `POST /api/v1/del` (204), and ovnbpf's additions `POST /api/v1/check`
//! (200), `POST /api/v1/status` (200 when ready) and `POST /api/v1/gc` (204, body
//! [`GcRequest`]). Error replies carry [`CniResponse::error`]. JSON keys are Kube-OVN's.

use serde::{Deserialize, Serialize};

pub const PATH_ADD: &str = "/api/v1/add";
pub const PATH_DEL: &str = "/api/v1/del";
pub const PATH_CHECK: &str = "/api/v1/check";
pub const PATH_STATUS: &str = "/api/v1/status";
pub const PATH_GC: &str = "/api/v1/gc";

/// A route as Kube-OVN writes it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dst: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gw: String,
}

/// One CNI operation on one pod interface.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CniRequest {
    #[serde(default)]
    pub cni_type: String,
    pub pod_name: String,
    pub pod_namespace: String,
    pub container_id: String,
    #[serde(default)]
    pub net_ns: String,
    #[serde(default)]
    pub if_name: String,
    #[serde(default)]
    pub provider: String,
    #[serde(default)]
    pub routes: Vec<Route>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<serde_json::Value>,
}

/// One address of the pod.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpConfig {
    /// "IPv4" or "IPv6".
    pub protocol: String,
    /// The address without prefix.
    pub ip: String,
    /// The subnet, e.g. `10.0.1.0/24`.
    pub cidr: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gateway: String,
}

/// What ADD configured (or, with `error`, why it failed).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CniResponse {
    #[serde(default)]
    pub ips: Vec<IpConfig>,
    #[serde(default)]
    pub mac_address: String,
    #[serde(default)]
    pub routes: Vec<Route>,
    #[serde(default)]
    pub mtu: u32,
    #[serde(default)]
    pub nicname: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// ovnbpf's addition: the host end of the veth and its MAC, listed in the CNI result so
    /// chained plugins (bandwidth) find the pair.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host_interface: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host_mac: String,
}

/// An attachment the runtime still considers valid (CNI GC's `cni.dev/valid-attachments`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Attachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
}

/// GC: every attachment of this network not listed is to be removed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcRequest {
    pub valid_attachments: Vec<Attachment>,
}

/// The logical switch port of a pod, by Kube-OVN's rules: `<pod>.<namespace>` for the `ovn`
/// provider (or none), `<pod>.<namespace>.<provider>` otherwise.
#[must_use]
pub fn logical_port_name(pod: &str, namespace: &str, provider: &str) -> String {
    if provider.is_empty() || provider == "ovn" {
        format!("{pod}.{namespace}")
    } else {
        format!("{pod}.{namespace}.{provider}")
    }
}

/// The host-side veth of a pod interface, as Kube-OVN names it: `<containerID[0:12]>_h` for
/// `eth0`, `<containerID[0:12-len(if)]>_<if>_h` otherwise (at most 15 bytes, the kernel's limit).
#[must_use]
pub fn host_interface_name(container_id: &str, if_name: &str) -> String {
    let id: String = container_id.chars().take(12).collect();
    if if_name.is_empty() || if_name == "eth0" {
        format!("{id}_h")
    } else {
        let keep = 12_usize.saturating_sub(if_name.len());
        let id: String = id.chars().take(keep).collect();
        let name = format!("{id}_{if_name}_h");
        name.chars().take(15).collect()
    }
}

/// A pod's ADD answer, for tests.
#[cfg(test)]
pub(crate) fn sample_response() -> CniResponse {
    CniResponse {
        ips: vec![IpConfig {
            protocol: "IPv4".into(),
            ip: "10.0.1.2".into(),
            cidr: "10.0.1.0/24".into(),
            gateway: "10.0.1.1".into(),
        }],
        mac_address: "0a:58:0a:00:01:02".into(),
        mtu: 1400,
        nicname: "eth0".into(),
        ..CniResponse::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_kube_ovn() {
        assert_eq!(logical_port_name("web", "default", ""), "web.default");
        assert_eq!(logical_port_name("web", "default", "ovn"), "web.default");
        assert_eq!(
            logical_port_name("web", "default", "net1.default.ovn"),
            "web.default.net1.default.ovn"
        );
        assert_eq!(
            host_interface_name("0123456789abcdef0123", "eth0"),
            "0123456789ab_h"
        );
        assert_eq!(
            host_interface_name("0123456789abcdef0123", "net1"),
            "01234567_net1_h"
        );
        assert!(host_interface_name("0123456789abcdef", "averylongname").len() <= 15);
    }

    #[test]
    fn requests_use_kube_ovn_keys() {
        let request: CniRequest = serde_json::from_str(
            r#"{"cni_type":"kube-ovn","pod_name":"p","pod_namespace":"ns","container_id":"c","net_ns":"/var/run/netns/x","if_name":"eth0","provider":"ovn","routes":[{"dst":"10.0.0.0/8","gw":"10.0.1.1"}]}"#,
        )
        .unwrap();
        assert_eq!(request.routes[0].gw, "10.0.1.1");
        let response = sample_response();
        let text = serde_json::to_string(&response).unwrap();
        assert!(
            text.contains(r#""mac_address":"0a:58:0a:00:01:02""#),
            "{text}"
        );
        assert!(!text.contains("error"), "{text}");
    }
}
