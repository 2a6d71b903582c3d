//! The agent's CNI server: the unix socket the `ovnbpf-cni` plugin calls (Kube-OVN's API,
//! [`server`]), the operations behind it ([`handler`]), how pod NICs are built ([`plumbing`]) and
//! the attachments that survive agent restarts ([`store`]), the periodic sweep of attachments
//! whose network namespace is gone ([`sweep`]); installing the plugin and its
//! network configuration on a node ([`install`]). Talks to the daemon loop only through
//! [`crate::daemon::ports::DaemonHandle`].

pub mod handler;
pub mod install;
pub mod plumbing;
pub mod server;
pub mod store;
pub mod sweep;
