//! Traffic-control requests for a BPF program on a link's ingress: the `clsact` qdisc, and a
//! direct-action `cls_bpf` filter on its ingress hook, created or atomically replaced, read back
//! by name, deleted. Unlike a tcx link, attaching such a filter never waits for a full RCU grace
//! period while holding the rtnl lock (at most an expedited one), so concurrent pod ADDs do not
//! queue behind each other. Touches only the qdisc and the one filter (priority, handle) it is
//! asked about. Requests of the parent's [`Socket`].

use std::{
    io,
    os::fd::{AsRawFd, BorrowedFd},
};

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::{
    RouteNetlinkMessage,
    tc::{TcAttribute, TcBpfFlags, TcFilterBpf, TcFilterBpfOption, TcHandle, TcMessage, TcOption},
};

use super::Socket;

/// The clsact qdisc's handle, `ffff:0`.
const CLSACT_HANDLE: TcHandle = TcHandle {
    major: 0xffff,
    minor: 0,
};
/// The ingress hook of clsact, `ffff:fff2`: the parent of its ingress filters.
const CLSACT_INGRESS: TcHandle = TcHandle {
    major: 0xffff,
    minor: TcHandle::MIN_INGRESS,
};
/// `ETH_P_ALL`: the filter sees every protocol.
const ETH_P_ALL: u16 = 0x0003;

/// One cls_bpf filter on a link's clsact ingress: its priority (lower runs first) and handle
/// identify it; its name is what `tc filter show` lists and how the agent recognises its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IngressFilter<'a> {
    pub priority: u16,
    pub handle: u32,
    pub name: &'a str,
}

impl IngressFilter<'_> {
    /// A message about this filter on link `index`: the clsact ingress as parent, `info` =
    /// priority << 16 | the protocol in network order, kind `bpf`.
    fn message(&self, index: u32) -> TcMessage {
        let mut message = TcMessage::with_index(index as i32);
        message.header.handle = TcHandle::from(self.handle);
        message.header.parent = CLSACT_INGRESS;
        message.header.info = (u32::from(self.priority) << 16) | u32::from(ETH_P_ALL.to_be());
        message
            .attributes
            .push(TcAttribute::Kind(TcFilterBpf::KIND.to_string()));
        message
    }
}

/// Whether `error` says there is no such filter (`ENOENT`) or no clsact to hold one (`EINVAL`,
/// "parent qdisc does not exist").
fn is_absent(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::ENOENT | libc::EINVAL))
}

impl Socket {
    /// Gives link `index` a clsact qdisc unless it has one.
    pub fn ensure_clsact(&self, index: u32) -> io::Result<()> {
        let mut message = TcMessage::with_index(index as i32);
        message.header.handle = CLSACT_HANDLE;
        message.header.parent = TcHandle::CLSACT;
        message
            .attributes
            .push(TcAttribute::Kind("clsact".to_string()));
        match self.change(
            RouteNetlinkMessage::NewQueueDiscipline(message),
            NLM_F_CREATE | NLM_F_EXCL,
        ) {
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
        let mut message = filter.message(index);
        message.attributes.push(TcAttribute::Options(vec![
            TcOption::Bpf(TcFilterBpfOption::ProgFd(program.as_raw_fd() as u32)),
            TcOption::Bpf(TcFilterBpfOption::ProgName(filter.name.to_string())),
            TcOption::Bpf(TcFilterBpfOption::Flags(TcBpfFlags::DirectAction)),
        ]));
        self.change(RouteNetlinkMessage::NewTrafficFilter(message), NLM_F_CREATE)
    }

    /// The name of the cls_bpf filter at `filter`'s priority and handle on link `index`'s
    /// ingress (`filter.name` is not used); `None` if there is none.
    pub fn ingress_filter_name(
        &self,
        index: u32,
        filter: &IngressFilter<'_>,
    ) -> io::Result<Option<String>> {
        let reply = match self.query(RouteNetlinkMessage::GetTrafficFilter(filter.message(index))) {
            Err(error) if is_absent(&error) => return Ok(None),
            reply => reply?,
        };
        let RouteNetlinkMessage::NewTrafficFilter(found) = reply else {
            return Ok(None);
        };
        Ok(filter_name(&found))
    }

    /// Deletes the filter at `filter`'s priority and handle on link `index`'s ingress;
    /// `Ok(false)` if there was none.
    pub fn delete_ingress_filter(
        &self,
        index: u32,
        filter: &IngressFilter<'_>,
    ) -> io::Result<bool> {
        match self.change(
            RouteNetlinkMessage::DelTrafficFilter(filter.message(index)),
            0,
        ) {
            Ok(()) => Ok(true),
            Err(error) if is_absent(&error) => Ok(false),
            Err(error) => Err(error),
        }
    }
}

/// The program name a cls_bpf filter message carries.
fn filter_name(filter: &TcMessage) -> Option<String> {
    filter
        .attributes
        .iter()
        .find_map(|attribute| match attribute {
            TcAttribute::Options(options) => options.iter().find_map(|option| match option {
                TcOption::Bpf(TcFilterBpfOption::ProgName(name)) => Some(name.clone()),
                _ => None,
            }),
            _ => None,
        })
}
