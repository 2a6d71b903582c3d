//! Fuzzes everything an OVSDB server's bytes reach before they become replica rows: the stream
//! splitter (with the input cut at a fuzzer-chosen point, as reads would), the message's members
//! and parameters taken apart as their text, and the replica's decoding of snapshots and updates
//! (update, update2/update3 formats) row by row from that text, against a schema covering every
//! column kind. Nothing may panic, whatever the server sends.
#![no_main]

use std::{collections::BTreeMap, sync::Arc};

use libfuzzer_sys::fuzz_target;
use ovnbpf_agent::ovsdb::{
    framing::Decoder,
    raw::{RawJson, for_each_member},
    replica::Replica,
    schema::DatabaseSchema,
    session::{MonitorMethod, SessionEvent, UpdateFormat},
};
use serde_json::{json, value::RawValue};

fn schema() -> Arc<DatabaseSchema> {
    let json = json!({"name": "Fuzz", "version": "1.0.0", "tables": {"T": {"columns": {
        "s": {"type": "string"},
        "i": {"type": "integer"},
        "r": {"type": "real"},
        "b": {"type": "boolean"},
        "opt": {"type": {"key": "uuid", "min": 0, "max": 1}},
        "set": {"type": {"key": "string", "min": 0, "max": "unlimited"}},
        "map": {"type": {"key": "string", "value": "integer", "min": 0, "max": "unlimited"}}
    }}}});
    Arc::new(DatabaseSchema::parse(&json).expect("fixed schema parses"))
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, stream)) = data.split_first() else { return };
    let cut = usize::from(cut).min(stream.len());
    let schema = schema();
    let monitored: BTreeMap<String, Vec<String>> =
        [("T".to_string(), schema.tables["T"].columns.keys().cloned().collect())].into();
    let mut replica = Replica::new();
    replica.apply(&SessionEvent::Snapshot {
        remote: "fuzz".into(),
        method: MonitorMethod::MonitorCondSince,
        schema: schema.clone(),
        monitored,
        updates: json!({}).into(),
        format: UpdateFormat::Update2,
        resumed: false,
    });
    let mut decoder = Decoder::new(1 << 20);
    for chunk in [&stream[..cut], &stream[cut..]] {
        decoder.feed(chunk);
        loop {
            match decoder.next_message() {
                Ok(Some(message)) => {
                    // As the connection and the session take a message apart: its text kept,
                    // the updates a part of it.
                    let Ok(text) = String::from_utf8(message) else { continue };
                    let message = RawJson::whole(text);
                    let mut params = None;
                    let _ = for_each_member(message.text(), |name, value| {
                        if name == "params" {
                            params = message.part(value);
                        }
                    });
                    let Some(params) = params else { continue };
                    let Ok(items) = params.parse::<Vec<&RawValue>>() else { continue };
                    let Some(updates) = items.get(2).or_else(|| items.get(1)) else { continue };
                    let Some(updates) = params.part(updates) else { continue };
                    for format in [UpdateFormat::Update2, UpdateFormat::Update1] {
                        let updates = updates.clone();
                        replica.apply(&SessionEvent::Update { updates, format });
                    }
                }
                Ok(None) | Err(_) => break,
            }
        }
    }
});
