//! Fuzzes everything an OVSDB server's bytes reach before they become replica rows: the stream
//! splitter (with the input cut at a fuzzer-chosen point, as reads would), JSON parsing, and the
//! replica's decoding of snapshots and updates (update, update2/update3 formats) against a schema
//! covering every column kind. Nothing may panic, whatever the server sends.
#![no_main]

use std::{collections::BTreeMap, sync::Arc};

use libfuzzer_sys::fuzz_target;
use ovnbpf_agent::ovsdb::{
    framing::Decoder,
    replica::Replica,
    schema::DatabaseSchema,
    session::{MonitorMethod, SessionEvent, UpdateFormat},
};
use serde_json::{Value, json};

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
        updates: json!({}),
        format: UpdateFormat::Update2,
        resumed: false,
    });
    let mut decoder = Decoder::new(1 << 20);
    for chunk in [&stream[..cut], &stream[cut..]] {
        decoder.feed(chunk);
        loop {
            match decoder.next_message() {
                Ok(Some(message)) => {
                    let Ok(value) = serde_json::from_slice::<Value>(&message) else { continue };
                    let updates = value.get("params").and_then(|p| p.get(2).or_else(|| p.get(1))).cloned();
                    for format in [UpdateFormat::Update2, UpdateFormat::Update1] {
                        let updates = updates.clone().unwrap_or(Value::Null);
                        replica.apply(&SessionEvent::Update { updates, format });
                    }
                }
                Ok(None) | Err(_) => break,
            }
        }
    }
});
