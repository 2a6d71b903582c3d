//! A flow's instructions and the actions inside them, as OpenFlow 1.5 encodes them (each padded
//! to 8 bytes): `apply_actions` with output, set_field (registers and metadata through their
//! OXM/NXM fields, as OVS takes them), VLAN push and pop, TTL set and decrement, copy_field,
//! and Nicira's `resubmit(,table)`, `clone` and `multipath`; `goto_table`. An empty
//! instruction list drops the packet.

use super::oxm::{Field, padding};

/// `OFPP_IN_PORT`: the port the packet came in on.
pub const PORT_IN_PORT: u32 = 0xffff_fff8;
/// `OFPP_CONTROLLER`: the controller (the agent's answering session, [`super::answer`]).
pub const PORT_CONTROLLER: u32 = 0xffff_fffd;
/// `OFPP_LOCAL`: the bridge's own port.
pub const PORT_LOCAL: u32 = 0xffff_fffe;

/// Nicira's experimenter ID.
pub(super) const NX_VENDOR_ID: u32 = 0x0000_2320;

/// An action of an `apply_actions` instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Sends the packet out of port `port`.
    Output(u32),
    /// Sets a field (a register, the metadata, a header field) to the field's value.
    SetField(Field),
    /// Pushes an 802.1Q tag (`ethertype` 0x8100); its VID is set with a `SetField`.
    PushVlan,
    PopVlan,
    /// Nicira's `resubmit(,table)`: runs table `table` on the packet now, then goes on.
    Resubmit(u8),
    /// `move` (OpenFlow 1.5's copy_field): copies `bits` bits of field `source` (an NXM header, see
    /// [`super::oxm::NXM_REG14`]) from bit `source_offset` to field `destination` at bit
    /// `destination_offset`.
    Move {
        source: u32,
        source_offset: u16,
        destination: u32,
        destination_offset: u16,
        bits: u16,
    },
    /// Nicira's `clone(actions)`: runs `actions` on a copy of the packet (its fields and
    /// registers), then goes on with the packet as it was: how a flood or a crossing into
    /// another datapath leaves the rest of the actions untouched.
    Clone(Vec<Action>),
    /// `dec_ttl`: the IP TTL (or hop limit) less one (a packet it brings to 0 is not sent on).
    DecrementTtl,
    /// Sets the IP TTL.
    SetTtl(u8),
    /// Nicira's `multipath`: a symmetric hash of the packet's addresses, protocol and ports
    /// (`symmetric_l3l4+udp`) modulo `links`, written into the low 16 bits of `destination`
    /// (an NXM header): how a flow of an ECMP group picks its member.
    Multipath {
        links: u16,
        destination: u32,
    },
}

impl Action {
    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Action::Output(port) => {
                out.extend(0_u16.to_be_bytes());
                out.extend(16_u16.to_be_bytes());
                out.extend(port.to_be_bytes());
                // max_len: the whole packet, were it sent to a controller.
                out.extend(0xffff_u16.to_be_bytes());
                out.extend([0; 6]);
            }
            Action::SetField(field) => {
                let mut tlv = Vec::new();
                field.encode(&mut tlv);
                let length = 4 + tlv.len();
                out.extend(25_u16.to_be_bytes());
                out.extend(to_u16(length + padding(length)).to_be_bytes());
                out.extend(tlv);
                out.resize(out.len() + padding(length), 0);
            }
            Action::PushVlan => {
                out.extend(17_u16.to_be_bytes());
                out.extend(8_u16.to_be_bytes());
                out.extend(0x8100_u16.to_be_bytes());
                out.extend([0; 2]);
            }
            Action::PopVlan => {
                out.extend(18_u16.to_be_bytes());
                out.extend(8_u16.to_be_bytes());
                out.extend([0; 4]);
            }
            Action::Move {
                source,
                source_offset,
                destination,
                destination_offset,
                bits,
            } => {
                // OFPAT_COPY_FIELD (28), OpenFlow 1.5's form of Nicira's `move` (OVS takes
                // NXAST_REG_MOVE only up to 1.4): n_bits, offsets, 2 bytes of padding, the two
                // field headers, padding to 24 bytes.
                out.extend(28_u16.to_be_bytes());
                out.extend(24_u16.to_be_bytes());
                out.extend(bits.to_be_bytes());
                out.extend(source_offset.to_be_bytes());
                out.extend(destination_offset.to_be_bytes());
                out.extend([0; 2]);
                out.extend(source.to_be_bytes());
                out.extend(destination.to_be_bytes());
                out.extend([0; 4]);
            }
            Action::Clone(actions) => {
                // OFPAT_EXPERIMENTER, NXAST_CLONE (42): an ext_action_header (16 bytes), then
                // the actions, each already 8-byte aligned.
                let mut body = Vec::new();
                for action in actions {
                    action.encode(&mut body);
                }
                out.extend(0xffff_u16.to_be_bytes());
                out.extend(to_u16(16 + body.len()).to_be_bytes());
                out.extend(NX_VENDOR_ID.to_be_bytes());
                out.extend(42_u16.to_be_bytes());
                out.extend([0; 6]);
                out.extend(body);
            }
            Action::DecrementTtl => {
                // OFPAT_DEC_NW_TTL (24).
                out.extend(24_u16.to_be_bytes());
                out.extend(8_u16.to_be_bytes());
                out.extend([0; 4]);
            }
            Action::SetTtl(ttl) => {
                // OFPAT_SET_NW_TTL (23).
                out.extend(23_u16.to_be_bytes());
                out.extend(8_u16.to_be_bytes());
                out.push(*ttl);
                out.extend([0; 3]);
            }
            Action::Multipath { links, destination } => {
                // OFPAT_EXPERIMENTER, NXAST_MULTIPATH (10): fields (symmetric_l3l4+udp, 3),
                // basis, padding, algorithm (modulo_n, 0), max_link, arg, padding, ofs_nbits
                // (offset 0, 16 bits), destination: 32 bytes.
                out.extend(0xffff_u16.to_be_bytes());
                out.extend(32_u16.to_be_bytes());
                out.extend(NX_VENDOR_ID.to_be_bytes());
                out.extend(10_u16.to_be_bytes());
                out.extend(3_u16.to_be_bytes());
                out.extend(0_u16.to_be_bytes());
                out.extend([0; 2]);
                out.extend(0_u16.to_be_bytes());
                out.extend(links.saturating_sub(1).to_be_bytes());
                out.extend(0_u32.to_be_bytes());
                out.extend([0; 2]);
                out.extend(15_u16.to_be_bytes());
                out.extend(destination.to_be_bytes());
            }
            Action::Resubmit(table) => {
                // OFPAT_EXPERIMENTER, NXAST_RESUBMIT_TABLE (14): in_port (the packet's own,
                // OFPP_IN_PORT in 16 bits), table, padding.
                out.extend(0xffff_u16.to_be_bytes());
                out.extend(16_u16.to_be_bytes());
                out.extend(NX_VENDOR_ID.to_be_bytes());
                out.extend(14_u16.to_be_bytes());
                out.extend(0xfff8_u16.to_be_bytes());
                out.push(*table);
                out.extend([0; 3]);
            }
        }
    }
}

/// An instruction of a flow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Instruction {
    /// Runs the actions now, in order.
    ApplyActions(Vec<Action>),
    /// Goes on in table `table` (a later one) when the flow's actions are done.
    GotoTable(u8),
}

impl Instruction {
    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Instruction::GotoTable(table) => {
                out.extend(1_u16.to_be_bytes());
                out.extend(8_u16.to_be_bytes());
                out.push(*table);
                out.extend([0; 3]);
            }
            Instruction::ApplyActions(actions) => {
                let mut body = Vec::new();
                for action in actions {
                    action.encode(&mut body);
                }
                out.extend(4_u16.to_be_bytes());
                out.extend(to_u16(8 + body.len()).to_be_bytes());
                out.extend([0; 4]);
                out.extend(body);
            }
        }
    }
}

/// A length that a message's u16 length field holds (messages are at most 64 KiB; a longer one
/// is refused by the switch, not truncated silently here: the length saturates).
pub(super) fn to_u16(length: usize) -> u16 {
    u16::try_from(length).unwrap_or(u16::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each action and instruction in OpenFlow 1.5's layout, 8-byte aligned.
    #[test]
    fn actions_encode_in_openflow_1_5_layout() {
        let mut out = Vec::new();
        Instruction::ApplyActions(vec![
            Action::SetField(Field::register(15, 7)),
            Action::Resubmit(40),
            Action::Output(2),
        ])
        .encode(&mut out);
        assert_eq!(
            out,
            [
                0,
                4,
                0,
                56,
                0,
                0,
                0,
                0, // apply_actions, 8 + 48 bytes
                0,
                25,
                0,
                16,
                0,
                1,
                15 << 1,
                4,
                0,
                0,
                0,
                7,
                0,
                0,
                0,
                0, // set_field reg15 = 7
                0xff,
                0xff,
                0,
                16,
                0,
                0,
                0x23,
                0x20,
                0,
                14,
                0xff,
                0xf8,
                40,
                0,
                0,
                0, // resubmit
                0,
                0,
                0,
                16,
                0,
                0,
                0,
                2,
                0xff,
                0xff,
                0,
                0,
                0,
                0,
                0,
                0, // output:2
            ]
        );
        let mut goto = Vec::new();
        Instruction::GotoTable(9).encode(&mut goto);
        assert_eq!(goto, [0, 1, 0, 8, 9, 0, 0, 0]);
    }
}
