//! Underlay switches (a localnet port bridged to a provider NIC, Kube-OVN's VLAN subnets): frames
//! a local pod sends to anything but a local pod leave through the provider NIC, tagged with the
//! localnet port's VLAN (untagged for none), with no Geneve; broadcasts go to the local members and
//! once to the physical network. On the provider NIC's ingress, frames of a known (NIC, VLAN) to a
//! local pod are untagged and delivered, broadcasts are copied to the switch's local members and
//! still passed to the host; a distributed NAT rule's frames and ARP, and an active gateway
//! port's, are [`crate::nat`]'s;
//! everything else passes untouched. Reads `LOCALNETS`,
//! `PROVIDER_NETWORKS`, `L2_FIB`, `FLOOD_ROLES`, `FLOOD_GROUPS`.

use aya_ebpf::{
    helpers::{bpf_redirect, bpf_skb_vlan_pop, bpf_skb_vlan_push},
    programs::TcContext,
};
use ovnbpf_common::DropReason;
use ovnbpf_common::{FIB_LOCAL, FIB_ROUTER, FibKey, Localnet, ProviderKey, drop_reason};

use crate::maps::get;
use crate::{
    L2_FIB, LOCALNETS, PASS, PROVIDER_NETWORKS, flood,
    headers::{ETH_P_IPV4, ETH_P_IPV6, EthHeader},
};

/// 802.1Q's TPID, in network byte order as the helper wants it.
const ETH_P_8021Q_BE: u16 = 0x8100_u16.to_be();

/// The localnet of switch `datapath`, if it is an underlay switch.
#[inline(always)]
pub fn localnet(datapath: u32) -> Option<Localnet> {
    get(&LOCALNETS, datapath).copied()
}

/// Sends the frame out of the provider NIC, tagged with the localnet's VLAN.
#[inline(always)]
pub fn to_provider(ctx: &TcContext, localnet: &Localnet) -> Result<i32, DropReason> {
    if localnet.vlan != 0 {
        // SAFETY: the helper takes the skb pointer the context holds and plain integers.
        let pushed =
            unsafe { bpf_skb_vlan_push(ctx.skb.skb, ETH_P_8021Q_BE, localnet.vlan as u16) };
        if pushed != 0 {
            return Err(drop_reason::ENCAP_FAILED);
        }
    }
    // SAFETY: the helper takes plain integers and only sets the skb's redirect target.
    Ok(unsafe { bpf_redirect(localnet.ifindex, 0) } as i32)
}

/// From a provider NIC: see the module doc.
#[inline(always)]
pub fn from_provider(ctx: &TcContext) -> i32 {
    // SAFETY: reading the skb context fields is always allowed for tc programs.
    let (ifindex, vlan) = unsafe {
        let skb = &*ctx.skb.skb;
        let vlan = if skb.vlan_present != 0 {
            skb.vlan_tci & 0x0fff
        } else {
            0
        };
        (skb.ifindex, vlan)
    };
    let Some(datapath) = get(&PROVIDER_NETWORKS, ProviderKey { ifindex, vlan }).copied() else {
        return PASS;
    };
    let Ok(eth) = ctx.load::<EthHeader>(0) else {
        return PASS;
    };
    if eth.destination[0] & 1 != 0 {
        // ARP for a distributed NAT rule's address: answered here (only on its pod's chassis).
        if let Some(verdict) = crate::nat::answer_from_provider(ctx, datapath, ifindex) {
            return verdict;
        }
        // A broadcast (ARP from the physical network): copies to the local members, untagged;
        // the host still gets it as it came.
        let Some(group) = flood::group_of(datapath, true) else {
            return PASS;
        };
        if vlan != 0 && unsafe { bpf_skb_vlan_pop(ctx.skb.skb) } != 0 {
            return PASS;
        }
        flood::to_local_members(ctx, &group, 0);
        // SAFETY: as above.
        if vlan != 0 && unsafe { bpf_skb_vlan_push(ctx.skb.skb, ETH_P_8021Q_BE, vlan as u16) } != 0
        {
            // Never hand the host a frame changed on the way.
            crate::count_drop(drop_reason::DECAP_FAILED);
            return crate::TC_ACT_SHOT;
        }
        return PASS;
    }
    let key = FibKey {
        datapath,
        mac: eth.destination,
        padding: [0; 2],
    };
    let Some(entry) = get(&L2_FIB, key).copied() else {
        return PASS;
    };
    // A router's MAC: a distributed NAT rule's frames enter the router; the rest goes on.
    if entry.kind == FIB_ROUTER {
        return crate::nat::from_provider_to_router(ctx, datapath, &entry, (ifindex, vlan));
    }
    if entry.kind != FIB_LOCAL {
        return PASS;
    }
    // SAFETY: as above.
    if vlan != 0 && unsafe { bpf_skb_vlan_pop(ctx.skb.skb) } != 0 {
        crate::count_drop(drop_reason::DECAP_FAILED);
        return crate::TC_ACT_SHOT;
    }
    let ether_type = u16::from_be(eth.ether_type);
    let ip = ether_type == ETH_P_IPV4 || ether_type == ETH_P_IPV6;
    // The switch's ingress ACL stage is not run for the provider network's frames: refused
    // where its from-lport ACLs may act on them.
    if ether_type == ETH_P_IPV4
        && crate::acl::unchecked(datapath, ovnbpf_common::acl::UNCHECKED_INGRESS)
    {
        return crate::drop::drop_frame(ctx, drop_reason::ACL_FAIL_CLOSED);
    }
    // The ingress port (the localnet's) is not known here: rules on the inport do not match.
    let between = crate::output::Between {
        datapath,
        ports: entry.port,
    };
    match crate::output::deliver_to_port(ctx, entry.ifindex, entry.flags, ip, between) {
        Ok(verdict) => verdict,
        Err(reason) => crate::drop::drop_frame(ctx, reason),
    }
}
