"""The job's status: the last one read as the typed model (`read_status`), and conditions, the way the
reference operator keeps them (one entry per type)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from mpijob.api.models import JobStatus
from mpijob.api.objects import get_condition, is_true

CREATED = "Created"
RUNNING = "Running"
RESTARTING = "Restarting"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
SUSPENDED = "Suspended"
# Ours: a child object's name is held by an object this job does not own.
RESOURCE_CONFLICT = "ResourceConflict"
# Ours: an elastic job that was running has fewer Running workers than minReplicas (the floor is not held).
BELOW_MIN_REPLICAS = "BelowMinReplicas"
# Ours: an edit made a started job's spec invalid; it is left as it was until the spec is fixed.
INVALID_SPEC = "InvalidSpec"

Status = dict[str, Any]

__all__ = ["get_condition", "is_finished", "is_true", "read_status", "set_condition", "state"]

# Lists of worker names: a stray non-string entry is dropped, not the whole list.
_NAME_LISTS = ("leavingWorkers", "discoveredHosts")


def read_status(raw: object) -> JobStatus:
    """The last status written, typed: how the planner reads what earlier reconciles recorded. Read field by
    field, strictly (an integer is an integer, not "2" or true): a value that does not fit the model (a hand
    edit, a status writer's typo) reads as absent and never fails the plan."""
    if not isinstance(raw, dict):
        return JobStatus()
    fields: dict[str, Any] = {}
    for name, info in JobStatus.model_fields.items():
        key = info.alias or name
        if key not in raw:
            continue
        value = raw[key]
        if key in _NAME_LISTS and isinstance(value, list):
            value = [item for item in value if isinstance(item, str)]
        try:
            JobStatus.model_validate({key: value}, strict=True)
        except ValidationError:
            continue
        fields[key] = value
    return JobStatus.model_validate(fields, strict=True)


def set_condition(status: Status, kind: str, value: bool, reason: str, message: str, now: str) -> bool:
    """Sets a condition; returns True when its status flipped (or it is new), which is worth an Event.

    Timestamps only move when something changed, so a steady job produces an identical status (no write).
    """
    conditions: list[dict[str, Any]] = status.setdefault("conditions", [])
    text = "True" if value else "False"
    cond = get_condition(status, kind)
    if cond is None:
        conditions.append(
            {
                "type": kind,
                "status": text,
                "reason": reason,
                "message": message,
                "lastUpdateTime": now,
                "lastTransitionTime": now,
            }
        )
        return True
    flipped = cond.get("status") != text
    if flipped or cond.get("reason") != reason or cond.get("message") != message:
        cond.update({"status": text, "reason": reason, "message": message, "lastUpdateTime": now})
        if flipped:
            cond["lastTransitionTime"] = now
    return flipped


def is_finished(status: Status) -> bool:
    return is_true(status, SUCCEEDED) or is_true(status, FAILED)


def state(status: Status) -> str:
    """One word for `kubectl get`: the most telling true condition."""
    for kind in (SUCCEEDED, FAILED, SUSPENDED, RESTARTING, RUNNING):
        if is_true(status, kind):
            return kind
    return CREATED if get_condition(status, CREATED) else ""
