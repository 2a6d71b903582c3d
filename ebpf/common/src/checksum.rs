//! An Internet checksum updated field by field (RFC 1624), for the fields the kernel's
//! checksum helpers cannot reach: those inside the packet an ICMP error quotes (its IPv4 and
//! transport checksums, and ICMP's own over them), which the load-balancer stage translates.
//! Shared so the arithmetic is tested here against a whole recomputation. Pure; touches
//! nothing.

/// A checksum being updated as the 16-bit words it covers change: `HC' = ~(~HC + ~m + m')`.
#[derive(Clone, Copy, Debug)]
pub struct Checksum {
    sum: u32,
}

impl Checksum {
    /// The checksum field's current value (host order).
    #[must_use]
    pub const fn new(checksum: u16) -> Self {
        Self {
            sum: !checksum as u32,
        }
    }

    /// A 16-bit field covered by the checksum changed from `old` to `new` (host order).
    pub const fn replace16(&mut self, old: u16, new: u16) {
        self.sum += !old as u32 + new as u32;
        self.sum = (self.sum & 0xffff) + (self.sum >> 16);
    }

    /// A 32-bit field (an IPv4 address) changed from `old` to `new`, both as the packet holds
    /// them (read into a `u32` in memory order).
    pub const fn replace32(&mut self, old: u32, new: u32) {
        let (old, new) = (old.to_ne_bytes(), new.to_ne_bytes());
        self.replace16(
            u16::from_be_bytes([old[0], old[1]]),
            u16::from_be_bytes([new[0], new[1]]),
        );
        self.replace16(
            u16::from_be_bytes([old[2], old[3]]),
            u16::from_be_bytes([new[2], new[3]]),
        );
    }

    /// The checksum field's new value (host order).
    #[must_use]
    pub const fn value(&self) -> u16 {
        let sum = (self.sum & 0xffff) + (self.sum >> 16);
        !(((sum & 0xffff) + (sum >> 16)) as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::Checksum;

    /// The checksum of `bytes` computed whole.
    fn whole(bytes: &[u8]) -> u16 {
        let mut sum: u32 = bytes
            .chunks(2)
            .map(|pair| u32::from(u16::from_be_bytes([pair[0], pair[1]])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    /// An IPv4 header with its checksum (captured from a pod: 10.0.1.10 → 10.0.1.2, UDP).
    fn header() -> [u8; 20] {
        let mut header = [
            0x45, 0, 0, 0x30, 0xe0, 0x47, 0x40, 0, 0x40, 0x11, 0, 0, 10, 0, 1, 10, 10, 0, 1, 2,
        ];
        let checksum = whole(&header);
        header[10..12].copy_from_slice(&checksum.to_be_bytes());
        header
    }

    #[test]
    fn an_address_replaced_gives_the_checksum_computed_whole() {
        for new in [
            [10, 96, 0, 12],
            [255, 255, 255, 255],
            [0, 0, 0, 0],
            [10, 0, 1, 2],
        ] {
            let mut header = header();
            let mut checksum = Checksum::new(u16::from_be_bytes([header[10], header[11]]));
            let old = u32::from_ne_bytes([header[16], header[17], header[18], header[19]]);
            checksum.replace32(old, u32::from_ne_bytes(new));
            header[16..20].copy_from_slice(&new);
            header[10..12].copy_from_slice(&checksum.value().to_be_bytes());
            assert_eq!(whole(&header), 0, "{new:?}: {header:02x?}");
        }
    }

    #[test]
    fn words_replaced_one_by_one_give_the_checksum_computed_whole() {
        // An ICMP message over a quoted header whose address, port and checksum change: the
        // outer checksum follows each change.
        let mut message = [0_u8; 32];
        message[0] = 3;
        message[1] = 3;
        message[8..28].copy_from_slice(&header());
        message[28..30].copy_from_slice(&40_000_u16.to_be_bytes());
        message[30..32].copy_from_slice(&9_u16.to_be_bytes());
        let start = whole(&message);
        message[2..4].copy_from_slice(&start.to_be_bytes());
        assert_eq!(whole(&message), 0);

        let mut icmp = Checksum::new(start);
        let old_port = u16::from_be_bytes([message[30], message[31]]);
        icmp.replace16(old_port, 53);
        message[30..32].copy_from_slice(&53_u16.to_be_bytes());
        let old_checksum = u16::from_be_bytes([message[18], message[19]]);
        icmp.replace16(old_checksum, 0x1234);
        message[18..20].copy_from_slice(&0x1234_u16.to_be_bytes());
        let old_address = u32::from_ne_bytes([message[24], message[25], message[26], message[27]]);
        icmp.replace32(old_address, u32::from_ne_bytes([192, 168, 7, 9]));
        message[24..28].copy_from_slice(&[192, 168, 7, 9]);
        message[2..4].copy_from_slice(&icmp.value().to_be_bytes());
        assert_eq!(whole(&message), 0, "{message:02x?}");
    }

    #[test]
    fn nothing_replaced_keeps_the_checksum() {
        let mut checksum = Checksum::new(0xbeef);
        checksum.replace16(7, 7);
        assert_eq!(checksum.value(), 0xbeef);
    }
}
