//! A replicated row's values packed into one byte buffer ([`Row`]), and views that read them in
//! place ([`DatumRef`], [`AtomRef`]). Owns the packed format; only the replica packs. Pure data;
//! no I/O.
//!
//! The replica holds every monitored row of the Southbound, ~5 rows per pod. As a `Vec<Datum>` a
//! row took a block for its values (32 bytes a column), a block for each column's one-element
//! set, a block for each string and 48 bytes for each pair of a map: about 820 bytes a row at
//! 10,000 pods (heaptrack), mostly allocator overhead around short strings. Packed, a row is one
//! block of about the size of its text's values.
//!
//! The format: for each column of the table's layout, in order, the value's length in bytes and
//! then the value: its number of elements, then each atom (for a map, each key and then its
//! value), written as the column's type says: an integer zigzag-encoded as a varint, a real as 8
//! bytes (little-endian), a boolean as one byte, a string as its length and UTF-8 bytes, a UUID as
//! its 16 bytes. Lengths and counts are LEB128 varints. The column types are not written: a row is
//! read with the layout it was packed with. Written here, not by a serialisation crate: the
//! format is these few lines, and the views read a column without decoding the others.
//!
//! What is packed is canonical (a [`Datum`] holds sets and maps sorted), so two rows are equal
//! exactly when their bytes are.

use std::fmt;

use uuid::Uuid;

use super::{
    datum::{Atom, Datum},
    schema::{AtomType, ColumnType},
};

/// One row's values, packed in its table layout's column order.
#[derive(Clone, PartialEq, Eq)]
pub struct Row(Box<[u8]>);

impl fmt::Debug for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Row({} bytes)", self.0.len())
    }
}

impl Row {
    /// Packs one value per column of `columns` (`None`: the column's default), using `scratch`
    /// as the working buffer so the row's block is allocated once, at its size. Each value is
    /// written after a one-byte length, widened in place when it is 128 bytes or more.
    pub(super) fn pack(
        columns: &[(String, ColumnType)],
        values: &[Option<Datum>],
        scratch: &mut Vec<u8>,
    ) -> Row {
        scratch.clear();
        for (position, (_, column)) in columns.iter().enumerate() {
            let length_at = scratch.len();
            scratch.push(0);
            match values.get(position).and_then(Option::as_ref) {
                Some(datum) => put_datum(scratch, datum, column),
                None => put_default(scratch, column),
            }
            let (length, width) = varint(scratch.len() as u64 - length_at as u64 - 1);
            match &length[..width] {
                [byte] => scratch[length_at] = *byte,
                wide => drop(scratch.splice(length_at..=length_at, wide.iter().copied())),
            }
        }
        Row(Box::from(scratch.as_slice()))
    }

    /// The packed bytes of the column at `position` (`None` past the last column).
    fn column_bytes(&self, position: usize) -> Option<&[u8]> {
        let mut rest: &[u8] = &self.0;
        for _ in 0..position {
            let length = usize::try_from(take_varint(&mut rest)?).ok()?;
            take(&mut rest, length)?;
        }
        let length = usize::try_from(take_varint(&mut rest)?).ok()?;
        take(&mut rest, length)
    }

    /// A view of the value at `position`, read as `column`.
    #[must_use]
    pub fn datum<'a>(&'a self, position: usize, column: &'a ColumnType) -> Option<DatumRef<'a>> {
        let mut bytes = self.column_bytes(position)?;
        let count = usize::try_from(take_varint(&mut bytes)?).ok()?;
        Some(DatumRef {
            column,
            count,
            elements: bytes,
        })
    }

    /// Every value, decoded (the column's default where a value cannot be read, which a row this
    /// module packed never has).
    #[must_use]
    pub fn values(&self, columns: &[(String, ColumnType)]) -> Vec<Datum> {
        columns
            .iter()
            .enumerate()
            .map(|(position, (_, column))| {
                self.datum(position, column)
                    .map_or_else(|| Datum::default_of(column), |datum| datum.to_datum())
            })
            .collect()
    }

    /// The packed size in bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A packed value, read in place.
#[derive(Clone, Copy)]
pub struct DatumRef<'a> {
    column: &'a ColumnType,
    count: usize,
    elements: &'a [u8],
}

impl fmt::Debug for DatumRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.to_datum().fmt(f)
    }
}

impl<'a> DatumRef<'a> {
    /// The atoms of a set (none for a map).
    #[must_use]
    pub fn atoms(&self) -> Atoms<'a> {
        Atoms {
            atom_type: self.column.key,
            remaining: if self.column.is_map() { 0 } else { self.count },
            bytes: self.elements,
        }
    }

    /// The pairs of a map (none for a set).
    pub fn pairs(&self) -> impl Iterator<Item = (AtomRef<'a>, AtomRef<'a>)> + use<'a> {
        let key_type = self.column.key;
        let value_type = self.column.value.unwrap_or(key_type);
        let mut bytes = self.elements;
        let remaining = if self.column.is_map() { self.count } else { 0 };
        (0..remaining).map_while(move |_| {
            let key = take_atom(&mut bytes, key_type)?;
            let value = take_atom(&mut bytes, value_type)?;
            Some((key, value))
        })
    }

    /// The only atom of a one-element set.
    #[must_use]
    pub fn single(&self) -> Option<AtomRef<'a>> {
        if self.count == 1 {
            self.atoms().next()
        } else {
            None
        }
    }

    /// Value of string key `key` in a map.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<AtomRef<'a>> {
        self.pairs()
            .find(|(k, _)| k.as_str() == Some(key))
            .map(|(_, v)| v)
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The value as an owned [`Datum`].
    #[must_use]
    pub fn to_datum(&self) -> Datum {
        if self.column.is_map() {
            Datum::Map(
                self.pairs()
                    .map(|(k, v)| (k.to_atom(), v.to_atom()))
                    .collect(),
            )
        } else {
            Datum::Set(self.atoms().map(AtomRef::to_atom).collect())
        }
    }
}

/// The atoms of a packed set.
pub struct Atoms<'a> {
    atom_type: AtomType,
    remaining: usize,
    bytes: &'a [u8],
}

impl<'a> Iterator for Atoms<'a> {
    type Item = AtomRef<'a>;

    fn next(&mut self) -> Option<AtomRef<'a>> {
        self.remaining = self.remaining.checked_sub(1)?;
        take_atom(&mut self.bytes, self.atom_type)
    }
}

/// One packed atom, its string borrowed from the row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AtomRef<'a> {
    Integer(i64),
    Real(f64),
    Boolean(bool),
    String(&'a str),
    Uuid(Uuid),
}

impl<'a> AtomRef<'a> {
    #[must_use]
    pub fn as_str(self) -> Option<&'a str> {
        match self {
            AtomRef::String(s) => Some(s),
            _ => None,
        }
    }

    #[must_use]
    pub fn as_integer(self) -> Option<i64> {
        match self {
            AtomRef::Integer(i) => Some(i),
            _ => None,
        }
    }

    #[must_use]
    pub fn as_uuid(self) -> Option<Uuid> {
        match self {
            AtomRef::Uuid(u) => Some(u),
            _ => None,
        }
    }

    #[must_use]
    pub fn as_bool(self) -> Option<bool> {
        match self {
            AtomRef::Boolean(b) => Some(b),
            _ => None,
        }
    }

    #[must_use]
    pub fn to_atom(self) -> Atom {
        match self {
            AtomRef::Integer(i) => Atom::Integer(i),
            AtomRef::Real(r) => Atom::Real(r),
            AtomRef::Boolean(b) => Atom::Boolean(b),
            AtomRef::String(s) => Atom::String(s.to_string()),
            AtomRef::Uuid(u) => Atom::Uuid(u),
        }
    }
}

fn put_datum(out: &mut Vec<u8>, datum: &Datum, column: &ColumnType) {
    let value_type = column.value.unwrap_or(column.key);
    match datum {
        Datum::Set(atoms) => {
            put_varint(out, atoms.len() as u64);
            for atom in atoms {
                put_atom(out, atom, column.key);
            }
        }
        Datum::Map(pairs) => {
            put_varint(out, pairs.len() as u64);
            for (key, value) in pairs {
                put_atom(out, key, column.key);
                put_atom(out, value, value_type);
            }
        }
    }
}

/// The column's default value (RFC 7047 §5.1): empty, or one default atom.
fn put_default(out: &mut Vec<u8>, column: &ColumnType) {
    if column.is_map() || column.min == 0 {
        put_varint(out, 0);
    } else {
        put_varint(out, 1);
        put_atom(out, &Atom::default_of(column.key), column.key);
    }
}

/// Writes `atom` as `atom_type`. `Datum`'s decoder types every atom by its column, so they
/// always agree; were they not to, the type's default is written, so the row stays readable.
fn put_atom(out: &mut Vec<u8>, atom: &Atom, atom_type: AtomType) {
    match (atom, atom_type) {
        (Atom::Integer(i), AtomType::Integer) => put_varint(out, zigzag(*i)),
        (Atom::Real(r), AtomType::Real) => out.extend_from_slice(&r.to_le_bytes()),
        (Atom::Boolean(b), AtomType::Boolean) => out.push(u8::from(*b)),
        (Atom::String(s), AtomType::String) => {
            put_varint(out, s.len() as u64);
            out.extend_from_slice(s.as_bytes());
        }
        (Atom::Uuid(u), AtomType::Uuid) => out.extend_from_slice(u.as_bytes()),
        _ => put_atom(out, &Atom::default_of(atom_type), atom_type),
    }
}

fn take_atom<'a>(bytes: &mut &'a [u8], atom_type: AtomType) -> Option<AtomRef<'a>> {
    Some(match atom_type {
        AtomType::Integer => AtomRef::Integer(unzigzag(take_varint(bytes)?)),
        AtomType::Real => AtomRef::Real(f64::from_le_bytes(take(bytes, 8)?.try_into().ok()?)),
        AtomType::Boolean => AtomRef::Boolean(take(bytes, 1)?[0] != 0),
        AtomType::String => {
            let length = usize::try_from(take_varint(bytes)?).ok()?;
            AtomRef::String(std::str::from_utf8(take(bytes, length)?).ok()?)
        }
        AtomType::Uuid => AtomRef::Uuid(Uuid::from_slice(take(bytes, 16)?).ok()?),
    })
}

fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

fn put_varint(out: &mut Vec<u8>, value: u64) {
    let (bytes, width) = varint(value);
    out.extend_from_slice(&bytes[..width]);
}

/// `value` as a varint: its bytes and how many of them there are.
fn varint(mut value: u64) -> ([u8; 10], usize) {
    let mut bytes = [0; 10];
    let mut width = 0;
    while value >= 0x80 {
        bytes[width] = (value & 0x7f) as u8 | 0x80;
        value >>= 7;
        width += 1;
    }
    bytes[width] = value as u8;
    (bytes, width + 1)
}

/// Reads a varint off the front of `bytes`.
fn take_varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = bytes.split_first()?;
        *bytes = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(value);
        }
    }
    None
}

/// Takes `length` bytes off the front of `bytes`.
fn take<'a>(bytes: &mut &'a [u8], length: usize) -> Option<&'a [u8]> {
    if bytes.len() < length {
        return None;
    }
    let (head, rest) = bytes.split_at(length);
    *bytes = rest;
    Some(head)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::ovsdb::schema::column_of as column;

    fn columns() -> Vec<(String, ColumnType)> {
        [
            ("integer", column(AtomType::Integer, None, 1, 1)),
            ("real", column(AtomType::Real, None, 1, 1)),
            ("boolean", column(AtomType::Boolean, None, 1, 1)),
            ("string", column(AtomType::String, None, 1, 1)),
            ("optional_uuid", column(AtomType::Uuid, None, 0, 1)),
            ("strings", column(AtomType::String, None, 0, u64::MAX)),
            (
                "map",
                column(AtomType::String, Some(AtomType::Integer), 0, u64::MAX),
            ),
        ]
        .into_iter()
        .map(|(name, column)| (name.to_string(), column))
        .collect()
    }

    fn pack_all(columns: &[(String, ColumnType)], values: &[Datum], scratch: &mut Vec<u8>) -> Row {
        let owned: Vec<Option<Datum>> = values.iter().cloned().map(Some).collect();
        Row::pack(columns, &owned, scratch)
    }

    fn decode(columns: &[(String, ColumnType)], values: &[serde_json::Value]) -> Vec<Datum> {
        columns
            .iter()
            .zip(values)
            .map(|((_, column), value)| Datum::decode(value, column).unwrap())
            .collect()
    }

    #[test]
    fn every_value_reads_back_as_packed() {
        let columns = columns();
        let long = "x".repeat(300);
        let rows = [
            vec![
                json!(i64::MIN),
                json!(-0.5),
                json!(true),
                json!("é\"\u{1}"),
                json!(["uuid", "6f1d0b39-8c5e-4b0f-9d3a-1f0c2a3b4c5d"]),
                json!(["set", ["b", "", "a"]]),
                json!(["map", [["k", i64::MAX], ["", -1]]]),
            ],
            vec![
                json!(0),
                json!(1e300),
                json!(false),
                json!(long),
                json!(["set", []]),
                json!("only"),
                json!(["map", []]),
            ],
        ];
        let mut scratch = Vec::new();
        for values in rows {
            let datums = decode(&columns, &values);
            let row = pack_all(&columns, &datums, &mut scratch);
            assert_eq!(row.values(&columns), datums);
            for (position, ((_, column), datum)) in columns.iter().zip(&datums).enumerate() {
                let view = row.datum(position, column).unwrap();
                assert_eq!(view.is_empty(), datum.is_empty());
                assert_eq!(
                    view.atoms().map(AtomRef::to_atom).collect::<Vec<_>>(),
                    datum.atoms()
                );
                assert_eq!(
                    view.pairs()
                        .map(|(k, v)| (k.to_atom(), v.to_atom()))
                        .collect::<Vec<_>>(),
                    datum.pairs()
                );
                assert_eq!(view.single().map(AtomRef::to_atom).as_ref(), datum.single());
            }
            assert!(row.datum(columns.len(), &columns[0].1).is_none());
        }
    }

    #[test]
    fn absent_values_read_as_the_column_defaults() {
        let columns = columns();
        let row = Row::pack(&columns, &[], &mut Vec::new());
        let defaults: Vec<Datum> = columns
            .iter()
            .map(|(_, column)| Datum::default_of(column))
            .collect();
        assert_eq!(row.values(&columns), defaults);
        assert_eq!(
            row.datum(3, &columns[3].1).unwrap().single(),
            Some(AtomRef::String(""))
        );
        assert!(row.datum(4, &columns[4].1).unwrap().single().is_none());
    }

    #[test]
    fn maps_are_read_by_key() {
        let columns = vec![(
            "ids".to_string(),
            column(AtomType::String, Some(AtomType::String), 0, u64::MAX),
        )];
        let ids = Datum::decode(
            &json!([
                "map",
                [["stage-name", "ls_in_l2_lkup"], ["source", "northd.c:1"]]
            ]),
            &columns[0].1,
        )
        .unwrap();
        let row = Row::pack(&columns, &[Some(ids)], &mut Vec::new());
        let view = row.datum(0, &columns[0].1).unwrap();
        assert_eq!(
            view.get("stage-name"),
            Some(AtomRef::String("ls_in_l2_lkup"))
        );
        assert_eq!(
            view.get("source").and_then(AtomRef::as_str),
            Some("northd.c:1")
        );
        assert_eq!(view.get("stage-hint"), None);
        assert_eq!(view.atoms().count(), 0, "a map has no set atoms");
        assert_eq!(view.single(), None);
    }

    #[test]
    fn equal_values_pack_to_equal_rows() {
        let columns = columns();
        // The same set and map, written in another order and with a repeated element.
        let with = |set: serde_json::Value, map: serde_json::Value| {
            let values = [
                json!(1),
                json!(0.0),
                json!(false),
                json!("s"),
                json!(["set", []]),
            ];
            decode(&columns, &[&values[..], &[set, map]].concat())
        };
        let a = with(
            json!(["set", ["b", "a"]]),
            json!(["map", [["y", 2], ["x", 1]]]),
        );
        let b = with(
            json!(["set", ["a", "b", "a"]]),
            json!(["map", [["x", 1], ["y", 2]]]),
        );
        let pack = |values: &[Datum]| pack_all(&columns, values, &mut Vec::new());
        assert_eq!(pack(&a), pack(&b));
        let mut c = a.clone();
        c[0] = Datum::Set(vec![Atom::Integer(2)]);
        assert_ne!(pack(&a), pack(&c));
    }

    #[test]
    fn varints_and_zigzag_round_trip() {
        for value in [0, 1, -1, 63, -64, 64, 300, i64::MAX, i64::MIN] {
            let mut out = Vec::new();
            put_varint(&mut out, zigzag(value));
            let mut bytes = out.as_slice();
            assert_eq!(take_varint(&mut bytes).map(unzigzag), Some(value));
            assert!(bytes.is_empty());
        }
        let mut truncated: &[u8] = &[0x80, 0x80];
        assert_eq!(take_varint(&mut truncated), None);
    }

    #[test]
    fn a_row_is_smaller_than_its_values_held_apart() {
        // A Logical_Flow's values as northd writes them: one block, the size of its text's values.
        let columns: Vec<(String, ColumnType)> = [
            ("logical_datapath", column(AtomType::Uuid, None, 0, 1)),
            ("pipeline", column(AtomType::String, None, 1, 1)),
            ("priority", column(AtomType::Integer, None, 1, 1)),
            ("match", column(AtomType::String, None, 1, 1)),
            ("actions", column(AtomType::String, None, 1, 1)),
            (
                "external_ids",
                column(AtomType::String, Some(AtomType::String), 0, u64::MAX),
            ),
        ]
        .into_iter()
        .map(|(name, column)| (name.to_string(), column))
        .collect();
        let values = [
            json!(["uuid", "6f1d0b39-8c5e-4b0f-9d3a-1f0c2a3b4c5d"]),
            json!("ingress"),
            json!(50),
            json!("eth.dst == 00:00:00:00:00:01"),
            json!("outport = \"pod-1.ns\"; output;"),
            json!([
                "map",
                [["source", "northd.c:1"], ["stage-name", "ls_in_l2_lkup"]]
            ]),
        ];
        let strings = [
            "ingress",
            "eth.dst == 00:00:00:00:00:01",
            "outport = \"pod-1.ns\"; output;",
            "source",
            "northd.c:1",
            "stage-name",
            "ls_in_l2_lkup",
        ];
        // The UUID's 16 bytes, the priority's one, the strings' bytes.
        let text_bytes = 16 + 1 + strings.iter().map(|s| s.len()).sum::<usize>();
        let row = pack_all(&columns, &decode(&columns, &values), &mut Vec::new());
        // Each column adds its length and count (a byte each here), each string its length.
        assert_eq!(row.len(), text_bytes + 2 * columns.len() + strings.len());
    }
}
