"""Cluster DNS for the real nodes: CoreDNS (built from its Go module by testbed/build-node.sh) with the
`kubernetes` plugin and the standard kubeadm Corefile, as a host process like the control plane's components.

It listens on the pod bridge's gateway address (real-1's InternalIP), which every pod routes to directly, and
the kubelets point pods at it (`clusterDNS`, `clusterDomain: cluster.local`), so a pod's /etc/resolv.conf is
what a cluster's kubelet writes (`search <ns>.svc.cluster.local svc.cluster.local cluster.local`, `ndots:5`).
The testbed runs no kube-proxy (one DNAT rule stands in for the `kubernetes` Service alone), so there is no
`kube-dns` Service address in front of it: the records, caching and readiness semantics are CoreDNS's own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from mpijob_testbed import processes
from mpijob_testbed.errors import TestbedError
from mpijob_testbed.kubeconfigs import CONTEXT_NAME
from mpijob_testbed.paths import Layout
from mpijob_testbed.ports import free_ports
from mpijob_testbed.waiting import until_http_ok

Echo = Callable[[str], None]

COMPONENT = "coredns"
CLUSTER_DOMAIN = "cluster.local"
# kubeadm's `cache 30` and the kubernetes plugin's `ttl 30`: what a user's cluster caches.
CACHE_SECONDS = 30


def corefile(bind_ip: str, kubeconfig: Path, health_port: int, ready_port: int, metrics_port: int) -> str:
    """kubeadm's default Corefile, bound to `bind_ip`, reading the API with `kubeconfig` (CoreDNS runs outside
    the cluster). Not carried over: `loop` (the host's resolver is not this CoreDNS, so no loop can form),
    `reload` (the file never changes while it runs) and health's `lameduck 5s` (answering 5 s past SIGTERM lets
    a rolling update drain; this CoreDNS stops only at `down`, which it would hold up by 5 s)."""
    return f""".:53 {{
    bind {bind_ip}
    errors
    health 127.0.0.1:{health_port}
    ready 127.0.0.1:{ready_port}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
       kubeconfig {kubeconfig} {CONTEXT_NAME}
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl {CACHE_SECONDS}
    }}
    prometheus 127.0.0.1:{metrics_port}
    forward . /etc/resolv.conf {{
       max_concurrent 1000
    }}
    cache {CACHE_SECONDS}
    loadbalance
}}
"""


def start(layout: Layout, binary: Path, bind_ip: str, echo: Echo, timeout: float = 60) -> dict[str, int]:
    """Start CoreDNS on `bind_ip`:53 and wait until /ready answers 200 (the kubernetes plugin has synced)."""
    if not binary.is_file():
        raise TestbedError(f"{binary} is missing; run `bash testbed/build-node.sh`")
    health, ready, metrics = free_ports(3)
    directory = layout.root / COMPONENT
    directory.mkdir(exist_ok=True)
    conf = directory / "Corefile"
    conf.write_text(corefile(bind_ip, layout.kubeconfig, health, ready, metrics))
    t = time.monotonic()
    pid = processes.spawn(
        [str(binary), "-conf", str(conf)], log_path=layout.log(COMPONENT), pid_path=layout.pid(COMPONENT)
    )
    url = f"http://127.0.0.1:{ready}/ready"
    until_http_ok(url, name=COMPONENT, pid=pid, log=layout.log(COMPONENT), timeout=timeout, echo=echo)
    echo(f"[testbed] cluster DNS: CoreDNS on {bind_ip}:53 ready ({time.monotonic() - t:.1f}s, {CLUSTER_DOMAIN})")
    return {"health_port": health, "ready_port": ready, "metrics_port": metrics}


def stop(layout: Layout, binary: Path, echo: Echo) -> None:
    pid = processes.read_pid(layout.pid(COMPONENT))
    if pid is not None and processes.stop_group(pid, binary):
        echo(f"[testbed] stopped {COMPONENT} (pid {pid})")
    layout.pid(COMPONENT).unlink(missing_ok=True)
