"""Integration-test harness: one cluster for the whole pytest session.

* `testbed` (session): brings up the local testbed (4 kwok nodes) at the default state directory, or
  reuses the one already running there. It is left running afterwards when it was already running
  before the session, or when MPIJOB_KEEP_TESTBED=1; otherwise it is brought down at the end.
  With MPIJOB_TEST_KUBECONFIG set, no testbed is started and that cluster is used instead (the
  fixture then yields None; testbed-only helpers such as complete_pod need kwok and will not work).
  Meanwhile a thread starts again any testbed component that exits on its own, as the kubelet restarts a
  crashed static pod (kube-scheduler exits on purpose after some API server restarts under load).
* `component_restarts` (session): the components started again so far.
* `kubeconfig` (session): path of the kubeconfig the tests use.
* `api` (session): a kubernetes_asyncio ApiClient for it.
* `namespace` (function): a fresh namespace per test, deleted afterwards without waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from cannot_run import cannot_run
from kube import Kube, eventually
from kubernetes_asyncio.client import ApiClient, CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException
from operator_harness import OperatorProcess
from rbac import operator_kubeconfig as make_operator_kubeconfig
from real_node import host_as_found, skip_reason

from mpijob.cli.operator import install_crd
from mpijob.kube.client import Client
from mpijob_testbed import cluster
from mpijob_testbed.client import load_api_client
from mpijob_testbed.paths import repo_root, resolve_state_dir
from mpijob_testbed.waiting import wait_until

ENV_TEST_KUBECONFIG = "MPIJOB_TEST_KUBECONFIG"
ENV_KEEP_TESTBED = "MPIJOB_KEEP_TESTBED"
TESTBED_NODES = 4
TEST_NAMESPACE_LABEL = "testbed.mpijob.io/test"


def _echo(message: str) -> None:
    # stderr, so the start-up progress shows with `-s` and in the captured output of a failing test.
    print(message, file=sys.stderr, flush=True)


class _Kubelet:
    """For the whole session, starts again a testbed component that exited on its own, as the kubelet
    restarts a crashed static pod (`cluster.revive`): kube-scheduler exits on purpose when its cache stops
    making sense, which a kube-apiserver restart under load can cause (test_chaos.py restarts it), sometimes
    tens of seconds later; without a restart no pod is scheduled for the rest of the session."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.revived: list[str] = []  # every component started again, in order
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="testbed-kubelet", daemon=True)

    def _run(self) -> None:
        while not self.stopping.wait(1.0):
            try:
                self.revived += cluster.revive(self.state_dir, echo=_echo)
            except Exception as err:  # keep watching; the tests show what a dead component breaks
                _echo(f"[testbed] could not start a component again: {err}")


_KUBELET: _Kubelet | None = None


@pytest.fixture(scope="session")
def testbed() -> Iterator[cluster.Testbed | None]:
    global _KUBELET
    if os.environ.get(ENV_TEST_KUBECONFIG):
        yield None
        return
    state_dir = resolve_state_dir(None)
    was_running = cluster.is_running(state_dir)
    started = cluster.up(nodes=TESTBED_NODES, state_dir=state_dir, echo=_echo)
    _KUBELET = _Kubelet(state_dir)
    _KUBELET.thread.start()
    try:
        yield started
    finally:
        _KUBELET.stopping.set()
        _KUBELET.thread.join(timeout=120)
        if started.started and not was_running and os.environ.get(ENV_KEEP_TESTBED) != "1":
            cluster.down(state_dir, echo=_echo)


@pytest.fixture(scope="session")
def component_restarts(testbed: cluster.Testbed | None) -> list[str]:
    """The testbed components started again so far this session (see `_Kubelet`); empty without a testbed."""
    return _KUBELET.revived if _KUBELET is not None and testbed is not None else []


@pytest.fixture(scope="session")
def kubeconfig(testbed: cluster.Testbed | None) -> Path:
    if testbed is None:
        return Path(os.environ[ENV_TEST_KUBECONFIG])
    return testbed.kubeconfig


@pytest.fixture(scope="session")
async def api(kubeconfig: Path) -> AsyncIterator[ApiClient]:
    client = await load_api_client(kubeconfig)
    async with client:
        yield client


def _namespace_name(test_name: str) -> str:
    # DNS-1123 label (63 chars max) that still says which test made it.
    stem = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:48].rstrip("-")
    return f"{stem}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def namespace(api: ApiClient, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    v1 = CoreV1Api(api)
    name = _namespace_name(request.node.name)
    await v1.create_namespace({"metadata": {"name": name, "labels": {TEST_NAMESPACE_LABEL: "true"}}})

    async def default_service_account() -> bool:
        # Pods are rejected until the serviceaccount controller has created the namespace's default SA.
        try:
            await v1.read_namespaced_service_account("default", name)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    await wait_until(default_service_account, what=f"ServiceAccount {name}/default", within=60)
    yield name
    try:
        await v1.delete_namespace(name)
    except ApiException as exc:
        if exc.status != 404:
            raise


# -- the operator under test -------------------------------------------------------------------------


@pytest.fixture(scope="session")
def operator_kubeconfig(kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The operator's own credentials: a TokenRequest token of its ServiceAccount, bound to the shipped
    RBAC (deploy/base/rbac.yaml), applied here. Not admin: a verb the role lacks fails the tests."""

    async def make() -> Path:
        api = await load_api_client(kubeconfig)
        async with api:
            out = tmp_path_factory.mktemp("operator-sa") / "kubeconfig"
            return await make_operator_kubeconfig(Client(api, qps=0, burst=1), kubeconfig, out)

    return asyncio.run(make())


@pytest.fixture(scope="session")
def operator(
    kubeconfig: Path,
    operator_kubeconfig: Path,
    testbed: cluster.Testbed | None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    """One `mpijob operator` process for the session, after the CRD is installed, running as its own
    ServiceAccount and serving /metrics on a free port. Tests may kill and restart it; whatever state it
    is in, the next test gets it running."""
    asyncio.run(install_crd(str(kubeconfig)))
    log_dir = testbed.state_dir if testbed is not None else tmp_path_factory.mktemp("operator")
    proc = OperatorProcess(operator_kubeconfig, log_dir, metrics=True)
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def running_operator(operator: OperatorProcess) -> OperatorProcess:
    if not operator.alive():
        operator.start()
    return operator


@pytest.fixture
async def kube(api: ApiClient, namespace: str, running_operator: OperatorProcess) -> Kube:
    """Accessors for the test's namespace, with the operator running."""
    return Kube(Client(api, qps=0, burst=1), namespace)


# -- the real-node testbed (test_real_node*.py) --------------------------------------------------------------
# Module-scoped: each real-node module gets its own testbed, operator and API client, started for its first
# test and taken down after its last (`real_testbed` reads the module's REAL_NODES, 1 by default).


@pytest.fixture(scope="module")
def real_testbed(request: pytest.FixtureRequest) -> Iterator[tuple[cluster.Testbed, dict[str, Any]]]:
    count = int(getattr(request.module, "REAL_NODES", 1))
    reason = skip_reason()
    if reason is None:
        # The one step that needs the network (Debian's mirror): a machine without it skips, loudly.
        deps = subprocess.run(["bash", str(repo_root() / "testbed" / "install-system-deps.sh")], check=False)
        if deps.returncode != 0:
            reason = f"testbed/install-system-deps.sh failed (exit {deps.returncode})"
    if reason:
        cannot_run(f"real node not possible here: {reason}")
    # Short: containerd's socket lives inside and unix socket paths are limited to 107 bytes.
    state_dir = Path(tempfile.mkdtemp(prefix="mpijob-rn-"))
    before = host_as_found()
    t = time.monotonic()
    tb = cluster.up(nodes=2, state_dir=state_dir, real_nodes=count)
    print(f"testbed with {count} real node(s) up in {time.monotonic() - t:.1f}s")
    try:
        yield tb, before
    finally:
        if state_dir.exists():
            cluster.down(state_dir)


@pytest.fixture(scope="module")
async def rn_api(real_testbed: tuple[cluster.Testbed, dict[str, Any]]) -> AsyncIterator[ApiClient]:
    client = await load_api_client(real_testbed[0].kubeconfig)
    async with client:
        yield client


@pytest.fixture(scope="module")
def rn_operator(real_testbed: tuple[cluster.Testbed, dict[str, Any]]) -> Iterator[OperatorProcess]:
    tb = real_testbed[0]
    asyncio.run(install_crd(str(tb.kubeconfig)))
    proc = OperatorProcess(tb.kubeconfig, tb.state_dir)
    proc.start()
    yield proc
    proc.stop()
    # Kept beside the launchers' logs (the state directory goes with the testbed) for a failure's post-mortem.
    with contextlib.suppress(OSError):
        shutil.copy(proc.log_path, tb.state_dir.parent / f"{tb.state_dir.name}-operator.log")


@pytest.fixture
async def rn_kube(rn_api: ApiClient, request: pytest.FixtureRequest) -> AsyncIterator[Kube]:
    v1 = CoreV1Api(rn_api)
    # A DNS label: a parametrized test's id ("[openmpi4]") has characters a namespace cannot.
    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name[5:30].lower()).strip("-")
    name = f"rn-{stem}-{uuid.uuid4().hex[:6]}"
    await v1.create_namespace({"metadata": {"name": name}})

    async def sa() -> bool:
        items = (await v1.list_namespaced_service_account(name)).items
        return any(x.metadata.name == "default" for x in items)

    await eventually(sa, within=60, what=f"default ServiceAccount in {name}")
    yield Kube(Client(rn_api, qps=0, burst=1), name)
    await v1.delete_namespace(name)
