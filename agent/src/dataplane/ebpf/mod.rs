//! The eBPF backend's kernel side as seen from userspace: the object embedded at build time, loading
//! every program through the verifier, tcx attachment to interfaces (in any network namespace) and
//! reading the programs' counters and this node's tunnel endpoint; every other map is written
//! through the generic [`maps::Maps`] and installed through [`tables::Table`]s, and [`stack`]
//! measures each program's stack. With a [`pins::PinLayout`], maps are adopted from (or pinned to) bpffs
//! and links are pinned, so they outlive the agent and a new agent replaces the programs
//! atomically; without one, dropping the handle detaches the programs.
//! Touches: the bpf() syscall, its pin files and, for attachment, a helper thread's network
//! namespace.

use std::{io, path::Path};

use aya::{
    Ebpf, EbpfLoader, TestRun, TestRunOptions,
    maps::{Array, MapData, PerCpuArray, PerCpuHashMap, ProgramArray},
    programs::{
        Program, ProgramError, SchedClassifier, TcAttachType,
        links::{FdLink, LinkError, PinnedLink},
        tc::SchedClassifierLink,
    },
};
use ovnbpf_common::{
    InterfaceCounters, PodPort, TunnelConfig, drop_reason, map, maps::PodPorts, program,
    router_reply,
};

pub use maps::Maps;

use crate::netns;

pub mod acl_log;
pub mod announce;
pub mod backend;
pub mod conntrack;
pub mod events;
pub mod inspect;
pub mod kernel_log;
pub mod l2;
pub mod l3;
pub mod lb_connections;
pub mod maps;
pub mod neighbour_events;
pub mod node;
pub mod physical;
pub mod pins;
pub mod pod_filter;
pub mod segmenter;
pub mod socket_lb;
pub mod stack;
pub mod tables;

/// The kernel object built by aya-build from `ebpf/` (empty when built with `AYA_BUILD_SKIP=1`).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/ovnbpf"));

/// Errors of the eBPF backend. Verifier rejections carry the verifier's log.
#[derive(Debug, thiserror::Error)]
pub enum EbpfError {
    #[error("this agent was built with AYA_BUILD_SKIP=1 and embeds no kernel programs")]
    NoObject,
    #[error("parsing the embedded kernel object: {0}")]
    Parse(#[source] aya::EbpfError),
    #[error("program {name} is missing from the kernel object")]
    MissingProgram { name: &'static str },
    #[error(
        "the kernel object contains program {name}, which ovnbpf_common::program::ALL does not list"
    )]
    UnknownProgram { name: String },
    #[error("map {name} is missing from the kernel object")]
    MissingMap { name: &'static str },
    #[error("the verifier rejected program {name}: {source}\n--- verifier log ---\n{log}")]
    Rejected {
        name: &'static str,
        source: io::Error,
        log: String,
    },
    #[error("duplicating the descriptor of program {name}: {source}")]
    Descriptor {
        name: &'static str,
        source: io::Error,
    },
    #[error("program {name}: {source}")]
    Program {
        name: &'static str,
        source: ProgramError,
    },
    #[error("attaching {name} to interface {interface}: {source}")]
    Attach {
        name: &'static str,
        interface: String,
        source: ProgramError,
    },
    #[error("pinning the link of {name} on interface {interface}: {source}")]
    PinLink {
        name: &'static str,
        interface: String,
        source: aya::pin::PinError,
    },
    #[error("the link of {name} on interface {interface}: {source}")]
    Link {
        name: &'static str,
        interface: String,
        source: LinkError,
    },
    #[error("map {name} is in the kernel object but not in ovnbpf_common::map::ALL")]
    UnknownMap { name: String },
    #[error(transparent)]
    Pins(#[from] pins::PinError),
    #[error(transparent)]
    KernelLog(#[from] kernel_log::KernelLogError),
    #[error("counting the possible CPUs for per-CPU map values: {0}")]
    Cpus(io::Error),
    #[error("map {name}: {source}")]
    Map {
        name: &'static str,
        source: aya::maps::MapError,
    },
    #[error(transparent)]
    Netns(#[from] netns::NetnsError),
    #[error("the cgroup {path} for the socket-level balancer: {source}")]
    Cgroup { path: String, source: io::Error },
}

/// Where a program attaches; each hook runs one program on ingress of its interface (the agent
/// attaches through a tcx link, or for pods through a cls_bpf filter, see [`pod_filter`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    /// A pod's host-side veth (traffic leaving the pod).
    Pod,
    /// The node's uplink (traffic from other nodes).
    Uplink,
    /// A provider NIC of an underlay network (bridge mappings).
    Provider,
    /// The receiving end of the node's segmenter pair (see [`segmenter`]).
    Segmenter,
}

impl Hook {
    #[must_use]
    pub fn program_name(self) -> &'static str {
        match self {
            Hook::Pod => program::FROM_POD,
            Hook::Uplink => program::FROM_UPLINK,
            Hook::Provider => program::FROM_PROVIDER,
            Hook::Segmenter => program::FROM_SEGMENTER,
        }
    }
}

/// What the kernel reports about one loaded program.
#[derive(Clone, Debug)]
pub struct LoadedProgram {
    pub name: &'static str,
    pub id: u32,
    /// Instructions the verifier processed (kernel ≥ 5.16), a measure of verification cost.
    pub verified_instructions: Option<u32>,
    /// Size of the program after the kernel's translation, in bytes.
    pub translated_bytes: Option<u32>,
    /// Its stack frames, read from the object ([`stack`]); `None` if the object could not be
    /// read that way (logged).
    pub stack: Option<stack::StackUse>,
}

/// The verifier's limit on instructions processed for one program.
pub const VERIFIER_INSTRUCTION_LIMIT: u32 = 1_000_000;
/// ovnbpf's budget per program: a quarter of the verifier's limit, so features have room before a
/// stage must move behind a tail call.
pub const VERIFIED_INSTRUCTIONS_BUDGET: u32 = VERIFIER_INSTRUCTION_LIMIT / 4;

/// Result of one BPF_PROG_TEST_RUN.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestRunOutcome {
    /// The program's return value (a tc verdict; -1 hands the frame on: TC_ACT_UNSPEC under
    /// cls_bpf, TCX_NEXT under tcx).
    pub verdict: i32,
    /// The packet after the program ran.
    pub frame: Vec<u8>,
}

/// A link held by this process (not pinned): detached with [`KernelPrograms::detach`] or when the
/// programs are dropped.
#[derive(Debug)]
pub struct AttachedLink {
    hook: Hook,
    id: aya::programs::tc::SchedClassifierLinkId,
}

/// How a pinned attachment came about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attachment {
    /// A link a previous agent pinned now runs this agent's program (atomic replacement).
    Replaced,
    /// No usable pinned link existed; a new one was attached and pinned.
    Attached,
}

/// The loaded kernel programs and their maps.
pub struct KernelPrograms {
    ebpf: Ebpf,
    /// `STAGES`, its slots filled with this object's stage programs. Held open for the
    /// programs' lifetime: the kernel empties a program array once no descriptor or pin of it
    /// is left.
    _stages: ProgramArray<MapData>,
    /// The reader of the programs' debug logs, when they log.
    _log: Option<kernel_log::KernelLog>,
}

/// The connection tables: LRU maps, which the kernel allocates whole when it creates them
/// (unlike the hash maps, which grow as entries are inserted), so their capacity is a node's
/// fixed cost: ~140 MiB at the defaults. `--connection-table-entries` sizes them together, each
/// to the entries given divided by its divisor (affinities are fewer than connections).
pub const CONNECTION_TABLES: [(&str, u32); 6] = [
    (map::CONNTRACK, 1),
    (map::SNAT_SESSIONS, 1),
    (map::SNAT_REVERSE, 1),
    (map::LB_CONNECTIONS, 1),
    (map::SOCK_LB_REVERSE, 1),
    (map::LB_AFFINITIES, 2),
];

impl KernelPrograms {
    /// Parses the embedded object and loads every program through the verifier. Fails on the
    /// first program the verifier rejects, with its log, and on programs the agent does not know.
    pub fn load() -> Result<Self, EbpfError> {
        Self::load_with(None, kernel_log::BpfLogLevel::Off, None)
    }

    /// Like [`Self::load`]; with `pins`, every map is taken from its pin when one exists (a
    /// previous agent's state, forwarding on) and created and pinned otherwise. The programs
    /// log up to `log_level` ([`kernel_log`]). `connection_entries` sizes the
    /// [`CONNECTION_TABLES`] it creates (a pinned one is adopted as it is).
    pub fn load_with(
        pins: Option<&pins::PinLayout>,
        log_level: kernel_log::BpfLogLevel,
        connection_entries: Option<u32>,
    ) -> Result<Self, EbpfError> {
        if OBJECT.is_empty() {
            return Err(EbpfError::NoObject);
        }
        // Checked first: a load that cannot log as asked does not start.
        let level = kernel_log::level_global(log_level)?;
        let mut loader = EbpfLoader::new();
        if let Some(level) = &level {
            loader.override_global(kernel_log::LEVEL_GLOBAL, level, true);
        }
        let paths: Vec<(&str, std::path::PathBuf)> = match pins {
            Some(pins) => map::ALL
                .iter()
                .map(|&name| (name, pins.map_path(name)))
                .collect(),
            None => Vec::new(),
        };
        for (name, path) in &paths {
            loader.map_pin_path(name, path.as_path());
        }
        if let Some(entries) = connection_entries {
            for (name, divisor) in CONNECTION_TABLES {
                loader.map_max_entries(name, entries / divisor);
            }
        }
        let mut ebpf = loader.load(OBJECT).map_err(EbpfError::Parse)?;
        // Every map must be one the agent pins, or a restart would lose its contents; but for
        // the log ring buffer and the globals (`.rodata`), which have none worth keeping.
        if let Some((name, _)) = ebpf.maps().find(|(name, _)| {
            !map::ALL.contains(name) && *name != kernel_log::LOG_MAP && !name.starts_with(".rodata")
        }) {
            return Err(EbpfError::UnknownMap {
                name: name.to_string(),
            });
        }
        // Every program in the object must be one the agent knows, so none escapes the verifier
        // gate below (and none ships that nothing attaches).
        if let Some((name, _)) = ebpf
            .programs()
            .find(|(name, _)| !program::ALL.contains(name))
        {
            return Err(EbpfError::UnknownProgram {
                name: name.to_string(),
            });
        }
        load_programs(&mut ebpf)?;
        let stages = fill_stages(&mut ebpf)?;
        let log = kernel_log::KernelLog::start(&mut ebpf, log_level)?;
        Ok(Self {
            ebpf,
            _stages: stages,
            _log: log,
        })
    }

    /// The kernel's view of each loaded program, in [`program::ALL`] order.
    pub fn programs(&self) -> Result<Vec<LoadedProgram>, EbpfError> {
        program::ALL
            .into_iter()
            .map(|name| {
                let program = self
                    .ebpf
                    .program(name)
                    .ok_or(EbpfError::MissingProgram { name })?;
                let info = program
                    .info()
                    .map_err(|source| EbpfError::Program { name, source })?;
                let stack = stack::stack_use(OBJECT, name)
                    .inspect_err(
                        |error| tracing::warn!(program = name, %error, "cannot measure the stack"),
                    )
                    .ok();
                Ok(LoadedProgram {
                    name,
                    id: info.id(),
                    verified_instructions: info.verified_instruction_count(),
                    translated_bytes: info.size_translated(),
                    stack,
                })
            })
            .collect()
    }

    /// Attaches the hook's program on tcx ingress of `interface` in the caller's network namespace.
    pub fn attach(&mut self, hook: Hook, interface: &str) -> Result<AttachedLink, EbpfError> {
        let name = hook.program_name();
        let id = classifier(&mut self.ebpf, name)?
            .attach(interface, TcAttachType::Ingress)
            .map_err(|source| EbpfError::Attach {
                name,
                interface: interface.to_string(),
                source,
            })?;
        Ok(AttachedLink { hook, id })
    }

    /// A duplicate of the descriptor of the hook's program, to attach it from another thread
    /// ([`pod_filter::PodFilters`]).
    pub fn program_fd(&mut self, hook: Hook) -> Result<std::os::fd::OwnedFd, EbpfError> {
        use std::os::fd::AsFd;
        let name = hook.program_name();
        let program = classifier(&mut self.ebpf, name)?;
        let fd = program
            .fd()
            .map_err(|source| EbpfError::Program { name, source })?;
        fd.as_fd()
            .try_clone_to_owned()
            .map_err(|source| EbpfError::Descriptor { name, source })
    }

    /// Detaches a link [`Self::attach`] made (pinned links go by unpinning instead).
    pub fn detach(&mut self, link: AttachedLink) -> Result<(), EbpfError> {
        let name = link.hook.program_name();
        classifier(&mut self.ebpf, name)?
            .detach(link.id)
            .map_err(|source| EbpfError::Program { name, source })
    }

    /// Attaches the hook's program to `interface` (index `ifindex`) through the link pinned at
    /// `pin`: a link a previous agent left there gets this program atomically (no frame misses
    /// a program); without a usable one, a new link is attached and pinned there.
    pub fn attach_pinned(
        &mut self,
        hook: Hook,
        interface: &str,
        pin: &Path,
    ) -> Result<Attachment, EbpfError> {
        let name = hook.program_name();
        let program = classifier(&mut self.ebpf, name)?;
        match PinnedLink::from_pin(pin) {
            Ok(pinned) => {
                let replaced = SchedClassifierLink::try_from(FdLink::from(pinned))
                    .map_err(|error| error.to_string())
                    .and_then(|link| {
                        program
                            .attach_to_link(link)
                            .map_err(|error| error.to_string())
                    });
                match replaced {
                    Ok(_) => return Ok(Attachment::Replaced),
                    Err(error) => {
                        // Its interface is gone (ENOLINK) or it is not a tcx link: start afresh.
                        tracing::warn!(pin = %pin.display(), %error, "discarding an unusable pinned link");
                        remove_pin(pin);
                    }
                }
            }
            Err(LinkError::SyscallError(error))
                if error.io_error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => {
                tracing::warn!(pin = %pin.display(), %error, "discarding an unreadable pinned link");
                remove_pin(pin);
            }
        }
        let attach_error = |source| EbpfError::Attach {
            name,
            interface: interface.to_string(),
            source,
        };
        let id = program
            .attach(interface, TcAttachType::Ingress)
            .map_err(attach_error)?;
        let link = program.take_link(id).map_err(attach_error)?;
        let link = FdLink::try_from(link).map_err(|source| EbpfError::Link {
            name,
            interface: interface.to_string(),
            source,
        })?;
        link.pin(pin).map_err(|source| EbpfError::PinLink {
            name,
            interface: interface.to_string(),
            source,
        })?;
        Ok(Attachment::Attached)
    }

    /// Attaches like [`Self::attach`], resolving `interface` inside the network namespace at
    /// `netns_path` (e.g. `/run/netns/node1`). The calling thread stays where it is.
    pub fn attach_in_netns(
        &mut self,
        netns_path: &Path,
        hook: Hook,
        interface: &str,
    ) -> Result<AttachedLink, EbpfError> {
        netns::run_in(netns_path, || self.attach(hook, interface))?
    }

    /// Runs the hook's program once on `frame` with BPF_PROG_TEST_RUN (the skb's ifindex is the
    /// loopback device's, 1) and returns its verdict and the frame as the program left it.
    pub fn test_run(&self, hook: Hook, frame: &[u8]) -> Result<TestRunOutcome, EbpfError> {
        self.test_run_repeated(hook, frame, 1)
            .map(|(outcome, _)| outcome)
    }

    /// [`Self::test_run`] `repeat` times in the kernel (benchmarks): the last run's outcome and
    /// the kernel's mean time per run.
    pub fn test_run_repeated(
        &self,
        hook: Hook,
        frame: &[u8],
        repeat: u32,
    ) -> Result<(TestRunOutcome, std::time::Duration), EbpfError> {
        let name = hook.program_name();
        let program: &SchedClassifier = self
            .ebpf
            .program(name)
            .ok_or(EbpfError::MissingProgram { name })?
            .try_into()
            .map_err(|source| EbpfError::Program { name, source })?;
        // Room for the frame plus any encapsulation a program may add.
        let mut out = vec![0_u8; frame.len() + 256];
        let result = program
            .test_run(TestRunOptions {
                data_in: Some(frame),
                data_out: Some(&mut out),
                repeat,
                ..TestRunOptions::new()
            })
            .map_err(|source| EbpfError::Program { name, source })?;
        out.truncate(result.data_size_out as usize);
        Ok((
            TestRunOutcome {
                verdict: result.return_value as i32,
                frame: out,
            },
            result.duration,
        ))
    }

    /// Counters of one interface summed over all CPUs; `None` if no program has seen a packet on it.
    pub fn interface_counters(&self, ifindex: u32) -> Result<Option<InterfaceCounters>, EbpfError> {
        let name = map::INTERFACE_COUNTERS;
        let raw = self.ebpf.map(name).ok_or(EbpfError::MissingMap { name })?;
        let counters: PerCpuHashMap<_, u32, InterfaceCounters> =
            PerCpuHashMap::try_from(raw).map_err(|source| EbpfError::Map { name, source })?;
        match counters.get(&ifindex, 0) {
            Ok(per_cpu) => Ok(Some(
                per_cpu
                    .iter()
                    .fold(InterfaceCounters::default(), |sum, c| sum.sum(*c)),
            )),
            Err(aya::maps::MapError::KeyNotFound) => Ok(None),
            Err(source) => Err(EbpfError::Map { name, source }),
        }
    }
}

impl KernelPrograms {
    fn map_mut(&mut self, name: &'static str) -> Result<&mut aya::maps::Map, EbpfError> {
        self.ebpf
            .map_mut(name)
            .ok_or(EbpfError::MissingMap { name })
    }

    /// Sets this node's tunnel endpoint: Geneve frames to `encap_ip` are decapsulated, and
    /// frames for other chassis leave, encapsulated, through `uplink_ifindex`.
    pub fn set_tunnel_endpoint(
        &mut self,
        encap_ip: std::net::IpAddr,
        uplink_ifindex: u32,
    ) -> Result<(), EbpfError> {
        let name = map::TUNNEL_CONFIG;
        let mut config: Array<_, TunnelConfig> = Array::try_from(self.map_mut(name)?)
            .map_err(|source| EbpfError::Map { name, source })?;
        let value = match encap_ip {
            std::net::IpAddr::V4(ip) => TunnelConfig {
                encap_ip: u32::from_ne_bytes(ip.octets()),
                uplink_ifindex,
                ..TunnelConfig::default()
            },
            std::net::IpAddr::V6(ip) => TunnelConfig {
                uplink_ifindex,
                flags: ovnbpf_common::TUNNEL_IPV6,
                encap_ip6: ip.octets(),
                ..TunnelConfig::default()
            },
        };
        config
            .set(0, value, 0)
            .map_err(|source| EbpfError::Map { name, source })
    }

    /// GSO frames toward chassis that want outer checksums leave through the segmenter's
    /// sending end `ifindex` (see [`segmenter`]); set after [`Self::set_tunnel_endpoint`].
    pub fn set_segmenter(&mut self, ifindex: u32) -> Result<(), EbpfError> {
        let name = map::TUNNEL_CONFIG;
        let mut config: Array<_, TunnelConfig> = Array::try_from(self.map_mut(name)?)
            .map_err(|source| EbpfError::Map { name, source })?;
        let mut value = config
            .get(&0, 0)
            .map_err(|source| EbpfError::Map { name, source })?;
        value.segmenter_ifindex = ifindex;
        config
            .set(0, value, 0)
            .map_err(|source| EbpfError::Map { name, source })
    }

    /// Frames entering on the host-side veth `ifindex` come from logical port `port`, and the
    /// veth has a counter entry (see [`maps::Maps::open_counters`]).
    pub fn set_pod_port(&mut self, ifindex: u32, port: PodPort) -> Result<(), EbpfError> {
        self.open_counters(ifindex)?;
        self.set::<PodPorts>(ifindex, port)
    }

    /// Forgets the pod port behind `ifindex`, and its counters (the index may be reused).
    pub fn remove_pod_port(&mut self, ifindex: u32) -> Result<(), EbpfError> {
        self.remove::<PodPorts>(ifindex)?;
        self.close_counters(ifindex)
    }

    fn interface_counters_mut(
        &mut self,
    ) -> Result<PerCpuHashMap<&mut aya::maps::MapData, u32, InterfaceCounters>, EbpfError> {
        let name = map::INTERFACE_COUNTERS;
        PerCpuHashMap::try_from(self.map_mut(name)?)
            .map_err(|source| EbpfError::Map { name, source })
    }

    /// See [`maps::Maps::open_counters`].
    fn open_counters(&mut self, ifindex: u32) -> Result<(), EbpfError> {
        let name = map::INTERFACE_COUNTERS;
        let cpus = aya::util::nr_cpus().map_err(|(_, error)| EbpfError::Cpus(error))?;
        let zero = aya::maps::PerCpuValues::try_from(vec![InterfaceCounters::default(); cpus])
            .map_err(EbpfError::Cpus)?;
        // BPF_NOEXIST: an entry a previous agent's programs filled keeps its counts.
        match self.interface_counters_mut()?.insert(ifindex, zero, 1) {
            Ok(()) => Ok(()),
            Err(aya::maps::MapError::SyscallError(error))
                if error.io_error.kind() == io::ErrorKind::AlreadyExists =>
            {
                Ok(())
            }
            Err(source) => Err(EbpfError::Map { name, source }),
        }
    }

    /// See [`maps::Maps::close_counters`].
    fn close_counters(&mut self, ifindex: u32) -> Result<(), EbpfError> {
        let name = map::INTERFACE_COUNTERS;
        match self.interface_counters_mut()?.remove(&ifindex) {
            Err(source) if !maps::absent(&source) => Err(EbpfError::Map { name, source }),
            _ => Ok(()),
        }
    }

    /// Takes the consumer side of the drop-event ring buffer (once per loaded object).
    pub fn take_drop_events(&mut self) -> Result<events::DropEvents, EbpfError> {
        Ok(events::DropEvents::new(self.take_ring(map::DROP_EVENTS)?))
    }

    /// Takes the consumer side of the ACL log ring buffer (once per loaded object), its log ids
    /// read in `book`.
    pub fn take_acl_log_events(
        &mut self,
        book: acl_log::AclLogBook,
    ) -> Result<acl_log::AclLogEvents, EbpfError> {
        let ring = self.take_ring(map::ACL_LOG_EVENTS)?;
        Ok(acl_log::AclLogEvents::new(ring, book))
    }

    /// Takes the consumer side of the routers' heard-neighbour ring buffer (once per loaded
    /// object).
    pub fn take_neighbour_events(
        &mut self,
    ) -> Result<neighbour_events::NeighbourEvents, EbpfError> {
        let ring = self.take_ring(map::NEIGHBOUR_EVENTS)?;
        Ok(neighbour_events::NeighbourEvents::new(ring))
    }

    fn take_ring(
        &mut self,
        name: &'static str,
    ) -> Result<aya::maps::RingBuf<aya::maps::MapData>, EbpfError> {
        let map = self
            .ebpf
            .take_map(name)
            .ok_or(EbpfError::MissingMap { name })?;
        aya::maps::RingBuf::try_from(map).map_err(|source| EbpfError::Map { name, source })
    }

    /// Connections committed to the table and failed commits (summed over CPUs), named as in
    /// [`ovnbpf_common::acl::ct_counter::NAMES`].
    pub fn conntrack_counters(&self) -> Result<Vec<(&'static str, u64)>, EbpfError> {
        self.named_counters(
            map::CONNTRACK_COUNTERS,
            &ovnbpf_common::acl::ct_counter::NAMES,
        )
    }

    /// What the load-balancer stage did (summed over CPUs), named as in
    /// [`ovnbpf_common::lb::counter::NAMES`].
    pub fn lb_counters(&self) -> Result<Vec<(&'static str, u64)>, EbpfError> {
        self.named_counters(map::LB_COUNTERS, &ovnbpf_common::lb::counter::NAMES)
    }

    /// What the socket-level balancer did (summed over CPUs), named as in
    /// [`ovnbpf_common::lb::socket_counter::NAMES`].
    pub fn socket_lb_counters(&self) -> Result<Vec<(&'static str, u64)>, EbpfError> {
        self.named_counters(
            map::SOCK_LB_COUNTERS,
            &ovnbpf_common::lb::socket_counter::NAMES,
        )
    }

    /// Rule-list walks the verdict cache answered and walks done (summed over CPUs), named as in
    /// [`ovnbpf_common::acl::verdict_cache::NAMES`].
    pub fn acl_verdict_cache(&self) -> Result<Vec<(&'static str, u64)>, EbpfError> {
        self.named_counters(
            map::ACL_VERDICT_CACHE,
            &ovnbpf_common::acl::verdict_cache::NAMES,
        )
    }

    /// Packets logged ACL rules decided, per verdict, and events lost (summed over CPUs), named
    /// as in [`ovnbpf_common::acl::logged::NAMES`].
    pub fn acl_logged(&self) -> Result<Vec<(&'static str, u64)>, EbpfError> {
        self.named_counters(map::ACL_LOGGED, &ovnbpf_common::acl::logged::NAMES)
    }

    /// Dropped frames per reason (summed over CPUs), named as in [`drop_reason::NAMES`].
    pub fn drop_counters(&self) -> Result<Vec<(&'static str, u64)>, EbpfError> {
        self.named_counters(map::DROP_COUNTERS, &drop_reason::NAMES)
    }

    /// Answers the routers sent per kind (summed over CPUs), named as in
    /// [`router_reply::NAMES`].
    pub fn router_replies(&self) -> Result<Vec<(&'static str, u64)>, EbpfError> {
        self.named_counters(map::ROUTER_REPLIES, &router_reply::NAMES)
    }

    /// The per-CPU `u64` array `name`, summed over CPUs, its indexes named by `names`.
    fn named_counters(
        &self,
        name: &'static str,
        names: &[&'static str],
    ) -> Result<Vec<(&'static str, u64)>, EbpfError> {
        let raw = self.ebpf.map(name).ok_or(EbpfError::MissingMap { name })?;
        let counters: PerCpuArray<_, u64> =
            PerCpuArray::try_from(raw).map_err(|source| EbpfError::Map { name, source })?;
        (0_u32..)
            .zip(names)
            .map(|(index, label)| {
                let per_cpu = counters
                    .get(&index, 0)
                    .map_err(|source| EbpfError::Map { name, source })?;
                Ok((*label, per_cpu.iter().sum::<u64>()))
            })
            .collect()
    }
}

/// Removes a pin file; a link or map nobody else holds goes with it.
fn remove_pin(pin: &Path) {
    if let Err(error) = std::fs::remove_file(pin)
        && error.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(pin = %pin.display(), %error, "could not remove a pin");
    }
}

/// Removes each of `keys` that `keep` rejects, with `remove`; returns how many went (the sweeps
/// of the L2 maps that are not yet [`tables::Table`]s).
pub(crate) fn remove_unwanted<K>(
    keys: impl IntoIterator<Item = K>,
    keep: impl Fn(&K) -> bool,
    mut remove: impl FnMut(K) -> Result<(), EbpfError>,
) -> Result<usize, EbpfError> {
    let mut removed = 0;
    for key in keys {
        if !keep(&key) {
            remove(key)?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Detaches the link pinned at `pin` (unless an agent still holds it open).
pub fn unpin_link(pin: &Path) {
    remove_pin(pin);
}

/// Puts each stage program into its slot of `STAGES` (replacing what a previous agent's object
/// left there: a frame in flight runs the old stage or the new one, both of this layout).
fn fill_stages(ebpf: &mut Ebpf) -> Result<ProgramArray<MapData>, EbpfError> {
    let name = map::STAGES;
    let array = ebpf.take_map(name).ok_or(EbpfError::MissingMap { name })?;
    let mut stages =
        ProgramArray::try_from(array).map_err(|source| EbpfError::Map { name, source })?;
    for (program, slot) in program::STAGES {
        let fd = classifier(ebpf, program)?
            .fd()
            .map_err(|source| EbpfError::Program {
                name: program,
                source,
            })?;
        stages
            .set(slot, fd, 0)
            .map_err(|source| EbpfError::Map { name, source })?;
    }
    Ok(stages)
}

/// Loads every program of [`program::ALL`], the verifier's work spread over the machine's cores
/// (at most four threads pulling programs in that order). The verifier is most of a cold start
/// (1.7 s of system time for all programs here, against 0.5 s for the Southbound snapshot of
/// 1,000 pods), and as root the kernel verifies programs concurrently: each load is its own
/// `bpf(BPF_PROG_LOAD)` on its own program. The maps exist already (created by the object's
/// load), so no program depends on another being loaded. The first rejection is returned; the
/// other threads stop after their current program.
fn load_programs(ebpf: &mut Ebpf) -> Result<(), EbpfError> {
    let mut queue = Vec::with_capacity(program::ALL.len());
    let mut programs: Vec<(&str, &mut Program)> = ebpf.programs_mut().collect();
    for name in program::ALL {
        let index = programs
            .iter()
            .position(|(found, _)| *found == name)
            .ok_or(EbpfError::MissingProgram { name })?;
        queue.push((name, programs.swap_remove(index).1));
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    let queue = std::sync::Mutex::new(queue.into_iter());
    let failed = std::sync::Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let next = match queue.lock() {
                        Ok(mut queue) => queue.next(),
                        Err(_) => None,
                    };
                    let Some((name, program)) = next else { return };
                    if let Err(error) = load_program(name, program) {
                        if let Ok(mut failed) = failed.lock() {
                            failed.get_or_insert(error);
                        }
                        if let Ok(mut queue) = queue.lock() {
                            queue.by_ref().for_each(drop);
                        }
                        return;
                    }
                }
            });
        }
    });
    match failed.into_inner() {
        Ok(Some(error)) => Err(error),
        _ => Ok(()),
    }
}

/// Loads one program through the verifier, by its kind.
fn load_program(name: &'static str, program: &mut Program) -> Result<(), EbpfError> {
    let loaded = match program {
        Program::SchedClassifier(program) => program.load(),
        Program::CgroupSockAddr(program) => program.load(),
        Program::CgroupSock(program) => program.load(),
        _ => Err(ProgramError::UnexpectedProgramType),
    };
    loaded.map_err(|source| load_error(name, source))
}

/// A program the verifier (or the loader) did not take, with the verifier's log.
fn load_error(name: &'static str, source: ProgramError) -> EbpfError {
    match source {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => EbpfError::Rejected {
            name,
            source: io_error,
            log: format!("{verifier_log:?}"),
        },
        source => EbpfError::Program { name, source },
    }
}

fn cgroup_sock<'a>(
    ebpf: &'a mut Ebpf,
    name: &'static str,
) -> Result<&'a mut aya::programs::CgroupSock, EbpfError> {
    ebpf.program_mut(name)
        .ok_or(EbpfError::MissingProgram { name })?
        .try_into()
        .map_err(|source| EbpfError::Program { name, source })
}

fn sock_addr<'a>(
    ebpf: &'a mut Ebpf,
    name: &'static str,
) -> Result<&'a mut aya::programs::CgroupSockAddr, EbpfError> {
    ebpf.program_mut(name)
        .ok_or(EbpfError::MissingProgram { name })?
        .try_into()
        .map_err(|source| EbpfError::Program { name, source })
}

fn classifier<'a>(
    ebpf: &'a mut Ebpf,
    name: &'static str,
) -> Result<&'a mut SchedClassifier, EbpfError> {
    ebpf.program_mut(name)
        .ok_or(EbpfError::MissingProgram { name })?
        .try_into()
        .map_err(|source| EbpfError::Program { name, source })
}
