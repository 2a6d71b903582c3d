//! CNI results: what ADD prints, built from the agent's [`CniResponse`] as `rscni-types`'
//! [`types::CNIResult`] and written in the spec version of the configuration by that crate:
//! the current layout from 1.0.0 (interface MTUs from 1.1.0), the legacy one before (each IP
//! names its version, `dns` always present).

use std::net::IpAddr;

use rscni_types::{
    ipnet::IpNet,
    legacy,
    types::{self, CNIResultWithVersion},
    version::SpecVersion,
};
use serde_json::{Value, json};

use crate::{version_at_least, wire::CniResponse};

/// The ADD result for `response` (the pod's interface in `netns`) in `cni_version` (one the
/// plugin supports: the configuration was checked).
#[must_use]
pub fn add_result(response: &CniResponse, netns: &str, cni_version: &str) -> Value {
    let mtu = (version_at_least(cni_version, "1.1.0") && response.mtu > 0).then_some(response.mtu);
    let interface = |name: &str, mac: &str, sandbox: Option<&str>| types::Interface {
        name: name.to_string(),
        mac: mac.to_string(),
        mtu,
        sandbox: sandbox.map(str::to_string),
        socket_path: None,
        pci_id: None,
    };
    // The host end first, when the agent names it (the container interface is then index 1).
    let mut interfaces = Vec::new();
    if !response.host_interface.is_empty() {
        interfaces.push(interface(
            &response.host_interface,
            &response.host_mac,
            None,
        ));
    }
    let container_index = interfaces.len() as u32;
    interfaces.push(interface(
        &response.nicname,
        &response.mac_address,
        Some(netns),
    ));
    let ips = response
        .ips
        .iter()
        .filter_map(|ip| {
            let prefix = ip.cidr.split_once('/')?.1;
            Some(types::IpConfig {
                interface: Some(container_index),
                address: format!("{}/{prefix}", ip.ip).parse().ok()?,
                gateway: ip.gateway.parse().ok(),
            })
        })
        .collect();
    let route = |dst: IpNet, gw: Option<IpAddr>| types::Route {
        dst,
        gw,
        mtu: None,
        advmss: None,
        priority: None,
        table: None,
        scope: None,
    };
    // Kube-OVN's rule: without routes from the daemon, a default route per gateway.
    let routes = if response.routes.is_empty() {
        response
            .ips
            .iter()
            .filter_map(|ip| {
                let gateway: IpAddr = ip.gateway.parse().ok()?;
                let dst = if gateway.is_ipv6() {
                    "::/0"
                } else {
                    "0.0.0.0/0"
                };
                Some(route(dst.parse().ok()?, Some(gateway)))
            })
            .collect()
    } else {
        response
            .routes
            .iter()
            .filter_map(|r| {
                let dst = if r.dst.is_empty() {
                    "0.0.0.0/0"
                } else {
                    &r.dst
                };
                Some(route(dst.parse().ok()?, r.gw.parse().ok()))
            })
            .collect()
    };
    let dns = response
        .dns
        .clone()
        .and_then(|dns| serde_json::from_value::<types::Dns>(dns).ok());
    let result = types::CNIResult {
        interfaces,
        ips,
        routes,
        dns,
    };
    let version: SpecVersion = cni_version.parse().unwrap_or_default();
    let encoded = if version_at_least(cni_version, "1.0.0") {
        serde_json::to_value(CNIResultWithVersion::new(version, result))
    } else {
        serde_json::to_value(legacy::CNIResult::new(version, result))
    };
    encoded.unwrap_or_else(|_| json!({ "cniVersion": cni_version }))
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
