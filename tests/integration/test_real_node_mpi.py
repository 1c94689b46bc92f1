"""The reference operator's end-to-end scenarios (kubeflow/mpi-operator v0.8.2, test/e2e) with real `mpirun`.

Two real nodes (real-1 and real-2), cluster DNS (CoreDNS), and the MPI images of testbed/build-mpi-images.sh:
OpenMPI 4.1 (Debian 12), OpenMPI 5 (Debian 13), MPICH 4.2 (Debian 13) and Intel MPI 2021.13 (PyPI's impi-rt
wheel on Debian 13), each with our `pi` program (every rank prints `rank R of N on HOST`, rank 0 `pi is
approximately 3.14159265`). Each test reads what a user reads: the MPIJob's conditions and `kubectl logs` of the
launcher. Beyond the reference's suite (which never looks at the output): the ranks ran on two distinct workers,
placed on both nodes, and `pi` printed its known value.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import reference_examples
import reference_install
import reference_operator
import yaml
from cannot_run import cannot_run
from kube import API_VERSION, Kube, eventually, has_condition, job_has, mpijob, operator_caught_up
from kubernetes_asyncio.client import ApiClient
from operator_harness import OperatorProcess
from previous_version import PREVIOUS_SOURCE  # the source of the image a `helm upgrade` starts from
from real_node import (
    ON_REAL_NODE,
    allocatable_millicores,
    example_with_image,
    kubectl,
    millicores,
    only_real_nodes,
    record,
)

# The reference's own e2e suite, run on this module's testbed, operator and images (reference_e2e.py).
from reference_e2e import (  # noqa: F401
    scheduler_plugins,
    suite_binary,
    test_the_reference_e2e_suite_passes_every_spec_the_testbed_can_host_against_mpijob,
    test_the_reference_e2e_suite_passes_the_same_specs_under_the_reference_operator_itself,
)
from reference_operator import Reference, put_reference_crd, reference_built

from mpijob.api import constants as c
from mpijob.cli.operator import install_crd
from mpijob_testbed import SPOT_ITN_TAINT, cluster, extras, realnode, taint_node, untaint_node
from mpijob_testbed.errors import TestbedError
from mpijob_testbed.load import load
from mpijob_testbed.nodes import spread_over
from mpijob_testbed.paths import repo_root, resolve_bin_dir

pytestmark = [pytest.mark.integration, pytest.mark.realnode]

Obj = dict[str, Any]
REAL_NODES = 2
IMAGES = ("openmpi4", "openmpi5", "mpich", "intelmpi")
PI = "pi is approximately 3.14159265"
RANK = re.compile(r"^rank (\d+) of (\d+) on (\S+)$", re.MULTILINE)
HOSTNAME = "kubernetes.io/hostname"
PI_BINARY = "/home/mpiuser/pi"
_TESTBED: list[cluster.Testbed] = []  # the module's testbed, for post-mortems


def image(name: str) -> str:
    return f"mpijob.local/{name}:testbed"


@pytest.fixture(scope="module")
def mpi_images(real_testbed: tuple[cluster.Testbed, dict[str, Any]]) -> dict[str, str]:
    tb = real_testbed[0]
    _TESTBED[:] = [tb]
    out = tb.state_dir / "mpi-images"
    build = subprocess.run(
        ["bash", str(repo_root() / "testbed" / "build-mpi-images.sh"), str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    if build.returncode != 0:
        cannot_run(f"the MPI images cannot be built here (exit {build.returncode}): {build.stderr[-2000:]}")
    took = {name: load(out / f"{name}.tar", name=image(name), state_dir=tb.state_dir) for name in IMAGES}
    record(mpi_image_import_s=took)
    return {name: image(name) for name in IMAGES}


def _spread(job: str) -> Obj:
    """Workers kept on the real nodes and spread one per node (so the ranks cross nodes)."""
    labels = {c.LABEL_JOB_NAME: job, c.LABEL_JOB_ROLE: c.ROLE_WORKER}
    return {"tolerations": ON_REAL_NODE["tolerations"], **spread_over(realnode.node_names(REAL_NODES), labels)}


def pi_job(
    name: str,
    img: str,
    command: str,
    *,
    implementation: str = "OpenMPI",
    workers: int = 2,
    worker: Obj | None = None,
    launcher: Obj | None = None,
    pod: Obj | None = None,
    **spec: Any,
) -> Obj:
    """The reference's pi job: workers run the operator's default sshd unless `worker` says otherwise; the
    launcher restarts on failure. The launcher is created once the workers are Ready (`launcherCreationPolicy`
    WaitForWorkersReady unless `spec` says otherwise): a launcher started before its workers' DNS records
    exist fails, and restarts only after the kubelet's back-off and CoreDNS's 30 s negative cache, 5-130 s
    of waiting per job that proves nothing the tests that keep AtStartup (the reference's suite, its
    examples, the gang test) do not."""
    spec.setdefault("launcherCreationPolicy", "WaitForWorkersReady")
    worker_container = {"name": "worker", "image": img, "imagePullPolicy": "Never", **(worker or {})}
    launcher_container = {
        "name": "launcher",
        "image": img,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", command],
        **(launcher or {}),
    }
    return mpijob(
        name,
        workers=workers,
        implementation=implementation,
        worker_template={"spec": {**_spread(name), **(pod or {}), "containers": [worker_container]}},
        launcher_template={
            "spec": {**ON_REAL_NODE, **(pod or {}), "restartPolicy": "OnFailure", "containers": [launcher_container]}
        },
        **spec,
    )


async def finished(
    kube: Kube, job: str, within: float = 240, each_poll: Callable[[], Awaitable[None]] | None = None
) -> Obj:
    """The job once it has a completionTime or is Failed (post-mortem on timeout); `each_poll` runs before
    every look, to read what is gone once the job ends."""

    async def done() -> Obj | None:
        if each_poll is not None:
            await each_poll()
        obj = await kube.job(job)
        return obj if (obj.get("status") or {}).get("completionTime") or has_condition(obj, "Failed") else None

    try:
        return await eventually(done, within=within, interval=1, what=f"MPIJob {job} finished")
    except AssertionError as err:
        raise AssertionError(f"{err}\n{await _post_mortem(kube, job)}") from None


async def _post_mortem(kube: Kube, job: str) -> str:
    """The job's status and, per pod, phase, node and the tail of its log: what a user would look at."""
    out = [f"status: {(await kube.job(job)).get('status')}"]
    for pod in await kube.list("v1", "Pod", f"{c.LABEL_JOB_NAME}={job}"):
        name = pod["metadata"]["name"]
        out.append(f"--- {name} {pod['status'].get('phase')} on {pod['spec'].get('nodeName')}")
        _, text = await kube_logs(kube, name)
        out.append(text[-2000:])
    return "\n".join(out)


async def kube_logs(kube: Kube, pod: str) -> tuple[int, str]:
    tb = _TESTBED[0]
    proc = await asyncio.create_subprocess_exec(
        str(resolve_bin_dir(None) / "kubectl"), "--kubeconfig", str(tb.kubeconfig), "-n", kube.ns, "logs", pod,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    stdout, _ = await proc.communicate()
    return proc.returncode or 0, stdout.decode(errors="replace")


def launcher_log(tb: cluster.Testbed, kube: Kube, job: str) -> str:
    pods = kubectl(tb, "-n", kube.ns, "get", "pods", "-l", f"{c.LABEL_JOB_NAME}={job},{c.LABEL_JOB_ROLE}=launcher",
                   "-o", "jsonpath={.items[*].metadata.name}").split()  # fmt: skip
    assert pods, f"no launcher pod of {job}"
    return kubectl(tb, "-n", kube.ns, "logs", pods[0])


async def assert_pi_ran_across_workers(
    tb: cluster.Testbed, kube: Kube, job: str, ranks: int, *, both_nodes: bool = True
) -> str:
    """Succeeded, every rank printed, on at least two distinct worker hosts placed on both nodes (unless the
    job does not spread its workers: `both_nodes`), pi right."""
    obj = await finished(kube, job)
    log = launcher_log(tb, kube, job)
    assert has_condition(obj, "Succeeded"), (obj.get("status"), log[-3000:])
    seen = {(int(r), int(n), host) for r, n, host in RANK.findall(log)}
    assert {r for r, _, _ in seen} == set(range(ranks)) and {n for _, n, _ in seen} == {ranks}, log
    worker_hosts = {host for _, _, host in seen if host.startswith(f"{job}-worker-")}
    assert len(worker_hosts) >= 2, f"ranks ran on {sorted({h for _, _, h in seen})}, not on two workers: {log}"
    assert PI in log, log
    if both_nodes:
        nodes = {p["spec"].get("nodeName") for p in await kube.workers(job)}
        assert nodes == set(realnode.node_names(REAL_NODES)), nodes
    return log


def mpirun(ranks: int, *extra: str) -> str:
    return " ".join(["mpirun", *extra, "-n", str(ranks), PI_BINARY])


@pytest.mark.parametrize("name", ["openmpi4", "openmpi5"])
async def test_openmpi_root_pi_runs_its_ranks_on_both_workers(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],
    rn_kube: Kube,
    rn_operator: OperatorProcess,
    mpi_images: dict[str, str],
    name: str,
) -> None:
    """The reference's "root" case, on OpenMPI 4.1 and 5: with only the operator's environment (hostfile,
    ssh arguments, slots), mpirun starts its two ranks on the two workers, one per node. Under OpenMPI 5 that
    needs the PRRTE variables (docs/migration.md); without them every rank runs on the launcher."""
    tb, kube = real_testbed[0], rn_kube
    job = f"pi-{name}"
    await kube.create(pi_job(job, mpi_images[name], mpirun(2, "--allow-run-as-root")))
    log = await assert_pi_ran_across_workers(tb, kube, job, 2)
    assert not any(h.startswith(f"{job}-launcher") for _, _, h in RANK.findall(log)), log


@pytest.fixture
def unchanged_pods_land_on_real_nodes(real_testbed: tuple[cluster.Testbed, dict[str, Any]]) -> Iterator[None]:
    """The reference's examples carry no toleration or node selector: the cluster looks like one of real nodes
    only while they run (real_node.py's `only_real_nodes`). The manifests stay as upstream ships them."""
    with only_real_nodes(real_testbed[0], REAL_NODES):
        yield


async def _run_recording_placement(kube: Kube, job: str) -> tuple[Obj, dict[str, str]]:
    """The job, once finished, and where each of its pods ran (name -> node), read while they existed:
    cleanPodPolicy Running deletes the workers as soon as the job ends."""
    placed: dict[str, str] = {}

    async def record() -> None:
        for pod in await kube.list("v1", "Pod", f"{c.LABEL_JOB_NAME}={job}"):
            if pod["spec"].get("nodeName"):
                placed[pod["metadata"]["name"]] = pod["spec"]["nodeName"]

    return await finished(kube, job, each_poll=record), placed


@pytest.mark.parametrize(
    ("example", "name"),
    [
        ("pi/pi.yaml", "openmpi4"),
        ("pi/pi.yaml", "openmpi5"),
        ("pi/pi-mpich.yaml", "mpich"),
        ("pi/pi-intel.yaml", "intelmpi"),
    ],
)
async def test_the_reference_example_runs_unchanged_but_for_the_image(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],
    rn_kube: Kube,
    rn_operator: OperatorProcess,
    mpi_images: dict[str, str],
    unchanged_pods_land_on_real_nodes: None,
    example: str,
    name: str,
) -> None:
    """kubeflow/mpi-operator v0.8.2's examples/v2beta1 as it ships them (uid 1000, no fsGroup, the key pair
    at /home/mpiuser/.ssh, the worker running the user's own sshd), only the image swapped for the testbed's:
    Succeeded, and the launcher's log shows each rank on a worker, by the kernel's host name, with the
    workers on both real nodes. The key could not be 0600 for uid 1000 without fsGroup: one Warning says so
    and names the field."""
    tb, kube = real_testbed[0], rn_kube
    body = reference_examples.as_run_here(example, mpi_images[name])
    job = body["metadata"]["name"]
    await kube.create(body)
    obj, placed = await _run_recording_placement(kube, job)
    log = launcher_log(tb, kube, job)
    assert has_condition(obj, "Succeeded"), (obj.get("status"), log[-3000:], await _post_mortem(kube, job))
    ranks = RANK.findall(log)
    assert sorted(int(r) for r, _, _ in ranks) == [0, 1] and {n for _, n, _ in ranks} == {"2"}, log
    hosts = {host for _, _, host in ranks}
    assert hosts == {f"{job}-worker-0", f"{job}-worker-1"}, (hosts, log)
    assert {placed[h] for h in hosts} == set(realnode.node_names(REAL_NODES)), placed
    assert PI in log, log
    warnings = [e for e in await kube.events(job) if e.get("reason") == "SSHKeyNotPrivate"]
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning", warnings
    assert "spec.mpiReplicaSpecs.Worker.template.spec.securityContext.fsGroup" in warnings[0]["message"]


async def test_a_wrong_command_fails_the_job(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],
    rn_kube: Kube,
    rn_operator: OperatorProcess,
    mpi_images: dict[str, str],
) -> None:
    """Root without --allow-run-as-root: OpenMPI refuses, the launcher fails twice (backoffLimit 1), Failed."""
    kube = rn_kube
    body = pi_job("pi-wrong", mpi_images["openmpi5"], mpirun(2), run_policy={"backoffLimit": 1})
    await kube.create(body)
    # The launcher's logs read while its pods exist (they go with the job's cleanup): the reason must be
    # OpenMPI's refusal, not any failure. Every read is kept: one made while the kubelet restarts the
    # container can answer with the kubelet's own error about the log file instead of the log.
    logs: list[str] = []

    async def failed() -> Obj | None:
        for pod in await kube.launcher_pods("pi-wrong"):
            code, text = await kube_logs(kube, pod["metadata"]["name"])
            if code == 0 and text:
                logs.append(text)
        obj = await kube.job("pi-wrong")
        return obj if (obj.get("status") or {}).get("completionTime") or has_condition(obj, "Failed") else None

    obj = await eventually(failed, within=240, interval=1, what="pi-wrong finished")
    assert has_condition(obj, "Failed"), obj.get("status")
    assert not has_condition(obj, "Succeeded"), obj.get("status")
    assert any("allow-run-as-root" in text for text in logs), logs


async def test_created_suspended_makes_no_pods_until_resumed_then_succeeds(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],
    rn_kube: Kube,
    rn_operator: OperatorProcess,
    mpi_images: dict[str, str],
) -> None:
    tb, kube = real_testbed[0], rn_kube
    job = "pi-suspended"
    body = pi_job(job, mpi_images["openmpi4"], mpirun(2, "--allow-run-as-root"), run_policy={"suspend": True})
    await kube.create(body)
    await eventually(lambda: job_has(kube, job, "Suspended"), within=60, what="Suspended=True")
    await operator_caught_up(kube, "pi-suspended-control")
    assert await kube.workers(job) == [] and await kube.launcher_pods(job) == []
    await kube.patch_job(job, {"spec": {"runPolicy": {"suspend": False}}})
    await assert_pi_ran_across_workers(tb, kube, job, 2)


async def test_host_network_job_resolves_its_worker_through_cluster_dns_and_succeeds(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],
    rn_kube: Kube,
    rn_operator: OperatorProcess,
    mpi_images: dict[str, str],
) -> None:
    """hostNetwork on launcher and worker (the reference's case: 1 worker, 1 rank). The operator sets
    dnsPolicy ClusterFirstWithHostNet, so the launcher, in its node's network, still resolves the worker's
    name through cluster DNS, to the worker pod's address, and the job succeeds.
    Not asserted: that the rank ran in the worker pod. Both real nodes of this testbed share the machine's
    network namespace, so the worker's address is one of the launcher's own and OpenMPI starts the rank
    locally: the rank's pid namespace (printed below) is not the worker's (seen on 2026-12-03). On a cluster
    whose nodes have their own addresses the rank goes to the worker over ssh, as test_openmpi_root_pi...
    shows without hostNetwork."""
    tb, kube = real_testbed[0], rn_kube
    job = "pi-hostnet"
    fqdn = f"{c.worker_name(job, 0)}.{job}.{kube.ns}.svc"  # the hostfile's name: the Service is the job's
    rank = f"sh -c 'echo \"rank-pidns $(readlink /proc/self/ns/pid)\"; exec {PI_BINARY}'"
    command = f"mpi-wait-hosts 2>/dev/null; getent hosts {fqdn}; mpirun --allow-run-as-root -n 1 {rank}"
    body = pi_job(job, mpi_images["openmpi4"], command, workers=1, pod={"hostNetwork": True})
    placed: dict[str, str] = {}

    async def record() -> None:
        for pod in await kube.workers(job):
            if ip := (pod.get("status") or {}).get("podIP"):
                placed[pod["metadata"]["name"]] = ip

    await kube.create(body)
    obj = await finished(kube, job, each_poll=record)
    log = launcher_log(tb, kube, job)
    assert has_condition(obj, "Succeeded"), (obj.get("status"), log[-3000:])
    assert PI in log and RANK.search(log), log
    resolved = re.findall(rf"^(\S+)\s+{re.escape(fqdn)}\b", log, re.MULTILINE)
    assert resolved and resolved[-1] == placed.get(c.worker_name(job, 0)), (resolved, placed, log)
    assert re.search(r"^rank-pidns pid:\[\d+\]$", log, re.MULTILINE), log


async def test_non_root_user_runs_pi_with_its_own_sshd(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],
    rn_kube: Kube,
    rn_operator: OperatorProcess,
    mpi_images: dict[str, str],
) -> None:
    """runAsUser 1000 on both, the key pair at sshAuthMountPath /home/mpiuser/.ssh, the worker running sshd
    with the user's config (as the reference's non-root case)."""
    tb, kube = real_testbed[0], rn_kube
    job = "pi-nonroot"
    body = pi_job(
        job,
        mpi_images["openmpi5"],
        mpirun(2),
        worker={"command": ["/usr/sbin/sshd", "-De", "-f", "/home/mpiuser/.sshd_config"]},
        # fsGroup: the kubelet makes the key Secret group-readable for uid 1000 (it stays root-owned).
        pod={"securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000}},
        sshAuthMountPath="/home/mpiuser/.ssh",
    )
    await kube.create(body)
    await assert_pi_ran_across_workers(tb, kube, job, 2)


async def test_wait_for_workers_ready_creates_the_launcher_after_a_real_readiness_probe(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],
    rn_kube: Kube,
    rn_operator: OperatorProcess,
    mpi_images: dict[str, str],
) -> None:
    """launcherCreationPolicy WaitForWorkersReady with a TCP readiness probe on sshd's port: the launcher
    exists only once both workers are Ready, and its first mpirun finds every name resolvable."""
    tb, kube = real_testbed[0], rn_kube
    job = "pi-wait"
    probe = {"tcpSocket": {"port": 2222}, "periodSeconds": 1}
    body = pi_job(
        job,
        mpi_images["openmpi4"],
        mpirun(2, "--allow-run-as-root"),
        worker={"readinessProbe": probe},
        launcherCreationPolicy="WaitForWorkersReady",
    )
    await kube.create(body)

    async def launcher_exists() -> bool:
        return bool(await kube.launcher_pods(job))

    await eventually(launcher_exists, within=180, what="the launcher pod")
    launcher = (await kube.launcher_pods(job))[0]
    created = launcher["metadata"]["creationTimestamp"]
    for w in await kube.workers(job):
        ready_at = next(x["lastTransitionTime"] for x in w["status"]["conditions"] if x["type"] == "Ready")
        assert ready_at <= created, (w["metadata"]["name"], ready_at, created)
    await assert_pi_ran_across_workers(tb, kube, job, 2)
    # Read again now that it ran: the object fetched when it appeared had no container status yet.
    ran = await kube.get("v1", "Pod", launcher["metadata"]["name"])
    assert ran is not None, "the launcher pod is gone"
    statuses = ran["status"].get("containerStatuses") or []
    assert statuses, ran["status"]
    assert sum(s.get("restartCount", 0) for s in statuses) == 0, statuses


async def test_mpich_pi_runs_across_workers_after_waiting_for_their_names(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],
    rn_kube: Kube,
    rn_operator: OperatorProcess,
    mpi_images: dict[str, str],
) -> None:
    """MPICH (Hydra reads the operator's HYDRA_HOST_FILE): the launcher waits until every hostfile name
    resolves (the image's mpi-wait-hosts, the reference's entrypoint wait), then both ranks run on the two
    workers, one per node, pi is right, and the job Succeeds. The image has Debian trixie's MPICH, as the
    reference's MPICH image does: with bookworm's MPICH 4.0.2, 2 of 8 runs hung in MPI_Finalize after pi
    printed (both ranks' processes still there, rank 0 spinning; docs/results.md)."""
    tb, kube = real_testbed[0], rn_kube
    job = "pi-mpich"
    body = pi_job(job, mpi_images["mpich"], f"mpi-wait-hosts && mpiexec -n 2 {PI_BINARY}", implementation="MPICH")
    await kube.create(body)
    obj, placed = await _run_recording_placement(kube, job)
    log = launcher_log(tb, kube, job)
    assert has_condition(obj, "Succeeded"), (obj.get("status"), log[-3000:])
    seen = {(int(r), int(n), host) for r, n, host in RANK.findall(log)}
    assert {r for r, _, _ in seen} == {0, 1} and {n for _, n, _ in seen} == {2}, log
    assert {h for _, _, h in seen} == {f"{job}-worker-0", f"{job}-worker-1"}, log
    assert PI in log, log
    workers = {name: node for name, node in placed.items() if "-worker-" in name}
    assert set(workers.values()) == set(realnode.node_names(REAL_NODES)), placed


async def test_managed_by_an_external_controller_creates_nothing(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],
    rn_kube: Kube,
    rn_operator: OperatorProcess,
    mpi_images: dict[str, str],
) -> None:
    kube = rn_kube
    job = "pi-managed"
    body = pi_job(job, mpi_images["openmpi4"], mpirun(2, "--allow-run-as-root"))
    body["spec"].setdefault("runPolicy", {})["managedBy"] = "kueue.x-k8s.io/multikueue"
    await kube.create(body)
    await operator_caught_up(kube, "pi-managed-control")
    obj = await kube.job(job)
    assert not (obj.get("status") or {}).get("conditions"), obj.get("status")
    assert await kube.workers(job) == [] and await kube.launcher_pods(job) == []
    assert await kube.get("batch/v1", "Job", c.launcher_name(job)) is None
    assert await kube.get("v1", "Secret", c.secret_name(job)) is None


@pytest.fixture
def cluster_domain_operator(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],
    rn_operator: OperatorProcess,
    tmp_path: Path,
) -> Iterator[OperatorProcess]:
    """The module's operator replaced for one test by one with `--cluster-domain cluster.local`."""
    with operator_instead(rn_operator, real_testbed[0], tmp_path, "--cluster-domain", "cluster.local") as proc:
        yield proc


@contextlib.contextmanager
def operator_instead(
    module_operator: OperatorProcess, tb: cluster.Testbed, log_dir: Path, *args: str
) -> Iterator[OperatorProcess]:
    """An operator with `args` in place of the module's (two would fight over the same jobs), for one test."""
    module_operator.stop()
    proc = OperatorProcess(tb.kubeconfig, log_dir, args)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
        module_operator.start()


async def test_cluster_domain_and_launcher_as_worker(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],
    rn_kube: Kube,
    cluster_domain_operator: OperatorProcess,
    mpi_images: dict[str, str],
) -> None:
    """`--cluster-domain cluster.local` (fully qualified host names in the hostfile) with runLauncherAsWorker:
    three ranks, on the launcher and on both workers."""
    tb, kube = real_testbed[0], rn_kube
    job = "pi-domain"
    body = pi_job(job, mpi_images["openmpi5"], mpirun(3, "--allow-run-as-root"), runLauncherAsWorker=True)
    await kube.create(body)
    log = await assert_pi_ran_across_workers(tb, kube, job, 3)
    assert any(h.startswith(f"{job}-launcher") for _, _, h in RANK.findall(log)), log
    hostfile = kubectl(tb, "-n", kube.ns, "get", "configmap", c.config_map_name(job), "-o",
                       "jsonpath={.data.hostfile}")  # fmt: skip
    assert f".{job}.{kube.ns}.svc.cluster.local slots=1" in hostfile, hostfile
    await kube.delete(API_VERSION, "MPIJob", job)


@pytest.fixture
def gang_operator(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],
    rn_operator: OperatorProcess,
    tmp_path: Path,
) -> Iterator[OperatorProcess]:
    """The coscheduling scheduler (scheduler-plugins, built from its Go module) on this testbed, and the module's
    operator replaced for one test by one with --gang-scheduling for it."""
    tb = real_testbed[0]
    try:
        extras.build([extras.COSCHEDULING], echo=print)
    except TestbedError as err:
        cannot_run(f"the coscheduling scheduler could not be built: {err}")
    cluster.start_extras((extras.COSCHEDULING,), tb.state_dir, echo=print)
    with operator_instead(rn_operator, tb, tmp_path, "--gang-scheduling", extras.COSCHEDULING_SCHEDULER_NAME) as proc:
        yield proc


GANG_EXAMPLE = repo_root() / "examples" / "gang-coscheduling.yaml"
# How much CPU the fillers leave free on each real node: the example's launcher fits, none of its workers.
GANG_FREE_M = 300


def _cpu_requested(tb: cluster.Testbed, node: str) -> int:
    """Millicores the unfinished pods bound to `node` request (what the scheduler counts)."""
    pods = json.loads(kubectl(tb, "get", "pods", "-A", "--field-selector", f"spec.nodeName={node}", "-o", "json"))
    return sum(
        millicores(ctr.get("resources", {}).get("requests", {}).get("cpu", "0"))
        for p in pods["items"] if p["status"].get("phase") not in ("Succeeded", "Failed")
        for ctr in p["spec"]["containers"]
    )  # fmt: skip


async def _fill_real_nodes(tb: cluster.Testbed, kube: Kube, img: str) -> list[str]:
    """One pod per real node taking all of its free CPU but GANG_FREE_M, Running before this returns."""
    names = []
    for k, node in enumerate(realnode.node_names(REAL_NODES), 1):
        alloc = allocatable_millicores(tb, node)
        take = alloc - _cpu_requested(tb, node) - GANG_FREE_M
        assert take > 0, (node, alloc)
        names.append(f"filler-{k}")
        await kube.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": names[-1], "namespace": kube.ns},
                           "spec": {"nodeSelector": {HOSTNAME: node}, "terminationGracePeriodSeconds": 0,
                                    "containers": [{"name": "fill", "image": img, "imagePullPolicy": "Never",
                                                    "command": ["sleep", "3600"],
                                                    "resources": {"requests": {"cpu": f"{take}m"}}}]}})  # fmt: skip

    async def running() -> bool:
        phases = [((await kube.get("v1", "Pod", n)) or {}).get("status", {}).get("phase") for n in names]
        return phases == ["Running"] * len(names)

    await eventually(running, within=60, what="the fillers Running")
    return names


async def test_the_gang_example_binds_no_pod_until_the_whole_gang_fits_then_pi_runs(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],
    rn_kube: Kube,
    gang_operator: OperatorProcess,
    mpi_images: dict[str, str],
    unchanged_pods_land_on_real_nodes: None,
) -> None:
    """examples/gang-coscheduling.yaml as a user applies it (image swapped) to the operator its header names
    (--gang-scheduling, the real coscheduling scheduler): while other pods hold the real nodes' CPU, so that
    its launcher would fit and its workers would not, the PodGroup holds every pod unbound (no partial
    gang); once that CPU is free the scheduler binds all five and pi runs on the 4 workers: Succeeded."""
    tb, kube = real_testbed[0], rn_kube
    img = mpi_images["openmpi4"]
    fillers = await _fill_real_nodes(tb, kube, img)
    text = example_with_image(GANG_EXAMPLE, "mpioperator/mpi-pi:openmpi", img)
    kubectl(tb, "-n", kube.ns, "apply", "-f", "-", input_text=text)
    job = "pi-gang"

    async def pods() -> list[Obj]:
        return [
            p
            for p in await kube.list("v1", "Pod", f"{c.LABEL_JOB_NAME}={job}")
            if "deletionTimestamp" not in p["metadata"]
        ]

    async def created() -> list[Obj] | None:
        found = await pods()
        return found if len(found) == 5 else None

    found = await eventually(created, within=60, what="the launcher and 4 workers created")
    assert all(p["spec"]["schedulerName"] == extras.COSCHEDULING_SCHEDULER_NAME for p in found)
    for _ in range(20):  # 10 s: nothing may bind while the gang cannot fit
        bound = [p["metadata"]["name"] for p in await pods() if p["spec"].get("nodeName")]
        assert bound == [], f"bound before the gang fits: {bound}"
        await asyncio.sleep(0.5)
    for name in fillers:
        await kube.delete("v1", "Pod", name)
    await assert_pi_ran_across_workers(tb, kube, job, 4, both_nodes=False)


async def test_a_real_mpirun_job_started_under_the_reference_keeps_running_across_the_switch_and_succeeds(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],
    rn_kube: Kube,
    rn_operator: OperatorProcess,
    mpi_images: dict[str, str],
) -> None:
    """docs/migration.md's one-step switch with a job in flight: the reference (built from its module) starts
    a pi job whose ranks sleep before computing; while mpirun runs, the reference is stopped, our CRD is put
    back and mpijob starts. The same pods finish the same mpirun: Succeeded, ranks on both workers."""
    reference_built()
    tb, kube = real_testbed[0], rn_kube
    job = "pi-handover"
    slow = "mpirun --allow-run-as-root -n 2 sh -c 'sleep 25; exec /home/mpiuser/pi'"
    rn_operator.stop()
    reference = Reference(tb.kubeconfig, tb.state_dir / "reference.log")
    try:
        await put_reference_crd(kube.client)
        with contextlib.suppress(Exception):
            await kube.client.create("/api/v1/namespaces", {"metadata": {"name": "mpi-operator"}})
        reference.start()
        await kube.create(pi_job(job, mpi_images["openmpi4"], slow))
        await eventually(lambda: _ranks_started(tb, kube, job), within=180, interval=1, what="mpirun's ranks sleeping")
        reference.stop()
        pods = await _pod_uids(kube, job)
    finally:
        reference.stop()
        await install_crd(str(tb.kubeconfig))
        rn_operator.start()
    await assert_pi_ran_across_workers(tb, kube, job, 2)
    after = await _pod_uids(kube, job)
    assert after == pods, (pods, after)


async def _ranks_started(tb: cluster.Testbed, kube: Kube, job: str) -> bool:
    """Both workers run a rank: the rank's `sleep 25` is a process in each worker container (procps)."""
    workers = [p["metadata"]["name"] for p in await kube.workers(job) if p["status"].get("phase") == "Running"]
    if len(workers) != 2:
        return False
    binary = str(resolve_bin_dir(None) / "kubectl")
    for pod in workers:
        argv = [binary, f"--kubeconfig={tb.kubeconfig}", "-n", kube.ns, "exec", pod, "--", "pgrep", "-f", "sleep 25"]
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
        )
        if await asyncio.wait_for(proc.wait(), timeout=30) != 0:
            return False
    return True


# -- The operator as the pod of the reference's own install, its image swapped (issue 40) -------------------

OPERATOR_IMAGE = "mpijob.local/mpijob-operator:testbed"
IMAGE_DIR = Path(os.environ.get("MPIJOB_IMAGE_DIR", repo_root() / ".cache" / "image"))
CRD_FILE = "deploy/crd/kubeflow.org_mpijobs.yaml"


@pytest.fixture(scope="module")
def operator_image(real_testbed: tuple[cluster.Testbed, dict[str, Any]]) -> str:
    """`make image`'s archive, loaded onto the real nodes under a name the kubelet never pulls."""
    version = tomllib.loads((repo_root() / "pyproject.toml").read_text())["project"]["version"]
    archive = IMAGE_DIR / f"mpijob-operator-{version}.oci.tar"
    if not archive.exists():
        cannot_run(f"no operator image at {archive}: `make image` builds it (deploy/image/build-offline.sh)")
    record(operator_image_import_s=load(archive, name=OPERATOR_IMAGE, state_dir=real_testbed[0].state_dir))
    return OPERATOR_IMAGE


@contextlib.contextmanager
def installed_as_pods(
    tb: cluster.Testbed,
    rn_operator: OperatorProcess,
    install: str,
    our_crd: bool = True,
) -> Iterator[None]:
    """An install file applied as a user applies it (server-side), then our CRD (the migration guide's order)
    unless `our_crd` is off; the host operator stopped meanwhile. On the way out, everything the file made but
    the CRD goes (deleting a CRD would take every MPIJob with it), our CRD is put back and the host operator
    restarted."""
    rn_operator.stop()
    try:
        kubectl(tb, "apply", "--server-side", "--force-conflicts", "-f", "-", input_text=install)
        if our_crd:
            kubectl(tb, "apply", "--server-side", "--force-conflicts", "-f", str(repo_root() / CRD_FILE))
        yield
    finally:
        kept = [d for d in yaml.safe_load_all(install) if d and d.get("kind") != "CustomResourceDefinition"]
        kubectl(tb, "delete", "--ignore-not-found", "--wait=true", "-f", "-", input_text=yaml.safe_dump_all(kept),
                timeout=180)  # fmt: skip
        # In a thread of its own: an async test's teardown runs inside the event loop.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, install_crd(str(tb.kubeconfig))).result()
        rn_operator.start()


@pytest.fixture
def operator_as_reference_pod(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],
    rn_operator: OperatorProcess,
    operator_image: str,
    unchanged_pods_land_on_real_nodes: None,
) -> Iterator[str]:
    """The reference's install file applied as a user applies it, its image swapped to mpijob's. Yields the
    install's text once the Deployment is rolled out."""
    tb = real_testbed[0]
    install = reference_install.swapped_install(operator_image)
    with installed_as_pods(tb, rn_operator, install):
        _rolled_out(tb)
        yield install


@pytest.fixture
def reference_operator_as_pod(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],
    rn_operator: OperatorProcess,
    unchanged_pods_land_on_real_nodes: None,
) -> Iterator[str]:
    """The reference operator itself as its install file runs it, not a line changed (its CRD too): its image,
    built from its Go module, loaded under the name that file gives."""
    tb = real_testbed[0]
    build = subprocess.run(["bash", str(repo_root() / "bench" / "reference" / "build-image.sh")],
                           capture_output=True, text=True, check=False)  # fmt: skip
    if build.returncode != 0:
        cannot_run(f"the reference's image does not build here: {build.stdout[-1500:]}{build.stderr[-1500:]}")
    archive = reference_operator.REFERENCE / "image" / "mpi-operator.oci.tar"
    load(archive, name=reference_install.REFERENCE_IMAGE_NAME, state_dir=tb.state_dir)
    install = reference_install.install()
    with installed_as_pods(tb, rn_operator, install, our_crd=False):
        _rolled_out(tb)
        yield install


def _rolled_out(
    tb: cluster.Testbed, ns: str = reference_install.NAMESPACE, name: str = reference_install.DEPLOYMENT
) -> None:
    kubectl(tb, "-n", ns, "rollout", "status", f"deployment/{name}", "--timeout=180s", timeout=200)


async def _pod_uids(kube: Kube, job: str) -> dict[str, str]:
    """name -> uid of every pod of the job: what "no pod replaced" compares."""
    return {
        p["metadata"]["name"]: p["metadata"]["uid"] for p in await kube.list("v1", "Pod", f"{c.LABEL_JOB_NAME}={job}")
    }


def _operator_pods(
    tb: cluster.Testbed, ns: str = reference_install.NAMESPACE, selector: str = "app=mpi-operator"
) -> list[Obj]:
    out = kubectl(tb, "-n", ns, "get", "pods", "-l", selector, "-o", "json")
    pods: list[Obj] = json.loads(out)["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _leader(tb: cluster.Testbed, ns: str = reference_install.NAMESPACE, lease: str = reference_install.LEASE) -> str:
    """The pod holding a Lease (identity `<hostname>_<suffix>`, the hostname is the pod's name)."""
    holder = kubectl(tb, "-n", ns, "get", "lease", lease, "-o", "jsonpath={.spec.holderIdentity}")
    return holder.rsplit("_", 1)[0]


async def test_the_references_install_with_only_its_image_swapped_runs_the_operator_as_a_pod_that_runs_pi(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],
    rn_kube: Kube,
    mpi_images: dict[str, str],
    operator_as_reference_pod: str,
) -> None:
    """mpijob's image in the reference's Deployment (args `-alsologtostderr --lock-namespace=mpi-operator`,
    the reference's ClusterRole, no probes): one pod on a real node, in-cluster config, leading on the
    reference's Lease; the reference's pi example Succeeds with its ranks on both workers; the pod's log says
    which flag had no effect and which features the ClusterRole leaves off."""
    tb, kube = real_testbed[0], rn_kube
    [pod] = _operator_pods(tb)
    assert pod["spec"]["nodeName"] in realnode.node_names(REAL_NODES), pod["spec"].get("nodeName")
    assert pod["spec"]["containers"][0]["args"] == ["-alsologtostderr", "--lock-namespace=mpi-operator"]

    async def leading() -> bool:
        return _leader(tb) == pod["metadata"]["name"]

    await eventually(leading, within=60, what="the pod leading")
    body = reference_examples.as_run_here("pi/pi.yaml", mpi_images["openmpi4"])
    await kube.create(body)
    # The example does not spread its workers: the scheduler may put both on one node.
    await assert_pi_ran_across_workers(tb, kube, body["metadata"]["name"], 2, both_nodes=False)
    log = kubectl(tb, "-n", reference_install.NAMESPACE, "logs", pod["metadata"]["name"])
    assert "flag -alsologtostderr=true has no effect" in log, log[-3000:]
    assert "node termination signals (taints, cordons, deleted nodes) is off" in log, log[-3000:]


async def test_two_operator_pods_fail_over_when_the_leader_is_deleted_and_the_running_job_is_not_disturbed(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],
    rn_kube: Kube,
    mpi_images: dict[str, str],
    operator_as_reference_pod: str,
) -> None:
    """Two replicas of the swapped Deployment: one leads, one waits on the Lease. The leader pod is deleted
    while a pi job's ranks run: the other pod takes the Lease (the gap is recorded), no pod of the job is
    replaced, and the job Succeeds under the new leader."""
    tb, kube = real_testbed[0], rn_kube
    ns = reference_install.NAMESPACE
    kubectl(tb, "-n", ns, "scale", f"deployment/{reference_install.DEPLOYMENT}", "--replicas=2")
    _rolled_out(tb)
    job = "pi-failover"
    slow = "mpirun --allow-run-as-root -n 2 sh -c 'sleep 25; exec /home/mpiuser/pi'"
    await kube.create(pi_job(job, mpi_images["openmpi4"], slow))
    await eventually(lambda: _ranks_started(tb, kube, job), within=180, interval=1, what="mpirun's ranks sleeping")
    pods = await _pod_uids(kube, job)
    leader = _leader(tb)
    assert leader in {p["metadata"]["name"] for p in _operator_pods(tb)}, leader
    started = time.monotonic()
    kubectl(tb, "-n", ns, "delete", "pod", leader, "--wait=false")

    async def taken_over() -> bool:
        holder = _leader(tb)
        return bool(holder) and holder != leader

    await eventually(taken_over, within=90, interval=0.5, what="the other pod taking the Lease")
    record(operator_pod_failover_s=round(time.monotonic() - started, 1))
    await assert_pi_ran_across_workers(tb, kube, job, 2)
    after = await _pod_uids(kube, job)
    assert after == pods, (pods, after)


OUR_NAMESPACE, OUR_DEPLOYMENT, OUR_SELECTOR = (
    "mpijob-system",
    "mpijob-operator",
    "app.kubernetes.io/name=mpijob-operator",
)


def _base_image() -> str:
    """The operator image deploy/base names (what a user's kustomize `images:` entry overrides)."""
    deployment = yaml.safe_load((repo_root() / "deploy" / "base" / "deployment.yaml").read_text())
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return str(container["image"]).rsplit(":", 1)[0]


def bundle_with_image(image: str) -> str:
    """deploy/mpijob-operator.yaml (`make bundle`) with its one image line set, as a user edits it."""
    text = (repo_root() / "deploy" / "mpijob-operator.yaml").read_text()
    [line] = re.findall(r"^ *image: .*$", text, re.MULTILINE)
    return text.replace(line, line[: line.index("image:")] + f"image: {image}")


def ha_overlay_with_image(tb: cluster.Testbed, image: str, where: Path) -> str:
    """deploy/overlays/ha through a user's own overlay that sets the image (kustomize's `images:`), rendered
    by the testbed's `kubectl kustomize` as `kubectl apply -k` renders it."""
    shutil.copytree(repo_root() / "deploy", where / "deploy")
    name, tag = image.rsplit(":", 1)
    overlay = {
        "resources": ["../deploy/overlays/ha"],
        "images": [{"name": _base_image(), "newName": name, "newTag": tag}],
    }
    (where / "mine").mkdir()
    (where / "mine" / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    return kubectl(tb, "kustomize", str(where / "mine"))


@pytest.mark.parametrize(("path", "replicas"), [("bundle", 1), ("ha-overlay", 2)])
async def test_our_bundle_and_ha_overlay_run_the_image_as_pods_that_lead_and_run_pi(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],
    rn_kube: Kube,
    rn_operator: OperatorProcess,
    mpi_images: dict[str, str],
    operator_image: str,
    unchanged_pods_land_on_real_nodes: None,
    tmp_path: Path,
    path: str,
    replicas: int,
) -> None:
    """Our two other install paths with only the image set as a user sets it: the bundle (one replica) and the
    HA overlay (two, spread over the nodes; a PodDisruptionBudget). Their pods run on the real nodes under the
    restricted security context (non-root, read-only root filesystem) with in-cluster config and our own RBAC;
    one holds the Lease, and a pi job Succeeds with its ranks on both nodes."""
    tb, kube = real_testbed[0], rn_kube
    text = (
        bundle_with_image(operator_image) if path == "bundle" else ha_overlay_with_image(tb, operator_image, tmp_path)
    )
    with installed_as_pods(tb, rn_operator, text):
        _rolled_out(tb, OUR_NAMESPACE, OUR_DEPLOYMENT)
        pods = _operator_pods(tb, OUR_NAMESPACE, OUR_SELECTOR)
        assert len(pods) == replicas, [p["metadata"]["name"] for p in pods]
        placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
        assert set(placed.values()) <= set(realnode.node_names(REAL_NODES)), placed
        record(**{f"operator_pods_{path}": placed})

        async def one_leads() -> bool:
            return _leader(tb, OUR_NAMESPACE, OUR_DEPLOYMENT) in placed

        await eventually(one_leads, within=60, what="an operator pod leading")
        job = f"pi-{path}"
        await kube.create(pi_job(job, mpi_images["openmpi4"], mpirun(2, "--allow-run-as-root")))
        await assert_pi_ran_across_workers(tb, kube, job, 2)


HELM = Path(os.environ.get("MPIJOB_HELM_BIN", repo_root() / ".cache" / "helm" / "bin")) / "helm"


@pytest.fixture(scope="module")
def previous_operator_image(real_testbed: tuple[cluster.Testbed, dict[str, Any]], operator_image: str) -> str:
    """The operator image built from PREVIOUS_SOURCE by that source's own build script (cached by its stamp
    in .cache/image-previous; the Debian root filesystem is the current build's), loaded onto the nodes."""
    root = repo_root()
    out = root / ".cache" / "image-previous"
    tree = out / "source"
    if not (tree / "pyproject.toml").exists():
        subprocess.run(["rm", "-rf", str(tree)], check=True)
        out.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(root), "archive", PREVIOUS_SOURCE], capture_output=True, check=False)
        if archive.returncode != 0:
            cannot_run(f"git archive {PREVIOUS_SOURCE}: {archive.stderr.decode()[-500:]}")
        tree.mkdir()
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    if not (out / "rootfs.tar").exists():
        subprocess.run(["cp", "--reflink=auto", str(IMAGE_DIR / "rootfs.tar"), str(out / "rootfs.tar")], check=True)
    env = {**os.environ, "MPIJOB_IMAGE_DIR": str(out), "PYTHON": sys.executable}
    build = subprocess.run(
        ["bash", str(tree / "deploy/image/build-offline.sh")], env=env, capture_output=True, text=True
    )
    if build.returncode != 0:
        cannot_run(f"the previous operator image does not build: {build.stdout[-1000:]}{build.stderr[-1000:]}")
    name = "mpijob.local/mpijob-operator:previous"
    [archive_path] = out.glob("mpijob-operator-*.oci.tar")
    load(archive_path, name=name, state_dir=real_testbed[0].state_dir)
    return name


def helm(*args: str, timeout: float = 240, check: bool = True) -> str:
    if not HELM.exists():
        cannot_run(f"{HELM} missing: `bash testbed/helm/build.sh` (make test builds it)")
    out = subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=timeout, check=False)
    assert out.returncode == 0 or not check, f"helm {' '.join(args)}: {out.stderr}"
    return out.stdout


async def test_a_helm_upgrade_to_another_image_disturbs_no_running_job_and_the_new_pod_serves_a_scale_in(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],
    rn_kube: Kube,
    rn_operator: OperatorProcess,
    mpi_images: dict[str, str],
    operator_image: str,
    previous_operator_image: str,
    unchanged_pods_land_on_real_nodes: None,
) -> None:
    """The chart installed as a user installs it, with the previous operator's image; an elastic job runs on
    the real nodes; `helm upgrade` to the current image: the new pod takes the Lease, no pod of the job is
    replaced, and it removes exactly the worker a user names."""
    tb, kube = real_testbed[0], rn_kube
    ns, release = "mpijob-system", "mpijob"
    kubeconfig = f"--kubeconfig={tb.kubeconfig}"
    repository, previous_tag = previous_operator_image.rsplit(":", 1)
    chart = str(repo_root() / "deploy" / "helm" / "mpijob-operator")
    rn_operator.stop()
    try:
        # The previous image serves no /readyz: its readiness probe is off until the upgrade turns it on.
        helm("install", release, chart, kubeconfig, "-n", ns, "--create-namespace",
             f"--set=image.repository={repository}", f"--set=image.tag={previous_tag}",
             "--set=health.readinessProbe=false")  # fmt: skip
        _rolled_out(tb, ns, "mpijob-operator")
        job = "upgraded"
        body = pi_job(job, mpi_images["openmpi4"], "sleep 600", workers=3)
        body["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 3, "scaleInGracePeriodSeconds": 1}
        await kube.create(body)
        await eventually(lambda: _all_running(kube, job, 3), within=180, interval=1, what="3 workers Running")
        before = await _pod_uids(kube, job)
        hostfile = partial(kubectl, tb, "-n", kube.ns, "get", "configmap", c.config_map_name(job), "-o",
                           "jsonpath={.data.hostfile}")  # fmt: skip
        assert ".svc.cluster.local " not in hostfile(), hostfile()
        # The chart's extraArgs and env reach the new pod: a flag the chart sets too (the last one wins) and a
        # variable for one it does not set, each seen where a user would see it.
        helm("upgrade", release, chart, kubeconfig, "-n", ns, "--reuse-values",
             f"--set=image.tag={operator_image.rsplit(':', 1)[1]}", "--set=health.readinessProbe=true",
             '--set-json=extraArgs=["--log-level=DEBUG"]',
             '--set-json=env=[{"name": "MPIJOB_CLUSTER_DOMAIN", "value": "cluster.local"}]')  # fmt: skip
        _rolled_out(tb, ns, "mpijob-operator")
        [pod] = [p for p in json.loads(kubectl(tb, "-n", ns, "get", "pods", "-o", "json"))["items"]
                 if not p["metadata"].get("deletionTimestamp")]  # fmt: skip
        assert pod["spec"]["containers"][0]["image"] == operator_image

        async def new_pod_leads() -> bool:
            holder = kubectl(tb, "-n", ns, "get", "lease", "mpijob-operator", "-o", "jsonpath={.spec.holderIdentity}")
            return holder.startswith(pod["metadata"]["name"] + "_")

        await eventually(new_pod_leads, within=90, interval=1, what="the upgraded pod leading")

        async def hostfile_qualified() -> bool:
            return hostfile().count(".svc.cluster.local slots=") == 3

        await eventually(hostfile_qualified, within=60, interval=1, what="the hostfile with --cluster-domain's names")
        await asyncio.sleep(5)  # the new leader's first passes over the job
        after = await _pod_uids(kube, job)
        assert after == before, (before, after)
        logs = kubectl(tb, "-n", ns, "logs", pod["metadata"]["name"]).splitlines()
        levels = {json.loads(line)["level"] for line in logs if line.startswith("{")}
        assert "DEBUG" in levels, levels
        victim = c.worker_name(job, 1)
        await kube.patch_job(
            job,
            {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 2}}, "elasticPolicy": {"workersToDelete": [victim]}}},
        )

        async def only_victim_gone() -> bool:
            now = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await kube.workers(job)
                   if not p["metadata"].get("deletionTimestamp")}  # fmt: skip
            return now == {n: u for n, u in before.items() if n.startswith(f"{job}-worker-") and n != victim}

        await eventually(only_victim_gone, within=90, interval=1, what=f"{victim} alone removed by the new pod")
    finally:
        helm("uninstall", release, kubeconfig, "-n", ns, "--wait", timeout=120, check=False)
        kubectl(tb, "delete", "namespace", ns, "--ignore-not-found", "--wait=true", timeout=120)
        rn_operator.start()


async def _all_running(kube: Kube, job: str, workers: int) -> bool:
    pods = [p for p in await kube.workers(job) if p["status"].get("phase") == "Running"]
    return len(pods) == workers


# Restart mode (elasticPolicy.mode Restart) with jacobi, the testbed's checkpointing program
# (testbed/mpi/jacobi.c), as examples/restart-from-checkpoint.yaml runs it (long enough for a scale-in and a
# regrow mid-run); an uninterrupted run of the same sweeps, for its checksum.
JACOBI = "/home/mpiuser/jacobi"
JACOBI_ARGS = "--size 256 --iterations 6000"
CHECKSUM = re.compile(r"finished iteration (\d+) with (\d+) ranks: checksum ([0-9a-f]{16})")
STOPPED = re.compile(r"stopped at iteration (\d+) with (\d+) ranks")
STARTING = re.compile(r"starting at iteration (\d+) with (\d+) ranks")
RUN = re.compile(r"mpijob-run: run (\d+) on (\d+) hosts, (\d+) ranks")


EXAMPLE = repo_root() / "examples" / "restart-from-checkpoint.yaml"


def restart_job(tb: cluster.Testbed, img: str) -> Obj:
    """examples/restart-from-checkpoint.yaml with the image swapped, and the placement this testbed needs (its
    kwok nodes run no process): two workers per real node, each asking 2/5 of a node's CPU so that a node fits
    two and never a third (the regrow waits for real-2), the launcher on real-1. The spec is the example's."""
    body: Obj = yaml.safe_load(EXAMPLE.read_text())
    nodes = realnode.node_names(REAL_NODES)
    alloc = [allocatable_millicores(tb, n) for n in nodes]
    launcher, worker = (body["spec"]["mpiReplicaSpecs"][k]["template"]["spec"] for k in ("Launcher", "Worker"))
    for pod in (launcher, worker):
        pod["containers"][0]["image"] = img
        pod["containers"][0]["imagePullPolicy"] = "Never"
        pod["tolerations"] = ON_REAL_NODE["tolerations"]
    worker.pop("topologySpreadConstraints")
    worker.update(_spread(body["metadata"]["name"]))
    worker["containers"][0]["resources"] = {"requests": {"cpu": f"{min(alloc) * 2 // 5}m"}}
    launcher["nodeSelector"] = {HOSTNAME: nodes[0]}
    return body


async def shared_claim(tb: cluster.Testbed, kube: Kube, name: str) -> Path:
    """The example's ReadWriteMany claim, bound to a directory of this host that both real nodes mount (as an
    NFS share would be)."""
    where = tb.state_dir / "shared" / kube.ns
    where.mkdir(parents=True, exist_ok=True)
    volume = f"{kube.ns}-{name}"[:63]
    await kube.client.create("/api/v1/persistentvolumes", {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(where), "type": "Directory"},
                 "claimRef": {"namespace": kube.ns, "name": name}},
    })  # fmt: skip
    await kube.client.create(f"/api/v1/namespaces/{kube.ns}/persistentvolumeclaims", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": volume,
                 "resources": {"requests": {"storage": "1Gi"}}},
    })  # fmt: skip
    return where


async def test_restart_mode_shrinks_jacobi_off_a_spot_node_and_grows_it_back_from_its_checkpoints_to_the_same_grid(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],
    rn_api: ApiClient,
    rn_kube: Kube,
    rn_operator: OperatorProcess,
    mpi_images: dict[str, str],
) -> None:
    """An MPI program that cannot change size while running (jacobi) in Restart mode on 4 workers over both
    real nodes. real-2 gets the spot taint mid-run: its two workers leave the list, mpirun gets SIGUSR1, the
    ranks checkpoint and stop, and the run starts again on real-1's two workers from that checkpoint. real-2
    comes back: the regrow's workers bind there and, past restart.minIntervalSeconds, the run restarts on 4
    from a fresh checkpoint. The job Succeeds with the checksum of an uninterrupted run; the launcher never
    failed; status and Events say both restarts."""
    tb, kube = real_testbed[0], rn_kube
    nodes = realnode.node_names(REAL_NODES)
    body = restart_job(tb, mpi_images["openmpi4"])
    job = body["metadata"]["name"]
    await shared_claim(tb, kube, "checkpoints")
    await kube.create(body)

    async def run_started(number: int, hosts: int) -> re.Match[str] | None:
        log = await _launcher_log_now(kube, job)
        return next((m for m in RUN.finditer(log) if m.groups()[:2] == (str(number), str(hosts))), None)

    await eventually(lambda: run_started(1, 4), within=180, interval=1, what="run 1 on 4 hosts")
    workers = await kube.workers(job)
    victims = sorted(p["metadata"]["name"] for p in workers if p["spec"].get("nodeName") == nodes[1])
    keeper = next(p["metadata"]["name"] for p in workers if p["spec"].get("nodeName") == nodes[0])
    uninterrupted = _uninterrupted_checksum(tb, kube, keeper)
    await eventually(lambda: _jacobi_at(kube, job, 1000), within=60, interval=1, what="jacobi past iteration 1000")
    assert len(victims) == 2, victims
    t0 = time.monotonic()
    await taint_node(rn_api, nodes[1], SPOT_ITN_TAINT, effect="NoSchedule")
    try:
        await eventually(lambda: run_started(2, 2), within=60, interval=0.5, what="run 2 on real-1's 2 workers")
        record(restart_mode_spot_taint_to_run_on_2_s=round(time.monotonic() - t0, 1))
    finally:
        await untaint_node(rn_api, nodes[1], SPOT_ITN_TAINT)
    t1 = time.monotonic()
    await eventually(lambda: run_started(3, 4), within=150, interval=1, what="run 3 on 4 workers after the regrow")
    record(restart_mode_untaint_to_run_on_4_s=round(time.monotonic() - t1, 1))
    obj = await finished(kube, job, within=240)
    log = await _launcher_log_now(kube, job)
    assert has_condition(obj, "Succeeded"), (obj.get("status"), log[-4000:])

    # Each stop was a checkpoint the next run resumed from, on the new size.
    stops = [(int(i), int(n)) for i, n in STOPPED.findall(log)]
    starts = [(int(i), int(n)) for i, n in STARTING.findall(log)]
    assert [n for _, n in stops] == [4, 2] and [n for _, n in starts] == [4, 2, 4], log
    assert starts[1][0] == stops[0][0] and starts[2][0] == stops[1][0], (stops, starts)
    assert "run 1 stopped (status 75)" in log and "run 2 stopped (status 75)" in log, log
    [(iterations, ranks, checksum)] = CHECKSUM.findall(log)
    assert (iterations, ranks) == ("6000", "4"), log
    assert checksum == uninterrupted, "the grid differs from an uninterrupted run's"

    # Not one launcher failure: the same launcher pod, never restarted; status and Events name both restarts.
    [launcher] = await kube.list("v1", "Pod", f"{c.LABEL_JOB_NAME}={job},{c.LABEL_JOB_ROLE}=launcher")
    assert launcher["status"]["containerStatuses"][0]["restartCount"] == 0, launcher["status"]
    restarts = obj["status"]["restarts"]
    assert restarts["count"] == 2 and restarts["lastCause"] == "regrow" and restarts["lastWorkers"] == 4, restarts
    said = [e["message"] for e in await kube.events(job) if e.get("reason") == "Restarted"]
    assert any(m.startswith("scale-in: the MPI run restarts on 2 workers") for m in said), said
    assert any(m.startswith("regrow: the MPI run restarts on 4 workers") for m in said), said
    # The leaving workers were out of the run's hostfile before their pods went: run 2 listed neither.
    assert not any(v in line for v in victims for line in log.splitlines() if "run 2 on" in line)


async def _launcher_log_now(kube: Kube, job: str) -> str:
    pods = await kube.list("v1", "Pod", f"{c.LABEL_JOB_NAME}={job},{c.LABEL_JOB_ROLE}=launcher")
    if not pods:
        return ""
    return (await kube_logs(kube, pods[0]["metadata"]["name"]))[1]


async def _jacobi_at(kube: Kube, job: str, iteration: int) -> bool:
    """jacobi's last checkpoint line is at `iteration` or beyond."""
    done = [int(i) for i in re.findall(r"checkpoint at iteration (\d+)", await _launcher_log_now(kube, job))]
    return bool(done) and max(done) >= iteration


def _uninterrupted_checksum(tb: cluster.Testbed, kube: Kube, pod: str) -> str:
    """jacobi with the same arguments, one rank, no delay, no checkpoint, in a worker of the job (the program's
    own image): the checksum an uninterrupted run ends with."""
    out = kubectl(tb, "-n", kube.ns, "exec", pod, "--", "env", "OMPI_ALLOW_RUN_AS_ROOT=1",
                  "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", JACOBI, *JACOBI_ARGS.split(), timeout=120)  # fmt: skip
    [(_, _, checksum)] = CHECKSUM.findall(out)
    return checksum


@pytest.mark.sidebyside
async def test_the_same_jacobi_job_under_the_reference_loses_its_run_with_the_spot_node(
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],
    rn_api: ApiClient,
    rn_kube: Kube,
    rn_operator: OperatorProcess,
    mpi_images: dict[str, str],
) -> None:
    """The side by side for docs/results.md: the example as a reference user runs it (the reference prunes
    elasticPolicy; `-n 4` for "$MPIJOB_RANKS"), under the reference operator built from its module, on the
    same nodes. The spot taint on real-2 changes nothing there; when real-2's pods go (the reclaim, 20 s
    later), mpirun loses two ranks, the launcher fails, the reference recreates the two workers and they
    wait Pending while real-2 is away; the job has not finished after ABSENT_S. Then real-2 returns, and
    what happens is recorded (jacobi resumes from its periodic checkpoint if the launcher still retries)."""
    reference_built()
    tb, kube = real_testbed[0], rn_kube
    nodes = realnode.node_names(REAL_NODES)
    body = restart_job(tb, mpi_images["openmpi4"])
    del body["spec"]["elasticPolicy"]
    launcher = body["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    launcher["command"] = [part.replace('"$MPIJOB_RANKS"', "4") for part in launcher["command"]]
    job = body["metadata"]["name"]
    await shared_claim(tb, kube, "checkpoints")
    rn_operator.stop()
    reference = Reference(tb.kubeconfig, tb.state_dir / "reference-jacobi.log")
    absent_s = 60
    try:
        await put_reference_crd(kube.client)
        with contextlib.suppress(Exception):
            await kube.client.create("/api/v1/namespaces", {"metadata": {"name": "mpi-operator"}})
        reference.start()
        await kube.create(body)
        await eventually(lambda: _jacobi_at(kube, job, 1000), within=240, interval=1, what="jacobi past 1000")
        victims = [p["metadata"]["name"] for p in await kube.workers(job) if p["spec"].get("nodeName") == nodes[1]]
        await taint_node(rn_api, nodes[1], SPOT_ITN_TAINT, effect="NoSchedule")
        t0 = time.monotonic()
        try:
            await asyncio.sleep(20)  # the notice; then the node is reclaimed: its pods die
            kubectl(tb, "-n", kube.ns, "delete", "pod", *victims, "--grace-period=0", "--force", "--wait=false")
            await asyncio.sleep(absent_s)
            obj = await kube.job(job)
            pending = [p["metadata"]["name"] for p in await kube.workers(job) if p["status"].get("phase") == "Pending"]
            pods = await kube.list("v1", "Pod", f"{c.LABEL_JOB_NAME}={job},{c.LABEL_JOB_ROLE}=launcher")
            launcher_restarts = sum(
                s.get("restartCount", 0) for p in pods for s in (p["status"].get("containerStatuses") or [])
            )
            record(
                reference_jacobi_while_real_2_away={
                    "conditions": [k["type"] for k in (obj.get("status") or {}).get("conditions") or []
                                   if k.get("status") == "True"],
                    "pending_workers": pending,
                    "launcher_pods": len(pods),
                    "launcher_restarts": launcher_restarts,
                }
            )  # fmt: skip
            assert not has_condition(obj, "Succeeded"), obj.get("status")
        finally:
            await untaint_node(rn_api, nodes[1], SPOT_ITN_TAINT)
        obj = await finished(kube, job, within=300)
        log = await _launcher_log_now(kube, job)
        record(
            reference_jacobi_after_real_2_returned={
                "conditions": [k["type"] for k in (obj.get("status") or {}).get("conditions") or []
                               if k.get("status") == "True"],
                "taint_to_finished_s": round(time.monotonic() - t0, 1),
                "checksum": CHECKSUM.findall(log),
                "resumed_at": STARTING.findall(log),
            }
        )  # fmt: skip
    finally:
        reference.stop()
        await install_crd(str(tb.kubeconfig))
        rn_operator.start()
