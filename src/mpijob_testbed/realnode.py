"""Real nodes beside the kwok nodes: containerd + the kubelet, pod networking on a bridge, local images.

Opt-in (`mpijob-testbed up --real-node`, or `--real-nodes N` for real-1..real-N on this one host).
Host-wide things a kubelet needs (root, Debian packages) are checked first; everything node i writes goes
under `<state dir>/node/` (real-1) or `<state dir>/node<i>/` except what the kubelet, containerd and CNI
hard-code (see docs/testbed.md). The host is captured before anything changes (`hoststate.capture()` into
`node/host-before.json`) and `stop()` puts back the difference.

Each node has its own containerd (root, state, socket): a kubelet removes every sandbox in its runtime
that is not one of its pods, so two kubelets must never share one. Node 2+ also get their own cgroup root
(`/mpijobtb-real-<i>` under each controller) so no kubelet manages another's pod cgroups.

Network: one bridge `mpijobtb0` for all nodes, 10.250.0.0/24. It carries 10.250.0.1 (real-1's InternalIP
and every pod's gateway) and 10.250.0.<i> for real-<i> (secondary addresses, where each kubelet listens);
each node's CNI config hands out a disjoint slice of the subnet (`pod_range`) from its own host-local
data dir, so pods on different nodes talk over the one bridge. The API server stays on 127.0.0.1: one nat
rule DNATs the `kubernetes` Service address (10.96.0.1:443) arriving on the bridge to 127.0.0.1:<port>,
which the bridge's own `route_localnet` sysctl allows (it disappears with the bridge), so in-cluster
config works in pods without exposing the API server on another address.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpijob_testbed import clusterdns, hoststate, nodeimages, processes
from mpijob_testbed.archives import read_archive
from mpijob_testbed.certs import Pki, issue_leaf
from mpijob_testbed.components import KUBERNETES_SERVICE_IP
from mpijob_testbed.errors import TestbedError
from mpijob_testbed.kubeconfigs import kubeconfig_dict, write_kubeconfig
from mpijob_testbed.paths import Layout, repo_root
from mpijob_testbed.ports import free_ports
from mpijob_testbed.rest import Rest
from mpijob_testbed.waiting import until_healthy

Echo = Callable[[str], None]

NODE_NAME = "real-1"
BRIDGE = "mpijobtb0"
NODE_IP = "10.250.0.1"
POD_SUBNET = "10.250.0.0/24"
MAX_REAL_NODES = hoststate.MAX_REAL_NODES
# Each node's slice of POD_SUBNET for its pods (maxPods is 20): real-1 .10-.69, real-2 .70-.129, ...
_POD_RANGE_START, _POD_RANGE_SIZE = 10, 60
CGROUP_ROOT_PREFIX = hoststate.CGROUP_ROOT_PREFIX
# Pods that should run on the real node tolerate this taint and select the label; nothing else lands there
# (the other tests' pods would otherwise try to run their images for real).
REAL_NODE_TAINT = "testbed.mpijob.io/real-node"
REAL_NODE_LABEL = "testbed.mpijob.io/real-node"
PAUSE_IMAGE = "mpijob.local/pause:testbed"
LAUNCHER_IMAGE = "mpijob.local/launcher:testbed"
NAT_CHAIN = "MPIJOB-TESTBED"
CONTAINERD = Path("/usr/bin/containerd")
SHIM = "containerd-shim-runc-v2"
NODE_COMPONENTS = ("containerd", "kubelet")
ENV_NODE_BIN = "MPIJOB_TESTBED_NODE_BIN"
# Unix socket paths are limited to 107 bytes; containerd appends ".ttrpc" to its socket.
_MAX_SOCKET = 100
_APISERVER_KUBELET_CLIENT = ("kube-apiserver-kubelet-client", ("system:masters",))


@dataclass(frozen=True)
class NodeLayout:
    root: Path  # <state dir>/node (real-1) or <state dir>/node<i>
    index: int = 1

    @property
    def name(self) -> str:
        return f"real-{self.index}"

    @property
    def ip(self) -> str:
        return f"10.250.0.{self.index}"

    @property
    def cgroup_root(self) -> str | None:
        """real-1 keeps the kubelet's default (`/kubepods`); the others their own top-level cgroup."""
        return None if self.index == 1 else f"/{CGROUP_ROOT_PREFIX}{self.index}"

    def component(self, name: str) -> str:
        """Pid/log file name of this node's containerd or kubelet (`kubelet`, `kubelet-2`, ...)."""
        return name if self.index == 1 else f"{name}-{self.index}"

    def pod_range(self) -> tuple[str, str]:
        start = _POD_RANGE_START + (self.index - 1) * _POD_RANGE_SIZE
        return f"10.250.0.{start}", f"10.250.0.{start + _POD_RANGE_SIZE - 1}"

    @property
    def before(self) -> Path:
        return self.root / "host-before.json"

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd.toml"

    @property
    def socket(self) -> Path:
        return self.root / "containerd" / "c.sock"

    @property
    def kubelet_dir(self) -> Path:
        return self.root / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet.yaml"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubelet.kubeconfig"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def images(self) -> Path:
        return self.root / "images"


def node_layout(layout: Layout, index: int = 1) -> NodeLayout:
    return NodeLayout(layout.root / ("node" if index == 1 else f"node{index}"), index)


def node_layouts(layout: Layout) -> list[NodeLayout]:
    """The nodes of this testbed: real-1 and every further node directory that exists."""
    return [
        node_layout(layout, i) for i in range(1, MAX_REAL_NODES + 1) if i == 1 or node_layout(layout, i).root.exists()
    ]


def node_names(count: int) -> list[str]:
    return [NodeLayout(Path("/"), i).name for i in range(1, count + 1)]


def node_bin_dir() -> Path:
    env = os.environ.get(ENV_NODE_BIN)
    return Path(env).absolute() if env else repo_root() / ".cache" / "testbed" / "node-bin"


def kubelet_binary() -> Path:
    return node_bin_dir() / "kubelet"


def coredns_binary() -> Path:
    return node_bin_dir() / clusterdns.COMPONENT


def binary(component: str) -> Path:
    return CONTAINERD if component == "containerd" else kubelet_binary()


def _run(argv: list[str], what: str, *, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    if result.returncode != 0:
        raise TestbedError(f"{what} failed ({' '.join(argv)}): {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout


def machine_supports_real_node() -> str | None:
    """None when this machine can run a real node, else why not (for skipping tests)."""
    if os.geteuid() != 0:
        return "a real node needs root (containerd, mounts, a bridge, iptables)"
    if not Path("/sys/fs/cgroup").is_dir():
        return "no /sys/fs/cgroup"
    if shutil.which("apt-get") is None and shutil.which("containerd") is None:
        return "containerd is not installed and there is no apt-get to install it"
    return None


# --- preparing (before the control plane starts) ----------------------------------------------------


def _script(name: str, *args: str, echo: Echo, env: dict[str, str] | None = None) -> None:
    script = repo_root() / "testbed" / name
    code = subprocess.call(["bash", str(script), *args], env=env)
    if code != 0:
        raise TestbedError(f"testbed/{name} failed with exit code {code}")


def prepare(layout: Layout, echo: Echo, count: int = 1) -> list[NodeLayout]:
    """Host packages, the kubelet binary and the images; then record the host as it is now."""
    reason = machine_supports_real_node()
    if reason:
        raise TestbedError(f"--real-node: {reason}")
    if not 1 <= count <= MAX_REAL_NODES:
        raise TestbedError(f"--real-nodes must be 1 to {MAX_REAL_NODES}, not {count}")
    nodes = [node_layout(layout, i) for i in range(1, count + 1)]
    for n in nodes:
        n.root.mkdir(parents=True, exist_ok=True)
        if len(str(n.socket)) > _MAX_SOCKET:
            raise TestbedError(f"--real-node: state directory path too long for a unix socket ({n.socket})")
    node = nodes[0]
    t = time.monotonic()
    _script("install-system-deps.sh", echo=echo)
    _script("build-node.sh", echo=echo, env={**os.environ, ENV_NODE_BIN: str(node_bin_dir())})
    _script("build-images.sh", str(node.images), echo=echo)
    echo(f"[testbed] real node: packages, kubelet and images ready ({time.monotonic() - t:.1f}s)")
    if any(name.startswith(BRIDGE) for name in hoststate.links()):
        raise TestbedError(f"--real-node: a {BRIDGE} bridge exists already (another real-node testbed?)")
    node.before.write_text(json.dumps(hoststate.capture(), indent=1) + "\n")
    return nodes


def bridge_owner() -> Path | None:
    """The state directory of the testbed whose bridge this host has, when it has one that says so."""
    try:
        alias = Path(f"/sys/class/net/{BRIDGE}/ifalias").read_text().strip()
    except OSError:
        return None
    return Path(alias) if alias.startswith("/") else None


def apiserver_flags(pki: Pki, node: NodeLayout) -> list[str]:
    crt, key = node.root / "apiserver-kubelet-client.crt", node.root / "apiserver-kubelet-client.key"
    return [
        # The kubelet registers its hostname too; the apiserver would try to resolve it.
        "--kubelet-preferred-address-types=InternalIP",
        f"--kubelet-client-certificate={crt}",
        f"--kubelet-client-key={key}",
        f"--kubelet-certificate-authority={pki.ca_cert}",
    ]


def issue_certificates(pki: Pki, nodes: list[NodeLayout]) -> None:
    user, groups = _APISERVER_KUBELET_CLIENT
    first = nodes[0]
    issue_leaf(pki, first.root / "apiserver-kubelet-client", common_name=user, organizations=groups, server=False)
    for node in nodes:
        # The Node authorizer and NodeRestriction know a kubelet by this name and group.
        issue_leaf(
            pki,
            node.root / "kubelet-client",
            common_name=f"system:node:{node.name}",
            organizations=("system:nodes",),
            server=False,
        )
        issue_leaf(
            pki,
            node.root / "kubelet-serving",
            common_name=node.name,
            server=True,
            dns_names=(node.name,),
            ips=(node.ip,),
        )


def setup_network(apiserver_port: int, nodes: list[NodeLayout] | None = None, owner: Path | None = None) -> None:
    """The bridge with the nodes' addresses, and the `kubernetes` Service DNAT for pods on it."""
    _run(["ip", "link", "add", BRIDGE, "type", "bridge"], "creating the bridge")
    if owner is not None:
        # The bridge names its testbed, so that one left behind by a killed run can be found and taken down.
        _run(["ip", "link", "set", "dev", BRIDGE, "alias", str(owner)], "naming the bridge's testbed")
    # real-1's address first: it is the primary one, which the CNI bridge plugin (isGateway) finds as the
    # gateway it expects; it would refuse a bridge whose first IPv4 address is another one.
    _run(["ip", "addr", "add", f"{NODE_IP}/24", "dev", BRIDGE], "addressing the bridge")
    for node in (nodes or [])[1:]:
        _run(["ip", "addr", "add", f"{node.ip}/24", "dev", BRIDGE], f"adding {node.name}'s address to the bridge")
    _run(["ip", "link", "set", BRIDGE, "up"], "bringing the bridge up")
    # Only for packets arriving on this bridge; goes away with it.
    Path(f"/proc/sys/net/ipv4/conf/{BRIDGE}/route_localnet").write_text("1\n")
    _run(["iptables", "-t", "nat", "-N", NAT_CHAIN], "creating the nat chain")
    _run(
        [
            "iptables",
            "-t",
            "nat",
            "-A",
            NAT_CHAIN,
            "-d",
            f"{KUBERNETES_SERVICE_IP}/32",
            "-p",
            "tcp",
            "--dport",
            "443",
            "-j",
            "DNAT",
            "--to-destination",
            f"127.0.0.1:{apiserver_port}",
        ],
        "adding the DNAT rule",
    )
    _run(["iptables", "-t", "nat", "-A", "PREROUTING", "-i", BRIDGE, "-j", NAT_CHAIN], "hooking the nat chain")


# --- starting (after the control plane is up) --------------------------------------------------------


def _containerd_config(node: NodeLayout) -> str:
    c = node.root / "containerd"
    return f"""version = 2
root = "{c / "root"}"
state = "{c / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{node.socket}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{c / "opt"}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # Sandboxes ask for oom_score_adj -998; root here lacks CAP_SYS_RESOURCE, so runc would fail.
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{node.cni_conf_dir}"
"""


def _cni_config(node: NodeLayout) -> dict[str, Any]:
    first, last = node.pod_range()
    return {
        "cniVersion": "0.4.0",
        "name": "mpijob-testbed",
        "type": "bridge",
        "bridge": BRIDGE,
        "isGateway": True,
        "ipMasq": False,  # pods talk to the host and each other only: no masquerade chains
        "hairpinMode": True,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": POD_SUBNET, "rangeStart": first, "rangeEnd": last, "gateway": NODE_IP}]],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": str(node.root / "cni" / "ipam"),
        },
    }


def _kubelet_config(node: NodeLayout, pki: Pki, port: int, healthz_port: int) -> dict[str, Any]:
    config: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node.ip,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "tlsCertFile": str(node.root / "kubelet-serving.crt"),
        "tlsPrivateKeyFile": str(node.root / "kubelet-serving.key"),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki.ca_cert)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{node.socket}",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,  # the host has v1 controllers only
        "failSwapOn": False,
        "podLogsDir": str(node.root / "pod-logs"),
        "volumePluginDir": str(node.root / "volume-plugins"),
        "staticPodPath": "",
        "makeIPTablesUtilChains": False,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "registerWithTaints": [{"key": REAL_NODE_TAINT, "value": "true", "effect": "NoSchedule"}],
        "serializeImagePulls": False,
        "resolvConf": "/etc/resolv.conf",
        # Pods resolve cluster names through the testbed's CoreDNS (clusterdns.py), on the bridge's gateway.
        "clusterDNS": [NODE_IP],
        "clusterDomain": clusterdns.CLUSTER_DOMAIN,
        "maxPods": 20,
    }
    if node.cgroup_root:
        config["cgroupRoot"] = node.cgroup_root
    return config


def _create_cgroup_root(node: NodeLayout) -> None:
    """The kubelet refuses a cgroupRoot that does not exist: make it under every v1 hierarchy (the cgroup2
    `unified` mount of a hybrid host is not used by a v1 kubelet). `down` removes it (hoststate)."""
    if node.cgroup_root is None:
        return
    base = Path("/sys/fs/cgroup")
    for controller in sorted(base.iterdir()):
        if not controller.is_dir() or controller.is_symlink() or controller.name == "unified":
            continue
        d = controller / node.cgroup_root.lstrip("/")
        d.mkdir(exist_ok=True)
        if controller.name.startswith("cpuset") or (controller / "cpuset.cpus").exists():
            # A new v1 cpuset starts empty, and a cgroup without cpus or mems cannot take tasks.
            for f in ("cpuset.cpus", "cpuset.mems"):
                with contextlib.suppress(OSError):
                    (d / f).write_text((controller / f).read_text())


def start_dns(layout: Layout, echo: Echo) -> dict[str, int]:
    """The cluster's DNS, once for all real nodes (they share the bridge it listens on)."""
    return clusterdns.start(layout, coredns_binary(), NODE_IP, echo)


def start(layout: Layout, pki: Pki, server: str, rest: Rest, echo: Echo, index: int = 1) -> dict[str, Any]:
    """Start a node's containerd, import the images, start its kubelet and wait until the node is Ready."""
    node = node_layout(layout, index)
    containerd, kubelet = node.component("containerd"), node.component("kubelet")
    t = time.monotonic()
    node.socket.parent.mkdir(parents=True, exist_ok=True)
    node.cni_conf_dir.mkdir(parents=True, exist_ok=True)
    node.containerd_config.write_text(_containerd_config(node))
    (node.cni_conf_dir / "10-mpijob-testbed.conf").write_text(json.dumps(_cni_config(node), indent=2) + "\n")
    pid = processes.spawn(
        [str(CONTAINERD), f"--config={node.containerd_config}", "--log-level=warn"],
        log_path=layout.log(containerd),
        pid_path=layout.pid(containerd),
    )
    until_healthy(
        lambda: _ctr(node, "version", check=False) is not None,
        what="containerd to answer `ctr version`",
        name=containerd,
        pid=pid,
        log=layout.log(containerd),
        timeout=30,
        echo=echo,
        interval=0.3,
    )
    images = node_layout(layout).images  # built once, in real-1's directory
    for image, name in ((PAUSE_IMAGE, "pause"), (LAUNCHER_IMAGE, "launcher")):
        nodeimages.import_archive(node.socket, read_archive(images / f"{name}.tar"), image)
    echo(f"[testbed] {node.name}: containerd ready, images imported ({time.monotonic() - t:.1f}s)")
    _create_cgroup_root(node)

    port, healthz = free_ports(2)
    write_kubeconfig(
        node.kubeconfig,
        kubeconfig_dict(
            server,
            ca=pki.ca_cert,
            cert=node.root / "kubelet-client.crt",
            key=node.root / "kubelet-client.key",
            user=f"system:node:{node.name}",
            embed=False,
        ),
    )
    node.kubelet_config.write_text(json.dumps(_kubelet_config(node, pki, port, healthz), indent=2) + "\n")
    argv = [
        str(kubelet_binary()),
        f"--config={node.kubelet_config}",
        f"--kubeconfig={node.kubeconfig}",
        f"--root-dir={node.kubelet_dir}",
        f"--cert-dir={node.root / 'kubelet-pki'}",
        f"--hostname-override={node.name}",
        f"--node-ip={node.ip}",
        f"--node-labels={REAL_NODE_LABEL}=true,type=real",
        "--v=1",
    ]
    pid = processes.spawn(argv, log_path=layout.log(kubelet), pid_path=layout.pid(kubelet))

    def ready() -> bool:
        code, body = rest.get(f"/api/v1/nodes/{node.name}")
        if code != 200:
            return False
        conditions = body.get("status", {}).get("conditions") or []
        taints = [t.get("key") for t in body.get("spec", {}).get("taints") or []]
        # Schedulable too: the node-lifecycle controller removes its not-ready taint a moment after Ready.
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions) and taints == [
            REAL_NODE_TAINT
        ]

    what = f"node {node.name} to be Ready and schedulable"
    until_healthy(
        ready, what=what, name=kubelet, pid=pid, log=layout.log(kubelet), timeout=120, echo=echo, interval=0.3
    )
    echo(f"[testbed] real node {node.name} Ready ({time.monotonic() - t:.1f}s, kubelet log {layout.log(kubelet)})")
    return {"name": node.name, "ip": node.ip, "kubelet_port": port, "healthz_port": healthz}


def _ctr(node: NodeLayout, *args: str, check: bool = True, timeout: float = 120) -> str | None:
    return nodeimages.ctr(node.socket, *args, check=check, timeout=timeout)


# --- stopping and putting the host back ------------------------------------------------------------


def has_node(layout: Layout) -> bool:
    return node_layout(layout).before.exists()


def _delete_pods(rest: Rest, nodes: list[NodeLayout], echo: Echo) -> None:
    """Let the kubelets tear their pods down properly (CNI DEL, netns removal) before they are stopped: every
    node's pods are deleted first, then one wait covers them all (30 s at most in all, not per node). A grace
    period of 1 s, not 0: a pod removed at once is killed by its kubelet with the pod's own grace period (its
    preStop sleep run in full), one with a deletion grace period with that one."""
    for node in nodes:
        with contextlib.suppress(Exception):  # then its containers are killed in _stop_node
            code, body = rest.get(f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node.name}")
            for pod in body.get("items", []) if code == 200 else []:
                meta = pod["metadata"]
                rest.delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}?gracePeriodSeconds=1")
    deadline = time.monotonic() + 30
    waiting = list(nodes)
    while waiting and time.monotonic() < deadline:
        waiting = [n for n in waiting if (tasks := _ctr(n, "tasks", "ls", "-q", check=False)) is None or tasks.split()]
        if waiting:
            time.sleep(0.5)
    for node in waiting:
        echo(f"[testbed] real node {node.name}: containers still running after 30 s; killing them")


# Where the nodes mount, besides their state directory (containerd's root and state are in it): the kubelet's
# root, pods' network namespaces, containerd's sockets.
NODE_MOUNT_ROOTS = ("/run/netns", "/var/run/netns", "/var/lib/kubelet", "/run/containerd")


def own_mounts(*state_dirs: Path) -> tuple[str, ...]:
    """The mount roots a real-node testbed at `state_dirs` may leave behind (what `down` undoes and checks)."""
    return (*(str(d) for d in state_dirs), *NODE_MOUNT_ROOTS)


def stop(layout: Layout, rest: Rest | None, echo: Echo) -> list[str]:
    """Stop the nodes and put the host back as recorded; returns what still differs (empty = clean)."""
    before: dict[str, Any] = json.loads(node_layout(layout).before.read_text())
    nodes = node_layouts(layout)
    if rest is not None:
        with contextlib.suppress(Exception):
            _delete_pods(rest, [n for n in nodes if _running(layout, n)], echo)
    for node in nodes:
        _stop_node(layout, node, echo)
    clusterdns.stop(layout, coredns_binary(), echo)
    # Shims run in sessions of their own and outlive containerd; their command line names our socket.
    for pid in processes.find_processes(
        f"{layout.root}{os.sep}", (SHIM, "containerd", "kubelet", clusterdns.COMPONENT)
    ):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    undone = hoststate.remove_cgroups(before)
    undone += hoststate.unmount_new(before, own_mounts(layout.root))
    undone += hoststate.delete_links(before)
    undone += hoststate.restore_iptables(before)
    undone += hoststate.restore_sysctls(before)
    undone += hoststate.remove_new_paths(before)
    for item in undone:
        echo(f"[testbed] real node: undid {item}")
    left = hoststate.differences(before, hoststate.capture(), mounts_under=own_mounts(layout.root))
    for item in left:
        echo(f"[testbed] real node: host still differs: {item}")
    return left


def _running(layout: Layout, node: NodeLayout) -> bool:
    """Both the node's kubelet and its containerd run (so its pods can be torn down through the API)."""
    kubelet_pid = processes.read_pid(layout.pid(node.component("kubelet")))
    containerd_pid = processes.read_pid(layout.pid(node.component("containerd")))
    return (
        kubelet_pid is not None
        and processes.is_running(kubelet_pid, kubelet_binary())
        and containerd_pid is not None
        and processes.is_running(containerd_pid, CONTAINERD)
    )


def _stop_node(layout: Layout, node: NodeLayout, echo: Echo) -> None:
    kubelet, containerd = node.component("kubelet"), node.component("containerd")
    kubelet_pid = processes.read_pid(layout.pid(kubelet))
    containerd_pid = processes.read_pid(layout.pid(containerd))
    containerd_alive = containerd_pid is not None and processes.is_running(containerd_pid, CONTAINERD)
    if kubelet_pid is not None and processes.stop_group(kubelet_pid, kubelet_binary()):
        echo(f"[testbed] stopped {kubelet} (pid {kubelet_pid})")
    layout.pid(kubelet).unlink(missing_ok=True)
    if containerd_alive:
        for task in (_ctr(node, "tasks", "ls", "-q", check=False) or "").split():
            _ctr(node, "tasks", "kill", "--signal", "SIGKILL", task, check=False)
            _ctr(node, "tasks", "delete", "--force", task, check=False)
        for container in (_ctr(node, "containers", "ls", "-q", check=False) or "").split():
            _ctr(node, "containers", "delete", container, check=False)
    if containerd_pid is not None and processes.stop_group(containerd_pid, CONTAINERD):
        echo(f"[testbed] stopped {containerd} (pid {containerd_pid})")
    layout.pid(containerd).unlink(missing_ok=True)
