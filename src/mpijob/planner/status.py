"""The job's status as the typed model: the last one read strictly (`read_status_fields`), the new one built on
the model and dumped back (`dump_status`), and conditions the way the reference operator keeps them (one
entry per type)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from mpijob.api.models import JobCondition, JobStatus

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
# Ours: the runtime's spin guard holds the job back (its plans repeated the same writes without effect).
RECONCILE_STALLED = "ReconcileStalled"
# Ours: the operator may not use some of an elastic job's features (runtime/permissions.py says which).
PERMISSIONS_MISSING = "PermissionsMissing"

__all__ = [
    "StatusRead",
    "dump_status",
    "get_condition",
    "is_finished",
    "is_true",
    "read_status",
    "read_status_fields",
    "set_condition",
    "state",
]

# Lists of worker names: a stray non-string entry is dropped, not the whole list.
_NAME_LISTS = ("leavingWorkers", "discoveredHosts")
# The status's keys as the API object spells them, and the Python names that differ from them.
_KNOWN = frozenset(info.alias or name for name, info in JobStatus.model_fields.items())
_FIELD_NAMES = frozenset(JobStatus.model_fields) - _KNOWN
_CHECKED = _KNOWN | _FIELD_NAMES


@dataclass(frozen=True)
class StatusRead:
    """The last status, typed, and the keys that were present but did not fit the model (read as absent
    in `status`): a rule that treats "written but unreadable" differently from "never written" asks here."""

    status: JobStatus
    invalid: frozenset[str] = frozenset()


def read_status_fields(raw: object) -> StatusRead:
    """The last status written, typed: how the planner reads what earlier reconciles recorded. Read field by
    field, strictly (an integer is an integer, not "2" or true): a value that does not fit the model (a hand
    edit, a status writer's typo) reads as absent and never fails the plan. Keys the model does not know are
    kept as they are."""
    if not isinstance(raw, dict):
        return StatusRead(JobStatus())
    fields = {
        key: [item for item in value if isinstance(item, str)]
        if key in _NAME_LISTS and isinstance(value, list)
        else value
        for key, value in raw.items()
    }
    if not raw.keys() & _FIELD_NAMES:
        # Every field at once first (one validation, not one per field; every plan reads the status): the
        # model has no cross-field validator, so all fields fit together exactly when each fits alone. A key
        # spelt as a field's Python name could stand in for an unfit alias: then field by field.
        try:
            return StatusRead(JobStatus.model_validate(_copied(fields), strict=True))
        except ValidationError:
            pass
    return _field_by_field(fields)


def _field_by_field(fields: dict[str, Any]) -> StatusRead:
    # A key spelt as a field's Python name is read as that field (populate_by_name), so it is checked too.
    kept: dict[str, Any] = {key: _copied(value) for key, value in fields.items() if key not in _CHECKED}
    invalid: set[str] = set()
    for key in _CHECKED & fields.keys():
        try:
            JobStatus.model_validate({key: fields[key]}, strict=True)
        except ValidationError:
            invalid.add(key)
            continue
        kept[key] = _copied(fields[key])
    return StatusRead(JobStatus.model_validate(kept, strict=True), frozenset(invalid))


_ATOMS = (str, int, float, bool, type(None))


def _copied(value: Any) -> Any:
    """A deep copy of decoded JSON (dicts, lists, atoms), ~3x faster than copy.deepcopy, which serves
    anything else: the model keeps unknown keys by reference, and the new status must share nothing with
    the cached object."""
    kind = type(value)
    if kind is dict:
        return {k: _copied(v) for k, v in value.items()}
    if kind is list:
        return [_copied(v) for v in value]
    return value if kind in _ATOMS else copy.deepcopy(value)


def read_status(raw: object) -> JobStatus:
    return read_status_fields(raw).status


def dump_status(status: JobStatus) -> dict[str, Any]:
    """The status as the API object: only the fields read or set (a field set to None is dropped). A status
    read and dumped unchanged is the status read, so a steady job writes nothing."""
    return status.model_dump(by_alias=True, exclude_unset=True, exclude_none=True)


def get_condition(status: JobStatus, kind: str) -> JobCondition | None:
    return next((c for c in status.conditions if c.type == kind), None)


def is_true(status: JobStatus, kind: str) -> bool:
    cond = get_condition(status, kind)
    return cond is not None and cond.status == "True"


def set_condition(status: JobStatus, kind: str, value: bool, reason: str, message: str, now: str) -> bool:
    """Sets a condition; returns True when its status flipped (or it is new), which is worth an Event.

    Timestamps only move when something changed, so a steady job produces an identical status (no write).
    """
    text = "True" if value else "False"
    cond = get_condition(status, kind)
    if cond is None:
        new = JobCondition(
            type=kind, status=text, reason=reason, message=message, last_update_time=now, last_transition_time=now
        )
        # Assigned, not appended: an assignment is what marks the field as set (dump_status).
        status.conditions = [*status.conditions, new]
        return True
    flipped = cond.status != text
    if flipped or cond.reason != reason or cond.message != message:
        cond.status, cond.reason, cond.message, cond.last_update_time = text, reason, message, now
        if flipped:
            cond.last_transition_time = now
    return flipped


def is_finished(status: JobStatus) -> bool:
    return is_true(status, SUCCEEDED) or is_true(status, FAILED)


def state(status: JobStatus) -> str:
    """One word for `kubectl get`: the most telling true condition."""
    for kind in (SUCCEEDED, FAILED, SUSPENDED, RESTARTING, RUNNING):
        if is_true(status, kind):
            return kind
    return CREATED if get_condition(status, CREATED) else ""
