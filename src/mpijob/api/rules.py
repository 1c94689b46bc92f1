"""Every cross-field rule of an MPIJob spec, defined once.

Each rule carries its CEL expression (what the API server checks at admission, in the generated CRD) and
the same predicate in Python (what the planner checks on every reconcile, for objects admitted under an
older CRD or edited while the operator was down). Single-field bounds (minimum, maximum, enums, lengths,
patterns) live on the pydantic models and reach both sides the same way: the CRD schema is generated from
the models and the planner parses the spec with them. An integration test sends the same specs through
the real API server and through `validate()` and checks that they agree.

The Python predicates read the spec as the API server hands it to CEL: after defaulting, so
`elasticPolicy.minReplicas` is 1 when absent.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Spec = dict[str, Any]

# Worker pod names are "<job>-worker-<index>" and must be DNS labels (<= 63): a 50-character name leaves
# room for "-worker-" and five digits.
MAX_JOB_NAME = 50
MAX_REPLICAS = 10_000
JOB_NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
# What a worker name in workersToDelete may look like: a DNS-1123 label (a pod name of ours).
POD_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
MAX_WORKERS_TO_DELETE = 1024


@dataclass(frozen=True)
class Rule:
    cel: str
    message: str
    # Path of the field the message is about, relative to the object the rule is on (CEL fieldPath).
    field_path: str
    holds: Callable[[Spec], bool]


def _specs(s: Spec) -> dict[str, Any]:
    value = s.get("mpiReplicaSpecs")
    return value if isinstance(value, dict) else {}


def _worker(s: Spec) -> dict[str, Any] | None:
    w = _specs(s).get("Worker")
    return w if isinstance(w, dict) else None


def _launcher(s: Spec) -> dict[str, Any] | None:
    x = _specs(s).get("Launcher")
    return x if isinstance(x, dict) else None


def _elastic(s: Spec) -> dict[str, Any] | None:
    e = s.get("elasticPolicy")
    return e if isinstance(e, dict) else None


def _min(e: dict[str, Any]) -> int:
    return int(e.get("minReplicas", 1))


def _replicas_in_range(s: Spec) -> bool:
    e, w = _elastic(s), _worker(s)
    if e is None or w is None or w.get("replicas") is None:
        return True
    r = int(w["replicas"])
    return r >= _min(e) and (e.get("maxReplicas") is None or r <= int(e["maxReplicas"]))


_WORKER = "self.mpiReplicaSpecs['Worker']"
_ELASTIC = "self.elasticPolicy"

SPEC_RULES: tuple[Rule, ...] = (
    Rule(
        "self.mpiReplicaSpecs.all(k, k == 'Launcher' || k == 'Worker')",
        "keys must be Launcher or Worker",
        ".mpiReplicaSpecs",
        lambda s: all(k in ("Launcher", "Worker") for k in _specs(s)),
    ),
    Rule(
        "'Launcher' in self.mpiReplicaSpecs",
        "mpiReplicaSpecs.Launcher is required",
        ".mpiReplicaSpecs",
        lambda s: "Launcher" in _specs(s),
    ),
    Rule(
        "!('Launcher' in self.mpiReplicaSpecs) || !has(self.mpiReplicaSpecs.Launcher.replicas) || "
        "self.mpiReplicaSpecs.Launcher.replicas == 1",
        "mpiReplicaSpecs.Launcher.replicas must be 1",
        ".mpiReplicaSpecs.Launcher.replicas",
        lambda s: (la := _launcher(s)) is None or la.get("replicas") is None or la["replicas"] == 1,
    ),
    Rule(
        f"has({_ELASTIC}) || !('Worker' in self.mpiReplicaSpecs) || !has({_WORKER}.replicas) || "
        f"{_WORKER}.replicas >= 1",
        "mpiReplicaSpecs.Worker.replicas must be greater than or equal to 1",
        ".mpiReplicaSpecs.Worker.replicas",
        lambda s: (
            _elastic(s) is not None or (w := _worker(s)) is None or w.get("replicas") is None or int(w["replicas"]) >= 1
        ),
    ),
    Rule(
        f"!has({_ELASTIC}) || ('Worker' in self.mpiReplicaSpecs && has({_WORKER}.replicas))",
        "elasticPolicy needs mpiReplicaSpecs.Worker.replicas",
        ".mpiReplicaSpecs.Worker.replicas",
        lambda s: _elastic(s) is None or ((w := _worker(s)) is not None and w.get("replicas") is not None),
    ),
    Rule(
        f"!has({_ELASTIC}) || !has({_ELASTIC}.maxReplicas) || {_ELASTIC}.maxReplicas >= {_ELASTIC}.minReplicas",
        "elasticPolicy.maxReplicas must be greater than or equal to elasticPolicy.minReplicas",
        ".elasticPolicy.maxReplicas",
        lambda s: (e := _elastic(s)) is None or e.get("maxReplicas") is None or int(e["maxReplicas"]) >= _min(e),
    ),
    Rule(
        f"!has({_ELASTIC}) || !('Worker' in self.mpiReplicaSpecs) || !has({_WORKER}.replicas) || "
        f"({_WORKER}.replicas >= {_ELASTIC}.minReplicas && "
        f"(!has({_ELASTIC}.maxReplicas) || {_WORKER}.replicas <= {_ELASTIC}.maxReplicas))",
        "mpiReplicaSpecs.Worker.replicas must lie in [elasticPolicy.minReplicas, elasticPolicy.maxReplicas]",
        ".mpiReplicaSpecs.Worker.replicas",
        _replicas_in_range,
    ),
)

ROOT_RULES: tuple[Rule, ...] = (
    Rule(
        f"self.metadata.name.matches('{JOB_NAME_PATTERN}') && size(self.metadata.name) <= {MAX_JOB_NAME}",
        f"metadata.name must be a DNS-1035 label of at most {MAX_JOB_NAME} characters (it names the Service "
        "and prefixes '-worker-<index>')",
        ".metadata.name",
        lambda obj: (
            bool(re.match(JOB_NAME_PATTERN, str((obj.get("metadata") or {}).get("name", ""))))
            and len(str((obj.get("metadata") or {}).get("name", ""))) <= MAX_JOB_NAME
        ),
    ),
)


def cel(rules: tuple[Rule, ...], *, with_field_path: bool = True) -> list[dict[str, str]]:
    """The rules as `x-kubernetes-validations` entries."""
    out = []
    for r in rules:
        entry = {"rule": r.cel, "message": r.message}
        if with_field_path:
            entry["fieldPath"] = r.field_path
        out.append(entry)
    return out


def broken(rules: tuple[Rule, ...], obj: Spec) -> list[Rule]:
    """The rules `obj` breaks (a rule whose predicate cannot even read `obj` counts as broken)."""
    out = []
    for r in rules:
        try:
            ok = r.holds(obj)
        except (TypeError, ValueError):
            ok = False
        if not ok:
            out.append(r)
    return out
