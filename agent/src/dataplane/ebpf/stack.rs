//! The stack each kernel program needs, read from the object the agent embeds: each function's
//! frame (the deepest frame-pointer offset its instructions reach, as the verifier counts it)
//! and the deepest chain of frames through calls and `bpf_loop` callbacks, each rounded up to 16
//! bytes as the verifier does for JIT-compiled programs, against its 512-byte limit. The kernel reports no stack depth for a
//! loaded program (only its verifier log does, which aya keeps only on failure), so this reads
//! the same instructions the verifier checks. Touches nothing.

use std::collections::{BTreeSet, HashSet};

use aya_obj::{Object, generated::bpf_insn};

/// The verifier's limit on the frames of one call chain.
pub const STACK_LIMIT: u32 = 512;

/// One program's stack use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackUse {
    /// Frame of each function of the program in bytes, the entry first (the verifier log's
    /// "stack depth a+b+…").
    pub frames: Vec<u32>,
    /// The deepest chain of frames, each rounded up to 16 bytes as the verifier adds them.
    pub deepest_chain: u32,
}

/// Errors reading the object.
#[derive(Debug, thiserror::Error)]
pub enum StackError {
    #[error("parsing the kernel object: {0}")]
    Parse(#[from] aya_obj::ParseError),
    #[error("linking the kernel object's calls: {0}")]
    Link(#[from] aya_obj::relocation::EbpfRelocationError),
    #[error("program {0} is not in the kernel object")]
    MissingProgram(String),
}

const FRAME_POINTER: u8 = 10;
const CLASS_LDX: u8 = 0x01;
const CLASS_ST: u8 = 0x02;
const CLASS_STX: u8 = 0x03;
const CALL: u8 = 0x85;
const LD_IMM64: u8 = 0x18;
const MOV64_REG: u8 = 0xbf;
const ADD64_IMM: u8 = 0x07;
const PSEUDO_CALL: u8 = 1;
const PSEUDO_FUNC: u8 = 4;

/// The stack use of program `name` in `object`.
pub fn stack_use(object: &[u8], name: &str) -> Result<StackUse, StackError> {
    let mut obj = Object::parse(object)?;
    let text: HashSet<usize> = obj.functions.keys().map(|(section, _)| *section).collect();
    obj.relocate_calls(&text)?;
    let program = obj
        .programs
        .get(name)
        .ok_or_else(|| StackError::MissingProgram(name.to_string()))?;
    let function = obj
        .functions
        .get(&program.function_key())
        .ok_or_else(|| StackError::MissingProgram(name.to_string()))?;
    Ok(measure(&function.instructions))
}

/// Frames and the deepest chain of a linked program's instructions.
fn measure(insns: &[bpf_insn]) -> StackUse {
    // Functions start at 0 and at every target of a pseudo call or callback reference.
    let target = |index: usize, insn: &bpf_insn| {
        usize::try_from(index as i64 + 1 + i64::from(insn.imm)).ok()
    };
    let mut starts = BTreeSet::from([0_usize]);
    for (index, insn) in insns.iter().enumerate() {
        let calls = insn.code == CALL && insn.src_reg() == PSEUDO_CALL;
        let references = insn.code == LD_IMM64 && insn.src_reg() == PSEUDO_FUNC;
        if (calls || references)
            && let Some(start) = target(index, insn)
        {
            starts.insert(start);
        }
    }
    let starts: Vec<usize> = starts.into_iter().collect();
    let function_of = |index: usize| starts.partition_point(|&start| start <= index) - 1;
    let mut frames = vec![0_u32; starts.len()];
    let mut callees = vec![BTreeSet::new(); starts.len()];
    // Per register: the offset from the frame pointer it holds, when it holds one.
    let mut pointer: [Option<i64>; 11] = [None; 11];
    for (index, insn) in insns.iter().enumerate() {
        let function = function_of(index);
        if starts.binary_search(&index).is_ok() {
            pointer = [None; 11];
            pointer[usize::from(FRAME_POINTER)] = Some(0);
        }
        let (dst, src) = (usize::from(insn.dst_reg()), usize::from(insn.src_reg()));
        let class = insn.code & 0x07;
        let base = match class {
            CLASS_LDX => Some(src),
            CLASS_ST | CLASS_STX => Some(dst),
            _ => None,
        };
        if let Some(offset) = base
            .filter(|_| insn.code != LD_IMM64)
            .and_then(|reg| pointer.get(reg).copied().flatten())
        {
            let depth = -(offset + i64::from(insn.off));
            frames[function] = frames[function].max(u32::try_from(depth).unwrap_or(0));
        }
        match insn.code {
            MOV64_REG if dst < 11 && src < 11 => pointer[dst] = pointer[src],
            ADD64_IMM if dst < 11 => {
                pointer[dst] = pointer[dst].map(|p| p + i64::from(insn.imm));
                // A pointer into the frame handed on (to a helper) reaches at least this deep.
                if let Some(offset) = pointer[dst].filter(|&p| p < 0) {
                    frames[function] = frames[function].max(u32::try_from(-offset).unwrap_or(0));
                }
            }
            CALL => {
                if insn.src_reg() == PSEUDO_CALL
                    && let Some(start) = target(index, insn)
                {
                    callees[function].insert(function_of(start));
                }
                pointer[..6].fill(None);
                pointer[usize::from(FRAME_POINTER)] = Some(0);
            }
            LD_IMM64 => {
                if insn.src_reg() == PSEUDO_FUNC
                    && let Some(start) = target(index, insn)
                {
                    // A callback runs below the frame that hands it to a helper.
                    callees[function].insert(function_of(start));
                }
                if dst < 11 {
                    pointer[dst] = None;
                }
            }
            // Other loads and ALU operations overwrite their destination.
            _ if matches!(class, 0x00 | CLASS_LDX | 0x04 | 0x07) && dst < 10 => pointer[dst] = None,
            _ => {}
        }
    }
    let deepest_chain = chain(0, &frames, &callees, &mut Vec::new());
    StackUse {
        frames,
        deepest_chain,
    }
}

/// The deepest chain of rounded frames from `function` (recursion is cut).
fn chain(
    function: usize,
    frames: &[u32],
    callees: &[BTreeSet<usize>],
    path: &mut Vec<usize>,
) -> u32 {
    if path.contains(&function) {
        return 0;
    }
    path.push(function);
    let below = callees[function]
        .iter()
        .map(|&callee| chain(callee, frames, callees, path))
        .max()
        .unwrap_or(0);
    path.pop();
    frames[function].div_ceil(16) * 16 + below
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> bpf_insn {
        bpf_insn {
            code,
            _bitfield_align_1: [],
            _bitfield_1: bpf_insn::new_bitfield_1(dst, src),
            off,
            imm,
        }
    }

    #[test]
    fn frames_follow_the_frame_pointer_and_chains_add_rounded_callee_frames() {
        let exit = insn(0x95, 0, 0, 0, 0);
        let program = [
            // *(u64 *)(r10 - 40) = r1
            insn(0x7b, 10, 1, -40, 0),
            // r2 = r10; r2 += -64 (a key handed to a helper)
            insn(MOV64_REG, 2, 10, 0, 0),
            insn(ADD64_IMM, 2, 0, 0, -64),
            // r2 = *(u64 *)(r2 + 0): r2 no longer points into the frame
            insn(0x79, 2, 2, 0, 0),
            // *(u64 *)(r2 - 400) = r1: not the frame
            insn(0x7b, 2, 1, -400, 0),
            // call the function at 7
            insn(CALL, 0, PSEUDO_CALL, 0, 1),
            exit,
            // the callee: *(u32 *)(r10 - 12) = 0
            insn(0x62, 10, 0, -12, 0),
            exit,
        ];
        let used = measure(&program);
        assert_eq!(used.frames, vec![64, 12]);
        assert_eq!(used.deepest_chain, 64 + 16);
    }
}
