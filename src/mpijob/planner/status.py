"""Status conditions, the way the reference operator keeps them (one entry per type)."""

from __future__ import annotations

from typing import Any

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

__all__ = ["get_condition", "is_finished", "is_true", "set_condition", "state"]


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
