//! Flooding, as OVN does for a multicast-group output port. From a pod: a broadcast or multicast
//! frame, or a unicast one to a MAC the L2 FIB does not know on a switch that floods unknown
//! unicast, gets one clone per local member of the datapath's group but the sender, then one
//! Geneve copy per other chassis with members, the group's key as the egress port (on an
//! underlay switch: the local members, then the provider NIC). A router's ARP request for an
//! unresolved next hop floods the same way from the router's port. From the uplink: a frame for
//! a group goes to the local members only (the sender already reached every chassis). Reads
//! `FLOOD_ROLES`, `FLOOD_GROUPS` and `FLOOD_MEMBERS`; uses `FLOOD_SCRATCH`.
//!
//! Floods from a pod run in a stage of their own, the `flood` program, which `from_pod`
//! tail-calls through `STAGES` ([`request`], [`stage`]) with a [`FloodRequest`] in the skb's
//! control block: the walk's callbacks then share a 512-byte stack with the flood stage only,
//! not with `from_pod`'s router path, and each program stays within its verifier budget.
//!
//! A group's members are not bounded by one map value: `FLOOD_GROUPS` holds the counts of local
//! and remote members, `FLOOD_MEMBERS` one entry per (group, slot). The members are walked with
//! `bpf_loop`, whose callback the verifier checks once, whatever the group's size: one hash
//! lookup and one clone (or one Geneve copy) per member. Unicast forwarding never reads these
//! maps.
//!
//! Stack: the verifier adds a callback's frame to its caller's, 512 bytes in all. `local_member`
//! needs 12 bytes; `remote_member` keeps its FIB parameters, member key and outer fields in the
//! per-CPU `FLOOD_SCRATCH` slot and its walk state in the caller's frame (`RemoteWalk`), so both
//! stay small whatever the caller (`from_uplink` walks local members itself); `ovnbpf-agent
//! verify` reports each program's chain.
//!
//! Consistency with the agent's updates (it writes one slot and the count per change, see
//! `agent/src/dataplane/ebpf/l2/flood_slots.rs`): every slot of a group's key only ever holds a member of
//! that very group (a slot key names the datapath and the group), so a frame in flight during a
//! change can reach a member twice or miss one, never a port of another switch. A slot missing
//! under the count (a removal in progress) is skipped.

use aya_ebpf::{
    bindings::{__sk_buff, bpf_fib_lookup},
    cty::{c_long, c_void},
    helpers::bpf_loop,
    programs::TcContext,
};
use ovnbpf_common::DropReason;
use ovnbpf_common::{
    FLOOD_REQUEST_MAGIC, FLOOD_SLOT_REMOTE, FloodGroup, FloodKey, FloodMemberKey, FloodRequest,
    FloodRoles, TunnelConfig, drop_reason, stage as slot,
};

use crate::maps::get;
use crate::output::clone_to_local;
use crate::{
    DROP_COUNTERS, FLOOD_GROUPS, FLOOD_MEMBERS, FLOOD_ROLES, FLOOD_SCRATCH, TC_ACT_SHOT,
    count_drop, deliver_local,
    geneve::{self, Tunnel},
    stages, underlay,
};

/// A flood group as the programs walk it: its key and member counts.
#[derive(Clone, Copy)]
pub struct Group {
    key: FloodKey,
    counts: FloodGroup,
}

impl Group {
    /// The request to flood the frame to this group, as entered through logical port
    /// `ingress_port`, never back to host interface `except` (0 = none).
    #[inline(always)]
    pub fn request(&self, ingress_port: u32, except: u32) -> FloodRequest {
        FloodRequest {
            datapath: self.key.datapath,
            group: self.key.group,
            ingress_port,
            except,
            magic: FLOOD_REQUEST_MAGIC,
        }
    }
}

/// Hands the frame to the flood stage with `request` (a tail call: on success this never
/// returns). Returns the reason to drop the frame when the stage is not there.
#[inline(always)]
pub fn request(ctx: &TcContext, request: &FloodRequest) -> DropReason {
    stages::jump(ctx, slot::FLOOD, request.words())
}

/// The flood stage: floods the frame as the [`FloodRequest`] in its control block says.
#[inline(always)]
pub fn stage(ctx: &TcContext) -> Result<i32, DropReason> {
    let [datapath, group, ingress_port, except] = stages::take(ctx, FLOOD_REQUEST_MAGIC)?;
    let mut tunnel = Tunnel {
        datapath,
        ingress_port,
        egress_port: group,
        remote_ip: 0,
    };
    // The group went away since `from_pod` found it: nobody to flood to.
    let group = local_group(datapath, group).ok_or(drop_reason::UNKNOWN_DESTINATION)?;
    // An underlay switch: the local members, then the physical network (OVN's localnet port).
    if let Some(localnet) = underlay::localnet(datapath) {
        to_local_members(ctx, &group, except);
        return underlay::to_provider(ctx, &localnet);
    }
    from_pod(ctx, &group, except, &mut tunnel)
}

/// The group a frame from a pod floods to on `datapath`: the broadcast group for multicast
/// destinations, the unknown-unicast group otherwise; `None` if the datapath has none.
#[inline(always)]
pub fn group_of(datapath: u32, multicast: bool) -> Option<Group> {
    group_in_role(datapath, |roles| {
        if multicast {
            roles.broadcast
        } else {
            roles.unknown
        }
    })
}

/// The group switch `datapath` floods its routers' ARP requests to (`_MC_flood_l2`, or the
/// broadcast group where it has none); `None` if it has neither.
#[inline(always)]
pub fn router_group(datapath: u32) -> Option<Group> {
    group_in_role(datapath, |roles| {
        if roles.router_originated != 0 {
            roles.router_originated
        } else {
            roles.broadcast
        }
    })
}

/// The group `role` picks among `datapath`'s (0: none).
#[inline(always)]
fn group_in_role(datapath: u32, role: impl Fn(&FloodRoles) -> u32) -> Option<Group> {
    let group = role(get(&FLOOD_ROLES, datapath)?);
    if group == 0 {
        return None;
    }
    local_group(datapath, group)
}

/// The group a tunnel frame names, if (datapath, egress key) is a group.
#[inline(always)]
pub fn local_group(datapath: u32, group: u32) -> Option<Group> {
    let key = FloodKey { datapath, group };
    let counts = get(&FLOOD_GROUPS, key).copied()?;
    Some(Group { key, counts })
}

/// Member `slot` of the group, if present.
#[inline(always)]
fn member(key: FloodKey, slot: u32) -> Option<u32> {
    let key = FloodMemberKey {
        datapath: key.datapath,
        group: key.group,
        slot,
    };
    get(&FLOOD_MEMBERS, key).copied()
}

/// What the local walk's callback reads and writes (on the program's stack).
struct LocalWalk {
    skb: *mut __sk_buff,
    key: FloodKey,
    except: u32,
    /// Whether the last member found is held back for the frame itself (not cloned).
    keep_last: bool,
    last: u32,
}

/// One local member: cloned to it (or held back, the previous held-back one cloned).
#[inline(never)]
extern "C" fn local_member(index: u32, walk: *mut c_void) -> c_long {
    // SAFETY: `walk` is the `LocalWalk` the caller passed to bpf_loop, on its stack.
    let walk = unsafe { &mut *walk.cast::<LocalWalk>() };
    let Some(ifindex) = member(walk.key, index) else {
        return 0;
    };
    if ifindex == walk.except || ifindex == 0 {
        return 0;
    }
    let target = if walk.keep_last {
        let previous = walk.last;
        walk.last = ifindex;
        previous
    } else {
        ifindex
    };
    if target != 0 {
        let ctx = TcContext::new(walk.skb);
        if !clone_to_local(&ctx, target) {
            count_drop(drop_reason::FLOOD_CLONE_FAILED);
        }
    }
    0
}

/// Walks the local members; returns the held-back one (0 if none, or not holding back).
#[inline(always)]
fn walk_local(ctx: &TcContext, group: &Group, except: u32, keep_last: bool) -> u32 {
    let mut walk = LocalWalk {
        skb: ctx.skb.skb,
        key: group.key,
        except,
        keep_last,
        last: 0,
    };
    // SAFETY: the callback is a static function of this program; `walk` outlives the call.
    unsafe {
        bpf_loop(
            group.counts.local_count,
            local_member as *mut c_void,
            (&raw mut walk).cast(),
            0,
        );
    }
    walk.last
}

/// Clones the frame to every local member but `except` (the sender's veth); failures are
/// counted, the other members still get theirs.
#[inline(always)]
pub fn to_local_members(ctx: &TcContext, group: &Group, except: u32) {
    walk_local(ctx, group, except, false);
}

/// Hands the frame to every local member but `except`: clones to all but the last, the frame
/// itself to the last (tcx knows no "stolen" verdict: a consumed frame must be redirected or
/// dropped). Drops it when there is no member.
#[inline(always)]
pub fn deliver_to_members(ctx: &TcContext, group: &Group, except: u32) -> i32 {
    let last = walk_local(ctx, group, except, true);
    if last == 0 {
        return TC_ACT_SHOT;
    }
    // Egress of the host veth (no peer redirect): the pod receives it, whatever its protocol.
    deliver_local(ctx, last, 0, false)
}

/// What the remote walk's callback reads and writes (on the program's stack).
struct RemoteWalk {
    skb: *mut __sk_buff,
    /// This CPU's `FLOOD_SCRATCH` slot (its `member` key names the group).
    scratch: *mut FloodScratch,
    config: &'static TunnelConfig,
    /// Whether the inner frame is IP (the encapsulated skb is IPv4 to the kernel).
    ip: bool,
    /// The first chassis whose next hop was unresolved (gets the frame itself), 0 if none.
    pending: u32,
    /// A reason that ends the flood (the frame could not be re-addressed), 0 if none.
    failed: u32,
    /// Copies that could not be sent, and the reason of the last one (counted after the walk:
    /// the callback has no stack for the counter's key).
    dropped: u32,
    drop_reason: u32,
}

/// What the remote walk's callback keeps in memory, in `FLOOD_SCRATCH`: the program's frame
/// leaves the callback 16 bytes of the verifier's 512 (program and callback combined).
#[repr(C)]
pub struct FloodScratch {
    params: bpf_fib_lookup,
    member: FloodMemberKey,
    outer: geneve::Retarget,
}

/// This CPU's scratch.
#[inline(always)]
fn scratch() -> Option<*mut FloodScratch> {
    FLOOD_SCRATCH.get_ptr_mut(0)
}

/// One other chassis but the last: the encapsulated frame re-addressed to it and cloned out
/// (over an IPv6 underlay: `V6`).
#[inline(never)]
extern "C" fn remote_member<const V6: bool>(index: u32, walk: *mut c_void) -> c_long {
    // SAFETY: `walk` is the `RemoteWalk` the caller passed to bpf_loop, on its stack; its
    // scratch pointer comes from a successful per-CPU lookup.
    let walk = unsafe { &mut *walk.cast::<RemoteWalk>() };
    // SAFETY: as above.
    let scratch = unsafe { &mut *walk.scratch };
    scratch.member.slot = FLOOD_SLOT_REMOTE | index;
    // SAFETY: as above.
    #[expect(
        clippy::needless_borrows_for_generic_args,
        reason = "the key stays in the scratch slot: a copy would take the frame's 16 bytes"
    )]
    let Some(remote_ip) = get(&FLOOD_MEMBERS, &scratch.member).copied() else {
        return 0;
    };
    scratch.outer.remote_ip = remote_ip;
    let ctx = TcContext::new(walk.skb);
    if let Err(reason) = geneve::retarget_with::<V6>(&ctx, walk.config, &mut scratch.outer) {
        walk.failed = reason.0;
        return 1;
    }
    match geneve::send_copy::<V6>(
        &ctx,
        walk.config,
        scratch.outer.remote_ip,
        &mut scratch.params,
    ) {
        Ok(()) => {}
        // An IP frame whose next hop to some chassis is unresolved goes there as the frame
        // itself, so the kernel's neighbour redirect resolves it (instead of that chassis
        // never getting floods).
        Err(reason)
            if walk.ip && walk.pending == 0 && reason == drop_reason::FLOOD_NEXT_HOP_UNRESOLVED =>
        {
            walk.pending = scratch.outer.remote_ip;
        }
        Err(reason) => {
            walk.dropped += 1;
            walk.drop_reason = reason.0;
        }
    }
    0
}

/// Adds `count` frames to the drop counter of `reason`.
#[inline(always)]
fn count_drops(reason: DropReason, count: u32) {
    if count == 0 {
        return;
    }
    if let Some(counter) = DROP_COUNTERS.get_ptr_mut(reason.0) {
        // SAFETY: a per-CPU array slot: only this CPU writes it while the program runs.
        unsafe { *counter += u64::from(count) };
    }
}

/// Floods a pod's frame (see the module doc); `tunnel` carries the datapath, the sender's port
/// key and the group's key. The frame itself ends as the last remote copy, or goes to the last
/// local member when there are no remote ones.
#[inline(always)]
fn from_pod(
    ctx: &TcContext,
    group: &Group,
    ingress_ifindex: u32,
    tunnel: &mut Tunnel,
) -> Result<i32, DropReason> {
    let remotes = group.counts.remote_count;
    let first = if remotes > 0 {
        member(group.key, FLOOD_SLOT_REMOTE)
    } else {
        None
    };
    let (Some(config), Some(first)) = (geneve::tunnel_config(), first) else {
        return Ok(deliver_to_members(ctx, group, ingress_ifindex));
    };
    if geneve::ipv6_underlay(config) {
        to_remote_members::<true>(ctx, group, ingress_ifindex, tunnel, (config, first))
    } else {
        to_remote_members::<false>(ctx, group, ingress_ifindex, tunnel, (config, first))
    }
}

/// [`from_pod`] for a group with other chassis, over an IPv6 underlay (`V6`) or an IPv4 one
/// (a constant, so the verifier walks each family's path once: see `geneve::encapsulate`);
/// `first` is the first chassis's endpoint.
#[inline(always)]
fn to_remote_members<const V6: bool>(
    ctx: &TcContext,
    group: &Group,
    ingress_ifindex: u32,
    tunnel: &mut Tunnel,
    (config, first): (&'static TunnelConfig, u32),
) -> Result<i32, DropReason> {
    let remotes = group.counts.remote_count;
    // The last chassis (read before the clones: it gets the frame itself).
    let last = member(group.key, FLOOD_SLOT_REMOTE | (remotes - 1)).unwrap_or(first);
    to_local_members(ctx, group, ingress_ifindex);
    tunnel.remote_ip = first;
    let ip = geneve::push_outer_headers::<V6>(ctx, config, tunnel)?;
    // Every chassis but the last gets a clone with its next hop's MACs; the last gets the frame.
    let scratch = scratch().ok_or(drop_reason::ENCAP_FAILED)?;
    // Kept in the scratch slot only: a value in the frame would split the verifier's states.
    // SAFETY: a per-CPU array slot: only this CPU uses it while the program runs.
    unsafe {
        (*scratch).outer.udp_base = geneve::retarget_base::<V6>(ctx)?;
        (*scratch).member = FloodMemberKey {
            datapath: group.key.datapath,
            group: group.key.group,
            slot: FLOOD_SLOT_REMOTE,
        };
    }
    let mut walk = RemoteWalk {
        skb: ctx.skb.skb,
        scratch,
        config,
        ip,
        pending: 0,
        failed: 0,
        dropped: 0,
        drop_reason: 0,
    };
    // SAFETY: the callback is a static function of this program; `walk` outlives the call.
    unsafe {
        bpf_loop(
            remotes - 1,
            remote_member::<V6> as *mut c_void,
            (&raw mut walk).cast(),
            0,
        );
    }
    count_drops(DropReason(walk.drop_reason), walk.dropped);
    if walk.failed != 0 {
        return Err(DropReason(walk.failed));
    }
    let target = if walk.pending != 0 {
        // The last chassis gets a copy too; the unresolved one gets the frame.
        // SAFETY: as above.
        geneve::retarget::<V6>(ctx, config, last, unsafe { (*scratch).outer.udp_base })?;
        // SAFETY: as above.
        let params = unsafe { &mut (*scratch).params };
        if let Err(reason) = geneve::send_copy::<V6>(ctx, config, last, params) {
            count_drop(reason);
        }
        walk.pending
    } else {
        last
    };
    // SAFETY: as above.
    geneve::retarget::<V6>(ctx, config, target, unsafe { (*scratch).outer.udp_base })?;
    if ip {
        Ok(geneve::send_to_next_hop(config))
    } else {
        geneve::send_resolved::<V6>(ctx, config, target)
    }
}
