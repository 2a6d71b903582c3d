//! OpenFlow 1.5 messages: the header (`version u8 | type u8 | length u16 | xid u32`), the ones
//! the agent sends (hello, echo reply, features and barrier requests, flow mods, bundle control
//! and add, set-config, packet-outs), and the ones it reads from the switch ([`Incoming`],
//! packet-ins among them).

use super::{
    action::{Action, Instruction, to_u16},
    oxm::Match,
};

/// OpenFlow 1.5's wire version.
pub const VERSION: u8 = 0x06;
/// The header's length.
pub const HEADER_LEN: usize = 8;

const HELLO: u8 = 0;
const ERROR: u8 = 1;
const ECHO_REQUEST: u8 = 2;
const ECHO_REPLY: u8 = 3;
const EXPERIMENTER: u8 = 4;
/// Nicira's TLV table messages (experimenter types): the map of Geneve options to
/// `tun_metadata` fields.
const NXT_TLV_TABLE_MOD: u32 = 24;
const NXT_TLV_TABLE_REQUEST: u32 = 25;
const NXT_TLV_TABLE_REPLY: u32 = 26;
const FEATURES_REQUEST: u8 = 5;
const FEATURES_REPLY: u8 = 6;
const SET_CONFIG: u8 = 9;
const PACKET_IN: u8 = 10;
const PACKET_OUT: u8 = 13;
const FLOW_MOD: u8 = 14;
const MULTIPART_REQUEST: u8 = 18;
const MULTIPART_REPLY: u8 = 19;
/// `OFPMP_FLOW_DESC`: the flows' descriptions (OpenFlow 1.5's name for flow stats).
const MULTIPART_FLOW_DESC: u16 = 1;
/// `OFPMPF_REPLY_MORE`: more replies of the request follow.
const MULTIPART_MORE: u16 = 1;
const BARRIER_REQUEST: u8 = 20;
const BARRIER_REPLY: u8 = 21;
const BUNDLE_CONTROL: u8 = 33;
const BUNDLE_ADD_MESSAGE: u8 = 34;

/// The bits of a cookie that name its owner (the low 32): a delete or count by owner masks the
/// rest, which the backend uses to tell its drop flows' reasons apart.
pub const OWNER_MASK: u64 = 0xffff_ffff;

/// `OFPMP_AGGREGATE_STATS`: the packets of the flows a request selects, summed.
const MULTIPART_AGGREGATE: u16 = 2;
/// `OFPMP_PORT_STATS`: each port's packet and byte counts.
const MULTIPART_PORT_STATS: u16 = 4;
/// An `ofp_port_stats` entry's fixed part (length, port, duration, eight counters); properties
/// may follow.
const PORT_STATS_LEN: usize = 80;
/// OXS (OpenFlow 1.5's statistics TLVs): the basic class and its packet count.
const OXS_BASIC: u16 = 0x8002;
const OXS_PACKET_COUNT: u8 = 4;

/// `OFPTT_ALL`: every table (a delete's).
pub const ALL_TABLES: u8 = 0xff;
const NO_BUFFER: u32 = 0xffff_ffff;
const ANY: u32 = 0xffff_ffff;

/// A whole message: the header with `kind`, `xid` and the length, then `body`.
fn message(kind: u8, xid: u32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.push(VERSION);
    out.push(kind);
    out.extend(to_u16(HEADER_LEN + body.len()).to_be_bytes());
    out.extend(xid.to_be_bytes());
    out.extend(body);
    out
}

/// HELLO with a version bitmap element naming OpenFlow 1.5 only.
#[must_use]
pub fn hello(xid: u32) -> Vec<u8> {
    // OFPHET_VERSIONBITMAP, 8 bytes, bit 6 (version 0x06).
    let mut body = Vec::new();
    body.extend(1_u16.to_be_bytes());
    body.extend(8_u16.to_be_bytes());
    body.extend((1_u32 << VERSION).to_be_bytes());
    message(HELLO, xid, &body)
}

#[must_use]
pub fn echo_reply(xid: u32, data: &[u8]) -> Vec<u8> {
    message(ECHO_REPLY, xid, data)
}

#[must_use]
pub fn features_request(xid: u32) -> Vec<u8> {
    message(FEATURES_REQUEST, xid, &[])
}

#[must_use]
pub fn barrier_request(xid: u32) -> Vec<u8> {
    message(BARRIER_REQUEST, xid, &[])
}

/// A flow stats request (`OFPMP_FLOW_DESC`) for the flows of `cookie` (under `mask`), in
/// every table.
#[must_use]
pub fn flow_stats_request(xid: u32, cookie: u64, mask: u64) -> Vec<u8> {
    stats_request(xid, MULTIPART_FLOW_DESC, cookie, mask)
}

/// An aggregate stats request (`OFPMP_AGGREGATE_STATS`): the packets the flows of `cookie`
/// (under `mask`) matched, in every table.
#[must_use]
pub fn aggregate_stats_request(xid: u32, cookie: u64, mask: u64) -> Vec<u8> {
    stats_request(xid, MULTIPART_AGGREGATE, cookie, mask)
}

/// A port stats request (`OFPMP_PORT_STATS`) for every port (`OFPP_ANY`).
#[must_use]
pub fn port_stats_request(xid: u32) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(MULTIPART_PORT_STATS.to_be_bytes());
    body.extend(0_u16.to_be_bytes());
    body.extend([0; 4]);
    body.extend(ANY.to_be_bytes());
    body.extend([0; 4]);
    message(MULTIPART_REQUEST, xid, &body)
}

/// A multipart request of `kind` with a flow stats request's body.
fn stats_request(xid: u32, kind: u16, cookie: u64, mask: u64) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(kind.to_be_bytes());
    body.extend(0_u16.to_be_bytes());
    body.extend([0; 4]);
    body.push(ALL_TABLES);
    body.extend([0; 3]);
    body.extend(ANY.to_be_bytes());
    body.extend(ANY.to_be_bytes());
    body.extend([0; 4]);
    body.extend(cookie.to_be_bytes());
    body.extend(mask.to_be_bytes());
    Match::new().encode(&mut body);
    message(MULTIPART_REQUEST, xid, &body)
}

/// `OFPT_SET_CONFIG`: normal fragment handling, and `miss_send_len` bytes of a packet sent to
/// this connection (`0xffff`, `OFPCML_NO_BUFFER`: the whole packet, unbuffered). Open vSwitch
/// sends a service connection (its management socket) packet-ins only once this is nonzero.
#[must_use]
pub fn set_config(xid: u32, miss_send_len: u16) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(0_u16.to_be_bytes());
    body.extend(miss_send_len.to_be_bytes());
    message(SET_CONFIG, xid, &body)
}

/// `OFPT_PACKET_OUT` (OpenFlow 1.5): `data` injected as if it came in on `in_port` (the match
/// holds only that pipeline field), through `actions`.
#[must_use]
pub fn packet_out(xid: u32, in_port: u32, actions: &[Action], data: &[u8]) -> Vec<u8> {
    let mut encoded = Vec::new();
    for action in actions {
        action.encode(&mut encoded);
    }
    let mut body = Vec::new();
    body.extend(NO_BUFFER.to_be_bytes());
    body.extend(to_u16(encoded.len()).to_be_bytes());
    body.extend([0; 2]);
    Match::new()
        .with(super::oxm::Field::in_port(in_port))
        .encode(&mut body);
    body.extend(encoded);
    body.extend(data);
    message(PACKET_OUT, xid, &body)
}

/// A packet the switch sent up (`OFPT_PACKET_IN`): the flow that sent it (table, cookie), its
/// pipeline fields as they were then, and the packet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PacketIn {
    pub table: u8,
    pub cookie: u64,
    pub in_port: u32,
    /// OVN's datapath key.
    pub metadata: u64,
    /// `reg0`–`reg15` (zero where the switch left one out: it sends the nonzero ones).
    pub registers: [u32; 16],
    pub data: Vec<u8>,
}

/// OXM classes of the packet-in's pipeline fields: OpenFlow basic (`in_port`, `metadata`),
/// the 64-bit packet registers (OpenFlow 1.5's `xreg`n: `reg`2n above `reg`2n+1), Nicira's
/// 32-bit registers (what earlier versions send).
const OXM_BASIC: u16 = 0x8000;
const OXM_PACKET_REGS: u16 = 0x8001;
const NXM_1: u16 = 0x0001;

/// Decodes a packet-in's body (after the header).
fn packet_in(body: &[u8]) -> Option<PacketIn> {
    let table = *body.get(7)?;
    let cookie = u64::from_be_bytes(body.get(8..16)?.try_into().ok()?);
    // The match: type, length (without its padding), OXM TLVs; then 2 bytes of padding.
    let length = usize::from(u16::from_be_bytes(body.get(18..20)?.try_into().ok()?));
    let mut fields = body.get(20..16 + length)?;
    let data = body.get(16 + length + super::oxm::padding(length) + 2..)?;
    let mut packet_in = PacketIn {
        table,
        cookie,
        data: data.to_vec(),
        ..PacketIn::default()
    };
    while let [c0, c1, field, size, rest @ ..] = fields {
        let size = usize::from(*size);
        let value = rest.get(..size)?;
        // A masked field carries its mask after the value: the value is its first half.
        let value = if field & 1 == 1 {
            &value[..size / 2]
        } else {
            value
        };
        let number = field >> 1;
        let as_u64 = || {
            let mut bytes = [0; 8];
            let at = 8_usize.checked_sub(value.len())?;
            bytes.get_mut(at..)?.copy_from_slice(value);
            Some(u64::from_be_bytes(bytes))
        };
        match (u16::from_be_bytes([*c0, *c1]), number) {
            (OXM_BASIC, 0) => packet_in.in_port = u32::try_from(as_u64()?).ok()?,
            (OXM_BASIC, 2) => packet_in.metadata = as_u64()?,
            (OXM_PACKET_REGS, index @ 0..8) => {
                let value = as_u64()?;
                let index = usize::from(index) * 2;
                packet_in.registers[index] = u32::try_from(value >> 32).ok()?;
                packet_in.registers[index + 1] = u32::try_from(value & 0xffff_ffff).ok()?;
            }
            (NXM_1, index @ 0..16) => {
                packet_in.registers[usize::from(index)] = u32::try_from(as_u64()?).ok()?;
            }
            _ => {}
        }
        fields = &rest[size..];
    }
    Some(packet_in)
}

/// What a flow mod does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Adds the flow (replacing one with the same match and priority).
    Add,
    /// Deletes the flows the match (and cookie) selects, at any priority.
    Delete,
    /// Deletes the one flow of this exact match and priority.
    DeleteStrict,
}

/// A flow mod: a flow of table `table` with `priority`, `matching`, `instructions`, owned by
/// `cookie` (a delete selects by `cookie` under `cookie_mask` too).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowMod {
    pub command: Command,
    pub table: u8,
    pub priority: u16,
    pub cookie: u64,
    pub cookie_mask: u64,
    pub matching: Match,
    pub instructions: Vec<Instruction>,
}

impl FlowMod {
    /// Adds a flow owned by `cookie`.
    #[must_use]
    pub fn add(
        cookie: u64,
        table: u8,
        priority: u16,
        matching: Match,
        instructions: Vec<Instruction>,
    ) -> Self {
        Self {
            command: Command::Add,
            table,
            priority,
            cookie,
            cookie_mask: 0,
            matching,
            instructions,
        }
    }

    /// Deletes every flow of every table owned by `cookie`, and nothing else.
    #[must_use]
    pub fn delete_cookie(cookie: u64) -> Self {
        Self {
            command: Command::Delete,
            table: ALL_TABLES,
            priority: 0,
            cookie,
            cookie_mask: OWNER_MASK,
            matching: Match::new(),
            instructions: Vec::new(),
        }
    }

    /// The message (`ofp_flow_mod`).
    #[must_use]
    pub fn encode(&self, xid: u32) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend(self.cookie.to_be_bytes());
        body.extend(self.cookie_mask.to_be_bytes());
        body.push(self.table);
        body.push(match self.command {
            Command::Add => 0,
            Command::Delete => 3,
            Command::DeleteStrict => 4,
        });
        body.extend(0_u16.to_be_bytes()); // idle timeout
        body.extend(0_u16.to_be_bytes()); // hard timeout
        body.extend(self.priority.to_be_bytes());
        body.extend(NO_BUFFER.to_be_bytes());
        body.extend(ANY.to_be_bytes()); // out_port
        body.extend(ANY.to_be_bytes()); // out_group
        body.extend(0_u16.to_be_bytes()); // flags
        body.extend(0_u16.to_be_bytes()); // importance
        self.matching.encode(&mut body);
        for instruction in &self.instructions {
            instruction.encode(&mut body);
        }
        message(FLOW_MOD, xid, &body)
    }
}

/// A bundle control request: `OPEN_REQUEST` (0), `COMMIT_REQUEST` (4) or `DISCARD_REQUEST` (6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BundleControl {
    Open = 0,
    Commit = 4,
    Discard = 6,
}

/// A bundle's flags: atomic (all or nothing) and ordered (in the order added).
const BUNDLE_ATOMIC_ORDERED: u16 = 1 | 2;

/// `OFPT_BUNDLE_CONTROL` for bundle `bundle`.
#[must_use]
pub fn bundle_control(xid: u32, bundle: u32, control: BundleControl) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(bundle.to_be_bytes());
    body.extend((control as u16).to_be_bytes());
    body.extend(BUNDLE_ATOMIC_ORDERED.to_be_bytes());
    message(BUNDLE_CONTROL, xid, &body)
}

/// `OFPT_BUNDLE_ADD_MESSAGE`: `inner` (a whole message, whose xid must be `xid`) into bundle
/// `bundle`.
#[must_use]
pub fn bundle_add(xid: u32, bundle: u32, inner: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(bundle.to_be_bytes());
    body.extend(0_u16.to_be_bytes());
    body.extend(BUNDLE_ATOMIC_ORDERED.to_be_bytes());
    body.extend(inner);
    message(BUNDLE_ADD_MESSAGE, xid, &body)
}

/// A Geneve option mapped to a `tun_metadata` field: (option class, type, length, field
/// index).
pub type TlvMapping = (u16, u8, u8, u16);

/// `NXT_TLV_TABLE_REQUEST`: the switch's Geneve option map.
#[must_use]
pub fn tlv_table_request(xid: u32) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(super::action::NX_VENDOR_ID.to_be_bytes());
    body.extend(NXT_TLV_TABLE_REQUEST.to_be_bytes());
    message(EXPERIMENTER, xid, &body)
}

/// `NXT_TLV_TABLE_MOD` adding `mapping`.
#[must_use]
pub fn tlv_table_add(xid: u32, (class, kind, length, index): TlvMapping) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend(super::action::NX_VENDOR_ID.to_be_bytes());
    body.extend(NXT_TLV_TABLE_MOD.to_be_bytes());
    body.extend(0_u16.to_be_bytes()); // NXTTMC_ADD
    body.extend([0; 6]);
    body.extend(class.to_be_bytes());
    body.push(kind);
    body.push(length);
    body.extend(index.to_be_bytes());
    body.extend([0; 2]);
    message(EXPERIMENTER, xid, &body)
}

/// A message read from the switch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Incoming {
    /// HELLO: the versions the switch speaks (its bitmap, or its header's version alone).
    Hello {
        versions: u32,
    },
    Error {
        kind: u16,
        code: u16,
    },
    EchoRequest {
        data: Vec<u8>,
    },
    EchoReply,
    FeaturesReply {
        datapath_id: u64,
        tables: u8,
    },
    BarrierReply,
    /// A bundle control reply: the request's type plus one (`OPEN_REPLY`, `COMMIT_REPLY`, …).
    BundleReply {
        bundle: u32,
        reply: u16,
    },
    /// An aggregate stats reply: the packets the selected flows matched.
    AggregateStats {
        packets: u64,
    },
    /// A part of a flow stats reply: the flows it describes, and whether more parts follow.
    FlowStats {
        flows: usize,
        more: bool,
    },
    /// A part of a port stats reply: each port's counts, and whether more parts follow.
    PortStats {
        ports: Vec<PortCounters>,
        more: bool,
    },
    /// The switch's Geneve option map (`NXT_TLV_TABLE_REPLY`).
    TlvTable {
        mappings: Vec<TlvMapping>,
    },
    /// A packet a flow sent to the controller.
    PacketIn(Box<PacketIn>),
    /// Anything else (port status, packet-ins nobody asked for): its type.
    Other {
        kind: u8,
    },
}

/// One port's counts in a port stats reply, as the switch sees them: `rx` what it took in from
/// the port, `tx` what it sent out of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortCounters {
    pub port: u32,
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
}

/// Why a message could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("a message of {0} bytes is shorter than its header")]
    Short(usize),
    #[error("message type {kind} has a {length}-byte body, too short for it")]
    Truncated { kind: u8, length: usize },
}

/// The header's (type, length, xid) of the 8 bytes `header`.
#[must_use]
pub fn parse_header(header: &[u8; HEADER_LEN]) -> (u8, usize, u32) {
    let length = usize::from(u16::from_be_bytes([header[2], header[3]]));
    let xid = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    (header[1], length, xid)
}

/// Decodes one whole message (`bytes`, header included).
///
/// # Errors
/// When `bytes` is shorter than the header or than the fields its type has.
pub fn decode(bytes: &[u8]) -> Result<Incoming, DecodeError> {
    let header: &[u8; HEADER_LEN] = bytes
        .get(..HEADER_LEN)
        .and_then(|h| h.try_into().ok())
        .ok_or(DecodeError::Short(bytes.len()))?;
    let (kind, _, _) = parse_header(header);
    let body = &bytes[HEADER_LEN..];
    let truncated = || DecodeError::Truncated {
        kind,
        length: body.len(),
    };
    let u16_at = |at: usize| -> Result<u16, DecodeError> {
        body.get(at..at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
            .ok_or_else(truncated)
    };
    let u32_at = |at: usize| -> Result<u32, DecodeError> {
        body.get(at..at + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(truncated)
    };
    Ok(match kind {
        HELLO => Incoming::Hello {
            versions: hello_versions(header[0], body),
        },
        ERROR => Incoming::Error {
            kind: u16_at(0)?,
            code: u16_at(2)?,
        },
        ECHO_REQUEST => Incoming::EchoRequest {
            data: body.to_vec(),
        },
        ECHO_REPLY => Incoming::EchoReply,
        FEATURES_REPLY => {
            let id = body.get(..8).ok_or_else(truncated)?;
            let mut datapath_id = [0; 8];
            datapath_id.copy_from_slice(id);
            Incoming::FeaturesReply {
                datapath_id: u64::from_be_bytes(datapath_id),
                tables: *body.get(12).ok_or_else(truncated)?,
            }
        }
        BARRIER_REPLY => Incoming::BarrierReply,
        PACKET_IN => Incoming::PacketIn(Box::new(packet_in(body).ok_or_else(truncated)?)),
        MULTIPART_REPLY if u16_at(0)? == MULTIPART_FLOW_DESC => {
            // Type, flags, 4 bytes of padding, then the flow descriptions, each led by its
            // length.
            let mut descriptions = body.get(8..).unwrap_or_default();
            let mut flows = 0;
            while let Some(length) = descriptions.get(..2) {
                let length = usize::from(u16::from_be_bytes([length[0], length[1]]));
                if length == 0 || length > descriptions.len() {
                    return Err(truncated());
                }
                descriptions = &descriptions[length..];
                flows += 1;
            }
            Incoming::FlowStats {
                flows,
                more: u16_at(2)? & MULTIPART_MORE != 0,
            }
        }
        MULTIPART_REPLY if u16_at(0)? == MULTIPART_PORT_STATS => {
            // Type, flags, 4 bytes of padding, then `ofp_port_stats` entries, each led by its
            // length: port, duration, then rx/tx packets and rx/tx bytes (and more counters and
            // properties, not read).
            let mut entries = body.get(8..).unwrap_or_default();
            let mut ports = Vec::new();
            while let Some(length) = entries.get(..2) {
                let length = usize::from(u16::from_be_bytes([length[0], length[1]]));
                if length < PORT_STATS_LEN || length > entries.len() {
                    return Err(truncated());
                }
                let u32_in = |at: usize| {
                    u32::from_be_bytes([
                        entries[at],
                        entries[at + 1],
                        entries[at + 2],
                        entries[at + 3],
                    ])
                };
                let u64_in = |at: usize| (u64::from(u32_in(at)) << 32) | u64::from(u32_in(at + 4));
                ports.push(PortCounters {
                    port: u32_in(4),
                    rx_packets: u64_in(16),
                    tx_packets: u64_in(24),
                    rx_bytes: u64_in(32),
                    tx_bytes: u64_in(40),
                });
                entries = &entries[length..];
            }
            Incoming::PortStats {
                ports,
                more: u16_at(2)? & MULTIPART_MORE != 0,
            }
        }
        MULTIPART_REPLY if u16_at(0)? == MULTIPART_AGGREGATE => {
            // Type, flags, 4 bytes of padding, then `ofp_stats`: reserved, its length, OXS
            // TLVs (class, field << 1, length, value).
            let length = usize::from(u16_at(10)?);
            let mut fields = body.get(12..8 + length).ok_or_else(truncated)?;
            let mut packets = 0;
            while let [c0, c1, field, size, rest @ ..] = fields {
                let size = usize::from(*size);
                let value = rest.get(..size).ok_or_else(truncated)?;
                if u16::from_be_bytes([*c0, *c1]) == OXS_BASIC
                    && field >> 1 == OXS_PACKET_COUNT
                    && let Ok(bytes) = <[u8; 8]>::try_from(value)
                {
                    packets = u64::from_be_bytes(bytes);
                }
                fields = &rest[size..];
            }
            Incoming::AggregateStats { packets }
        }
        BUNDLE_CONTROL => Incoming::BundleReply {
            bundle: u32_at(0)?,
            reply: u16_at(4)?,
        },
        EXPERIMENTER
            if u32_at(0)? == super::action::NX_VENDOR_ID && u32_at(4)? == NXT_TLV_TABLE_REPLY =>
        {
            // max_option_space u32, max_fields u16, reserved 10 bytes, then 8-byte mappings.
            let mappings = body
                .get(24..)
                .unwrap_or_default()
                .chunks_exact(8)
                .map(|m| {
                    (
                        u16::from_be_bytes([m[0], m[1]]),
                        m[2],
                        m[3],
                        u16::from_be_bytes([m[4], m[5]]),
                    )
                })
                .collect();
            Incoming::TlvTable { mappings }
        }
        other => Incoming::Other { kind: other },
    })
}

/// The versions a HELLO offers: its version bitmap element's first word, or the header's
/// version alone (a HELLO without elements).
fn hello_versions(version: u8, mut elements: &[u8]) -> u32 {
    while elements.len() >= 4 {
        let kind = u16::from_be_bytes([elements[0], elements[1]]);
        let length = usize::from(u16::from_be_bytes([elements[2], elements[3]]));
        if length < 4 || length > elements.len() {
            break;
        }
        if kind == 1 && length >= 8 {
            return u32::from_be_bytes([elements[4], elements[5], elements[6], elements[7]]);
        }
        elements = &elements[length + super::oxm::padding(length)..];
    }
    1_u32.checked_shl(u32::from(version)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::openflow::{action::Action, oxm::Field};

    /// A flow mod's fixed part, match and instructions in OpenFlow 1.5's layout.
    #[test]
    fn a_flow_mod_encodes_in_openflow_1_5_layout() {
        let flow = FlowMod::add(
            0xab,
            3,
            100,
            Match::new().with(Field::in_port(1)),
            vec![Instruction::ApplyActions(vec![Action::Output(2)])],
        );
        let bytes = flow.encode(7);
        assert_eq!(&bytes[..8], &[6, 14, 0, 88, 0, 0, 0, 7]);
        assert_eq!(bytes.len(), 88);
        let (cookie, mask) = (&bytes[8..16], &bytes[16..24]);
        assert_eq!(cookie, &0xab_u64.to_be_bytes());
        assert_eq!(mask, &[0; 8]);
        assert_eq!(&bytes[24..26], &[3, 0], "table 3, ADD");
        assert_eq!(&bytes[30..32], &[0, 100], "priority");
        // The match: OXM, 4 + 8 bytes (in_port), no padding.
        assert_eq!(&bytes[48..60], &[0, 1, 0, 12, 0x80, 0, 0, 4, 0, 0, 0, 1]);
        assert_eq!(&bytes[60..64], &[0; 4]);
        assert_eq!(&bytes[64..68], &[0, 4, 0, 24], "apply_actions");
    }

    /// A packet-in as Open vSwitch sends it in OpenFlow 1.5: the flow's table and cookie, the
    /// pipeline fields (in_port, metadata, the 64-bit packet registers `xreg`n holding `reg`2n
    /// above `reg`2n+1) in its match, two bytes of padding, the frame. A match running past the
    /// message is refused.
    #[test]
    fn a_packet_in_decodes_with_its_pipeline_fields() {
        let mut body = Vec::new();
        body.extend(NO_BUFFER.to_be_bytes());
        body.extend(60_u16.to_be_bytes());
        body.push(1); // OFPR_ACTION
        body.push(21);
        body.extend(0x0011_0b0f_0001_u64.to_be_bytes());
        let mut fields = Vec::new();
        fields.extend([0x80, 0x00, 0, 4, 0, 0, 0, 3]);
        fields.extend([0x80, 0x00, 2 << 1, 8]);
        fields.extend(7_u64.to_be_bytes());
        fields.extend([0x80, 0x01, 1 << 1, 8]);
        fields.extend((0x0a00_0101_u64 << 32 | 9).to_be_bytes());
        fields.extend([0x80, 0x01, 7 << 1, 8]);
        fields.extend((4_u64 << 32 | 5).to_be_bytes());
        let length = 4 + fields.len();
        body.extend(1_u16.to_be_bytes());
        body.extend(to_u16(length).to_be_bytes());
        body.extend(&fields);
        body.resize(body.len() + super::super::oxm::padding(length), 0);
        body.extend([0, 0]);
        body.extend([0xaa; 60]);
        let bytes = message(PACKET_IN, 9, &body);
        let mut registers = [0; 16];
        registers[2] = 0x0a00_0101;
        registers[3] = 9;
        registers[14] = 4;
        registers[15] = 5;
        assert_eq!(
            decode(&bytes),
            Ok(Incoming::PacketIn(Box::new(PacketIn {
                table: 21,
                cookie: 0x0011_0b0f_0001,
                in_port: 3,
                metadata: 7,
                registers,
                data: vec![0xaa; 60],
            })))
        );
        let mut cut = body.clone();
        cut[18..20].copy_from_slice(&500_u16.to_be_bytes());
        assert!(matches!(
            decode(&message(PACKET_IN, 9, &cut)),
            Err(DecodeError::Truncated { kind: 10, .. })
        ));
    }

    /// A packet-out in OpenFlow 1.5's layout: no buffer, the actions' length, a match with only
    /// the input port, the actions, the frame.
    #[test]
    fn a_packet_out_encodes_in_openflow_1_5_layout() {
        let bytes = packet_out(4, 0xffff_fffd, &[Action::Output(2)], &[0xbb; 42]);
        assert_eq!(&bytes[..2], &[6, 13]);
        assert_eq!(bytes.len(), 8 + 8 + 16 + 16 + 42);
        assert_eq!(&bytes[8..12], &NO_BUFFER.to_be_bytes());
        assert_eq!(&bytes[12..14], &16_u16.to_be_bytes(), "actions' length");
        assert_eq!(
            &bytes[16..32],
            &[
                0, 1, 0, 12, 0x80, 0, 0, 4, 0xff, 0xff, 0xff, 0xfd, 0, 0, 0, 0
            ]
        );
        assert_eq!(&bytes[32..40], &[0, 0, 0, 16, 0, 0, 0, 2], "output:2");
        assert_eq!(&bytes[48..], &[0xbb; 42]);
    }

    /// What the switch sends is read: its HELLO's bitmap (or its header's version), errors,
    /// echo requests with their data, features, bundle replies; short messages refused.
    #[test]
    fn switch_messages_decode() {
        assert_eq!(decode(&hello(1)), Ok(Incoming::Hello { versions: 1 << 6 }));
        assert_eq!(
            decode(&[4, 0, 0, 8, 0, 0, 0, 1]),
            Ok(Incoming::Hello { versions: 1 << 4 })
        );
        assert_eq!(
            decode(&[6, 1, 0, 12, 0, 0, 0, 9, 0, 5, 0, 2]),
            Ok(Incoming::Error { kind: 5, code: 2 })
        );
        assert_eq!(
            decode(&[6, 2, 0, 10, 0, 0, 0, 9, 0xaa, 0xbb]),
            Ok(Incoming::EchoRequest {
                data: vec![0xaa, 0xbb]
            })
        );
        let mut features = vec![6, 6, 0, 32, 0, 0, 0, 2];
        features.extend(0x42_u64.to_be_bytes());
        features.extend([0, 0, 0, 0, 254, 0, 0, 0]);
        features.extend([0; 8]);
        assert_eq!(
            decode(&features),
            Ok(Incoming::FeaturesReply {
                datapath_id: 0x42,
                tables: 254
            })
        );
        assert_eq!(
            decode(&[6, 33, 0, 16, 0, 0, 0, 3, 0, 0, 0, 1, 0, 5, 0, 3]),
            Ok(Incoming::BundleReply {
                bundle: 1,
                reply: 5
            })
        );
        // A flow stats reply part: two descriptions (16 and 8 bytes, each led by its length),
        // more to come; one whose length runs past the message is refused.
        let mut stats = vec![6, 19, 0, 40, 0, 0, 0, 4, 0, 1, 0, 1, 0, 0, 0, 0];
        stats.extend([0, 16]);
        stats.extend([0; 14]);
        stats.extend([0, 8]);
        stats.extend([0; 6]);
        assert_eq!(
            decode(&stats),
            Ok(Incoming::FlowStats {
                flows: 2,
                more: true
            })
        );
        stats[32..34].copy_from_slice(&[0, 9]);
        assert!(matches!(
            decode(&stats),
            Err(DecodeError::Truncated { kind: 19, .. })
        ));
        // An aggregate stats reply: `ofp_stats` with a flow count (skipped) and the packet
        // count.
        let mut aggregate = vec![6, 19, 0, 40, 0, 0, 0, 5, 0, 2, 0, 0, 0, 0, 0, 0];
        aggregate.extend([0, 0, 0, 24]);
        aggregate.extend([0x80, 0x02, 3 << 1, 4, 0, 0, 0, 9]);
        aggregate.extend([0x80, 0x02, 4 << 1, 8]);
        aggregate.extend(1234_u64.to_be_bytes());
        assert_eq!(
            decode(&aggregate),
            Ok(Incoming::AggregateStats { packets: 1234 })
        );
        // A port stats reply: port 3's entry (80 bytes, then an 8-byte property, which is
        // skipped) with rx 5 packets / 700 bytes and tx 6 / 800, no more parts; an entry
        // shorter than the fixed part is refused.
        let mut ports = vec![6, 19, 0, 104, 0, 0, 0, 6, 0, 4, 0, 0, 0, 0, 0, 0];
        ports.extend([0, 88, 0, 0, 0, 0, 0, 3]);
        ports.extend([0; 8]);
        for count in [5_u64, 6, 700, 800] {
            ports.extend(count.to_be_bytes());
        }
        ports.extend([0; 32]);
        ports.extend([0, 0, 0, 8, 0, 0, 0, 0]);
        assert_eq!(ports.len(), 104);
        assert_eq!(
            decode(&ports),
            Ok(Incoming::PortStats {
                ports: vec![PortCounters {
                    port: 3,
                    rx_packets: 5,
                    tx_packets: 6,
                    rx_bytes: 700,
                    tx_bytes: 800,
                }],
                more: false
            })
        );
        ports[16..18].copy_from_slice(&[0, 72]);
        assert!(matches!(
            decode(&ports),
            Err(DecodeError::Truncated { kind: 19, .. })
        ));
        assert_eq!(
            port_stats_request(7),
            [
                6, 18, 0, 24, 0, 0, 0, 7, 0, 4, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0,
                0
            ]
        );
        assert_eq!(decode(&[6, 1]), Err(DecodeError::Short(2)));
        assert!(matches!(
            decode(&[6, 1, 0, 9, 0, 0, 0, 1, 0]),
            Err(DecodeError::Truncated { kind: 1, .. })
        ));
    }
}
