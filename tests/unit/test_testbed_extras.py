"""The wiring of the testbed's opt-in scheduling components (no processes: what is registered where)."""

from __future__ import annotations

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
