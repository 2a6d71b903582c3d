//! An RFC 7047 OVSDB client with the Open vSwitch extensions ovn-controller relies on:
//! `monitor_cond_since`/`update3` (falling back to `monitor_cond`/`update2` and `monitor`/`update`),
//! `monitor_cond_change`, transactions, echo and inactivity probes, and reconnection with resume
//! across a list of remotes (clustered databases and relays).
//!
//! - [`framing`]: the byte stream → JSON messages;
//! - [`raw`]: JSON values kept as the text they came in, decoded where they are read;
//! - [`schema`], [`datum`]: schemas, typed values and update2 diff semantics (`datum_decode`:
//!   values from their JSON notation, as text or a tree);
//! - [`remote`]: `unix:`/`tcp:`/`ssl:` addresses and lists of them;
//! - [`tls`]: TLS for `ssl:` remotes, as OVS's stream-ssl;
//! - [`connection`]: one JSON-RPC connection;
//! - [`session`]: a monitoring session that reconnects and resumes (`monitor_start`: how it
//!   starts monitoring on a connection);
//! - [`replica`]: the client-side copy of monitored tables and the change set of each update
//!   (`packed`: a row's values in one block, read in place).
//!
//! This module knows nothing about OVN; the `sb` module gives the Southbound rows their meaning.

pub mod connection;
pub mod datum;
mod datum_decode;
pub mod framing;
mod monitor_start;
pub mod packed;
pub mod raw;
pub mod remote;
pub mod replica;
pub mod schema;
pub mod session;
pub mod tls;

use thiserror::Error;

/// Errors of the OVSDB client.
#[derive(Debug, Error)]
pub enum OvsdbError {
    #[error("connecting to {remote}: {reason}")]
    Connect { remote: String, reason: String },
    #[error("disconnected: {0}")]
    Disconnected(String),
    #[error("server error: {error}{}", details.as_ref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Rpc {
        error: String,
        details: Option<serde_json::Value>,
    },
    #[error("protocol error: {0}")]
    Protocol(String),
    #[error(transparent)]
    Schema(#[from] schema::SchemaError),
    #[error("transaction failed: {0}")]
    Transaction(String),
    #[error("the session has ended")]
    SessionEnded,
}

impl OvsdbError {
    /// Whether the server rejected the method itself (so an older method should be tried).
    #[must_use]
    pub fn is_unknown_method(&self) -> bool {
        matches!(self, OvsdbError::Rpc { error, .. } if error.contains("unknown method"))
    }
}
