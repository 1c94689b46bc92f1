"""What the cache keeps costs less memory and decides the same (issue 20, bench/memory.py): a list holds one
decoded page at a time; an owned ConfigMap's script and hostfile are kept as digests, which compare as the
texts would, so the planner's ConfigMap writes are the same on the slimmed object as on the full one; an
MPIJob's cached copy drops kubectl's last-applied manifest and nothing else."""

from __future__ import annotations

import asyncio
import copy
import gc
import weakref
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from mpijob.api import constants as c
from mpijob.app.metrics import _CacheCollector, _JobStateCollector
from mpijob.planner.actions import Patch
from mpijob.planner.plan import plan
from mpijob.runtime import slim
from mpijob.runtime.cache import Cache
from mpijob.runtime.informer import Informer
from mpijob.runtime.kinds import BY_KIND
from mpijob.runtime.slim import Digest

from .builders import elastic, mpijob
from .world import World

Obj = dict[str, Any]


class _Page(dict[str, Any]):
    """A decoded page that can be watched for being freed (a plain dict cannot be weakly referenced)."""


def test_a_list_holds_one_decoded_page_at_a_time() -> None:
    pages = [
        _Page(
            metadata={"resourceVersion": "9", **({"continue": str(n + 1)} if n < 2 else {})},
            items=[{"metadata": {"name": f"p{n}-{i}", "namespace": "ns", "uid": f"u{n}-{i}"}} for i in range(3)],
        )
        for n in range(3)
    ]
    alive_when_asked: list[bool] = []
    previous: list[weakref.ref[_Page]] = []

    class Server:
        async def request(self, method: str, path: str, query: Any = None, **_: Any) -> Any:
            gc.collect()
            alive_when_asked.append(bool(previous) and previous[-1]() is not None)
            page = pages.pop(0)
            previous.append(weakref.ref(page))
            return page

    listed: list[dict[Any, Obj]] = []

    class Sink:
        def replaced(self, watched: Any, namespace: str | None, items: dict[Any, Obj]) -> None:
            listed.append(items)

        def observed(self, watched: Any, type: str, obj: Obj) -> None:
            pass

    informer = Informer(BY_KIND["Pod"], "/api/v1/pods", Server(), Sink())  # type: ignore[arg-type]
    asyncio.run(informer._list())

    assert alive_when_asked == [False, False, False]
    assert sorted(k[1] for k in listed[0]) == sorted(f"p{n}-{i}" for n in range(3) for i in range(3))
    assert informer.resource_version == "9"


@given(st.text(max_size=300), st.text(max_size=300))
def test_a_digest_equals_exactly_its_text(a: str, b: str) -> None:
    assert (Digest(a) == b) is (a == b)
    assert (b == Digest(a)) is (a == b)
    assert (Digest(a) != b) is (a != b)
    assert Digest(a) == a and Digest(a) == Digest(a)
    assert Digest(a) != None  # noqa: E711  (a ConfigMap key may be compared with a missing one)


def _settled_job() -> World:
    world = World(placement=["node-1", "node-2"])
    world.add_nodes("node-1", "node-2")
    world.add(mpijob(workers=4, elastic_policy=elastic(2, 8)))
    world.settle("pi")
    world.start_launcher("pi")
    world.settle("pi")
    return world


def _config_map_writes(world: World, config_map: Obj) -> list[Any]:
    snapshot = world.snapshot("pi")
    snapshot = type(snapshot)(**{**vars(snapshot), "config_map": config_map})
    return [a for a in plan(snapshot) if isinstance(a, Patch) and a.kind == "ConfigMap"]


def test_the_cached_config_map_keeps_the_discovery_list_and_digests_of_what_is_only_compared() -> None:
    world = _settled_job()
    full = world.get("ConfigMap", c.config_map_name("pi"))
    assert full is not None
    kept = slim.owned_object(full, "ConfigMap")

    assert kept["data"][c.DISCOVERED_HOSTS_KEY] == full["data"][c.DISCOVERED_HOSTS_KEY]
    assert type(kept["data"][c.DISCOVERED_HOSTS_KEY]) is str  # parsed by the planner
    for key in (c.DISCOVER_HOSTS_KEY, c.HOSTFILE_KEY):
        assert isinstance(kept["data"][key], Digest) and kept["data"][key] == full["data"][key]
    # Without our label but controlled by an MPIJob (the reference operator labels it only `app: <job>`):
    # kept, since the planner takes it as the job's by that reference and compares its data.
    unlabelled = copy.deepcopy(full)
    unlabelled["metadata"]["labels"] = {"app": "pi"}
    assert slim.owned_object(unlabelled, "ConfigMap")["data"][c.HOSTFILE_KEY] == full["data"][c.HOSTFILE_KEY]
    # Neither: no contents at all, as before.
    foreign = copy.deepcopy(unlabelled)
    foreign["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment", "controller": True}]
    assert "data" not in slim.owned_object(foreign, "ConfigMap")


def test_the_planner_writes_the_same_config_map_patch_on_the_slimmed_object_as_on_the_full_one() -> None:
    world = _settled_job()
    name = c.config_map_name("pi")

    def same_writes() -> list[Any]:
        full = world.get("ConfigMap", name)
        assert full is not None
        on_full = _config_map_writes(world, full)
        assert _config_map_writes(world, slim.owned_object(full, "ConfigMap")) == on_full
        return on_full

    assert same_writes() == []  # steady
    cm = world.get("ConfigMap", name)
    assert cm is not None
    cm["data"][c.DISCOVER_HOSTS_KEY] += "# edited by hand\n"
    cm["data"][c.HOSTFILE_KEY] = cm["data"][c.HOSTFILE_KEY].replace("slots=1", "slots=2")
    written = same_writes()
    assert [sorted(p.patch["data"]) for p in written] == [[c.DISCOVER_HOSTS_KEY, c.HOSTFILE_KEY]]
    cm["data"].pop(c.HOSTFILE_KEY)
    cm["data"]["extra"] = "x"
    assert [sorted(p.patch["data"]) for p in same_writes()] == [[c.DISCOVER_HOSTS_KEY, "extra", c.HOSTFILE_KEY]]


def test_the_cached_mpijob_drops_kubectls_last_applied_manifest_and_keeps_every_other_annotation() -> None:
    job = mpijob(workers=2, elastic_policy=elastic(1, 4))
    annotations = {
        c.ANNOTATION_REGROW_TARGET: "4",
        "scheduling.volcano.sh/queue-name": "q",
        "kubectl.kubernetes.io/last-applied-configuration": '{"spec": "..."}',
    }
    job["metadata"]["annotations"] = dict(annotations)
    job["metadata"]["managedFields"] = [{"manager": "kubectl"}]

    kept = slim.mpijob(job)

    assert kept["metadata"]["annotations"] == {
        k: v for k, v in annotations.items() if k != "kubectl.kubernetes.io/last-applied-configuration"
    }
    assert "managedFields" not in kept["metadata"]
    assert {k: v for k, v in kept.items() if k != "metadata"} == {k: v for k, v in job.items() if k != "metadata"}
    # The object as received is left as it was (the informer may still hold it).
    assert "kubectl.kubernetes.io/last-applied-configuration" in job["metadata"]["annotations"]


def test_mpijobs_made_from_one_manifest_share_their_spec_strings_and_keep_their_spec() -> None:
    # Decoded separately, as two watch events are: equal strings, distinct objects.
    first, second = (orjson.loads(orjson.dumps(mpijob(name, workers=2, elastic_policy=elastic(1, 4)))) for name in "ab")
    a, b = slim.mpijob(first), slim.mpijob(second)

    assert a["spec"] == first["spec"] and b["spec"] == second["spec"]
    image = a["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"]
    assert image is b["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"]


def test_mpijobs_with_the_same_spec_share_one_and_a_different_spec_is_its_own() -> None:
    def decoded(name: str, workers: int, **changes: Any) -> Obj:
        job = mpijob(name, workers=workers, elastic_policy=elastic(1, 4))
        job["spec"].update(changes)
        return orjson.loads(orjson.dumps(job))  # separately decoded, as two watch events are

    a, b, c = (slim.mpijob(decoded(n, w)) for n, w in (("a", 2), ("b", 2), ("c", 3)))
    assert a["spec"] is b["spec"] and a["spec"] is not c["spec"]
    assert c["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 3
    assert orjson.loads(orjson.dumps(a)) == a  # the fingerprint's encoding sees a plain dict
    # Exact: 1 and true are different specs, though 1 == True in Python.
    one, true = slim.mpijob(decoded("d", 2, slotsPerWorker=1)), slim.mpijob(decoded("e", 2, slotsPerWorker=True))
    assert one["spec"] is not true["spec"] and true["spec"]["slotsPerWorker"] is True
    gone = weakref.ref(c["spec"])
    del c
    gc.collect()
    assert gone() is None  # the table does not keep a spec no cached job has


def test_children_of_one_owner_share_one_owner_reference_list_while_any_is_cached() -> None:
    def pod(name: str, owner_uid: str) -> Obj:
        ref = {"apiVersion": "v1", "kind": "MPIJob", "name": "pi", "uid": owner_uid, "controller": True}
        return orjson.loads(orjson.dumps({"metadata": {"name": name, "namespace": "ns", "ownerReferences": [ref]}}))

    a, b, other = (slim.pod(pod(n, u)) for n, u in (("a", "u1"), ("b", "u1"), ("c", "u2")))
    refs = a["metadata"]["ownerReferences"]

    assert refs is b["metadata"]["ownerReferences"] and refs is not other["metadata"]["ownerReferences"]
    assert refs == pod("a", "u1")["metadata"]["ownerReferences"] and isinstance(refs, list)
    assert orjson.loads(orjson.dumps(a)) == a  # the fingerprint's encoding sees a plain list
    gone = weakref.ref(other["metadata"]["ownerReferences"])
    del other
    gc.collect()
    assert gone() is None  # the table does not keep an owner no cached object names
    odd = slim.pod({"metadata": {"name": "d", "ownerReferences": [{"uid": "u1", "extra": {"not": "hashable"}}]}})
    assert odd["metadata"]["ownerReferences"] == [{"uid": "u1", "extra": {"not": "hashable"}}]


def test_pods_on_one_node_share_their_spec_and_pods_ready_in_one_second_their_conditions() -> None:
    def pod(name: str, node: str | None, ready_at: str, extra: Any = None) -> Obj:
        ready = {"type": "Ready", "status": "True", "lastProbeTime": None, "lastTransitionTime": ready_at}
        scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": name}  # not kept at all
        conditions = [scheduled, ready] + ([extra] if extra is not None else [])
        body = {"metadata": {"name": name}, "spec": {"nodeName": node}, "status": {"conditions": conditions}}
        return orjson.loads(orjson.dumps(body))  # fresh strings, as every watch event decodes them

    t1, t2 = "2026-03-01T12:00:00Z", "2026-03-01T12:00:01Z"
    a, b, c, d = (slim.pod(pod(*args)) for args in (("a", "n1", t1), ("b", "n1", t1), ("c", "n2", t2), ("d", None, t1)))

    assert a["spec"] is b["spec"] and a["spec"] == {"nodeName": "n1"}
    assert c["spec"] == {"nodeName": "n2"} and d["spec"] == {"nodeName": None}
    assert a["status"]["conditions"] is b["status"]["conditions"] is not c["status"]["conditions"]
    assert a["status"]["conditions"] == [
        {"type": "Ready", "status": "True", "lastProbeTime": None, "lastTransitionTime": t1}
    ]
    assert d["status"]["conditions"] is a["status"]["conditions"]  # the same contents, whatever the pod
    # The fingerprint's encoding and the planner see plain dicts and lists.
    assert orjson.loads(orjson.dumps(a)) == a and isinstance(a["spec"], dict)
    # A value that is not a string or None is kept as it is, unshared (True == 1 must not meet).
    odd = {"type": "DisruptionTarget", "status": True, "count": 1}
    e, f = slim.pod(pod("e", "n1", t1, odd)), slim.pod(pod("f", "n1", t1, {**odd, "status": 1}))
    assert e["status"]["conditions"][1]["status"] is True and f["status"]["conditions"][1]["status"] == 1
    assert e["status"]["conditions"] is not f["status"]["conditions"]
    # Gone with the last cached pod that holds them.
    gone = weakref.ref(c["spec"])
    del c
    gc.collect()
    assert gone() is None


def test_a_scrape_while_the_event_loop_changes_the_pods_store_reads_a_copy() -> None:
    # prometheus_client serves /metrics from its own thread; the event loop may change the store between two
    # pods the scrape reads. Here reading a pod does it, so the interleaving is certain.
    cache = Cache()
    pods = cache.indexes["pods"]

    class Meddling(dict[str, Any]):
        def get(self, key: str, default: Any = None) -> Any:
            if key == "metadata":
                pods[("ns", f"new-{len(pods)}")] = {"metadata": {}, "status": {}}
            return super().get(key, default)

    for i in range(3):
        pods[("ns", f"p{i}")] = Meddling(metadata={"labels": {c.LABEL_JOB_ROLE: c.ROLE_WORKER}}, status={})
    registry = CollectorRegistry()
    registry.register(_CacheCollector(cache))
    registry.register(_JobStateCollector(cache))

    text = generate_latest(registry).decode()

    assert 'mpijob_worker_pods{phase="Pending"} 3.0' in text
