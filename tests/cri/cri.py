"""kubelet's side of the CRI, for the tests: RunPodSandbox, PodSandboxStatus, ListPodSandbox,
StopPodSandbox and RemovePodSandbox over a runtime's gRPC socket (messages from cri.proto, the
CRI's runtime.v1 subset). One command per run; results as JSON on stdout.

    cri.py SOCKET version
    cri.py SOCKET run NAME NAMESPACE UID CGROUP_PARENT   -> {"id", "ip", "netns", "state"}
    cri.py SOCKET status ID                              -> {"id", "ip", "netns", "state"}
    cri.py SOCKET list                                   -> [{"id", "name", "namespace", "state"}]
    cri.py SOCKET stop ID
    cri.py SOCKET remove ID
"""

import json
import os
import sys

TIMEOUT_S = 60


def services():
    import grpc

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    messages, runtime = grpc.protos_and_services("cri.proto")
    return grpc, messages, runtime


def stub(socket):
    grpc, messages, runtime = services()
    channel = grpc.insecure_channel("unix://" + socket)
    return messages, runtime.RuntimeServiceStub(channel)


def netns_of(info):
    """The sandbox's network namespace path, from the verbose status (containerd's "info")."""
    try:
        spec = json.loads(info.get("info", "{}")).get("runtimeSpec", {})
    except ValueError:
        return ""
    for namespace in spec.get("linux", {}).get("namespaces", []):
        if namespace.get("type") == "network":
            return namespace.get("path", "")
    return ""


def status(messages, runtime, sandbox_id):
    reply = runtime.PodSandboxStatus(
        messages.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id, verbose=True),
        timeout=TIMEOUT_S,
    )
    return {
        "id": reply.status.id,
        "ip": reply.status.network.ip,
        "netns": netns_of(reply.info),
        "state": messages.PodSandboxState.Name(reply.status.state),
    }


def run(messages, runtime, name, namespace, uid, cgroup_parent):
    config = messages.PodSandboxConfig(
        metadata=messages.PodSandboxMetadata(name=name, uid=uid, namespace=namespace, attempt=0),
        hostname=name,
        labels={"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": namespace},
        linux=messages.LinuxPodSandboxConfig(cgroup_parent=cgroup_parent),
    )
    reply = runtime.RunPodSandbox(
        messages.RunPodSandboxRequest(config=config), timeout=TIMEOUT_S
    )
    return status(messages, runtime, reply.pod_sandbox_id)


def main(argv):
    socket, command, args = argv[1], argv[2], argv[3:]
    messages, runtime = stub(socket)
    if command == "version":
        reply = runtime.Version(messages.VersionRequest(version="v1"), timeout=TIMEOUT_S)
        return {"runtime": reply.runtime_name, "version": reply.runtime_version,
                "api": reply.runtime_api_version}
    if command == "run":
        return run(messages, runtime, *args)
    if command == "status":
        return status(messages, runtime, args[0])
    if command == "list":
        reply = runtime.ListPodSandbox(messages.ListPodSandboxRequest(), timeout=TIMEOUT_S)
        return [{"id": item.id, "name": item.metadata.name, "namespace": item.metadata.namespace,
                 "state": messages.PodSandboxState.Name(item.state)} for item in reply.items]
    if command == "stop":
        runtime.StopPodSandbox(messages.StopPodSandboxRequest(pod_sandbox_id=args[0]),
                               timeout=TIMEOUT_S)
        return None
    if command == "remove":
        runtime.RemovePodSandbox(messages.RemovePodSandboxRequest(pod_sandbox_id=args[0]),
                                 timeout=TIMEOUT_S)
        return None
    raise SystemExit("unknown command " + command)


if __name__ == "__main__":
    try:
        print(json.dumps(main(sys.argv)))
    except Exception as error:  # the test prints this with the command that failed
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(1)
