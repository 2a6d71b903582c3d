//! The harness removes leftovers of test processes that died without cleaning up (SIGKILL, abort)
//! and leaves alone what live processes own.

use std::process::Command;

use ovnbpf_tests::{bpffs::PinDir, names, netns, require_root};

#[test]
fn stale_resources_of_dead_processes_are_reaped() {
    require_root();
    // A PID that certainly belonged to a process that has exited.
    let mut child = Command::new("true").spawn().unwrap();
    let dead_pid = child.id();
    child.wait().unwrap();

    let stale_netns = format!("{}-{dead_pid}-0-node1", names::PREFIX);
    let stale_pins = std::path::Path::new(ovnbpf_tests::bpffs::BPFFS)
        .join(format!("{}-{dead_pid}-0-pins", names::PREFIX));
    ovnbpf_tests::process::run("ip", &["netns", "add", &stale_netns]).unwrap();
    std::fs::create_dir_all(&stale_pins).unwrap();
    let live = PinDir::create(&names::unique_prefix()).unwrap();
    let live_netns = netns::Netns::create(&format!("{}-live", names::unique_prefix())).unwrap();

    let reaped = names::reap_stale();
    let still_there = netns::list_named();
    // Clean up first so a failed assertion leaves nothing behind.
    let _ = netns::delete_named(&stale_netns);
    let _ = std::fs::remove_dir_all(&stale_pins);

    assert!(reaped.namespaces.contains(&stale_netns), "{reaped:?}");
    assert!(!still_there.contains(&stale_netns));
    assert!(
        reaped.pin_dirs.iter().any(|d| stale_pins.ends_with(d)),
        "{reaped:?}"
    );
    assert!(
        still_there.contains(&live_netns.name().to_string()),
        "a live test's netns was reaped"
    );
    assert!(live.path().exists(), "a live test's pin dir was reaped");
}
