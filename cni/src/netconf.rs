//! The network configuration on the plugin's stdin (Kube-OVN's netconf: `type` "kube-ovn" or
//! "ovnbpf", `server_socket`, `provider`, `routes`, `ipam`) and the pod identity in `CNI_ARGS`.

use rscni_types::types;
use serde_json::Value;

use crate::{
    SUPPORTED_VERSIONS,
    error::{self, CniError},
    wire::{Attachment, Route},
};

/// Plugin types that mean "this plugin attaches the NIC".
pub const PLUGIN_TYPES: [&str; 2] = ["kube-ovn", "ovnbpf"];

/// What the plugin uses of its configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct NetConf {
    pub cni_version: String,
    pub name: String,
    pub plugin_type: String,
    pub server_socket: String,
    pub provider: String,
    pub routes: Vec<Route>,
    /// Whether the previous plugin's result came along (CHECK needs it).
    pub has_prev_result: bool,
    /// GC: `cni.dev/valid-attachments`.
    pub valid_attachments: Vec<Attachment>,
}

fn invalid(msg: impl Into<String>) -> CniError {
    CniError::new(error::INVALID_NETWORK_CONFIG, msg, "")
}

/// A string-valued key of the plugin's own (Kube-OVN's `server_socket`, `provider`).
fn string(conf: &types::NetConf, key: &str) -> String {
    conf.custom
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Parses the configuration bytes from stdin: the specification's keys through
/// `rscni-types`' [`types::NetConf`], Kube-OVN's (`server_socket`, `provider`, `routes`) from
/// its other keys.
pub fn parse(stdin: &[u8]) -> Result<NetConf, CniError> {
    let value: Value = serde_json::from_slice(stdin).map_err(|e| {
        CniError::new(
            error::DECODING_FAILURE,
            "the network configuration is not valid JSON",
            e.to_string(),
        )
    })?;
    if !value.is_object() {
        return Err(CniError::new(
            error::DECODING_FAILURE,
            "the network configuration is not a JSON object",
            "",
        ));
    }
    let conf: types::NetConf = serde_json::from_value(value).map_err(|e| {
        CniError::new(
            error::DECODING_FAILURE,
            "the network configuration does not decode",
            e.to_string(),
        )
    })?;
    let cni_version = conf.cni_version.clone();
    if cni_version.is_empty() {
        return Err(invalid("cniVersion is missing"));
    }
    if !SUPPORTED_VERSIONS.contains(&cni_version.as_str()) {
        return Err(CniError::new(
            error::INCOMPATIBLE_VERSION,
            format!("cniVersion {cni_version} is not supported"),
            format!("supported: {}", SUPPORTED_VERSIONS.join(", ")),
        ));
    }
    if !PLUGIN_TYPES.contains(&conf.r#type.as_str()) {
        return Err(invalid(format!(
            "type {:?}: ovnbpf attaches NICs as type \"kube-ovn\" or \"ovnbpf\" (IPAM-only mode is not supported)",
            conf.r#type
        )));
    }
    let server_socket = string(&conf, "server_socket");
    if server_socket.is_empty() {
        return Err(invalid("server_socket is required"));
    }
    let routes: Vec<crate::wire::Route> = match conf.custom.get("routes") {
        None | Some(Value::Null) => Vec::new(),
        Some(routes) => {
            serde_json::from_value(routes.clone()).map_err(|e| invalid(format!("routes: {e}")))?
        }
    };
    for route in &routes {
        route.parse_ipv4().map_err(invalid)?;
    }
    let provider = match string(&conf, "provider") {
        provider if provider.is_empty() => "ovn".to_string(),
        provider => provider,
    };
    let valid_attachments = conf
        .valid_attachments
        .iter()
        .flatten()
        .map(|attachment| Attachment {
            container_id: attachment.container_id.clone(),
            ifname: attachment.ifname.clone(),
        })
        .collect();
    Ok(NetConf {
        cni_version,
        name: conf.name.clone(),
        plugin_type: conf.r#type.clone(),
        server_socket,
        provider,
        routes,
        has_prev_result: conf.prev_result.is_some(),
        valid_attachments,
    })
}

/// The pod's name and namespace from `CNI_ARGS` (`K=V;K=V`).
pub fn pod_identity(cni_args: &str) -> Result<(String, String), CniError> {
    let value = |key: &str| {
        cni_args
            .split(';')
            .filter_map(|pair| pair.split_once('='))
            .find(|(k, _)| k.trim() == key)
            .map(|(_, v)| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    match (value("K8S_POD_NAME"), value("K8S_POD_NAMESPACE")) {
        (Some(name), Some(namespace)) => Ok((name, namespace)),
        _ => Err(CniError::new(
            error::INVALID_ENVIRONMENT,
            "CNI_ARGS must carry K8S_POD_NAME and K8S_POD_NAMESPACE",
            format!("CNI_ARGS={cni_args:?}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kube_ovn_netconf_parses_with_defaults() {
        let conf = parse(
            br#"{"cniVersion":"0.3.1","name":"kube-ovn","type":"kube-ovn","server_socket":"/run/x.sock"}"#,
        )
        .unwrap();
        assert_eq!(conf.provider, "ovn");
        assert_eq!(conf.server_socket, "/run/x.sock");
        assert!(conf.routes.is_empty() && !conf.has_prev_result);
    }

    #[test]
    fn bad_configs_get_the_spec_codes() {
        let cases: [(&[u8], u32); 7] = [
            (b"{not json", error::DECODING_FAILURE),
            (b"[1]", error::DECODING_FAILURE),
            (
                br#"{"type":"ovnbpf","server_socket":"/s"}"#,
                error::INVALID_NETWORK_CONFIG,
            ),
            (
                br#"{"cniVersion":"9.9.9","type":"ovnbpf","server_socket":"/s"}"#,
                error::INCOMPATIBLE_VERSION,
            ),
            (
                br#"{"cniVersion":"1.0.0","type":"ovnbpf"}"#,
                error::INVALID_NETWORK_CONFIG,
            ),
            (
                br#"{"cniVersion":"1.0.0","type":"macvlan","ipam":{"type":"kube-ovn"}}"#,
                error::INVALID_NETWORK_CONFIG,
            ),
            (
                br#"{"cniVersion":"1.0.0","type":"ovnbpf","server_socket":"/s","routes":[{"dst":"10.9.0.0/33"}]}"#,
                error::INVALID_NETWORK_CONFIG,
            ),
        ];
        for (input, code) in cases {
            let error = parse(input).unwrap_err();
            assert_eq!(
                error.code,
                code,
                "{}: {error}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn cni_args_need_the_pod_name_and_namespace() {
        assert_eq!(
            pod_identity("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web").unwrap(),
            ("web".to_string(), "ns".to_string())
        );
        for args in ["", "K8S_POD_NAME=web", "K8S_POD_NAME=;K8S_POD_NAMESPACE=ns"] {
            assert_eq!(
                pod_identity(args).unwrap_err().code,
                error::INVALID_ENVIRONMENT,
                "{args}"
            );
        }
    }
}

#[cfg(test)]
mod deploy_conflist {
    use super::*;

    #[test]
    fn the_shipped_conflist_parses_for_our_plugin() {
        let text = include_str!("../../deploy/cni/01-ovnbpf.conflist");
        let list: Value = serde_json::from_str(text).unwrap();
        let mut ours = list["plugins"][0].clone();
        ours["cniVersion"] = list["cniVersion"].clone();
        ours["name"] = list["name"].clone();
        let conf = parse(ours.to_string().as_bytes()).unwrap();
        assert_eq!(conf.server_socket, "/run/ovnbpf/cni.sock");
        assert_eq!(conf.plugin_type, "ovnbpf");
    }
}
