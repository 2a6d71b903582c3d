//! ovnbpf agent library: everything the `ovnbpf-agent` daemon is made of, exposed as modules so
//! integration tests and tools drive the same code. The repository's `ARCHITECTURE.md` has the
//! data flow, the code map and the layering rules; each module's doc says what it owns.

pub mod allocator;
pub mod bfd;
pub mod chassis;
pub mod cni;
pub mod config;
pub mod control;
pub mod daemon;
pub mod dataplane;
pub mod ethtool;
pub mod health;
pub mod http_server;
pub mod lflow;
pub mod metrics;
pub mod net;
pub mod netlink;
pub mod netns;
pub mod node_network;
pub mod ovsdb;
pub mod packet_socket;
pub mod pipeline;
pub mod readiness;
pub mod router_advert;
pub mod sb;
pub mod service_monitor;
