//! Named network namespaces (`ip netns add`), owned by a guard that deletes them on drop, and
//! commands run inside them. Deleting a namespace also removes every interface inside it and the
//! veth peers of those interfaces, wherever they are.

use std::{path::PathBuf, process::Command};

use anyhow::{Context, Result};

use crate::process::{self, Child};

/// Names of the namespaces in /run/netns.
#[must_use]
pub fn list_named() -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Deletes the named namespace (`ip netns delete`).
pub fn delete_named(name: &str) -> Result<()> {
    process::run("ip", &["netns", "delete", name]).map(drop)
}

/// A network namespace created by the harness, deleted when dropped.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates namespace `name` with its loopback up.
    pub fn create(name: &str) -> Result<Self> {
        process::run("ip", &["netns", "add", name])
            .with_context(|| format!("creating network namespace {name}"))?;
        let netns = Self {
            name: name.to_string(),
        };
        netns.ip(&["link", "set", "lo", "up"])?;
        Ok(netns)
    }

    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `/run/netns/<name>`, for setns(2).
    #[must_use]
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/run/netns/{}", self.name))
    }

    /// A command that runs `program` inside this namespace.
    #[must_use]
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name, program]);
        command
    }

    /// Runs `program args…` inside the namespace and returns stdout.
    pub fn exec<S: AsRef<std::ffi::OsStr>>(&self, program: &str, args: &[S]) -> Result<String> {
        process::output(self.command(program).args(args))
    }

    /// Runs `ip args…` against this namespace.
    pub fn ip(&self, args: &[&str]) -> Result<String> {
        let mut command = Command::new("ip");
        command.args(["-n", &self.name]).args(args);
        process::output(&mut command)
    }

    /// Starts a long-running `program args…` inside the namespace. `ip netns exec` execs the
    /// program, so the returned guard's PID is the program's own.
    pub fn spawn<S: AsRef<std::ffi::OsStr>>(
        &self,
        label: &str,
        program: &str,
        args: &[S],
        log: Option<PathBuf>,
    ) -> Result<Child> {
        Child::spawn(label, self.command(program).args(args), log)
    }

    /// Index of interface `name` inside this namespace.
    pub fn ifindex(&self, interface: &str) -> Result<u32> {
        let text = self.exec("cat", &[format!("/sys/class/net/{interface}/ifindex")])?;
        text.trim()
            .parse()
            .with_context(|| format!("ifindex of {interface} in {}: {text:?}", self.name))
    }

    /// MAC address of interface `name` inside this namespace.
    pub fn mac(&self, interface: &str) -> Result<String> {
        Ok(self
            .exec("cat", &[format!("/sys/class/net/{interface}/address")])?
            .trim()
            .to_string())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(error) = delete_named(&self.name) {
            eprintln!(
                "warning: could not delete network namespace {}: {error:#}",
                self.name
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::unique_prefix;

    #[test]
    fn namespace_exists_until_dropped() {
        crate::require_root();
        let name = format!("{}-solo", unique_prefix());
        let netns = Netns::create(&name).unwrap();
        assert!(list_named().contains(&name));
        let links = netns.ip(&["-o", "link", "show"]).unwrap();
        assert!(links.contains("lo:") && links.contains("UP"), "{links}");
        drop(netns);
        assert!(!list_named().contains(&name));
    }
}
