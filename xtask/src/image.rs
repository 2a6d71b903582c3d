//! `cargo xtask image`: ovnbpf's container image as an OCI archive, made on this machine from the
//! workspace's release binaries, iproute2's `ip` and the shared libraries they load (this Debian
//! machine's packages): no registry, no base image, no container build tool
//! (`deploy/Containerfile` builds the same image from source where those exist). `ctr images
//! import` and `podman load` read the archive; `deploy/kubernetes/ovnbpf.yaml` runs it
//! (`localhost/ovnbpf:<version>` unless `--name` says otherwise).

use std::path::PathBuf;

use anyhow::{Context, Result};
use ovnbpf_tests::oci;

use crate::{args::option, cmd};

pub fn run(args: &[String]) -> Result<()> {
    let profile = if args.iter().any(|a| a == "--debug") {
        cmd::Profile::Debug
    } else {
        cmd::Profile::Release
    };
    println!("== image: building the agent, ovnbpfctl and the CNI plugin ({profile:?})");
    let binaries = cmd::build_binaries(profile)?;
    let version = env!("CARGO_PKG_VERSION");
    let name = option(args, "--name")
        .map_or_else(|| format!("localhost/ovnbpf:{version}"), str::to_string);
    let out = option(args, "--output").map_or_else(
        || cmd::workspace_root().join(format!("target/image/ovnbpf-{version}.oci.tar")),
        PathBuf::from,
    );
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let bin_dir = binaries
        .agent
        .parent()
        .context("the agent's directory")?
        .to_path_buf();
    let image = oci::ovnbpf_image(&bin_dir, &name)?;
    oci::write_archive(&image, &out)?;
    let size = std::fs::metadata(&out)?.len();
    println!(
        "== image: {name} → {} ({:.1} MiB, {} files)",
        out.display(),
        size as f64 / (1024.0 * 1024.0),
        image.files.len()
    );
    println!(
        "   containerd: ctr -n k8s.io images import {}",
        out.display()
    );
    println!("   podman:     podman load -i {}", out.display());
    Ok(())
}
