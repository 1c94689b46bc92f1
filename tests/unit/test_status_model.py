"""The last status is read as the typed model, field by field: what does not fit reads as absent."""

from __future__ import annotations

from mpijob.planner.status import dump_status, read_status, read_status_fields, set_condition


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
