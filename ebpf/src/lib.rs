//! Library target of the eBPF crate. The programs live in the `ovnbpf` binary (`src/main.rs`),
//! which aya-build compiles for `bpfel-unknown-none`; this empty library exists so the agent can
//! name the crate as a build-dependency and be rebuilt when the kernel programs change.
#![no_std]
