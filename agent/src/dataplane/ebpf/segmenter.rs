//! The node's segmenter: a veth pair in the agent's namespace through which GSO frames toward a
//! chassis that wants outer UDP checksums leave, so each segment gets its own.
//!
//! A tc program cannot give a GSO super-packet an outer UDP checksum: the kernel copies the
//! outer header's checksum into every segment unless the skb is marked
//! `SKB_GSO_UDP_TUNNEL_CSUM`, which `bpf_skb_adjust_room` never sets. So the programs send such
//! frames, encapsulated and with checksum 0, out of the pair's sending end, [`SENDING`], whose
//! UDP-tunnel segmentation offloads are off ([`TUNNEL_GSO`]): the kernel segments every such
//! packet it transmits there in software (inner TCP or UDP, fixing each segment's outer lengths
//! and IPv4 checksum). (`gso_max_segs` 1 would not do: `bpf_skb_adjust_room` zeroes the
//! packet's segment count, which the kernel compares with it.) Each segment
//! arrives on [`RECEIVING`], whose `from_segmenter` program checksums it and redirects it out of
//! the uplink. Frames without GSO, and GSO frames toward chassis that want no checksum, never
//! come here. The cost is the software segmentation and one veth crossing per segment, paid only
//! by TCP (and UDP GSO) toward such chassis; README's Geneve section has the numbers.
//!
//! A node where the pair cannot be set up (logged) forwards without it: such GSO frames then
//! leave with checksum 0, legal over IPv4. With pins the pair lives as long as the node runs
//! ovnbpf: a restarted agent adopts it (its
//! programs keep running through the pinned link), and `unpin` deletes it; without pins it goes
//! with the agent's datapath. Touches only these two links.

use std::io;

use crate::netlink::{self, Socket};

/// The sending end (the programs redirect GSO frames to its egress).
pub const SENDING: &str = "ovnbpf-segin";
/// The offloads [`SENDING`] has off, so UDP-tunnel GSO packets are segmented on it.
pub const TUNNEL_GSO: [&str; 2] = ["tx-udp_tnl-segmentation", "tx-udp_tnl-csum-segmentation"];
/// The receiving end (`from_segmenter` on its ingress).
pub const RECEIVING: &str = "ovnbpf-segout";
/// Both ends' MTU: segments are as long as the uplink lets them be; the pair must never be
/// what refuses one.
const MTU: u32 = 65_535;

/// The pair's interface indexes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segmenter {
    pub sending: u32,
    pub receiving: u32,
}

/// Errors setting the segmenter up.
#[derive(Debug, thiserror::Error)]
pub enum SegmenterError {
    #[error("segmenter {interface}: {source}")]
    Link {
        interface: &'static str,
        source: io::Error,
    },
}

fn link_error(interface: &'static str) -> impl FnOnce(io::Error) -> SegmenterError {
    move |source| SegmenterError::Link { interface, source }
}

/// The segmenter, adopted when a previous agent left one (both ends), created afresh otherwise;
/// the sending end's tunnel segmentation off (again: it is cheap, and an adopted pair may have
/// been changed), both ends up and kept out of the node's own networking.
pub fn ensure(socket: &Socket) -> Result<Segmenter, SegmenterError> {
    let pair = match (netlink::index_of(SENDING), netlink::index_of(RECEIVING)) {
        (Ok(sending), Ok(receiving)) => Segmenter { sending, receiving },
        _ => {
            // A half pair is rebuilt.
            remove(socket)?;
            socket
                .create_segmenter_pair(SENDING, RECEIVING, MTU)
                .map_err(link_error(SENDING))?;
            Segmenter {
                sending: netlink::index_of(SENDING).map_err(link_error(SENDING))?,
                receiving: netlink::index_of(RECEIVING).map_err(link_error(RECEIVING))?,
            }
        }
    };
    crate::ethtool::turn_off(SENDING, &TUNNEL_GSO).map_err(link_error(SENDING))?;
    socket
        .isolate_and_up(RECEIVING)
        .map_err(link_error(RECEIVING))?;
    socket
        .isolate_and_up(SENDING)
        .map_err(link_error(SENDING))?;
    Ok(pair)
}

/// Deletes the pair of this namespace (`unpin`); whether there was one.
pub fn cleanup() -> Result<bool, SegmenterError> {
    remove(&Socket::open().map_err(link_error(SENDING))?)
}

/// Deletes the pair (either end takes the other with it); whether there was one.
pub fn remove(socket: &Socket) -> Result<bool, SegmenterError> {
    let sending = socket
        .delete_link_named(SENDING)
        .map_err(link_error(SENDING))?;
    let receiving = socket
        .delete_link_named(RECEIVING)
        .map_err(link_error(RECEIVING))?;
    Ok(sending || receiving)
}
