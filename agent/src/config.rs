//! The agent's configuration file (`ovnbpf-agent run --config FILE`, or `OVNBPF_CONFIG`): every
//! setting of `run` as a key named like its flag without the dashes (`sb-remote`, `pod-mtu`,
//! `local-port`, …). A value counts where neither the flag nor its environment variable gave
//! one: flag > environment > file > default.
//!
//! TOML, because a ConfigMap carries it as one file an operator edits by hand: it has comments
//! (JSON has none), its values are typed (a string where an integer belongs is an error, not a
//! guess), and its parser is small (YAML's Rust parsers are larger or unmaintained). Only the
//! `toml` crate's parser is used; the settings are checked here, not by serde derive, so that
//! every error names its setting: an unknown key, a wrong type or a bad value (an unparsable
//! remote, an MTU out of range, …) stops the agent at start with the file and the key in the
//! message.
//!
//! The file's settings become command-line arguments appended to the process's own
//! ([`with_file`]), so clap stays the one parser of every value and the precedence is clap's
//! [`ValueSource`]. Owns the settings table ([`SETTINGS`], which the binary's tests keep equal to
//! `run`'s flags) and the checks of the values it shares with the flags ([`parse_mtu`],
//! [`parse_bridge_mappings`]); touches nothing else.

use std::{
    collections::BTreeSet,
    ffi::OsString,
    net::{IpAddr, SocketAddr},
    path::{Path, PathBuf},
};

use clap::{Command, parser::ValueSource};

use crate::ovsdb::remote::Remote;

/// The flag that names the file, and its environment variable.
pub const CONFIG_FLAG: &str = "config";
pub const CONFIG_ENV: &str = "OVNBPF_CONFIG";
/// Flags of `run` that are not settings (actions, and the file itself).
pub const NOT_SETTINGS: &[&str] = &["help", CONFIG_FLAG, "check-config", "cleanup"];

/// What a setting's value is, and how it is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A string (a name).
    Text,
    /// A file or directory path.
    Path,
    /// A flag without a value (`--monitor-all`): `true` or `false`.
    Switch,
    /// A flag that takes `true` or `false` (`--encap-csum=false`).
    Bool,
    /// Whole seconds, 0 or more.
    Seconds,
    /// A whole number of things (its range is the flag's, checked by clap).
    Count,
    /// An MTU: 0 (derived) or 68 to 65535, see [`parse_mtu`].
    Mtu,
    /// OVSDB remotes, `tcp:HOST:PORT`, `ssl:HOST:PORT` or `unix:PATH`, comma-separated.
    Remotes,
    /// An IPv4 or IPv6 address.
    IpAddress,
    /// `HOST:PORT` with a numeric host.
    SocketAddress,
    /// ovn-bridge-mappings: `NETWORK:NIC[,…]`, see [`parse_bridge_mappings`].
    BridgeMappings,
    /// A repeatable flag: an array of strings.
    List,
}

/// One setting: its key (the flag's long name) and kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting {
    pub key: &'static str,
    pub kind: Kind,
}

const fn setting(key: &'static str, kind: Kind) -> Setting {
    Setting { key, kind }
}

/// Every setting of `ovnbpf-agent run`, in the order of its `--help`.
pub const SETTINGS: &[Setting] = &[
    setting("sb-remote", Kind::Remotes),
    setting("system-id", Kind::Text),
    setting("system-id-file", Kind::Path),
    setting("hostname", Kind::Text),
    setting("encap-ip", Kind::IpAddress),
    setting("encap-csum", Kind::Bool),
    setting("monitor-all", Kind::Switch),
    setting("bridge-mappings", Kind::BridgeMappings),
    setting("local-port", Kind::List),
    setting("uplink", Kind::Text),
    setting("pin-dir", Kind::Path),
    setting("no-pins", Kind::Switch),
    setting("cni-socket", Kind::Path),
    setting("no-cni", Kind::Switch),
    setting("control-socket", Kind::Path),
    setting("metrics-address", Kind::SocketAddress),
    setting("state-dir", Kind::Path),
    setting("pod-mtu", Kind::Mtu),
    setting("node-name", Kind::Text),
    setting("node-ip", Kind::IpAddress),
    setting("cluster-router", Kind::Text),
    setting("node-nic", Kind::Text),
    setting("no-node-nic", Kind::Switch),
    setting("nat-outgoing-subnet", Kind::List),
    setting("unsupported-acl", Kind::Text),
    setting("socket-lb", Kind::Switch),
    setting("bpf-log-level", Kind::Text),
    setting("connection-table-entries", Kind::Count),
    setting("socket-lb-cgroup", Kind::Path),
    setting("cni-port-wait-s", Kind::Seconds),
    setting("cni-gc-grace-s", Kind::Seconds),
    setting("cni-sweep-interval-s", Kind::Seconds),
    setting("filter-check-interval-s", Kind::Seconds),
    setting("probe-interval-s", Kind::Seconds),
    setting("private-key", Kind::Path),
    setting("certificate", Kind::Path),
    setting("ca-cert", Kind::Path),
    setting("dataplane", Kind::Text),
    setting("ovs-bridge-socket", Kind::Path),
    setting("ovs-db", Kind::Text),
];

/// Why a configuration file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading the configuration file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("configuration file {path} is not TOML: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error(
        "configuration file {path}: unknown setting `{key}` (the settings are the flags of \
         `ovnbpf-agent run` without the dashes: {known})"
    )]
    Unknown {
        path: PathBuf,
        key: String,
        known: String,
    },
    #[error("configuration file {path}: setting `{key}`: {problem}")]
    Invalid {
        path: PathBuf,
        key: String,
        problem: String,
    },
}

/// A setting's value from the file, checked, as the flag's values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileValue {
    pub setting: Setting,
    /// The flag's values (one, except for [`Kind::List`]); a [`Kind::Switch`] has `"true"` or
    /// `"false"`.
    pub values: Vec<String>,
}

/// Parses and checks a configuration file's text (`path` for the messages).
pub fn parse_file(path: &Path, text: &str) -> Result<Vec<FileValue>, ConfigError> {
    let table: toml::Table =
        text.parse()
            .map_err(|error: toml::de::Error| ConfigError::Syntax {
                path: path.to_path_buf(),
                message: error.to_string().trim().to_string(),
            })?;
    let mut values = Vec::new();
    for (key, value) in &table {
        let Some(setting) = SETTINGS.iter().find(|s| s.key == key) else {
            return Err(ConfigError::Unknown {
                path: path.to_path_buf(),
                key: key.clone(),
                known: SETTINGS
                    .iter()
                    .map(|s| s.key)
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        let values_of = check(setting.kind, value).map_err(|problem| ConfigError::Invalid {
            path: path.to_path_buf(),
            key: key.clone(),
            problem,
        })?;
        values.push(FileValue {
            setting: *setting,
            values: values_of,
        });
    }
    Ok(values)
}

/// The TOML type of `value`, for messages.
fn type_name(value: &toml::Value) -> &'static str {
    match value {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a float",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a date",
        toml::Value::Array(_) => "an array",
        toml::Value::Table(_) => "a table",
    }
}

/// Checks `value` as a `kind`, giving the flag's values.
fn check(kind: Kind, value: &toml::Value) -> Result<Vec<String>, String> {
    let expected = |what: &str| format!("expected {what}, not {}", type_name(value));
    let text = || value.as_str().ok_or_else(|| expected("a string"));
    let one = |text: String| Ok(vec![text]);
    match kind {
        Kind::Text | Kind::Path => {
            let text = text()?;
            if text.is_empty() {
                return Err("empty (leave the key out for the default)".into());
            }
            one(text.to_string())
        }
        Kind::Switch | Kind::Bool => {
            let flag = value.as_bool().ok_or_else(|| expected("true or false"))?;
            one(flag.to_string())
        }
        Kind::Seconds => {
            let seconds = value
                .as_integer()
                .ok_or_else(|| expected("an integer (seconds)"))?;
            if seconds < 0 {
                return Err(format!("{seconds} is negative"));
            }
            one(seconds.to_string())
        }
        Kind::Count => {
            let count = value.as_integer().ok_or_else(|| expected("an integer"))?;
            one(count.to_string())
        }
        Kind::Mtu => {
            let mtu = value.as_integer().ok_or_else(|| expected("an integer"))?;
            parse_mtu(&mtu.to_string())?;
            one(mtu.to_string())
        }
        Kind::Remotes => {
            let text = text()?;
            Remote::parse_list(text).map_err(|e| e.to_string())?;
            one(text.to_string())
        }
        Kind::IpAddress => {
            let text = text()?;
            text.parse::<IpAddr>()
                .map_err(|_| format!("{text:?} is not an IP address"))?;
            one(text.to_string())
        }
        Kind::SocketAddress => {
            let text = text()?;
            text.parse::<SocketAddr>()
                .map_err(|_| format!("{text:?} is not an address:port (e.g. 0.0.0.0:10665)"))?;
            one(text.to_string())
        }
        Kind::BridgeMappings => {
            let text = text()?;
            parse_bridge_mappings(text)?;
            one(text.to_string())
        }
        Kind::List => {
            let items = value
                .as_array()
                .ok_or_else(|| expected("an array of strings"))?;
            items
                .iter()
                .map(|item| match item.as_str() {
                    Some(text) if !text.is_empty() => Ok(text.to_string()),
                    Some(_) => Err("an empty entry".to_string()),
                    None => Err(format!(
                        "expected an array of strings, it holds {}",
                        type_name(item)
                    )),
                })
                .collect()
        }
    }
}

/// An MTU setting: 0 (derived from the uplink) or 68 (IPv4's minimum) to 65535 (a veth's
/// maximum). clap's value parser for `--pod-mtu`.
pub fn parse_mtu(text: &str) -> Result<u32, String> {
    let mtu: u32 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a whole number"))?;
    match mtu {
        0 | 68..=65535 => Ok(mtu),
        _ => Err(format!(
            "{mtu} is out of range: 0 (the uplink's MTU minus 100) or 68 to 65535"
        )),
    }
}

/// `physnet1:eth1,physnet2:eth2` (ovn-bridge-mappings) as (network, NIC) pairs.
pub fn parse_bridge_mappings(text: &str) -> Result<Vec<(String, String)>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(|entry| match entry.split_once(':') {
            Some((network, nic)) if !network.is_empty() && !nic.is_empty() => {
                Ok((network.to_string(), nic.to_string()))
            }
            _ => Err(format!("entry {entry:?} is not NETWORK:NIC")),
        })
        .collect()
}

/// The command line with the configuration file's settings added.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Loaded {
    /// The process's arguments, then `--KEY=VALUE` for each file setting that neither a flag
    /// nor an environment variable gave.
    pub argv: Vec<OsString>,
    /// The file read, if any.
    pub file: Option<PathBuf>,
    /// The settings whose value is the file's.
    pub from_file: BTreeSet<&'static str>,
}

/// Adds the settings of the file that `subcommand`'s `--config` (or [`CONFIG_ENV`]) names to
/// `argv`, where neither a flag nor an environment variable gave them. A command line clap
/// refuses, or one without a file, comes back as it is (clap then reports it as usual).
pub fn with_file(
    command: &Command,
    subcommand: &str,
    argv: Vec<OsString>,
) -> Result<Loaded, ConfigError> {
    let unchanged = |argv| Loaded {
        argv,
        ..Loaded::default()
    };
    // Required flags may come from the file: parsed here without requiring them.
    let relaxed = command
        .clone()
        .mut_subcommand(subcommand, |c| c.mut_args(|a| a.required(false)));
    let Ok(matches) = relaxed.clone().try_get_matches_from(&argv) else {
        return Ok(unchanged(argv));
    };
    let Some(sub) = matches.subcommand_matches(subcommand) else {
        return Ok(unchanged(argv));
    };
    let Some(path) = sub
        .get_raw(CONFIG_FLAG)
        .and_then(|mut raw| raw.next())
        .map(PathBuf::from)
    else {
        return Ok(unchanged(argv));
    };
    let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
        path: path.clone(),
        source,
    })?;
    let values = parse_file(&path, &text)?;
    let Some(flags) = relaxed.find_subcommand(subcommand) else {
        return Ok(unchanged(argv));
    };
    let mut loaded = Loaded {
        argv,
        file: Some(path.clone()),
        from_file: BTreeSet::new(),
    };
    for value in values {
        let key = value.setting.key;
        let Some(arg) = flags.get_arguments().find(|a| a.get_long() == Some(key)) else {
            return Err(ConfigError::Unknown {
                path,
                key: key.to_string(),
                known: "(this build's flags differ from its settings table)".into(),
            });
        };
        if matches!(
            sub.value_source(arg.get_id().as_str()),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) {
            continue;
        }
        loaded.from_file.insert(key);
        match value.setting.kind {
            Kind::Switch => {
                if value.values.first().is_some_and(|v| v == "true") {
                    loaded.argv.push(format!("--{key}").into());
                }
            }
            _ => {
                for item in value.values {
                    loaded.argv.push(format!("--{key}={item}").into());
                }
            }
        }
    }
    Ok(loaded)
}

/// The effective settings of a parsed `subcommand` as a configuration file, each with where its
/// value came from (`flag`, `environment`, `file` or `default`); unset ones as comments.
pub fn effective(
    matches: &clap::ArgMatches,
    command: &Command,
    subcommand: &str,
    from_file: &BTreeSet<&'static str>,
) -> String {
    let (Some(sub), Some(flags)) = (
        matches.subcommand_matches(subcommand),
        command.find_subcommand(subcommand),
    ) else {
        return String::new();
    };
    let mut out = String::new();
    for setting in SETTINGS {
        let Some(arg) = flags
            .get_arguments()
            .find(|a| a.get_long() == Some(setting.key))
        else {
            continue;
        };
        let id = arg.get_id().as_str();
        let raw: Vec<String> = sub
            .get_raw(id)
            .into_iter()
            .flatten()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let source = match sub.value_source(id) {
            _ if from_file.contains(setting.key) => "file",
            Some(ValueSource::CommandLine) => "flag",
            Some(ValueSource::EnvVariable) => "environment",
            _ => "default",
        };
        let quote = |text: &str| serde_json::Value::String(text.to_string()).to_string();
        let value = match setting.kind {
            _ if raw.is_empty() => {
                out.push_str(&format!("# {} is not set\n", setting.key));
                continue;
            }
            Kind::Switch | Kind::Bool | Kind::Seconds | Kind::Count | Kind::Mtu => raw.join(","),
            Kind::List => format!(
                "[{}]",
                raw.iter().map(|v| quote(v)).collect::<Vec<_>>().join(", ")
            ),
            _ => quote(&raw.join(",")),
        };
        out.push_str(&format!("{} = {value}  # {source}\n", setting.key));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<FileValue>, String> {
        parse_file(Path::new("/etc/ovnbpf/config.toml"), text).map_err(|e| e.to_string())
    }

    fn values(text: &str) -> Vec<(&'static str, Vec<String>)> {
        parse(text)
            .unwrap()
            .into_iter()
            .map(|v| (v.setting.key, v.values))
            .collect()
    }

    #[test]
    fn settings_become_the_flags_values() {
        let text = r#"
            # Kube-OVN's ovn-central
            sb-remote = "tcp:10.0.0.1:6642,tcp:10.0.0.2:6642"
            encap-ip = "192.0.2.7"
            encap-csum = false
            monitor-all = true
            bridge-mappings = "physnet1:eth1"
            pod-mtu = 1400
            probe-interval-s = 0
            local-port = ["a.ns", "b.ns=b_h"]
            metrics-address = "0.0.0.0:10665"
            connection-table-entries = 65536
        "#;
        let mut got = values(text);
        got.sort();
        let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            got,
            [
                ("bridge-mappings", owned(&["physnet1:eth1"])),
                ("connection-table-entries", owned(&["65536"])),
                ("encap-csum", owned(&["false"])),
                ("encap-ip", owned(&["192.0.2.7"])),
                ("local-port", owned(&["a.ns", "b.ns=b_h"])),
                ("metrics-address", owned(&["0.0.0.0:10665"])),
                ("monitor-all", owned(&["true"])),
                ("pod-mtu", owned(&["1400"])),
                ("probe-interval-s", owned(&["0"])),
                ("sb-remote", owned(&["tcp:10.0.0.1:6642,tcp:10.0.0.2:6642"])),
            ]
        );
    }

    #[test]
    fn an_unknown_key_is_refused_by_name() {
        let error = parse("sb-remote = \"tcp:1.2.3.4:6642\"\nmtu = 1400\n").unwrap_err();
        assert!(error.contains("unknown setting `mtu`"), "{error}");
        assert!(error.contains("/etc/ovnbpf/config.toml"), "{error}");
        assert!(
            error.contains("pod-mtu"),
            "the known keys are listed: {error}"
        );
        // Sections are not settings either.
        let error = parse("[agent]\nsb-remote = \"tcp:1.2.3.4:6642\"\n").unwrap_err();
        assert!(error.contains("unknown setting `agent`"), "{error}");
    }

    #[test]
    fn a_wrong_type_is_refused_with_the_setting_and_both_types() {
        for (text, key, says) in [
            (
                "pod-mtu = \"1400\"",
                "pod-mtu",
                "expected an integer, not a string",
            ),
            (
                "sb-remote = 6642",
                "sb-remote",
                "expected a string, not an integer",
            ),
            (
                "monitor-all = \"yes\"",
                "monitor-all",
                "expected true or false",
            ),
            (
                "local-port = \"a.ns\"",
                "local-port",
                "expected an array of strings",
            ),
            ("local-port = [1]", "local-port", "holds an integer"),
            ("probe-interval-s = 1.5", "probe-interval-s", "not a float"),
            (
                "connection-table-entries = \"65536\"",
                "connection-table-entries",
                "expected an integer, not a string",
            ),
        ] {
            let error = parse(text).unwrap_err();
            assert!(
                error.contains(&format!("setting `{key}`")) && error.contains(says),
                "{text}: {error}"
            );
        }
    }

    #[test]
    fn bad_values_are_refused_with_the_setting_and_the_reason() {
        for (text, key, says) in [
            (
                "sb-remote = \"ovn-sb:6642\"",
                "sb-remote",
                "expected unix:PATH",
            ),
            ("sb-remote = \"\"", "sb-remote", "empty"),
            ("pod-mtu = 70000", "pod-mtu", "out of range"),
            ("pod-mtu = 50", "pod-mtu", "out of range"),
            ("pod-mtu = -1", "pod-mtu", "not a whole number"),
            ("encap-ip = \"node1\"", "encap-ip", "not an IP address"),
            (
                "metrics-address = \"10665\"",
                "metrics-address",
                "not an address:port",
            ),
            (
                "bridge-mappings = \"physnet1\"",
                "bridge-mappings",
                "NETWORK:NIC",
            ),
            ("cni-gc-grace-s = -5", "cni-gc-grace-s", "negative"),
            ("uplink = \"\"", "uplink", "empty"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(
                error.contains(&format!("setting `{key}`")) && error.contains(says),
                "{text}: {error}"
            );
        }
    }

    #[test]
    fn a_file_that_is_not_toml_says_where() {
        let error = parse("sb-remote = tcp:1.2.3.4:6642\n").unwrap_err();
        assert!(error.contains("is not TOML"), "{error}");
        assert!(error.contains("line 1"), "{error}");
    }

    #[test]
    fn mtus_in_range_pass_and_others_do_not() {
        assert_eq!(parse_mtu("0"), Ok(0));
        assert_eq!(parse_mtu("68"), Ok(68));
        assert_eq!(parse_mtu("65535"), Ok(65535));
        assert!(parse_mtu("67").is_err());
        assert!(parse_mtu("65536").is_err());
        assert!(parse_mtu("x").is_err());
    }

    #[test]
    fn bridge_mappings_parse_into_pairs() {
        assert_eq!(
            parse_bridge_mappings("physnet1:eth1, physnet2:eth2,"),
            Ok(vec![
                ("physnet1".into(), "eth1".into()),
                ("physnet2".into(), "eth2".into())
            ])
        );
        assert_eq!(parse_bridge_mappings(""), Ok(vec![]));
        assert!(parse_bridge_mappings("physnet1:").is_err());
    }
}
