//! Root integration-test harness for ovnbpf, shared by every integration test and by `cargo xtask`.
//!
//! - [`names`]: unique per-test name prefixes and removal of leftovers from dead test processes;
//! - [`process`]: running commands, and long-running children tracked and ended by PID;
//! - [`netns`]: network namespaces and commands inside them;
//! - [`icmp`]: ICMP echo from inside a namespace without spawning `ping`;
//! - [`frames`]: hand-built Ethernet frames sent from a namespace, and the frames coming back;
//! - [`geneve_capture`]: Geneve frames captured on an underlay link, read back;
//! - [`network`]: nodes, pods and the underlay they share, built from netns and veth pairs;
//! - [`vlan_access`]: the physical switch's VLAN access ports, as tc programs;
//! - [`bpffs`]: per-test pin directories under /sys/fs/bpf, and bpffs mounts of their own;
//! - [`agent`]: `ovnbpf-agent` as a simulated node's agent;
//! - [`cni_runtime`]: a container runtime's side of CNI (plugins, conflists);
//! - [`containerd`]: a real containerd driven through its CRI socket, as kubelet drives it;
//! - [`ovn`]: a real OVN central (NB and SB ovsdb-server, ovn-northd) in a temp dir;
//! - [`oci`]: OCI image archives made without a registry (the sandbox image, ovnbpf's image);
//! - [`pki`]: a throwaway OVS PKI (CA, signed and expired certificates) for TLS tests;
//! - [`ovs_chassis`]: a real OVN chassis (OVS userspace datapath + ovn-controller), the interop peer;
//! - [`kubeovn`]: topologies built through `ovn-nbctl` the way Kube-OVN builds them, and SB read-back;
//! - [`manifests`]: Kubernetes manifests validated against the API's schemas, and read as JSON.
//!
//! Everything here cleans up after itself on drop, which also runs when a test panics.

pub mod agent;
pub mod bpffs;
pub mod cgroup;
pub mod cluster;
pub mod cni_runtime;
pub mod containerd;
pub mod frames;
pub mod geneve_capture;
pub mod icmp;
pub mod kernel_time;
pub mod kubeovn;
pub mod manifests;
pub mod names;
pub mod netns;
pub mod network;
pub mod oci;
pub mod ovn;
pub mod ovs_chassis;
pub mod pki;
pub mod process;
pub mod raw_bpf;
pub mod sbdump;
pub mod scenario;
pub mod vlan_access;

/// A binary of the workspace built alongside the running test (`cargo xtask test` builds every
/// package's binaries into the same target directory before it runs the tests).
#[must_use]
pub fn workspace_binary(name: &str) -> std::path::PathBuf {
    let path = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent()?.parent().map(|dir| dir.join(name)))
        .unwrap_or_else(|| std::path::PathBuf::from(name));
    assert!(
        path.exists(),
        "{} missing: run the suite with `cargo xtask test` (it builds the workspace's binaries)",
        path.display()
    );
    path
}

/// Whether the process runs as root.
#[must_use]
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Fails with a clear message unless the process runs as root (netns, eBPF and OVN need it).
pub fn require_root() {
    assert!(
        is_root(),
        "ovnbpf integration tests need root (netns, veth, eBPF); run them as root"
    );
}
