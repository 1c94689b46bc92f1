"""Two operators with --leader-elect: only the Lease holder writes; when it dies, the standby takes over."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from kube import Kube, eventually, has_condition, live, mpijob
from operator_harness import OperatorProcess

from mpijob.kube.client import ApiError

pytestmark = pytest.mark.integration


async def test_only_the_lease_holder_reconciles_and_a_standby_takes_over_when_it_dies(
    kube: Kube, operator_kubeconfig: Path, running_operator: OperatorProcess, tmp_path: Path
) -> None:
    # As installed: the operator's ServiceAccount, whose Role grants Leases only in mpijob-system (so this
    # also proves that Role). A Lease left by an earlier run is removed first, so the holders seen are ours.
    lock_ns = "mpijob-system"
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{lock_ns}/leases/mpijob-operator"
    try:
        await kube.client.delete(lease_path)
    except ApiError as err:
        if err.status != 404:
            raise
    args = ("--leader-elect", "--lock-namespace", lock_ns)
    first = OperatorProcess(operator_kubeconfig, tmp_path, args)
    second = OperatorProcess(operator_kubeconfig, tmp_path / "b", args)
    (tmp_path / "b").mkdir()
    running_operator.stop()  # the session's operator does not take part in the election
    try:
        first.start()

        async def lease_holder() -> str | None:
            try:
                lease = await kube.client.get(lease_path)
            except ApiError:
                return None
            holder: str | None = (lease.get("spec") or {}).get("holderIdentity")
            return holder

        leader = await eventually(lease_holder, within=60, what="the first operator to take the Lease")
        second.start()
        await asyncio.sleep(3)  # the standby is up, watching, and must not lead
        assert await lease_holder() == leader

        await kube.create(mpijob("le-a", workers=2))

        async def running(name: str) -> bool:
            return has_condition(await kube.job(name), "Running")

        await eventually(lambda: running("le-a"), what="le-a Running under the first leader")
        assert "leading as" not in second.log_tail(400)

        first.stop(kill=True)  # no chance to release the Lease: the standby waits for it to expire
        await kube.create(mpijob("le-b", workers=2))
        new_leader = await eventually(
            lambda: _changed(lease_holder, leader), within=90, what="the standby to take the Lease"
        )
        assert new_leader != leader
        await eventually(lambda: running("le-b"), within=60, what="le-b Running under the new leader")
        assert len(live(await kube.workers("le-b"))) == 2
        assert "leading as" in second.log_tail(400)
    finally:
        first.stop()
        second.stop()
        running_operator.start()


async def _changed(read: Callable[[], Awaitable[str | None]], old: str) -> str | None:
    value = await read()
    return value if value and value != old else None


async def test_a_gracefully_stopped_leader_releases_the_lease_and_the_standby_takes_it_at_its_next_retry(
    kube: Kube, operator_kubeconfig: Path, running_operator: OperatorProcess, tmp_path: Path
) -> None:
    """SIGTERM (a pod deleted, a rolling update): after its reconcilers have ended, the leader empties the
    Lease's holder, so the standby leads at its next retry instead of after the 15 s lease; the time is
    printed. A leader that is killed leaves the Lease as it was (the test above)."""
    lock_ns, name = "mpijob-system", "mpijob-graceful"
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{lock_ns}/leases/{name}"
    args = ("--leader-elect", "--lock-namespace", lock_ns, "--lease-name", name)
    first = OperatorProcess(operator_kubeconfig, tmp_path, args)
    second = OperatorProcess(operator_kubeconfig, tmp_path / "b", args)
    (tmp_path / "b").mkdir()

    async def holder() -> str | None:
        try:
            spec = (await kube.client.get(lease_path)).get("spec") or {}
        except ApiError:
            return None
        return str(spec["holderIdentity"]) if spec.get("holderIdentity") else None

    running_operator.stop()
    try:
        first.start()
        leader = await eventually(holder, within=60, what="the first operator to take the Lease")
        first.stop()
        lease = await kube.client.get(lease_path)
        assert not lease["spec"].get("holderIdentity"), lease["spec"]
        assert lease["spec"]["leaseDurationSeconds"] == 1, lease["spec"]
        assert "released the lease" in first.log_tail(400)

        first.start()
        leader = await eventually(holder, within=60, what="the restarted operator to take the released Lease")
        second.start()
        await asyncio.sleep(3)  # the standby is up and must not lead
        assert await holder() == leader
        started = asyncio.get_running_loop().time()
        first.stop()
        await eventually(lambda: _changed(holder, leader), within=30, interval=0.2, what="the standby leading")
        print(f"standby leading {asyncio.get_running_loop().time() - started:.1f} s after the leader's SIGTERM")
    finally:
        first.stop()
        second.stop()
        await kube.client.delete(lease_path)
        running_operator.start()
