//! A real OVN central whose Southbound DB is a RAFT cluster of ovsdb-servers on loopback (created
//! with `ovsdb-tool create-cluster`/`join-cluster`), with a standalone NB and ovn-northd connected
//! to every member. Members can be killed and restarted to exercise leader changes.

use std::{path::Path, process::Command, time::Duration};

use anyhow::{Context, Result, bail};
use tempfile::TempDir;

use crate::{
    ovn::{Db, SCHEMA_DIR, free_loopback_port, serve_db_file, spawn_northd, start_database},
    process::{self, Child, wait_until},
};

const SB_SCHEMA_NAME: &str = "OVN_Southbound";

struct Member {
    name: String,
    client_port: u16,
    server: Option<Child>,
}

/// A running clustered-SB lab.
pub struct ClusterLab {
    // Drop order: northd, members, NB, then the directory.
    northd: Child,
    members: Vec<Member>,
    /// Held so the NB server lives as long as the lab.
    _northbound: Child,
    dir: TempDir,
}

impl ClusterLab {
    /// Starts a `size`-member SB cluster, a standalone NB and northd.
    pub fn start(size: usize) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("ovnbpf-cluster-")
            .tempdir()?;
        let path = dir.path().to_path_buf();
        let (northbound, _) = start_database(&path, Db::Northbound)?;
        let schema = Path::new(SCHEMA_DIR).join("ovn-sb.ovsschema");
        let raft_ports: Vec<u16> = (0..size)
            .map(|_| free_loopback_port())
            .collect::<Result<_>>()?;
        let raft = |i: usize| format!("tcp:127.0.0.1:{}", raft_ports[i]);
        let mut members = Vec::new();
        for i in 0..size {
            let name = format!("sb{i}");
            let db = path.join(format!("{name}.db"));
            let mut command = Command::new("ovsdb-tool");
            if i == 0 {
                command
                    .arg("create-cluster")
                    .arg(&db)
                    .arg(&schema)
                    .arg(raft(0));
            } else {
                command
                    .arg("join-cluster")
                    .arg(&db)
                    .arg(SB_SCHEMA_NAME)
                    .arg(raft(i))
                    .arg(raft(0));
            }
            process::output(&mut command)
                .with_context(|| format!("creating cluster member {name}"))?;
            let client_port = free_loopback_port()?;
            let server = serve_db_file(&path, &name, SB_SCHEMA_NAME, client_port)?;
            members.push(Member {
                name,
                client_port,
                server: Some(server),
            });
        }
        let sb_remotes: Vec<String> = members
            .iter()
            .map(|m| format!("unix:{}", path.join(format!("{}.sock", m.name)).display()))
            .collect();
        let northd = spawn_northd(
            &path,
            &format!("unix:{}", path.join("nb.sock").display()),
            &sb_remotes.join(","),
        )?;
        let lab = Self {
            northd,
            members,
            _northbound: northbound,
            dir,
        };
        let joined = wait_until(Duration::from_secs(20), || {
            (0..size).all(|i| lab.status(i).contains("Status: cluster member"))
        });
        if !joined {
            bail!("the SB cluster did not form: {}", lab.status(0));
        }
        lab.nbctl(&["--wait=sb", "sync"])
            .context("northd did not sync to the clustered SB")?;
        Ok(lab)
    }

    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `cluster/status` output of member `index` ("" if it is down).
    #[must_use]
    pub fn status(&self, index: usize) -> String {
        let ctl = self
            .dir
            .path()
            .join(format!("{}.ctl", self.members[index].name));
        process::run(
            "ovs-appctl",
            &[
                &format!("--target={}", ctl.display()),
                "cluster/status",
                SB_SCHEMA_NAME,
            ],
        )
        .unwrap_or_default()
    }

    /// Index of the current leader, if one is known.
    #[must_use]
    pub fn leader(&self) -> Option<usize> {
        (0..self.members.len())
            .find(|i| self.members[*i].server.is_some() && self.status(*i).contains("Role: leader"))
    }

    /// Comma-separated `tcp:` remotes of every member.
    #[must_use]
    pub fn sb_tcp_remotes(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("tcp:127.0.0.1:{}", m.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn sb_unix_remotes(&self) -> String {
        self.members
            .iter()
            .filter(|m| m.server.is_some())
            .map(|m| {
                format!(
                    "unix:{}",
                    self.dir.path().join(format!("{}.sock", m.name)).display()
                )
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Kills member `index` with SIGKILL (as a crash would).
    pub fn kill(&mut self, index: usize) {
        if let Some(mut server) = self.members[index].server.take() {
            let pid = server.pid();
            if let Ok(pid) = i32::try_from(pid) {
                // SAFETY: kill(2) on the PID of our own child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            server.stop();
        }
    }

    /// Restarts a killed member on its old file and ports.
    pub fn restart(&mut self, index: usize) -> Result<()> {
        let member = &self.members[index];
        let _ = std::fs::remove_file(self.dir.path().join(format!("{}.sock", member.name)));
        let server = serve_db_file(
            self.dir.path(),
            &member.name,
            SB_SCHEMA_NAME,
            member.client_port,
        )?;
        self.members[index].server = Some(server);
        Ok(())
    }

    pub fn nbctl<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Result<String> {
        let nb = format!("--db=unix:{}", self.dir.path().join("nb.sock").display());
        process::output(
            Command::new("ovn-nbctl")
                .arg(nb)
                .arg("--timeout=30")
                .args(args),
        )
    }

    /// `ovn-sbctl` against the live members (it finds the leader itself).
    pub fn sbctl(&self, args: &[&str]) -> Result<String> {
        let sb = format!("--db={}", self.sb_unix_remotes());
        process::output(
            Command::new("ovn-sbctl")
                .arg(sb)
                .arg("--timeout=30")
                .args(args),
        )
    }

    /// Whether northd is still running.
    pub fn northd_running(&mut self) -> bool {
        self.northd.check_running().is_ok()
    }
}
