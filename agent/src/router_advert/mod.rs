//! IPv6 router advertisements as ovn-controller sends them: the message's options, encoded as
//! OVN encodes them ([`options`], shared by the compiler's `put_nd_ra_opts` answer and the
//! periodic sender), and the periodic, unsolicited advertisements pinctrl sends for router
//! ports northd gave `ipv6_ra_send_periodic=true` ([`periodic`]). The solicited ones are the
//! kernel's (`ebpf/src/router_advert.rs`).

pub mod options;
pub mod periodic;
