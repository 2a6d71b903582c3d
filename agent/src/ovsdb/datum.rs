//! OVSDB values (RFC 7047 §5.1): atoms and data (sets and maps) in canonical, sorted form, decoded
//! from (by `datum_decode`) and encoded to the JSON notation with the help of the column type,
//! plus the update2 `modify` diff semantics. Pure data; no I/O.

use std::cmp::Ordering;

use serde_json::{Value, json};
use thiserror::Error;
use uuid::Uuid;

use serde::de::DeserializeSeed;

use super::{
    datum_decode::DatumSeed,
    schema::{AtomType, ColumnType},
};

#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid OVSDB value: {0}")]
pub struct DatumError(pub String);

fn invalid(text: impl Into<String>) -> DatumError {
    DatumError(text.into())
}

/// One atomic value.
#[derive(Clone, Debug)]
pub enum Atom {
    Integer(i64),
    Real(f64),
    Boolean(bool),
    String(String),
    Uuid(Uuid),
}

impl Atom {
    fn rank(&self) -> u8 {
        match self {
            Atom::Integer(_) => 0,
            Atom::Real(_) => 1,
            Atom::Boolean(_) => 2,
            Atom::String(_) => 3,
            Atom::Uuid(_) => 4,
        }
    }

    /// The default atom of a type (RFC 7047 §5.1: 0, 0.0, false, "", the all-zero UUID).
    #[must_use]
    pub fn default_of(atom_type: AtomType) -> Self {
        match atom_type {
            AtomType::Integer => Atom::Integer(0),
            AtomType::Real => Atom::Real(0.0),
            AtomType::Boolean => Atom::Boolean(false),
            AtomType::String => Atom::String(String::new()),
            AtomType::Uuid => Atom::Uuid(Uuid::nil()),
        }
    }

    #[must_use]
    pub fn to_json(&self) -> Value {
        match self {
            Atom::Integer(i) => json!(i),
            Atom::Real(r) => json!(r),
            Atom::Boolean(b) => json!(b),
            Atom::String(s) => json!(s),
            Atom::Uuid(u) => json!(["uuid", u.to_string()]),
        }
    }

    #[must_use]
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Atom::String(s) => Some(s),
            _ => None,
        }
    }

    #[must_use]
    pub fn as_integer(&self) -> Option<i64> {
        match self {
            Atom::Integer(i) => Some(*i),
            _ => None,
        }
    }

    #[must_use]
    pub fn as_uuid(&self) -> Option<Uuid> {
        match self {
            Atom::Uuid(u) => Some(*u),
            _ => None,
        }
    }

    #[must_use]
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Atom::Boolean(b) => Some(*b),
            _ => None,
        }
    }
}

impl Ord for Atom {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Atom::Integer(a), Atom::Integer(b)) => a.cmp(b),
            (Atom::Real(a), Atom::Real(b)) => a.total_cmp(b),
            (Atom::Boolean(a), Atom::Boolean(b)) => a.cmp(b),
            (Atom::String(a), Atom::String(b)) => a.cmp(b),
            (Atom::Uuid(a), Atom::Uuid(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl PartialOrd for Atom {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Atom {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Atom {}

/// A column value: a set of atoms (a scalar is a set of one) or a map, kept sorted by key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Datum {
    Set(Vec<Atom>),
    Map(Vec<(Atom, Atom)>),
}

impl Datum {
    /// The default value of a column: the empty set/map when it may be empty, else one default atom.
    #[must_use]
    pub fn default_of(column: &ColumnType) -> Self {
        match (column.value, column.min) {
            (Some(_), _) => Datum::Map(Vec::new()),
            (None, 0) => Datum::Set(Vec::new()),
            (None, _) => Datum::Set(vec![Atom::default_of(column.key)]),
        }
    }

    /// Decodes the JSON notation of a value of type `column`.
    pub fn decode(json: &Value, column: &ColumnType) -> Result<Self, DatumError> {
        DatumSeed(column)
            .deserialize(json)
            .map_err(|e| invalid(format!("{json}: {e}")))
    }

    /// Decodes the JSON notation of a value of type `column` from its text, building no JSON
    /// tree of it.
    pub fn decode_text(text: &str, column: &ColumnType) -> Result<Self, DatumError> {
        let mut deserializer = serde_json::Deserializer::from_str(text);
        DatumSeed(column)
            .deserialize(&mut deserializer)
            .and_then(|datum| deserializer.end().map(|()| datum))
            .map_err(|e| invalid(e.to_string()))
    }

    /// The JSON notation (single-element sets as bare atoms, as ovsdb-server writes them).
    #[must_use]
    pub fn to_json(&self) -> Value {
        match self {
            Datum::Set(atoms) if atoms.len() == 1 => atoms[0].to_json(),
            Datum::Set(atoms) => {
                json!(["set", atoms.iter().map(Atom::to_json).collect::<Vec<_>>()])
            }
            Datum::Map(pairs) => json!([
                "map",
                pairs
                    .iter()
                    .map(|(k, v)| json!([k.to_json(), v.to_json()]))
                    .collect::<Vec<_>>()
            ]),
        }
    }

    /// Applies an update2 `modify` diff of a column of type `column` (ovsdb-server(7) §4.1.14):
    /// columns holding at most one value (scalars and optional values) take the new value; sets
    /// take the symmetric difference; maps remove pairs present with the same value, replace
    /// those with another value and add new keys.
    pub fn apply_diff(&mut self, diff: &Value, column: &ColumnType) -> Result<(), DatumError> {
        let diff = Datum::decode(diff, column)?;
        if !column.is_composite() {
            *self = diff;
            return Ok(());
        }
        match (self, diff) {
            (Datum::Set(atoms), Datum::Set(changes)) => {
                for atom in changes {
                    match atoms.binary_search(&atom) {
                        Ok(index) => {
                            atoms.remove(index);
                        }
                        Err(index) => atoms.insert(index, atom),
                    }
                }
            }
            (Datum::Map(pairs), Datum::Map(changes)) => {
                for (key, value) in changes {
                    match pairs.binary_search_by(|(k, _)| k.cmp(&key)) {
                        Ok(index) if pairs[index].1 == value => {
                            pairs.remove(index);
                        }
                        Ok(index) => pairs[index].1 = value,
                        Err(index) => pairs.insert(index, (key, value)),
                    }
                }
            }
            _ => return Err(invalid("diff kind does not match the column")),
        }
        Ok(())
    }

    /// The atoms of a set (empty for a map).
    #[must_use]
    pub fn atoms(&self) -> &[Atom] {
        match self {
            Datum::Set(atoms) => atoms,
            Datum::Map(_) => &[],
        }
    }

    /// The pairs of a map (empty for a set).
    #[must_use]
    pub fn pairs(&self) -> &[(Atom, Atom)] {
        match self {
            Datum::Map(pairs) => pairs,
            Datum::Set(_) => &[],
        }
    }

    /// The only atom of a one-element set.
    #[must_use]
    pub fn single(&self) -> Option<&Atom> {
        match self.atoms() {
            [atom] => Some(atom),
            _ => None,
        }
    }

    /// Value of string key `key` in a map.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&Atom> {
        self.pairs()
            .iter()
            .find(|(k, _)| k.as_str() == Some(key))
            .map(|(_, v)| v)
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        match self {
            Datum::Set(atoms) => atoms.is_empty(),
            Datum::Map(pairs) => pairs.is_empty(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ovsdb::schema::column_of as column;

    const U1: &str = "6f1d0b39-8c5e-4b0f-9d3a-1f0c2a3b4c5d";
    const U2: &str = "0a1d0b39-8c5e-4b0f-9d3a-1f0c2a3b4c5d";

    #[test]
    fn decode_and_encode_round_trip() {
        let set = column(AtomType::String, None, 0, u64::MAX);
        let value = Datum::decode(&json!(["set", ["b", "a", "b"]]), &set).unwrap();
        assert_eq!(
            value,
            Datum::Set(vec![Atom::String("a".into()), Atom::String("b".into())])
        );
        assert_eq!(value.to_json(), json!(["set", ["a", "b"]]));
        let optional_uuid = column(AtomType::Uuid, None, 0, 1);
        let one = Datum::decode(&json!(["uuid", U1]), &optional_uuid).unwrap();
        assert_eq!(one.to_json(), json!(["uuid", U1]));
        assert!(
            Datum::decode(&json!(["set", []]), &optional_uuid)
                .unwrap()
                .is_empty()
        );
        let map = column(AtomType::String, Some(AtomType::String), 0, u64::MAX);
        let value = Datum::decode(&json!(["map", [["k2", "v2"], ["k1", "v1"]]]), &map).unwrap();
        assert_eq!(value.get("k1").and_then(Atom::as_str), Some("v1"));
        assert_eq!(
            value.to_json(),
            json!(["map", [["k1", "v1"], ["k2", "v2"]]])
        );
    }

    #[test]
    fn wrong_types_are_errors_not_panics() {
        let integer = column(AtomType::Integer, None, 1, 1);
        assert!(Datum::decode(&json!("7"), &integer).is_err());
        assert!(
            Datum::decode(
                &json!(["uuid", "nope"]),
                &column(AtomType::Uuid, None, 1, 1)
            )
            .is_err()
        );
        let map = column(AtomType::String, Some(AtomType::String), 0, u64::MAX);
        assert!(Datum::decode(&json!(["set", []]), &map).is_err());
        assert!(Datum::decode(&json!(["map", [["k"]]]), &map).is_err());
        assert!(Datum::decode(&json!({"x": 1}), &column(AtomType::String, None, 0, 9)).is_err());
    }

    #[test]
    fn diffs_follow_update2_semantics() {
        let scalar = column(AtomType::Integer, None, 1, 1);
        let mut value = Datum::decode(&json!(5), &scalar).unwrap();
        value.apply_diff(&json!(7), &scalar).unwrap();
        assert_eq!(value.to_json(), json!(7));

        // An optional reference (at most one value) arrives as its new value, also when cleared.
        let optional = column(AtomType::Uuid, None, 0, 1);
        let mut chassis = Datum::decode(&json!(["uuid", U1]), &optional).unwrap();
        chassis.apply_diff(&json!(["uuid", U2]), &optional).unwrap();
        assert_eq!(chassis.to_json(), json!(["uuid", U2]));
        chassis.apply_diff(&json!(["set", []]), &optional).unwrap();
        assert!(chassis.is_empty());

        // A real set takes the symmetric difference.
        let set = column(AtomType::Uuid, None, 0, u64::MAX);
        let mut members = Datum::decode(&json!(["set", [["uuid", U1]]]), &set).unwrap();
        members
            .apply_diff(&json!(["set", [["uuid", U1], ["uuid", U2]]]), &set)
            .unwrap();
        assert_eq!(members.to_json(), json!(["uuid", U2]));

        let map = column(AtomType::String, Some(AtomType::String), 0, u64::MAX);
        let mut ids = Datum::decode(
            &json!(["map", [["keep", "1"], ["drop", "2"], ["change", "3"]]]),
            &map,
        )
        .unwrap();
        ids.apply_diff(
            &json!(["map", [["drop", "2"], ["change", "4"], ["new", "5"]]]),
            &map,
        )
        .unwrap();
        assert_eq!(
            ids.to_json(),
            json!(["map", [["change", "4"], ["keep", "1"], ["new", "5"]]])
        );
    }

    #[test]
    fn defaults_match_the_rfc() {
        assert_eq!(
            Datum::default_of(&column(AtomType::Integer, None, 1, 1)).to_json(),
            json!(0)
        );
        assert!(Datum::default_of(&column(AtomType::String, None, 0, 1)).is_empty());
        assert!(
            Datum::default_of(&column(AtomType::String, Some(AtomType::Integer), 0, 9)).is_empty()
        );
    }

    /// Every form of every column kind, decoded from text and from a tree: the same value or
    /// both refused.
    #[test]
    fn text_and_tree_decode_alike() {
        let integer = column(AtomType::Integer, None, 1, 1);
        let real = column(AtomType::Real, None, 1, 1);
        let boolean = column(AtomType::Boolean, None, 1, 1);
        let string_set = column(AtomType::String, None, 0, u64::MAX);
        let optional_uuid = column(AtomType::Uuid, None, 0, 1);
        let map = column(AtomType::String, Some(AtomType::Integer), 0, u64::MAX);
        let uuid_map = column(AtomType::Integer, Some(AtomType::Uuid), 0, u64::MAX);
        let values = [
            json!(7),
            json!(-7),
            json!(u64::MAX),
            json!(1.5),
            json!(true),
            json!("s\"\\é\u{1}"),
            json!(["uuid", U1]),
            json!(["uuid", "nope"]),
            json!(["uuid", U1, U2]),
            json!(["uuid"]),
            json!(["set", []]),
            json!(["set", ["b", "a", "b"]]),
            json!(["set", [["uuid", U2], ["uuid", U1], ["uuid", U2]]]),
            json!(["set", [1, "a"]]),
            json!(["set", ["a"], "extra"]),
            json!(["map", [["k2", 2], ["k1", 1], ["k2", 3]]]),
            json!(["map", [[1, ["uuid", U1]]]]),
            json!(["map", [["k"]]]),
            json!(["map", [["k", 1, 2]]]),
            json!(["map", {}]),
            json!(["named-uuid", "x"]),
            json!([]),
            json!([1, 2]),
            json!({"x": 1}),
            json!(null),
        ];
        let columns = [
            &integer,
            &real,
            &boolean,
            &string_set,
            &optional_uuid,
            &map,
            &uuid_map,
        ];
        let mut decoded = 0;
        for value in &values {
            for column in columns {
                let from_tree = Datum::decode(value, column).ok();
                let from_text = Datum::decode_text(&value.to_string(), column).ok();
                assert_eq!(from_tree, from_text, "{value} as {column:?}");
                decoded += usize::from(from_text.is_some());
            }
        }
        assert_eq!(decoded, 18, "values some column takes");
    }

    #[test]
    fn values_come_out_canonical() {
        let set = column(AtomType::Uuid, None, 0, u64::MAX);
        let text = format!(r#"["set", [["uuid", "{U1}"], ["uuid", "{U2}"], ["uuid", "{U1}"]]]"#);
        assert_eq!(
            Datum::decode_text(&text, &set).unwrap(),
            Datum::Set(vec![
                Atom::Uuid(U2.parse().unwrap()),
                Atom::Uuid(U1.parse().unwrap())
            ])
        );
        let map = column(AtomType::String, Some(AtomType::String), 0, u64::MAX);
        let value = Datum::decode_text(r#"["map", [["b", "2"], ["a", "1"]]]"#, &map).unwrap();
        assert_eq!(value.to_json(), json!(["map", [["a", "1"], ["b", "2"]]]));
        let real = column(AtomType::Real, None, 1, 1);
        assert_eq!(
            Datum::decode_text("3", &real).unwrap(),
            Datum::Set(vec![Atom::Real(3.0)])
        );
        let integer = column(AtomType::Integer, None, 1, 1);
        let error = Datum::decode_text("\"7\"", &integer).unwrap_err();
        assert!(error.0.contains("\"7\" is not a Integer"), "{error}");
        assert!(
            Datum::decode_text("7 8", &integer).is_err(),
            "trailing text"
        );
    }
}
