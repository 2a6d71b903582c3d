//! Datapath backends. `ebpf` loads and drives the kernel programs; the OpenFlow fallback will sit
//! beside it. Backends only apply what they are told; they never read the Southbound DB.

pub mod ebpf;
