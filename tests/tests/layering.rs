//! The agent's layering, checked on its source: which module may import which. Fails on any
//! `crate::…` path that breaks a rule below and is not in [`KNOWN_VIOLATIONS`], the imports that
//! existed when the rule was written and are being removed (each line is one to remove; a line
//! whose import is gone is reported so it can be deleted from the list).
//!
//! Rules (architecture review §1 row 13, §8 improvement 2):
//! - the backend (`agent/src/dataplane`) reads only the IR: nothing of the compiler
//!   (`agent/src/pipeline` except `pipeline::ir`), the flow language (`agent/src/lflow`) or the
//!   Southbound (`agent/src/sb`);
//! - the CNI side (`agent/src/cni`) does not use the flow language (`agent/src/lflow`);
//! - the compiler (`agent/src/pipeline`) does not know the backend (`agent/src/dataplane`).
//! - the daemon, the CNI side, the metrics, the health probes and the control socket drive the
//!   datapath through `dataplane::Datapath`/`PortAttacher` and name no backend
//!   (`agent/src/dataplane/ebpf`): only `bin/agent.rs` picks one (§8 improvement 5).
//!
//! Paths are read from the text: `crate::a::b`, `use crate::{a::{b, c}, d}` groups included,
//! comments skipped. `super::` paths that climb out of a folder are not followed.

use std::path::{Path, PathBuf};

/// (folder under `agent/src`, forbidden first segments after `crate::`, allowed exception).
struct Rule {
    folder: &'static str,
    forbidden: &'static [&'static str],
    /// A path under a forbidden module that is allowed (the IR).
    except: Option<&'static str>,
}

const RULES: &[Rule] = &[
    Rule {
        folder: "dataplane",
        forbidden: &["pipeline", "lflow", "sb"],
        except: Some("pipeline::ir"),
    },
    Rule {
        folder: "cni",
        forbidden: &["lflow"],
        except: None,
    },
    Rule {
        folder: "pipeline",
        forbidden: &["dataplane"],
        except: None,
    },
    Rule {
        folder: "daemon",
        forbidden: &["dataplane::ebpf"],
        except: None,
    },
    Rule {
        folder: "cni",
        forbidden: &["dataplane::ebpf"],
        except: None,
    },
    Rule {
        folder: "metrics",
        forbidden: &["dataplane::ebpf"],
        except: None,
    },
    Rule {
        folder: "health",
        forbidden: &["dataplane::ebpf"],
        except: None,
    },
    Rule {
        folder: "control",
        forbidden: &["dataplane::ebpf"],
        except: None,
    },
    Rule {
        folder: "node_network",
        forbidden: &["dataplane::ebpf", "lflow", "pipeline"],
        except: None,
    },
];

/// Imports breaking a rule that are tolerated while being removed (file under `agent/src`, path
/// after `crate::`). Empty: every rule holds; do not add lines.
const KNOWN_VIOLATIONS: &[(&str, &str)] = &[];

fn agent_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The source without comments (line comments, doc comments and block comments).
fn strip_comments(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while !rest.is_empty() {
        if rest.starts_with("//") {
            let end = rest.find('\n').unwrap_or(rest.len());
            rest = &rest[end..];
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(rest.len(), |e| e + 2);
            rest = &rest[end..];
        } else if rest.starts_with("'\"'") || rest.starts_with("'\\\"'") {
            // A quote character literal is no string.
            let end = rest[1..].find('\'').map_or(rest.len(), |e| e + 2);
            out.push_str(&rest[..end]);
            rest = &rest[end..];
        } else if rest.starts_with('"') {
            // A string literal: kept out, so a message that mentions a path is no import.
            let mut chars = rest.char_indices().skip(1);
            let mut end = rest.len();
            while let Some((i, c)) = chars.next() {
                if c == '\\' {
                    chars.next();
                } else if c == '"' {
                    end = i + 1;
                    break;
                }
            }
            out.push_str("\"\"");
            rest = &rest[end..];
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// Every path named after `crate::` in `source`, with `use` groups expanded (`a::{b, c::d}` gives
/// `a::b` and `a::c::d`).
fn crate_paths(source: &str) -> Vec<String> {
    let text = strip_comments(source);
    let mut paths = Vec::new();
    let mut at = 0;
    while let Some(found) = text[at..].find("crate::") {
        let start = at + found;
        at = start + "crate::".len();
        // `crate::` preceded by an identifier character is another name (e.g. `my_crate::`).
        if text[..start]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        let (expanded, end) = parse_tree(&text, at, "");
        paths.extend(expanded);
        at = end.max(at);
    }
    paths
}

/// Parses a use tree at `at` (after a `::`), prefixed by `prefix`; returns its paths and where it
/// ends.
fn parse_tree(text: &str, mut at: usize, prefix: &str) -> (Vec<String>, usize) {
    let bytes = text.as_bytes();
    let skip_space = |mut i: usize| {
        while i < bytes.len() && (bytes[i] as char).is_whitespace() {
            i += 1;
        }
        i
    };
    let mut path = prefix.to_string();
    loop {
        at = skip_space(at);
        if at < bytes.len() && bytes[at] == b'{' {
            let mut paths = Vec::new();
            at += 1;
            loop {
                at = skip_space(at);
                if at >= bytes.len() {
                    return (paths, at);
                }
                if bytes[at] == b'}' {
                    return (paths, at + 1);
                }
                if bytes[at] == b',' {
                    at += 1;
                    continue;
                }
                let (inner, end) = parse_tree(text, at, &path);
                paths.extend(inner);
                at = skip_space(end);
                // `item as name`: the name is no path.
                if text[at..].starts_with("as") && text[at + 2..].starts_with(char::is_whitespace) {
                    at = skip_space(at + 2);
                    while at < bytes.len()
                        && ((bytes[at] as char).is_alphanumeric() || bytes[at] == b'_')
                    {
                        at += 1;
                    }
                }
            }
        }
        let start = at;
        while at < bytes.len() && ((bytes[at] as char).is_alphanumeric() || bytes[at] == b'_') {
            at += 1;
        }
        let segment = &text[start..at];
        if segment.is_empty() {
            return (vec![path.trim_end_matches("::").to_string()], at);
        }
        path.push_str(segment);
        let next = skip_space(at);
        if text[next..].starts_with("::") {
            path.push_str("::");
            at = next + 2;
        } else {
            // `as name`, `,`, `}`, `;`, `(`, … end the path.
            return (vec![path], at);
        }
    }
}

/// The rule `path` (imported from a file in `folder`) breaks, if any.
fn broken_rule(folder: &str, path: &str) -> Option<&'static Rule> {
    RULES.iter().find(|rule| {
        rule.folder == folder
            && rule
                .forbidden
                .iter()
                .any(|module| path == *module || path.starts_with(&format!("{module}::")))
            && !rule
                .except
                .is_some_and(|allowed| path == allowed || path.starts_with(&format!("{allowed}::")))
    })
}

/// Every (file under `agent/src`, path) that breaks a rule.
fn violations() -> Vec<(String, String)> {
    let root = agent_src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut found = Vec::new();
    for file in files {
        let relative = file
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let folder = relative.split('/').next().unwrap_or("");
        let folder = folder.trim_end_matches(".rs");
        let source = std::fs::read_to_string(&file).unwrap();
        for path in crate_paths(&source) {
            if broken_rule(folder, &path).is_some() {
                found.push((relative.clone(), path));
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

#[test]
fn no_new_imports_break_the_layering() {
    let found = violations();
    assert!(
        !found.is_empty() || KNOWN_VIOLATIONS.is_empty(),
        "the scan found no imports at all under {}",
        agent_src().display()
    );
    let new: Vec<String> = found
        .iter()
        .filter(|(file, path)| !KNOWN_VIOLATIONS.contains(&(file.as_str(), path.as_str())))
        .map(|(file, path)| format!("agent/src/{file}: crate::{path}"))
        .collect();
    let gone: Vec<String> = KNOWN_VIOLATIONS
        .iter()
        .filter(|(file, path)| !found.iter().any(|(f, p)| f == file && p == path))
        .map(|(file, path)| format!("agent/src/{file}: crate::{path}"))
        .collect();
    if !gone.is_empty() {
        println!(
            "known violations now removed (delete them from KNOWN_VIOLATIONS):\n{}",
            gone.join("\n")
        );
    }
    assert!(
        new.is_empty(),
        "imports that break the layering (see this file's rules):\n{}",
        new.join("\n")
    );
}

#[test]
fn the_scan_finds_imports_in_groups_and_paths_and_skips_comments() {
    let source = r#"
        use crate::pipeline::{
            IrDiff,
            ir::{IrEntry, Mac},
            classify::{self as c, X},
        };
        use crate::{lflow::parse_mac, sb as southbound};
        // use crate::dataplane::Hidden;
        /* crate::dataplane::AlsoHidden */
        let _ = "crate::dataplane::InAString";
        fn f() { crate::dataplane::ebpf::load(); my_crate::dataplane::no(); }
    "#;
    let mut paths = crate_paths(source);
    paths.sort();
    assert_eq!(
        paths,
        [
            "dataplane::ebpf::load",
            "lflow::parse_mac",
            "pipeline::IrDiff",
            "pipeline::classify::X",
            "pipeline::classify::self",
            "pipeline::ir::IrEntry",
            "pipeline::ir::Mac",
            "sb",
        ]
    );
    assert!(broken_rule("dataplane", "pipeline::IrDiff").is_some());
    assert!(broken_rule("dataplane", "pipeline::ir::IrEntry").is_none());
    assert!(broken_rule("dataplane", "sb").is_some());
    assert!(broken_rule("dataplane", "lflow::parse_mac").is_some());
    assert!(broken_rule("cni", "lflow::parse_mac").is_some());
    assert!(broken_rule("cni", "pipeline::IrDiff").is_none());
    assert!(broken_rule("pipeline", "dataplane::ebpf::Hook").is_some());
    assert!(broken_rule("pipeline", "lflow::parse_actions").is_none());
    assert!(broken_rule("daemon", "dataplane::ebpf::node::NodeDatapath").is_some());
    assert!(broken_rule("cni", "dataplane::ebpf::pod_filter").is_some());
    assert!(broken_rule("daemon", "dataplane::Datapath").is_none());
    assert!(broken_rule("cni", "dataplane::PortAttacher").is_none());
}
