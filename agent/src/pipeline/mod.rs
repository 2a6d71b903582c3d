//! Southbound → pipeline IR. Each logical flow is parsed once and classified per datapath
//! ([`classify`]); Port_Binding and Multicast_Group rows become port and flood-group entries.
//! Every source row remembers the entries it contributed and entries are reference-counted, so a
//! change set costs O(changed rows) and yields an [`IrDiff`] of exactly the entries that appeared
//! or disappeared. Also keeps the per-stage coverage (compiled / neutral / side duty not done /
//! unsupported) that `ovnbpfctl lflow coverage` prints. Only unsupported flows stop a datapath
//! from forwarding; a side duty not done (e.g. MAC learning) is reported and nothing more.
//!
//! - [`compile`]: the compiler (row contributions, reference counts, flood groups, coverage);
//! - [`classify`]: one logical flow → IR entries, by stage family;
//! - [`ir`]: the IR, the compiler's only output and the backends' only input;
//! - [`eval`]: the ovn-trace-like evaluator of the IR, the semantic reference.

pub mod classify;
pub mod compile;
pub mod eval;
pub mod ir;

pub use compile::{Compiler, Outcome, StageCoverage, UNDERLAY_ROUTING_STAGE};
/// Re-exported for the daemon and the backend until they import it from [`ir`].
pub use ir::IrDiff;

/// The evaluator's old paths (`pipeline::packet`, `pipeline::trace`), kept while tests on other
/// branches still import them; new code imports from [`eval`].
pub use eval::packet;
pub mod trace {
    //! The evaluator's old path; see [`super::eval`].
    pub use super::eval::{Evaluator, Trace};
}
