"""kubelet's side of the CRI, for the tests: RunPodSandbox, PodSandboxStatus, ListPodSandbox,
StopPodSandbox and RemovePodSandbox over a runtime's gRPC socket (messages from cri.proto, the
CRI's runtime.v1 subset), and building the sandbox ("pause") image as an OCI archive from a static
binary, since no registry is reachable. One command per run; results as JSON on stdout.

    cri.py SOCKET version
    cri.py SOCKET run NAME NAMESPACE UID CGROUP_PARENT   -> {"id", "ip", "netns", "state"}
    cri.py SOCKET status ID                              -> {"id", "ip", "netns", "state"}
    cri.py SOCKET list                                   -> [{"id", "name", "namespace", "state"}]
    cri.py SOCKET stop ID
    cri.py SOCKET remove ID
    cri.py - pause-image BINARY NAME OUT.tar
"""

import hashlib
import io
import json
import os
import sys
import tarfile

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


def pause_image(binary, name, out):
    """An OCI image layout archive: one layer holding BINARY as /pause, the entrypoint."""
    blobs = {}

    def blob(data, media_type):
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"mediaType": media_type, "digest": digest, "size": len(data)}

    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        entry = tar.gettarinfo(binary, arcname="pause")
        entry.uid = entry.gid = 0
        entry.uname = entry.gname = "root"
        entry.mode = 0o755
        entry.mtime = 0
        with open(binary, "rb") as data:
            tar.addfile(entry, data)
    layer = layer.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": ["/pause"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": blob(json.dumps(config).encode(), "application/vnd.oci.image.config.v1+json"),
        "layers": [blob(layer, "application/vnd.oci.image.layer.v1.tar")],
    }
    descriptor = blob(json.dumps(manifest).encode(), manifest["mediaType"])
    descriptor["annotations"] = {
        "io.containerd.image.name": name,
        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
    }
    descriptor["platform"] = {"architecture": "amd64", "os": "linux"}
    index = {"schemaVersion": 2, "manifests": [descriptor]}
    files = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index).encode(),
    }
    for digest, data in blobs.items():
        files["blobs/sha256/" + digest.split(":", 1)[1]] = data
    with tarfile.open(out, mode="w") as tar:
        for path, data in files.items():
            entry = tarfile.TarInfo(path)
            entry.size = len(data)
            tar.addfile(entry, io.BytesIO(data))


def main(argv):
    socket, command, args = argv[1], argv[2], argv[3:]
    if command == "pause-image":
        pause_image(*args)
        return None
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
