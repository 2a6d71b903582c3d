//! Installing the CNI plugin on a node (the DaemonSet's init container runs
//! `ovnbpf-agent install-cni`): the plugin binary copied into the runtime's plugin directory as
//! `ovnbpf`, and the network configuration shipped in `deploy/cni/01-ovnbpf.conflist` written as
//! `01-kube-ovn.conflist` (Kube-OVN's file name, so it takes the place of Kube-OVN's), mode 0600
//! as Kube-OVN writes it. Both are written to a temporary file in the target directory and
//! renamed, so a runtime never reads half a file. Touches only those two files.

use std::{
    io::Write as _,
    os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
};

use thiserror::Error;

/// The network configuration the DaemonSet installs: exactly the file `deploy/` ships.
pub const CONFLIST: &str = include_str!("../../../deploy/cni/01-ovnbpf.conflist");
/// Its file name on the node: Kube-OVN's.
pub const CONFLIST_NAME: &str = "01-kube-ovn.conflist";
/// The plugin's name in the runtime's plugin directory (the conflist's `type`).
pub const PLUGIN_NAME: &str = "ovnbpf";

#[derive(Debug, Error)]
pub enum InstallError {
    #[error("reading the plugin binary {path}: {source}")]
    ReadPlugin {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Where [`install`] put the two files.
#[derive(Debug, PartialEq, Eq)]
pub struct Installed {
    pub plugin: PathBuf,
    pub conflist: PathBuf,
}

/// Copies `plugin` to `<bin_dir>/ovnbpf` (mode 0755) and writes [`CONFLIST`] to
/// `<conf_dir>/01-kube-ovn.conflist` (mode 0600), each atomically.
pub fn install(plugin: &Path, bin_dir: &Path, conf_dir: &Path) -> Result<Installed, InstallError> {
    let binary = std::fs::read(plugin).map_err(|source| InstallError::ReadPlugin {
        path: plugin.to_path_buf(),
        source,
    })?;
    let installed = Installed {
        plugin: bin_dir.join(PLUGIN_NAME),
        conflist: conf_dir.join(CONFLIST_NAME),
    };
    replace_atomically(&installed.plugin, &binary, 0o755)?;
    replace_atomically(&installed.conflist, CONFLIST.as_bytes(), 0o600)?;
    Ok(installed)
}

/// Writes `contents` with `mode` to a temporary file beside `path`, then renames it over `path`.
fn replace_atomically(path: &Path, contents: &[u8], mode: u32) -> Result<(), InstallError> {
    let error = |source| InstallError::Write {
        path: path.to_path_buf(),
        source,
    };
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let temporary = path.with_file_name(format!(".{name}.ovnbpf-{}", std::process::id()));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&temporary)?;
        file.write_all(contents)?;
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if let Err(source) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(error(source));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installs_the_shipped_conflist_and_the_plugin_atomically_with_their_modes() {
        let dir = tempfile::tempdir().unwrap();
        let (bin, conf) = (dir.path().join("bin"), dir.path().join("net.d"));
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&conf).unwrap();
        let plugin = dir.path().join("ovnbpf-cni");
        std::fs::write(&plugin, b"\x7fELF plugin").unwrap();
        // An older configuration in place, as after a previous install or Kube-OVN's.
        std::fs::write(conf.join(CONFLIST_NAME), b"{\"old\": true}").unwrap();

        let installed = install(&plugin, &bin, &conf).unwrap();

        let shipped = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/cni/01-ovnbpf.conflist"
        ))
        .unwrap();
        assert_eq!(std::fs::read(&installed.conflist).unwrap(), shipped);
        assert_eq!(installed.conflist, conf.join("01-kube-ovn.conflist"));
        assert_eq!(std::fs::read(&installed.plugin).unwrap(), b"\x7fELF plugin");
        assert_eq!(installed.plugin, bin.join("ovnbpf"));
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&installed.conflist), 0o600);
        assert_eq!(mode(&installed.plugin), 0o755);
        // Nothing but the two files is left behind.
        assert_eq!(std::fs::read_dir(&conf).unwrap().count(), 1);
        assert_eq!(std::fs::read_dir(&bin).unwrap().count(), 1);
    }

    #[test]
    fn a_missing_plugin_is_named_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let error = install(&dir.path().join("absent"), dir.path(), dir.path()).unwrap_err();
        assert!(error.to_string().contains("absent"), "{error}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
