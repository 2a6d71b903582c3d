//! Port security as OVN applies Port_Binding.port_security. Ingress, for frames leaving a pod
//! (`ls_in_check_port_sec`, `ls_in_apply_port_sec`): the source MAC, and when addresses are
//! listed the IPv4 source (DHCP discovery from 0.0.0.0 excepted) and the ARP sender. Egress, for
//! frames delivered to a pod (`ls_out_check_port_sec`, `ls_out_apply_port_sec`): a multicast
//! destination MAC, or the port's MAC and, when addresses are listed, an IPv4 destination among
//! them, broadcast or multicast. IPv6 is checked by MAC only, like the IR evaluator. Reads
//! `PORT_SECURITY`.

use aya_ebpf::programs::TcContext;
use ovnbpf_common::{PORT_SECURITY_MAX_IPS, PortSecurity};

use crate::maps::get;
use crate::{
    PORT_SECURITY,
    headers::{ArpFrame, ETH_P_ARP, ETH_P_IPV4, EthHeader, IPPROTO_UDP, Ipv4Frame, UdpHeader},
};

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

/// Whether the pod behind `ifindex` may send this frame (ports without an entry may).
#[inline(always)]
pub fn allows(ctx: &TcContext, ifindex: u32, eth: &EthHeader) -> bool {
    let Some(security) = get(&PORT_SECURITY, ifindex) else {
        return true;
    };
    if eth.source != security.mac {
        return false;
    }
    if security.ip_count == 0 {
        return true;
    }
    match u16::from_be(eth.ether_type) {
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
        ETH_P_ARP => match ctx.load::<ArpFrame>(0) {
            Ok(arp) => {
                arp.sender_mac == security.mac
                    && listed(security, u32::from_ne_bytes(arp.sender_ip))
            }
            Err(_) => false,
        },
        _ => true,
    }
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
    if security.ip_count == 0 || ctx.load::<u16>(12).map(u16::from_be) != Ok(ETH_P_IPV4) {
        return true;
    }
    // The IPv4 destination: 255.255.255.255, 224.0.0.0/4, or a listed address.
    let Ok(ip) = ctx.load::<u32>(14 + 16) else {
        return false;
    };
    ip == u32::MAX || u32::from_be(ip) >> 28 == 0xe || listed(security, ip)
}
