"""The three install paths, applied to (or rendered for) the testbed: the single bundle
(`kubectl apply --server-side -f`), the kustomize base and overlays (`kubectl apply -k`), and the Helm chart
(`helm lint` / `helm template` with a helm built from its Go module). They must agree with each other, and
with the CRD generated from the models and the RBAC the operator is tested under. Then a CRD upgrade over a
running job."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from cannot_run import cannot_run
from chart import CHART, IMAGE, KUBE_VERSION, NODES_ONLY, REPO, by_kind, docs, helm, helm_refuses, namespaced_chart
from kube import Kube, eventually, has_condition, kubectl, live, mpijob

from mpijob.api.crd import crd

pytestmark = pytest.mark.integration

BUNDLE = REPO / "deploy/mpijob-operator.yaml"


def _args(objs: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    args: list[str] = objs[("Deployment", "mpijob-operator")]["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


async def test_the_bundle_is_the_standalone_overlay_rendered_and_carries_the_generated_crd(kubeconfig: Path) -> None:
    _, rendered = await kubectl(kubeconfig, "kustomize", str(REPO / "deploy/overlays/standalone"))
    assert docs(BUNDLE.read_text()) == docs(rendered), "deploy/mpijob-operator.yaml is stale: run `make bundle`"
    objs = by_kind(docs(rendered))
    assert objs[("CustomResourceDefinition", "mpijobs.kubeflow.org")] | {"metadata": None} == crd() | {"metadata": None}
    for kind, name in (
        ("Namespace", "mpijob-system"),
        ("ServiceAccount", "mpijob-operator"),
        ("ClusterRole", "mpijob-operator"),
        ("ClusterRoleBinding", "mpijob-operator"),
        ("Role", "mpijob-operator-leader-election"),
        ("ClusterRole", "mpijob-mpijobs-edit"),
        ("Deployment", "mpijob-operator"),
        ("Service", "mpijob-operator-metrics"),
    ):
        assert (kind, name) in objs, (kind, name)
    assert "--leader-elect" in _args(objs)
    assert objs[("Deployment", "mpijob-operator")]["spec"]["replicas"] == 1
    assert objs[("Deployment", "mpijob-operator")]["metadata"]["labels"]["app.kubernetes.io/version"] == "0.1.0"


async def test_bundle_and_ha_overlay_apply_server_side_and_create_what_they_say(kube: Kube, kubeconfig: Path) -> None:
    # --force-conflicts: the CRD and RBAC already exist, created by the test session's own installer.
    await kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(BUNDLE))
    try:
        deployment = await kube.client.get("/apis/apps/v1/namespaces/mpijob-system/deployments/mpijob-operator")
        assert deployment["spec"]["replicas"] == 1
        await kube.client.get("/api/v1/namespaces/mpijob-system/services/mpijob-operator-metrics")
        await kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-k", str(REPO / "deploy/overlays/ha"))
        deployment = await kube.client.get("/apis/apps/v1/namespaces/mpijob-system/deployments/mpijob-operator")
        assert deployment["spec"]["replicas"] == 2
        spread = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
        assert spread[0]["topologyKey"] == "kubernetes.io/hostname"
        pdb = await kube.client.get("/apis/policy/v1/namespaces/mpijob-system/poddisruptionbudgets/mpijob-operator")
        assert pdb["spec"]["minAvailable"] == 1
    finally:
        # Not the CRD, namespace or RBAC: the session's operator runs under them.
        for path in (
            "/apis/apps/v1/namespaces/mpijob-system/deployments/mpijob-operator",
            "/api/v1/namespaces/mpijob-system/services/mpijob-operator-metrics",
            "/apis/policy/v1/namespaces/mpijob-system/poddisruptionbudgets/mpijob-operator",
        ):
            await kubectl(kubeconfig, "delete", "--raw", path, check=False)


def test_helm_chart_lints_and_renders_the_same_crd_rbac_and_operator_flags() -> None:
    helm("lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION, *IMAGE)
    base = by_kind(
        docs((REPO / "deploy/base/rbac.yaml").read_text()) + docs((REPO / "deploy/base/user-roles.yaml").read_text())
    )
    assert docs((CHART / "crds/kubeflow.org_mpijobs.yaml").read_text()) == [crd()], "run `make crd`"

    default = by_kind(docs(helm("template", "r", str(CHART), "-n", "ops", "--kube-version", KUBE_VERSION, *IMAGE)))
    for kind, name in (("ClusterRole", "mpijob-operator"), ("Role", "mpijob-operator-leader-election")):
        assert default[(kind, name)]["rules"] == base[(kind, name)]["rules"], f"chart {kind} {name} drifted"
    for role in ("mpijob-mpijobs-admin", "mpijob-mpijobs-edit", "mpijob-mpijobs-view"):
        assert default[("ClusterRole", role)].get("rules") == base[("ClusterRole", role)].get("rules")
        assert set(base[("ClusterRole", role)]["metadata"]["labels"].items()) <= set(
            default[("ClusterRole", role)]["metadata"]["labels"].items()
        )
    args = _args(default)
    assert "--leader-elect" in args and "--lock-namespace=ops" in args and "--metrics-port=9090" in args
    assert not any(a.startswith("--namespace=") for a in args)
    assert ("PodDisruptionBudget", "mpijob-operator") not in default
    assert ("ServiceMonitor", "mpijob-operator") not in default
    assert default[("ClusterRoleBinding", "mpijob-operator")]["subjects"][0]["namespace"] == "ops"

    custom = by_kind(
        docs(
            helm(
                "template", "r", str(CHART), "-n", "ops", "--kube-version", KUBE_VERSION,
                "--set", "replicaCount=2",
                "--set", "image.repository=registry.example/mpijob",
                "--set", "image.digest=sha256:" + "0" * 64,
                "--set", "watchNamespaces={team-a,team-b}",
                "--set", "kubeApi.qps=20", "--set", "kubeApi.burst=40",
                "--set", "terminationTaints={karpenter.sh/disrupted,example.com/going}",
                "--set", "log.format=text",
                "--set", "metrics.serviceMonitor.enabled=true",
                "--set", "controllerName=mpijob.kubeflow.org/operator", "--set", "ignoreUnmanaged=true",
            )
        )
    )  # fmt: skip
    args = _args(custom)
    for flag in (
        "--namespace=team-a",
        "--namespace=team-b",
        "--kube-api-qps=20",
        "--kube-api-burst=40",
        "--termination-taints=karpenter.sh/disrupted,example.com/going",
        "--log-format=text",
        "--controller-name=mpijob.kubeflow.org/operator",
        "--ignore-unmanaged",
    ):
        assert flag in args, flag
    deployment = custom[("Deployment", "mpijob-operator")]
    assert deployment["spec"]["replicas"] == 2
    assert (
        deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/mpijob@sha256:" + "0" * 64
    )
    assert ("PodDisruptionBudget", "mpijob-operator") in custom
    monitor = custom[("ServiceMonitor", "mpijob-operator")]
    service = custom[("Service", "mpijob-operator-metrics")]
    assert set(monitor["spec"]["selector"]["matchLabels"].items()) <= set(service["metadata"]["labels"].items())


def test_helm_chart_refuses_to_install_without_an_image_and_names_the_value_to_set() -> None:
    # `helm install` renders as `helm template` does, before anything is sent to the cluster.
    said = helm_refuses("template", "r", str(CHART), "--kube-version", KUBE_VERSION)
    assert "image.repository is not set" in said and "--set image.repository=" in said, said
    # An empty value is no image either; any repository renders (a registry-less one too, e.g. a local image).
    said = helm_refuses("template", "r", str(CHART), "--kube-version", KUBE_VERSION, "--set", "image.repository=")
    assert "image.repository is not set" in said, said
    local = by_kind(
        docs(helm("template", "r", str(CHART), "--kube-version", KUBE_VERSION, "--set", "image.repository=mpijob"))
    )
    assert _container(local)["image"] == "mpijob:0.1.0"


def _container(objs: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = objs[("Deployment", "mpijob-operator")]["spec"]["template"]["spec"]["containers"][0]
    return container


def test_helm_chart_passes_extra_args_and_env_to_the_operator_and_probes_its_readiness() -> None:
    default = _container(by_kind(docs(helm("template", "r", str(CHART), "--kube-version", KUBE_VERSION, *IMAGE))))
    assert default["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert default["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert "env" not in default
    custom = _container(
        by_kind(
            docs(
                helm(
                    "template", "r", str(CHART), "--kube-version", KUBE_VERSION, *IMAGE,
                    "--set", "extraArgs={--cluster-domain=cluster.example,--workers=12}",
                    "--set", "env[0].name=MPIJOB_CLUSTER_DOMAIN", "--set", "env[0].value=other.example",
                    "--set", "env[1].name=NODE", "--set", "env[1].valueFrom.fieldRef.fieldPath=spec.nodeName",
                    "--set", "health.readinessProbe=false",
                )
            )
        )
    )  # fmt: skip
    # After the chart's own flags, so a flag the chart sets too (--workers) is the user's: the last one wins.
    assert custom["args"][-2:] == ["--cluster-domain=cluster.example", "--workers=12"]
    assert custom["args"].index("--workers=4") < custom["args"].index("--workers=12")
    assert custom["env"] == [
        {"name": "MPIJOB_CLUSTER_DOMAIN", "value": "other.example"},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    assert "readinessProbe" not in custom
    # The operator's own command line takes them: the last --workers wins, the cluster domain is set.
    from mpijob.cli.main import build_parser

    parsed = build_parser().parse_args(custom["args"])
    assert (parsed.workers, parsed.cluster_domain) == (12, "cluster.example")


def test_helm_chart_with_watch_namespaces_grants_roles_in_them_and_only_node_reads_cluster_wide() -> None:
    rendered = namespaced_chart("ops", "team-a", "team-b")
    base = by_kind(docs((REPO / "deploy/base/rbac.yaml").read_text()))[("ClusterRole", "mpijob-operator")]["rules"]
    cluster_scoped = {(o["kind"], o["metadata"]["name"]) for o in rendered if not o["metadata"].get("namespace")}
    assert cluster_scoped == {("ClusterRole", "mpijob-operator"), ("ClusterRoleBinding", "mpijob-operator")}
    objs = by_kind(rendered)
    assert objs[("ClusterRole", "mpijob-operator")]["rules"] == NODES_ONLY
    roles = {o["metadata"]["namespace"]: o for o in rendered if o["kind"] == "Role"}
    bindings = {o["metadata"]["namespace"]: o for o in rendered if o["kind"] == "RoleBinding"}
    assert set(roles) == set(bindings) == {"ops", "team-a", "team-b"}  # ops: the Lease's
    for ns in ("team-a", "team-b"):
        # Every rule of the cluster-wide install but the nodes one, in each watched namespace.
        assert roles[ns]["rules"] == [r for r in base if r not in NODES_ONLY], ns
        assert bindings[ns]["roleRef"]["name"] == roles[ns]["metadata"]["name"]
        assert bindings[ns]["subjects"] == [{"kind": "ServiceAccount", "name": "mpijob-operator", "namespace": "ops"}]
    # rbac.namespaced=false: the one ClusterRole, as without watchNamespaces.
    wide = by_kind(
        docs(
            helm(
                "template", "r", str(CHART), "-n", "ops", "--kube-version", KUBE_VERSION, *IMAGE,
                "--set", "watchNamespaces={team-a}", "--set", "rbac.namespaced=false",
            )
        )
    )  # fmt: skip
    assert wide[("ClusterRole", "mpijob-operator")]["rules"] == base
    assert ("Role", "mpijob-operator") not in wide


async def test_crd_upgrade_over_an_existing_install_keeps_the_running_job_and_its_workers(
    kube: Kube, kubeconfig: Path
) -> None:
    # An install of an earlier version: its CRD (committed as generated at commit e52b5aa).
    old = REPO / "tests/integration/data/crd-e52b5aa.yaml"
    assert docs(old.read_text()) != [crd()]
    await kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(old))
    try:
        await kube.create(mpijob("upgrade", workers=2))

        async def running() -> dict[str, Any] | None:
            job = await kube.job("upgrade")
            return job if has_condition(job, "Running") else None

        await eventually(running, what="the job Running under the old CRD")
        before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in live(await kube.workers("upgrade"))}
    finally:
        # The upgrade as documented (docs/install.md): the new CRD (the bundle's first document, checked equal
        # above), server-side, over the old install.
        new = REPO / "deploy/crd/kubeflow.org_mpijobs.yaml"
        await kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(new))
    await kubectl(kubeconfig, "wait", "--for=condition=Established", "crd/mpijobs.kubeflow.org", "--timeout=60s")
    served = await kube.client.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/mpijobs.kubeflow.org")
    assert served["spec"]["versions"] == crd()["spec"]["versions"]
    # Still running with the same workers, and still reconciled: a scale-up after the upgrade is served.
    assert has_condition(await kube.job("upgrade"), "Running")
    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in live(await kube.workers("upgrade"))} == before
    await kube.patch_job("upgrade", {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 3}}}})

    async def three() -> bool:
        return len(live(await kube.workers("upgrade"))) == 3

    await eventually(three, what="a third worker after the CRD upgrade")
    survivors = {p["metadata"]["name"]: p["metadata"]["uid"] for p in live(await kube.workers("upgrade"))}
    assert before.items() <= survivors.items()


async def test_helm_rendered_objects_are_accepted_by_the_api_server(
    kubeconfig: Path, operator_kubeconfig: Path, tmp_path: Path
) -> None:
    # Server-side dry run: every object the chart renders passes the real API server's validation (the
    # release namespace exists: the operator_kubeconfig fixture applied it with the shipped RBAC).
    for name, extra in (
        ("default", ()),
        # The watched namespace must exist: the operator's Role and RoleBinding go there.
        ("ha", ("--set", "replicaCount=2", "--set", "watchNamespaces={mpijob-system}", "--set", "log.format=text")),
    ):
        rendered = helm(
            "template", "r", str(CHART), "-n", "mpijob-system", "--kube-version", KUBE_VERSION, *IMAGE, *extra
        )  # fmt: skip
        path = tmp_path / f"{name}.yaml"
        path.write_text(rendered)
        _, out = await kubectl(
            kubeconfig, "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", str(path)
        )
        assert "deployment.apps/mpijob-operator serverside-applied (server dry run)" in out, out


RULES = REPO / "deploy/prometheus/mpijob-alerts.yaml"
DASHBOARD = REPO / "deploy/grafana/mpijob-dashboard.json"
MONITORING = ("--set", "alerts.enabled=true", "--set", "dashboard.enabled=true")


def test_helm_chart_ships_the_alert_rules_and_the_dashboard_only_when_asked() -> None:
    helm("lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION, *IMAGE, *MONITORING)
    default = by_kind(docs(helm("template", "r", str(CHART), "-n", "ops", "--kube-version", KUBE_VERSION, *IMAGE)))
    assert ("PrometheusRule", "mpijob-operator") not in default
    assert ("ConfigMap", "mpijob-operator-dashboard") not in default

    on = by_kind(
        docs(
            helm(
                "template", "r", str(CHART), "-n", "ops", "--kube-version", KUBE_VERSION, *IMAGE, *MONITORING,
                "--set", "alerts.labels.release=kube-prometheus-stack",
                "--set", "dashboard.namespace=monitoring", "--set", "dashboard.annotations.grafana_folder=MPI",
            )
        )
    )  # fmt: skip
    rule = on[("PrometheusRule", "mpijob-operator")]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"] == yaml.safe_load(RULES.read_text()), "the PrometheusRule is the rules file"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    dashboard = on[("ConfigMap", "mpijob-operator-dashboard")]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["namespace"] == "monitoring"
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "MPI"}
    assert json.loads(dashboard["data"]["mpijob-dashboard.json"]) == json.loads(DASHBOARD.read_text())


def _prometheus_operator_crds() -> list[Path]:
    """The Prometheus operator's own CRDs, from its Go module (downloaded by testbed/prometheus/build.sh)."""
    record = (
        Path(os.environ.get("MPIJOB_PROMETHEUS_BIN", REPO / ".cache/testbed/prometheus")) / "prometheus-operator.module"
    )
    if not record.exists():
        cannot_run(f"{record} missing: run `bash testbed/prometheus/build.sh` (make test does)")
    crds = Path(record.read_text().strip()) / "example/prometheus-operator-crd"
    return [crds / f"monitoring.coreos.com_{plural}.yaml" for plural in ("servicemonitors", "prometheusrules")]


async def test_helm_chart_with_alerts_dashboard_and_service_monitor_installs_against_the_prometheus_operator_crds(
    kube: Kube, kubeconfig: Path, tmp_path: Path
) -> None:
    # The Prometheus operator's CRDs validate (and prune by) their schemas: what is read back is what Prometheus
    # would load. A real apply, not a dry run, into the test's namespace.
    crds = _prometheus_operator_crds()
    for path in crds:
        await kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(path))
    for path in crds:
        name = docs(path.read_text())[0]["metadata"]["name"]
        await kubectl(kubeconfig, "wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
    # The whole chart with everything on passes the API server's validation (a dry run: the operator's
    # Deployment, RBAC... are the other tests' business)...
    whole = tmp_path / "whole.yaml"
    whole.write_text(
        helm(
            "template", "r", str(CHART), "-n", kube.ns, "--kube-version", KUBE_VERSION, *IMAGE, *MONITORING,
            "--set", "metrics.serviceMonitor.enabled=true",
        )
    )  # fmt: skip
    _, out = await kubectl(
        kubeconfig, "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", str(whole)
    )
    for what in ("deployment.apps/mpijob-operator", "prometheusrule.monitoring.coreos.com/mpijob-operator"):
        assert f"{what} serverside-applied (server dry run)" in out, out
    # ...and its monitoring objects are applied for real.
    rendered = helm(
        "template", "r", str(CHART), "-n", kube.ns, "--kube-version", KUBE_VERSION, *IMAGE, *MONITORING,
        "--set", "metrics.serviceMonitor.enabled=true",
        "--show-only", "templates/monitoring.yaml", "--show-only", "templates/metrics.yaml",
    )  # fmt: skip
    path = tmp_path / "monitoring.yaml"
    path.write_text(rendered)
    _, out = await kubectl(kubeconfig, "apply", "--server-side", "-f", str(path))
    for what in (
        "prometheusrule.monitoring.coreos.com/mpijob-operator",
        "servicemonitor.monitoring.coreos.com/mpijob-operator",
        "configmap/mpijob-operator-dashboard",
        "service/mpijob-operator-metrics",
    ):
        assert f"{what} serverside-applied" in out, out
    base = f"/apis/monitoring.coreos.com/v1/namespaces/{kube.ns}"
    served = await kube.client.get(f"{base}/prometheusrules/mpijob-operator")
    assert served["spec"] == yaml.safe_load(RULES.read_text()), "the CRD pruned or changed a rule"
    monitor = await kube.client.get(f"{base}/servicemonitors/mpijob-operator")
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]
    cm = await kube.client.get(f"/api/v1/namespaces/{kube.ns}/configmaps/mpijob-operator-dashboard")
    assert json.loads(cm["data"]["mpijob-dashboard.json"]) == json.loads(DASHBOARD.read_text())
