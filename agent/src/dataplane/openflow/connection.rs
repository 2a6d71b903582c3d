//! A session with one OpenFlow switch (br-int's management socket): HELLO with OpenFlow 1.5 only
//! (a switch that does not offer it is refused), FEATURES, the switch's echo requests answered
//! whenever the session reads, and flow changes applied as OVN's ofctrl applies them: in one
//! bundle, atomic and ordered, so the switch takes all of them or none. The switch's errors
//! come back with what it said (type and code); a request it does not answer within
//! [`REPLY_TIMEOUT`] is an error too, as is a closed socket.
//!
//! One request at a time (`&mut self`): the backend that drives it owns it.

use std::{io, path::Path, time::Duration};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::UnixStream,
};

use super::message::{
    self, BundleControl, DecodeError, FlowMod, HEADER_LEN, Incoming, VERSION, barrier_request,
    bundle_add, bundle_control, echo_reply, features_request, hello,
};

/// How long the switch has to answer a request.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the session failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenFlowError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("the switch closed the connection")]
    Closed,
    #[error("the switch does not speak OpenFlow 1.5 (it offers the version bitmap {offered:#x})")]
    Version { offered: u32 },
    #[error("the switch sent a message that does not decode: {0}")]
    Malformed(#[from] DecodeError),
    #[error("the switch refused {request}: OpenFlow error type {kind}, code {code}")]
    Refused {
        request: &'static str,
        kind: u16,
        code: u16,
    },
    #[error("the switch did not answer {request} within {REPLY_TIMEOUT:?}")]
    Timeout { request: &'static str },
    #[error("a message of {0} bytes is longer than OpenFlow's 65,535")]
    TooLong(usize),
    #[error(
        "the switch maps OVN's Geneve option elsewhere than tun_metadata0, or tun_metadata0 to \
         another option"
    )]
    TlvTaken,
    #[error("the switch answered {request} with another kind of message")]
    Unexpected { request: &'static str },
}

/// A session with one switch.
#[derive(Debug)]
pub struct Connection {
    stream: UnixStream,
    next_xid: u32,
    next_bundle: u32,
    datapath_id: u64,
    tables: u8,
}

impl Connection {
    /// Connects to the switch's socket at `path` and opens the session (HELLO, FEATURES).
    ///
    /// # Errors
    /// When the socket cannot be reached, the switch does not offer OpenFlow 1.5, or does not
    /// answer.
    pub async fn connect(path: &Path) -> Result<Self, OpenFlowError> {
        let stream = UnixStream::connect(path)
            .await
            .map_err(|source| OpenFlowError::Io {
                what: format!("connecting to {}", path.display()),
                source,
            })?;
        let mut connection = Self {
            stream,
            next_xid: 1,
            next_bundle: 1,
            datapath_id: 0,
            tables: 0,
        };
        let xid = connection.xid();
        connection.send(&hello(xid)).await?;
        let versions = tokio::time::timeout(REPLY_TIMEOUT, async {
            loop {
                match connection.read().await? {
                    (Incoming::Hello { versions }, _) => return Ok(versions),
                    (Incoming::Error { kind, code }, _) => {
                        return Err(OpenFlowError::Refused {
                            request: "HELLO",
                            kind,
                            code,
                        });
                    }
                    _ => {}
                }
            }
        })
        .await
        .map_err(|_| OpenFlowError::Timeout { request: "HELLO" })??;
        if versions & (1 << VERSION) == 0 {
            return Err(OpenFlowError::Version { offered: versions });
        }
        let xid = connection.xid();
        connection.send(&features_request(xid)).await?;
        if let Incoming::FeaturesReply {
            datapath_id,
            tables,
        } = connection.reply(xid, "FEATURES_REQUEST").await?
        {
            connection.datapath_id = datapath_id;
            connection.tables = tables;
        }
        Ok(connection)
    }

    /// The switch's datapath ID (FEATURES).
    #[must_use]
    pub fn datapath_id(&self) -> u64 {
        self.datapath_id
    }

    /// How many flow tables the switch has (FEATURES).
    #[must_use]
    pub fn tables(&self) -> u8 {
        self.tables
    }

    /// Applies `changes` in one atomic, ordered bundle: all of them, or (the switch refusing
    /// one) none, the bundle discarded and the refusal returned.
    ///
    /// # Errors
    /// When the switch refuses a change or the bundle, or the session fails.
    pub async fn apply(&mut self, changes: &[FlowMod]) -> Result<(), OpenFlowError> {
        if changes.is_empty() {
            return Ok(());
        }
        let bundle = self.next_bundle;
        self.next_bundle = self.next_bundle.wrapping_add(1);
        let xid = self.xid();
        self.send(&bundle_control(xid, bundle, BundleControl::Open))
            .await?;
        self.reply(xid, "BUNDLE_CONTROL open").await?;
        let first = self.next_xid;
        for change in changes {
            let xid = self.xid();
            self.send(&bundle_add(xid, bundle, &change.encode(xid)))
                .await?;
        }
        // The adds are not answered unless refused: a barrier says they were all read.
        let barrier = self.xid();
        self.send(&barrier_request(barrier)).await?;
        let refused = self.refusals_until(barrier, first).await?;
        let control = if refused.is_some() {
            BundleControl::Discard
        } else {
            BundleControl::Commit
        };
        let xid = self.xid();
        self.send(&bundle_control(xid, bundle, control)).await?;
        let committed = self.reply(xid, "BUNDLE_CONTROL commit").await;
        match refused {
            Some((kind, code)) => Err(OpenFlowError::Refused {
                request: "FLOW_MOD",
                kind,
                code,
            }),
            None => committed.map(drop),
        }
    }

    /// Makes sure Geneve option `(class, type, length)` is mapped to `tun_metadata0` (OVN's
    /// option, class 0x0102 type 0x80 length 4, carries the logical ports): kept where the
    /// switch maps it there already, added where `tun_metadata0` is free.
    ///
    /// # Errors
    /// When the option is mapped elsewhere, `tun_metadata0` holds another option, or the
    /// switch refuses.
    pub async fn map_geneve_option(
        &mut self,
        (class, kind, length): (u16, u8, u8),
    ) -> Result<(), OpenFlowError> {
        let xid = self.xid();
        self.send(&message::tlv_table_request(xid)).await?;
        let Incoming::TlvTable { mappings } = self.reply(xid, "NXT_TLV_TABLE_REQUEST").await?
        else {
            return Err(OpenFlowError::TlvTaken);
        };
        let ours = |m: &&message::TlvMapping| m.0 == class && m.1 == kind;
        match mappings.iter().find(ours) {
            Some(&(_, _, mapped_length, 0)) if mapped_length == length => return Ok(()),
            Some(_) => return Err(OpenFlowError::TlvTaken),
            None if mappings.iter().any(|m| m.3 == 0) => return Err(OpenFlowError::TlvTaken),
            None => {}
        }
        let xid = self.xid();
        self.send(&message::tlv_table_add(xid, (class, kind, length, 0)))
            .await?;
        self.barrier().await
    }

    /// How many packets the flows of `cookie` (all of its bits) matched, in every table (an
    /// aggregate stats request).
    ///
    /// # Errors
    /// When the session fails or the switch refuses.
    pub async fn count_packets(&mut self, cookie: u64) -> Result<u64, OpenFlowError> {
        let xid = self.xid();
        self.send(&message::aggregate_stats_request(xid, cookie, u64::MAX))
            .await?;
        match self.reply(xid, "OFPMP_AGGREGATE_STATS").await? {
            Incoming::AggregateStats { packets } => Ok(packets),
            _ => Err(OpenFlowError::Unexpected {
                request: "OFPMP_AGGREGATE_STATS",
            }),
        }
    }

    /// How many flows of owner `cookie` (its low 32 bits, [`message::OWNER_MASK`]) the switch
    /// holds, in every table (a flow stats request).
    ///
    /// # Errors
    /// When the session fails or the switch refuses.
    pub async fn count_flows(&mut self, cookie: u64) -> Result<usize, OpenFlowError> {
        let xid = self.xid();
        self.send(&message::flow_stats_request(
            xid,
            cookie,
            message::OWNER_MASK,
        ))
        .await?;
        let mut total = 0;
        loop {
            match self.reply(xid, "OFPMP_FLOW_DESC").await? {
                Incoming::FlowStats { flows, more } => {
                    total += flows;
                    if !more {
                        return Ok(total);
                    }
                }
                _ => {
                    return Err(OpenFlowError::Unexpected {
                        request: "OFPMP_FLOW_DESC",
                    });
                }
            }
        }
    }

    /// Every port's counts (a port stats request, all its parts).
    ///
    /// # Errors
    /// When the session fails or the switch refuses.
    pub async fn port_counters(&mut self) -> Result<Vec<message::PortCounters>, OpenFlowError> {
        let xid = self.xid();
        self.send(&message::port_stats_request(xid)).await?;
        let mut all = Vec::new();
        loop {
            match self.reply(xid, "OFPMP_PORT_STATS").await? {
                Incoming::PortStats { ports, more } => {
                    all.extend(ports);
                    if !more {
                        return Ok(all);
                    }
                }
                _ => {
                    return Err(OpenFlowError::Unexpected {
                        request: "OFPMP_PORT_STATS",
                    });
                }
            }
        }
    }

    /// Waits until the switch has handled everything sent before (BARRIER).
    ///
    /// # Errors
    /// When the session fails.
    pub async fn barrier(&mut self) -> Result<(), OpenFlowError> {
        let xid = self.xid();
        self.send(&barrier_request(xid)).await?;
        self.reply(xid, "BARRIER_REQUEST").await.map(drop)
    }

    /// Asks the switch for the packets its flows send to the controller, whole and unbuffered
    /// (a management-socket session gets none until it asks).
    ///
    /// # Errors
    /// When the session fails.
    pub async fn receive_packet_ins(&mut self) -> Result<(), OpenFlowError> {
        let xid = self.xid();
        self.send(&message::set_config(xid, 0xffff)).await?;
        self.barrier().await
    }

    /// The next packet-in, waiting as long as it takes. What else comes meanwhile is passed
    /// over; the switch's refusals of packet-outs are logged.
    ///
    /// # Errors
    /// When the session fails.
    pub async fn next_packet_in(&mut self) -> Result<message::PacketIn, OpenFlowError> {
        loop {
            match self.read().await? {
                (Incoming::PacketIn(packet_in), _) => return Ok(*packet_in),
                (Incoming::Error { kind, code }, xid) => {
                    tracing::warn!(kind, code, xid, "the switch refused a packet-out");
                }
                _ => {}
            }
        }
    }

    /// Sends `data` into the switch as if from `in_port`, through `actions` (no answer is
    /// awaited: a refusal comes back to [`Self::next_packet_in`]).
    ///
    /// # Errors
    /// When the session fails.
    pub async fn packet_out(
        &mut self,
        in_port: u32,
        actions: &[super::action::Action],
        data: &[u8],
    ) -> Result<(), OpenFlowError> {
        let xid = self.xid();
        self.send(&message::packet_out(xid, in_port, actions, data))
            .await
    }

    fn xid(&mut self) -> u32 {
        let xid = self.next_xid;
        self.next_xid = self.next_xid.wrapping_add(1).max(1);
        xid
    }

    async fn send(&mut self, bytes: &[u8]) -> Result<(), OpenFlowError> {
        if bytes.len() > usize::from(u16::MAX) {
            return Err(OpenFlowError::TooLong(bytes.len()));
        }
        self.stream
            .write_all(bytes)
            .await
            .map_err(|source| OpenFlowError::Io {
                what: "writing to the switch".into(),
                source,
            })
    }

    /// The next message and its xid; the switch's echo requests are answered on the way.
    async fn read(&mut self) -> Result<(Incoming, u32), OpenFlowError> {
        loop {
            let mut header = [0; HEADER_LEN];
            self.read_exact(&mut header).await?;
            let (_, length, xid) = message::parse_header(&header);
            if length < HEADER_LEN {
                return Err(DecodeError::Short(length).into());
            }
            let mut bytes = header.to_vec();
            bytes.resize(length, 0);
            self.read_exact(&mut bytes[HEADER_LEN..]).await?;
            match message::decode(&bytes)? {
                Incoming::EchoRequest { data } => self.send(&echo_reply(xid, &data)).await?,
                incoming => return Ok((incoming, xid)),
            }
        }
    }

    async fn read_exact(&mut self, buffer: &mut [u8]) -> Result<(), OpenFlowError> {
        match self.stream.read_exact(buffer).await {
            Ok(_) => Ok(()),
            Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => {
                Err(OpenFlowError::Closed)
            }
            Err(source) => Err(OpenFlowError::Io {
                what: "reading from the switch".into(),
                source,
            }),
        }
    }

    /// The switch's answer to request `xid` (`request` names it in errors).
    async fn reply(&mut self, xid: u32, request: &'static str) -> Result<Incoming, OpenFlowError> {
        let waited = tokio::time::timeout(REPLY_TIMEOUT, async {
            loop {
                match self.read().await? {
                    (Incoming::Error { kind, code }, id) if id == xid => {
                        return Err(OpenFlowError::Refused {
                            request,
                            kind,
                            code,
                        });
                    }
                    (incoming, id) if id == xid => return Ok(incoming),
                    _ => {}
                }
            }
        })
        .await;
        waited.map_err(|_| OpenFlowError::Timeout { request })?
    }

    /// Reads until the reply to barrier `barrier`: the first refusal of a request sent since
    /// xid `first` (type and code), if any.
    async fn refusals_until(
        &mut self,
        barrier: u32,
        first: u32,
    ) -> Result<Option<(u16, u16)>, OpenFlowError> {
        let waited = tokio::time::timeout(REPLY_TIMEOUT, async {
            let mut refused = None;
            loop {
                match self.read().await? {
                    (Incoming::BarrierReply, id) if id == barrier => return Ok(refused),
                    (Incoming::Error { kind, code }, id)
                        if id.wrapping_sub(first) < barrier.wrapping_sub(first) =>
                    {
                        refused.get_or_insert((kind, code));
                    }
                    _ => {}
                }
            }
        })
        .await;
        waited.map_err(|_| OpenFlowError::Timeout {
            request: "BARRIER_REQUEST",
        })?
    }
}
