//! `ovnbpf-agent run --config FILE` as an operator meets it: a bad file stops the agent at start
//! (non-zero exit, before it connects anywhere) with a message naming the file and the setting;
//! a good one gives its values where neither a flag nor the environment does
//! (`--check-config` prints the effective settings and where each came from).

use std::process::{Command, Output};

const AGENT: &str = env!("CARGO_BIN_EXE_ovnbpf-agent");

/// Runs the agent with only `env` in its environment.
fn agent(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(AGENT)
        .args(args)
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn config(text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(&path, text).unwrap();
    let path = path.display().to_string();
    (dir, path)
}

#[test]
fn a_bad_file_stops_the_agent_with_the_setting_named() {
    // The remote would never answer: the agent must fail on the file, not wait for it.
    let base = "sb-remote = \"tcp:127.0.0.1:9\"\nencap-ip = \"127.0.0.1\"\n";
    for (bad, says) in [
        ("mtu = 1400", "unknown setting `mtu`"),
        (
            "pod-mtu = \"1400\"",
            "setting `pod-mtu`: expected an integer, not a string",
        ),
        (
            "pod-mtu = 70000",
            "setting `pod-mtu`: 70000 is out of range",
        ),
        (
            "probe-interval-s = -1",
            "setting `probe-interval-s`: -1 is negative",
        ),
        (
            "monitor-all = 1",
            "setting `monitor-all`: expected true or false",
        ),
    ] {
        let (_dir, path) = config(&format!("{base}{bad}\n"));
        let output = agent(&["run", "--config", &path], &[]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{bad}: {stderr}");
        assert!(stderr.contains(says), "{bad}: {stderr}");
        assert!(stderr.contains(&path), "{bad}: the file is named: {stderr}");
    }
    // A remote that does not parse is named the same way, wherever it came from.
    let (_dir, path) = config("sb-remote = \"ovn-sb:6642\"\nencap-ip = \"127.0.0.1\"\n");
    let output = agent(&["run", "--config", &path], &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("setting `sb-remote`"), "{stderr}");
    let output = agent(
        &["run", "--encap-ip", "127.0.0.1"],
        &[("OVN_SB_REMOTE", "ovn-sb:6642")],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("--sb-remote"), "{stderr}");
    // A missing file, too.
    let output = agent(&["run", "--config", "/nonexistent/ovnbpf.toml"], &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("/nonexistent/ovnbpf.toml"), "{stderr}");
    // And an MTU out of range from the environment, by its flag.
    let output = agent(
        &[
            "run",
            "--sb-remote",
            "tcp:127.0.0.1:9",
            "--encap-ip",
            "127.0.0.1",
        ],
        &[("OVNBPF_POD_MTU", "70000")],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("--pod-mtu"), "{stderr}");
}

#[test]
fn flags_override_the_environment_which_overrides_the_file() {
    let (_dir, path) = config(
        "# as a ConfigMap would carry it\n\
         sb-remote = \"tcp:192.0.2.1:6642\"\n\
         encap-ip = \"192.0.2.7\"\n\
         pod-mtu = 1400\n\
         probe-interval-s = 5\n\
         bridge-mappings = \"physnet1:eth1\"\n\
         local-port = [\"web.ns=web_h\"]\n",
    );
    let output = agent(
        &["run", "--check-config", "--probe-interval-s", "7"],
        &[
            ("OVNBPF_CONFIG", path.as_str()),
            ("OVN_ENCAP_IP", "198.51.100.9"),
            ("OVN_BRIDGE_MAPPINGS", "physnet2:eth2"),
        ],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for line in [
        "sb-remote = \"tcp:192.0.2.1:6642\"  # file",
        "encap-ip = \"198.51.100.9\"  # environment",
        "bridge-mappings = \"physnet2:eth2\"  # environment",
        "pod-mtu = 1400  # file",
        "probe-interval-s = 7  # flag",
        "local-port = [\"web.ns=web_h\"]  # file",
        "cni-gc-grace-s = 60  # default",
        "# uplink is not set",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "no {line:?} in:\n{stdout}"
        );
    }
}
