"""One real node (containerd + a kubelet built from the testbed's Go module) beside kwok nodes.

Everything here runs real processes: a pod's in-cluster client, `kubectl logs/exec`, and the launcher of an
elastic MPIJob (made by the real operator) running the generated discover_hosts.sh every second the way
Horovod's driver does. The module starts its own testbed (`up(real_node=True)` in a short temporary
directory), records the host before, and its last test proves `down` put the host back. A module that sets
`REAL_NODES = 2` (the Horovod module) gets real-1 and real-2 from the same fixture.

Skipped with the reason when the machine cannot run a real node (not root, no cgroups, no apt, Debian's
packages not installable) or when MPIJOB_SKIP_REAL_NODE=1; in CI (`CI=true`) and with MPIJOB_REQUIRE_REAL_NODE=1
(`make e2e`) that is a failure instead (cannot_run.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kube import Kube, eventually, mpijob
from kubernetes_asyncio.client import ApiClient, CoreV1Api
from operator_harness import OperatorProcess
from real_node import (
    ON_REAL_NODE,
    assert_down_leaves_the_host_as_found,
    host_as_found,
    kubectl,
    processes_named,
    record,
)

from mpijob.api import constants as c
from mpijob_testbed import SPOT_ITN_TAINT, cluster, create_node, delete_node, hoststate, processes, realnode, taint_node
from mpijob_testbed.nodes import spread_over
from mpijob_testbed.paths import resolve_bin_dir

pytestmark = [pytest.mark.integration, pytest.mark.realnode]

Obj = dict[str, Any]


async def pod_phase(kube: Kube, name: str) -> str:
    pod = await kube.get("v1", "Pod", name)
    return str(((pod or {}).get("status") or {}).get("phase") or "")


# -- 1. the node ---------------------------------------------------------------------------------------------


async def test_real_node_joins_beside_the_kwok_nodes_tainted_so_only_opted_in_pods_land_there(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]], rn_api: ApiClient
) -> None:
    tb = real_testbed[0]
    nodes = {n.metadata.name: n for n in (await CoreV1Api(rn_api).list_node()).items}
    assert {"node-1", "node-2", realnode.NODE_NAME} <= set(nodes)
    real = nodes[realnode.NODE_NAME]
    assert real.status.node_info.kubelet_version == "v1.37.2"
    assert real.status.node_info.container_runtime_version.startswith("containerd://")
    assert {"type": "InternalIP", "address": realnode.NODE_IP} in [a.to_dict() for a in real.status.addresses]
    assert [t.key for t in real.spec.taints or []] == [realnode.REAL_NODE_TAINT]
    assert "kwok.x-k8s.io/node" not in (real.metadata.annotations or {})
    assert realnode.NODE_NAME in kubectl(tb, "get", "nodes", "-l", f"{realnode.REAL_NODE_LABEL}=true", "-o", "name")


async def test_pod_on_the_real_node_uses_in_cluster_config_and_kubectl_logs_and_exec_work(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]], rn_kube: Kube
) -> None:
    tb, kube = real_testbed[0], rn_kube
    ns = kube.ns
    # The pod's own ServiceAccount may list pods in its namespace, nothing else.
    await kube.client.create(
        f"/api/v1/namespaces/{ns}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "lister", "namespace": ns}},
    )
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}"
    await kube.client.create(
        f"{rbac}/roles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "lister", "namespace": ns},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
        },
    )
    await kube.client.create(
        f"{rbac}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "lister", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lister"},
            "subjects": [{"kind": "ServiceAccount", "name": "lister", "namespace": ns}],
        },
    )
    # What client libraries do for in-cluster config: env, token and CA from the kubelet's projected mount.
    script = """
import json, os, ssl, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
ns = open(sa + "/namespace").read()
req = urllib.request.Request(f"https://{host}:{port}/api/v1/namespaces/{ns}/pods",
    headers={"Authorization": "Bearer " + open(sa + "/token").read()})
body = json.load(urllib.request.urlopen(req, context=ssl.create_default_context(cafile=sa + "/ca.crt")))
print("pods:", " ".join(sorted(p["metadata"]["name"] for p in body["items"])))
print("server:", host, port)
"""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "in-cluster", "namespace": ns},
        "spec": {
            **ON_REAL_NODE,
            "serviceAccountName": "lister",
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": realnode.LAUNCHER_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", f"python3 -c '{script}' && exec sleep 3600"],
                }
            ],
        },
    }
    await kube.client.create(f"/api/v1/namespaces/{ns}/pods", pod)
    await eventually(lambda: _is(kube, "in-cluster", "Running"), within=120, what="pod Running on the real node")

    async def printed() -> str | None:
        out = kubectl(tb, "-n", ns, "logs", "in-cluster")
        return out if "pods:" in out else None

    out = await eventually(printed, within=60, what="the pod's in-cluster API call")
    assert "pods: in-cluster" in out, out
    assert "server: 10.96.0.1 443" in out, out
    assert kubectl(tb, "-n", ns, "exec", "in-cluster", "--", "cat", "/etc/hostname").strip() == "in-cluster"


def _dns_pod(ns: str, name: str, *, ready: bool) -> Obj:
    probe = ["true"] if ready else ["false"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": "dns"}},
        "spec": {
            **ON_REAL_NODE,
            "hostname": name,
            "subdomain": "web",
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": realnode.LAUNCHER_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "3600"],
                    "readinessProbe": {"exec": {"command": probe}, "periodSeconds": 1},
                }
            ],
        },
    }


async def test_pods_resolve_headless_service_names_and_the_api_through_cluster_dns(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]], rn_kube: Kube
) -> None:
    """CoreDNS (the testbed's cluster DNS): a Ready pod of a headless Service resolves under
    <pod>.<service>.<ns>.svc[.cluster.local], a pod that is not Ready does not (no endpoint, no record), and
    kubernetes.default.svc is the API's Service address; the kubelet writes the cluster's resolv.conf."""
    tb, kube = real_testbed[0], rn_kube
    ns = kube.ns
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {"clusterIP": "None", "selector": {"app": "dns"}},
    }
    await kube.client.create(f"/api/v1/namespaces/{ns}/services", service)
    for name, ready in (("up", True), ("down", False)):
        await kube.client.create(f"/api/v1/namespaces/{ns}/pods", _dns_pod(ns, name, ready=ready))
    for name in ("up", "down"):
        await eventually(lambda n=name: _is(kube, n, "Running"), within=120, what=f"pod {name} Running")
    ip = (await kube.get("v1", "Pod", "up"))["status"]["podIP"]

    def getent(name: str) -> tuple[int, str]:
        out = subprocess.run(
            [str(resolve_bin_dir(None) / "kubectl"), "--kubeconfig", str(tb.kubeconfig), "-n", ns, "exec", "up",
             "--", "getent", "ahostsv4", name],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        return out.returncode, out.stdout

    async def resolves(name: str, want: str) -> bool:
        code, out = getent(name)
        return code == 0 and {line.split()[0] for line in out.splitlines()} == {want}

    for name in (f"up.web.{ns}.svc", f"up.web.{ns}.svc.cluster.local"):
        await eventually(lambda n=name: resolves(n, ip), within=60, what=f"{name} -> {ip}")
    assert await resolves("kubernetes.default.svc", "10.96.0.1")
    # Not Ready: no endpoint, so no record (exit 2: not found), as on any cluster without publishNotReadyAddresses.
    assert getent(f"down.web.{ns}.svc")[0] == 2
    resolv = kubectl(tb, "-n", ns, "exec", "up", "--", "cat", "/etc/resolv.conf")
    assert f"search {ns}.svc.cluster.local svc.cluster.local cluster.local" in resolv, resolv
    assert f"nameserver {realnode.NODE_IP}" in resolv, resolv


async def _is(kube: Kube, pod: str, phase: str) -> bool:
    return await pod_phase(kube, pod) == phase


# -- 2. the launcher's view ------------------------------------------------------------------------------------

# Horovod's driver runs the discovery script once a second (DISCOVER_HOSTS_FREQUENCY_SECS = 1.0), synchronously.
# `--explain` adds which source answered (stderr, which `kubectl logs` shows too).
DISCOVERY_LOOP = (
    'while true; do echo "@ $(date +%s.%N)"; '
    f'sh {c.CONFIG_MOUNT_PATH}/{c.DISCOVER_HOSTS_KEY} --explain || echo "! exit $?"; sleep 1; done'
)
HOST_LINE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*:[0-9]+$")


@dataclass
class View:
    at: float
    hosts: list[str] = field(default_factory=list)
    source: str = ""


def launcher_views(log: str) -> list[View]:
    """One View per completed run of discover_hosts.sh in the launcher's log (the run still being printed is
    left out)."""
    views: list[View] = []
    for line in log.splitlines():
        if line.startswith("@ "):
            views.append(View(float(line[2:])))
        elif line.startswith("! exit"):
            raise AssertionError(f"discover_hosts.sh failed in the launcher: {line}")
        elif views and line.startswith("source: "):
            views[-1].source = line[len("source: ") :]
        elif views and HOST_LINE.match(line.strip()):
            views[-1].hosts.append(line.strip().split(".", 1)[0])
    return [v for v in views[:-1] if v.source]


def elastic_job_on_real_launcher(
    name: str, worker_nodes: list[str], *, workers: int = 4, discovery: str = "API", env: list[Obj] | None = None
) -> Obj:
    spread = {"e2e.mpijob.io/spread": name}
    return mpijob(
        name,
        workers=workers,
        elastic={
            "minReplicas": 1,
            "maxReplicas": 8,
            "nodeTerminationPolicy": "ScaleIn",
            # Long, so the victims are still Running (only out of discovery) while the launcher is watched.
            "scaleInGracePeriodSeconds": 300,
            "hostDiscovery": discovery,
            # These tests watch the shrink alone: with regrow (on by default) probes would bind on the untainted
            # kwok node and be listed beside the keepers. Regrow has its own tests (test_elastic_regrow.py).
            "regrow": {"enabled": False},
        },
        worker_template={
            "metadata": {"labels": spread},
            "spec": {
                "containers": [{"name": "worker", "image": "mpioperator/mpi-pi:openmpi"}],
                **spread_over(worker_nodes, spread),
            },
        },
        launcher_template={
            "spec": {
                **ON_REAL_NODE,
                "containers": [
                    {
                        "name": "launcher",
                        "image": realnode.LAUNCHER_IMAGE,
                        "imagePullPolicy": "Never",
                        "command": ["sh", "-c", DISCOVERY_LOOP],
                        "env": env or [],
                    }
                ],
            }
        },
    )


async def _pods(kube: Kube, role: str) -> list[Obj]:
    path = f"/api/v1/namespaces/{kube.ns}/pods?labelSelector={c.LABEL_JOB_ROLE}%3D{role}"
    items: list[Obj] = (await kube.client.get(path))["items"]
    return items


async def launcher_listing(tb: cluster.Testbed, kube: Kube, count: int) -> str:
    """The running launcher pod's name, once its own discover_hosts.sh runs list `count` workers."""

    async def listing() -> str | None:
        running = [p for p in await _pods(kube, c.ROLE_LAUNCHER) if p.get("status", {}).get("phase") == "Running"]
        if not running:
            return None
        name = str(running[0]["metadata"]["name"])
        views = launcher_views(kubectl(tb, "-n", kube.ns, "logs", name))
        return name if views and len(views[-1].hosts) == count else None

    found: str = await eventually(listing, within=180, what=f"the launcher listing {count} workers")
    return found


async def taint_and_watch_launcher(
    tb: cluster.Testbed, api: ApiClient, kube: Kube, *, discovery: str, env: list[Obj] | None, within: float
) -> dict[str, Any]:
    """An elastic job (4 workers on two kwok nodes, launcher on the real node); taint one node; return when
    the launcher's own discover_hosts.sh runs stop printing that node's workers."""
    short = kube.ns.rsplit("-", 1)[-1]
    nodes = [f"rn-{short}-a", f"rn-{short}-b"]
    for n in nodes:
        await create_node(api, n)
    try:
        job = "seed"
        await kube.create(elastic_job_on_real_launcher(job, nodes, discovery=discovery, env=env))

        launcher = await launcher_listing(tb, kube, 4)
        workers = await _pods(kube, c.ROLE_WORKER)
        victims = sorted(p["metadata"]["name"] for p in workers if p["spec"].get("nodeName") == nodes[1])
        keepers = sorted(p["metadata"]["name"] for p in workers if p["spec"].get("nodeName") == nodes[0])
        assert len(victims) == 2 and len(keepers) == 2

        tainted = time.time()
        await taint_node(api, nodes[1], SPOT_ITN_TAINT, effect="NoSchedule")

        async def dropped() -> tuple[View, list[View]] | None:
            views = launcher_views(kubectl(tb, "-n", kube.ns, "logs", launcher))
            for view in views:
                if view.at > tainted and not set(victims) & set(view.hosts):
                    return view, views
            return None

        seen, views = await eventually(
            dropped, within=within, interval=0.5, what="the launcher's discovery dropping the victims"
        )
        # Every run after the taint printed the four, then exactly the keepers: never an empty or partial list.
        # (Runs from before the taint may list fewer while the workers were still starting.)
        for view in (v for v in views if v.at > tainted):
            assert sorted(view.hosts) in (sorted(victims + keepers), keepers), view
        pods = {p["metadata"]["name"]: p for p in await _pods(kube, c.ROLE_WORKER)}
        # The victims are still Running when the launcher stops listing them (the graceful path).
        assert all(pods[v]["status"]["phase"] == "Running" for v in victims if v in pods)
        return {"taint_to_launcher_s": round(seen.at - tainted, 2), "source": seen.source}
    finally:
        for n in nodes:
            await delete_node(api, n)


# (hostDiscovery, launcher env, what answered): the API path; the file the kubelet projects from the launcher
# pod's annotation (the operator changes the annotation, so the kubelet re-syncs the pod at once); the
# ConfigMap volume alone (annotation file pointed elsewhere), refreshed only on the kubelet's periodic resync.
PATHS = {
    "api": ("API", None, "API"),
    "annotation": ("File", None, "file (pod annotation)"),
    "configmap-volume": (
        "File",
        [{"name": "MPIJOB_DISCOVERY_FILE", "value": "/nonexistent"}],
        "file (ConfigMap volume)",
    ),
}


@pytest.mark.parametrize("path", list(PATHS))
async def test_launcher_on_the_real_node_stops_listing_a_tainted_nodes_workers_through_each_discovery_path(
    path: str,
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],
    rn_api: ApiClient,
    rn_kube: Kube,
    rn_operator: OperatorProcess,
) -> None:
    discovery, env, source = PATHS[path]
    figures = await taint_and_watch_launcher(real_testbed[0], rn_api, rn_kube, discovery=discovery, env=env, within=150)
    record(path=path, **figures)
    # The figure is recorded, not asserted (docs/results.md); what must hold is which source answered.
    assert figures["source"].startswith(source), figures


HELD_BACK = re.compile(r"^held back: (\S+):\d+ \((.*)\)$")


def held_back_lines(log: str) -> list[tuple[float, str, str]]:
    """(run time, host name, why) of every host the launcher's discover_hosts.sh held back."""
    out, at = [], 0.0
    for line in log.splitlines():
        if line.startswith("@ "):
            at = float(line[2:])
        elif match := HELD_BACK.match(line.strip()):
            out.append((at, match.group(1).split(".", 1)[0], match.group(2)))
    return out


async def test_a_reused_worker_name_is_held_back_while_cluster_dns_still_answers_with_the_old_pod(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]], rn_api: ApiClient, rn_kube: Kube, rn_operator: OperatorProcess
) -> None:
    """The launcher (on the real node, resolving through CoreDNS with `cache 30`) runs discover_hosts.sh every
    second, so each worker's A record is in CoreDNS's cache. A worker pod lost and recreated under the same
    name (the lowest free index) has a new IP while DNS still answers with the old one: the script holds the
    name back, saying so, and prints it only from the run at which DNS answers with the new pod's address."""
    tb, kube, api = real_testbed[0], rn_kube, rn_api
    nodes = [f"rn-{kube.ns.rsplit('-', 1)[-1]}-r"]
    for n in nodes:
        await create_node(api, n)
    try:
        job = "reuse"
        body = elastic_job_on_real_launcher(job, nodes, workers=2)
        # Replace: a lost worker comes back under its own name (the lowest free index), replicas unchanged.
        body["spec"]["elasticPolicy"]["nodeTerminationPolicy"] = "Replace"
        await kube.create(body)

        launcher = await launcher_listing(tb, kube, 2)
        victim = c.worker_name(job, 1)
        old = (await kube.get("v1", "Pod", victim)) or {}
        old_uid, old_ip = old["metadata"]["uid"], old["status"]["podIP"]
        # New workers go to the real node: kwok hands its freed address out again, so a replacement on a kwok
        # node would get the old IP back (nothing for DNS to get wrong); real-1's CNI gives it a 10.250.0.x one.
        real = {
            **ON_REAL_NODE,
            "affinity": None,
            "topologySpreadConstraints": None,
            "containers": [
                {"name": "worker", "image": realnode.LAUNCHER_IMAGE, "imagePullPolicy": "Never",
                 "command": ["sleep", "3600"]}
            ],
        }  # fmt: skip
        await kube.patch_job(job, {"spec": {"mpiReplicaSpecs": {"Worker": {"template": {"spec": real}}}}})
        await asyncio.sleep(2)  # a few more runs: the record is cached
        lost = time.time()
        await kube.delete("v1", "Pod", victim, grace=0)

        async def replaced() -> Obj | None:
            pod = await kube.get("v1", "Pod", victim)
            ok = pod and pod["metadata"]["uid"] != old_uid and pod["status"].get("podIP")
            return pod if ok else None

        new = await eventually(replaced, within=60, what=f"{victim} recreated with an IP")
        new_ip = new["status"]["podIP"]
        assert new_ip != old_ip, "kwok gave the new pod the old address: nothing to tell apart"

        async def listed_again() -> tuple[float, list[View]] | None:
            views = launcher_views(kubectl(tb, "-n", kube.ns, "logs", launcher))
            back = [v.at for v in views if v.at > lost and victim in v.hosts]
            return (back[0], views) if back else None

        first_listed, _ = await eventually(listed_again, within=90, interval=1, what=f"{victim} listed again")
        held = [(at, why) for at, host, why in held_back_lines(kubectl(tb, "-n", kube.ns, "logs", launcher))
                if host == victim and at > lost]  # fmt: skip
        stale = [at for at, why in held if f"DNS answers {old_ip}, the pod is {new_ip}" in why]
        assert stale, f"no run held {victim} back for the old address {old_ip}: {held}"
        assert all(at < first_listed for at, _ in held), (held, first_listed)
        record(reused_name_held_back={"seconds": round(first_listed - stale[0], 1), "runs": len(held)})
    finally:
        for n in nodes:
            await delete_node(api, n)


async def test_a_configmap_volume_alone_waits_for_the_kubelets_periodic_resync_and_an_annotation_change_ends_it(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]], rn_kube: Kube
) -> None:
    """The kubelet mechanism under both file paths, without the operator: a pod reading a ConfigMap volume
    every 0.2 s. A ConfigMap update alone reaches the file on the pod's next periodic sync (syncFrequency 1 min,
    jittered); a pod annotation change makes the kubelet sync the pod, and rewrite its volumes, at once.
    In `make test`: an update alone is not in the file 10 s later (the pod's last sync was at its start, the
    next periodic one is 55 s or more away), and the annotation brings it at once. MPIJOB_REALNODE_SAMPLES=N
    measures both paths to the end, N times each (docs/results.md)."""
    tb, kube = real_testbed[0], rn_kube
    ns = kube.ns
    samples = int(os.environ.get("MPIJOB_REALNODE_SAMPLES", "0"))
    await kube.client.create(
        f"/api/v1/namespaces/{ns}/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "list", "namespace": ns}, "data": {"v": "0"}},
    )
    loop = 'while true; do echo "$(date +%s.%N) $(cat /c/v)"; sleep 0.2; done'
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "reader", "namespace": ns},
        "spec": {
            **ON_REAL_NODE,
            "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "c", "configMap": {"name": "list"}}],
            "containers": [
                {
                    "name": "main",
                    "image": realnode.LAUNCHER_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", loop],
                    "volumeMounts": [{"name": "c", "mountPath": "/c"}],
                }
            ],
        },
    }
    await kube.client.create(f"/api/v1/namespaces/{ns}/pods", pod)
    await eventually(lambda: _is(kube, "reader", "Running"), within=120, what="reader Running")
    # Past the start-up syncs: what a launcher that has run for a while sees.
    await asyncio.sleep(5)

    async def file_shows(value: str, since: float) -> float | None:
        for line in kubectl(tb, "-n", ns, "logs", "reader", "--tail=50").splitlines():
            at, _, seen = line.partition(" ")
            if seen == value and float(at) >= since:
                return float(at)
        return None

    if not samples:
        changed = time.time()
        await kube.client.merge_patch(f"/api/v1/namespaces/{ns}/configmaps/list", {"data": {"v": "1"}})
        await asyncio.sleep(10)
        assert await file_shows("1", changed) is None, "a ConfigMap update alone reached the file within 10 s"
        start = time.time()
        await kube.client.merge_patch(
            f"/api/v1/namespaces/{ns}/pods/reader", {"metadata": {"annotations": {"nudge": "1"}}}
        )
        seen = await eventually(lambda: file_shows("1", changed), within=60, interval=0.5, what="the file showing 1")
        record(path="kubelet-configmap-volume+annotation", seconds=round(seen - start, 2))
        return
    version = 0
    figures: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(samples):
        for nudge in (False, True):
            version += 1
            changed = time.time()
            await kube.client.merge_patch(f"/api/v1/namespaces/{ns}/configmaps/list", {"data": {"v": str(version)}})
            start = changed
            if nudge:
                await asyncio.sleep(1)  # the kubelet's ConfigMap watch has the new data by then
                start = time.time()
                await kube.client.merge_patch(
                    f"/api/v1/namespaces/{ns}/pods/reader", {"metadata": {"annotations": {"nudge": str(version)}}}
                )
            value = str(version)
            seen = await eventually(
                lambda value=value, start=start: file_shows(value, start),  # type: ignore[misc]
                within=150,
                interval=0.5,
                what=f"the file showing {version}",
            )
            figures[nudge].append(round(seen - start, 2))
            record(path="kubelet-configmap-volume" + ("+annotation" if nudge else ""), seconds=figures[nudge][-1])
    # Relative, not absolute: each annotation-triggered refresh beat every periodic one.
    assert max(figures[True]) < min(figures[False]), figures


# -- tear-down -----------------------------------------------------------------------------------------------


def test_down_leaves_the_host_as_it_found_it(real_testbed: tuple[cluster.Testbed, dict[str, Any]]) -> None:
    assert_down_leaves_the_host_as_found(real_testbed)


def test_down_after_the_kubelet_and_containerd_were_killed_still_leaves_the_host_as_found(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],
) -> None:
    """A crashed node (SIGKILL, containers still running under orphaned shims, pod mounts and netns left):
    `down` still finds and undoes everything. Runs after the module's testbed is down (one real node per host)."""
    if real_testbed[0].state_dir.exists():  # run alone (-k): the module's node must go first
        cluster.down(real_testbed[0].state_dir)
    state_dir = Path(tempfile.mkdtemp(prefix="mpijob-rn-"))
    before = host_as_found()
    tb = cluster.up(nodes=1, state_dir=state_dir, real_node=True)
    try:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "orphan", "namespace": "default"},
            "spec": {
                **ON_REAL_NODE,
                "volumes": [{"name": "m", "emptyDir": {"medium": "Memory"}}],
                "containers": [
                    {
                        "name": "main",
                        "image": realnode.LAUNCHER_IMAGE,
                        "imagePullPolicy": "Never",
                        "command": ["sleep", "3600"],
                        "volumeMounts": [{"name": "m", "mountPath": "/m"}],
                    }
                ],
            },
        }
        kubectl(tb, "create", "-f", "-", input_text=json.dumps(pod))
        kubectl(tb, "wait", "--for=condition=Ready", "pod/orphan", "--timeout=120s", timeout=130)
        for component in ("kubelet", "containerd"):
            os.kill(int((state_dir / f"{component}.pid").read_text()), 9)
        assert processes_named(realnode.SHIM), "the pod's shim outlives containerd"
    finally:
        assert cluster.down(state_dir)
    assert hoststate.differences(before, hoststate.capture(), realnode.own_mounts(state_dir)) == []
    assert not processes_named("kubelet", "containerd", realnode.SHIM)


def test_up_takes_down_a_real_node_testbed_whose_run_was_killed(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],
) -> None:
    """A run killed with its testbed up (a cancelled CI job, an ended session) leaves the host's one bridge
    behind; the next real-node `up` finds that nothing of that testbed runs, takes it down and starts."""
    if real_testbed[0].state_dir.exists():
        cluster.down(real_testbed[0].state_dir)
    before = host_as_found()
    killed = Path(tempfile.mkdtemp(prefix="mpijob-rn-"))
    cluster.up(nodes=1, state_dir=killed, real_node=True)
    for pid_file in killed.glob("*.pid"):
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid_file.read_text()), 9)
    # A killed run's processes are gone by the time the next run starts; under load a SIGKILLed process can
    # take a moment to die (a syscall in progress). Wait for that, and name any that does not die.
    deadline = time.monotonic() + 60
    while (
        left := processes.find_processes(f"{killed}{os.sep}", cluster.ALL_PROCESSES)
    ) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"processes of the killed testbed still alive after SIGKILL: {left}"
    assert realnode.bridge_owner() == killed
    fresh = Path(tempfile.mkdtemp(prefix="mpijob-rn-"))
    try:
        tb = cluster.up(nodes=1, state_dir=fresh, real_node=True)
        assert not killed.exists(), "the abandoned testbed's directory was taken down"
        assert realnode.bridge_owner() == tb.state_dir
        kubectl(tb, "wait", "--for=condition=Ready", f"node/{realnode.node_names(1)[0]}", "--timeout=60s", timeout=70)
    finally:
        for d in (fresh, killed):
            if d.exists():
                cluster.down(d)
    assert hoststate.differences(before, hoststate.capture(), realnode.own_mounts(fresh, killed)) == []
