//! `ovnbpf-cni`: the CNI plugin binary the container runtime executes (installed in /opt/cni/bin).
//! Thin by design: the spec in (CNI_COMMAND + environment + netconf on stdin), one call to the
//! node agent over its unix socket (Kube-OVN's API), the result out, converted to the config's
//! `cniVersion`. Failures print the CNI error JSON on stdout and exit 1.

use std::{
    io::{Read, Write},
    path::Path,
    time::Duration,
};

use ovnbpf_cni::{
    SPEC_VERSION, SUPPORTED_VERSIONS,
    error::{self, CniError},
    http::{self, Response},
    netconf::{self, NetConf},
    result, version_at_least,
    wire::{self, CniRequest, CniResponse, GcRequest},
};
use serde_json::{Value, json};

/// The CNI environment of one invocation.
#[derive(Clone, Debug, Default)]
struct Invocation {
    command: String,
    container_id: String,
    netns: String,
    if_name: String,
    args: String,
}

impl Invocation {
    fn from_environment() -> Self {
        let var = |name: &str| std::env::var(name).unwrap_or_default();
        Self {
            command: var("CNI_COMMAND"),
            container_id: var("CNI_CONTAINERID"),
            netns: var("CNI_NETNS"),
            if_name: var("CNI_IFNAME"),
            args: var("CNI_ARGS"),
        }
    }

    fn require(&self, name: &str, value: &str) -> Result<(), CniError> {
        if value.is_empty() {
            return Err(CniError::new(
                error::INVALID_ENVIRONMENT,
                format!("{name} is not set"),
                "",
            ));
        }
        Ok(())
    }
}

/// What the plugin prints and how it exits.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// Success with this JSON on stdout.
    Print(Value),
    /// Success with nothing on stdout (DEL, CHECK, STATUS, GC).
    Silent,
    /// Failure: the error JSON in this version.
    Fail(CniError, String),
}

/// Sends one request to the agent.
type Post<'a> = &'a dyn Fn(&Path, &str, &[u8], Duration) -> std::io::Result<Response>;

fn main() {
    let invocation = Invocation::from_environment();
    let mut stdin = Vec::new();
    let outcome = match std::io::stdin()
        .take(http::MAX_BODY as u64)
        .read_to_end(&mut stdin)
    {
        Ok(_) => run(&invocation, &stdin, &http::post),
        Err(e) => Outcome::Fail(
            CniError::new(error::IO_FAILURE, "reading stdin", e.to_string()),
            SPEC_VERSION.into(),
        ),
    };
    let mut stdout = std::io::stdout().lock();
    // Nothing sensible can be done if stdout is gone; the exit code still reports the outcome.
    let code = match outcome {
        Outcome::Print(value) => {
            let _ = writeln!(stdout, "{value}");
            0
        }
        Outcome::Silent => 0,
        Outcome::Fail(error, version) => {
            let _ = writeln!(stdout, "{}", error.to_json(&version));
            1
        }
    };
    std::process::exit(code);
}

fn run(invocation: &Invocation, stdin: &[u8], post: Post<'_>) -> Outcome {
    if invocation.command == "VERSION" {
        return Outcome::Print(
            json!({"cniVersion": SPEC_VERSION, "supportedVersions": SUPPORTED_VERSIONS}),
        );
    }
    let conf = match netconf::parse(stdin) {
        Ok(conf) => conf,
        Err(error) => return Outcome::Fail(error, SPEC_VERSION.into()),
    };
    let version = conf.cni_version.clone();
    match dispatch(invocation, &conf, post) {
        Ok(outcome) => outcome,
        Err(error) => Outcome::Fail(error, version),
    }
}

fn dispatch(invocation: &Invocation, conf: &NetConf, post: Post<'_>) -> Result<Outcome, CniError> {
    let needs = |minimum: &str| {
        if version_at_least(&conf.cni_version, minimum) {
            Ok(())
        } else {
            Err(CniError::new(
                error::INCOMPATIBLE_VERSION,
                format!(
                    "{} needs cniVersion {minimum} or later, the config says {}",
                    invocation.command, conf.cni_version
                ),
                "",
            ))
        }
    };
    match invocation.command.as_str() {
        "ADD" => {
            let request = pod_request(invocation, conf, true)?;
            let response = call(conf, post, wire::PATH_ADD, &request, 220)?;
            let reply: CniResponse = serde_json::from_slice(&response.body).map_err(|e| {
                CniError::new(
                    error::DECODING_FAILURE,
                    "the agent's reply is not a CNI response",
                    e.to_string(),
                )
            })?;
            Ok(Outcome::Print(result::add_result(
                &reply,
                &invocation.netns,
                &conf.cni_version,
            )))
        }
        "DEL" => {
            let request = pod_request(invocation, conf, false)?;
            call(conf, post, wire::PATH_DEL, &request, 60)?;
            Ok(Outcome::Silent)
        }
        "CHECK" => {
            needs("0.4.0")?;
            if !conf.has_prev_result {
                return Err(CniError::new(
                    error::INVALID_NETWORK_CONFIG,
                    "CHECK needs prevResult",
                    "",
                ));
            }
            let request = pod_request(invocation, conf, true)?;
            call(conf, post, wire::PATH_CHECK, &request, 30)?;
            Ok(Outcome::Silent)
        }
        "STATUS" => {
            needs("1.1.0")?;
            call(conf, post, wire::PATH_STATUS, &json!({}), 5).map_err(|error| {
                CniError::new(error::PLUGIN_NOT_AVAILABLE, error.msg, error.details)
            })?;
            Ok(Outcome::Silent)
        }
        "GC" => {
            needs("1.1.0")?;
            let request = GcRequest {
                valid_attachments: conf.valid_attachments.clone(),
            };
            call(conf, post, wire::PATH_GC, &request, 60)?;
            Ok(Outcome::Silent)
        }
        "" => Err(CniError::new(
            error::INVALID_ENVIRONMENT,
            "CNI_COMMAND is not set",
            "",
        )),
        other => Err(CniError::new(
            error::INVALID_ENVIRONMENT,
            format!("unknown CNI_COMMAND {other:?}"),
            "",
        )),
    }
}

/// The agent request for the pod this invocation is about.
fn pod_request(
    invocation: &Invocation,
    conf: &NetConf,
    needs_netns: bool,
) -> Result<CniRequest, CniError> {
    invocation.require("CNI_CONTAINERID", &invocation.container_id)?;
    if needs_netns {
        invocation.require("CNI_NETNS", &invocation.netns)?;
    }
    invocation.require("CNI_IFNAME", &invocation.if_name)?;
    let (pod_name, pod_namespace) = netconf::pod_identity(&invocation.args)?;
    Ok(CniRequest {
        cni_type: conf.plugin_type.clone(),
        pod_name,
        pod_namespace,
        container_id: invocation.container_id.clone(),
        net_ns: invocation.netns.clone(),
        if_name: invocation.if_name.clone(),
        provider: conf.provider.clone(),
        routes: conf.routes.clone(),
        dns: None,
    })
}

/// POSTs `body` to the agent and returns a 2xx response; anything else is a CNI error with the
/// agent's reason: a request the agent calls malformed (400) → 4 (invalid arguments), a pod it
/// cannot serve as configured (422) → 100, an unreachable agent and every other failure → 11
/// (try again later).
fn call(
    conf: &NetConf,
    post: Post<'_>,
    path: &str,
    body: &impl serde::Serialize,
    timeout_s: u64,
) -> Result<Response, CniError> {
    let body = serde_json::to_vec(body)
        .map_err(|e| CniError::new(error::IO_FAILURE, "encoding the request", e.to_string()))?;
    let response = post(
        Path::new(&conf.server_socket),
        path,
        &body,
        Duration::from_secs(timeout_s),
    )
    .map_err(|e| {
        CniError::new(
            error::TRY_AGAIN_LATER,
            format!("the ovnbpf agent is unreachable at {}", conf.server_socket),
            e.to_string(),
        )
    })?;
    if (200..300).contains(&response.status) {
        return Ok(response);
    }
    let reason = serde_json::from_slice::<CniResponse>(&response.body)
        .map(|r| r.error)
        .unwrap_or_else(|_| String::from_utf8_lossy(&response.body).into_owned());
    let code = match response.status {
        400 => error::INVALID_ENVIRONMENT,
        422 => error::POD_NOT_SERVABLE,
        _ => error::TRY_AGAIN_LATER,
    };
    Err(CniError::new(
        code,
        "RPC failed",
        format!("{path} answered {}: {reason}", response.status),
    ))
}

#[cfg(test)]
#[path = "plugin_tests.rs"]
mod tests;
