"""/metrics of the real operator process, scraped after a spot-taint scale-in on the testbed."""

from __future__ import annotations

import urllib.request

import pytest
from elastic_jobs import elastic_job, names, node_of, own_nodes, start_job, wait_gone, wait_job
from kube import Kube, eventually
from kubernetes_asyncio.client import ApiClient
from operator_harness import OperatorProcess
from prometheus_client.parser import text_string_to_metric_families

from mpijob_testbed import SPOT_ITN_TAINT, taint_node

pytestmark = pytest.mark.integration

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
GRACE = 5  # scaleInGracePeriodSeconds of the test's job


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum over every label set that includes `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


async def test_metrics_after_a_spot_taint_scale_in_show_the_decision_removals_and_latencies(
    kube: Kube, api: ApiClient, running_operator: OperatorProcess
) -> None:
    port = running_operator.metrics_port
    signal = f"taint:{SPOT_ITN_TAINT}"
    before = await eventually(lambda: _scrape_async(port), what="/metrics answering")
    job = "metrics"
    async with own_nodes(api, kube, "a", "b") as (node_a, node_b):
        pods = await start_job(kube, elastic_job(job, [node_a, node_b], grace=GRACE), [node_a, node_b])
        victims = sorted(n for n, p in zip(names(pods), pods, strict=True) if node_of(p) == node_b)
        await taint_node(api, node_b, SPOT_ITN_TAINT, effect="NoSchedule")
        await wait_gone(kube, job, victims)
        await wait_job(kube, job, lambda j: not (j["spec"]["elasticPolicy"].get("workersToDelete")), "list emptied")
        after = scrape(port)

    def delta(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    # The reference operator's names, unchanged.
    assert delta("mpi_operator_jobs_created_total") >= 1
    assert value(after, "mpi_operator_is_leader") == 1
    assert value(after, "mpi_operator_job_info", launcher=f"{job}-launcher", namespace=kube.ns) == 1
    # One scale-in decision for the taint, both workers removed, each with its latencies observed.
    assert delta("mpijob_elastic_scale_in_decisions_total", signal=signal) == 1
    assert delta("mpijob_elastic_workers_removed_total", signal=signal) == 2
    for hist in ("signal_to_discovery", "discovery_to_deleted", "signal_to_deleted"):
        assert delta(f"mpijob_elastic_{hist}_seconds_count", signal=signal) == 2, hist
    # The grace period lies between leaving discovery and deletion. It is counted on the API server's clock
    # from a leaving-since stamp, both of one-second resolution: at least GRACE - 2 s each.
    grace_sum = delta("mpijob_elastic_discovery_to_deleted_seconds_sum", signal=signal)
    assert grace_sum >= 2 * (GRACE - 2), grace_sum
    # The controller's own.
    assert delta("mpijob_reconcile_duration_seconds_count") > 0
    assert delta("mpijob_api_writes_total", verb="delete", resource="pods", code="200") >= 2
    assert delta("mpijob_api_writes_total", verb="patch", resource="mpijobs") >= 1
    assert ("mpijob_workqueue_depth", frozenset()) in after
    assert ("mpijob_elastic_leaving_workers", frozenset()) in after


async def _scrape_async(port: int) -> Samples | None:
    try:
        return scrape(port)
    except OSError:  # not listening yet (the operator may have just been restarted)
        return None
