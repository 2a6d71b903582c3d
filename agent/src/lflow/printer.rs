//! Printing syntax trees back to OVN's notation. `parse(print(tree)) == tree` for every tree the
//! parsers produce (constants keep their hex-ness and masks; sets stay sets).

use std::fmt::{self, Display, Formatter, Write};

use super::{
    ast::{Action, Expr, FieldRef, Source, Value},
    lexer::{Constant, Mask, Token, tokenize},
};

impl Display for FieldRef {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        match self.slice {
            Some((low, Some(high))) => write!(f, "[{low}..{high}]"),
            Some((low, None)) => write!(f, "[{low}]"),
            None => Ok(()),
        }
    }
}

fn write_mac(f: &mut Formatter<'_>, mac: &[u8; 6]) -> fmt::Result {
    write!(f, "{}", crate::net::Mac(*mac))
}

fn write_string(f: &mut Formatter<'_>, text: &str) -> fmt::Result {
    f.write_char('"')?;
    for ch in text.chars() {
        match ch {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\t' => f.write_str("\\t")?,
            ch => f.write_char(ch)?,
        }
    }
    f.write_char('"')
}

impl Display for Constant {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Constant::Integer {
                value,
                mask,
                hex: true,
            } => {
                write!(f, "{value:#x}")?;
                mask.map_or(Ok(()), |mask| write!(f, "/{mask:#x}"))
            }
            Constant::Integer {
                value,
                mask,
                hex: false,
            } => {
                write!(f, "{value}")?;
                mask.map_or(Ok(()), |mask| write!(f, "/{mask}"))
            }
            Constant::Ipv4 { address, mask } => {
                write!(f, "{address}")?;
                match mask {
                    Some(Mask::Prefix(prefix)) => write!(f, "/{prefix}"),
                    Some(Mask::Bits(bits)) => write!(f, "/{bits}"),
                    None => Ok(()),
                }
            }
            Constant::Ipv6 { address, mask } => {
                write!(f, "{address}")?;
                match mask {
                    Some(Mask::Prefix(prefix)) => write!(f, "/{prefix}"),
                    Some(Mask::Bits(bits)) => write!(f, "/{bits}"),
                    None => Ok(()),
                }
            }
            Constant::Mac { address, mask } => {
                write_mac(f, address)?;
                if let Some(mask) = mask {
                    f.write_char('/')?;
                    write_mac(f, mask)?;
                }
                Ok(())
            }
            Constant::String(text) => write_string(f, text),
        }
    }
}

impl Display for Value {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Value::Constant(constant) => write!(f, "{constant}"),
            Value::AddressSet(name) => write!(f, "${name}"),
            Value::PortGroup(name) => write!(f, "@{name}"),
            Value::Template(name) => write!(f, "^{name}"),
        }
    }
}

impl Display for Token {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Token::Id(name) => f.write_str(name),
            Token::Constant(constant) => write!(f, "{constant}"),
            Token::AddressSet(name) => write!(f, "${name}"),
            Token::PortGroup(name) => write!(f, "@{name}"),
            Token::Template(name) => write!(f, "^{name}"),
            Token::Punct(punct) => f.write_str(punct),
        }
    }
}

/// Raw argument tokens, spaced so that they lex back to the same tokens: written tight where
/// that reads naturally (`backends=10.0.0.1:80,…`) and the text so far provably lexes back to the
/// same tokens (constants can absorb neighbours, e.g. `0` `:` `0` into an address), else spaced.
fn write_tokens(f: &mut Formatter<'_>, tokens: &[Token]) -> fmt::Result {
    /// Beyond this many tokens the quadratic check is skipped and everything is spaced.
    const CHECKED_TOKENS: usize = 64;
    let mut text = String::new();
    for (index, token) in tokens.iter().enumerate() {
        let token_text = token.to_string();
        if index > 0 {
            let wants_tight = matches!(token, Token::Punct("," | "=" | ";" | ":" | ")" | "]"))
                || matches!(tokens[index - 1], Token::Punct("=" | "(" | ":" | "["));
            let tight = format!("{text}{token_text}");
            let lexes_back = tokens.len() <= CHECKED_TOKENS
                && tokenize(&tight).is_ok_and(|lexed| {
                    lexed.len() == index + 1 && lexed.iter().zip(tokens).all(|((_, a), b)| a == b)
                });
            if !(wants_tight && lexes_back) {
                text.push(' ');
            }
        }
        text.push_str(&token_text);
    }
    f.write_str(&text)
}

impl Expr {
    fn write(&self, f: &mut Formatter<'_>, inside: Option<&'static str>) -> fmt::Result {
        match self {
            Expr::Bool(value) => f.write_str(if *value { "1" } else { "0" }),
            Expr::Field(field) => write!(f, "{field}"),
            Expr::Not(inner) => {
                f.write_char('!')?;
                match inner.as_ref() {
                    Expr::Bool(_) | Expr::Field(_) | Expr::Function { .. } | Expr::Not(_) => {
                        inner.write(f, Some("!"))
                    }
                    _ => {
                        f.write_char('(')?;
                        inner.write(f, None)?;
                        f.write_char(')')
                    }
                }
            }
            Expr::And(terms) | Expr::Or(terms) => {
                let (separator, name) = if matches!(self, Expr::And(_)) {
                    (" && ", "&&")
                } else {
                    (" || ", "||")
                };
                let parenthesise = inside.is_some();
                if parenthesise {
                    f.write_char('(')?;
                }
                for (index, term) in terms.iter().enumerate() {
                    if index > 0 {
                        f.write_str(separator)?;
                    }
                    term.write(f, Some(name))?;
                }
                if parenthesise {
                    f.write_char(')')?;
                }
                Ok(())
            }
            Expr::Compare {
                field,
                relation,
                values,
                set,
            } => {
                write!(f, "{field} {} ", relation.symbol())?;
                if *set {
                    f.write_char('{')?;
                    for (index, value) in values.iter().enumerate() {
                        if index > 0 {
                            f.write_str(", ")?;
                        }
                        write!(f, "{value}")?;
                    }
                    f.write_char('}')
                } else {
                    values.iter().try_for_each(|value| write!(f, "{value}"))
                }
            }
            Expr::Range {
                low,
                low_relation,
                field,
                high_relation,
                high,
            } => {
                write!(
                    f,
                    "{low} {} {field} {} {high}",
                    low_relation.symbol(),
                    high_relation.symbol()
                )
            }
            Expr::Function { name, arguments } => {
                write!(f, "{name}(")?;
                for (index, argument) in arguments.iter().enumerate() {
                    if index > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{argument}")?;
                }
                f.write_char(')')
            }
        }
    }
}

impl Display for Expr {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        self.write(f, None)
    }
}

impl Display for Source {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Source::Constant(constant) => write!(f, "{constant}"),
            Source::Field(field) => write!(f, "{field}"),
            Source::Call {
                name,
                arguments: None,
            } => f.write_str(name),
            Source::Call {
                name,
                arguments: Some(arguments),
            } => {
                write!(f, "{name}(")?;
                write_tokens(f, arguments)?;
                f.write_char(')')
            }
        }
    }
}

impl Display for Action {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Action::Assign {
                destination,
                source,
            } => write!(f, "{destination} = {source};"),
            Action::Exchange { left, right } => write!(f, "{left} <-> {right};"),
            Action::Decrement(field) => write!(f, "{field}--;"),
            Action::Keyword {
                name,
                arguments,
                block,
            } => {
                f.write_str(name)?;
                if let Some(arguments) = arguments {
                    f.write_char('(')?;
                    write_tokens(f, arguments)?;
                    f.write_char(')')?;
                }
                if let Some(block) = block {
                    f.write_str(" { ")?;
                    write!(f, "{}", Actions(block))?;
                    f.write_str(" }")?;
                }
                f.write_char(';')
            }
        }
    }
}

/// Display adapter for an action list (`a; b; c;`).
pub struct Actions<'a>(pub &'a [Action]);

impl Display for Actions<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        for (index, action) in self.0.iter().enumerate() {
            if index > 0 {
                f.write_char(' ')?;
            }
            write!(f, "{action}")?;
        }
        Ok(())
    }
}
