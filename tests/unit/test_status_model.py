"""The last status is read as the typed model, field by field: what does not fit reads as absent."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mpijob.planner.status import (
    _KNOWN,
    _NAME_LISTS,
    StatusRead,
    _field_by_field,
    dump_status,
    read_status,
    read_status_fields,
    set_condition,
)


def test_the_last_status_is_read_as_the_model_with_its_kubernetes_names() -> None:
    status = read_status(
        {
            "conditions": [{"type": "Created", "status": "True"}],
            "leavingWorkers": ["pi-worker-1"],
            "discoveredHosts": ["pi-worker-0"],
            "lastWorkerIndex": 3,
            "sshSecretUID": "u",
        }
    )
    assert status.conditions[0].type == "Created"
    assert status.leaving_workers == ["pi-worker-1"]
    assert status.discovered_hosts == ["pi-worker-0"]
    assert status.last_worker_index == 3
    assert status.ssh_secret_uid == "u"


def test_a_field_that_does_not_fit_reads_as_absent_and_the_rest_is_kept() -> None:
    status = read_status(
        {
            "lastWorkerIndex": "7",  # a string is not an integer (strict, as the API server reads JSON)
            "recentWorkerFailures": -1,  # below the model's bound
            "leavingWorkers": ["pi-worker-1", 5, None],  # stray entries go, the names stay
            "discoveredHosts": "pi-worker-0",  # not a list
            "startTime": "2026-03-01T12:00:00Z",
        }
    )
    assert status.last_worker_index is None
    assert status.recent_worker_failures is None
    assert status.leaving_workers == ["pi-worker-1"]
    assert status.discovered_hosts == []
    assert status.start_time == "2026-03-01T12:00:00Z"


def test_no_status_or_a_status_that_is_not_an_object_reads_as_empty() -> None:
    assert read_status(None).leaving_workers == []
    assert read_status(["x"]).conditions == []


def test_a_field_present_but_unreadable_is_told_apart_from_an_absent_one() -> None:
    read = read_status_fields({"lastWorkerIndex": "7", "sshSecretUID": 5, "startTime": "2026-03-01T12:00:00Z"})
    assert read.status.last_worker_index is None and read.status.ssh_secret_uid is None
    assert read.invalid == {"lastWorkerIndex", "sshSecretUID"}
    assert read_status_fields({}).invalid == frozenset()


def test_a_status_read_and_dumped_unchanged_is_the_status_read() -> None:
    # What makes a steady job cost no write: fields never written stay absent (not [] or {}), unknown keys stay.
    written = {
        "conditions": [
            {
                "type": "Created",
                "status": "True",
                "reason": "MPIJobCreated",
                "message": "m",
                "lastUpdateTime": "2026-03-01T12:00:00Z",
                "lastTransitionTime": "2026-03-01T12:00:00Z",
            }
        ],
        "replicaStatuses": {"Worker": {"active": 0, "ready": 0, "selector": "s"}, "Launcher": {}},
        "leavingWorkers": [],
        "lastWorkerIndex": 1,
        "state": "Created",
        "someFutureField": {"x": 1},
    }
    assert dump_status(read_status(written)) == written


def test_a_new_condition_and_a_cleared_field_show_in_the_dump() -> None:
    status = read_status({"recentWorkerFailures": 3, "lastWorkerFailureTime": "2026-03-01T12:00:00Z"})
    assert set_condition(status, "Running", True, "MPIJobRunning", "running", "2026-03-01T12:01:00Z")
    status.recent_worker_failures = None
    status.last_worker_failure_time = None
    dumped = dump_status(status)
    assert list(dumped) == ["conditions"]
    assert dumped["conditions"][0]["lastTransitionTime"] == "2026-03-01T12:01:00Z"


# Values of every shape a hand edit or an older writer could leave, fitting the model or not.
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10) | st.sampled_from(["", "7", "True", "2026-03-01T12:00:00Z"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["type", "status", "x"]), inner),
    max_leaves=6,
)
_CONDITION = st.fixed_dictionaries(
    {"type": st.sampled_from(["Created", "Running"]), "status": st.sampled_from(["True", "False"])},
    optional={"reason": _VALUES, "lastUpdateTime": _VALUES},
)
_TEXT = st.sampled_from(["", "x", "2026-03-01T12:00:00Z"])
# "7" and true are not counts (strict), though a lax read would take them.
_COUNT = st.integers(-1, 10) | st.sampled_from(["7", True])
_NAMES = st.lists(st.sampled_from(["pi-worker-0", "pi-worker-1", 5]), max_size=2)
# What fits each key (mostly: a count may be negative, a name list may hold a stray entry); text elsewhere.
_FITTING = {
    "conditions": st.lists(_CONDITION, max_size=2),
    "replicaStatuses": st.dictionaries(
        st.sampled_from(["Worker", "Launcher"]),
        st.fixed_dictionaries({}, optional={"active": _COUNT, "ready": _COUNT, "selector": _TEXT}),
        max_size=2,
    ),
    "leavingWorkers": _NAMES,
    "discoveredHosts": _NAMES,
    "lastWorkerIndex": _COUNT,
    "recentWorkerFailures": _COUNT,
    "regrow": st.just({}),
}
# Each key absent, fitting (most often) or anything at all; a few keys the model does not know, or spelt as
# a field's Python name.
_STATUSES = st.fixed_dictionaries(
    {},
    optional={key: st.one_of(*[_FITTING.get(key, _TEXT)] * 4, _VALUES) for key in [*sorted(_KNOWN), "someFutureField"]},
).flatmap(lambda raw: st.sampled_from([raw, raw, raw, {**raw, "last_worker_index": 3}, {**raw, "ssh_secret_uid": 5}]))


def _outcome(read: Callable[[], StatusRead]) -> tuple[Any, ...]:
    got = read()
    return got.invalid, got.status, dump_status(got.status)


@settings(max_examples=400, deadline=None)
@given(_STATUSES)
def test_reading_every_field_at_once_reads_what_reading_field_by_field_reads(raw: dict[str, Any]) -> None:
    """The one-validation read (every plan reads the status) is only a faster way to the same answer."""
    fields = {
        k: [i for i in v if isinstance(i, str)] if k in _NAME_LISTS and isinstance(v, list) else v
        for k, v in raw.items()
    }
    assert _outcome(lambda: read_status_fields(raw)) == _outcome(lambda: _field_by_field(fields))


def test_the_status_read_shares_nothing_with_the_object_read() -> None:
    """The new status is built on the model: nothing of the cached object may change with it."""
    raw: dict[str, Any] = {"conditions": [{"type": "Created", "status": "True"}], "someFutureField": {"x": [1]}}
    status = read_status(raw)
    status.conditions[0].status = "False"
    extra = (status.model_extra or {})["someFutureField"]
    extra["x"].append(2)
    assert raw == {"conditions": [{"type": "Created", "status": "True"}], "someFutureField": {"x": [1]}}


def test_a_key_spelt_as_a_fields_python_name_that_does_not_fit_reads_as_absent_and_never_fails_the_plan() -> None:
    read = read_status_fields({"last_worker_index": [], "lastWorkerIndex": 4, "ssh_secret_uid": 5})
    assert read.invalid == {"last_worker_index", "ssh_secret_uid"}
    assert read.status.last_worker_index == 4
    assert read.status.ssh_secret_uid is None
