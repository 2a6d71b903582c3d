//! Hand-assembled eBPF programs, for the few places where aya cannot serve: the lab's VLAN access
//! ports ([`crate::vlan_access`], a dozen instructions with the VLAN ID as an immediate) and
//! `cargo xtask bench conntrack` (kfunc calls, which aya 0.14 cannot relocate). One instruction
//! type, the `bpf(2)` call, and `BPF_PROG_LOAD` of a tc program with the verifier's log on
//! failure. Touches nothing but the descriptors it returns.

use std::os::fd::{FromRawFd, OwnedFd};

use anyhow::{Context, Result};

pub const BPF_MAP_CREATE: libc::c_long = 0;
pub const BPF_PROG_LOAD: libc::c_long = 5;
pub const BPF_PROG_TEST_RUN: libc::c_long = 10;
pub const BPF_LINK_CREATE: libc::c_long = 28;
pub const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;

/// One eBPF instruction.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct Insn {
    pub code: u8,
    pub registers: u8,
    pub offset: i16,
    pub immediate: i32,
}

#[must_use]
pub const fn insn(code: u8, dst: u8, src: u8, offset: i16, immediate: i32) -> Insn {
    Insn {
        code,
        registers: (src << 4) | dst,
        offset,
        immediate,
    }
}

/// `bpf(command, attr)`: the kernel's non-negative result (a descriptor for the commands that
/// make one).
///
/// # Errors
/// The call's error.
pub fn bpf(command: libc::c_long, attr: &mut [u64; 18]) -> std::io::Result<i64> {
    // SAFETY: `attr` is a zero-initialised buffer larger than the attribute struct of every
    // command used here, and the pointers in it stay valid for the call.
    let result = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            command,
            attr.as_mut_ptr(),
            std::mem::size_of_val(attr),
        )
    };
    if result < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(result)
}

/// [`bpf`] for a command that makes a descriptor, owned from here on.
///
/// # Errors
/// The call's error.
pub fn bpf_fd(command: libc::c_long, attr: &mut [u64; 18]) -> std::io::Result<OwnedFd> {
    let fd = i32::try_from(bpf(command, attr)?).map_err(std::io::Error::other)?;
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Loads `program` as a GPL tc (`SCHED_CLS`) program named `name`.
///
/// # Errors
/// The kernel's refusal, with the verifier's log.
pub fn load_sched_cls(name: &str, program: &[Insn]) -> Result<OwnedFd> {
    let license = c"GPL";
    let mut log = vec![0u8; 1 << 20];
    let mut attr = [0u64; 18];
    // union bpf_attr, BPF_PROG_LOAD: prog_type, insn_cnt, insns, license, log_level, log_size,
    // log_buf, kern_version, prog_flags, prog_name[16].
    attr[0] = u64::from(BPF_PROG_TYPE_SCHED_CLS) | ((program.len() as u64) << 32);
    attr[1] = program.as_ptr() as u64;
    attr[2] = license.as_ptr() as u64;
    attr[3] = 1 | ((log.len() as u64) << 32);
    attr[4] = log.as_mut_ptr() as u64;
    let mut program_name = [0u8; 16];
    for (slot, byte) in program_name.iter_mut().zip(name.bytes().take(15)) {
        *slot = byte;
    }
    attr[6] = u64::from_le_bytes(program_name[..8].try_into()?);
    attr[7] = u64::from_le_bytes(program_name[8..].try_into()?);
    bpf_fd(BPF_PROG_LOAD, &mut attr).with_context(|| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        format!(
            "loading {name}: {}",
            String::from_utf8_lossy(&log[..end]).trim()
        )
    })
}
