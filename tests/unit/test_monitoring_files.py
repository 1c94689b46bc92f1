"""The alert rules and the dashboard as shipped: one source (deploy/prometheus, deploy/grafana), the chart's
copies equal to it, every alert covered by a promtool test case, and every metric they read exported by the
operator, the regrow ones (issue 19) included."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from mpijob.app.metrics import Metrics, _CacheCollector, _JobStateCollector
from mpijob.runtime.cache import Cache

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy/prometheus/mpijob-alerts.yaml"
RULE_TESTS = REPO / "deploy/prometheus/mpijob-alerts.test.yaml"
DASHBOARD = REPO / "deploy/grafana/mpijob-dashboard.json"
CHART_FILES = REPO / "deploy/helm/mpijob-operator/files"
# The regrow metrics (issue 19): the "Regrow attempts" panel and MPIJobRegrowStuckInBackoff read them.
REGROW_METRICS = {
    "mpijob_elastic_regrow_probes_total",
    "mpijob_elastic_jobs_below_target",
    "mpijob_elastic_jobs_regrow_backoff",
}
_METRIC = re.compile(r"\b(mpi_operator_[a-z_]+|mpijob_[a-z_]+)")


def rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def panel_queries() -> dict[str, list[str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return {p["title"]: [t["expr"] for t in p["targets"]] for p in dashboard["panels"]}


def exported() -> set[str]:
    metrics = Metrics()
    cache = Cache()
    names = {s.name for fam in metrics.registry.collect() for s in fam.samples} | {
        fam.name for fam in metrics.registry.collect()
    }
    for collector in (_CacheCollector(cache), _JobStateCollector(cache)):
        names |= {fam.name for fam in collector.collect()}
    # Histograms' and counters' series names.
    return names | {f"{n}{suffix}" for n in names for suffix in ("_bucket", "_count", "_sum", "_total")}


def test_the_chart_carries_the_same_rules_and_dashboard_as_deploy() -> None:
    assert (CHART_FILES / "mpijob-alerts.yaml").read_text() == RULES.read_text(), "run `make chart-files`"
    assert (CHART_FILES / "mpijob-dashboard.json").read_text() == DASHBOARD.read_text(), "run `make chart-files`"


def test_every_alert_has_a_firing_and_a_quiet_promtool_case() -> None:
    cases = [c for t in yaml.safe_load(RULE_TESTS.read_text())["tests"] for c in t.get("alert_rule_test") or []]
    for rule in rules():
        mine = [c for c in cases if c["alertname"] == rule["alert"]]
        assert any(c["exp_alerts"] for c in mine), f"{rule['alert']}: no case where it fires"
        assert any(not c["exp_alerts"] for c in mine), f"{rule['alert']}: no case where it stays quiet"


def test_every_alert_has_a_severity_a_summary_a_description_a_runbook_and_a_for() -> None:
    runbook = (REPO / "docs/operations.md").read_text()
    assert "\n## Alerts\n" in runbook
    for rule in rules():
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
        assert rule["annotations"]["runbook_url"].endswith("/docs/operations.md#alerts"), rule["alert"]
        row = f"| `{rule['alert']}` | {rule['labels']['severity']} | `{rule['expr']}` | {rule['for']} |"
        assert row in runbook, f"docs/operations.md's alert table does not say: {row}"
        assert "for" in rule, rule["alert"]


def test_alerts_and_panels_read_only_metrics_the_operator_exports_the_regrow_ones_included() -> None:
    have = exported()
    used = {m for r in rules() for m in _METRIC.findall(r["expr"])}
    used |= {m for exprs in panel_queries().values() for e in exprs for m in _METRIC.findall(e)}
    assert not used - have, f"not exported by the operator: {sorted(used - have)}"
    # And read: a panel or an alert that stopped reading one would leave it unwatched.
    assert used >= REGROW_METRICS, f"exported but read by no panel or alert: {sorted(REGROW_METRICS - used)}"


def test_the_dashboard_has_the_panels_an_operator_of_this_operator_looks_at() -> None:
    titles = set(panel_queries())
    for want in (
        "Jobs by state",
        "Workers running and leaving",
        "Scale-in decisions and workers removed, by signal",
        "Signal -> discovery latency",
        "Signal -> deletion latency",
        "Regrow attempts",
        "API writes",
        "API write conflicts",
        "Reconcile duration",
    ):
        assert want in titles, want
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert all(p["datasource"]["uid"] == "${datasource}" for p in dashboard["panels"])
