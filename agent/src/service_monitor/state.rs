//! One Service_Monitor's probing state, as ovn-controller's pinctrl keeps it
//! (`controller/pinctrl.c`, `svc_monitors_run` and `pinctrl_handle_svc_check`, in the shape
//! 24.03 gives them, which Kube-OVN ships: a status is decided as soon as a reply or a timeout
//! makes the count, and both counts restart with each decision). Pure: it is told the time, a
//! probe's sending and its replies, and says when to probe next; it sends and reads nothing.

use std::{collections::BTreeMap, time::Duration};

use tokio::time::Instant;

/// The transport a backend is probed over (`Service_Monitor.protocol`; anything but `udp` is
/// TCP, as in pinctrl).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
}

impl Protocol {
    #[must_use]
    pub fn from_column(protocol: Option<&str>) -> Self {
        match protocol {
            Some("udp") => Protocol::Udp,
            _ => Protocol::Tcp,
        }
    }
}

/// A backend's status as the Southbound spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    Online,
    Offline,
}

impl Status {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Online => "online",
            Status::Offline => "offline",
        }
    }
}

/// `Service_Monitor.options`, with pinctrl's defaults for what is missing or not a number
/// (`smap_get_int`): a probe every `interval`, a TCP probe unanswered after `timeout` failed
/// (a UDP one succeeded), `success_count` successes make a backend online, `failure_count`
/// failures offline. Values below 1 count as 1 (pinctrl would probe in a busy loop).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Options {
    pub interval: Duration,
    pub timeout: Duration,
    pub success_count: u32,
    pub failure_count: u32,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(5),
            timeout: Duration::from_secs(3),
            success_count: 1,
            failure_count: 1,
        }
    }
}

impl Options {
    #[must_use]
    pub fn from_map(options: &BTreeMap<String, String>) -> Self {
        let defaults = Self::default();
        let number = |key: &str, default: u64| {
            options
                .get(key)
                .and_then(|value| value.trim().parse::<i64>().ok())
                .map_or(default, |value| value.max(1).unsigned_abs())
        };
        let count = |key: &str, default: u32| {
            u32::try_from(number(key, u64::from(default))).unwrap_or(u32::MAX)
        };
        Self {
            interval: Duration::from_secs(number("interval", defaults.interval.as_secs())),
            timeout: Duration::from_secs(number("timeout", defaults.timeout.as_secs())),
            success_count: count("success_count", defaults.success_count),
            failure_count: count("failure_count", defaults.failure_count),
        }
    }
}

/// The probe in flight: what its replies must carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    pub source_port: u16,
    /// The TCP SYN's sequence number (its answers acknowledge `seq + 1`).
    pub seq: u32,
}

/// What a backend answered a probe with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A TCP SYN+ACK to the probe's port acknowledging `ack`.
    SynAck { destination_port: u16, ack: u32 },
    /// A TCP reset to the probe's port acknowledging `ack`.
    Reset { destination_port: u16, ack: u32 },
    /// An ICMP port unreachable about a UDP probe from `source_port`.
    PortUnreachable { source_port: u16 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Init,
    Waiting,
    Online,
    Offline,
}

/// What [`Monitor::run`] asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Send a probe now (then report it with [`Monitor::sent`]).
    Probe,
    /// Nothing to do before this instant (or a reply).
    Wait(Instant),
}

/// See the module documentation.
#[derive(Clone, Debug)]
pub struct Monitor {
    protocol: Protocol,
    options: Options,
    state: State,
    successes: u32,
    failures: u32,
    status: Option<Status>,
    next_probe: Instant,
    wait_until: Instant,
    probe: Option<Probe>,
}

impl Monitor {
    #[must_use]
    pub fn new(protocol: Protocol, options: Options, now: Instant) -> Self {
        Self {
            protocol,
            options,
            state: State::Init,
            successes: 0,
            failures: 0,
            status: None,
            next_probe: now,
            wait_until: now,
            probe: None,
        }
    }

    /// The status decided so far (`None` until the first decision: nothing is written then).
    #[must_use]
    pub fn status(&self) -> Option<Status> {
        self.status
    }

    /// The probe in flight, if one is.
    #[must_use]
    pub fn probe(&self) -> Option<Probe> {
        self.probe.filter(|_| self.state == State::Waiting)
    }

    /// Advances to `now`: decides the status when the counts are reached, and says whether to
    /// probe now or until when to wait.
    pub fn run(&mut self, now: Instant) -> Next {
        loop {
            match self.state {
                State::Init => return Next::Probe,
                State::Waiting if now >= self.wait_until => {
                    // Unanswered: a TCP backend failed; a UDP one that sent no port
                    // unreachable is taken as listening.
                    match self.protocol {
                        Protocol::Tcp => {
                            self.failures += 1;
                            self.state = State::Offline;
                        }
                        Protocol::Udp => {
                            self.successes += 1;
                            self.state = State::Online;
                        }
                    }
                    self.next_probe = now + self.options.interval;
                }
                State::Waiting => return Next::Wait(self.wait_until),
                State::Online | State::Offline => {
                    self.decide();
                    return if now >= self.next_probe {
                        Next::Probe
                    } else {
                        Next::Wait(self.next_probe)
                    };
                }
            }
        }
    }

    fn decide(&mut self) {
        let decided = match self.state {
            State::Online if self.successes >= self.options.success_count => Status::Online,
            State::Offline if self.failures >= self.options.failure_count => Status::Offline,
            _ => return,
        };
        self.status = Some(decided);
        self.successes = 0;
        self.failures = 0;
    }

    /// A probe went out at `now`.
    pub fn sent(&mut self, probe: Probe, now: Instant) {
        if self.state == State::Init {
            self.next_probe = now + self.options.interval;
        }
        self.probe = Some(probe);
        self.state = State::Waiting;
        self.wait_until = now + self.options.timeout;
    }

    /// A reply arrived at `now`. Returns whether it answered the probe in flight (a SYN+ACK is
    /// then to be reset, as pinctrl does). Replies to nothing, or to an older probe, are
    /// ignored.
    pub fn reply(&mut self, reply: Reply, now: Instant) -> bool {
        let Some(probe) = self.probe() else {
            return false;
        };
        let online = match (self.protocol, reply) {
            (
                Protocol::Tcp,
                Reply::SynAck {
                    destination_port,
                    ack,
                },
            ) if destination_port == probe.source_port && ack == probe.seq.wrapping_add(1) => true,
            (
                Protocol::Tcp,
                Reply::Reset {
                    destination_port,
                    ack,
                },
            ) if destination_port == probe.source_port && ack == probe.seq.wrapping_add(1) => false,
            (Protocol::Udp, Reply::PortUnreachable { source_port })
                if source_port == probe.source_port =>
            {
                false
            }
            _ => return false,
        };
        if online {
            self.successes += 1;
            self.state = State::Online;
        } else {
            self.failures += 1;
            self.state = State::Offline;
        }
        self.next_probe = now + self.options.interval;
        true
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
