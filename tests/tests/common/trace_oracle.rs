//! The oracle side of the differential tests: `ovn-trace --minimal` of a packet on a lab's
//! Southbound, as the packets it outputs.

use std::process::Command;

use ovnbpf_agent::{
    lflow::parse_actions,
    pipeline::eval::{microflow::apply_statements, packet::Packet},
};
use ovnbpf_tests::{
    ovn::{Db, OvnLab},
    process,
};

/// The evaluator's outputs (`ours`, with its steps) against ovn-trace's (`theirs`, with its
/// text) for case `what`: whether ovn-trace dropped the packet, and the disagreement, described.
#[must_use]
pub fn compare(
    what: &str,
    ours: &ovnbpf_agent::pipeline::eval::Trace,
    mut theirs: Vec<(String, Packet)>,
    their_text: &str,
) -> (bool, Option<String>) {
    let mut ours_sorted = ours.outputs.clone();
    ours_sorted.sort();
    theirs.sort();
    let disagreement = (ours_sorted != theirs).then(|| {
        format!(
            "{what}\n  ovnbpf: {ours_sorted:?}\n{}\n  ovn-trace: {theirs:?}\n{their_text}",
            ours.steps
                .iter()
                .map(|s| format!("    {s}"))
                .collect::<Vec<_>>()
                .join("\n")
        )
    });
    (theirs.is_empty(), disagreement)
}

/// What to tell `ovn-trace` beside the packet.
#[derive(Clone, Copy, Debug, Default)]
pub struct TraceOptions<'a> {
    /// The ECMP member to select (`--select-id`), when the evaluator chose one.
    pub select: Option<u16>,
    /// The conntrack states (`--ct`), one per conntrack action, e.g. `["new", "est,rpl"]`.
    pub ct: &'a [&'a str],
}

/// `ovn-trace --minimal` of `packet` entering `switch` on `inport`, as output packets, with
/// ovn-trace's text. `None` when ovn-trace itself cannot evaluate the packet: ovn-trace 23.03
/// aborts on `nd_na_router` (an assertion in its `ovnact_get_ND_NA`), which answers every
/// solicitation for a router address.
///
/// # Panics
/// If ovn-trace fails otherwise, or prints what cannot be parsed.
#[must_use]
pub fn ovn_trace(
    lab: &OvnLab,
    switch: &str,
    inport: &str,
    packet: &Packet,
    options: TraceOptions<'_>,
) -> Option<(Vec<(String, Packet)>, String)> {
    let microflow = packet.to_microflow(inport);
    let sb = format!("--db={}", lab.unix_remote(Db::Southbound));
    let mut command = Command::new("ovn-trace");
    command.args([&sb, "--minimal"]);
    // ovn-trace picks an ECMP member at random unless told; it is told ours, so the rest of
    // the path is compared (the choice itself is the datapath's in OVN: a per-flow hash).
    if let Some(member) = options.select {
        command.arg(format!("--select-id={member}"));
    }
    for state in options.ct {
        command.arg(format!("--ct={state}"));
    }
    let text = match process::output(command.args([switch, &microflow])) {
        Ok(text) => text,
        Err(error) if error.to_string().contains("OVNACT_ND_NA") => return None,
        Err(error) => panic!("ovn-trace failed for {microflow}: {error}"),
    };
    let statements = flatten_blocks(
        &text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim_start().starts_with("LOG:"))
            .collect::<Vec<_>>(),
    );
    let actions = parse_actions(&statements)
        .unwrap_or_else(|e| panic!("cannot parse ovn-trace output {statements:?}: {e}"));
    let outputs = apply_statements(packet, &actions)
        .unwrap_or_else(|e| panic!("cannot apply ovn-trace output {statements:?}: {e}"));
    Some((outputs, text))
}

/// ovn-trace's `--minimal` output with each block that only says what the packet went through
/// (`select: R = N { … };`, the ECMP member it chose; `ct_next(ct_state=…) { … };`,
/// `ct_lb_mark { … };`, conntrack) replaced by the statements inside it, and conntrack's own
/// lines (`ct_next(ct_state=new|trk);`) left out.
fn flatten_blocks(lines: &[&str]) -> String {
    let mut kept = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    for line in lines {
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim();
        let transparent = ["select:", "ct_next", "ct_lb_mark", "ct_lb", "ct_commit"]
            .iter()
            .any(|prefix| trimmed.starts_with(prefix));
        if transparent && trimmed.ends_with('{') {
            open.push(indent);
        } else if transparent && trimmed.ends_with(';') {
            // `ct_next(ct_state=new|trk);`: what conntrack said, the statements follow.
        } else if trimmed == "};" && open.last() == Some(&indent) {
            open.pop();
        } else {
            kept.push(*line);
        }
    }
    kept.join("\n")
}

/// ovn-trace's balancing of `packet` (a new connection entering `switch` on `inport`): the
/// backends and hash fields of the `ct_lb_mark(backends=…)` (or `ct_lb`) it would run, as
/// northd wrote them. ovn-trace prints the decision but applies no translation.
///
/// # Panics
/// If ovn-trace fails.
#[must_use]
pub fn ovn_trace_balancing(
    lab: &OvnLab,
    switch: &str,
    inport: &str,
    packet: &Packet,
) -> Option<String> {
    let sb = format!("--db={}", lab.unix_remote(Db::Southbound));
    let mut command = Command::new("ovn-trace");
    command.args([&sb, "--summary"]);
    for _ in 0..4 {
        command.arg("--ct=new");
    }
    let text = process::output(command.args([switch, &packet.to_microflow(inport)])).unwrap();
    text.lines()
        .map(str::trim)
        .find_map(|line| {
            line.strip_prefix("ct_lb_mark(backends=")
                .or_else(|| line.strip_prefix("ct_lb(backends="))
        })
        .map(|rest| rest.trim_end_matches(");").to_string())
}
