//! OCI image archives made on this machine, without a registry or a container build tool: an
//! image layout (`oci-layout`, `index.json`, blobs) in one tar, one uncompressed layer, which
//! `ctr images import` and `podman load` read. Used for the test sandbox image and by
//! `cargo xtask image` for ovnbpf's image ([`ovnbpf_image`]: the workspace binaries, `ip`, and the
//! shared libraries they load, taken from this Debian machine's packages).

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::process;

/// A file of the image: its absolute path inside the image, contents and mode.
#[derive(Clone, Debug)]
pub struct ImageFile {
    pub path: String,
    pub contents: Vec<u8>,
    pub mode: u32,
}

impl ImageFile {
    /// The file at `source` on this machine, placed at `path` in the image.
    pub fn copy(source: &Path, path: &str, mode: u32) -> Result<Self> {
        Ok(Self {
            path: path.to_string(),
            contents: std::fs::read(source)
                .with_context(|| format!("reading {}", source.display()))?,
            mode,
        })
    }

    /// A text file.
    #[must_use]
    pub fn text(path: &str, contents: &str) -> Self {
        Self {
            path: path.to_string(),
            contents: contents.as_bytes().to_vec(),
            mode: 0o644,
        }
    }
}

/// What an image holds and runs.
#[derive(Clone, Debug)]
pub struct Image {
    /// Full reference, e.g. `localhost/ovnbpf:0.1.0`.
    pub name: String,
    pub entrypoint: Vec<String>,
    pub env: Vec<String>,
    pub files: Vec<ImageFile>,
}

/// The layer: every file with its parent directories (root-owned, mtime 0, so the same files
/// give the same digest).
fn layer(files: &[ImageFile]) -> Result<Vec<u8>> {
    let mut directories = BTreeSet::new();
    for file in files {
        let mut parent = Path::new(file.path.trim_start_matches('/')).parent();
        while let Some(dir) = parent.filter(|d| !d.as_os_str().is_empty()) {
            directories.insert(dir.to_path_buf());
            parent = dir.parent();
        }
    }
    let mut builder = tar::Builder::new(Vec::new());
    let header = |kind: tar::EntryType, size: u64, mode: u32| {
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(kind);
        header.set_size(size);
        header.set_mode(mode);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(0);
        header
    };
    for dir in &directories {
        let mut header = header(tar::EntryType::Directory, 0, 0o755);
        builder.append_data(&mut header, dir, std::io::empty())?;
    }
    for file in files {
        let mut header = header(
            tar::EntryType::Regular,
            file.contents.len() as u64,
            file.mode,
        );
        builder.append_data(
            &mut header,
            file.path.trim_start_matches('/'),
            file.contents.as_slice(),
        )?;
    }
    Ok(builder.into_inner()?)
}

fn digest(data: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(data))
}

/// Writes `image` as an OCI image layout archive at `out`.
pub fn write_archive(image: &Image, out: &Path) -> Result<()> {
    let mut blobs: Vec<(String, Vec<u8>)> = Vec::new();
    let mut blob = |data: Vec<u8>, media_type: &str| -> Value {
        let descriptor = json!({
            "mediaType": media_type,
            "digest": digest(&data),
            "size": data.len(),
        });
        blobs.push((digest(&data), data));
        descriptor
    };
    let layer = layer(&image.files)?;
    let config = json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": image.entrypoint, "Env": image.env, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [digest(&layer)]},
    });
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": blob(config.to_string().into_bytes(), "application/vnd.oci.image.config.v1+json"),
        "layers": [blob(layer, "application/vnd.oci.image.layer.v1.tar")],
    });
    let mut descriptor = blob(
        manifest.to_string().into_bytes(),
        "application/vnd.oci.image.manifest.v1+json",
    );
    let tag = image.name.rsplit_once(':').map_or("latest", |(_, tag)| tag);
    descriptor["annotations"] = json!({
        // containerd's full name; the OCI tag for other readers (podman, skopeo).
        "io.containerd.image.name": image.name,
        "org.opencontainers.image.ref.name": tag,
    });
    descriptor["platform"] = json!({"architecture": "amd64", "os": "linux"});
    let index = json!({"schemaVersion": 2, "manifests": [descriptor]});

    let mut archive = tar::Builder::new(
        std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?,
    );
    let mut add = |path: &str, data: &[u8]| -> Result<()> {
        let mut header = tar::Header::new_ustar();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        archive.append_data(&mut header, path, data)?;
        Ok(())
    };
    add("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    add("index.json", index.to_string().as_bytes())?;
    for (digest, data) in &blobs {
        let hex = digest.trim_start_matches("sha256:");
        add(&format!("blobs/sha256/{hex}"), data)?;
    }
    archive.into_inner()?.sync_all()?;
    Ok(())
}

/// The shared libraries `binary` loads (absolute paths, the dynamic loader included), as `ldd`
/// resolves them on this machine.
pub fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    let text = process::output(Command::new("ldd").arg(binary))
        .with_context(|| format!("ldd {}", binary.display()))?;
    let mut libraries = Vec::new();
    for line in text.lines() {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" or "/lib64/ld-linux-x86-64.so.2 (0x…)"
        let path = match line.split_once("=>") {
            Some((_, target)) => target.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(path) = path.filter(|p| p.starts_with('/')) {
            libraries.push(PathBuf::from(path));
        }
    }
    if libraries.is_empty() && !text.contains("statically linked") {
        bail!("ldd found no libraries for {}: {text}", binary.display());
    }
    Ok(libraries)
}

/// The workspace binaries ovnbpf's image holds, in `/usr/local/bin` (the DaemonSet's paths).
pub const OVNBPF_BINARIES: &[&str] = &["ovnbpf-agent", "ovnbpfctl", "ovnbpf-cni"];
/// The programs of the system the agent runs, taken from this machine's packages to the same
/// paths: iproute2's `ip` (the CNI's CHECK reads a pod's NIC with it) and nftables' `nft` (the
/// masquerading of NAT-outgoing subnets).
pub const SYSTEM_PROGRAMS: &[&str] = &["/usr/bin/ip", "/usr/sbin/nft"];
/// The image's entrypoint and PATH (`deploy/Containerfile` has the same).
pub const ENTRYPOINT: &str = "/usr/local/bin/ovnbpf-agent";
pub const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// ovnbpf's image: [`OVNBPF_BINARIES`] from `bin_dir` in `/usr/local/bin`, [`SYSTEM_PROGRAMS`],
/// the shared libraries they all load (from this machine's Debian packages: glibc, libgcc, and
/// iproute2's), and the few files a process expects in `/etc`. No shell and no package manager.
pub fn ovnbpf_image(bin_dir: &Path, name: &str) -> Result<Image> {
    let mut files = Vec::new();
    let mut libraries = BTreeSet::new();
    for binary in OVNBPF_BINARIES {
        let source = bin_dir.join(binary);
        libraries.extend(shared_libraries(&source)?);
        files.push(ImageFile::copy(
            &source,
            &format!("/usr/local/bin/{binary}"),
            0o755,
        )?);
    }
    for program in SYSTEM_PROGRAMS {
        let source = Path::new(program);
        libraries.extend(shared_libraries(source)?);
        files.push(ImageFile::copy(source, program, 0o755)?);
    }
    for library in &libraries {
        files.push(ImageFile::copy(
            library,
            &library.display().to_string(),
            0o755,
        )?);
    }
    files.push(ImageFile::text(
        "/etc/passwd",
        "root:x:0:0:root:/:/sbin/nologin\n",
    ));
    files.push(ImageFile::text("/etc/group", "root:x:0:\n"));
    files.push(ImageFile::text("/etc/nsswitch.conf", "hosts: files dns\n"));
    Ok(Image {
        name: name.to_string(),
        entrypoint: vec![ENTRYPOINT.into()],
        env: vec![format!("PATH={PATH}")],
        files,
    })
}
