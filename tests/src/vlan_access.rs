//! VLAN access ports for the lab's physical switch. The switch is a plain Linux bridge: this
//! kernel has neither 8021q nor bridge VLAN filtering nor tc's vlan action, so an access port's
//! VLAN is done by two tiny tc programs on the switch side of the port's veth, the way a switch's
//! access port behaves: ingress (from the host) drops tagged frames and pushes the port's tag;
//! egress (to the host) passes only frames tagged with the port's VLAN, popped. The programs are
//! assembled here (a dozen instructions, the VLAN ID an immediate; [`crate::raw_bpf`]), loaded
//! and attached with tcx links whose descriptors the [`AccessPortPrograms`] guard holds: they
//! detach when it drops (or with the namespace). Touches only the namespace it is given.

use std::{
    os::fd::{AsRawFd, OwnedFd},
    path::Path,
};

use anyhow::{Context, Result, bail};

use crate::raw_bpf::{BPF_LINK_CREATE, Insn, bpf_fd, insn, load_sched_cls};

const BPF_TCX_INGRESS: u32 = 46;
const BPF_TCX_EGRESS: u32 = 47;
const HELPER_SKB_VLAN_PUSH: i32 = 18;
const HELPER_SKB_VLAN_POP: i32 = 19;
/// `__sk_buff` fields.
const SKB_VLAN_PRESENT: i16 = 20;
const SKB_VLAN_TCI: i16 = 24;
const SKB_VLAN_PROTO: i16 = 28;
/// `htons(ETH_P_8021Q)` as the kernel stores it in a 32-bit field on little-endian.
const VLAN_PROTO_8021Q: i32 = 0x0081;
const TC_PASS: i32 = 0;
const TC_DROP: i32 = 2;

/// `dst = *(u32 *)(src + offset)`.
const fn load_word(dst: u8, src: u8, offset: i16) -> Insn {
    insn(0x61, dst, src, offset, 0)
}
const fn move_immediate(dst: u8, value: i32) -> Insn {
    insn(0xb7, dst, 0, 0, value)
}
const fn and_immediate(dst: u8, value: i32) -> Insn {
    insn(0x57, dst, 0, 0, value)
}
/// `if dst == value goto +skip`.
const fn jump_equal(dst: u8, value: i32, skip: i16) -> Insn {
    insn(0x15, dst, 0, skip, value)
}
/// `if dst != value goto +skip`.
const fn jump_not_equal(dst: u8, value: i32, skip: i16) -> Insn {
    insn(0x55, dst, 0, skip, value)
}
const fn call(helper: i32) -> Insn {
    insn(0x85, 0, 0, 0, helper)
}
const EXIT: Insn = insn(0x95, 0, 0, 0, 0);

/// Host → switch: untagged frames get the port's tag, tagged ones are dropped.
fn push_program(vlan: u16) -> Vec<Insn> {
    vec![
        load_word(2, 1, SKB_VLAN_PRESENT),
        jump_not_equal(2, 0, 6),
        move_immediate(2, VLAN_PROTO_8021Q),
        move_immediate(3, i32::from(vlan)),
        call(HELPER_SKB_VLAN_PUSH),
        jump_not_equal(0, 0, 2),
        move_immediate(0, TC_PASS),
        EXIT,
        move_immediate(0, TC_DROP),
        EXIT,
    ]
}

/// Switch → host: only frames tagged (802.1Q) with the port's VLAN, untagged.
fn pop_program(vlan: u16) -> Vec<Insn> {
    vec![
        load_word(2, 1, SKB_VLAN_PRESENT),
        jump_equal(2, 0, 9),
        load_word(2, 1, SKB_VLAN_PROTO),
        jump_not_equal(2, VLAN_PROTO_8021Q, 7),
        load_word(2, 1, SKB_VLAN_TCI),
        and_immediate(2, 0xfff),
        jump_not_equal(2, i32::from(vlan), 4),
        call(HELPER_SKB_VLAN_POP),
        jump_not_equal(0, 0, 2),
        move_immediate(0, TC_PASS),
        EXIT,
        move_immediate(0, TC_DROP),
        EXIT,
    ]
}

fn attach(program: &OwnedFd, ifindex: u32, attach_type: u32) -> Result<OwnedFd> {
    let mut attr = [0u64; 18];
    // BPF_LINK_CREATE: prog_fd, target_ifindex, attach_type, flags.
    attr[0] = program.as_raw_fd() as u64 | (u64::from(ifindex) << 32);
    attr[1] = u64::from(attach_type);
    bpf_fd(BPF_LINK_CREATE, &mut attr).context("attaching a tcx link")
}

/// The two programs of one access port, attached while this lives.
#[derive(Debug)]
pub struct AccessPortPrograms {
    _links: [OwnedFd; 2],
}

impl AccessPortPrograms {
    /// Makes `port` (an interface in the namespace at `netns`) an access port of `vlan`.
    pub fn attach(netns: &Path, port: &str, vlan: u16) -> Result<Self> {
        if vlan == 0 || vlan > 4094 {
            bail!("VLAN {vlan} is not a valid VLAN ID");
        }
        let push = load_sched_cls("access_push", &push_program(vlan))?;
        let pop = load_sched_cls("access_pop", &pop_program(vlan))?;
        let port = port.to_string();
        // An interface index names an interface of the caller's namespace: attach from a thread
        // that entered the switch's namespace.
        let links = crate::netns::run_in_path(netns, || -> Result<[OwnedFd; 2]> {
            let name = std::ffi::CString::new(port.clone())?;
            // SAFETY: a valid C string.
            let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
            if ifindex == 0 {
                bail!("no interface {port}: {}", std::io::Error::last_os_error());
            }
            Ok([
                attach(&push, ifindex, BPF_TCX_INGRESS)?,
                attach(&pop, ifindex, BPF_TCX_EGRESS)?,
            ])
        })?;
        Ok(Self { _links: links })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The jumps land on the drop instructions (the last two) or inside the program.
    #[test]
    fn jumps_stay_inside_the_programs() {
        for program in [push_program(100), pop_program(100)] {
            let last = program.len() as i64 - 1;
            for (index, instruction) in program.iter().enumerate() {
                if matches!(instruction.code, 0x15 | 0x55) {
                    let target = index as i64 + 1 + i64::from(instruction.offset);
                    assert!(target > index as i64 && target <= last, "jump at {index}");
                    assert_eq!(program[target as usize].immediate, TC_DROP);
                }
            }
            assert_eq!(program[program.len() - 1].code, 0x95);
        }
    }
}
