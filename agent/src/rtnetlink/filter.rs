//! Traffic-control requests for a BPF program on a link's ingress: the `clsact` qdisc, and a
//! direct-action `cls_bpf` filter on its ingress hook, created or atomically replaced, read back
//! by name, deleted. Unlike a tcx link, attaching such a filter never waits for a full RCU grace
//! period while holding the rtnl lock (at most an expedited one), so concurrent pod ADDs do not
//! queue behind each other. Touches only the qdisc and the one filter (priority, handle) it is
//! asked about.

use std::{
    io,
    os::fd::{AsRawFd, BorrowedFd},
};

use super::{Message, NLM_F_CREATE, NLM_F_EXCL, Socket, acknowledgement, find_attribute};

const RTM_NEWQDISC: u16 = 36;
const RTM_NEWTFILTER: u16 = 44;
const RTM_DELTFILTER: u16 = 45;
const RTM_GETTFILTER: u16 = 46;
const TCA_KIND: u16 = 1;
const TCA_OPTIONS: u16 = 2;
const TCA_BPF_FD: u16 = 6;
const TCA_BPF_NAME: u16 = 7;
const TCA_BPF_FLAGS: u16 = 8;
const TCA_BPF_FLAG_ACT_DIRECT: u32 = 1;
/// `TC_H_CLSACT` (= `TC_H_INGRESS`): the clsact qdisc's parent; its handle is `ffff:0`.
const TC_H_CLSACT: u32 = 0xffff_fff1;
const CLSACT_HANDLE: u32 = 0xffff_0000;
/// `TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS)`: the ingress hook of clsact.
const CLSACT_INGRESS: u32 = 0xffff_fff2;
const ETH_P_ALL: u16 = 0x0003;
/// Length of `struct tcmsg`.
const TCMSG_LENGTH: usize = 20;

/// One cls_bpf filter on a link's clsact ingress: its priority (lower runs first) and handle
/// identify it; its name is what `tc filter show` lists and how the agent recognises its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IngressFilter<'a> {
    pub priority: u16,
    pub handle: u32,
    pub name: &'a str,
}

impl IngressFilter<'_> {
    /// A request about this filter on link `index`: `struct tcmsg` (family, padding, index,
    /// handle, parent, info = priority << 16 | protocol in network order) and its kind.
    fn message(&self, kind: u16, flags: u16, index: u32) -> Message {
        let mut message = if kind == RTM_GETTFILTER {
            Message::query(kind)
        } else {
            Message::new(kind, flags)
        };
        let info = (u32::from(self.priority) << 16) | u32::from(ETH_P_ALL.to_be());
        tcmsg(&mut message, index, self.handle, CLSACT_INGRESS, info);
        message.name(TCA_KIND, "bpf");
        message
    }
}

fn tcmsg(message: &mut Message, index: u32, handle: u32, parent: u32, info: u32) {
    message.bytes.extend_from_slice(&[0, 0, 0, 0]);
    message.bytes.extend_from_slice(&index.to_ne_bytes());
    message.bytes.extend_from_slice(&handle.to_ne_bytes());
    message.bytes.extend_from_slice(&parent.to_ne_bytes());
    message.bytes.extend_from_slice(&info.to_ne_bytes());
}

/// Whether `error` says there is no such filter (`ENOENT`) or no clsact to hold one (`EINVAL`,
/// "parent qdisc does not exist").
fn is_absent(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::ENOENT | libc::EINVAL))
}

impl Socket {
    /// Gives link `index` a clsact qdisc unless it has one.
    pub fn ensure_clsact(&self, index: u32) -> io::Result<()> {
        let mut message = Message::new(RTM_NEWQDISC, NLM_F_CREATE | NLM_F_EXCL);
        tcmsg(&mut message, index, CLSACT_HANDLE, TC_H_CLSACT, 0);
        message.name(TCA_KIND, "clsact");
        match self.request(message) {
            Err(error) if error.raw_os_error() == Some(libc::EEXIST) => Ok(()),
            result => result,
        }
    }

    /// Runs `program` (a loaded SCHED_CLS program) as `filter` on link `index`'s clsact ingress,
    /// in direct-action mode: created if absent, else its program replaced atomically (every
    /// frame meets either the old or the new one). Needs the clsact qdisc
    /// ([`Self::ensure_clsact`]).
    pub fn set_ingress_filter(
        &self,
        index: u32,
        filter: &IngressFilter<'_>,
        program: BorrowedFd<'_>,
    ) -> io::Result<()> {
        let mut message = filter.message(RTM_NEWTFILTER, NLM_F_CREATE, index);
        message.begin_nested(TCA_OPTIONS);
        message.attribute(TCA_BPF_FD, &(program.as_raw_fd() as u32).to_ne_bytes());
        message.name(TCA_BPF_NAME, filter.name);
        message.attribute(TCA_BPF_FLAGS, &TCA_BPF_FLAG_ACT_DIRECT.to_ne_bytes());
        message.end_nested();
        self.request(message)
    }

    /// The name of the cls_bpf filter at `filter`'s priority and handle on link `index`'s
    /// ingress (`filter.name` is not used); `None` if there is none.
    pub fn ingress_filter_name(
        &self,
        index: u32,
        filter: &IngressFilter<'_>,
    ) -> io::Result<Option<String>> {
        let reply = self.exchange(filter.message(RTM_GETTFILTER, 0, index))?;
        match acknowledgement(&reply) {
            Some(Err(error)) if is_absent(&error) => return Ok(None),
            Some(Err(error)) => return Err(error),
            _ => {}
        }
        Ok(filter_name(&reply))
    }

    /// Deletes the filter at `filter`'s priority and handle on link `index`'s ingress;
    /// `Ok(false)` if there was none.
    pub fn delete_ingress_filter(
        &self,
        index: u32,
        filter: &IngressFilter<'_>,
    ) -> io::Result<bool> {
        match self.request(filter.message(RTM_DELTFILTER, 0, index)) {
            Ok(()) => Ok(true),
            Err(error) if is_absent(&error) => Ok(false),
            Err(error) => Err(error),
        }
    }
}

/// `TCA_OPTIONS/TCA_BPF_NAME` of the RTM_NEWTFILTER message in `reply`, without its NUL.
fn filter_name(reply: &[u8]) -> Option<String> {
    let options = super::message_attribute(reply, RTM_NEWTFILTER, TCMSG_LENGTH, TCA_OPTIONS)?;
    let name = find_attribute(options, TCA_BPF_NAME)?;
    let name = name.split(|byte| *byte == 0).next().unwrap_or_default();
    Some(String::from_utf8_lossy(name).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILTER: IngressFilter<'static> = IngressFilter {
        priority: 1,
        handle: 1,
        name: "ovnbpf_from_pod",
    };

    /// The filter request carries the link, handle, clsact ingress as parent, priority and
    /// ETH_P_ALL (network order) in `info`, then the kind and the nested options.
    #[test]
    fn a_filter_request_addresses_clsact_ingress() {
        let bytes = FILTER.message(RTM_NEWTFILTER, NLM_F_CREATE, 7).finish();
        let tcmsg = &bytes[16..16 + TCMSG_LENGTH];
        assert_eq!(&tcmsg[4..8], &7u32.to_ne_bytes());
        assert_eq!(&tcmsg[8..12], &1u32.to_ne_bytes());
        assert_eq!(&tcmsg[12..16], &0xffff_fff2u32.to_ne_bytes());
        let info = u32::from_ne_bytes(tcmsg[16..20].try_into().unwrap());
        assert_eq!(info >> 16, 1, "priority");
        assert_eq!(
            (info & 0xffff) as u16,
            u16::from_be(0x0003),
            "ETH_P_ALL, big-endian"
        );
        assert_eq!(find_attribute(&bytes[36..], TCA_KIND), Some(&b"bpf\0"[..]));
    }

    /// A reply shaped like the kernel's (tcmsg, kind, nested options) gives the name back.
    #[test]
    fn the_name_is_read_from_the_nested_options() {
        let mut reply = Message::query(RTM_NEWTFILTER);
        tcmsg(&mut reply, 7, 1, CLSACT_INGRESS, 1 << 16);
        reply.name(TCA_KIND, "bpf");
        reply.begin_nested(TCA_OPTIONS);
        reply.attribute(TCA_BPF_FLAGS, &1u32.to_ne_bytes());
        reply.name(TCA_BPF_NAME, "ovnbpf_from_pod");
        reply.end_nested();
        let reply = reply.finish();
        assert_eq!(filter_name(&reply).as_deref(), Some("ovnbpf_from_pod"));
        assert_eq!(filter_name(&reply[..40]), None, "truncated");
    }
}
