"""The five long-running processes of a testbed and the exact command line of each."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mpijob_testbed.certs import ClientIdentity, Pki
from mpijob_testbed.paths import Layout

# Start order; `down` stops them in reverse.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
# First address of the service range: the `kubernetes` Service, so it belongs in the serving certificate.
KUBERNETES_SERVICE_IP = "10.96.0.1"
# kwok's fallback pool for pods on nodes without spec.podCIDR (the testbed's own nodes have one each).
KWOK_POD_CIDR = "10.244.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_ANNOTATION_VALUE = "fake"

# What kube-controller-manager runs: the controllers the operator's behaviour depends on (ownership,
# Jobs, node health and taints, namespaces, service accounts, PDBs, endpoints) plus the ones needed for
# ordinary workloads and aggregated RBAC roles to behave as on a real cluster.
CONTROLLERS = (
    "garbage-collector-controller",
    "job-controller",
    "node-lifecycle-controller",
    "taint-eviction-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "ttl-after-finished-controller",
    "pod-garbage-collector-controller",
    "endpointslice-controller",
    "disruption-controller",
    "clusterrole-aggregation-controller",
    "replicaset-controller",
    "deployment-controller",
    "statefulset-controller",
    # Binds PersistentVolumeClaims (a ReadWriteMany claim for checkpoints, examples/restart-from-checkpoint.yaml).
    "persistentvolume-binder-controller",
)

# Client certificate identities. The controller manager and scheduler get their standard users, whose
# RBAC roles the API server bootstraps. kwok updates status of many nodes and their pods, which the Node
# authorizer would confine to one node per identity, so it runs as a cluster admin like the user does.
CLIENTS = {
    "admin": ClientIdentity("mpijob-testbed-admin", ("system:masters",)),
    "kube-controller-manager": ClientIdentity("system:kube-controller-manager"),
    "kube-scheduler": ClientIdentity("system:kube-scheduler"),
    "kwok": ClientIdentity("kwok-controller", ("system:masters",)),
}


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    kwok: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Ports:
        return cls(**{k: int(v) for k, v in data.items()})


def apiserver_url(ports: Ports) -> str:
    return f"https://127.0.0.1:{ports.apiserver}"


def health_url(component: str, ports: Ports) -> str:
    """The endpoint that answers 200 once `component` works (the API server's /readyz covers etcd too)."""
    return {
        "etcd": f"http://127.0.0.1:{ports.etcd_client}/health",
        "kube-apiserver": f"https://127.0.0.1:{ports.apiserver}/readyz",
        "kube-controller-manager": f"https://127.0.0.1:{ports.controller_manager}/healthz",
        "kube-scheduler": f"https://127.0.0.1:{ports.scheduler}/healthz",
        "kwok": f"http://127.0.0.1:{ports.kwok}/healthz",
    }[component]


def _audit_flags(layout: Layout) -> list[str]:
    """Opt-in audit log (bench/compare.py counts each operator's API requests with it): the policy file
    named by MPIJOB_TESTBED_AUDIT_POLICY, the log in the state directory. Off by default: it costs CPU."""
    policy = os.environ.get("MPIJOB_TESTBED_AUDIT_POLICY")
    if not policy:
        return []
    return [f"--audit-policy-file={policy}", f"--audit-log-path={layout.root / 'audit.log'}", "--audit-log-maxsize=0"]


def command(
    component: str, *, bin_dir: Path, layout: Layout, pki: Pki, ports: Ports, extra: Sequence[str] = ()
) -> list[str]:
    """argv of `component`; argv[0] is the absolute binary path, which is how its process is recognised.
    `extra` flags are appended (the API server's kubelet flags when a real node joins)."""
    return [*_command(component, bin_dir=bin_dir, layout=layout, pki=pki, ports=ports), *extra]


def _serving_component(binary: str, kubeconfig: Path, port: int, pki: Pki) -> list[str]:
    """The flags kube-controller-manager and kube-scheduler share: their identity, HTTPS on loopback with the
    testbed's serving certificate, no leader election (one instance each)."""
    return [
        binary,
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--tls-cert-file={pki.serving_cert}",
        f"--tls-private-key-file={pki.serving_key}",
        "--leader-elect=false",
    ]


def _command(component: str, *, bin_dir: Path, layout: Layout, pki: Pki, ports: Ports) -> list[str]:
    binary = str(bin_dir / component)
    if component == "etcd":
        client = f"http://127.0.0.1:{ports.etcd_client}"
        peer = f"http://127.0.0.1:{ports.etcd_peer}"
        return [
            binary,
            "--name=testbed",
            f"--data-dir={layout.etcd_data}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=testbed={peer}",
            "--initial-cluster-state=new",
            # The data is disposable (`up` never reuses a stopped testbed's data), so skip fsync for speed.
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]
    if component == "kube-apiserver":
        return [
            binary,
            f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # Loopback may not be published as the `kubernetes` Service endpoint; nothing in the testbed
            # reaches the API server through that Service (fake pods run no code), so publish none.
            "--endpoint-reconciler-type=none",
            f"--secure-port={ports.apiserver}",
            f"--cert-dir={layout.pki}",
            f"--tls-cert-file={pki.apiserver_cert}",
            f"--tls-private-key-file={pki.apiserver_key}",
            f"--client-ca-file={pki.ca_cert}",
            # A front-proxy trust that no certificate satisfies (no "front-proxy-client" is ever issued):
            # it only stops the controller manager and scheduler from logging a missing CA bundle forever.
            f"--requestheader-client-ca-file={pki.ca_cert}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            "--profiling=false",
            *_audit_flags(layout),
        ]
    if component == "kube-controller-manager":
        return [
            *_serving_component(binary, layout.component_kubeconfig(component), ports.controller_manager, pki),
            f"--controllers={','.join(CONTROLLERS)}",
            # Each controller acts as its own kube-system service account, as on kubeadm clusters, so the
            # bootstrapped per-controller RBAC roles are exercised.
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki.sa_key}",
            f"--root-ca-file={pki.ca_cert}",
            "--cluster-name=mpijob-testbed",
            # Faster than the defaults (20/30) so bursts of pods in tests are not throttled client-side.
            "--kube-api-qps=100",
            "--kube-api-burst=200",
            "--profiling=false",
        ]
    if component == "kube-scheduler":
        return [
            *_serving_component(binary, layout.component_kubeconfig(component), ports.scheduler, pki),
            "--profiling=false",
        ]
    if component == "kwok":
        return [
            binary,
            f"--kubeconfig={layout.component_kubeconfig(component)}",
            f"--config={layout.kwok_config}",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE}",
            f"--server-address=127.0.0.1:{ports.kwok}",
            f"--cidr={KWOK_POD_CIDR}",
            "--node-ip=10.0.0.1",
            # Renew a Lease per node in kube-node-lease like a kubelet (every 10 s for 40 s leases); the
            # node-lifecycle controller treats a renewal as a heartbeat.
            "--node-lease-duration-seconds=40",
        ]
    raise ValueError(f"unknown component {component!r}")
