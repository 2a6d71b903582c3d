//! Tokens of OVN's logical-flow language (matches and actions), as `lib/lex.c` splits them:
//! identifiers (`eth.src`, `ct_mark.blocked`, `reg0`), strings, integers (decimal or hex),
//! IPv4/IPv6/MAC constants with an optional `/prefix` or `/mask`, `$address_set`, `@port_group`,
//! `^template`, and punctuation. `/* … */` comments are skipped. Positions are byte offsets.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::ParseError;
use crate::net::parse_mac;

/// A constant value, as written (masks kept; nothing normalised away).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Constant {
    Integer {
        value: u128,
        mask: Option<u128>,
        hex: bool,
    },
    Ipv4 {
        address: Ipv4Addr,
        mask: Option<Mask<Ipv4Addr>>,
    },
    Ipv6 {
        address: Ipv6Addr,
        mask: Option<Mask<Ipv6Addr>>,
    },
    Mac {
        address: [u8; 6],
        mask: Option<[u8; 6]>,
    },
    String(String),
}

/// The mask of an address constant: `/24` or `/255.255.255.0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mask<A> {
    Prefix(u8),
    Bits(A),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Token {
    Id(String),
    Constant(Constant),
    /// `$name`
    AddressSet(String),
    /// `@name`
    PortGroup(String),
    /// `^name`
    Template(String),
    Punct(&'static str),
}

/// Punctuation, longest first so that `<->` wins over `<`.
const PUNCTUATION: &[&str] = &[
    "<->", "==", "!=", "<=", ">=", "&&", "||", "..", "--", "->", "(", ")", "{", "}", "[", "]", ",",
    ";", "=", "<", ">", "!", ":", "/", "-",
];

fn is_id_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

fn is_id_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'.'
}

/// Splits `text` into tokens with their byte offsets.
pub fn tokenize(text: &str) -> Result<Vec<(usize, Token)>, ParseError> {
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if text[i..].starts_with("/*") {
            let end = text[i + 2..]
                .find("*/")
                .ok_or_else(|| ParseError::at(i, "unterminated comment"))?;
            i += end + 4;
            continue;
        }
        let start = i;
        if c == b'"' {
            let (value, next) = lex_string(text, i)?;
            tokens.push((start, Token::Constant(Constant::String(value))));
            i = next;
        } else if matches!(c, b'$' | b'@' | b'^') {
            let name_len = bytes[i + 1..]
                .iter()
                .take_while(|b| {
                    b.is_ascii_alphanumeric() || **b == b'_' || **b == b'.' || **b == b'-'
                })
                .count();
            if name_len == 0 {
                return Err(ParseError::at(
                    i,
                    format!("'{}' must be followed by a name", c as char),
                ));
            }
            let name = text[i + 1..i + 1 + name_len].to_string();
            tokens.push((
                start,
                match c {
                    b'$' => Token::AddressSet(name),
                    b'@' => Token::PortGroup(name),
                    _ => Token::Template(name),
                },
            ));
            i += 1 + name_len;
        } else if c.is_ascii_digit()
            || (c == b':' && bytes.get(i + 1) == Some(&b':'))
            || starts_address(bytes, i)
        {
            let (constant, next) = lex_constant(text, i)?;
            tokens.push((start, Token::Constant(constant)));
            i = next;
        } else if is_id_start(c) {
            let mut end = i;
            while end < bytes.len() && is_id_char(bytes[end]) && !text[end..].starts_with("..") {
                end += 1;
            }
            // A trailing '.' is not part of an identifier.
            while end > i + 1 && bytes[end - 1] == b'.' {
                end -= 1;
            }
            tokens.push((start, Token::Id(text[i..end].to_string())));
            i = end;
        } else if let Some(punct) = PUNCTUATION.iter().find(|p| text[i..].starts_with(**p)) {
            tokens.push((start, Token::Punct(punct)));
            i += punct.len();
        } else {
            let ch = text[i..].chars().next().unwrap_or('?');
            return Err(ParseError::at(i, format!("unexpected character {ch:?}")));
        }
    }
    Ok(tokens)
}

/// A word of hex digits followed by ':' (an IPv6 address like `fe80::1` or a MAC like
/// `aa:bb:…`) is a constant even though it starts with a letter.
fn starts_address(bytes: &[u8], i: usize) -> bool {
    let hex = bytes[i..]
        .iter()
        .take_while(|b| b.is_ascii_hexdigit())
        .count();
    hex > 0 && hex <= 4 && bytes.get(i + hex) == Some(&b':')
}

fn lex_string(text: &str, start: usize) -> Result<(String, usize), ParseError> {
    let mut value = String::new();
    let mut chars = text[start + 1..].char_indices();
    while let Some((offset, ch)) = chars.next() {
        match ch {
            '"' => return Ok((value, start + 1 + offset + 1)),
            '\\' => match chars.next() {
                Some((_, 'n')) => value.push('\n'),
                Some((_, 't')) => value.push('\t'),
                Some((_, other)) => value.push(other),
                None => break,
            },
            ch => value.push(ch),
        }
    }
    Err(ParseError::at(start, "unterminated string"))
}

/// The run of characters a numeric or address constant may contain, stopping before `..`.
fn constant_span(text: &str, start: usize) -> usize {
    let bytes = text.as_bytes();
    let mut end = start;
    while end < bytes.len() {
        let b = bytes[end];
        let allowed = b.is_ascii_hexdigit() || b == b':' || b == b'.' || b == b'x' || b == b'X';
        if !allowed || text[end..].starts_with("..") {
            break;
        }
        end += 1;
    }
    end
}

fn lex_constant(text: &str, start: usize) -> Result<(Constant, usize), ParseError> {
    let span_end = constant_span(text, start);
    let span = &text[start..span_end];
    let (constant, mut end) = parse_unmasked(span, start)?;
    if text[end..].starts_with('/') && !text[end..].starts_with("/*") {
        let mask_end = constant_span(text, end + 1);
        let mask_text = &text[end + 1..mask_end];
        let masked = apply_mask(constant, mask_text).map_err(|m| ParseError::at(end, m))?;
        end = mask_end;
        return Ok((masked, end));
    }
    Ok((constant, end))
}

/// Parses the longest constant at the start of `span` (MAC, then IPv6, then IPv4, then integer).
fn parse_unmasked(span: &str, start: usize) -> Result<(Constant, usize), ParseError> {
    if let Some(address) = parse_mac(span) {
        return Ok((
            Constant::Mac {
                address,
                mask: None,
            },
            start + span.len(),
        ));
    }
    if span.contains(':')
        && let Ok(address) = span.parse::<Ipv6Addr>()
    {
        return Ok((
            Constant::Ipv6 {
                address,
                mask: None,
            },
            start + span.len(),
        ));
    }
    // IPv4: the longest prefix of four dotted decimals (e.g. `10.0.0.1` of `10.0.0.1:80`).
    let dotted: String = span
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    if dotted.matches('.').count() == 3
        && let Ok(address) = dotted.parse::<Ipv4Addr>()
    {
        return Ok((
            Constant::Ipv4 {
                address,
                mask: None,
            },
            start + dotted.len(),
        ));
    }
    let (value, len, hex) = parse_integer(span)
        .ok_or_else(|| ParseError::at(start, format!("invalid constant {span:?}")))?;
    Ok((
        Constant::Integer {
            value,
            mask: None,
            hex,
        },
        start + len,
    ))
}

/// An integer prefix of `text`: `0x` hex or decimal. Returns (value, length, was hex).
fn parse_integer(text: &str) -> Option<(u128, usize, bool)> {
    if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        let digits = hex.chars().take_while(char::is_ascii_hexdigit).count();
        if digits == 0 {
            return None;
        }
        return u128::from_str_radix(&hex[..digits], 16)
            .ok()
            .map(|v| (v, 2 + digits, true));
    }
    let digits = text.chars().take_while(char::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    text[..digits].parse().ok().map(|v| (v, digits, false))
}

fn apply_mask(constant: Constant, mask: &str) -> Result<Constant, String> {
    let bad = || format!("invalid mask {mask:?}");
    Ok(match constant {
        Constant::Ipv4 { address, .. } => {
            let mask = match mask.parse::<u8>() {
                Ok(prefix) if prefix <= 32 => Mask::Prefix(prefix),
                _ => Mask::Bits(mask.parse().map_err(|_| bad())?),
            };
            Constant::Ipv4 {
                address,
                mask: Some(mask),
            }
        }
        Constant::Ipv6 { address, .. } => {
            let mask = match mask.parse::<u8>() {
                Ok(prefix) if prefix <= 128 => Mask::Prefix(prefix),
                _ => Mask::Bits(mask.parse().map_err(|_| bad())?),
            };
            Constant::Ipv6 {
                address,
                mask: Some(mask),
            }
        }
        Constant::Mac { address, .. } => Constant::Mac {
            address,
            mask: Some(parse_mac(mask).ok_or_else(bad)?),
        },
        Constant::Integer { value, hex, .. } => {
            let (mask_value, len, _) = parse_integer(mask).ok_or_else(bad)?;
            if len != mask.len() {
                return Err(bad());
            }
            Constant::Integer {
                value,
                mask: Some(mask_value),
                hex,
            }
        }
        Constant::String(_) => return Err(bad()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<Token> {
        tokenize(text)
            .unwrap()
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    }

    #[test]
    fn addresses_numbers_and_ranges() {
        let tokens = kinds(
            "ip6.dst == fe80::858:aff:fe10:1 && reg0[0..15] == 0x1/0x3 && eth.src == 0a:58:0a:00:01:02",
        );
        assert!(matches!(&tokens[2], Token::Constant(Constant::Ipv6 { .. })));
        assert_eq!(
            tokens[5..10],
            [
                Token::Punct("["),
                Token::Constant(Constant::Integer {
                    value: 0,
                    mask: None,
                    hex: false
                }),
                Token::Punct(".."),
                Token::Constant(Constant::Integer {
                    value: 15,
                    mask: None,
                    hex: false
                }),
                Token::Punct("]"),
            ]
        );
        assert_eq!(
            tokens[11],
            Token::Constant(Constant::Integer {
                value: 1,
                mask: Some(3),
                hex: true
            })
        );
        assert!(matches!(
            tokens[15],
            Token::Constant(Constant::Mac { mask: None, .. })
        ));
    }

    #[test]
    fn masks_and_backends() {
        let tokens = kinds(
            "ip4.dst == 10.0.0.0/24 || ip6.dst == ff02::/16; ct_lb_mark(backends=10.0.1.2:80,10.0.1.3:80);",
        );
        assert_eq!(
            tokens[2],
            Token::Constant(Constant::Ipv4 {
                address: Ipv4Addr::new(10, 0, 0, 0),
                mask: Some(Mask::Prefix(24))
            })
        );
        assert!(matches!(
            tokens[6],
            Token::Constant(Constant::Ipv6 {
                mask: Some(Mask::Prefix(16)),
                ..
            })
        ));
        let backend = &tokens[12..15];
        assert_eq!(backend[1], Token::Punct(":"));
        assert_eq!(
            backend[2],
            Token::Constant(Constant::Integer {
                value: 80,
                mask: None,
                hex: false
            })
        );
    }

    #[test]
    fn strings_sets_and_comments() {
        let tokens =
            kinds(r#"inport == "a\"b" && ip4.src == $as_ip4 && outport == @pg /* note */ ; "#);
        assert_eq!(tokens[2], Token::Constant(Constant::String("a\"b".into())));
        assert_eq!(tokens[6], Token::AddressSet("as_ip4".into()));
        assert_eq!(tokens[10], Token::PortGroup("pg".into()));
        assert_eq!(tokens[11], Token::Punct(";"));
    }

    #[test]
    fn errors_carry_positions() {
        assert_eq!(tokenize("a == \"x").unwrap_err().position, 5);
        assert_eq!(tokenize("a ? b").unwrap_err().position, 2);
        assert!(tokenize("ip4.dst == 10.0.0.0/99x").is_err());
    }
}
