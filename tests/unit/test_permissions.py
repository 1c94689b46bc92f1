"""Issue 40: under the reference operator's own ClusterRole (an install that only swapped the image), plain
MPIJobs run as they run under the reference, and the elastic features the role does not grant are turned
off, said at start-up and on each elastic job (the PermissionsMissing condition and one Event), never a
crash: the operator asks what it may do (runtime/permissions.py) and does only that."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from mpijob.app.operator import config_within
from mpijob.executor.apply import json_merge_patch
from mpijob.planner.actions import ConfirmAbsence
from mpijob.planner.plan import plan
from mpijob.planner.snapshot import OperatorConfig
from mpijob.runtime import permissions
from mpijob.runtime.kinds import watched

from .builders import (
    NO_REGROW,
    creates,
    elastic,
    emits,
    mpijob,
    node,
    running_status,
    snap,
    status_of,
    worker,
)
from .upstream_examples import upstream_dir

REPO = Path(__file__).resolve().parents[2]
Triple = tuple[str, str, str]


def role_grants(rules: list[dict[str, Any]]) -> set[Triple]:
    """Every (group, resource, verb) of NEEDS and of read-then-update that the rules allow."""
    wanted = {(n.group, n.resource, v) for n in permissions.NEEDS for v in n.verbs}
    wanted |= {(g, r, "update") for g, r in permissions.UPDATABLE}

    def allows(rule: dict[str, Any], t: Triple) -> bool:
        return all(
            t[i] in rule.get(key, []) or "*" in rule.get(key, [])
            for i, key in enumerate(("apiGroups", "resources", "verbs"))
        )

    return {t for t in wanted if any(allows(rule, t) for rule in rules)}


def grants_under(rules: list[dict[str, Any]]) -> permissions.Grants:
    allowed = role_grants(rules)
    asked = {(n.group, n.resource, v) for n in permissions._decisive("") for v in n.verbs}
    return permissions.Grants(frozenset(asked - allowed))


def cluster_role(path: Path, name: str) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    rules: list[dict[str, Any]] = next(d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == name)[
        "rules"
    ]
    return rules


def reference_cluster_role() -> list[dict[str, Any]]:
    """manifests/base/cluster-role.yaml of the module bench/reference/go.mod pins (Go module proxy)."""
    return cluster_role(upstream_dir() / "manifests/base/cluster-role.yaml", "mpi-operator")


OURS = cluster_role(REPO / "deploy/base/rbac.yaml", "mpijob-operator")


def test_the_needs_table_is_exactly_the_cluster_role_we_ship() -> None:
    needs = {(n.group, n.resource, v) for n in permissions.NEEDS for v in n.verbs}
    shipped = {(g, r, v) for rule in OURS for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert needs == shipped


def test_our_cluster_role_turns_nothing_off() -> None:
    grants = grants_under(OURS)
    assert grants.off() == [] and grants.update_instead_of_patch() == frozenset()
    assert grants.elastic_message() == "" and grants.missing(permissions.CORE) == []


def test_the_reference_cluster_role_turns_off_the_elastic_extras_and_writes_by_update() -> None:
    grants = grants_under(reference_cluster_role())
    assert grants.off() == [permissions.NODE_SIGNALS, permissions.API_DISCOVERY, permissions.DISRUPTION_BUDGETS]
    assert grants.update_instead_of_patch() == {"ConfigMap", "Service", "Job"}
    assert grants.missing(permissions.CORE) == []  # plain MPIJobs lack nothing
    unwatched = {w.kind for w in watched()} - {w.kind for w in watched(config_within(OperatorConfig(), grants))}
    assert unwatched == {"Node", "ServiceAccount", "Role", "RoleBinding", "PodDisruptionBudget"}
    message = grants.elastic_message()
    assert "get, list, watch nodes" in message and "poddisruptionbudgets.policy" in message
    assert "deploy/reference-swap/elastic-rbac.yaml" in message


def test_the_elastic_rbac_file_grants_what_the_reference_role_lacks() -> None:
    extra = [d for d in yaml.safe_load_all((REPO / "deploy/reference-swap/elastic-rbac.yaml").read_text()) if d]
    rules = [r for d in extra if d["kind"] == "ClusterRole" for r in d["rules"]]
    grants = grants_under(reference_cluster_role() + rules)
    assert grants.off() == [] and grants.update_instead_of_patch() == frozenset()


def test_kinds_of_a_feature_that_is_off_are_not_watched() -> None:
    config = OperatorConfig(node_signals=False, disruption_budgets=False, discovery_access=False)
    assert {w.kind for w in watched()} - {w.kind for w in watched(config)} == {
        "Node",
        "PodDisruptionBudget",
        "ServiceAccount",
        "Role",
        "RoleBinding",
    }


OFF = OperatorConfig(
    node_signals=False,
    disruption_budgets=False,
    discovery_access=False,
    api_discovery=False,
    permissions_message="node termination signals off: may not get, list, watch nodes",
)


def test_an_elastic_job_is_told_once_what_is_off() -> None:
    job = mpijob(workers=2, elastic_policy=elastic(1, 4, regrow=NO_REGROW), status=running_status())
    pods = [worker(job, i, node="n1") for i in range(2)]
    first = plan(snap(job, pods, config=OFF))
    cond = next(c for c in status_of(first)["conditions"] if c["type"] == "PermissionsMissing")  # type: ignore[index]
    assert cond["status"] == "True" and "may not get, list, watch nodes" in cond["message"]
    assert len(emits(first, "Warning", "PermissionsMissing")) == 1
    told = {**job, "status": status_of(first)}
    assert emits(plan(snap(told, pods, config=OFF)), "Warning", "PermissionsMissing") == []
    granted = status_of(plan(snap(told, pods)))
    assert granted is not None
    assert next(c for c in granted["conditions"] if c["type"] == "PermissionsMissing")["status"] == "False"


def test_a_plain_job_gets_no_permissions_condition() -> None:
    job = mpijob(workers=2, status=running_status())
    status = status_of(plan(snap(job, [worker(job, i, node="n1") for i in range(2)], config=OFF))) or {}
    assert all(c["type"] != "PermissionsMissing" for c in status.get("conditions") or [])


def test_without_node_signals_an_uncached_or_tainted_node_decides_nothing() -> None:
    job = mpijob(workers=2, elastic_policy=elastic(1, 4, regrow=NO_REGROW), status=running_status())
    pods = [worker(job, 0, node="gone"), worker(job, 1, node="tainted")]
    nodes = {"tainted": node("tainted", taints=["node.kubernetes.io/unschedulable"], unschedulable=True)}
    actions = plan(snap(job, pods, node_map=nodes, checks={}, config=OFF))
    assert not any(isinstance(a, ConfirmAbsence) for a in actions)
    assert emits(actions, reason="NodeTerminating") == []
    on = plan(snap(job, pods, node_map=nodes, checks={}, config=replace(OFF, node_signals=True)))
    assert any(isinstance(a, ConfirmAbsence) for a in on)  # the same world with nodes watched: a live read


def test_without_disruption_budgets_an_elastic_job_gets_no_pdb() -> None:
    job = mpijob(workers=2, elastic_policy=elastic(1, 4))
    assert creates(plan(snap(job, config=OFF)), "PodDisruptionBudget") == []
    assert creates(plan(snap(job)), "PodDisruptionBudget") != []


def test_the_update_path_applies_the_merge_patch_as_the_api_server_would() -> None:
    current = {"metadata": {"name": "c", "labels": {"a": "1", "b": "2"}}, "data": {"hostfile": "x", "old": "y"}}
    patch = {"metadata": {"labels": {"b": None, "c": "3"}}, "data": {"old": None, "hostfile": "z"}}
    assert json_merge_patch(current, patch) == {
        "metadata": {"name": "c", "labels": {"a": "1", "c": "3"}},
        "data": {"hostfile": "z"},
    }
    assert current["data"] == {"hostfile": "x", "old": "y"}  # the read object itself is left as read


def test_with_watched_namespaces_the_checks_ask_in_them_so_namespaced_roles_turn_nothing_off() -> None:
    # The chart's RBAC with watchNamespaces: a Role per watched namespace, node reads cluster-wide. The
    # operator must ask where it works, or it would find the namespaced verbs refused and turn features off.
    import asyncio

    watched_ns = ["team-a", "team-b"]
    asked: list[tuple[str, str]] = []

    class RolesInNamespaces:
        async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
            attributes = body["spec"]["resourceAttributes"]
            asked.append((attributes["resource"], attributes["namespace"]))
            cluster_wide = attributes["resource"] == "nodes" and attributes["namespace"] == ""
            return {"status": {"allowed": cluster_wide or attributes["namespace"] in watched_ns}}

    grants = asyncio.run(permissions.check(RolesInNamespaces(), watched_ns))  # type: ignore[arg-type]
    assert grants == permissions.Grants() and grants.off() == []
    assert {ns for resource, ns in asked if resource != "nodes"} == set(watched_ns)
    assert {ns for resource, ns in asked if resource == "nodes"} == {""}
    # The same Roles, asked cluster-wide (no namespaces given), would be refused: the test can fail.
    assert asyncio.run(permissions.check(RolesInNamespaces(), [])).off()  # type: ignore[arg-type]
