"""What the operator may do, asked of the API server once at start-up, and what it does without the rest.

Every rule of deploy/base/rbac.yaml's ClusterRole is here, with the feature it serves (a test keeps the two
equal). An install that swapped the reference operator's image keeps the reference's ClusterRole, which
grants plain MPIJobs all they need but the elastic features nothing. So the operator asks (one
SelfSubjectAccessReview per verb, at start-up) and turns off what it may not do, instead of watching a kind
it may not list (its cache would never fill and no job would run):
- no nodes: node termination signals off (pod DisruptionTarget conditions still count);
- no ServiceAccounts/Roles/RoleBindings: launchers read their host list from the projected files only;
- no PodDisruptionBudgets: elastic jobs get none;
- `update` but no `patch` on ConfigMaps, Services or Jobs (the reference's verbs): those are written by
  read-then-update (executor/apply.py).
It says so in the log, and on each elastic job as the PermissionsMissing condition and an Event. Only the
verbs whose answer changes something are asked; the operator never stops for a refusal.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass

import aiohttp

from mpijob.kube.client import ApiError, Client

log = logging.getLogger("mpijob.permissions")

_RW = ("get", "list", "watch", "create", "patch", "delete")
CORE = "MPIJobs"
NODE_SIGNALS = "node termination signals (taints, cordons, deleted nodes)"
API_DISCOVERY = "the launcher's host list from the API (the projected file is used instead)"
DISRUPTION_BUDGETS = "the elastic job's PodDisruptionBudget"
GANG = "gang scheduling (--gang-scheduling)"
ADOPTION = "adopting an object created just before a crash (fails closed without it)"


@dataclass(frozen=True)
class Need:
    group: str
    resource: str
    verbs: tuple[str, ...]
    feature: str
    cluster_scoped: bool = False


NEEDS: tuple[Need, ...] = (
    Need("kubeflow.org", "mpijobs", ("get", "list", "watch", "patch", "delete"), CORE),
    Need("kubeflow.org", "mpijobs/status", ("patch",), CORE),
    Need("kubeflow.org", "mpijobs/finalizers", ("update",), CORE),
    Need("", "pods", _RW, CORE),
    Need("", "services", ("list", "watch", "create", "patch"), CORE),
    Need("", "configmaps", ("list", "watch", "create", "patch"), CORE),
    Need("", "services", ("get",), ADOPTION),
    Need("", "configmaps", ("get",), ADOPTION),
    Need("", "secrets", ("create",), CORE),
    Need("", "secrets", ("get",), ADOPTION),
    Need("", "serviceaccounts", ("get", "list", "watch", "create"), API_DISCOVERY),
    Need("rbac.authorization.k8s.io", "roles", _RW, API_DISCOVERY),
    Need("rbac.authorization.k8s.io", "rolebindings", _RW, API_DISCOVERY),
    Need("", "nodes", ("get", "list", "watch"), NODE_SIGNALS, cluster_scoped=True),
    Need("", "events", ("create",), CORE),
    Need("batch", "jobs", ("list", "watch", "create", "patch"), CORE),
    Need("batch", "jobs", ("get",), ADOPTION),
    Need("batch", "jobs/status", ("patch",), CORE),
    Need("policy", "poddisruptionbudgets", _RW, DISRUPTION_BUDGETS),
    Need("scheduling.volcano.sh", "podgroups", _RW, GANG),
    Need("scheduling.x-k8s.io", "podgroups", _RW, GANG),
)

# Kinds written by read-then-update where `patch` is refused but `update` granted (the reference's verbs).
UPDATABLE = {("", "configmaps"): "ConfigMap", ("", "services"): "Service", ("batch", "jobs"): "Job"}
# Features an elastic job is told about when they are off.
ELASTIC_FEATURES = (NODE_SIGNALS, API_DISCOVERY, DISRUPTION_BUDGETS)

Verb = tuple[str, str, str]  # (group, resource, verb)


@dataclass(frozen=True)
class Grants:
    """The verbs refused at start-up; empty: everything granted (or not known: see `check`)."""

    denied: frozenset[Verb] = frozenset()

    def missing(self, feature: str) -> list[str]:
        """The refused verbs of a feature, as "list, watch nodes"."""
        out = []
        updated = self.update_instead_of_patch()
        for need in NEEDS:
            verbs = [v for v in need.verbs if (need.group, need.resource, v) in self.denied]
            if UPDATABLE.get((need.group, need.resource)) in updated:
                verbs = [v for v in verbs if v != "patch"]
            if need.feature == feature and verbs:
                group = f".{need.group}" if need.group else ""
                out.append(f"{', '.join(verbs)} {need.resource}{group}")
        return out

    def off(self) -> list[str]:
        """The optional features that are off."""
        return [f for f in ELASTIC_FEATURES if self.missing(f)]

    def update_instead_of_patch(self) -> frozenset[str]:
        """Kinds whose `patch` is refused and `update` granted."""
        return frozenset(
            kind
            for (group, resource), kind in UPDATABLE.items()
            if (group, resource, "patch") in self.denied and (group, resource, "update") not in self.denied
        )

    def elastic_message(self) -> str:
        """What an elastic job is told, or "" when nothing it uses is off."""
        parts = [f"{feature} off: may not {'; '.join(self.missing(feature))}" for feature in self.off()]
        if not parts:
            return ""
        return "; ".join(parts) + ". Grant deploy/reference-swap/elastic-rbac.yaml (docs/migration.md)."


def _paths(needs: Iterable[Need], namespaces: list[str]) -> list[tuple[Verb, str]]:
    return [
        ((n.group, n.resource, verb), ns)
        for n in needs
        for verb in n.verbs
        for ns in ([""] if n.cluster_scoped else namespaces or [""])
    ]


async def _allowed(client: Client, verb: Verb, namespace: str) -> bool:
    group, resource, name = verb
    plural, _, sub = resource.partition("/")
    attributes = {"group": group, "resource": plural, "verb": name, "namespace": namespace}
    if sub:
        attributes["subresource"] = sub
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview"}
    body = await client.create(
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {**review, "spec": {"resourceAttributes": attributes}}
    )
    return bool(((body or {}).get("status") or {}).get("allowed"))


def _decisive(gang_scheduler: str) -> list[Need]:
    """The verbs whose answer changes what the operator does: the optional features', `patch` and `update` of
    the kinds that can be written either way, and the gang scheduler's when it is on. (A refused verb of plain
    MPIJobs shows as a 403 where it is used, as it would under the reference.)"""
    optional = [n for n in NEEDS if n.feature in ELASTIC_FEATURES or (n.feature == GANG and gang_scheduler)]
    either = [Need(group, resource, ("patch", "update"), CORE) for group, resource in UPDATABLE]
    return [*optional, *either]


async def check(client: Client, namespaces: list[str], gang_scheduler: str = "") -> Grants:
    """Asks for each decisive verb (in each watched namespace, or cluster-wide; ~30 requests once); logs what
    is refused. If the API server cannot answer, everything counts as granted: the operator then behaves as it
    always has."""
    asked = _paths(_decisive(gang_scheduler), namespaces)
    try:
        answers = await asyncio.gather(*(_allowed(client, verb, ns) for verb, ns in asked))
    except (TimeoutError, ApiError, OSError, aiohttp.ClientError) as err:
        log.warning("could not ask the API server what this operator may do (%s); assuming everything", err)
        return Grants()
    grants = Grants(frozenset(verb for (verb, _), ok in zip(asked, answers, strict=True) if not ok))
    _report(grants)
    return grants


def _report(grants: Grants) -> None:
    for feature in (CORE, GANG):
        if missing := grants.missing(feature):
            log.error("permissions: may not %s (needed for %s)", "; ".join(missing), feature)
    for feature in grants.off():
        log.warning("permissions: %s is off: may not %s", feature, "; ".join(grants.missing(feature)))
    if kinds := grants.update_instead_of_patch():
        log.info("permissions: %s are written by read-then-update (patch refused)", ", ".join(sorted(kinds)))
