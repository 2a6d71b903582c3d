//! A real OVN central for tests and `cargo xtask lab`: NB and SB `ovsdb-server` plus `ovn-northd`
//! from Debian's packages, in a directory of their own, listening on unix sockets and on free
//! loopback TCP ports. Processes are children of the harness and are ended by PID, never by name.

use std::{
    net::{Ipv4Addr, TcpListener},
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{Context, Result, bail};
use tempfile::TempDir;

use crate::process::{self, Child, wait_until};

pub(crate) const SCHEMA_DIR: &str = "/usr/share/ovn";
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// One of the two OVN databases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Db {
    Northbound,
    Southbound,
}

impl Db {
    fn short(self) -> &'static str {
        match self {
            Db::Northbound => "nb",
            Db::Southbound => "sb",
        }
    }

    fn schema_name(self) -> &'static str {
        match self {
            Db::Northbound => "OVN_Northbound",
            Db::Southbound => "OVN_Southbound",
        }
    }
}

/// Where the lab keeps its files: a temp dir removed on drop, or a fixed dir kept for manual use.
#[derive(Debug)]
enum LabDir {
    Temporary(TempDir),
    Kept(PathBuf),
}

impl LabDir {
    fn path(&self) -> &Path {
        match self {
            LabDir::Temporary(dir) => dir.path(),
            LabDir::Kept(path) => path,
        }
    }
}

/// A running OVN central.
#[derive(Debug)]
pub struct OvnLab {
    // Field order is drop order: processes stop before their directory is removed.
    northd: Child,
    southbound: Child,
    northbound: Child,
    nb_port: u16,
    sb_port: u16,
    dir: LabDir,
}

impl OvnLab {
    /// Starts a lab in a fresh temp dir, removed with everything in it when the lab is dropped.
    pub fn start() -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("ovnbpf-lab-")
            .tempdir()
            .context("creating lab dir")?;
        Self::start_in(LabDir::Temporary(dir))
    }

    /// Starts a lab whose files live in `dir` (created if needed, database files replaced).
    pub fn start_kept(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        Self::start_in(LabDir::Kept(dir.to_path_buf()))
    }

    fn start_in(dir: LabDir) -> Result<Self> {
        for tool in [
            "ovsdb-tool",
            "ovsdb-server",
            "ovn-northd",
            "ovn-nbctl",
            "ovn-sbctl",
        ] {
            if which(tool).is_none() {
                bail!("{tool} is not installed; run `cargo xtask setup`");
            }
        }
        let (northbound, nb_port) = start_database(dir.path(), Db::Northbound)?;
        let (southbound, sb_port) = start_database(dir.path(), Db::Southbound)?;
        let path = dir.path();
        let northd = spawn_northd(
            path,
            &format!("unix:{}", path.join("nb.sock").display()),
            &format!("unix:{}", path.join("sb.sock").display()),
        )?;
        let mut lab = Self {
            northd,
            southbound,
            northbound,
            nb_port,
            sb_port,
            dir,
        };
        // `--wait=sb sync` returns once northd has processed the NB: proof that it is up.
        if let Err(error) = lab.nbctl(&["--wait=sb", "sync"]) {
            lab.northd.check_running()?;
            return Err(error.context("ovn-northd did not sync NB to SB"));
        }
        Ok(lab)
    }

    /// The lab's directory (databases, sockets, logs).
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `unix:` remote of a database.
    #[must_use]
    pub fn unix_remote(&self, db: Db) -> String {
        format!(
            "unix:{}",
            self.dir().join(format!("{}.sock", db.short())).display()
        )
    }

    /// `tcp:127.0.0.1:PORT` remote of a database.
    #[must_use]
    pub fn tcp_remote(&self, db: Db) -> String {
        let port = match db {
            Db::Northbound => self.nb_port,
            Db::Southbound => self.sb_port,
        };
        format!("tcp:127.0.0.1:{port}")
    }

    /// PIDs of ovsdb-server (NB), ovsdb-server (SB) and ovn-northd.
    #[must_use]
    pub fn pids(&self) -> [u32; 3] {
        [
            self.northbound.pid(),
            self.southbound.pid(),
            self.northd.pid(),
        ]
    }

    /// Runs `ovn-nbctl` against the lab's NB and returns stdout.
    pub fn nbctl<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Result<String> {
        let mut command = Command::new("ovn-nbctl");
        command
            .arg(format!("--db={}", self.unix_remote(Db::Northbound)))
            .arg("--timeout=30");
        process::output(command.args(args))
    }

    /// Runs `ovn-sbctl` against the lab's SB and returns stdout.
    pub fn sbctl<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Result<String> {
        let mut command = Command::new("ovn-sbctl");
        command
            .arg(format!("--db={}", self.unix_remote(Db::Southbound)))
            .arg("--timeout=30");
        process::output(command.args(args))
    }

    /// Makes the SB also listen for TLS on a loopback port, with `server`'s key and certificate
    /// and clients checked against `ca_cert`, as ovn-central does (`set-ssl`, `set-connection`);
    /// with `role`, the connection runs under that RBAC role (northd defines `ovn-controller`).
    /// Returns the `ssl:` remote once the port accepts connections.
    pub fn serve_southbound_ssl(
        &self,
        server: &crate::pki::Identity,
        ca_cert: &Path,
        role: Option<&str>,
    ) -> Result<String> {
        self.sbctl(&[
            "set-ssl".as_ref(),
            server.key.as_os_str(),
            server.cert.as_os_str(),
            ca_cert.as_os_str(),
        ])?;
        let port = free_loopback_port()?;
        let target = format!("pssl:{port}:{}", Ipv4Addr::LOCALHOST);
        let mut args = vec!["set-connection".to_string()];
        args.extend(role.map(|role| format!("role={role}")));
        args.push(target);
        self.sbctl(&args)?;
        let listening = wait_until(START_TIMEOUT, || {
            std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok()
        });
        if !listening {
            bail!("the Southbound did not listen on {port} for TLS");
        }
        Ok(format!("ssl:{}:{port}", Ipv4Addr::LOCALHOST))
    }

    /// Stops the SB's plain TCP listener (`ptcp:`), so that over the network it is served only
    /// as [`Self::serve_southbound_ssl`] set it up (its unix socket stays, for northd and the
    /// harness's tools, as ovn-central keeps its local socket). Returns once the port refuses.
    pub fn stop_southbound_tcp(&self) -> Result<()> {
        let target = format!("ptcp:{}:{}", self.sb_port, Ipv4Addr::LOCALHOST);
        let control = self
            .dir
            .path()
            .join(format!("{}.ctl", Db::Southbound.short()));
        process::output(
            Command::new("ovs-appctl")
                .arg("-t")
                .arg(&control)
                .args(["ovsdb-server/remove-remote", &target]),
        )?;
        let refused = wait_until(START_TIMEOUT, || {
            std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, self.sb_port)).is_err()
        });
        if !refused {
            bail!("the Southbound still accepts plain TCP on {}", self.sb_port);
        }
        Ok(())
    }

    /// Stops the database server of `db` (clients see the connection drop; the file stays).
    pub fn stop_database(&mut self, db: Db) {
        match db {
            Db::Northbound => self.northbound.stop(),
            Db::Southbound => self.southbound.stop(),
        }
    }

    /// Starts the database server of `db` again on the same file, socket and TCP port.
    pub fn start_database(&mut self, db: Db) -> Result<()> {
        let (port, slot) = match db {
            Db::Northbound => (self.nb_port, &mut self.northbound),
            Db::Southbound => (self.sb_port, &mut self.southbound),
        };
        slot.stop();
        let _ = std::fs::remove_file(self.dir.path().join(format!("{}.sock", db.short())));
        *slot = serve_database(self.dir.path(), db, port)?;
        Ok(())
    }

    /// Leaves the daemons running after this value is gone (for `cargo xtask lab up`) and
    /// returns their PIDs (NB server, SB server, northd). The directory must be a kept one.
    pub fn detach(self) -> Result<[u32; 3]> {
        let Self {
            northd,
            southbound,
            northbound,
            dir,
            ..
        } = self;
        if matches!(dir, LabDir::Temporary(_)) {
            bail!("a lab in a temporary directory cannot outlive its owner");
        }
        Ok([northbound.detach(), southbound.detach(), northd.detach()])
    }
}

/// Starts ovn-northd between `nb` and `sb` (remotes), logging into `dir`.
pub(crate) fn spawn_northd(dir: &Path, nb: &str, sb: &str) -> Result<Child> {
    Child::spawn(
        "ovn-northd",
        Command::new("ovn-northd")
            .arg(format!("--ovnnb-db={nb}"))
            .arg(format!("--ovnsb-db={sb}"))
            .arg(format!("--unixctl={}", dir.join("northd.ctl").display()))
            .arg(format!("--log-file={}", dir.join("northd.log").display()))
            .process_group(0),
        Some(dir.join("northd.stderr")),
    )
}

/// Creates `<db>.db` from the packaged schema and starts its ovsdb-server on `<db>.sock` and a
/// free loopback TCP port; returns once the server answers on both.
pub(crate) fn start_database(dir: &Path, db: Db) -> Result<(Child, u16)> {
    let db_file = dir.join(format!("{}.db", db.short()));
    let _ = std::fs::remove_file(&db_file);
    let schema = Path::new(SCHEMA_DIR).join(format!("ovn-{}.ovsschema", db.short()));
    process::output(
        Command::new("ovsdb-tool")
            .arg("create")
            .arg(&db_file)
            .arg(&schema),
    )
    .with_context(|| format!("creating the {} database", db.schema_name()))?;
    // A port picked by binding to :0 can be taken by someone else before ovsdb-server binds it,
    // so `serve_database` verifies who answers; retry with another port if it is not our server.
    let mut last_error = None;
    for _ in 0..3 {
        let port = free_loopback_port()?;
        match serve_database(dir, db, port) {
            Ok(server) => return Ok((server, port)),
            Err(error) => last_error = Some(error),
        }
    }
    Err(last_error
        .unwrap_or_else(|| anyhow::anyhow!("ovsdb-server ({}) did not start", db.short())))
}

/// Starts ovsdb-server for the existing `<db>.db` on `<db>.sock` and loopback `port`; returns once
/// it answers on both.
fn serve_database(dir: &Path, db: Db, port: u16) -> Result<Child> {
    serve_db_file(dir, db.short(), db.schema_name(), port)
}

/// Starts ovsdb-server for `<name>.db` (holding `schema_name`) on `<name>.sock` and loopback
/// `port`, with control socket `<name>.ctl`; returns once it answers on both.
pub(crate) fn serve_db_file(dir: &Path, name: &str, schema_name: &str, port: u16) -> Result<Child> {
    let socket = dir.join(format!("{name}.sock"));
    // As ovn-ctl starts them: more remotes from the database's connections (`set-connection`)
    // and TLS settings from its SSL table (`set-ssl`), both empty until a test sets them.
    let from_db = |column: &str| format!("db:{schema_name},{column}");
    let global = match schema_name {
        "OVN_Northbound" => "NB_Global",
        _ => "SB_Global",
    };
    let mut server = Child::spawn(
        &format!("ovsdb-server ({name})"),
        Command::new("ovsdb-server")
            .arg(dir.join(format!("{name}.db")))
            .arg(format!("--remote=punix:{}", socket.display()))
            .arg(format!("--remote=ptcp:{port}:{}", Ipv4Addr::LOCALHOST))
            .arg(format!(
                "--remote={}",
                from_db(&format!("{global},connections"))
            ))
            .arg(format!("--private-key={}", from_db("SSL,private_key")))
            .arg(format!("--certificate={}", from_db("SSL,certificate")))
            .arg(format!("--ca-cert={}", from_db("SSL,ca_cert")))
            .arg(format!(
                "--unixctl={}",
                dir.join(format!("{name}.ctl")).display()
            ))
            .arg(format!(
                "--log-file={}",
                dir.join(format!("{name}.log")).display()
            ))
            .process_group(0),
        Some(dir.join(format!("{name}.stderr"))),
    )?;
    let answers = |remote: &str| {
        process::run("ovsdb-client", &["--timeout=2", "list-dbs", remote])
            .is_ok_and(|dbs| dbs.lines().any(|line| line == schema_name))
    };
    let unix = format!("unix:{}", socket.display());
    let tcp = format!("tcp:127.0.0.1:{port}");
    if wait_until(START_TIMEOUT, || socket.exists() && answers(&unix)) && answers(&tcp) {
        return Ok(server);
    }
    server.check_running()?;
    bail!("ovsdb-server ({name}) did not answer on {unix} and {tcp}")
}

pub(crate) fn free_loopback_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// Full path of `program` on PATH.
#[must_use]
pub fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join(program))
        .find(|path| path.is_file())
}
