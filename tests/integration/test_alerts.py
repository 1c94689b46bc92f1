"""The alert rules and the dashboard, read by a real Prometheus (built from its Go module by
testbed/prometheus/build.sh): `promtool test rules` on the shipped rules, then on the testbed a Prometheus
(`--with prometheus`) scraping the real operator process as the chart's ServiceMonitor says, through a real
spot interruption on kwok nodes that takes an elastic job below its minReplicas. The alert for that fires,
the others stay quiet, every dashboard query answers (the gauges with the values the scenario leaves, the
counters behind the scale-in, latency and regrow panels with its counts), and `mpijob history` tells both
interruptions."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cannot_run import cannot_run
from elastic_jobs import (
    HOSTNAME,
    all_running_live,
    elastic_job,
    mpijob_cli,
    node_of,
    own_nodes,
    phase,
    start_job,
    wait_gone,
    wait_job,
    wait_workers,
)
from kube import Kube, eventually, has_condition, live
from kubernetes_asyncio.client import ApiClient
from operator_harness import OperatorProcess

from mpijob.api import constants as c
from mpijob_testbed import SPOT_ITN_TAINT, cluster, extras, taint_node
from mpijob_testbed import prometheus as prom
from mpijob_testbed.errors import TestbedError
from mpijob_testbed.paths import Layout

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy/prometheus/mpijob-alerts.yaml"
RULE_TESTS = REPO / "deploy/prometheus/mpijob-alerts.test.yaml"
DASHBOARD = REPO / "deploy/grafana/mpijob-dashboard.json"
# Grafana's $__rate_interval for this dashboard's default range (1 h) and the chart's 30 s scrape:
# max($__interval + scrape, 4 x scrape) = 2 m.
RATE_INTERVAL = "2m"
# What the scenario must fire (the test rules variant has every `for:` at 0 s; the rest must stay quiet).
EXPECTED = "MPIJobBelowMinReplicas"


def _echo(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def promtool() -> Path:
    binary = prom.bin_dir() / "promtool"
    if not binary.exists():
        cannot_run(f"{binary} missing: run `bash testbed/prometheus/build.sh` (make test does)")
    return binary


def test_the_shipped_rules_pass_promtool_check_and_their_unit_tests() -> None:
    binary = promtool()
    check = subprocess.run([str(binary), "check", "rules", str(RULES)], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    run = subprocess.run(
        [str(binary), "test", "rules", RULE_TESTS.name],
        cwd=RULE_TESTS.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout, run.stdout


def test_promtool_fails_the_rule_tests_when_an_alert_fires_too_early(tmp_path: Path) -> None:
    # The unit tests can fail: the same tests against rules whose `for:` is gone.
    binary = promtool()
    (tmp_path / RULES.name).write_text(re.sub(r"\bfor: \S+", "for: 0s", RULES.read_text()))
    (tmp_path / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    run = subprocess.run(
        [str(binary), "test", "rules", RULE_TESTS.name], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert run.returncode != 0 and "FAILED" in run.stdout + run.stderr, run.stdout


# -- on the testbed -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def prometheus(testbed: cluster.Testbed | None, operator: OperatorProcess) -> Iterator[Layout]:
    """The testbed's Prometheus, scraping the session's operator process; the rules variant loaded only once
    the operator has been scraped (an empty TSDB would say "no leader")."""
    if testbed is None:
        cannot_run("needs the testbed's Prometheus (MPIJOB_TEST_KUBECONFIG points elsewhere)")
    try:
        prom.build(echo=_echo)
    except TestbedError as err:
        cannot_run(f"prometheus could not be built: {err}")
    cluster.start_extras((extras.PROMETHEUS,), testbed.state_dir, echo=_echo)
    layout = Layout(testbed.state_dir)
    prom.add_target(layout, "operator", f"127.0.0.1:{operator.metrics_port}")
    try:
        yield layout
    finally:
        prom.set_rules(layout, "mpijob-alerts-test", None)
        prom.remove_target(layout, "operator")


def query(layout: Layout, expr: str) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = prom.api(layout, "query", query=expr)["result"]
    return result


def finite(result: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in result if not math.isnan(float(r["value"][1]))]


def firing(layout: Layout) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for alert in prom.api(layout, "alerts")["alerts"]:
        out.setdefault(alert["labels"]["alertname"], []).append(alert)
    return out


def panel_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]
    return queries + [("docs/operations.md", q) for q in doc_queries()]


def doc_queries() -> list[str]:
    """The lines of docs/operations.md's promql blocks: the queries it tells people to run."""
    text = (REPO / "docs/operations.md").read_text()
    blocks = re.findall(r"```promql\n(.*?)```", text, flags=re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


async def test_spot_interruption_below_min_replicas_fires_its_alert_only_and_every_dashboard_query_answers(
    kube: Kube, api: ApiClient, kubeconfig: Path, prometheus: Layout, running_operator: OperatorProcess
) -> None:
    layout = prometheus
    # Scraped as the chart's ServiceMonitor says.
    endpoint = prom.chart_endpoint()
    [job] = [
        j
        for j in yaml.safe_load(prom.api(layout, "status/config")["yaml"])["scrape_configs"]
        if j["job_name"] == prom.JOB
    ]
    assert (job["metrics_path"], job["scrape_interval"]) == (endpoint.path, endpoint.interval)
    up = await eventually(
        lambda: _answer(layout, f'up{{job="{prom.JOB}"}} == 1 and on() mpijob_operator_is_leader == 1'),
        within=120,
        what="the operator scraped, and leading",
    )
    _echo(f"[alerts] operator scraped: {up}")
    prom.set_rules(layout, "mpijob-alerts-test", re.sub(r"\bfor: \S+", "for: 0s", RULES.read_text()))
    await eventually(lambda: _rules_loaded(layout), within=60, what="the rules variant loaded")

    signal = f"taint:{SPOT_ITN_TAINT}"
    name = "alerts"
    # The gauges below sum over every job the operator sees: this test's must be the only one (an earlier
    # module's namespaces may still be going away).
    await eventually(lambda: _only_jobs_of(kube), within=180, what="no MPIJob or worker pod outside this test's")
    started = time.time()
    async with own_nodes(api, kube, "a", "b", "c", spot=("b", "c")) as (node_a, node_b, node_c):
        # Regrow on (elastic_job turns it off): after b the job grows back on c, and after c its probes wait
        # for a node; a probe timeout longer than the test keeps it out of backoff.
        regrow = {"enabled": True, "probeTimeoutSeconds": 3600}
        body = elastic_job(name, [node_b, node_c], workers=4, min_replicas=2, grace=2, regrow=regrow)
        body["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["nodeSelector"] = {HOSTNAME: node_a}
        pods = await start_job(kube, body, [node_b, node_c])
        # The counters the story moves, before it (the session's operator may have counted earlier tests), from
        # a scrape after this test began.
        await eventually(
            lambda: _answer(layout, f'timestamp(up{{job="{prom.JOB}"}}) > {started}'),
            within=120,
            what="a scrape after the test began",
        )
        before = {key: _total(layout, expr) for key, expr in _counters(signal).items()}
        # 1. b's spot interruption: its two workers leave, the job holds its floor (2 of minReplicas 2).
        await taint_node(api, node_b, SPOT_ITN_TAINT, effect="NoSchedule")
        await wait_gone(kube, name, [p["metadata"]["name"] for p in pods if node_of(p) == node_b])
        await wait_job(kube, name, lambda j: not j["spec"]["elasticPolicy"].get("workersToDelete"), "list emptied")
        # Scraped before the next one, so the rates below see both interruptions.
        await eventually(
            lambda: _answer(layout, f'mpijob_elastic_workers_removed_total{{signal="{signal}"}} >= 2'),
            within=120,
            what="the first scale-in scraped",
        )
        quiet = firing(layout)
        assert not quiet, f"alerts firing before the job went below its floor: {sorted(quiet)}"
        await wait_workers(kube, name, all_running_live(4), "grown back to 4 workers on node c", within=180)
        on_c = sorted(p["metadata"]["name"] for p in live(await kube.workers(name)) if node_of(p) == node_c)
        # 2. c's too: its workers go at once, their replacements have nowhere to run -> BelowMinReplicas.
        await taint_node(api, node_c, SPOT_ITN_TAINT, effect="NoSchedule")
        await wait_gone(kube, name, on_c)
        await wait_job(kube, name, _below_min, "condition BelowMinReplicas=True")

        alerts = await eventually(
            lambda: _fired(layout, EXPECTED), within=120, what=f"{EXPECTED} firing on Prometheus's /api/v1/alerts"
        )
        _echo(f"[alerts] firing: {json.dumps(alerts, indent=1)}")
        assert set(alerts) == {EXPECTED}, f"others fired too: {sorted(alerts)}"
        [below] = alerts[EXPECTED]
        assert below["state"] == "firing" and below["labels"]["severity"] == "warning"
        assert float(below["value"]) >= 1

        answers = await _evaluate_panels(layout, await _expected_gauges(kube, name, min_replicas=2))
        on_b = sorted(p["metadata"]["name"] for p in pods if node_of(p) == node_b)
        instance = f"127.0.0.1:{running_operator.metrics_port}"
        await _check_counters(layout, instance, signal, before, on_b, on_c)
        # The same interruptions from the user's side: `mpijob history` (what kubectl mpijob history runs).
        args = ("history", name, "-n", kube.ns, "--kubeconfig", str(kubeconfig))
        code, text = await mpijob_cli(*args)
        assert code == 0, text
        _echo(f"[history]\n{text}")
        code, doc = await mpijob_cli(*args, "-o", "json")
        assert code == 0, doc
        shrinks = [e for e in json.loads(doc)["history"] if e["kind"] == "shrink"]
        assert [(e["reason"], e["signal"]) for e in shrinks] == [("NodeTerminating", f"taint {SPOT_ITN_TAINT}")] * 2
        for entry, node, victims in zip(shrinks, (node_b, node_c), (on_b, on_c), strict=True):
            assert sorted(entry["workers"]) == victims, (entry, victims)
            assert node in entry["message"]
    for title, expr, result in answers:
        _echo(f"[dashboard] {title}: {expr} -> {result}")


def _below_min(job: dict[str, Any]) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c["type"] == "BelowMinReplicas" and c["status"] == "True" for c in conditions)


async def _answer(layout: Layout, expr: str) -> list[dict[str, Any]] | None:
    return finite(query(layout, expr)) or None


async def _rules_loaded(layout: Layout) -> bool:
    groups = prom.api(layout, "rules")["groups"]
    names = {r["name"] for g in groups for r in g["rules"]}
    want = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    return want <= names


async def _fired(layout: Layout, name: str) -> dict[str, list[dict[str, Any]]] | None:
    alerts = firing(layout)
    return alerts if any(a["state"] == "firing" for a in alerts.get(name, [])) else None


async def _evaluate_panels(layout: Layout, expected: dict[str, Series]) -> list[tuple[str, str, Any]]:
    """Every panel's query with Grafana's $__rate_interval substituted: each must answer with a number (not
    nothing, not only NaN), the regrow panel's included; those in `expected` (the gauges the scenario
    determines) with exactly those series and values (eventually: a scrape is 30 s apart)."""
    answers = []
    queries = [(title, expr.replace("$__rate_interval", RATE_INTERVAL)) for title, expr in panel_queries()]
    unknown = set(expected) - {q for _, q in queries}
    assert not unknown, f"expected values for queries no panel has: {sorted(unknown)}"
    for title, concrete in queries:
        want = expected.get(concrete)
        result = await eventually(
            lambda concrete=concrete, want=want: (
                _answer(layout, concrete) if want is None else _is(layout, concrete, want)
            ),
            within=90,
            what=f"panel {title!r}: {concrete}" + ("" if want is None else f" == {want}"),
        )
        answers.append((title, concrete, [(r["metric"], r["value"][1]) for r in result]))
    return answers


# A query's answer as {labels: value}; labels as sorted (name, value) pairs.
Series = dict[tuple[tuple[str, str], ...], float]


def _series(result: list[dict[str, Any]]) -> Series:
    return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in result}


async def _is(layout: Layout, expr: str, want: Series) -> list[dict[str, Any]] | None:
    result = finite(query(layout, expr))
    return result if _series(result) == want else None


async def _only_jobs_of(kube: Kube) -> bool:
    jobs = (await kube.client.get("/apis/kubeflow.org/v2beta1/mpijobs"))["items"]
    pods = await kube.client.request(
        "GET", "/api/v1/pods", query=[("labelSelector", f"{c.LABEL_JOB_ROLE}={c.ROLE_WORKER}")]
    )
    return all(o["metadata"]["namespace"] == kube.ns for o in jobs + pods["items"])


async def _expected_gauges(kube: Kube, name: str, *, min_replicas: int) -> dict[str, Series]:
    """What the gauge panels must show for the state the scenario left: the job's workers on b and c gone,
    Worker replicas at its floor, their replacements Pending (no node for them), below its floor and below
    its regrow target (4), no probe in backoff (probeTimeoutSeconds 3600); read back from the API, which must
    agree with that story, and the only job there is (`_only_jobs_of`)."""
    job = await kube.job(name)
    workers = live(await kube.workers(name))
    phases = Counter(phase(p) for p in workers)
    replicas = job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
    assert replicas == min_replicas and phases == {"Pending": replicas}, (replicas, phases)
    assert int(job["metadata"]["annotations"][c.ANNOTATION_REGROW_TARGET]) == 4, job["metadata"]["annotations"]
    assert not ((job.get("status") or {}).get("regrow") or {}).get("nextAttemptTime"), job["status"]
    # Not Running (no worker runs), not finished, suspended or restarting: kubectl's STATE column says Created.
    states = {
        k: has_condition(job, k) for k in ("Created", "Running", "Restarting", "Suspended", "Succeeded", "Failed")
    }
    assert states == {**dict.fromkeys(states, False), "Created": True}, job["status"]["conditions"]
    one: Series = {(): 1.0}
    none: Series = {(): 0.0}
    return {
        "sum by (state) (mpijob_jobs)": {(("state", s),): float(s == "Created") for s in (*states, "Pending")},
        'sum(mpijob_worker_pods{phase="Running"})': {(): float(phases["Running"])},
        'sum(mpijob_worker_pods{phase="Pending"})': {(): float(phases["Pending"])},
        "sum(mpijob_elastic_leaving_workers)": none,
        "sum(mpijob_elastic_jobs_below_min_replicas)": one,
        "sum(mpijob_elastic_jobs_below_target)": one,
        "sum(mpijob_elastic_jobs_regrow_backoff)": none,
        "sum(mpijob_operator_is_leader)": one,
    }


def _counters(signal: str) -> dict[str, str]:
    """The counters behind the scale-in, latency and regrow panels, read raw."""
    return {
        "removed": f'sum(mpijob_elastic_workers_removed_total{{signal="{signal}"}})',
        "decisions": f'sum(mpijob_elastic_scale_in_decisions_total{{signal="{signal}"}})',
        "to_discovery": f'sum(mpijob_elastic_signal_to_discovery_seconds_count{{signal="{signal}"}})',
        "to_deleted": f'sum(mpijob_elastic_signal_to_deleted_seconds_count{{signal="{signal}"}})',
        "bound": 'sum(mpijob_elastic_regrow_probes_total{result="bound"})',
    }


def _total(layout: Layout, expr: str) -> float:
    """A counter's value; 0 before its series exists (a labelled counter appears with its first count)."""
    return sum(float(r["value"][1]) for r in finite(query(layout, expr)))


async def _check_counters(
    layout: Layout, instance: str, signal: str, before: dict[str, float], on_b: list[str], on_c: list[str]
) -> None:
    """The story's counts: every worker of b and c removed for the taint, each timed from its signal to its
    leaving discovery and to its deletion; at least one decision per interruption and at most one per worker;
    the regrow after b bound b's workers' number. Then the dashboard's own increase over $__rate_interval,
    evaluated just after the scrape that counted c's workers: c's interruption shows."""
    removed = len(on_b) + len(on_c)
    exprs = _counters(signal)

    async def counted() -> dict[str, float] | None:
        now = {key: _total(layout, expr) - before[key] for key, expr in exprs.items()}
        return now if now["removed"] >= removed else None

    delta = await eventually(counted, within=90, what=f"{removed} removals scraped")
    _echo(f"[counters] counted during the story: {delta}")
    assert {k: delta[k] for k in ("removed", "to_discovery", "to_deleted", "bound")} == {
        "removed": removed,
        "to_discovery": removed,
        "to_deleted": removed,
        "bound": len(on_b),
    }, delta
    assert 2 <= delta["decisions"] <= removed, delta
    # The scrapes of the last 15 min, raw: the first that counted them all (this operator process's series:
    # a testbed kept from an earlier run keeps that run's operator's too).
    selector = f'mpijob_elastic_workers_removed_total{{signal="{signal}",instance="{instance}"}}'
    [scrapes] = query(layout, f"{selector}[15m]")
    at = str(next(float(t) for t, v in scrapes["values"] if float(v) >= before["removed"] + removed) + 1)
    for metric, least in (("workers_removed", len(on_c)), ("scale_in_decisions", 1)):
        expr = f"sum by (signal) (increase(mpijob_elastic_{metric}_total[{RATE_INTERVAL}]))"
        assert expr in {e.replace("$__rate_interval", RATE_INTERVAL) for _, e in panel_queries()}, expr
        got = _series(finite(prom.api(layout, "query", query=expr, time=at)["result"]))
        _echo(f"[dashboard] at {at}, just after c's removals were scraped: {expr} -> {got}")
        assert got.get((("signal", signal),), 0) >= least, (expr, at, got)
