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

/// A [`Route`] that ovnbpf can install in a pod: IPv4, `destination/prefix_len` (host bits
/// cleared, as Kube-OVN's Go parser does), via `gateway` or on-link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Route {
    pub destination: std::net::Ipv4Addr,
    pub prefix_len: u8,
    pub gateway: Option<std::net::Ipv4Addr>,
}

impl Route {
    /// Parses the route: `dst` a CIDR (empty: the default route), `gw` an address (empty: the
    /// destination is on-link). A route with neither, or of IPv6 (not supported yet), is refused
    /// with the reason.
    pub fn parse_ipv4(&self) -> Result<Ipv4Route, String> {
        let error = |why: &str| format!("route {{dst {:?}, gw {:?}}}: {why}", self.dst, self.gw);
        if self.dst.is_empty() && self.gw.is_empty() {
            return Err(error("neither dst nor gw"));
        }
        let (destination, prefix_len) = if self.dst.is_empty() {
            (std::net::Ipv4Addr::UNSPECIFIED, 0)
        } else {
            let (address, length) = self
                .dst
                .split_once('/')
                .ok_or_else(|| error("dst is not a CIDR"))?;
            let address: std::net::Ipv4Addr = address.parse().map_err(|_| {
                error(if address.contains(':') {
                    "IPv6 routes are not supported yet"
                } else {
                    "dst is not an IPv4 address"
                })
            })?;
            let length: u8 = length
                .parse()
                .ok()
                .filter(|length| *length <= 32)
                .ok_or_else(|| error("the prefix length is not 0-32"))?;
            let mask = u32::MAX.checked_shl(32 - u32::from(length)).unwrap_or(0);
            (std::net::Ipv4Addr::from(u32::from(address) & mask), length)
        };
        let gateway = if self.gw.is_empty() {
            None
        } else {
            Some(self.gw.parse().map_err(|_| {
                error(if self.gw.contains(':') {
                    "IPv6 routes are not supported yet"
                } else {
                    "gw is not an IPv4 address"
                })
            })?)
        };
        Ok(Ipv4Route {
            destination,
            prefix_len,
            gateway,
        })
    }
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
    fn routes_parse_as_kube_ovn_reads_them() {
        let route = |dst: &str, gw: &str| {
            Route {
                dst: dst.into(),
                gw: gw.into(),
            }
            .parse_ipv4()
        };
        let ip = |text: &str| text.parse::<std::net::Ipv4Addr>().unwrap();
        assert_eq!(
            route("10.1.2.3/16", "10.0.1.1"),
            Ok(Ipv4Route {
                destination: ip("10.1.0.0"),
                prefix_len: 16,
                gateway: Some(ip("10.0.1.1")),
            }),
            "host bits cleared"
        );
        assert_eq!(
            route("", "10.0.1.254").map(|r| (r.destination, r.prefix_len)),
            Ok((ip("0.0.0.0"), 0)),
            "no dst: the default route"
        );
        assert_eq!(
            route("192.168.7.0/24", "").map(|r| r.gateway),
            Ok(None),
            "no gw: on-link"
        );
        for (dst, gw, why) in [
            ("", "", "neither"),
            ("10.1.0.0", "10.0.1.1", "not a CIDR"),
            ("10.1.0.0/33", "10.0.1.1", "0-32"),
            ("10.1.0.x/16", "10.0.1.1", "not an IPv4"),
            ("fd00::/64", "", "IPv6"),
            ("10.1.0.0/16", "fd00::1", "IPv6"),
            ("10.1.0.0/16", "gateway", "gw is not"),
        ] {
            let error = route(dst, gw).unwrap_err();
            assert!(error.contains(why), "{dst} {gw}: {error}");
        }
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
