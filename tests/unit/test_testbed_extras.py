"""The wiring of the testbed's opt-in scheduling components (no processes: what is registered where)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from mpijob_testbed import extras
from mpijob_testbed.errors import TestbedError


def test_with_accepts_known_components_in_start_order() -> None:
    assert extras.parse_with("coscheduling, kueue") == ("kueue", "coscheduling")
    assert extras.parse_with("") == ()


def test_with_volcano_fails_with_the_reason_and_unknown_names_fail_too() -> None:
    with pytest.raises(TestbedError, match=r"volcano.*not served"):
        extras.parse_with("volcano")
    with pytest.raises(TestbedError, match="unknown component"):
        extras.parse_with("kueue,yunikorn")


def _hook(name: str, group: str, resource: str, path: str) -> dict[str, object]:
    return {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"service": {"name": "webhook-service", "namespace": "system", "path": path}},
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "rules": [{"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": [resource]}],
    }


def test_kueue_webhooks_point_at_the_local_server_and_leave_out_other_integrations(tmp_path: Path) -> None:
    manifests = tmp_path / "config" / "components" / "webhook"
    manifests.mkdir(parents=True)
    doc = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "mutating-webhook-configuration"},
        "webhooks": [
            _hook("mmpijob.kb.io", "kubeflow.org", "mpijobs", "/mutate-kubeflow-org-v2beta1-mpijob"),
            _hook("mpytorchjob.kb.io", "kubeflow.org", "pytorchjobs", "/mutate-pytorchjob"),
            _hook("mpod.kb.io", "", "pods", "/mutate--v1-pod"),
            _hook("mworkload.kb.io", "kueue.x-k8s.io", "workloads", "/mutate-workload"),
        ],
    }
    (manifests / "manifests.yaml").write_text(yaml.safe_dump(doc))

    [(plural, body)] = extras._kueue_webhooks(tmp_path, "https://127.0.0.1:9443", "Q0E=")

    assert plural == "mutatingwebhookconfigurations"
    assert body["metadata"] == {"name": "kueue-mutating-webhook-configuration"}
    hooks = {h["name"]: h for h in body["webhooks"]}
    assert set(hooks) == {"mmpijob.kb.io", "mworkload.kb.io"}
    assert hooks["mmpijob.kb.io"]["clientConfig"] == {
        "url": "https://127.0.0.1:9443/mutate-kubeflow-org-v2beta1-mpijob",
        "caBundle": "Q0E=",
    }


def test_kueue_crds_served_in_two_versions_get_the_conversion_webhook(tmp_path: Path) -> None:
    bases = tmp_path / "config" / "components" / "crd" / "bases"
    bases.mkdir(parents=True)
    for name in ("workloads.kueue.x-k8s.io", "resourceflavors.kueue.x-k8s.io"):
        (bases / f"{name}.yaml").write_text(yaml.safe_dump({"metadata": {"name": name}, "spec": {"group": "g"}}))

    crds = {c["metadata"]["name"]: c for c in extras._kueue_crds(tmp_path, "https://127.0.0.1:1", "Q0E=")}

    conversion = crds["workloads.kueue.x-k8s.io"]["spec"]["conversion"]
    assert conversion["webhook"]["clientConfig"] == {"url": "https://127.0.0.1:1/convert", "caBundle": "Q0E="}
    assert "conversion" not in crds["resourceflavors.kueue.x-k8s.io"]["spec"]


def test_coscheduling_profile_gang_schedules_under_its_own_scheduler_name(tmp_path: Path) -> None:
    config = extras.coscheduling_config(tmp_path / "kubeconfig")

    [profile] = config["profiles"]
    assert profile["schedulerName"] == "scheduler-plugins-scheduler"
    assert profile["plugins"]["queueSort"]["enabled"] == [{"name": "Coscheduling"}]
    assert {"name": "Coscheduling"} in profile["plugins"]["multiPoint"]["enabled"]


def test_with_prometheus_starts_after_the_scheduling_components() -> None:
    assert extras.parse_with("prometheus,kueue") == ("kueue", "prometheus")


def _rendered(target_port: object) -> list[dict[str, object]]:
    return [
        {"kind": "Service", "spec": {"ports": [{"name": "metrics", "port": 9090, "targetPort": target_port}]}},
        {
            "kind": "Deployment",
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "ports": [
                                    {"name": "health", "containerPort": 8080},
                                    {"name": "metrics", "containerPort": 9191},
                                ]
                            }
                        ]
                    }
                }
            },
        },
        {"kind": "ServiceMonitor", "spec": {"endpoints": [{"port": "metrics", "path": "/m", "interval": "15s"}]}},
    ]


def test_the_scrape_job_follows_the_service_monitor_port_name_to_the_container_port(tmp_path: Path) -> None:
    from mpijob_testbed import prometheus
    from mpijob_testbed.paths import Layout

    endpoint = prometheus.endpoint_from_rendered(_rendered("metrics"))
    assert endpoint == prometheus.ScrapeEndpoint(path="/m", interval="15s", port=9191, port_name="metrics")
    assert prometheus.endpoint_from_rendered(_rendered(9292)).port == 9292

    [job] = prometheus.config(Layout(tmp_path), endpoint)["scrape_configs"]
    assert (job["metrics_path"], job["scrape_interval"]) == ("/m", "15s")
    with pytest.raises(TestbedError, match="ServiceMonitor"):
        prometheus.endpoint_from_rendered(_rendered("metrics")[:2])


def test_a_target_file_is_replaced_whole_so_prometheus_never_reads_half_of_it(tmp_path: Path) -> None:
    from mpijob_testbed import prometheus
    from mpijob_testbed.paths import Layout

    layout = Layout(tmp_path)
    (prometheus.workdir(layout) / "targets").mkdir(parents=True)
    prometheus.add_target(layout, "op", "127.0.0.1:1234", {"pod": "op-0"})
    [group] = json.loads((prometheus.workdir(layout) / "targets" / "op.json").read_text())
    assert group == {"targets": ["127.0.0.1:1234"], "labels": {"pod": "op-0"}}
    assert [p.name for p in (prometheus.workdir(layout) / "targets").iterdir()] == ["op.json"]
    prometheus.remove_target(layout, "op")
    assert not list((prometheus.workdir(layout) / "targets").iterdir())
