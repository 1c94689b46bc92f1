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
import os
import re
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from kube import Kube
from kubernetes_asyncio.client import ApiClient, CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException
from operator_harness import OperatorProcess
from rbac import operator_kubeconfig as make_operator_kubeconfig

from mpijob.cli.operator import install_crd
from mpijob.executor.client import Client
from mpijob_testbed import cluster
from mpijob_testbed.client import load_api_client
from mpijob_testbed.paths import resolve_state_dir
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
