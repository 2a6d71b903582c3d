//! Fuzzes the logical-flow language: any text either fails to parse with an error, or parses to a
//! tree that prints to text parsing back to the same tree (matches and actions alike).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ovnbpf_agent::lflow::{Actions, parse_actions, parse_match};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(tree) = parse_match(text) {
        let printed = tree.to_string();
        assert_eq!(parse_match(&printed).as_ref(), Ok(&tree), "match {text:?} printed as {printed:?}");
    }
    if let Ok(tree) = parse_actions(text) {
        let printed = Actions(&tree).to_string();
        assert_eq!(parse_actions(&printed).as_ref(), Ok(&tree), "actions {text:?} printed as {printed:?}");
    }
});
