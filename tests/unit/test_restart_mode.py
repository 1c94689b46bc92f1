"""Restart mode (elasticPolicy.mode Restart, planner/restart.py): the discovery list is the MPI run's host set.
The first run waits for its round, a scale-in changes the list at once, a regrow joins in one change after
restart.minIntervalSeconds; each change while a launcher runs is a restart in status and an Event."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mpijob.api import constants as c
from mpijob.planner.children import launcher_job
from mpijob.planner.plan import plan, validate
from mpijob.planner.restart import START_HOLD_SECONDS

from .builders import creates, elastic, mpijob, snap, template
from .world import World

SPOT = c.DEFAULT_TERMINATION_TAINTS[0]
COMMAND = ["sh", "-c", 'mpirun -n "$MPIJOB_RANKS" /app/solver']


def restart_job(workers: int = 4, *, interval: int = 60, command: list[str] | None = COMMAND, **policy: Any) -> Any:
    launcher = template()
    if command is not None:
        launcher["spec"]["containers"][0]["command"] = command
    block = elastic(2, 4, grace=20, regrow={"maxProbes": 2, "probeTimeoutSeconds": 60})
    block.update({"mode": "Restart", "restart": {"minIntervalSeconds": interval}, **policy})
    return mpijob(workers=workers, elastic_policy=block, launcher={"replicas": 1, "template": launcher})


def _world(workers: int = 4, interval: int = 60) -> World:
    world = World(placement=["node-1", "node-2"])
    world.add_nodes("node-1", "node-2")
    world.add(restart_job(workers, interval=interval))
    return world


def _restarts(world: World) -> dict[str, Any]:
    return dict((world.job("pi").get("status") or {}).get("restarts") or {})


def _said(world: World) -> list[str]:
    return [e.message for e in world.events if e.reason == "Restarted"]


def test_restart_mode_without_a_launcher_command_is_refused_naming_the_field() -> None:
    spec, errors = validate(restart_job(command=None))
    assert spec is not None
    assert errors == [
        "spec.mpiReplicaSpecs.Launcher.template.spec.containers[0].command: required with elasticPolicy.mode "
        "Restart (it runs under /etc/mpi/mpijob-run)"
    ]


def test_the_launcher_runs_its_command_under_mpijob_run_with_a_hostfile_of_its_own() -> None:
    job = restart_job()
    spec, _ = validate(job)
    assert spec is not None
    container = launcher_job(job, spec)["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["/bin/sh", "/etc/mpi/mpijob-run", "--", *COMMAND]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["OMPI_MCA_orte_default_hostfile"] == env["MPIJOB_HOSTFILE"] == "/etc/mpi-run/hostfile"
    assert env["PRTE_MCA_prte_default_hostfile"] == "/etc/mpi-run/hostfile"
    assert env["MPIJOB_RESTART_SIGNAL"] == "SIGUSR1" and env["MPIJOB_GRACE_SECONDS"] == "20"
    assert {"name": "mpi-job-run", "mountPath": "/etc/mpi-run"} in container["volumeMounts"]


def test_an_in_place_job_keeps_its_command_and_the_configmap_hostfile() -> None:
    job = restart_job(mode="InPlace")
    spec, _ = validate(job)
    assert spec is not None
    container = launcher_job(job, spec)["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == COMMAND
    assert {"name": "OMPI_MCA_orte_default_hostfile", "value": "/etc/mpi/hostfile"} in container["env"]
    [config_map] = creates(list(plan(snap(job))), "ConfigMap")
    assert c.RUN_SCRIPT_KEY not in config_map["data"]


def test_the_configmap_carries_the_supervisor_in_restart_mode() -> None:
    [config_map] = creates(list(plan(snap(restart_job()))), "ConfigMap")
    assert config_map["data"][c.RUN_SCRIPT_KEY].startswith("#!/bin/sh\n# mpijob-run:")


def test_the_first_run_waits_until_every_bound_worker_is_ready() -> None:
    world = _world()
    world.reconcile("pi")
    world.bind_pending()
    names = world.worker_names("pi")
    world.run(*names[:3])
    world.reconcile("pi")
    assert world.discovered("pi") == [], "three of four Ready: the first run would start one short"
    world.run(names[3])
    world.reconcile("pi")
    assert sorted(world.discovered("pi")) == names
    assert _restarts(world) == {}, "the first listing is the start, not a restart"


def test_a_worker_that_never_turns_ready_holds_the_first_run_for_the_bound_only() -> None:
    world = _world()
    world.reconcile("pi")
    world.bind_pending()
    names = world.worker_names("pi")
    world.run(*names[:3])
    world.run(names[3], ready=False)
    world.reconcile("pi")
    assert world.discovered("pi") == []
    world.advance(START_HOLD_SECONDS)
    world.reconcile("pi")
    assert sorted(world.discovered("pi")) == names[:3]


def _running(world: World) -> None:
    world.settle("pi")
    world.start_launcher("pi")
    world.settle("pi")
    assert len(world.discovered("pi")) == 4


def test_a_spot_taint_takes_the_nodes_workers_out_at_once_and_counts_a_scale_in_restart() -> None:
    world = _world()
    _running(world)
    on_node_2 = [p["metadata"]["name"] for p in world.workers("pi") if p["spec"]["nodeName"] == "node-2"]
    world.placement = ["node-1"]
    world.taint("node-2", SPOT)
    world.reconcile("pi")
    assert not set(world.discovered("pi")) & set(on_node_2)
    restarts = _restarts(world)
    assert restarts["count"] == 1 and restarts["lastCause"] == "scale-in" and restarts["lastWorkers"] == 2
    assert _said(world) == [f"scale-in: the MPI run restarts on 2 workers (was 4; {', '.join(sorted(on_node_2))} left)"]


def test_a_regrow_joins_in_one_change_only_after_the_minimum_interval() -> None:
    world = _world(interval=60)
    _running(world)
    world.placement = []  # no capacity while node-2 goes
    world.taint("node-2", SPOT)
    world.settle("pi", kubelet=True, follow_requeue=False)
    assert len(world.discovered("pi")) == 2
    # Capacity is back: the regrow's probes bind and turn Ready, but the last restart was moments ago.
    world.nodes["node-2"]["spec"]["taints"] = []
    world.placement = ["node-2"]
    world.advance(5)
    world.bind_pending()
    world.settle("pi", follow_requeue=False)
    assert len(world.discovered("pi")) == 2, "held back within restart.minIntervalSeconds"
    world.advance(60)
    world.settle("pi", follow_requeue=False)
    assert len(world.discovered("pi")) == 4
    restarts = _restarts(world)
    assert restarts["count"] == 2 and restarts["lastCause"] == "regrow" and restarts["lastWorkers"] == 4


def test_a_list_change_with_no_launcher_running_is_no_restart() -> None:
    world = _world()
    world.settle("pi")
    world.placement = ["node-1"]
    world.taint("node-2", SPOT)
    world.settle("pi", follow_requeue=False)
    assert len(world.discovered("pi")) == 2
    assert _restarts(world) == {} and _said(world) == []


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(st.sampled_from(["taint", "untaint", "wait", "settle"]), min_size=1, max_size=8))
def test_restarts_count_each_change_of_a_running_list_once(steps: list[str]) -> None:
    world = _world(interval=30)
    _running(world)
    changes = 0
    for step in steps:
        before = sorted(world.discovered("pi"))
        if step == "taint":
            world.placement = ["node-1"]
            world.taint("node-2", SPOT)
        elif step == "untaint":
            world.nodes["node-2"]["spec"]["taints"] = []
            world.placement = ["node-1", "node-2"]
        elif step == "wait":
            world.advance(31)
        world.bind_pending()
        world.settle("pi", follow_requeue=False)
        after = sorted(world.discovered("pi"))
        changes += before != after
        assert len(after) >= 2, "never below minReplicas"
    assert _restarts(world).get("count", 0) == changes
    assert len(_said(world)) == changes
