//! A container runtime's side of CNI, for tests: executing a plugin binary with the CNI
//! environment and its configuration on stdin, and running a network configuration list
//! (conflist) the way the spec orders it: ADD and CHECK through the plugins in order, each
//! getting the previous result, DEL in reverse. Plugins are found by `type` in the given
//! directories (CNI_PATH).

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Output, Stdio},
};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::netns::Netns;

/// Who and where: the CNI environment of one pod interface.
#[derive(Clone, Debug)]
pub struct PodAttachment {
    pub container_id: String,
    /// Path of the pod's network namespace (CNI_NETNS); empty for a DEL without one.
    pub netns: String,
    pub if_name: String,
    /// CNI_ARGS, e.g. `K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web`.
    pub args: String,
}

/// Runs plugins, from inside `host` (the node's namespace, as a kubelet on that node would).
pub struct Runtime<'a> {
    host: &'a Netns,
    plugin_dirs: Vec<PathBuf>,
}

impl<'a> Runtime<'a> {
    #[must_use]
    pub fn new(host: &'a Netns, plugin_dirs: Vec<PathBuf>) -> Self {
        Self { host, plugin_dirs }
    }

    fn find(&self, plugin_type: &str) -> Result<PathBuf> {
        self.plugin_dirs
            .iter()
            .map(|dir| dir.join(plugin_type))
            .find(|path| path.exists())
            .with_context(|| format!("no plugin {plugin_type} in {:?}", self.plugin_dirs))
    }

    /// Executes one plugin with `config` on stdin and returns its raw output.
    pub fn exec(
        &self,
        command: &str,
        attachment: &PodAttachment,
        config: &Value,
    ) -> Result<Output> {
        let plugin_type = config["type"].as_str().context("config without type")?;
        let binary = self.find(plugin_type)?;
        let cni_path = std::env::join_paths(&self.plugin_dirs)?;
        let mut child = self
            .host
            .command_entering(binary.as_os_str())?
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", &attachment.container_id)
            .env("CNI_NETNS", &attachment.netns)
            .env("CNI_IFNAME", &attachment.if_name)
            .env("CNI_ARGS", &attachment.args)
            .env("CNI_PATH", cni_path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        child
            .stdin
            .take()
            .context("plugin stdin")?
            .write_all(config.to_string().as_bytes())?;
        Ok(child.wait_with_output()?)
    }

    /// One plugin of `list` with the list's name and version and `prev_result`, as the spec
    /// builds it.
    fn plugin_config(list: &Value, plugin: &Value, prev_result: Option<&Value>) -> Value {
        let mut config = plugin.clone();
        config["name"] = list["name"].clone();
        config["cniVersion"] = list["cniVersion"].clone();
        if let Some(prev) = prev_result {
            config["prevResult"] = prev.clone();
        }
        config
    }

    fn run_checked(
        &self,
        command: &str,
        attachment: &PodAttachment,
        config: &Value,
    ) -> Result<Output> {
        let output = self.exec(command, attachment, config)?;
        if !output.status.success() {
            bail!(
                "{command} {}: {}{}",
                config["type"],
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(output)
    }

    /// ADD through every plugin of conflist `list`; the last result.
    pub fn add(&self, list: &Value, attachment: &PodAttachment) -> Result<Value> {
        let mut result: Option<Value> = None;
        for plugin in plugins(list)? {
            let config = Self::plugin_config(list, plugin, result.as_ref());
            let output = self.run_checked("ADD", attachment, &config)?;
            result =
                Some(serde_json::from_slice(&output.stdout).with_context(|| {
                    format!("{} printed no result: {output:?}", config["type"])
                })?);
        }
        result.context("empty conflist")
    }

    /// CHECK through every plugin in order, each with the ADD result.
    pub fn check(&self, list: &Value, attachment: &PodAttachment, result: &Value) -> Result<()> {
        for plugin in plugins(list)? {
            let config = Self::plugin_config(list, plugin, Some(result));
            self.run_checked("CHECK", attachment, &config)?;
        }
        Ok(())
    }

    /// DEL through every plugin in reverse order, each with the ADD result (if known).
    pub fn del(
        &self,
        list: &Value,
        attachment: &PodAttachment,
        result: Option<&Value>,
    ) -> Result<()> {
        for plugin in plugins(list)?.iter().rev() {
            let config = Self::plugin_config(list, plugin, result);
            self.run_checked("DEL", attachment, &config)?;
        }
        Ok(())
    }
}

fn plugins(list: &Value) -> Result<&Vec<Value>> {
    list["plugins"]
        .as_array()
        .context("conflist without plugins")
}

/// A directory holding `binary` under the plugin type `name` (a symlink), e.g. the workspace's
/// `ovnbpf-cni` as `ovnbpf`.
pub fn plugin_dir(dir: &Path, name: &str, binary: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let link = dir.join(name);
    if !link.exists() {
        std::os::unix::fs::symlink(binary, &link)?;
    }
    Ok(dir.to_path_buf())
}
