//! OVN's logical-flow language: the lexer, parsers and printer for `Logical_Flow.match` and
//! `Logical_Flow.actions` as ovn-northd 23.03 and later emit them. Pure text → tree → text; the
//! `pipeline` compiler gives the trees their meaning.

pub mod ast;
pub mod lexer;
pub mod parser;
pub mod printer;

use thiserror::Error;
use uuid::Uuid;

pub use crate::net::parse_mac;
pub use parser::{parse_actions, parse_match};
pub use printer::Actions;

/// A syntax error at a byte offset of the parsed text.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("at offset {position}: {message}")]
pub struct ParseError {
    pub position: usize,
    pub message: String,
}

impl ParseError {
    pub(crate) fn at(position: usize, message: impl Into<String>) -> Self {
        Self {
            position,
            message: message.into(),
        }
    }
}

/// Which column of a flow failed to parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowPart {
    Match,
    Actions,
}

/// A parse error located in a Southbound flow.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("logical flow {flow} (stage {stage}): {part:?} {error}: {text:?}")]
pub struct FlowParseError {
    pub flow: Uuid,
    pub stage: String,
    pub part: FlowPart,
    pub text: String,
    pub error: ParseError,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip_match(text: &str) {
        let tree = parse_match(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let printed = tree.to_string();
        let again = parse_match(&printed).unwrap_or_else(|e| panic!("reparse of {printed:?}: {e}"));
        assert_eq!(tree, again, "{text} → {printed}");
    }

    fn round_trip_actions(text: &str) {
        let tree = parse_actions(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let printed = Actions(&tree).to_string();
        let again =
            parse_actions(&printed).unwrap_or_else(|e| panic!("reparse of {printed:?}: {e}"));
        assert_eq!(tree, again, "{text} → {printed}");
    }

    #[test]
    fn matches_northd_writes_round_trip() {
        for text in [
            "1",
            "inport == \"pod-a1.ns1\" && eth.src == {00:00:00:00:00:01} && ip4.src == {10.0.1.2}",
            "ip4.dst == 10.0.1.0/24 && reg7 == 0",
            "eth.mcast || (arp.op == 1 && arp.tpa == 10.0.1.1)",
            "!ct.trk || (ct.est && !ct.rel && ct_mark.blocked == 1)",
            "reg0[7] == 1 && (ct.new || ct.est)",
            "1024 <= tcp.src <= 49151",
            "ip6.dst == {fe80::858:aff:fe10:1, ff02::1:ff10:1} && nd_ns",
            "ip4.src == $pg_ip4 && outport == @pg_web && is_chassis_resident(\"cr-lrp\")",
            "eth.src == 0a:58:00:00:00:00/ff:ff:00:00:00:00 && reg8[0..15] == 0x10/0xf0",
            "ip.later_frag && !(ip4 && udp)",
            "0",
        ] {
            round_trip_match(text);
        }
    }

    #[test]
    fn actions_northd_writes_round_trip() {
        for text in [
            "next;",
            "outport = \"pod-a2.ns1\"; output;",
            "eth.dst = eth.src; eth.src = 00:00:00:00:00:99; arp.op = 2; /* ARP reply */ arp.tha = arp.sha; arp.sha = 00:00:00:00:00:99; arp.tpa = arp.spa; arp.spa = 10.0.1.99; outport = inport; flags.loopback = 1; output;",
            "ip.ttl--; reg8[0..15] = 0; reg0 = ip4.dst; reg1 = 10.0.1.1; eth.src = 0a:58:0a:00:01:01; outport = \"vpc-a-subnet-a\"; flags.loopback = 1; next;",
            "ct_commit { ct_mark.blocked = 0; ct_label.label = reg3; }; next;",
            "ct_lb_mark(backends=10.0.1.2:80,10.0.1.3:80);",
            "reg9[2] = lookup_arp(inport, arp.spa, arp.sha); next;",
            "next(pipeline=egress, table=1);",
            "icmp4 { eth.dst <-> eth.src; ip4.dst <-> ip4.src; ip.ttl = 255; icmp4.type = 11; /* Time exceeded */ icmp4.code = 0; next(pipeline=ingress, table=0); };",
            "clone { outport = \"subnet-a-vpc-a\"; output; }; outport = \"_MC_flood\"; output;",
            "xxreg0 = fe80::858:aff:fe10:1; reg0 = ct_snat_to_vip; next;",
            "drop;",
            "log(name=\"acl\", severity=info, verdict=allow, meter=\"m\"); next;",
            "ct_lb_mark(backends=[fd00::2]:80,[fd00::3]:80; hash_fields=\"ip_dst,ip_src\");",
        ] {
            round_trip_actions(text);
        }
    }

    #[test]
    fn trees_have_the_expected_shape() {
        let tree = parse_match("inport == \"p\" && (eth.bcast || eth.mcast)").unwrap();
        let ast::Expr::And(terms) = tree else {
            panic!("{tree:?}")
        };
        assert_eq!(terms.len(), 2);
        assert!(matches!(&terms[1], ast::Expr::Or(or) if or.len() == 2));
        let actions = parse_actions("ip.ttl--; eth.src <-> eth.dst; reg0[1] = 1; next;").unwrap();
        assert!(matches!(&actions[0], ast::Action::Decrement(f) if f.name == "ip.ttl"));
        assert!(matches!(&actions[1], ast::Action::Exchange { .. }));
        assert!(
            matches!(&actions[2], ast::Action::Assign { destination, .. } if destination.slice == Some((1, None)))
        );
        assert!(
            matches!(&actions[3], ast::Action::Keyword { name, arguments: None, block: None } if name == "next")
        );
    }

    #[test]
    fn errors_say_where() {
        let error = parse_match("inport == && ip4").unwrap_err();
        assert_eq!(error.position, 10);
        assert!(parse_match("(ip4").is_err());
        assert!(parse_match("eth.dst == {}").is_err());
        assert!(parse_actions("outport = ;").is_err());
        assert!(parse_actions("clone { output;").is_err());
        assert!(
            parse_actions("next").is_ok(),
            "a trailing ';' may be omitted at the end"
        );
        assert!(parse_actions("reg0[1 = 1;").is_err());
    }
}
