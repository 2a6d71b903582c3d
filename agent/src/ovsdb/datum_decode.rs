//! Decoding OVSDB's JSON notation of a value (RFC 7047 §5.1: an atom, `["uuid", …]`,
//! `["set", […]]`, `["map", [[k, v], …]]`) into a [`Datum`] of a given column type, through serde:
//! the same decoder reads a received message's text (a snapshot's rows, without a JSON tree of
//! them; see `raw`) and a [`serde_json::Value`] (update2 diffs, tests). Pure; no I/O.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, SeqAccess, Visitor};
use uuid::Uuid;

use super::{
    datum::{Atom, Datum},
    schema::{AtomType, ColumnType},
};

/// Decodes a [`Datum`] of the column type it holds.
pub(super) struct DatumSeed<'a>(pub &'a ColumnType);

impl<'de> DeserializeSeed<'de> for DatumSeed<'_> {
    type Value = Datum;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Datum, D::Error> {
        deserializer.deserialize_any(DatumVisitor(self.0))
    }
}

struct DatumVisitor<'a>(&'a ColumnType);

impl DatumVisitor<'_> {
    /// A bare atom: a set of one (a map is never bare).
    fn single<E: de::Error>(&self, atom: Result<Atom, E>) -> Result<Datum, E> {
        if self.0.value.is_some() {
            return Err(E::custom("a bare atom is not a map"));
        }
        Ok(Datum::Set(vec![atom?]))
    }
}

impl<'de> Visitor<'de> for DatumVisitor<'_> {
    type Value = Datum;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.value {
            Some(_) => f.write_str("an OVSDB map"),
            None => write!(f, "an OVSDB {:?} or set of them", self.0.key),
        }
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Datum, E> {
        self.single(AtomVisitor(self.0.key).visit_bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Datum, E> {
        self.single(AtomVisitor(self.0.key).visit_i64(value))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Datum, E> {
        self.single(AtomVisitor(self.0.key).visit_u64(value))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Datum, E> {
        self.single(AtomVisitor(self.0.key).visit_f64(value))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Datum, E> {
        self.single(AtomVisitor(self.0.key).visit_str(value))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Datum, E> {
        self.single(AtomVisitor(self.0.key).visit_string(value))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Datum, A::Error> {
        let column = self.0;
        let tag: Tag = seq
            .next_element()?
            .ok_or_else(|| de::Error::custom("an empty array is not an OVSDB value"))?;
        let datum = match (tag, column.value) {
            (Tag::Map, Some(value_type)) => {
                let mut pairs = seq
                    .next_element_seed(Many(PairSeed(column.key, value_type)))?
                    .ok_or_else(|| de::Error::custom("a map without its pairs"))?;
                pairs.sort_by(|a, b| a.0.cmp(&b.0));
                pairs.dedup_by(|a, b| a.0 == b.0);
                Datum::Map(pairs)
            }
            (Tag::Set, None) => {
                let mut atoms = seq
                    .next_element_seed(Many(AtomSeed(column.key)))?
                    .ok_or_else(|| de::Error::custom("a set without its elements"))?;
                atoms.sort();
                atoms.dedup();
                Datum::Set(atoms)
            }
            (Tag::Uuid, None) if column.key == AtomType::Uuid => {
                let uuid = seq
                    .next_element_seed(UuidSeed)?
                    .ok_or_else(|| de::Error::custom("a uuid without its value"))?;
                Datum::Set(vec![Atom::Uuid(uuid)])
            }
            (tag, _) => {
                return Err(de::Error::custom(format!(
                    "a {:?} array is not a value of type {column:?}",
                    tag.name()
                )));
            }
        };
        if seq.next_element::<IgnoredAny>()?.is_some() {
            return Err(de::Error::custom("trailing elements after an OVSDB value"));
        }
        Ok(datum)
    }
}

/// The first element of an array value.
enum Tag {
    Map,
    Set,
    Uuid,
    Other(String),
}

impl Tag {
    fn name(&self) -> &str {
        match self {
            Tag::Map => "map",
            Tag::Set => "set",
            Tag::Uuid => "uuid",
            Tag::Other(other) => other,
        }
    }
}

impl<'de> de::Deserialize<'de> for Tag {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TagVisitor;
        impl Visitor<'_> for TagVisitor {
            type Value = Tag;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"map\", \"set\" or \"uuid\"")
            }

            fn visit_str<E: de::Error>(self, tag: &str) -> Result<Tag, E> {
                Ok(match tag {
                    "map" => Tag::Map,
                    "set" => Tag::Set,
                    "uuid" => Tag::Uuid,
                    other => Tag::Other(other.to_string()),
                })
            }
        }
        deserializer.deserialize_str(TagVisitor)
    }
}

/// An array of what `S` decodes.
struct Many<S>(S);

impl<'de, S: DeserializeSeed<'de> + Copy> DeserializeSeed<'de> for Many<S> {
    type Value = Vec<S::Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de, S: DeserializeSeed<'de> + Copy> Visitor<'de> for Many<S> {
    type Value = Vec<S::Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(item) = seq.next_element_seed(self.0)? {
            items.push(item);
        }
        Ok(items)
    }
}

/// One `[key, value]` pair of a map.
#[derive(Clone, Copy)]
struct PairSeed(AtomType, AtomType);

impl<'de> DeserializeSeed<'de> for PairSeed {
    type Value = (Atom, Atom);

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for PairSeed {
    type Value = (Atom, Atom);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map pair [key, value]")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let missing = || de::Error::custom("a map pair needs a key and a value");
        let key = seq
            .next_element_seed(AtomSeed(self.0))?
            .ok_or_else(missing)?;
        let value = seq
            .next_element_seed(AtomSeed(self.1))?
            .ok_or_else(missing)?;
        if seq.next_element::<IgnoredAny>()?.is_some() {
            return Err(missing());
        }
        Ok((key, value))
    }
}

/// One atom of a type.
#[derive(Clone, Copy)]
struct AtomSeed(AtomType);

impl<'de> DeserializeSeed<'de> for AtomSeed {
    type Value = Atom;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Atom, D::Error> {
        deserializer.deserialize_any(AtomVisitor(self.0))
    }
}

struct AtomVisitor(AtomType);

impl AtomVisitor {
    fn wrong<E: de::Error>(&self, what: impl fmt::Display) -> E {
        E::custom(format!("{what} is not a {:?}", self.0))
    }
}

impl<'de> Visitor<'de> for AtomVisitor {
    type Value = Atom;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an OVSDB {:?}", self.0)
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Atom, E> {
        match self.0 {
            AtomType::Boolean => Ok(Atom::Boolean(value)),
            _ => Err(self.wrong(value)),
        }
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Atom, E> {
        match self.0 {
            AtomType::Integer => Ok(Atom::Integer(value)),
            #[allow(clippy::cast_precision_loss)]
            AtomType::Real => Ok(Atom::Real(value as f64)),
            _ => Err(self.wrong(value)),
        }
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Atom, E> {
        match (self.0, i64::try_from(value)) {
            (AtomType::Integer, Ok(value)) => Ok(Atom::Integer(value)),
            #[allow(clippy::cast_precision_loss)]
            (AtomType::Real, _) => Ok(Atom::Real(value as f64)),
            _ => Err(self.wrong(value)),
        }
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Atom, E> {
        match self.0 {
            AtomType::Real => Ok(Atom::Real(value)),
            _ => Err(self.wrong(value)),
        }
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Atom, E> {
        match self.0 {
            AtomType::String => Ok(Atom::String(value.to_string())),
            _ => Err(self.wrong(format_args!("{value:?}"))),
        }
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Atom, E> {
        match self.0 {
            AtomType::String => Ok(Atom::String(value)),
            _ => Err(self.wrong(format_args!("{value:?}"))),
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Atom, A::Error> {
        if self.0 != AtomType::Uuid {
            return Err(self.wrong("an array"));
        }
        let tag: Tag = seq
            .next_element()?
            .ok_or_else(|| self.wrong::<A::Error>("an empty array"))?;
        if !matches!(tag, Tag::Uuid) {
            return Err(self.wrong(format_args!("a {:?} array", tag.name())));
        }
        let uuid = seq
            .next_element_seed(UuidSeed)?
            .ok_or_else(|| de::Error::custom("a uuid without its value"))?;
        if seq.next_element::<IgnoredAny>()?.is_some() {
            return Err(de::Error::custom("trailing elements after a uuid"));
        }
        Ok(Atom::Uuid(uuid))
    }
}

/// The text of a UUID.
#[derive(Clone, Copy)]
struct UuidSeed;

impl<'de> DeserializeSeed<'de> for UuidSeed {
    type Value = Uuid;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Uuid, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for UuidSeed {
    type Value = Uuid;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a UUID")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Uuid, E> {
        Uuid::parse_str(text).map_err(|e| E::custom(format!("uuid {text:?}: {e}")))
    }
}
