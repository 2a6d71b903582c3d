//! Builds the kernel programs (`ebpf/`, binary `ovnbpf`) for bpfel-unknown-none with aya-build and
//! leaves the object in OUT_DIR for `include_bytes_aligned!`. With `AYA_BUILD_SKIP=1` (clippy, IDEs)
//! the build is skipped and an empty placeholder is written, so the agent still type-checks; such a
//! binary refuses to load programs with a clear error.

use std::path::Path;

fn main() -> anyhow::Result<()> {
    let out_dir = std::env::var("OUT_DIR")?;
    let object = Path::new(&out_dir).join("ovnbpf");
    let skip =
        std::env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    if skip {
        if !object.exists() {
            std::fs::write(&object, [])?;
        }
        println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
        return Ok(());
    }
    let ebpf_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ebpf");
    let ebpf_dir = ebpf_dir.canonicalize()?;
    let root_dir = ebpf_dir
        .to_str()
        .ok_or_else(|| anyhow::anyhow!("non-UTF-8 path {ebpf_dir:?}"))?;
    // The agent's `bpf-log` feature builds the programs with their log statements.
    let features: &[&str] = if std::env::var_os("CARGO_FEATURE_BPF_LOG").is_some() {
        &["log"]
    } else {
        &[]
    };
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "ovnbpf-ebpf",
            root_dir,
            features,
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
}
