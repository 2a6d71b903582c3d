//! A JSON value as the server sent it: a slice of one received message's text, shared (a clone
//! costs a reference count), decoded only where it is read. Owns nothing but that text.
//!
//! Why not `serde_json::Value`: the initial snapshot is the largest message there is, and a
//! `Value` tree of it was the agent's peak (at 10,000 ports, 115 MB of maps and strings for 27 MB
//! of text, two `BTreeMap` nodes of ~630 bytes per row). The replica instead walks the text's
//! tables and rows with [`for_each_member`] and decodes one row at a time, so a snapshot costs
//! its text plus the rows it becomes.

use std::{borrow::Cow, fmt, ops::Range, sync::Arc};

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::{Value, value::RawValue};

/// A JSON value: `text()` is its exact text within a received message.
#[derive(Clone)]
pub struct RawJson {
    message: Arc<String>,
    range: Range<usize>,
}

impl RawJson {
    /// The whole of a received message (not checked here: [`for_each_member`] and
    /// [`Self::parse`] check what they read).
    #[must_use]
    pub fn whole(message: String) -> Self {
        let range = 0..message.len();
        Self {
            message: Arc::new(message),
            range,
        }
    }

    /// JSON `null`.
    #[must_use]
    pub fn null() -> Self {
        Self::whole("null".into())
    }

    /// The value's text.
    #[must_use]
    pub fn text(&self) -> &str {
        // The range is within the message and on character boundaries: it is either the whole
        // message or a value serde_json found in it (see `part`).
        self.message.get(self.range.clone()).unwrap_or("null")
    }

    /// `part`, a value borrowed from this one's text, as a value of its own that shares the
    /// message; `None` if `part` does not lie within this text.
    #[must_use]
    pub fn part(&self, part: &RawValue) -> Option<Self> {
        let base = self.message.as_ptr() as usize;
        let start = (part.get().as_ptr() as usize).checked_sub(base)?;
        let end = start + part.get().len();
        (start >= self.range.start && end <= self.range.end).then(|| Self {
            message: self.message.clone(),
            range: start..end,
        })
    }

    #[must_use]
    pub fn is_null(&self) -> bool {
        self.text().trim() == "null"
    }

    /// Decodes the value as `T`.
    pub fn parse<'a, T: Deserialize<'a>>(&'a self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.text())
    }

    /// The value as a [`Value`] tree (for small values).
    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        self.parse()
    }
}

impl From<Value> for RawJson {
    fn from(value: Value) -> Self {
        Self::whole(value.to_string())
    }
}

impl PartialEq for RawJson {
    fn eq(&self, other: &Self) -> bool {
        self.text() == other.text()
    }
}

impl fmt::Debug for RawJson {
    /// At most the first 256 bytes: a snapshot's text is many megabytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 256;
        let text = self.text();
        if text.len() <= SHOWN {
            return f.write_str(text);
        }
        let mut end = SHOWN;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        write!(f, "{}… ({} bytes)", &text[..end], text.len())
    }
}

/// Calls `each` with every member (name, value) of the JSON object `text`, in the text's order,
/// without building the object: values are handed over as their text. Fails if `text` is not a
/// JSON object (members before a syntax error have been handed over).
pub fn for_each_member<'a>(
    text: &'a str,
    each: impl FnMut(Cow<'a, str>, &'a RawValue),
) -> Result<(), serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    deserializer.deserialize_map(Members(each))?;
    deserializer.end()
}

struct Members<F>(F);

impl<'de, F: FnMut(Cow<'de, str>, &'de RawValue)> Visitor<'de> for Members<F> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        while let Some(Name(name)) = map.next_key()? {
            let value: &'de RawValue = map.next_value()?;
            (self.0)(name, value);
        }
        Ok(())
    }
}

/// A member's name, borrowed from the text unless it has escapes.
struct Name<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NameVisitor;
        impl<'de> Visitor<'de> for NameVisitor {
            type Value = Name<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E: de::Error>(self, name: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Borrowed(name)))
            }

            fn visit_str<E: de::Error>(self, name: &str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(name.to_string())))
            }
        }
        deserializer.deserialize_str(NameVisitor)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn members(text: &str) -> Result<Vec<(String, String)>, serde_json::Error> {
        let mut seen = Vec::new();
        for_each_member(text, |name, value| {
            seen.push((name.into_owned(), value.get().to_string()));
        })?;
        Ok(seen)
    }

    #[test]
    fn members_come_in_the_texts_order_with_their_exact_text() {
        let text = r#" {"b": {"x": [1, 2]}, "a\u0041": "s", "c": null } "#;
        assert_eq!(
            members(text).unwrap(),
            [
                ("b".to_string(), r#"{"x": [1, 2]}"#.to_string()),
                ("aA".to_string(), r#""s""#.to_string()),
                ("c".to_string(), "null".to_string()),
            ]
        );
        assert_eq!(members("{}").unwrap(), []);
    }

    #[test]
    fn what_is_not_an_object_is_an_error() {
        for text in ["[]", "null", "\"x\"", r#"{"a": 1"#, r#"{"a": 1} {"#, ""] {
            assert!(members(text).is_err(), "{text:?} accepted");
        }
    }

    #[test]
    fn a_part_shares_the_message_and_keeps_its_exact_text() {
        let whole = RawJson::whole(r#"{"id":7,"result":[true, "t", {"T": {}}]}"#.to_string());
        let mut result = None;
        for_each_member(whole.text(), |name, value| {
            if name == "result" {
                result = whole.part(value);
            }
        })
        .unwrap();
        let result = result.unwrap();
        assert_eq!(result.text(), r#"[true, "t", {"T": {}}]"#);
        assert_eq!(result.to_value().unwrap(), json!([true, "t", {"T": {}}]));
        let items: Vec<&RawValue> = result.parse().unwrap();
        let updates = result.part(items[2]).unwrap();
        assert_eq!(updates.text(), r#"{"T": {}}"#);
        // A value from another text is not a part of this one.
        let elsewhere: &RawValue = serde_json::from_str("[true]").unwrap();
        assert!(updates.part(elsewhere).is_none());
        assert!(updates.part(items[0]).is_none(), "outside the part's range");
    }

    #[test]
    fn null_and_debug() {
        assert!(RawJson::null().is_null());
        assert!(RawJson::from(json!(null)).is_null());
        assert!(!RawJson::from(json!({})).is_null());
        let long = RawJson::from(json!({"k": "é".repeat(400)}));
        let shown = format!("{long:?}");
        assert!(shown.ends_with("(808 bytes)"), "{shown}");
        assert!(shown.len() < 300);
    }
}
