//! Flooding, as OVN does for a multicast-group output port. From a pod: a broadcast or multicast
//! frame, or a unicast one to a MAC the L2 FIB does not know on a switch that floods unknown
//! unicast, gets one clone per local member of the datapath's group but the sender, then one
//! Geneve copy per other chassis with members, the group's key as the egress port. From the
//! uplink: a frame for a group goes to the local members only (the sender already reached every
//! chassis). Reads `FLOOD_ROLES` and `FLOOD_GROUPS`.

use aya_ebpf::programs::TcContext;
use ovnbpf_common::{FLOOD_MAX_LOCAL, FLOOD_MAX_REMOTE, FloodKey, FloodTargets, drop_reason};

use crate::{
    FLOOD_GROUPS, FLOOD_ROLES, TC_ACT_SHOT, count_delivered, count_drop,
    geneve::{self, Tunnel},
};

/// The group a frame from a pod floods to on `datapath`: the broadcast group for multicast
/// destinations, the unknown-unicast group otherwise; `None` if the datapath has none.
#[inline(always)]
pub fn group_of(datapath: u32, multicast: bool) -> Option<(u32, &'static FloodTargets)> {
    // SAFETY: hash map lookups return pointers into the map that stay valid for the program.
    let roles = unsafe { FLOOD_ROLES.get(datapath) }?;
    let group = if multicast {
        roles.broadcast
    } else {
        roles.unknown
    };
    if group == 0 {
        return None;
    }
    // SAFETY: as above.
    let targets = unsafe { FLOOD_GROUPS.get(FloodKey { datapath, group }) }?;
    Some((group, targets))
}

/// The local members of the group a tunnel frame names, if (datapath, egress key) is a group.
#[inline(always)]
pub fn local_group(datapath: u32, group: u32) -> Option<&'static FloodTargets> {
    // SAFETY: as above.
    unsafe { FLOOD_GROUPS.get(FloodKey { datapath, group }) }
}

/// Clones the frame to every local member but `except` (the sender's veth); failures are
/// counted, the other members still get theirs.
#[inline(always)]
pub fn to_local_members(ctx: &TcContext, targets: &FloodTargets, except: u32) {
    let count = (targets.local_count as usize).min(FLOOD_MAX_LOCAL);
    for &ifindex in targets.local.iter().take(count) {
        // Egress of the host veth: the pod receives it, whatever its protocol.
        if ifindex == except {
            continue;
        }
        match ctx.clone_redirect(ifindex, 0) {
            Ok(()) => count_delivered(ifindex, ctx.len()),
            Err(_) => count_drop(drop_reason::FLOOD_CLONE_FAILED),
        }
    }
}

/// Hands the frame to every local member but `except`: clones to all but the last, the frame
/// itself to the last (tcx knows no "stolen" verdict: a consumed frame must be redirected or
/// dropped). Drops it when there is no member.
#[inline(always)]
pub fn deliver_to_members(ctx: &TcContext, targets: &FloodTargets, except: u32) -> i32 {
    let count = (targets.local_count as usize).min(FLOOD_MAX_LOCAL);
    let mut last = 0;
    for &ifindex in targets.local.iter().take(count) {
        if ifindex == except {
            continue;
        }
        if last != 0 {
            match ctx.clone_redirect(last, 0) {
                Ok(()) => count_delivered(last, ctx.len()),
                Err(_) => count_drop(drop_reason::FLOOD_CLONE_FAILED),
            }
        }
        last = ifindex;
    }
    if last == 0 {
        return TC_ACT_SHOT;
    }
    count_delivered(last, ctx.len());
    // SAFETY: the helper takes plain integers and only sets the skb's redirect target.
    unsafe { aya_ebpf::helpers::bpf_redirect(last, 0) as i32 }
}

/// Floods a pod's frame (see the module doc); `tunnel` carries the datapath, the sender's port
/// key and the group's key. The frame itself ends as the last remote copy, or goes to the last
/// local member when there are no remote ones.
#[inline(always)]
pub fn from_pod(
    ctx: &TcContext,
    targets: &FloodTargets,
    ingress_ifindex: u32,
    tunnel: &mut Tunnel,
) -> Result<i32, u32> {
    let remotes = (targets.remote_count as usize).min(FLOOD_MAX_REMOTE);
    let Some(config) = geneve::tunnel_config().filter(|_| remotes > 0) else {
        return Ok(deliver_to_members(ctx, targets, ingress_ifindex));
    };
    to_local_members(ctx, targets, ingress_ifindex);
    tunnel.remote_ip = targets.remote[0];
    let ip = geneve::push_outer_headers(ctx, &config, tunnel)?;
    // Every chassis but the last gets a clone with its next hop's MACs; the last gets the frame.
    // An IP frame whose next hop to some chassis is unresolved goes there as the frame itself,
    // so the kernel's neighbour redirect resolves it (instead of that chassis never getting
    // floods).
    let mut current = targets.remote[0];
    let mut pending: Option<u32> = None;
    let mut last = targets.remote[0];
    for (index, &remote_ip) in targets.remote.iter().take(remotes).enumerate() {
        if index > 0 {
            geneve::retarget(ctx, &config, remote_ip)?;
            current = remote_ip;
        }
        last = remote_ip;
        if index + 1 == remotes && pending.is_none() {
            break;
        }
        match geneve::send_copy(ctx, &config, remote_ip) {
            Ok(()) => {}
            Err(reason)
                if ip && pending.is_none() && reason == drop_reason::FLOOD_NEXT_HOP_UNRESOLVED =>
            {
                pending = Some(remote_ip);
            }
            Err(reason) => count_drop(reason),
        }
    }
    let target = pending.unwrap_or(last);
    if current != target {
        geneve::retarget(ctx, &config, target)?;
    }
    if ip {
        Ok(geneve::send_to_next_hop(&config))
    } else {
        geneve::send_resolved(ctx, &config, target)
    }
}
