//! `ovnbpf-cni`: the CNI plugin binary the container runtime executes (installed in /opt/cni/bin).
//! It is deliberately thin: the spec in (CNI_COMMAND + environment + netconf on stdin), one call to
//! the node agent, the result out. Today it answers VERSION; ADD, DEL, CHECK, STATUS and GC answer
//! with a CNI error until the agent's CNI server exists (see README status).

use std::io::Write;

use serde_json::json;

/// CNI spec versions this plugin can speak.
const SUPPORTED_VERSIONS: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];
const SPEC_VERSION: &str = "1.1.0";

/// CNI well-known error codes (spec section "Error").
const ERROR_INVALID_ENVIRONMENT: u32 = 4;
/// First plugin-specific error code.
const ERROR_UNSUPPORTED_COMMAND: u32 = 100;

fn main() {
    let command = std::env::var("CNI_COMMAND").unwrap_or_default();
    let (reply, ok) = respond(&command);
    let mut stdout = std::io::stdout().lock();
    // Nothing sensible can be done if stdout is gone; the exit code still reports the failure.
    let _ = writeln!(stdout, "{reply}");
    std::process::exit(if ok { 0 } else { 1 });
}

/// The JSON to print for `command`, and whether it is a success.
fn respond(command: &str) -> (serde_json::Value, bool) {
    match command {
        "VERSION" => (
            json!({"cniVersion": SPEC_VERSION, "supportedVersions": SUPPORTED_VERSIONS}),
            true,
        ),
        "ADD" | "DEL" | "CHECK" | "STATUS" | "GC" => (
            error(
                ERROR_UNSUPPORTED_COMMAND,
                &format!("{command} is not implemented by this ovnbpf build yet"),
                "the agent's CNI server is not part of this release; see the README status table",
            ),
            false,
        ),
        "" => (
            error(ERROR_INVALID_ENVIRONMENT, "CNI_COMMAND is not set", ""),
            false,
        ),
        other => (
            error(
                ERROR_INVALID_ENVIRONMENT,
                &format!("unknown CNI_COMMAND {other:?}"),
                "",
            ),
            false,
        ),
    }
}

fn error(code: u32, msg: &str, details: &str) -> serde_json::Value {
    json!({"cniVersion": SPEC_VERSION, "code": code, "msg": msg, "details": details})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_lists_the_supported_specs() {
        let (reply, ok) = respond("VERSION");
        assert!(ok);
        assert_eq!(reply["cniVersion"], "1.1.0");
        let versions = reply["supportedVersions"].as_array().unwrap();
        assert_eq!(versions.len(), 5);
        assert!(versions.iter().any(|v| v == "0.3.1"));
    }

    #[test]
    fn missing_or_unknown_command_is_an_environment_error() {
        for command in ["", "FROB"] {
            let (reply, ok) = respond(command);
            assert!(!ok);
            assert_eq!(
                reply["code"], ERROR_INVALID_ENVIRONMENT,
                "{command}: {reply}"
            );
        }
    }

    #[test]
    fn unimplemented_commands_fail_with_a_cni_error() {
        let (reply, ok) = respond("ADD");
        assert!(!ok);
        assert_eq!(reply["code"], ERROR_UNSUPPORTED_COMMAND);
        assert!(reply["msg"].as_str().unwrap().contains("ADD"));
    }
}
