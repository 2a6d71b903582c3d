use std::cell::RefCell;

use super::*;

const CONF: &str =
    r#"{"cniVersion":"1.1.0","name":"ovn","type":"ovnbpf","server_socket":"/run/ovnbpf/cni.sock"}"#;

fn invocation(command: &str) -> Invocation {
    Invocation {
        command: command.into(),
        container_id: "0123456789abcdef".into(),
        netns: "/var/run/netns/pod".into(),
        if_name: "eth0".into(),
        args: "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web".into(),
    }
}

/// An agent stub: records requests and answers with `status` and `body`.
struct Agent {
    status: u16,
    body: Vec<u8>,
    seen: RefCell<Vec<(String, Value)>>,
}

impl Agent {
    fn answering(status: u16, body: &str) -> Self {
        Self {
            status,
            body: body.as_bytes().to_vec(),
            seen: RefCell::new(Vec::new()),
        }
    }

    fn run(&self, invocation: &Invocation, conf: &str) -> Outcome {
        let post = |_: &Path, path: &str, body: &[u8], _: Duration| {
            self.seen
                .borrow_mut()
                .push((path.to_string(), serde_json::from_slice(body).unwrap()));
            Ok(Response {
                status: self.status,
                body: self.body.clone(),
            })
        };
        run(invocation, conf.as_bytes(), &post)
    }
}

fn code(outcome: Outcome) -> u32 {
    match outcome {
        Outcome::Fail(error, _) => error.code,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn version_needs_no_config() {
    let agent = Agent::answering(500, "");
    let Outcome::Print(reply) = agent.run(&invocation("VERSION"), "") else {
        panic!()
    };
    assert_eq!(reply["cniVersion"], "1.1.0");
    assert_eq!(reply["supportedVersions"].as_array().unwrap().len(), 5);
    assert!(agent.seen.borrow().is_empty());
}

#[test]
fn add_sends_kube_ovn_request_and_prints_the_result_in_the_config_version() {
    let agent = Agent::answering(
        200,
        r#"{"ips":[{"protocol":"IPv4","ip":"10.0.1.2","cidr":"10.0.1.0/24","gateway":"10.0.1.1"}],"mac_address":"0a:58:0a:00:01:02","mtu":1400,"nicname":"eth0"}"#,
    );
    let conf = CONF.replace("1.1.0", "0.3.1");
    let Outcome::Print(result) = agent.run(&invocation("ADD"), &conf) else {
        panic!()
    };
    assert_eq!(result["cniVersion"], "0.3.1");
    assert_eq!(result["ips"][0]["version"], "4");
    assert_eq!(result["interfaces"][0]["sandbox"], "/var/run/netns/pod");
    let seen = agent.seen.borrow();
    let (path, request) = &seen[0];
    assert_eq!(path, "/api/v1/add");
    assert_eq!(request["pod_name"], "web");
    assert_eq!(request["pod_namespace"], "ns");
    assert_eq!(request["container_id"], "0123456789abcdef");
    assert_eq!(request["provider"], "ovn");
}

#[test]
fn del_is_silent_and_needs_no_netns() {
    let agent = Agent::answering(204, "");
    let mut del = invocation("DEL");
    del.netns.clear();
    assert_eq!(agent.run(&del, CONF), Outcome::Silent);
    assert_eq!(agent.seen.borrow()[0].0, "/api/v1/del");
}

#[test]
fn failures_map_to_cni_codes() {
    let refused = Agent::answering(500, r#"{"error":"no Port_Binding for web.ns"}"#);
    let Outcome::Fail(error, version) = refused.run(&invocation("ADD"), CONF) else {
        panic!()
    };
    assert_eq!(
        (error.code, version.as_str()),
        (error::TRY_AGAIN_LATER, "1.1.0")
    );
    assert!(
        error.details.contains("no Port_Binding for web.ns"),
        "{error}"
    );

    let code_for = |status: u16| {
        let agent = Agent::answering(status, r#"{"error":"reason"}"#);
        code(agent.run(&invocation("ADD"), CONF))
    };
    assert_eq!(code_for(400), error::INVALID_ENVIRONMENT);
    assert_eq!(code_for(422), error::POD_NOT_SERVABLE);
    assert_eq!(code_for(503), error::TRY_AGAIN_LATER);

    let unreachable = |_: &Path, _: &str, _: &[u8], _: Duration| -> std::io::Result<Response> {
        Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "no socket",
        ))
    };
    assert_eq!(
        code(run(&invocation("ADD"), CONF.as_bytes(), &unreachable)),
        error::TRY_AGAIN_LATER
    );
    assert_eq!(
        code(run(&invocation("STATUS"), CONF.as_bytes(), &unreachable)),
        error::PLUGIN_NOT_AVAILABLE
    );

    let agent = Agent::answering(200, "{}");
    let mut no_args = invocation("ADD");
    no_args.args = "IgnoreUnknown=1".into();
    assert_eq!(code(agent.run(&no_args, CONF)), error::INVALID_ENVIRONMENT);
    let mut no_netns = invocation("ADD");
    no_netns.netns.clear();
    assert_eq!(code(agent.run(&no_netns, CONF)), error::INVALID_ENVIRONMENT);
    assert_eq!(
        code(agent.run(&invocation("ADD"), "{")),
        error::DECODING_FAILURE
    );
    assert_eq!(
        code(agent.run(&invocation("FROB"), CONF)),
        error::INVALID_ENVIRONMENT
    );
    assert_eq!(
        code(agent.run(&invocation(""), CONF)),
        error::INVALID_ENVIRONMENT
    );
    let old = CONF.replace("1.1.0", "0.3.1");
    assert_eq!(
        code(agent.run(&invocation("CHECK"), &old)),
        error::INCOMPATIBLE_VERSION
    );
    assert_eq!(
        code(agent.run(&invocation("CHECK"), CONF)),
        error::INVALID_NETWORK_CONFIG,
        "CHECK without prevResult"
    );
    assert_eq!(
        code(agent.run(&invocation("GC"), &old)),
        error::INCOMPATIBLE_VERSION
    );
    assert!(
        agent.seen.borrow().is_empty(),
        "no bad invocation reached the agent"
    );
}

#[test]
fn gc_forwards_the_valid_attachments() {
    let agent = Agent::answering(204, "");
    let conf = CONF.replace(
        r#""server_socket""#,
        r#""cni.dev/valid-attachments":[{"containerID":"abc","ifname":"eth0"}],"server_socket""#,
    );
    assert_eq!(agent.run(&invocation("GC"), &conf), Outcome::Silent);
    let seen = agent.seen.borrow();
    assert_eq!(seen[0].0, "/api/v1/gc");
    assert_eq!(seen[0].1["valid_attachments"][0]["containerID"], "abc");
}
