//! ovnbpf agent library: everything the `ovnbpf-agent` daemon is made of, exposed as modules so
//! integration tests and tools drive the same code. See DESIGN.md for the data flow; each module's
//! doc says what it owns.

pub mod chassis;
pub mod cni;
pub mod config;
pub mod control;
pub mod daemon;
pub mod dataplane;
pub mod health;
pub mod lflow;
pub mod metrics;
pub mod net;
pub mod netns;
pub mod ovsdb;
pub mod pipeline;
pub mod rtnetlink;
pub mod sb;
