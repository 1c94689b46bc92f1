"""Live hand-over from the reference operator (issue 30, item 3): jobs started and Running under
kubeflow/mpi-operator v0.8.2, that operator stopped, ours started. The real controller, cache (slimmed as
the informers slim it), planner and executor run over the World holding what v0.8.2 wrote
(tests/unit/reference_v082.py): the job converges in a few writes, then costs nothing while nothing
changes, and a scale-down or an added elasticPolicy acts on it as on any job of ours."""

from __future__ import annotations

from typing import Any

from mpijob.api import constants as c

from .builders import NS
from .handover import Handover, handed_over, operate
from .world import inform

Obj = dict[str, Any]
JOBS = ("pi", "lm", "cv", "rl")


def _edit(h: Handover, name: str, change: Any) -> None:
    """A user's edit of the MPIJob (kubectl edit): a new resourceVersion, its watch event."""
    job = h.world.job(name)
    change(job["spec"])
    job["metadata"]["resourceVersion"] = h.world.next_rv()
    inform(h.controller, h.world)


def _settle_kubelet(h: Handover) -> None:
    """Terminating pods go away (the kubelet), and their events arrive."""
    h.world.kubelet()
    inform(h.controller, h.world)


def test_an_adopted_reference_job_converges_in_a_few_writes_and_then_goes_quiet() -> None:
    h = handed_over(JOBS)
    assert operate(h, start=True), f"still reconciling after 1.5 s: {h.reconciles} reconciles"
    # Per job: the ConfigMap made ours (our script and the discovery list, one patch), the status (ours
    # adds the discovered hosts and the state); nothing deleted, nothing created but nothing needed.
    assert h.api.writes <= 3 * len(JOBS), h.api.written
    assert h.reconciles <= 4 * len(JOBS)
    assert not [w for w in h.api.written if w[0] == "delete"], "no child of an adopted job deleted"
    for name in JOBS:
        assert h.world.worker_names(name) == [c.worker_name(name, i) for i in range(3)]
        assert h.world.discovered(name) == [c.worker_name(name, i) for i in range(3)]

    before = (h.reconciles, h.api.writes)
    assert operate(h, 0.5)
    assert (h.reconciles, h.api.writes) == before, "a steady adopted job is never reconciled nor written"


def test_an_adopted_reference_configmap_is_patched_once_not_again_and_again() -> None:
    h = handed_over()
    operate(h, 1.0, start=True)
    patches = h.writes_to("ConfigMap")
    assert len(patches) == 1, f"{len(patches)} ConfigMap writes, {h.reconciles} reconciles"
    assert c.DISCOVERED_HOSTS_KEY in h.world.config_data("pi")


def test_a_plain_scale_down_of_an_adopted_job_deletes_the_highest_index_worker() -> None:
    h = handed_over()
    assert operate(h, start=True)
    _edit(h, "pi", lambda spec: spec["mpiReplicaSpecs"]["Worker"].update(replicas=2))
    assert operate(h)
    deleted = h.writes_to("Pod", "delete")
    assert deleted == ["pi-worker-2"], "as the reference: indexes >= replicas go"
    _settle_kubelet(h)
    assert operate(h)
    assert h.world.worker_names("pi") == ["pi-worker-0", "pi-worker-1"]
    assert h.world.discovered("pi") == ["pi-worker-0", "pi-worker-1"]


def test_an_elastic_policy_added_to_an_adopted_job_removes_exactly_the_worker_listed() -> None:
    h = handed_over()
    assert operate(h, start=True)
    policy = {"minReplicas": 1, "scaleInGracePeriodSeconds": 0, "workersToDelete": ["pi-worker-1"]}

    def scale_in(spec: Obj) -> None:
        # One patch, replicas 3 -> 2 with the name (docs/elastic.md: exactly it goes, nothing is recreated).
        spec.update(elasticPolicy=policy)
        spec["mpiReplicaSpecs"]["Worker"]["replicas"] = 2

    _edit(h, "pi", scale_in)
    assert operate(h)
    _settle_kubelet(h)
    assert operate(h)
    deleted = h.writes_to("Pod", "delete")
    assert deleted == ["pi-worker-1"]
    assert h.world.worker_names("pi") == ["pi-worker-0", "pi-worker-2"]
    assert h.world.replicas("pi") == 2
    assert h.world.discovered("pi") == ["pi-worker-0", "pi-worker-2"]


def test_the_reference_children_are_cached_with_what_the_planner_compares() -> None:
    """The cause: the cache kept an object's contents only when it carried our operator-name label, and
    v0.8.2 labels its ConfigMap, Service, Secret and launcher Job only `app: <job>`: the ConfigMap's data
    was dropped, so the plan always wanted to write it, and the write (already on the server) changed
    nothing, so no event and no new resourceVersion ever ended the loop."""
    h = handed_over()
    cache = h.controller.cache
    config_map = cache.get("configmaps", (NS, c.config_map_name("pi")))
    service = cache.get("services", (NS, "pi"))
    assert config_map is not None and service is not None
    assert config_map.get("data", {}).get(c.HOSTFILE_KEY) == h.world.config_data("pi")[c.HOSTFILE_KEY]
    assert service.get("spec", {}).get("selector") == h.world.get("Service", "pi")["spec"]["selector"]  # type: ignore[index]
