//! Port security as OVN applies Port_Binding.port_security, judged as ovn-trace's
//! `check_in_port_sec` / `check_out_port_sec` judge it (ovn-controller's own flows differ in
//! corner cases; README, "Port security"). Ingress, for frames leaving a pod
//! (`ls_in_check_port_sec`, `ls_in_apply_port_sec`): the source MAC, ARP naming it as sender,
//! and when addresses of either family are listed, the IPv4 source (DHCP discovery from
//! 0.0.0.0 excepted) and the ARP sender's address; the IPv6 source (a listed address, or the
//! link-local one derived from the MAC), a neighbour solicitation's source link-layer address
//! and an advertisement's target link-layer address (the MAC, or none) and, with IPv6
//! addresses listed, the advertisement's target. There, as ovn-controller admits them (and
//! ovn-trace does not), duplicate address detection and MLD reports from the unspecified
//! address `::` to `ff02::/16` pass too (ICMPv6 code 0: a solicitation, checked as any, or an
//! MLD report, v1 or v2, after a hop-by-hop header): a starting pod sends them before its
//! link-local address is usable, and counting them as spoofing would be a false alarm. Egress, for frames delivered to a pod
//! (`ls_out_check_port_sec`, `ls_out_apply_port_sec`): a multicast destination MAC, or the
//! port's MAC and, when addresses are listed, an IPv4 destination among them, broadcast or
//! multicast (none when only IPv6 is listed) and an IPv6 destination among them, the
//! link-local one or multicast (none when only IPv4 is listed). Reads `PORT_SECURITY` and
//! `PORT_SECURITY6`.

use aya_ebpf::programs::TcContext;
use ovnbpf_common::{
    PORT_SECURITY_IPV4, PORT_SECURITY_IPV6, PORT_SECURITY_MAX_IPS, PORT_SECURITY_MAX_IPS6,
    PortSecurity,
};

use crate::maps::get;
use crate::{
    PORT_SECURITY, PORT_SECURITY6,
    headers::{
        ArpFrame, ETH_P_ARP, ETH_P_IPV4, ETH_P_IPV6, EthHeader, IPPROTO_ICMPV6, IPPROTO_UDP,
        Ipv4Frame, UdpHeader,
    },
};

/// Offsets in an Ethernet + IPv6 frame without extension headers.
const IPV6_NEXT_HEADER: usize = 14 + 6;
const IPV6_SOURCE: usize = 14 + 8;
const IPV6_DESTINATION: usize = 14 + 24;
const ICMPV6: usize = 14 + 40;
/// An ND message's target, and its first option (after the 24-byte message).
const ND_TARGET: usize = ICMPV6 + 8;
const ND_OPTIONS: usize = ICMPV6 + 24;
const ND_SOLICITATION: u8 = 135;
const ND_ADVERTISEMENT: u8 = 136;
/// MLD reports: version 1 (RFC 2710) and 2 (RFC 3810).
const MLD_REPORT: u8 = 131;
const MLD2_REPORT: u8 = 143;
/// IPv6's hop-by-hop options header (MLD reports carry a router alert in one).
const IPV6_HOP_BY_HOP: u8 = 0;
/// ND options: source and target link-layer address.
const ND_OPTION_SLL: u8 = 1;
const ND_OPTION_TLL: u8 = 2;

#[inline(always)]
fn listed(security: &PortSecurity, ip: u32) -> bool {
    let count = usize::from(security.ip_count).min(PORT_SECURITY_MAX_IPS);
    let mut index = 0;
    while index < PORT_SECURITY_MAX_IPS {
        if index < count && security.ips[index] == ip {
            return true;
        }
        index += 1;
    }
    false
}

/// Which families the entry lists addresses of (an entry of an agent before the flags: IPv4
/// when it holds addresses).
#[inline(always)]
fn families(security: &PortSecurity) -> (bool, bool) {
    (
        security.flags & PORT_SECURITY_IPV4 != 0 || security.ip_count > 0,
        security.flags & PORT_SECURITY_IPV6 != 0,
    )
}

/// An IPv6 address as two native-endian halves (how the frames' and the map's bytes compare).
type Ipv6 = [u64; 2];

/// The link-local address OVN derives from `mac` (`in6_generate_lla`: fe80::/64, EUI-64).
#[inline(always)]
fn link_local(mac: &[u8; 6]) -> Ipv6 {
    // SAFETY: 16 bytes either way, and every bit pattern is a valid `[u64; 2]`.
    unsafe { core::mem::transmute::<[u8; 16], Ipv6>(ovnbpf_common::ipv6::link_local(*mac)) }
}

/// Whether `ip` is the link-local address of `mac` or one of `ifindex`'s listed IPv6
/// addresses.
#[inline(always)]
fn listed6(ifindex: u32, mac: &[u8; 6], ip: Ipv6) -> bool {
    if ip == link_local(mac) {
        return true;
    }
    let Some(listed) = get(&PORT_SECURITY6, ifindex) else {
        return false;
    };
    let count = (listed.ip_count as usize).min(PORT_SECURITY_MAX_IPS6);
    let mut index = 0;
    while index < PORT_SECURITY_MAX_IPS6 {
        // SAFETY: the map's value is 8-byte aligned and each address sits at a multiple of 16.
        let address = unsafe { *listed.ips[index].as_ptr().cast::<Ipv6>() };
        if index < count && address == ip {
            return true;
        }
        index += 1;
    }
    false
}

/// Whether the pod behind `ifindex` may send this frame (ports without an entry may).
#[inline(always)]
pub fn allows(ctx: &TcContext, ifindex: u32, eth: &EthHeader) -> bool {
    let Some(security) = get(&PORT_SECURITY, ifindex) else {
        return true;
    };
    if eth.source != security.mac {
        return false;
    }
    let (ipv4, ipv6) = families(security);
    match u16::from_be(eth.ether_type) {
        ETH_P_ARP => match ctx.load::<ArpFrame>(0) {
            Ok(arp) => {
                arp.sender_mac == security.mac
                    && (!ipv4 || listed(security, u32::from_ne_bytes(arp.sender_ip)))
            }
            Err(_) => false,
        },
        _ if !ipv4 && !ipv6 => true,
        ETH_P_IPV4 => {
            let Ok(frame) = ctx.load::<Ipv4Frame>(0) else {
                return false;
            };
            if listed(security, frame.ip.source) {
                return true;
            }
            // DHCP discovery: 0.0.0.0:68 → 255.255.255.255:67 over UDP.
            if frame.ip.source != 0
                || frame.ip.destination != u32::MAX
                || frame.ip.protocol != IPPROTO_UDP
            {
                return false;
            }
            let header_len = usize::from(frame.ip.version_ihl & 0x0f) * 4;
            let Ok(udp) = ctx.load::<UdpHeader>(14 + header_len.clamp(20, 60)) else {
                return false;
            };
            u16::from_be(udp.source) == 68 && u16::from_be(udp.destination) == 67
        }
        ETH_P_IPV6 => ipv6_allows(ctx, ifindex, &security.mac, ipv6),
        _ => true,
    }
}

/// Ingress IPv6 of a port with addresses listed: its source, and what its neighbour discovery
/// claims (`with_ipv6`: IPv6 addresses are listed, so an advertisement's target must be one).
#[inline(always)]
fn ipv6_allows(ctx: &TcContext, ifindex: u32, mac: &[u8; 6], with_ipv6: bool) -> bool {
    let Ok(source) = ctx.load::<Ipv6>(IPV6_SOURCE) else {
        return false;
    };
    if source == [0; 2] && with_ipv6 {
        match unspecified_source_message(ctx) {
            Some(MLD_REPORT | MLD2_REPORT) => return true,
            // Duplicate address detection: judged as any solicitation below (which reads it
            // where it follows the IPv6 header directly).
            Some(ND_SOLICITATION) if ctx.load::<u8>(IPV6_NEXT_HEADER) == Ok(IPPROTO_ICMPV6) => {}
            _ => return false,
        }
    } else if !listed6(ifindex, mac, source) {
        return false;
    }
    if ctx.load::<u8>(IPV6_NEXT_HEADER) != Ok(IPPROTO_ICMPV6) {
        return true;
    }
    let Ok([kind, code]) = ctx.load::<[u8; 2]>(ICMPV6) else {
        return true;
    };
    if kind != ND_SOLICITATION && kind != ND_ADVERTISEMENT {
        return true;
    }
    // As OVS reads ND: the link-layer address options and the target only with code 0.
    let (sll, tll, target) = if code == 0 {
        let (sll, tll) = nd_addresses(ctx);
        (sll, tll, ctx.load::<Ipv6>(ND_TARGET).unwrap_or_default())
    } else {
        ([0; 6], [0; 6], [0; 2])
    };
    if kind == ND_SOLICITATION {
        return sll == [0; 6] || sll == *mac;
    }
    if tll != [0; 6] && tll != *mac {
        return false;
    }
    !with_ipv6 || listed6(ifindex, mac, target)
}

/// For a frame to `ff02::/16` carrying ICMPv6 with code 0 (directly or after one hop-by-hop
/// header), its ICMPv6 type: what ovn-controller admits from `::`.
#[inline(always)]
fn unspecified_source_message(ctx: &TcContext) -> Option<u8> {
    let destination = ctx.load::<[u8; 2]>(IPV6_DESTINATION).ok()?;
    if destination != [0xff, 0x02] {
        return None;
    }
    let offset = match ctx.load::<u8>(IPV6_NEXT_HEADER).ok()? {
        IPPROTO_ICMPV6 => ICMPV6,
        IPV6_HOP_BY_HOP => {
            let [next, length] = ctx.load::<[u8; 2]>(ICMPV6).ok()?;
            if next != IPPROTO_ICMPV6 {
                return None;
            }
            ICMPV6 + (usize::from(length) + 1) * 8
        }
        _ => return None,
    };
    let [kind, code] = ctx.load::<[u8; 2]>(offset).ok()?;
    (code == 0).then_some(kind)
}

/// The source and target link-layer addresses of an ND message's first two options (zero
/// where absent).
#[inline(always)]
fn nd_addresses(ctx: &TcContext) -> ([u8; 6], [u8; 6]) {
    let (mut sll, mut tll) = ([0; 6], [0; 6]);
    let mut offset = ND_OPTIONS;
    let mut taken = 0;
    while taken < 2 {
        let Ok([kind, length]) = ctx.load::<[u8; 2]>(offset) else {
            break;
        };
        if length == 0 {
            break;
        }
        if length == 1 {
            let mac = ctx.load::<[u8; 6]>(offset + 2).unwrap_or_default();
            if kind == ND_OPTION_SLL {
                sll = mac;
            } else if kind == ND_OPTION_TLL {
                tll = mac;
            }
        }
        offset += usize::from(length & 0x0f) * 8;
        taken += 1;
    }
    (sll, tll)
}

/// Whether the pod behind `ifindex` may receive the frame in `ctx` (ports without an entry may).
/// Reads only the fields it checks: its callers run where `from_pod`'s stack is nearly full.
#[inline(always)]
pub fn egress_allows(ctx: &TcContext, ifindex: u32) -> bool {
    let Some(security) = get(&PORT_SECURITY, ifindex) else {
        return true;
    };
    let Ok(destination) = ctx.load::<[u8; 6]>(0) else {
        return false;
    };
    if destination[0] & 1 != 0 {
        return true;
    }
    if destination != security.mac {
        return false;
    }
    let (ipv4, ipv6) = families(security);
    if !ipv4 && !ipv6 {
        return true;
    }
    match ctx.load::<u16>(12).map(u16::from_be) {
        Ok(ETH_P_IPV4) => {
            // 255.255.255.255, 224.0.0.0/4, or a listed address.
            let Ok(ip) = ctx.load::<u32>(14 + 16) else {
                return false;
            };
            ipv4 && (ip == u32::MAX || u32::from_be(ip) >> 28 == 0xe || listed(security, ip))
        }
        Ok(ETH_P_IPV6) => ipv6 && ipv6_egress_allows(ctx, ifindex, &security.mac),
        _ => true,
    }
}

/// Egress IPv6 of a port with IPv6 addresses listed: to ff00::/8, the link-local address, or
/// a listed address. Out of line: inlined, its address would grow the delivery frames of the
/// stages whose stack chains are nearly full (`acl_ingress`).
#[inline(never)]
fn ipv6_egress_allows(ctx: &TcContext, ifindex: u32, mac: &[u8; 6]) -> bool {
    let Ok(ip) = ctx.load::<Ipv6>(IPV6_DESTINATION) else {
        return false;
    };
    ip[0].to_ne_bytes()[0] == 0xff || listed6(ifindex, mac, ip)
}
