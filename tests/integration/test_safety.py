"""Issue 8 on the real API server.

- Rule 3/4: the CRD (schema + CEL, generated from the models and api/rules.py) and the planner's
  `validate()` agree: specs generated from a fixed seed go through the real API server (dry run, so the
  CRD's validation applies) and through `validate()`; both accept or both refuse, and a refusal names the
  field on both sides.
- Rule 3: an invalid edit of a running job (only possible through the status-free paths the schema cannot
  see, so here: a spec the CRD admits under its old form is simulated by editing while the operator is
  down is not possible; the unit tests cover the transitions) - see tests/unit/test_safety_invalid_edit.py.
"""

from __future__ import annotations

import asyncio
import copy
import random
from typing import Any

from kube import Kube, eventually, mpijob

from mpijob.api.models import API_VERSION
from mpijob.kube.client import ApiError
from mpijob.kube.resources import collection_path
from mpijob.planner.plan import validate

Obj = dict[str, Any]

SEED = 8
CASES = 80


def _mutate(rng: random.Random, i: int) -> Obj:
    """A spec with a few random changes, valid or not, covering every rule and bound."""
    body = mpijob(f"agree-{i}", workers=2)
    spec = body["spec"]
    specs = spec["mpiReplicaSpecs"]
    for _ in range(rng.randint(1, 3)):
        change = rng.randrange(14)
        if change == 0:
            specs["Worker"]["replicas"] = rng.choice([-1, 0, 1, 3, 10_000, 10_001])
        elif change == 1 and "Launcher" in specs:
            specs["Launcher"]["replicas"] = rng.choice([0, 1, 2])
        elif change == 2:
            ep: Obj = {"minReplicas": rng.choice([0, 1, 2, 3, 10_001])}
            if rng.random() < 0.6:
                ep["maxReplicas"] = rng.choice([0, 1, 2, 4, 10_000, 10_001])
            spec["elasticPolicy"] = ep
        elif change == 3:
            ep = spec.setdefault("elasticPolicy", {"minReplicas": 1})
            ep["workersToDelete"] = rng.sample(
                ["agree-worker-0", "x", "Bad_Name", "ns/pod", "a" * 63, "a" * 64, "-x", "x-"], rng.randint(1, 3)
            )
        elif change == 4:
            body["metadata"]["name"] = rng.choice(["a" * 50, "a" * 51, "Upper", "9starts-with-digit", "ok-name"])
        elif change == 5:
            spec["slotsPerWorker"] = rng.choice([-1, 0, 1, 8])
        elif change == 6:
            spec["mpiImplementation"] = rng.choice(["OpenMPI", "Intel", "MPICH", "openmpi"])
        elif change == 7:
            specs.pop("Launcher", None)
        elif change == 8:
            specs["Chief"] = copy.deepcopy(specs["Worker"])
        elif change == 9:
            specs["Worker"]["template"]["spec"]["containers"] = []
        elif change == 10:
            spec.setdefault("elasticPolicy", {"minReplicas": 1})["scaleInGracePeriodSeconds"] = rng.choice(
                [-1, 0, 30, 3600, 3601]
            )
        elif change == 11:
            specs["Worker"].pop("replicas", None)
        elif change == 12:
            # Wrong JSON types: the API server refuses them; a lax parser would coerce them.
            specs["Worker"]["replicas"] = rng.choice(["2", 2.5, True])
        else:
            spec["runPolicy"] = {
                "suspend": rng.choice(["yes", "true", 1, False]),
                "backoffLimit": rng.choice([-1, 0, "3"]),
            }
    return body


def _fields(message: str) -> str:
    # The API server writes map keys as [Worker]; the planner as .Worker.
    return message.replace("[", ".").replace("]", "")


async def test_crd_validation_and_planner_validation_agree_on_generated_specs(kube: Kube) -> None:
    rng = random.Random(SEED)
    accepted = refused = 0
    disagreements: list[str] = []
    for i in range(CASES):
        body = _mutate(rng, i)
        try:
            admitted = await kube.client.request(
                "POST", collection_path(API_VERSION, "MPIJob", kube.ns), body, query=[("dryRun", "All")]
            )
        except ApiError as err:
            assert err.status == 422, err
            refused += 1
            _, errors = validate({**body, "metadata": {**body["metadata"], "namespace": kube.ns}})
            if not errors:
                disagreements.append(f"API server refused, planner accepts: {body['spec']} -> {err.body[:300]}")
            continue
        accepted += 1
        # The planner reads what the API server stored: defaulted and pruned.
        _, errors = validate(admitted)
        if errors:
            disagreements.append(f"API server admitted, planner refuses: {admitted['spec']} -> {errors}")
    assert not disagreements, "\n".join(disagreements)
    # The generator is worth something only if it hits both sides.
    assert accepted >= 10 and refused >= 30, (accepted, refused)


async def test_refusal_names_the_same_field_on_both_sides(kube: Kube) -> None:
    cases = {
        "spec.mpiReplicaSpecs.Worker.replicas": lambda b: b["spec"]["mpiReplicaSpecs"]["Worker"].update(
            replicas=10_001
        ),
        "spec.elasticPolicy.workersToDelete": lambda b: b["spec"].update(
            elasticPolicy={"minReplicas": 1, "workersToDelete": ["ns/pod"]}
        ),
        "spec.elasticPolicy.maxReplicas": lambda b: b["spec"].update(
            elasticPolicy={"minReplicas": 3, "maxReplicas": 2}
        ),
        "spec.mpiReplicaSpecs.Launcher.replicas": lambda b: b["spec"]["mpiReplicaSpecs"]["Launcher"].update(replicas=2),
    }
    for field, breaker in cases.items():
        body = mpijob("named")
        breaker(body)
        try:
            await kube.client.request(
                "POST", collection_path(API_VERSION, "MPIJob", kube.ns), body, query=[("dryRun", "All")]
            )
        except ApiError as err:
            assert field in _fields(err.body), (field, err.body)
        else:
            raise AssertionError(f"API server admitted {field}")
        _, errors = validate({**body, "metadata": {**body["metadata"], "namespace": kube.ns}})
        assert any(e.startswith(field) for e in errors), (field, errors)


# -- rule 2: watch gaps are closed ---------------------------------------------------------------------------


async def test_relist_drops_ghosts_keeps_live_objects_and_enqueues_their_jobs(kube: Kube) -> None:
    from mpijob.executor.apply import Executor
    from mpijob.planner.snapshot import OperatorConfig
    from mpijob.runtime.controller import Controller
    from mpijob.runtime.informer import Informer
    from mpijob.runtime.kinds import BY_KIND

    live = await kube.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "live-config"},
            "data": {"a": "b"},
        }
    )
    ghost = {
        # Deleted while no watch ran: the cache still has it; the API server does not.
        "metadata": {
            "namespace": kube.ns,
            "name": "gone-worker-3",
            "uid": "00000000-dead-beef-0000-000000000003",
            "resourceVersion": "1",
            "labels": {"training.kubeflow.org/job-name": "gone"},
        },
        "spec": {"nodeName": "node-1"},
    }
    controller = Controller(Executor(kube.client), OperatorConfig())
    pods, config_maps = BY_KIND["Pod"], BY_KIND["ConfigMap"]
    controller.observed(pods, "ADDED", ghost)
    controller.observed(config_maps, "ADDED", live)
    controller.cache.listed.update({"Pod", "ConfigMap"})  # both were listed before the gap
    while len(controller.queue):
        controller.queue.done((await controller.queue.get())[0])

    # The relist an informer makes after a 410 Gone, against the real API server.
    for kind in (pods, config_maps):
        await Informer(kind, kind.ns_path.format(ns=kube.ns), kube.client, controller, namespace=kube.ns)._list()  # type: ignore[union-attr]

    assert controller.stats.ghosts == 1
    assert controller.cache.pod(kube.ns, "gone-worker-3") is None
    assert controller.cache.jobs_on_node("node-1") == []  # and out of the pod indexes
    assert (kube.ns, "gone") in controller.queue.take_pending()  # its job plans again without it
    assert (kube.ns, "live-config") in controller.cache.indexes["configmaps"]


# -- rule 6: hostile annotations and status values through the real API server -------------------------------


async def test_hostile_annotations_and_status_values_never_crash_wedge_or_delete(
    kube: Kube, api: Any, running_operator: Any
) -> None:
    from elastic_jobs import elastic_job, own_nodes, start_job
    from kube import merge_patch

    from mpijob.api import constants as c

    job = "hostile"
    async with own_nodes(api, kube, "a", "b") as nodes:
        pods = await start_job(kube, elastic_job(job, nodes, workers=3, min_replicas=1, max_replicas=4, grace=3600))
        before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
        w0, w1, w2 = sorted(before)
        starts = running_operator.starts
        # Values a user (or a buggy tool) can write on the job's pods and, with status rights, on the job.
        # (The API server itself refuses a non-integer pod-deletion-cost.)
        await merge_patch(
            kube, "v1", "Pod", w0, {"metadata": {"annotations": {"mpijob.kubeflow.org/whatever": "{not json"}}}
        )
        await merge_patch(kube, "v1", "Pod", w1, {"metadata": {"labels": {c.LABEL_REPLICA_INDEX: "abc"}}})
        await merge_patch(
            kube, "v1", "Pod", w2, {"metadata": {"annotations": {c.ANNOTATION_LEAVING_REASON: "x" * 2000}}}
        )
        await merge_patch(
            kube,
            API_VERSION,
            "MPIJob",
            job,
            {
                "status": {
                    "lastWorkerIndex": 10**15,
                    "discoveredHosts": ["x", "other-worker-1", "../etc/passwd", "hostile-worker-0x"],
                    "leavingWorkers": ["nobody"],
                }
            },
            subresource="status",
        )

        async def corrected() -> bool:
            status = (await kube.job(job)).get("status") or {}
            return 0 <= int(status.get("lastWorkerIndex", -1)) <= 99_999

        from kube import eventually

        await eventually(corrected, within=60, what="lastWorkerIndex corrected")
        await asyncio.sleep(3)

        assert running_operator.alive() and running_operator.starts == starts, running_operator.log_tail()
        assert "Traceback" not in running_operator.log_tail(400), running_operator.log_tail(400)
        now = {p["metadata"]["name"]: p for p in await kube.workers(job)}
        assert {n: p["metadata"]["uid"] for n, p in now.items()} == before
        assert not [n for n, p in now.items() if p["metadata"].get("deletionTimestamp")]
        assert not [n for n, p in now.items() if c.ANNOTATION_LEAVING_SINCE in (p["metadata"].get("annotations") or {})]
        body = await kube.job(job)
        assert body["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 3


async def test_client_learns_the_api_servers_clock_from_real_responses(kube: Kube) -> None:
    # Rule 11: grace periods are measured on the API server's clock (the operator's Controller clock is
    # client.clock.now), so leaders with skewed clocks agree. Here both run on one machine: offset ~ 0.
    from datetime import timedelta

    from mpijob.kube.client import Client

    client = Client(kube.client.api, qps=0, burst=1)
    await client.get("/version")
    assert client.clock.seen
    assert abs(client.clock.offset) < timedelta(seconds=2), client.clock.offset


def _hostile_examples(count: int) -> list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """(pod annotations, pod labels, job status) triples generated by hypothesis (derandomized: the same
    every run), for the real API server to admit or refuse and the operator to survive."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from mpijob.api import constants as c

    junk = st.one_of(
        st.text(max_size=40),
        st.sampled_from(
            ["", "-1", "1e309", "NaN", "2026-13-45T99:99:99Z", "9999-12-31T23:59:59Z", "{not json", "x" * 300]
        ),
    )
    # Not leaving-since: its presence is the operator's "this worker is leaving" mark, by design.
    keys = st.one_of(
        st.sampled_from(
            [
                c.ANNOTATION_LEAVING_REASON,
                "mpijob.kubeflow.org/whatever",
                "controller.kubernetes.io/pod-deletion-cost",
                "training.kubeflow.org/replica-index",
            ]
        ),
        st.text(min_size=1, max_size=20),
    )
    label_values = st.one_of(junk, st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True))
    any_value = st.one_of(
        junk, st.integers(min_value=-(2**70), max_value=2**70), st.booleans(), st.none(), st.lists(junk, max_size=4)
    )
    status = st.fixed_dictionaries(
        {},
        optional={
            "lastWorkerIndex": any_value,
            "leavingWorkers": any_value,
            "discoveredHosts": any_value,
            "recentWorkerFailures": any_value,
            "lastWorkerFailureTime": any_value,
            # Not "": that is the operator's "the name is taken" mark; a status writer can block a job with it.
            "sshSecretUID": st.text(min_size=1, max_size=40),
            "replicaStatuses": st.one_of(any_value, st.just({"Worker": {"active": 10**9}})),
        },
    )
    found: list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = []

    @settings(max_examples=count, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(
        st.dictionaries(keys, junk, max_size=3),
        # Not the role label: a pod relabelled out of the worker role is no worker of the job any more.
        st.dictionaries(st.sampled_from([c.LABEL_REPLICA_INDEX, "team"]), label_values, max_size=2),
        status,
    )
    def collect(annotations: dict[str, Any], labels: dict[str, Any], job_status: dict[str, Any]) -> None:
        found.append((annotations, labels, job_status))

    collect()
    return found


async def test_hypothesis_generated_annotations_labels_and_status_never_crash_wedge_or_delete(
    kube: Kube, api: Any, running_operator: Any
) -> None:
    from elastic_jobs import elastic_job, own_nodes, start_job
    from kube import eventually, merge_patch

    job = "generated"
    admitted = refused = 0
    async with own_nodes(api, kube, "a", "b") as nodes:
        pods = await start_job(kube, elastic_job(job, nodes, workers=3, min_replicas=1, max_replicas=5, grace=3600))
        before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
        starts = running_operator.starts
        for i, (annotations, labels, status) in enumerate(_hostile_examples(40)):
            target = sorted(before)[i % len(before)]
            for kind, patch, sub in (
                ("Pod", {"metadata": {"annotations": annotations, "labels": labels}}, None),
                ("MPIJob", {"status": status}, "status"),
            ):
                version = "v1" if kind == "Pod" else API_VERSION
                try:
                    await merge_patch(kube, version, kind, target if kind == "Pod" else job, patch, subresource=sub)
                    admitted += 1
                except ApiError as err:
                    assert err.status == 422, err  # refused at admission, naming the field
                    refused += 1
            await asyncio.sleep(0.05)
        await asyncio.sleep(3)

        assert running_operator.alive() and running_operator.starts == starts, running_operator.log_tail()
        assert "Traceback" not in running_operator.log_tail(2000), running_operator.log_tail(400)
        now = {p["metadata"]["name"]: p for p in await kube.workers(job)}
        assert {n: p["metadata"]["uid"] for n, p in now.items()} == before, "a worker was deleted or replaced"
        assert not [n for n, p in now.items() if p["metadata"].get("deletionTimestamp")]
        assert (await kube.job(job))["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 3
        # Not wedged: an ordinary edit afterwards is acted on.
        await kube.patch_job(job, {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 4}}}})

        async def grew() -> bool:
            return len(await kube.workers(job)) == 4

        await eventually(grew, within=60, what="the job still reconciled after the hostile edits")
    # The generator is worth something only if both sides are hit.
    assert admitted >= 10 and refused >= 5, (admitted, refused)


# -- fail closed: a patch of our object never changes one made again under its name ---------------------------


async def test_a_patch_of_an_object_made_again_under_its_name_is_refused_and_requeued(kube: Kube) -> None:
    # The operator's patches of its own objects carry the resourceVersion it read. Here the object is deleted
    # and made again by someone else between that read and the patch: the real API server refuses the patch
    # (409), the executor reports a conflict (the reconcile is requeued to plan on fresh data), not an error,
    # and the new object is untouched.
    from mpijob.executor.apply import Executor
    from mpijob.planner.actions import Patch

    def service(owner: str) -> Obj:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "recreated", "labels": {"owner": owner}},
            "spec": {"clusterIP": "None", "selector": {"app": owner}, "publishNotReadyAddresses": False},
        }

    ours = await kube.create(service("ours"))
    read = ours["metadata"]["resourceVersion"]
    await kube.delete("v1", "Service", "recreated")
    theirs = await kube.create(service("theirs"))
    job = {"metadata": {"namespace": kube.ns, "name": "nobody", "resourceVersion": "1"}}
    patch = Patch("v1", "Service", "recreated", {"spec": {"publishNotReadyAddresses": True}}, resource_version=read)

    outcome = await Executor(kube.client, post_events=False).apply(job, [patch])

    assert outcome.error is None and outcome.conflict is not None and "409" in outcome.conflict, outcome
    now = await kube.get("v1", "Service", "recreated")
    assert now is not None and now["metadata"]["uid"] == theirs["metadata"]["uid"]
    assert now["metadata"]["resourceVersion"] == theirs["metadata"]["resourceVersion"]
    assert not now["spec"].get("publishNotReadyAddresses")

    # The same patch on what it read goes through (the precondition is no obstacle to a normal write).
    current = Patch(
        "v1",
        "Service",
        "recreated",
        {"spec": {"publishNotReadyAddresses": True}},
        resource_version=theirs["metadata"]["resourceVersion"],
    )
    outcome = await Executor(kube.client, post_events=False).apply(job, [current])
    assert outcome.error is None and outcome.conflict is None and outcome.writes == 1, outcome


async def test_two_optimistic_patches_of_one_job_in_a_batch_build_on_each_other(kube: Kube) -> None:
    # Resuming a launcher Job: its status (startTime cleared), then its spec, each with a precondition; the
    # second carries the version the first made, so the real API server takes both.
    from mpijob.executor.apply import Executor
    from mpijob.planner.actions import Patch

    made = await kube.create(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "resumed"},
            "spec": {
                "suspend": True,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}},
            },
        }
    )

    # The Job controller writes the new Job's status once (Suspended); read after it, as the cache would.
    async def settled() -> Obj | None:
        current = await kube.get("batch/v1", "Job", "resumed")
        return current if current is not None and (current.get("status") or {}).get("conditions") else None

    read = (await eventually(settled, what="the Job controller's first status write"))["metadata"]["resourceVersion"]
    assert made["metadata"]["resourceVersion"] != read
    job = {"metadata": {"namespace": kube.ns, "name": "nobody", "resourceVersion": "1"}}
    actions = [
        Patch(
            "batch/v1", "Job", "resumed", {"status": {"startTime": None}}, resource_version=read, subresource="status"
        ),
        Patch("batch/v1", "Job", "resumed", {"spec": {"suspend": False}}, resource_version=read),
    ]

    outcome = await Executor(kube.client, post_events=False).apply(job, actions)

    assert outcome.error is None and outcome.conflict is None and outcome.writes == 2, outcome
    now = await kube.get("batch/v1", "Job", "resumed")
    assert now is not None and now["spec"]["suspend"] is False
