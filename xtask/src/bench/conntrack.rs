//! `bench conntrack [--runs 5] [--repeat 200000]`: the two connection tables the datapath could
//! use, on the same packets, in one run: ovnbpf's own (an LRU hash of its `CtKey` → `CtEntry`,
//! looked up, refreshed or inserted as `ebpf/src/conntrack.rs` does) and the kernel's conntrack
//! through the BPF kfuncs (`bpf_skb_ct_lookup`, then on a miss `bpf_skb_ct_alloc` +
//! `bpf_ct_insert_entry`, every reference released), zone 7. Two cases each: an established
//! connection (every packet finds its entry) and new connections (a random source port per
//! packet: mostly a miss and an insert). Each program is a minimal hand-assembled tc program,
//! loaded and run with `BPF_PROG_TEST_RUN` (`repeat` packets, the kernel's average ns per run)
//! inside a network namespace of its own, so the kernel's table is that namespace's and goes with
//! it. aya 0.14 cannot relocate kfunc calls, so the programs are raw instructions
//! (`ovnbpf_tests::raw_bpf`) with the kfuncs' BTF ids from `bpftool` (the kernel's BTF).

use std::os::fd::{AsRawFd, OwnedFd};

use anyhow::{Context, Result, bail};
use ovnbpf_tests::raw_bpf::{
    BPF_MAP_CREATE, BPF_PROG_TEST_RUN, Insn, bpf, bpf_fd, insn, load_sched_cls,
};
use serde_json::json;

use super::stats::write_json;
use crate::args::option;

const BPF_MAP_TYPE_LRU_HASH: u32 = 9;
const BPF_PSEUDO_MAP_FD: u8 = 1;
const BPF_PSEUDO_KFUNC_CALL: u8 = 2;
/// Helpers by number.
const MAP_LOOKUP_ELEM: i32 = 1;
const MAP_UPDATE_ELEM: i32 = 2;
const KTIME_GET_NS: i32 = 5;
const GET_PRANDOM_U32: i32 = 7;
/// The LRU table's capacity: ovnbpf's (`MAX_CONNECTIONS`).
const CAPACITY: u32 = 262_144;
/// What a program returns: the connection's entry was found, was inserted, or could not be.
const FOUND: i32 = 1;
const INSERTED: i32 = 2;
const FAILED: i32 = 3;

/// The instructions used, by what they do.
mod op {
    pub const MOV64_REG: u8 = 0xbf;
    pub const MOV64_IMM: u8 = 0xb7;
    pub const ADD64_IMM: u8 = 0x07;
    pub const STW: u8 = 0x62; // *(u32 *)(dst + off) = imm
    pub const STXH: u8 = 0x6b; // *(u16 *)(dst + off) = src
    pub const STXDW: u8 = 0x7b; // *(u64 *)(dst + off) = src
    pub const STXW: u8 = 0x63; // *(u32 *)(dst + off) = src
    pub const STH: u8 = 0x6a; // *(u16 *)(dst + off) = imm
    pub const JEQ_IMM: u8 = 0x15;
    pub const CALL: u8 = 0x85;
    pub const EXIT: u8 = 0x95;
    pub const LD_IMM64: u8 = 0x18;
}

/// A program under construction, with forward jumps patched by label.
#[derive(Default)]
struct Program {
    insns: Vec<Insn>,
}

impl Program {
    fn push(&mut self, insn: Insn) -> usize {
        self.insns.push(insn);
        self.insns.len() - 1
    }
    fn call(&mut self, helper: i32) {
        self.push(insn(op::CALL, 0, 0, 0, helper));
    }
    fn kfunc(&mut self, btf_id: i32) {
        self.push(insn(op::CALL, 0, BPF_PSEUDO_KFUNC_CALL, 0, btf_id));
    }
    /// A jump to be pointed at a later instruction with [`Self::land`].
    fn jump(&mut self, code: u8, dst: u8, imm: i32) -> usize {
        self.push(insn(code, dst, 0, 0, imm))
    }
    fn land(&mut self, jump: usize) {
        let offset = self.insns.len() - jump - 1;
        self.insns[jump].offset = i16::try_from(offset).unwrap_or(i16::MAX);
    }
    /// Returns `code` ([`FOUND`], [`INSERTED`], [`FAILED`]).
    fn exit_with(&mut self, code: i32) {
        self.push(insn(op::MOV64_IMM, 0, 0, 0, code));
        self.push(insn(op::EXIT, 0, 0, 0, 0));
    }
    /// r2 = r10 + offset.
    fn stack_pointer(&mut self, register: u8, offset: i32) {
        self.push(insn(op::MOV64_REG, register, 10, 0, 0));
        self.push(insn(op::ADD64_IMM, register, 0, 0, offset));
    }
    /// The source port at `port` (stack): a constant; for new connections a random one, and a
    /// random source address at `address` too (32 + 16 random bits: no connection repeats).
    fn source(&mut self, address: i16, port: i16, new_connections: bool) {
        if new_connections {
            self.call(GET_PRANDOM_U32);
            self.push(insn(op::STXW, 10, 0, address, 0));
            self.call(GET_PRANDOM_U32);
            self.push(insn(op::STXH, 10, 0, port, 0));
        } else {
            self.push(insn(op::STH, 10, 0, port, 40000_u16.to_be() as i32));
        }
    }
}

/// ovnbpf's table: the connection's key (zone, ordered ends, protocol) looked up in the LRU hash;
/// found, its expiry refreshed in place; absent, inserted.
fn own_table(map_fd: i32, new_connections: bool) -> Vec<Insn> {
    let mut p = Program::default();
    // CtKey at fp-24: datapath, port, address_a, address_b, port_a, port_b, protocol.
    p.push(insn(op::STW, 10, 0, -24, 5));
    p.push(insn(op::STW, 10, 0, -20, 7));
    p.push(insn(op::STW, 10, 0, -16, 0x0100_000a));
    p.push(insn(op::STW, 10, 0, -12, 0x0200_000a));
    p.source(-16, -8, new_connections);
    p.push(insn(op::STH, 10, 0, -6, 80));
    p.push(insn(op::STW, 10, 0, -4, 6));
    let map = |p: &mut Program| {
        p.push(insn(op::LD_IMM64, 1, BPF_PSEUDO_MAP_FD, 0, map_fd));
        p.push(insn(0, 0, 0, 0, 0));
    };
    map(&mut p);
    p.stack_pointer(2, -24);
    p.call(MAP_LOOKUP_ELEM);
    let absent = p.jump(op::JEQ_IMM, 0, 0);
    // Found: expires = now + 120 s.
    p.push(insn(op::MOV64_REG, 6, 0, 0, 0));
    p.call(KTIME_GET_NS);
    p.push(insn(op::STXDW, 6, 0, 0, 0));
    p.exit_with(FOUND);
    p.land(absent);
    // CtEntry at fp-40: expires, flags, padding.
    p.call(KTIME_GET_NS);
    p.push(insn(op::STXDW, 10, 0, -40, 0));
    p.push(insn(op::MOV64_IMM, 1, 0, 0, 1));
    p.push(insn(op::STXW, 10, 1, -32, 0));
    p.push(insn(op::STW, 10, 0, -28, 0));
    map(&mut p);
    p.stack_pointer(2, -24);
    p.stack_pointer(3, -40);
    p.push(insn(op::MOV64_IMM, 4, 0, 0, 0));
    p.call(MAP_UPDATE_ELEM);
    let failed = p.jump(0x55, 0, 0); // if r0 != 0
    p.exit_with(INSERTED);
    p.land(failed);
    p.exit_with(FAILED);
    p.insns
}

/// The kfuncs' BTF ids.
struct Kfuncs {
    lookup: i32,
    alloc: i32,
    insert: i32,
    release: i32,
}

/// The kernel's conntrack: `bpf_skb_ct_lookup` of the IPv4 tuple in zone 7; found, released;
/// absent, allocated, inserted and released.
fn kernel_conntrack(kfuncs: &Kfuncs, new_connections: bool) -> Vec<Insn> {
    let mut p = Program::default();
    p.push(insn(op::MOV64_REG, 6, 1, 0, 0));
    // bpf_sock_tuple (IPv4) at fp-16: saddr, daddr, sport, dport.
    p.push(insn(op::STW, 10, 0, -16, 0x0100_000a));
    p.push(insn(op::STW, 10, 0, -12, 0x0200_000a));
    p.source(-16, -8, new_connections);
    p.push(insn(op::STH, 10, 0, -6, 80_u16.to_be() as i32));
    p.push(insn(op::STW, 10, 0, -4, 0));
    // bpf_ct_opts (16 bytes) at fp-32: netns_id -1 (current), error 0, TCP, direction 0,
    // zone 7 (its flags, direction and the reserved bytes 0: the default directions).
    p.push(insn(op::STW, 10, 0, -32, -1));
    p.push(insn(op::STW, 10, 0, -28, 0));
    p.push(insn(op::STW, 10, 0, -24, 6 | (7 << 16)));
    p.push(insn(op::STW, 10, 0, -20, 0));
    let arguments = |p: &mut Program| {
        p.push(insn(op::MOV64_REG, 1, 6, 0, 0));
        p.stack_pointer(2, -16);
        p.push(insn(op::MOV64_IMM, 3, 0, 0, 12));
        p.stack_pointer(4, -32);
        p.push(insn(op::MOV64_IMM, 5, 0, 0, 16));
    };
    arguments(&mut p);
    p.kfunc(kfuncs.lookup);
    let absent = p.jump(op::JEQ_IMM, 0, 0);
    p.push(insn(op::MOV64_REG, 1, 0, 0, 0));
    p.kfunc(kfuncs.release);
    p.exit_with(FOUND);
    p.land(absent);
    // The lookup wrote its error into the options: cleared for the allocation.
    p.push(insn(op::STW, 10, 0, -28, 0));
    arguments(&mut p);
    p.kfunc(kfuncs.alloc);
    let no_entry = p.jump(op::JEQ_IMM, 0, 0);
    p.push(insn(op::MOV64_REG, 1, 0, 0, 0));
    p.kfunc(kfuncs.insert);
    let not_inserted = p.jump(op::JEQ_IMM, 0, 0);
    p.push(insn(op::MOV64_REG, 1, 0, 0, 0));
    p.kfunc(kfuncs.release);
    p.exit_with(INSERTED);
    p.land(no_entry);
    p.land(not_inserted);
    p.exit_with(FAILED);
    p.insns
}

fn create_lru() -> Result<OwnedFd> {
    let mut attr = [0_u64; 18];
    // BPF_MAP_CREATE: map_type, key_size, value_size, max_entries.
    attr[0] = u64::from(BPF_MAP_TYPE_LRU_HASH) | (24 << 32);
    attr[1] = 16 | (u64::from(CAPACITY) << 32);
    bpf_fd(BPF_MAP_CREATE, &mut attr).context("creating the LRU table")
}

/// The kernel's average ns per run of `prog_fd` over `repeat` runs of a 64-byte frame, and what
/// the last run returned.
fn test_run(program: &OwnedFd, repeat: u32) -> Result<(u32, i32)> {
    let frame = [0_u8; 64];
    let mut attr = [0_u64; 18];
    // BPF_PROG_TEST_RUN: prog_fd, retval, data_size_in, data_size_out, data_in, data_out,
    // repeat, duration.
    attr[0] = u64::from(program.as_raw_fd().unsigned_abs());
    attr[1] = frame.len() as u64;
    attr[2] = frame.as_ptr() as u64;
    attr[4] = u64::from(repeat);
    bpf(BPF_PROG_TEST_RUN, &mut attr)?;
    Ok(((attr[4] >> 32) as u32, (attr[0] >> 32) as i32))
}

/// The kfuncs' ids in the kernel's BTF.
fn kfuncs() -> Result<Kfuncs> {
    let dump = std::process::Command::new("bpftool")
        .args(["btf", "dump", "file", "/sys/kernel/btf/vmlinux"])
        .output()
        .context("running bpftool (apt package bpftool)")?;
    let text = String::from_utf8_lossy(&dump.stdout);
    let id = |name: &str| -> Result<i32> {
        let wanted = format!("] FUNC '{name}'");
        text.lines()
            .find(|line| line.contains(&wanted))
            .and_then(|line| line.strip_prefix('[')?.split(']').next()?.parse().ok())
            .with_context(|| format!("kfunc {name} is not in the kernel's BTF"))
    };
    Ok(Kfuncs {
        lookup: id("bpf_skb_ct_lookup")?,
        alloc: id("bpf_skb_ct_alloc")?,
        insert: id("bpf_ct_insert_entry")?,
        release: id("bpf_ct_release")?,
    })
}

/// The median and minimum of `runs` measurements of `program`, each in a network namespace of
/// its own (the kernel's table starts empty; `program` makes ovnbpf's anew and returns its map
/// descriptor, held through the run), checking that the last packet of each run had the outcome
/// `expected`.
fn measure(
    runs: usize,
    repeat: u32,
    expected: i32,
    program: impl Fn() -> Result<(Vec<Insn>, Option<OwnedFd>)>,
) -> Result<(u32, u32)> {
    let mut samples = Vec::new();
    for _ in 0..runs {
        // SAFETY: unshare affects only this thread's network namespace (the previous one goes
        // with its last reference).
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            bail!("unshare: {}", std::io::Error::last_os_error());
        }
        // The table's descriptor lives through the run; both close after it.
        let (insns, _map) = program()?;
        let loaded = load_sched_cls("ct_bench", &insns)?;
        let (nanos, outcome) = test_run(&loaded, repeat)?;
        if outcome != expected {
            bail!(
                "the last packet's outcome was {outcome}, not {expected} (1 found, 2 inserted, 3 failed)"
            );
        }
        samples.push(nanos);
    }
    samples.sort_unstable();
    Ok((samples[samples.len() / 2], samples[0]))
}

pub fn run(args: &[String]) -> Result<()> {
    let runs: usize = option(args, "--runs").unwrap_or("5").parse()?;
    let repeat: u32 = option(args, "--repeat").unwrap_or("200000").parse()?;
    let kfuncs = kfuncs()?;
    // Namespaces of their own for the kernel's table: this thread's, gone when it ends.
    let results = std::thread::scope(|scope| {
        scope
            .spawn(|| -> Result<Vec<serde_json::Value>> {
                let mut results = Vec::new();
                for (case, new_connections) in [("established", false), ("new", true)] {
                    let expected = if new_connections { INSERTED } else { FOUND };
                    let (own, own_min) = measure(runs, repeat, expected, || {
                        let map = create_lru()?;
                        Ok((own_table(map.as_raw_fd(), new_connections), Some(map)))
                    })?;
                    let (kernel, kernel_min) = measure(runs, repeat, expected, || {
                        Ok((kernel_conntrack(&kfuncs, new_connections), None))
                    })?;
                    results.push(json!({
                        "case": case, "repeat": repeat, "runs": runs,
                        "own_table_ns": own, "own_table_min_ns": own_min,
                        "kernel_conntrack_ns": kernel, "kernel_conntrack_min_ns": kernel_min,
                        "kernel_over_own": f64::from(kernel) / f64::from(own.max(1)),
                    }));
                }
                Ok(results)
            })
            .join()
            .map_err(|_| anyhow::anyhow!("the bench thread panicked"))?
    })?;
    println!();
    println!(
        "| case | ovnbpf's table ns/packet (median, min) | kernel conntrack kfuncs ns/packet (median, min) | kfuncs / ours |"
    );
    println!("|---|---:|---:|---:|");
    for r in &results {
        println!(
            "| {} | {}, {} | {}, {} | {:.2} |",
            r["case"].as_str().unwrap_or_default(),
            r["own_table_ns"],
            r["own_table_min_ns"],
            r["kernel_conntrack_ns"],
            r["kernel_conntrack_min_ns"],
            r["kernel_over_own"].as_f64().unwrap_or(f64::NAN),
        );
    }
    write_json("conntrack", &results)
}
