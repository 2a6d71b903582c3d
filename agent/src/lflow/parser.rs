//! Recursive-descent parsers for matches and actions (grammar of ovn-sb(5), `lib/expr.c` and
//! `lib/actions.c`). `&&` binds tighter than `||` (OVN forbids mixing them unparenthesised, so
//! this accepts a superset). Errors carry the byte offset where parsing failed.

use super::{
    ParseError,
    ast::{Action, Expr, FieldRef, Relation, Source, Value},
    lexer::{Constant, Token, tokenize},
};

/// Parses a match expression (`Logical_Flow.match`). An empty match is `1`.
pub fn parse_match(text: &str) -> Result<Expr, ParseError> {
    let mut parser = Parser::new(text)?;
    if parser.at_end() {
        return Ok(Expr::Bool(true));
    }
    let expr = parser.disjunction()?;
    parser.expect_end()?;
    Ok(expr)
}

/// Parses an action list (`Logical_Flow.actions`).
pub fn parse_actions(text: &str) -> Result<Vec<Action>, ParseError> {
    let mut parser = Parser::new(text)?;
    let actions = parser.actions(None)?;
    parser.expect_end()?;
    Ok(actions)
}

struct Parser {
    tokens: Vec<(usize, Token)>,
    position: usize,
    length: usize,
}

impl Parser {
    fn new(text: &str) -> Result<Self, ParseError> {
        Ok(Self {
            tokens: tokenize(text)?,
            position: 0,
            length: text.len(),
        })
    }

    fn at_end(&self) -> bool {
        self.position >= self.tokens.len()
    }

    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.position).map(|(_, t)| t)
    }

    fn peek_at(&self, ahead: usize) -> Option<&Token> {
        self.tokens.get(self.position + ahead).map(|(_, t)| t)
    }

    fn offset(&self) -> usize {
        self.tokens
            .get(self.position)
            .map_or(self.length, |(offset, _)| *offset)
    }

    fn error(&self, message: impl Into<String>) -> ParseError {
        ParseError::at(self.offset(), message)
    }

    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.position).map(|(_, t)| t.clone());
        self.position += 1;
        token
    }

    fn is_punct(&self, punct: &str) -> bool {
        matches!(self.peek(), Some(Token::Punct(p)) if *p == punct)
    }

    fn eat(&mut self, punct: &str) -> bool {
        if self.is_punct(punct) {
            self.position += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, punct: &str) -> Result<(), ParseError> {
        if self.eat(punct) {
            Ok(())
        } else {
            Err(self.error(format!("expected '{punct}'")))
        }
    }

    fn expect_end(&self) -> Result<(), ParseError> {
        if self.at_end() {
            Ok(())
        } else {
            Err(self.error("unexpected trailing input"))
        }
    }

    // ---- matches ----

    fn disjunction(&mut self) -> Result<Expr, ParseError> {
        let mut terms = vec![self.conjunction()?];
        while self.eat("||") {
            terms.push(self.conjunction()?);
        }
        Ok(if terms.len() == 1 {
            terms.remove(0)
        } else {
            Expr::Or(terms)
        })
    }

    fn conjunction(&mut self) -> Result<Expr, ParseError> {
        let mut terms = vec![self.unary()?];
        while self.eat("&&") {
            terms.push(self.unary()?);
        }
        Ok(if terms.len() == 1 {
            terms.remove(0)
        } else {
            Expr::And(terms)
        })
    }

    fn unary(&mut self) -> Result<Expr, ParseError> {
        if self.eat("!") {
            return Ok(Expr::Not(Box::new(self.unary()?)));
        }
        if self.eat("(") {
            let inner = self.disjunction()?;
            self.expect(")")?;
            return Ok(inner);
        }
        match self.peek().cloned() {
            Some(Token::Constant(low)) => {
                self.position += 1;
                let Some(low_relation) = self.relation() else {
                    return match low {
                        Constant::Integer {
                            value: 0,
                            mask: None,
                            ..
                        } => Ok(Expr::Bool(false)),
                        Constant::Integer {
                            value: 1,
                            mask: None,
                            ..
                        } => Ok(Expr::Bool(true)),
                        _ => Err(self.error(
                            "a constant here must start a range (constant <= field <= constant)",
                        )),
                    };
                };
                let field = self.field()?;
                let high_relation = self
                    .relation()
                    .ok_or_else(|| self.error("expected a relation in a range"))?;
                let high = self.constant()?;
                Ok(Expr::Range {
                    low,
                    low_relation,
                    field,
                    high_relation,
                    high,
                })
            }
            Some(Token::Id(name)) => {
                if self.peek_at(1) == Some(&Token::Punct("(")) {
                    self.position += 2;
                    let mut arguments = Vec::new();
                    if !self.eat(")") {
                        loop {
                            arguments.push(self.constant()?);
                            if self.eat(")") {
                                break;
                            }
                            self.expect(",")?;
                        }
                    }
                    return Ok(Expr::Function { name, arguments });
                }
                let field = self.field()?;
                let Some(relation) = self.relation() else {
                    return Ok(Expr::Field(field));
                };
                let (values, set) = self.values()?;
                Ok(Expr::Compare {
                    field,
                    relation,
                    values,
                    set,
                })
            }
            _ => Err(self.error("expected a field, constant, '!' or '('")),
        }
    }

    fn relation(&mut self) -> Option<Relation> {
        let Some(Token::Punct(symbol)) = self.peek() else {
            return None;
        };
        let relation = Relation::from_symbol(symbol)?;
        self.position += 1;
        Some(relation)
    }

    fn field(&mut self) -> Result<FieldRef, ParseError> {
        let Some(Token::Id(name)) = self.peek().cloned() else {
            return Err(self.error("expected a field name"));
        };
        self.position += 1;
        let slice = if self.eat("[") {
            let low = self.small_integer()?;
            let high = if self.eat("..") {
                Some(self.small_integer()?)
            } else {
                None
            };
            self.expect("]")?;
            Some((low, high))
        } else {
            None
        };
        Ok(FieldRef { name, slice })
    }

    fn small_integer(&mut self) -> Result<u32, ParseError> {
        match self.peek() {
            Some(Token::Constant(Constant::Integer {
                value, mask: None, ..
            })) => {
                let value =
                    u32::try_from(*value).map_err(|_| self.error("bit index out of range"))?;
                self.position += 1;
                Ok(value)
            }
            _ => Err(self.error("expected a bit index")),
        }
    }

    fn constant(&mut self) -> Result<Constant, ParseError> {
        match self.peek().cloned() {
            Some(Token::Constant(constant)) => {
                self.position += 1;
                Ok(constant)
            }
            _ => Err(self.error("expected a constant")),
        }
    }

    fn value(&mut self) -> Result<Value, ParseError> {
        let value = match self.peek().cloned() {
            Some(Token::Constant(constant)) => Value::Constant(constant),
            Some(Token::AddressSet(name)) => Value::AddressSet(name),
            Some(Token::PortGroup(name)) => Value::PortGroup(name),
            Some(Token::Template(name)) => Value::Template(name),
            _ => return Err(self.error("expected a value")),
        };
        self.position += 1;
        Ok(value)
    }

    /// One value, or a `{…}` set of values (commas optional between elements, as in OVN).
    fn values(&mut self) -> Result<(Vec<Value>, bool), ParseError> {
        if !self.eat("{") {
            return Ok((vec![self.value()?], false));
        }
        let mut values = Vec::new();
        while !self.eat("}") {
            if self.at_end() {
                return Err(self.error("unterminated '{' set"));
            }
            values.push(self.value()?);
            self.eat(",");
        }
        if values.is_empty() {
            return Err(self.error("empty set"));
        }
        Ok((values, true))
    }

    // ---- actions ----

    /// Actions until the end of input, or until `closing` (not consumed).
    fn actions(&mut self, closing: Option<&str>) -> Result<Vec<Action>, ParseError> {
        let mut actions = Vec::new();
        loop {
            if self.at_end() || closing.is_some_and(|c| self.is_punct(c)) {
                return Ok(actions);
            }
            if self.eat(";") {
                continue;
            }
            actions.push(self.action()?);
        }
    }

    fn action(&mut self) -> Result<Action, ParseError> {
        let Some(Token::Id(name)) = self.peek().cloned() else {
            return Err(self.error("expected an action"));
        };
        // Keyword action: `name;`, `name(...)`, `name { ... }`, `name(...) { ... }`.
        let after_field = self.field_length();
        let assignment_like = matches!(
            self.peek_at(after_field),
            Some(Token::Punct("=" | "<->" | "--"))
        );
        let action = if assignment_like {
            let destination = self.field()?;
            if self.eat("--") {
                Action::Decrement(destination)
            } else if self.eat("<->") {
                Action::Exchange {
                    left: destination,
                    right: self.field()?,
                }
            } else {
                self.expect("=")?;
                Action::Assign {
                    destination,
                    source: self.source()?,
                }
            }
        } else {
            self.position += 1;
            let arguments = if self.is_punct("(") {
                Some(self.raw_arguments()?)
            } else {
                None
            };
            let block = if self.eat("{") {
                let block = self.actions(Some("}"))?;
                self.expect("}")?;
                Some(block)
            } else {
                None
            };
            Action::Keyword {
                name,
                arguments,
                block,
            }
        };
        if !self.at_end() && !self.is_punct("}") {
            self.expect(";")?;
        }
        Ok(action)
    }

    /// Tokens a field reference at the current position would take (1, or 4/6 with a slice).
    fn field_length(&self) -> usize {
        if self.peek_at(1) != Some(&Token::Punct("[")) {
            return 1;
        }
        if self.peek_at(3) == Some(&Token::Punct("]")) {
            4
        } else {
            6
        }
    }

    fn source(&mut self) -> Result<Source, ParseError> {
        match self.peek().cloned() {
            Some(Token::Constant(constant)) => {
                self.position += 1;
                Ok(Source::Constant(constant))
            }
            Some(Token::Id(name)) => {
                if self.peek_at(1) == Some(&Token::Punct("(")) {
                    self.position += 1;
                    return Ok(Source::Call {
                        name,
                        arguments: Some(self.raw_arguments()?),
                    });
                }
                let field = self.field()?;
                if field.slice.is_none() && is_function_name(&field.name) {
                    return Ok(Source::Call {
                        name: field.name,
                        arguments: None,
                    });
                }
                Ok(Source::Field(field))
            }
            _ => Err(self.error("expected a constant, field or function after '='")),
        }
    }

    /// The tokens between a balanced `(` … `)` (the parentheses excluded).
    fn raw_arguments(&mut self) -> Result<Vec<Token>, ParseError> {
        self.expect("(")?;
        let mut depth = 1;
        let mut tokens = Vec::new();
        loop {
            let token = self.next().ok_or_else(|| self.error("unterminated '('"))?;
            match token {
                Token::Punct("(") => depth += 1,
                Token::Punct(")") => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(tokens);
                    }
                }
                _ => {}
            }
            tokens.push(token);
        }
    }
}

/// Actions used as assignment sources without parentheses.
fn is_function_name(name: &str) -> bool {
    matches!(name, "ct_snat_to_vip" | "ct_state_save")
}
