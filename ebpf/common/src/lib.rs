//! The contract between the ovnbpf agent and its kernel programs: map names, keys, values and
//! constants, defined once as `#[repr(C)]` and compiled for both sides. The eBPF crate uses these
//! types as map keys and values; the agent (feature `user`) reads and writes the same bytes through
//! aya. Owns no behaviour; changing a layout here means bumping [`LAYOUT_VERSION`].
#![no_std]

/// Version of the pinned map layout under the pin root. A new agent that finds pinned maps of
/// another version must migrate or recreate them; it must never reinterpret their bytes.
pub const LAYOUT_VERSION: u32 = 1;

/// Program names as they appear in the object file (the function names in the eBPF crate).
pub mod program {
    /// tcx ingress of a pod's host-side veth: traffic leaving the pod.
    pub const FROM_POD: &str = "from_pod";
    /// tcx ingress of the node's tunnel/uplink NIC: traffic arriving from other nodes.
    pub const FROM_UPLINK: &str = "from_uplink";
    /// Every program the object must contain; each one is loaded through the verifier at start-up.
    pub const ALL: [&str; 2] = [FROM_POD, FROM_UPLINK];
}

/// Map names as they appear in the object file.
pub mod map {
    /// Per-CPU hash: ifindex (`u32`) → [`super::InterfaceCounters`].
    pub const INTERFACE_COUNTERS: &str = "INTERFACE_COUNTERS";
}

/// Capacity of [`map::INTERFACE_COUNTERS`]: one entry per attached interface.
pub const MAX_INTERFACES: u32 = 65_536;

/// Per-interface packet counters, kept per CPU by the kernel and summed by the agent.
///
/// Every packet a program sees increments `packets` and `bytes` and exactly one of `ipv4`,
/// `other` (a well-formed Ethernet frame that is not IPv4) or `malformed` (too short for its
/// Ethernet header, or an IPv4 header that fails version/IHL/length checks).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InterfaceCounters {
    pub packets: u64,
    pub bytes: u64,
    pub ipv4: u64,
    pub other: u64,
    pub malformed: u64,
}

impl InterfaceCounters {
    /// Field-wise sum, used to fold per-CPU values into one total.
    #[must_use]
    pub fn sum(self, other: Self) -> Self {
        Self {
            packets: self.packets + other.packets,
            bytes: self.bytes + other.bytes,
            ipv4: self.ipv4 + other.ipv4,
            other: self.other + other.other,
            malformed: self.malformed + other.malformed,
        }
    }
}

// SAFETY: InterfaceCounters is repr(C), Copy, has no padding (five u64) and every bit pattern is
// a valid value.
#[cfg(feature = "user")]
unsafe impl aya::Pod for InterfaceCounters {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_have_the_kernel_layout() {
        // The kernel side writes five consecutive u64; any padding or reordering would corrupt reads.
        assert_eq!(core::mem::size_of::<InterfaceCounters>(), 40);
        assert_eq!(core::mem::align_of::<InterfaceCounters>(), 8);
    }

    #[test]
    fn sum_adds_every_field() {
        let a = InterfaceCounters {
            packets: 1,
            bytes: 2,
            ipv4: 3,
            other: 4,
            malformed: 5,
        };
        let b = InterfaceCounters {
            packets: 10,
            bytes: 20,
            ipv4: 30,
            other: 40,
            malformed: 50,
        };
        assert_eq!(
            a.sum(b),
            InterfaceCounters {
                packets: 11,
                bytes: 22,
                ipv4: 33,
                other: 44,
                malformed: 55
            }
        );
    }
}
