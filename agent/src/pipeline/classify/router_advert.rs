//! Router advertisements (`lr_in_nd_ra_options`, `lr_in_nd_ra_response`): northd's flow pair
//! for a router port with `ipv6_ra_configs`, whose first flow asks ovn-controller to answer a
//! router solicitation (`reg0[5] = put_nd_ra_opts(addr_mode = …, slla = …, prefix = …); next;`)
//! and whose second sends the answer back out of the port it came in through. The first
//! compiles to [`IrEntry::RouterAdvertisement`], the ICMPv6 message encoded here as
//! ovn-controller encodes the action (`lib/actions.c`, `encode_PUT_ND_RA_OPTS`: the header,
//! then one option per argument in the flow's order); the second, in that shape, is neutral:
//! the kernel's answer is the whole of it ([`crate::dataplane`]'s `router_adverts`).
//!
//! The options' layouts are [`crate::router_advert::options`]', shared with the periodic
//! sender.

use std::net::Ipv6Addr;

use super::{matching::*, verdict::Class};
use crate::lflow::ast::{Action, Expr, Source};
use crate::lflow::lexer::{Constant, Mask, Token};
use crate::pipeline::ir::{IrEntry, Mac};
use crate::router_advert::options;

/// `ff02::2`, where router solicitations go.
const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);
/// The longest message the kernel holds (`ovnbpf_common::ROUTER_ADVERT_MAX`).
const MESSAGE_MAX: usize = ovnbpf_common::ROUTER_ADVERT_MAX;

/// `lr_in_nd_ra_options`: the solicitation's answer of router port `inport`.
pub(super) fn options(dp: u32, terms: &[&Expr], actions: &[Action]) -> Option<Class> {
    let port = terms.iter().find_map(|t| compare_string(t, "inport"))?;
    let solicits = terms.iter().any(|t| is_predicate(t, "nd_rs"))
        && terms
            .iter()
            .any(|t| compare_ipv6(t, "ip6.dst") == Some(ALL_ROUTERS));
    let [
        Action::Assign {
            destination,
            source: Source::Call { name, arguments },
        },
        next,
    ] = actions
    else {
        return None;
    };
    if !solicits || destination != &bit("reg0", 5) || name != "put_nd_ra_opts" || !is_next(next) {
        return None;
    }
    Some(match encode(arguments.as_deref().unwrap_or_default()) {
        Ok((mac, message)) => Class::Compiled(vec![IrEntry::RouterAdvertisement {
            datapath: dp,
            port: port.to_string(),
            mac,
            message,
        }]),
        Err(reason) => Class::SideDuty {
            entries: Vec::new(),
            duty: format!(
                "router port {port}'s router advertisement is not sent ({reason}): its router solicitations are dropped"
            ),
        },
    })
}

/// `lr_in_nd_ra_response`: the answer back to the solicitor, from the port's MAC and link-local
/// address; neutral in that shape (the kernel's answer does all of it).
pub(super) fn response(terms: &[&Expr], actions: &[Action]) -> Option<Class> {
    let mac = assigned_mac(actions, "eth.src")?;
    let answers = terms.iter().any(|t| is_predicate(t, "nd_ra"))
        && terms.iter().any(|t| {
            let answered = bit("reg0", 5);
            matches!(t, Expr::Field(f) if *f == answered)
                || compare_field_integer(t, &answered) == Some(1)
        })
        && matches!(assigned(actions, "eth.dst"), Some(Source::Field(f)) if plain(f, "eth.src"))
        && matches!(assigned(actions, "ip6.dst"), Some(Source::Field(f)) if plain(f, "ip6.src"))
        && assigned_ipv6(actions, "ip6.src") == Some(link_local(mac))
        && matches!(assigned(actions, "outport"), Some(Source::Field(f)) if plain(f, "inport"))
        && ends_with_output(actions);
    answers.then_some(Class::Neutral)
}

/// The EUI-64 link-local address of `mac` (northd's `in6_generate_lla`).
fn link_local(mac: Mac) -> Ipv6Addr {
    Ipv6Addr::from(ovnbpf_common::ipv6::link_local(mac))
}

/// One `name = value` argument of `put_nd_ra_opts`.
fn arguments(tokens: &[Token]) -> Result<Vec<(&str, &Constant)>, String> {
    tokens
        .split(|token| matches!(token, Token::Punct(",")))
        .map(|argument| match argument {
            [Token::Id(name), Token::Punct("="), Token::Constant(value)] => {
                Ok((name.as_str(), value))
            }
            _ => Err(format!(
                "an argument not of the form name = constant: {argument:?}"
            )),
        })
        .collect()
}

/// The router port's MAC and the ICMPv6 router advertisement (checksum 0) that
/// `put_nd_ra_opts(arguments)` makes ovn-controller send: the header, then one option per
/// argument in their order (the address mode first, as northd writes it, so the prefixes'
/// A flag follows it).
pub(crate) fn encode(tokens: &[Token]) -> Result<(Mac, Vec<u8>), String> {
    let arguments = arguments(tokens)?;
    let string = |value: &Constant| match value {
        Constant::String(text) => Ok(text.clone()),
        other => Err(format!("{other:?} where a string belongs")),
    };
    let mode = match arguments.iter().find(|(name, _)| *name == "addr_mode") {
        Some((_, value)) => string(value)?,
        None => return Err("no addr_mode".into()),
    };
    let (mut flags, prefix_flags) =
        options::mode_flags(&mode).ok_or_else(|| format!("address mode {mode:?}"))?;
    let mut message = options::header(0);
    let mut mac = None;
    let mut prefixes = 0;
    for (name, value) in &arguments {
        match (*name, value) {
            ("addr_mode", _) => {}
            (
                "slla",
                Constant::Mac {
                    address,
                    mask: None,
                },
            ) => {
                mac = Some(*address);
                message.extend(options::source_link_layer(*address));
            }
            (
                "mtu",
                Constant::Integer {
                    value, mask: None, ..
                },
            ) => {
                let mtu = u32::try_from(*value).map_err(|_| format!("MTU {value}"))?;
                message.extend(options::mtu(mtu));
            }
            ("router_preference", value) => flags |= options::preference(&string(value)?),
            (
                "rdnss",
                Constant::Ipv6 {
                    address,
                    mask: None,
                },
            ) => {
                message.extend(options::dns_server(*address));
            }
            ("dnssl", value) => message.extend(options::search_list(&string(value)?)?),
            ("route_info", value) => message.extend(options::route_information(&string(value)?)?),
            ("prefix", Constant::Ipv6 { address, mask }) => {
                let length = match mask {
                    Some(Mask::Prefix(length)) if *length <= 128 => *length,
                    _ => return Err(format!("prefix {address} without a length")),
                };
                message.extend(options::prefix(*address, length, prefix_flags));
                prefixes += 1;
            }
            (name, value) => return Err(format!("argument {name} = {value:?}")),
        }
    }
    message[5] = flags;
    let mac = mac.ok_or("no slla")?;
    if prefixes == 0 && mode != "dhcpv6_stateful" {
        return Err("no prefix, which this address mode needs".into());
    }
    if message.len() > MESSAGE_MAX {
        return Err(format!(
            "{} bytes, over the kernel's {MESSAGE_MAX}",
            message.len()
        ));
    }
    Ok((mac, message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lflow::lexer::tokenize;

    fn encoded(arguments: &str) -> Result<(Mac, Vec<u8>), String> {
        let tokens: Vec<Token> = tokenize(arguments)
            .unwrap()
            .into_iter()
            .map(|(_, token)| token)
            .collect();
        encode(&tokens)
    }

    #[test]
    fn kube_ovns_default_is_ovn_controllers_bytes() {
        // northd 23.03's flow for Kube-OVN's default `ipv6_ra_configs` (stateful DHCPv6), and
        // the message ovn-controller sends for it: M set, the prefix on-link only.
        let (mac, message) = encoded(
            "addr_mode = \"dhcpv6_stateful\", slla = 00:00:00:aa:bb:cc, prefix = fd00:10:16::/64",
        )
        .unwrap();
        assert_eq!(mac, [0, 0, 0, 0xaa, 0xbb, 0xcc]);
        let mut expected = vec![
            0x86, 0, 0, 0, 0xff, 0x80, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, // header
            1, 1, 0, 0, 0, 0xaa, 0xbb, 0xcc, // source link-layer address
            3, 4, 64, 0x80, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0,
        ];
        expected.extend("fd00:10:16::".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(message, expected);
    }

    #[test]
    fn options_follow_the_flows_order_and_modes_set_their_flags() {
        let (_, message) = encoded(
            "addr_mode = \"slaac\", slla = 00:00:00:00:00:02, mtu = 1400, \
             router_preference = \"HIGH\", rdnss = fd01::53, dnssl = \"example.com\", \
             route_info = \"HIGH-fd05::1/64,LOW-fd06::/0\", prefix = fd01::/64",
        )
        .unwrap();
        // No M or O; HIGH preference.
        assert_eq!(message[5], 0x08);
        let options = &message[16..];
        assert_eq!(&options[..8], &[1, 1, 0, 0, 0, 0, 0, 2]);
        assert_eq!(&options[8..16], &[5, 1, 0, 0, 0, 0, 0x05, 0x78]);
        assert_eq!(&options[16..20], &[0x19, 3, 0, 0]);
        assert_eq!(
            &options[24..40],
            &"fd01::53".parse::<Ipv6Addr>().unwrap().octets()
        );
        // "example.com": 7 example 3 com 0 (13 bytes), after 8: 24 bytes, 3 units.
        let dnssl = &options[40..64];
        assert_eq!(&dnssl[..4], &[0x1f, 3, 0, 0]);
        assert_eq!(&dnssl[8..22], b"\x07example\x03com\x00\x00");
        // Routes: /64 in two units (the network, not the address given), /0 in one.
        assert_eq!(
            &options[64..72],
            &[0x18, 2, 64, 0x08, 0xff, 0xff, 0xff, 0xff]
        );
        assert_eq!(&options[72..80], &[0xfd, 0x05, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            &options[80..88],
            &[0x18, 1, 0, 0x18, 0xff, 0xff, 0xff, 0xff]
        );
        // SLAAC: L and A.
        assert_eq!(&options[88..92], &[3, 4, 64, 0xc0]);
        assert_eq!(options.len(), 88 + 32);
        let (_, stateless) = encoded(
            "addr_mode = \"dhcpv6_stateless\", slla = 00:00:00:00:00:03, prefix = fd02::/64, prefix = fd03::/64",
        )
        .unwrap();
        assert_eq!(stateless[5], 0x40);
        assert_eq!(stateless.len(), 16 + 8 + 2 * 32);
        assert_eq!(stateless[16 + 8 + 3], 0xc0);
    }

    #[test]
    fn what_ovn_controller_would_refuse_is_an_error() {
        assert!(encoded("addr_mode = \"slaac\", slla = 00:00:00:00:00:02").is_err());
        assert!(encoded("addr_mode = \"dhcpv6_stateful\", prefix = fd00::/64").is_err());
        assert!(encoded("addr_mode = \"other\", slla = 00:00:00:00:00:02").is_err());
        assert!(encoded("slla = 00:00:00:00:00:02, prefix = fd00::/64").is_err());
        // Stateful DHCPv6 needs no prefix.
        assert!(encoded("addr_mode = \"dhcpv6_stateful\", slla = 00:00:00:00:00:02").is_ok());
        let many = (0..8)
            .map(|i| format!(", prefix = fd0{i}::/64"))
            .collect::<String>();
        let error = encoded(&format!(
            "addr_mode = \"slaac\", slla = 00:00:00:00:00:02{many}"
        ))
        .unwrap_err();
        assert!(error.contains("over the kernel's 256"), "{error}");
    }
}
