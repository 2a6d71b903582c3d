//! The OpenFlow backend's wire side (issue 19): OpenFlow 1.5 with the Nicira extensions OVN's
//! flows use, spoken to Open vSwitch's br-int over its management socket, for nodes where the
//! eBPF datapath cannot run. The pipeline IR is translated into OVS tables
//! ([`l2`], [`l3`]), behind a `Datapath` ([`datapath`]) that `--dataplane openflow` selects:
//! switches, localnets, IPv4 and IPv6 routers with ECMP, across nodes through Geneve, and the
//! answers OVN makes in userspace ([`answer`]); ACLs, load balancers and NAT are fenced.
//!
//! Written here rather than taken from a crate: none speaks OF1.5 with NXM registers, tunnel
//! metadata and bundles (`rovs-openflow` is OF1.3 without bundles, register matching or
//! `tun_metadata`; see the project's toolchain notes). The codec is encoder-heavy: the agent
//! builds flow mods, bundles and packet-outs and decodes only what the switch sends (hello,
//! echo, features, barrier and bundle replies, flow and aggregate stats, packet-ins, errors).
//!
//! - [`oxm`]: match fields (OXM and NXM TLVs), in the order their prerequisites need;
//! - [`action`]: instructions and actions (output, set_field, copy_field, resubmit, clone,
//!   TTL, goto, VLAN push/pop);
//! - [`message`]: the messages the agent sends and the ones it reads;
//! - [`connection`]: a session with one switch: version negotiation, features, echo answers,
//!   atomic ordered bundles of flow mods, barriers, and the deletion of the flows of one
//!   cookie (nothing else's is touched);
//! - [`answer`]: the answers OVN makes in ovn-controller's userspace (the ND responder, a
//!   router's time exceeded, resets and unreachables, ARP for next hops, MAC learning), built
//!   from the packets the flows send up;
//! - [`controller`]: the agent as br-int's controller: a session that takes those packets and
//!   sends the answers back in;
//! - [`l2`]: the switches' L2 forwarding of the IR (ports plugged here, the ingress checks and
//!   ARP responder, the L2 lookup, the flood to a group's members, tunnels) as flows, changed
//!   per switch;
//! - [`l3`]: the routers (admission, IP input, routes, policies, next hops) and the patches
//!   between datapaths, as flows changed per datapath;
//! - `table`: the per-datapath bookkeeping both share (installed flows, changes, fences);
//! - [`untranslated`]: what the translation leaves out and what that costs each datapath
//!   (partial, or fenced: no flows at all, where leaving it out would forward what OVN would
//!   not);
//! - [`datapath`]: the backend as the daemon drives it (`Datapath`): the session on a thread of
//!   its own, writes retried and resynced, pods' interfaces added to br-int.
//!
//! Touches nothing but the socket it is given.

pub mod action;
pub mod answer;
pub mod connection;
pub mod controller;
pub mod datapath;
pub mod l2;
pub mod l3;
pub mod message;
pub mod oxm;
mod table;
pub mod untranslated;

pub use connection::{Connection, OpenFlowError};
