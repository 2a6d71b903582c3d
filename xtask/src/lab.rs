//! `cargo xtask lab up|down|status`: the tests' real OVN central, kept running for manual work.
//! State lives in one directory (default /tmp/ovnbpf-lab, or $OVNBPF_LAB_DIR): databases, sockets,
//! logs and a `pids` file. `down` ends exactly the PIDs recorded there, after checking that each
//! still runs an OVN daemon.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context, Result, bail};
use ovnbpf_tests::{
    ovn::{Db, OvnLab},
    process::{terminate_pid, wait_until},
};

use crate::demo::topology;

fn lab_dir() -> PathBuf {
    std::env::var_os("OVNBPF_LAB_DIR")
        .map_or_else(|| PathBuf::from("/tmp/ovnbpf-lab"), PathBuf::from)
}

fn pids_file(dir: &Path) -> PathBuf {
    dir.join("pids")
}

/// PIDs recorded for the lab that still run an OVN daemon.
fn live_pids(dir: &Path) -> Vec<u32> {
    let text = std::fs::read_to_string(pids_file(dir)).unwrap_or_default();
    text.split_whitespace()
        .filter_map(|p| p.parse().ok())
        .filter(|pid| is_ovn_daemon(*pid))
        .collect()
}

fn is_ovn_daemon(pid: u32) -> bool {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let cmdline = String::from_utf8_lossy(&cmdline);
    cmdline.starts_with("ovsdb-server") || cmdline.starts_with("ovn-northd")
}

pub fn run(args: &[String]) -> Result<()> {
    let dir = lab_dir();
    match args.first().map(String::as_str) {
        Some("up") => up(&dir, args.iter().any(|a| a == "--demo")),
        Some("down") => down(&dir),
        Some("status") | None => status(&dir),
        Some(other) => bail!("unknown lab command `{other}` (up [--demo] | down | status)"),
    }
}

fn up(dir: &Path, demo: bool) -> Result<()> {
    if !live_pids(dir).is_empty() {
        println!("lab already running in {}", dir.display());
        return status(dir);
    }
    println!("== lab: building the agent, ovnbpfctl and the CNI plugin");
    let binaries = crate::cmd::build_binaries(crate::cmd::Profile::Debug)?;
    let lab = OvnLab::start_kept(dir)?;
    if demo {
        topology::build()?.apply(&lab)?;
    }
    let env = format!(
        "export OVN_NB_DB={} OVN_SB_DB={}\n",
        lab.unix_remote(Db::Northbound),
        lab.unix_remote(Db::Southbound)
    );
    let tcp = format!(
        "# TCP: NB {}  SB {}\n",
        lab.tcp_remote(Db::Northbound),
        lab.tcp_remote(Db::Southbound)
    );
    let pids = lab.detach()?;
    let pid_text = pids
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(" ");
    std::fs::write(pids_file(dir), pid_text).context("recording lab PIDs")?;
    std::fs::write(dir.join("env"), format!("{env}{tcp}")).context("writing lab env file")?;
    println!("lab up in {} (PIDs {pids:?})", dir.display());
    print!("{env}{tcp}");
    println!(
        "# or: eval \"$(grep ^export {}/env)\"; then ovn-nbctl show / ovn-sbctl show",
        dir.display()
    );
    println!(
        "# ovnbpf against it: {} lflow coverage --remote $OVN_SB_DB\n#   (agent: {}, CNI plugin: {})",
        binaries.ctl.display(),
        binaries.agent.display(),
        binaries.cni.display()
    );
    Ok(())
}

fn down(dir: &Path) -> Result<()> {
    let pids = live_pids(dir);
    for pid in &pids {
        terminate_pid(*pid);
    }
    let stopped = wait_until(Duration::from_secs(5), || {
        pids.iter().all(|pid| !is_ovn_daemon(*pid))
    });
    if !stopped {
        bail!("lab daemons {pids:?} did not exit after SIGTERM");
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    println!("lab down ({} processes stopped)", pids.len());
    Ok(())
}

fn status(dir: &Path) -> Result<()> {
    let pids = live_pids(dir);
    if pids.is_empty() {
        println!("lab not running (start it with `cargo xtask lab up [--demo]`)");
        return Ok(());
    }
    println!("lab running in {}: PIDs {pids:?}", dir.display());
    print!(
        "{}",
        std::fs::read_to_string(dir.join("env")).unwrap_or_default()
    );
    Ok(())
}
