//! CNI results: what ADD prints, built from the agent's [`CniResponse`] in the spec version of
//! the configuration (1.1.0 has interface MTUs; before 1.0.0 each IP names its version).

use serde_json::{Value, json};

use crate::{version_at_least, wire::CniResponse};

/// The ADD result for `response` (the pod's interface in `netns`) in `cni_version`.
#[must_use]
pub fn add_result(response: &CniResponse, netns: &str, cni_version: &str) -> Value {
    let mut interface = json!({
        "name": response.nicname,
        "mac": response.mac_address,
        "sandbox": netns,
    });
    if version_at_least(cni_version, "1.1.0") && response.mtu > 0 {
        interface["mtu"] = json!(response.mtu);
    }
    // The host end first, when the agent names it (the container interface is then index 1).
    let mut interfaces = Vec::new();
    if !response.host_interface.is_empty() {
        let mut host = json!({"name": response.host_interface, "mac": response.host_mac});
        if version_at_least(cni_version, "1.1.0") && response.mtu > 0 {
            host["mtu"] = json!(response.mtu);
        }
        interfaces.push(host);
    }
    let container_index = interfaces.len();
    interfaces.push(interface);
    let ips: Vec<Value> = response
        .ips
        .iter()
        .filter_map(|ip| {
            let prefix = ip.cidr.split_once('/')?.1;
            let mut entry = json!({
                "address": format!("{}/{prefix}", ip.ip),
                "interface": container_index,
            });
            if !ip.gateway.is_empty() {
                entry["gateway"] = json!(ip.gateway);
            }
            if !version_at_least(cni_version, "1.0.0") {
                entry["version"] = json!(if ip.protocol == "IPv6" { "6" } else { "4" });
            }
            Some(entry)
        })
        .collect();
    // Kube-OVN's rule: without routes from the daemon, a default route per gateway.
    let routes: Vec<Value> = if response.routes.is_empty() {
        response
            .ips
            .iter()
            .filter(|ip| !ip.gateway.is_empty())
            .map(|ip| {
                let dst = if ip.protocol == "IPv6" {
                    "::/0"
                } else {
                    "0.0.0.0/0"
                };
                json!({"dst": dst, "gw": ip.gateway})
            })
            .collect()
    } else {
        response
            .routes
            .iter()
            .map(|route| {
                let mut entry =
                    json!({"dst": if route.dst.is_empty() { "0.0.0.0/0" } else { &route.dst }});
                if !route.gw.is_empty() {
                    entry["gw"] = json!(route.gw);
                }
                entry
            })
            .collect()
    };
    json!({
        "cniVersion": cni_version,
        "interfaces": interfaces,
        "ips": ips,
        "routes": routes,
        "dns": response.dns.clone().unwrap_or_else(|| json!({})),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::sample_response as response;

    #[test]
    fn results_follow_the_requested_version() {
        let new = add_result(&response(), "/var/run/netns/p", "1.1.0");
        assert_eq!(new["cniVersion"], "1.1.0");
        assert_eq!(new["interfaces"][0]["mtu"], 1400);
        assert_eq!(new["interfaces"][0]["sandbox"], "/var/run/netns/p");
        assert_eq!(new["ips"][0]["address"], "10.0.1.2/24");
        assert_eq!(new["ips"][0]["gateway"], "10.0.1.1");
        assert!(new["ips"][0].get("version").is_none());
        assert_eq!(
            new["routes"][0],
            json!({"dst": "0.0.0.0/0", "gw": "10.0.1.1"})
        );

        assert_eq!(new["ips"][0]["interface"], 0);

        let with_host = CniResponse {
            host_interface: "0123456789ab_h".into(),
            host_mac: "02:00:00:00:00:01".into(),
            ..response()
        };
        let paired = add_result(&with_host, "/var/run/netns/p", "1.0.0");
        assert_eq!(paired["interfaces"][0]["name"], "0123456789ab_h");
        assert!(paired["interfaces"][0].get("sandbox").is_none());
        assert_eq!(paired["interfaces"][1]["sandbox"], "/var/run/netns/p");
        assert_eq!(paired["ips"][0]["interface"], 1);

        let old = add_result(&response(), "/var/run/netns/p", "0.3.1");
        assert_eq!(old["ips"][0]["version"], "4");
        assert!(old["interfaces"][0].get("mtu").is_none());
        let middle = add_result(&response(), "/var/run/netns/p", "1.0.0");
        assert!(middle["interfaces"][0].get("mtu").is_none());
        assert!(middle["ips"][0].get("version").is_none());
    }
}
