//! deploy/'s Kubernetes manifests: they validate against the Kubernetes schemas (strictly, for
//! the oldest and the newest Kubernetes we claim), and they agree with the binaries they run: the
//! agent knows every flag and environment variable the DaemonSet gives it and takes the
//! ConfigMap's configuration file as shipped (mounted where `--config` points), the probes ask
//! the port that file has the agent serve them on, and the init container's `install-cni` writes exactly the
//! conflist deploy/ ships, as Kube-OVN's file, mode 0600, with the plugin beside it.

use std::{os::unix::fs::PermissionsExt as _, path::PathBuf};

use ovnbpf_tests::{manifests, workspace_binary};
use serde_json::Value;

fn deploy_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn daemonset() -> Value {
    let documents = manifests::documents(&deploy_dir().join("kubernetes/ovnbpf.yaml")).unwrap();
    documents
        .into_iter()
        .find(|d| d["kind"] == "DaemonSet")
        .expect("a DaemonSet in deploy/kubernetes/ovnbpf.yaml")
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

#[test]
fn manifests_validate_against_the_kubernetes_schemas() {
    let dir = deploy_dir().join("kubernetes");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            for version in ["1.27.0", "1.37.0"] {
                manifests::validate(&path, version).unwrap_or_else(|e| panic!("{e}"));
            }
            files += 1;
        }
    }
    assert!(files > 0, "no manifest in {}", dir.display());
}

#[test]
fn the_daemonset_gives_the_agent_only_what_it_understands() {
    let daemonset = daemonset();
    let documents = manifests::documents(&deploy_dir().join("kubernetes/ovnbpf.yaml")).unwrap();
    let agent = &daemonset["spec"]["template"]["spec"]["containers"][0];
    let command = strings(&agent["command"]);
    assert_eq!(command, ["/usr/local/bin/ovnbpf-agent", "run"]);

    // Every flag parses: clap stops at the first unknown one, before it prints the help.
    let args = strings(&agent["args"]);
    let help = std::process::Command::new(workspace_binary("ovnbpf-agent"))
        .arg("run")
        .args(&args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(help.status.success(), "{args:?}: {help:?}");
    let help = String::from_utf8_lossy(&help.stdout);

    // Every variable the agent gets is one of its flags' (RUST_LOG is the log filter).
    let variables: Vec<String> = agent["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["name"].as_str().map(str::to_string))
        .collect();
    for variable in variables.iter().filter(|v| *v != "RUST_LOG") {
        assert!(
            help.contains(&format!("[env: {variable}=")),
            "the agent reads no {variable}:\n{help}"
        );
    }

    // The configuration file: the ConfigMap's config.toml, mounted where --config points.
    let config_path = args
        .iter()
        .find_map(|a| a.strip_prefix("--config="))
        .expect("--config=FILE");
    let (config_dir, config_name) = config_path.rsplit_once('/').unwrap();
    let config_map = documents
        .iter()
        .find(|d| d["kind"] == "ConfigMap")
        .expect("the agent's ConfigMap");
    let volumes = daemonset["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap();
    let volume = volumes
        .iter()
        .find(|v| v["configMap"]["name"] == config_map["metadata"]["name"])
        .expect("a volume of the ConfigMap");
    let mount = agent["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == volume["name"])
        .expect("the ConfigMap mounted in the agent");
    assert_eq!(mount["mountPath"], config_dir);
    let text = config_map["data"][config_name]
        .as_str()
        .unwrap_or_else(|| panic!("no {config_name} in the ConfigMap"));

    // The agent takes the file as shipped, with the DaemonSet's other arguments and (standing
    // for the node's fields) its environment, and says what it would run with.
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join(config_name);
    std::fs::write(&file, text).unwrap();
    let mut check = std::process::Command::new(workspace_binary("ovnbpf-agent"));
    check
        .arg("run")
        .args(args.iter().filter(|a| !a.starts_with("--config=")))
        .arg("--config")
        .arg(&file)
        .arg("--check-config")
        .env_clear();
    for variable in &variables {
        check.env(variable, "192.0.2.1");
    }
    let checked = check.output().unwrap();
    let effective = String::from_utf8_lossy(&checked.stdout);
    assert!(
        checked.status.success(),
        "{effective}{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    let setting = |key: &str| -> Option<String> {
        effective.lines().find_map(|line| {
            let value = line.strip_prefix(key)?.strip_prefix(" = ")?;
            Some(value.split("  # ").next()?.trim_matches('"').to_string())
        })
    };
    assert_eq!(
        setting("encap-ip").as_deref(),
        Some("192.0.2.1"),
        "{effective}"
    );

    // The probes ask the port the metrics (and probes) are served on.
    let metrics_port = setting("metrics-address")
        .and_then(|address| address.rsplit(':').next()?.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no metrics-address in:\n{effective}"));
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/livez")] {
        assert_eq!(agent[probe]["httpGet"]["path"], path);
        assert_eq!(agent[probe]["httpGet"]["port"], metrics_port, "{probe}");
    }
    // Not privileged; the capabilities named in the manifest's comments, nothing else.
    let security = &agent["securityContext"];
    assert_eq!(security["privileged"], false);
    assert_eq!(strings(&security["capabilities"]["drop"]), ["ALL"]);
    let mut added = strings(&security["capabilities"]["add"]);
    added.sort();
    assert_eq!(
        added,
        ["BPF", "NET_ADMIN", "NET_RAW", "PERFMON", "SYS_ADMIN"]
    );
}

#[test]
fn the_init_container_installs_the_shipped_conflist_and_the_plugin() {
    let daemonset = daemonset();
    let init = &daemonset["spec"]["template"]["spec"]["initContainers"][0];
    let command = strings(&init["command"]);
    assert_eq!(command, ["/usr/local/bin/ovnbpf-agent", "install-cni"]);
    let mounts: Vec<String> = init["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["mountPath"].as_str().map(str::to_string))
        .collect();
    assert!(mounts.contains(&"/opt/cni/bin".to_string()), "{mounts:?}");
    assert!(mounts.contains(&"/etc/cni/net.d".to_string()), "{mounts:?}");

    // The same command, into scratch directories standing for the node's.
    let scratch = tempfile::tempdir().unwrap();
    let (bin, conf) = (scratch.path().join("bin"), scratch.path().join("net.d"));
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&conf).unwrap();
    let plugin = workspace_binary("ovnbpf-cni");
    let status = std::process::Command::new(workspace_binary("ovnbpf-agent"))
        .arg("install-cni")
        .arg("--plugin")
        .arg(&plugin)
        .arg("--bin-dir")
        .arg(&bin)
        .arg("--conf-dir")
        .arg(&conf)
        .arg("--no-sysctl")
        .status()
        .unwrap();
    assert!(status.success());
    let written = conf.join("01-kube-ovn.conflist");
    assert_eq!(
        std::fs::read(&written).unwrap(),
        std::fs::read(deploy_dir().join("cni/01-ovnbpf.conflist")).unwrap(),
        "the installed conflist differs from deploy/'s"
    );
    assert_eq!(
        std::fs::metadata(&written).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::read(bin.join("ovnbpf")).unwrap(),
        std::fs::read(&plugin).unwrap()
    );
}
