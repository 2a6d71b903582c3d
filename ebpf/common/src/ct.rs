//! A packet's connection-tracking state as OVN's ACL stages read it (`ct.trk`, `ct.new`,
//! `ct.est`, `ct.rel`, `ct.rpl`, `ct.inv` and `ct_mark.blocked`), packed in one byte, defined
//! once for the kernel, the agent's compiler and its evaluator. The compiler folds a flow's
//! conditions on the state (and northd's `ls_*_acl_hint` registers, which are a function of it)
//! into the set of the 128 states it applies in ([`States`]); the kernel tests one bit.

/// `ct.trk`: the packet went through conntrack.
pub const TRACKED: u8 = 1 << 0;
/// `ct.new`: the first packet of a connection (or one not yet answered).
pub const NEW: u8 = 1 << 1;
/// `ct.est`: a committed connection that has seen a reply.
pub const ESTABLISHED: u8 = 1 << 2;
/// `ct.rel`: related to a committed connection (an ICMP error about it).
pub const RELATED: u8 = 1 << 3;
/// `ct.rpl`: in the reply direction.
pub const REPLY: u8 = 1 << 4;
/// `ct.inv`: conntrack could not make sense of the packet.
pub const INVALID: u8 = 1 << 5;
/// `ct_mark.blocked`: the connection was committed, then a policy change blocked it.
pub const BLOCKED: u8 = 1 << 6;
/// Number of distinct states (bits above).
pub const STATE_COUNT: u32 = 128;

/// A set of states: bit `s` set ⇔ the set holds state `s`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(C)]
pub struct States {
    /// States 0..64.
    pub low: u64,
    /// States 64..128.
    pub high: u64,
}

impl States {
    /// Every state.
    pub const ALL: States = States {
        low: u64::MAX,
        high: u64::MAX,
    };

    /// Whether `state` (the bits above) is in the set.
    #[inline(always)]
    #[must_use]
    pub fn contains(&self, state: u8) -> bool {
        let bit = u32::from(state & 0x7f);
        if bit < 64 {
            self.low >> bit & 1 == 1
        } else {
            self.high >> (bit - 64) & 1 == 1
        }
    }

    /// The set with `state` added.
    #[must_use]
    pub fn with(self, state: u8) -> States {
        let bit = u32::from(state & 0x7f);
        if bit < 64 {
            States {
                low: self.low | 1 << bit,
                high: self.high,
            }
        } else {
            States {
                low: self.low,
                high: self.high | 1 << (bit - 64),
            }
        }
    }

    /// Whether the set is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.low == 0 && self.high == 0
    }
}

/// The hint registers northd 23.03's `ls_*_acl_hint` stage sets for a state (its flows, highest
/// priority first), as bits 7 (allow new), 8 (allow), 9 (drop) and 10 (block) of `reg0`.
#[must_use]
pub fn hints(state: u8) -> u32 {
    let has = |bit: u8| state & bit != 0;
    let (trk, new, est, rpl, blocked) = (
        has(TRACKED),
        has(NEW),
        has(ESTABLISHED),
        has(REPLY),
        has(BLOCKED),
    );
    const ALLOW_NEW: u32 = 1 << 7;
    const ALLOW: u32 = 1 << 8;
    const DROP: u32 = 1 << 9;
    const BLOCK: u32 = 1 << 10;
    // p7 and p6; p5; p4; p3 and p2; p1.
    if (new && !est) || (!new && est && !rpl && blocked) {
        ALLOW_NEW | DROP
    } else if !trk {
        ALLOW | DROP
    } else if !new && est && !rpl && !blocked {
        ALLOW | BLOCK
    } else if !est || blocked {
        DROP
    } else {
        BLOCK
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_hold_each_of_the_128_states_independently() {
        let mut set = States::default();
        for state in [0u8, 5, 63, 64, 100, 127] {
            assert!(!set.contains(state));
            set = set.with(state);
            assert!(set.contains(state));
        }
        assert!(!set.contains(6) && !set.contains(65));
        assert!((0..128u8).all(|s| States::ALL.contains(s)));
    }

    #[test]
    fn hints_follow_northd_priorities() {
        // A new connection: allow-new and drop; untracked: allow and drop; an established
        // request: allow and block; a reply: block only; blocked request: allow-new and drop.
        assert_eq!(hints(TRACKED | NEW), 1 << 7 | 1 << 9);
        assert_eq!(hints(0), 1 << 8 | 1 << 9);
        assert_eq!(hints(TRACKED | ESTABLISHED), 1 << 8 | 1 << 10);
        assert_eq!(hints(TRACKED | ESTABLISHED | REPLY), 1 << 10);
        assert_eq!(hints(TRACKED | ESTABLISHED | BLOCKED), 1 << 7 | 1 << 9);
        assert_eq!(hints(TRACKED | ESTABLISHED | REPLY | BLOCKED), 1 << 9);
        assert_eq!(hints(TRACKED | RELATED), 1 << 9);
    }
}
