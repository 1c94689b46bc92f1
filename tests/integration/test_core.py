"""The core (non-elastic) MPIJob operator on the real testbed, with the real operator process.

Each test runs in its own namespace (the `kube` fixture). Timeouts are generous upper bounds for a shared
machine, never performance claims. What each test proves is in its name.
"""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube import (
    Kube,
    condition,
    container,
    eventually,
    has_condition,
    kubectl,
    label_node,
    live,
    merge_patch,
    mpijob,
    names,
    run_sh,
    wait_condition,
    wait_running,
)
from kubernetes_asyncio.client import ApiClient
from operator_harness import OperatorProcess

from mpijob.api import constants as c
from mpijob.api.models import API_VERSION
from mpijob.kube.resources import object_path
from mpijob.planner.hostfile import parse_discovery_output
from mpijob_testbed import complete_pod

pytestmark = pytest.mark.integration

# The harness starts the operator without --cluster-domain; the variable is its only other source.
CLUSTER_DOMAIN = os.environ.get("MPIJOB_CLUSTER_DOMAIN", "")
HOSTFILE_PATH = f"{c.CONFIG_MOUNT_PATH}/{c.HOSTFILE_KEY}"
HOSTFILE_ENV = {
    "OpenMPI": "OMPI_MCA_orte_default_hostfile",
    "Intel": "I_MPI_HYDRA_HOST_FILE",
    "MPICH": "HYDRA_HOST_FILE",
}
Obj = dict[str, Any]


# -- helpers -----------------------------------------------------------------------------------------------


def fqdn(pod: str, job: str, namespace: str) -> str:
    host = f"{pod}.{job}.{namespace}.svc"
    return f"{host}.{CLUSTER_DOMAIN}" if CLUSTER_DOMAIN else host


def phase(pod: Obj) -> str | None:
    return (pod.get("status") or {}).get("phase")


def env_of(cont: Obj) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in cont.get("env") or []}


def assert_controlled_by(obj: Obj, job: Obj) -> None:
    refs = obj["metadata"].get("ownerReferences") or []
    controllers = [r for r in refs if r.get("controller")]
    assert len(controllers) == 1, f"{obj.get('kind', '')} {obj['metadata']['name']}: {refs}"
    ref = controllers[0]
    assert (ref["apiVersion"], ref["kind"], ref["name"], ref["uid"]) == (
        API_VERSION,
        "MPIJob",
        job["metadata"]["name"],
        job["metadata"]["uid"],
    ), ref
    assert ref.get("blockOwnerDeletion") is True, ref


async def wait_job(kube: Kube, name: str, what: str, pred: Any, within: float = 60.0) -> Obj:
    async def check() -> Obj | None:
        job = await kube.job(name)
        return job if pred(job) else None

    return await eventually(check, within=within, what=f"MPIJob {name}: {what}")


async def launcher_job(kube: Kube, name: str) -> Obj | None:
    return await kube.get("batch/v1", "Job", c.launcher_name(name))


async def event_with(kube: Kube, job: str, type_: str, reason: str, text: str, within: float = 30.0) -> Obj:
    async def check() -> Obj | None:
        for event in await kube.events(job):
            if event.get("type") == type_ and event.get("reason") == reason and text in (event.get("message") or ""):
                return event
        return None

    return await eventually(check, within=within, what=f"{type_} Event {reason} mentioning {text!r}")


async def children_versions(kube: Kube, name: str) -> dict[str, tuple[str, str]]:
    """(uid, resourceVersion) of the MPIJob, every child object and every pod in the namespace."""
    out: dict[str, tuple[str, str]] = {}
    for api_version, kind, obj_name in (
        (API_VERSION, "MPIJob", name),
        ("v1", "Service", name),
        ("v1", "ConfigMap", c.config_map_name(name)),
        ("v1", "Secret", c.secret_name(name)),
        ("batch/v1", "Job", c.launcher_name(name)),
    ):
        obj = await kube.get(api_version, kind, obj_name)
        assert obj is not None, f"{kind} {obj_name} missing"
        out[f"{kind}/{obj_name}"] = (obj["metadata"]["uid"], obj["metadata"]["resourceVersion"])
    for pod in await kube.list("v1", "Pod"):
        out[f"Pod/{pod['metadata']['name']}"] = (pod["metadata"]["uid"], pod["metadata"]["resourceVersion"])
    return out


async def apply_manifest(kubeconfig: Path, namespace: str, tmp_path: Path, body: Obj) -> tuple[int, str]:
    path = tmp_path / f"{body['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(body))
    return await kubectl(kubeconfig, "-n", namespace, "apply", "-f", str(path), check=False)


# -- 1. everything a job owns --------------------------------------------------------------------------------


@pytest.mark.parametrize(("implementation", "slots"), [("OpenMPI", 2), ("Intel", 1), ("MPICH", 1)])
async def test_all_children_created_with_hostfile_discovery_ssh_secret_launcher_env_and_worker_identity(
    kube: Kube, implementation: str, slots: int
) -> None:
    name = "objs"
    ns = kube.ns
    await kube.create(mpijob(name, workers=2, implementation=implementation, slotsPerWorker=slots))
    job = await wait_running(kube, name, 2)
    worker_names = [c.worker_name(name, i) for i in range(2)]

    # Headless Service selecting the job's pods.
    svc = await kube.get("v1", "Service", name)
    assert svc is not None
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {c.LABEL_OPERATOR_NAME: c.OPERATOR_NAME, c.LABEL_JOB_NAME: name}
    assert_controlled_by(svc, job)

    # ConfigMap: hostfile in the implementation's format; discover_hosts.sh lists the Running workers.
    hosts = [fqdn(w, name, ns) for w in worker_names]
    if implementation == "OpenMPI":
        expected_hostfile = "".join(f"{h} slots={slots}\n" for h in hosts)
    else:
        expected_hostfile = "".join(f"{h}:{slots}\n" for h in hosts)

    async def config_map() -> Obj | None:
        cm = await kube.get("v1", "ConfigMap", c.config_map_name(name))
        script = (cm or {}).get("data", {}).get(c.DISCOVER_HOSTS_KEY, "")
        return cm if cm and all(h in script for h in hosts) else None

    cm = await eventually(config_map, what="discover_hosts.sh listing both workers")
    assert_controlled_by(cm, job)
    assert cm["data"][c.HOSTFILE_KEY] == expected_hostfile
    output = await run_sh(cm["data"][c.DISCOVER_HOSTS_KEY])
    running = [p for p in await kube.workers(name) if phase(p) == "Running"]
    assert names(running) == worker_names
    assert parse_discovery_output(output) == [(fqdn(p["metadata"]["name"], name, ns), slots) for p in running]

    # SSH Secret with a fresh key pair.
    secret = await kube.get("v1", "Secret", c.secret_name(name))
    assert secret is not None
    assert secret["type"] == "kubernetes.io/ssh-auth"
    assert set(secret["data"]) == {"ssh-privatekey", "ssh-publickey"}
    assert b"PRIVATE KEY-----" in base64.b64decode(secret["data"]["ssh-privatekey"])
    assert base64.b64decode(secret["data"]["ssh-publickey"]).startswith(b"ecdsa-sha2-nistp521 ")
    assert_controlled_by(secret, job)

    # Launcher batch Job with the implementation's environment and the hostfile mounted.
    launcher = await launcher_job(kube, name)
    assert launcher is not None
    assert_controlled_by(launcher, job)
    tmpl = launcher["spec"]["template"]
    assert tmpl["metadata"]["labels"][c.LABEL_JOB_ROLE] == c.ROLE_LAUNCHER
    assert tmpl["metadata"]["labels"][c.LABEL_JOB_NAME] == name
    assert tmpl["spec"]["hostname"] == c.launcher_name(name)
    assert tmpl["spec"]["subdomain"] == name
    env = env_of(tmpl["spec"]["containers"][0])
    assert env["K_MPI_JOB_ROLE"] == c.ROLE_LAUNCHER
    assert env[HOSTFILE_ENV[implementation]] == HOSTFILE_PATH
    if implementation == "OpenMPI":
        assert env["OMPI_MCA_orte_set_default_slots"] == str(slots)
        assert env["OMPI_MCA_orte_keep_fqdn_hostnames"] == "true"
    elif implementation == "Intel":
        assert env["I_MPI_PERHOST"] == str(slots)
    for other in set(HOSTFILE_ENV.values()) - {HOSTFILE_ENV[implementation]}:
        assert other not in env, other
    mounts = {m["mountPath"]: m["name"] for m in tmpl["spec"]["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in tmpl["spec"]["volumes"]}
    assert volumes[mounts[c.CONFIG_MOUNT_PATH]]["configMap"]["name"] == c.config_map_name(name)
    assert volumes[mounts["/root/.ssh"]]["secret"]["secretName"] == c.secret_name(name)

    # Worker pods: stable hostname and subdomain, labels, controller reference, role env.
    pods = await kube.workers(name)
    assert names(pods) == worker_names
    for index, pod in enumerate(pods):
        assert pod["spec"]["hostname"] == worker_names[index]
        assert pod["spec"]["subdomain"] == name
        labels = pod["metadata"]["labels"]
        assert labels[c.LABEL_JOB_NAME] == name
        assert labels[c.LABEL_JOB_ROLE] == c.ROLE_WORKER
        assert labels[c.LABEL_REPLICA_INDEX] == str(index)
        assert_controlled_by(pod, job)
        assert env_of(pod["spec"]["containers"][0])["K_MPI_JOB_ROLE"] == c.ROLE_WORKER

    # Every create is announced: a new job's Event is the reference's MPIJobCreated, and it names all the
    # objects its first reconcile created.
    for worker in worker_names:
        await event_with(kube, name, "Normal", "MPIJobCreated", worker)
    assert not [e for e in await kube.events(name) if e.get("reason") == "SuccessfulCreate"]


async def test_run_launcher_as_worker_puts_the_launcher_first_in_hostfile_and_discovery_and_shifts_indexes(
    kube: Kube,
) -> None:
    name = "law"
    ns = kube.ns
    await kube.create(mpijob(name, workers=2, implementation="MPICH", slotsPerWorker=2, runLauncherAsWorker=True))
    job = await wait_running(kube, name, 2)
    launcher_host = fqdn(c.launcher_name(name), name, ns)
    hosts = [launcher_host] + [fqdn(c.worker_name(name, i), name, ns) for i in range(2)]

    async def config_map() -> Obj | None:
        cm = await kube.get("v1", "ConfigMap", c.config_map_name(name))
        script = (cm or {}).get("data", {}).get(c.DISCOVER_HOSTS_KEY, "")
        return cm if cm and all(h in script for h in hosts) else None

    cm = await eventually(config_map, what="discover_hosts.sh listing the launcher and both workers")
    assert cm["data"][c.HOSTFILE_KEY] == "".join(f"{h}:2\n" for h in hosts)
    assert parse_discovery_output(await run_sh(cm["data"][c.DISCOVER_HOSTS_KEY])) == [(h, 2) for h in hosts]
    svc = await kube.get("v1", "Service", name)
    assert svc is not None and svc["spec"]["publishNotReadyAddresses"] is True
    launcher = await launcher_job(kube, name)
    assert launcher is not None
    assert launcher["spec"]["template"]["metadata"]["labels"][c.LABEL_REPLICA_INDEX] == "0"
    env = env_of(launcher["spec"]["template"]["spec"]["containers"][0])
    assert "NVIDIA_VISIBLE_DEVICES" not in env  # the launcher is a worker too: it may use GPUs
    pods = await kube.workers(name)
    assert [p["metadata"]["labels"][c.LABEL_REPLICA_INDEX] for p in pods] == ["1", "2"]
    for pod in pods:
        assert_controlled_by(pod, job)


# -- 2. launcherCreationPolicy -------------------------------------------------------------------------------


async def test_wait_for_workers_ready_creates_the_launcher_only_once_workers_are_ready(kube: Kube) -> None:
    name = "wfwr"
    node = "node-1"
    key, value = "testbed.mpijob.io/core-wfwr", kube.ns[:63]
    worker_template = {"spec": {"containers": [container("worker")], "nodeSelector": {key: value}}}
    await kube.create(mpijob(name, worker_template=worker_template, launcherCreationPolicy="WaitForWorkersReady"))

    async def unschedulable() -> bool:
        pods = await kube.workers(name)
        return len(pods) == 2 and all(
            phase(p) == "Pending"
            and any(
                cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable"
                for cond in (p.get("status") or {}).get("conditions") or []
            )
            for p in pods
        )

    await eventually(unschedulable, what="both workers Pending and Unschedulable")
    await asyncio.sleep(3)  # the operator has seen Pending workers several times by now
    assert await launcher_job(kube, name) is None
    assert not await kube.launcher_pods(name)
    assert not has_condition(await kube.job(name), "Running")

    try:
        await label_node(kube.client, node, {key: value})
        launcher = await eventually(lambda: launcher_job(kube, name), within=90, what="launcher Job created")
        created = launcher["metadata"]["creationTimestamp"]
        for pod in await kube.workers(name):
            assert pod["spec"]["nodeName"] == node
            ready = [cond for cond in pod["status"]["conditions"] if cond["type"] == "Ready"]
            assert ready and ready[0]["status"] == "True", pod["status"]
            # RFC 3339 UTC timestamps with second precision compare as strings.
            assert ready[0]["lastTransitionTime"] <= created, (ready[0], created)
        await wait_running(kube, name, 2)
    finally:
        await label_node(kube.client, node, {key: None})


# -- 3. success and cleanPodPolicy ---------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["Running", "All", "None"])
async def test_launcher_success_marks_succeeded_clears_running_and_cleans_workers_per_policy(
    kube: Kube, api: ApiClient, policy: str
) -> None:
    name = "done"
    await kube.create(mpijob(name, workers=2, run_policy={"cleanPodPolicy": policy}))
    await wait_running(kube, name, 2)
    w0, w1 = c.worker_name(name, 0), c.worker_name(name, 1)
    # worker-0 ends first, so Running (finished pods stay) and All (everything goes) differ.
    await complete_pod(api, kube.ns, w0, succeeded=True)

    async def w0_succeeded() -> bool:
        pod = await kube.get("v1", "Pod", w0)
        return pod is not None and phase(pod) == "Succeeded"

    await eventually(w0_succeeded, what=f"{w0} Succeeded")
    [launcher] = live(await kube.launcher_pods(name))
    await complete_pod(api, kube.ns, launcher["metadata"]["name"], succeeded=True)

    job = await wait_condition(kube, name, "Succeeded", within=90)
    assert has_condition(job, "Running", "False"), job["status"]["conditions"]
    assert job["status"]["completionTime"]
    assert job["status"]["state"] == "Succeeded"

    if policy == "All":

        async def all_gone() -> bool:
            return not await kube.workers(name)

        await eventually(all_gone, within=60, what="every worker deleted (cleanPodPolicy All)")
    elif policy == "Running":

        async def only_finished_left() -> bool:
            return names(await kube.workers(name)) == [w0]

        await eventually(only_finished_left, within=60, what=f"only {w0} left (cleanPodPolicy Running)")
        await asyncio.sleep(2)
        [kept] = await kube.workers(name)
        assert phase(kept) == "Succeeded" and not kept["metadata"].get("deletionTimestamp")
    else:
        await asyncio.sleep(4)
        pods = await kube.workers(name)
        assert names(live(pods)) == [w0, w1], [(p["metadata"]["name"], phase(p)) for p in pods]
        assert [phase(p) for p in pods] == ["Succeeded", "Running"]
    assert has_condition(await kube.job(name), "Running", "False")


async def test_ttl_seconds_after_finished_deletes_the_finished_job_and_its_children(kube: Kube, api: ApiClient) -> None:
    name = "ttl"
    await kube.create(mpijob(name, workers=2, run_policy={"ttlSecondsAfterFinished": 2, "cleanPodPolicy": "None"}))
    await wait_running(kube, name, 2)
    [launcher] = live(await kube.launcher_pods(name))
    await complete_pod(api, kube.ns, launcher["metadata"]["name"], succeeded=True)
    job = await wait_condition(kube, name, "Succeeded", within=90)
    assert job["status"]["completionTime"]

    async def gone() -> bool:
        return await kube.get(API_VERSION, "MPIJob", name) is None

    await eventually(gone, within=90, what="MPIJob deleted after ttlSecondsAfterFinished")

    async def children_gone() -> bool:
        # Owner references make the garbage collector remove the children.
        return (
            not live(await kube.workers(name))
            and await kube.get("v1", "ConfigMap", c.config_map_name(name)) is None
            and await kube.get("v1", "Service", name) is None
            and await kube.get("v1", "Secret", c.secret_name(name)) is None
        )

    await eventually(children_gone, within=90, what="children garbage-collected")


# -- 4. launcher failure with backoff -----------------------------------------------------------------------


async def test_launcher_failing_beyond_backoff_limit_fails_the_job_with_backoff_reason(
    kube: Kube, api: ApiClient
) -> None:
    name = "backoff"
    await kube.create(mpijob(name, run_policy={"backoffLimit": 1}))
    await wait_running(kube, name, 2)
    launcher = await launcher_job(kube, name)
    assert launcher is not None and launcher["spec"]["backoffLimit"] == 1
    [first] = live(await kube.launcher_pods(name))
    first_name = first["metadata"]["name"]
    await complete_pod(api, kube.ns, first_name, succeeded=False)

    async def second_launcher_running() -> Obj | None:
        for pod in await kube.launcher_pods(name):
            if pod["metadata"]["name"] != first_name and phase(pod) == "Running":
                return pod
        return None

    # The Job controller recreates the pod after its failure backoff (about 10 s).
    second = await eventually(second_launcher_running, within=120, what="a second launcher pod Running")
    assert not has_condition(await kube.job(name), "Failed"), "one failure is within backoffLimit 1"
    await complete_pod(api, kube.ns, second["metadata"]["name"], succeeded=False)

    job = await wait_condition(kube, name, "Failed", within=120)
    failed = condition(job, "Failed")
    assert failed is not None and str(failed["reason"]).startswith("BackoffLimitExceeded"), failed
    assert job["status"]["completionTime"]
    assert has_condition(job, "Running", "False")
    assert job["status"]["state"] == "Failed"
    await event_with(kube, name, "Warning", str(failed["reason"]), "")

    async def two_failures_counted() -> bool:
        status = (await kube.job(name))["status"]
        return bool(status["replicaStatuses"]["Launcher"].get("failed") == 2)

    await eventually(two_failures_counted, what="replicaStatuses.Launcher.failed == 2")


# -- 5. activeDeadlineSeconds --------------------------------------------------------------------------------


async def test_active_deadline_seconds_fails_the_job_with_deadline_exceeded(kube: Kube) -> None:
    name = "deadline"
    await kube.create(mpijob(name, run_policy={"activeDeadlineSeconds": 3}))
    launcher = await eventually(lambda: launcher_job(kube, name), what="launcher Job")
    assert launcher["spec"]["activeDeadlineSeconds"] == 3
    job = await wait_condition(kube, name, "Failed", within=120)
    failed = condition(job, "Failed")
    assert failed is not None and failed["reason"] == "DeadlineExceeded", failed
    assert job["status"]["completionTime"]
    assert has_condition(job, "Running", "False")


# -- 6. suspend and resume -----------------------------------------------------------------------------------


async def test_created_suspended_then_resumed_like_kueue_creates_workers_and_syncs_launcher_scheduling(
    kube: Kube,
) -> None:
    name = "susp"
    await kube.create(mpijob(name, run_policy={"suspend": True}))
    job = await wait_condition(kube, name, "Suspended")
    assert job["status"]["state"] == "Suspended"
    assert not job["status"].get("startTime")
    launcher = await eventually(lambda: launcher_job(kube, name), what="suspended launcher Job")
    assert launcher["spec"]["suspend"] is True
    launcher_uid = launcher["metadata"]["uid"]
    await asyncio.sleep(3)
    assert not await kube.workers(name)
    assert not await kube.launcher_pods(name)
    assert not has_condition(await kube.job(name), "Running")

    # What Kueue does on admission: scheduling directives into the launcher template, then unsuspend.
    selector = {"kubernetes.io/hostname": "node-1"}
    toleration = {"key": "example.com/flavor", "operator": "Exists", "effect": "NoSchedule"}
    await kube.patch_job(
        name,
        {
            "spec": {
                "runPolicy": {"suspend": False},
                "mpiReplicaSpecs": {
                    "Launcher": {
                        "template": {
                            "metadata": {
                                "labels": {"kueue.x-k8s.io/podset": "launcher"},
                                "annotations": {"kueue.x-k8s.io/workload": "w-1"},
                            },
                            "spec": {"nodeSelector": selector, "tolerations": [toleration]},
                        }
                    }
                },
            }
        },
    )

    async def launcher_resumed() -> Obj | None:
        lj = await launcher_job(kube, name)
        return lj if lj is not None and lj["spec"].get("suspend") is False else None

    launcher = await eventually(launcher_resumed, what="launcher Job unsuspended")
    assert launcher["metadata"]["uid"] == launcher_uid, "launcher Job recreated instead of resumed"
    tmpl = launcher["spec"]["template"]
    assert tmpl["spec"]["nodeSelector"] == selector
    assert toleration in tmpl["spec"]["tolerations"]
    assert tmpl["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "launcher"
    assert tmpl["metadata"]["labels"][c.LABEL_JOB_ROLE] == c.ROLE_LAUNCHER
    assert tmpl["metadata"]["annotations"]["kueue.x-k8s.io/workload"] == "w-1"

    job = await wait_running(kube, name, 2)
    assert has_condition(job, "Suspended", "False")
    assert job["status"]["startTime"]
    [pod] = live(await kube.launcher_pods(name))
    assert pod["spec"]["nodeName"] == "node-1"


async def test_a_job_created_suspended_can_be_resumed_by_an_update_of_the_object_its_create_returned(
    kube: Kube,
) -> None:
    # The reference's e2e suite ("suspended on creation"): create, list the pods, then Update with the object
    # the create returned, no retry. A status write of ours in between would make that Update a 409; ten
    # trials back to back (before the fix, one in five met one: docs/results.md).
    for trial in range(10):
        name = f"put-{trial}"
        job = await kube.create(mpijob(name, workers=1, run_policy={"suspend": True}))
        assert not await kube.list("v1", "Pod", f"{c.LABEL_JOB_NAME}={name}")
        job["spec"]["runPolicy"]["suspend"] = False
        await kube.client.request("PUT", object_path(API_VERSION, "MPIJob", kube.ns, name), job)
    job = await wait_running(kube, name, 1)
    assert not has_condition(job, "Suspended", "True")


async def test_suspending_a_running_job_deletes_workers_and_suspends_launcher_then_resume_recreates(
    kube: Kube,
) -> None:
    name = "suspr"
    await kube.create(mpijob(name, workers=2))
    await wait_running(kube, name, 2)
    launcher_uid = (await launcher_job(kube, name) or {})["metadata"]["uid"]
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await kube.workers(name)}

    await kube.patch_job(name, {"spec": {"runPolicy": {"suspend": True}}})
    job = await wait_condition(kube, name, "Suspended")
    assert has_condition(job, "Running", "False")

    async def stopped() -> bool:
        lj = await launcher_job(kube, name)
        return (
            not await kube.workers(name)
            and not await kube.launcher_pods(name)
            and lj is not None
            and lj["spec"].get("suspend") is True
        )

    await eventually(stopped, within=60, what="workers and launcher pod gone, launcher Job suspended")

    await kube.patch_job(name, {"spec": {"runPolicy": {"suspend": False}}})
    job = await wait_running(kube, name, 2, within=90)
    assert has_condition(job, "Suspended", "False")
    lj = await launcher_job(kube, name)
    assert lj is not None and lj["metadata"]["uid"] == launcher_uid and lj["spec"]["suspend"] is False
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await kube.workers(name)}
    assert set(after) == set(before)
    assert not set(after.values()) & set(before.values()), "workers were recreated"


# -- 7. a worker deleted by someone else ---------------------------------------------------------------------


async def test_worker_deleted_by_someone_else_is_recreated_at_the_same_name(kube: Kube) -> None:
    name = "recreate"
    await kube.create(mpijob(name, workers=2))
    await wait_running(kube, name, 2)
    w0, w1 = (await kube.workers(name))[:2]
    victim = w1["metadata"]["name"]
    await kube.delete("v1", "Pod", victim)

    async def replaced() -> Obj | None:
        pod = await kube.get("v1", "Pod", victim)
        if pod and pod["metadata"]["uid"] != w1["metadata"]["uid"] and phase(pod) == "Running":
            return pod
        return None

    new = await eventually(replaced, within=90, what=f"{victim} recreated with a new uid")
    assert new["metadata"]["labels"][c.LABEL_REPLICA_INDEX] == "1"
    job = await wait_running(kube, name, 2)
    assert_controlled_by(new, job)
    current = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await kube.workers(name)}
    assert current == {w0["metadata"]["name"]: w0["metadata"]["uid"], victim: new["metadata"]["uid"]}


# -- 8. foreign objects with a child's name ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["ConfigMap", "Secret", "Pod"])
async def test_foreign_object_with_a_child_name_is_never_touched_and_the_job_reports_a_conflict(
    kube: Kube, kind: str
) -> None:
    name = "foreign"
    blocks = kind in ("ConfigMap", "Secret")
    if kind == "Secret":
        # The operator cannot read Secrets (issue 8, rule 12): its create finds the name taken.
        foreign_name = c.secret_name(name)
        await kube.create(
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": foreign_name}, "data": {"ssh-privatekey": ""}}
        )
    elif kind == "ConfigMap":
        foreign_name = c.config_map_name(name)
        await kube.create(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": foreign_name}, "data": {"hostfile": "x\n"}}
        )
    else:
        foreign_name = c.worker_name(name, 1)
        await kube.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": foreign_name, "labels": {"app": "someone-else"}},
                "spec": {"containers": [container("other")], "terminationGracePeriodSeconds": 1},
            }
        )

        async def foreign_running() -> bool:
            pod = await kube.get("v1", "Pod", foreign_name)
            return pod is not None and phase(pod) == "Running"

        await eventually(foreign_running, what="the foreign pod Running (kwok done with it)")
    original = await kube.get("v1", kind, foreign_name)
    assert original is not None

    await kube.create(mpijob(name, workers=2))
    job = await wait_condition(kube, name, "ResourceConflict")
    conflict = condition(job, "ResourceConflict")
    assert conflict is not None and f"{kind} {foreign_name}" in conflict["message"], conflict
    await event_with(kube, name, "Warning", "ResourceConflict", foreign_name)
    if blocks:
        # Fail closed (issue 8, rule 5): a worker or launcher would mount someone else's discover_hosts.sh
        # or SSH key.
        assert "No worker or launcher is created" in conflict["message"], conflict
        await asyncio.sleep(3)
        assert await kube.workers(name) == []
        assert await launcher_job(kube, name) is None
    else:
        # A foreign pod only holds its own name: the rest of the job goes ahead.
        await eventually(lambda: launcher_job(kube, name), what="launcher Job")
    if kind == "Pod":

        async def worker0_running() -> bool:
            return [(p["metadata"]["name"], phase(p)) for p in await kube.workers(name)] == [
                (c.worker_name(name, 0), "Running")
            ]

        await eventually(worker0_running, what="worker-0 Running")
    await asyncio.sleep(3)

    current = await kube.get("v1", kind, foreign_name)
    assert current is not None, f"foreign {kind} deleted"
    assert current["metadata"]["uid"] == original["metadata"]["uid"]
    assert current["metadata"]["resourceVersion"] == original["metadata"]["resourceVersion"], "foreign object written"
    assert not current["metadata"].get("ownerReferences")
    assert not current["metadata"].get("deletionTimestamp")
    assert has_condition(await kube.job(name), "ResourceConflict")
    if blocks:
        # Resolved by its owner: the job starts, with its own ConfigMap / Secret.
        await kube.delete("v1", kind, foreign_name)
        if kind == "Secret":
            # Secrets are not watched: the create is retried every minute, or at once on any edit of the job.
            await kube.patch_job(name, {"metadata": {"annotations": {"touched": "1"}}})
        await eventually(lambda: launcher_job(kube, name), what="launcher Job after the conflict is resolved")

        async def two_workers() -> bool:
            return len(live(await kube.workers(name))) == 2

        await eventually(two_workers, what="two workers after the conflict is resolved")
        ours = await kube.get("v1", kind, foreign_name)
        assert ours is not None and (ours["metadata"].get("ownerReferences") or [{}])[0].get("kind") == "MPIJob"
        if kind == "Secret":

            async def uid_recorded() -> bool:
                status = (await kube.job(name)).get("status") or {}
                return bool(status.get("sshSecretUID") == ours["metadata"]["uid"])

            await eventually(uid_recorded, what="the SSH Secret's uid in the status")
        await eventually(lambda: _condition_false(kube, name, "ResourceConflict"), what="ResourceConflict cleared")


async def _condition_false(kube: Kube, name: str, kind: str) -> bool:
    return has_condition(await kube.job(name), kind, "False")


# -- 9. invalid jobs -----------------------------------------------------------------------------------------


def _launcher_replicas_2(body: Obj) -> None:
    body["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"] = 2


def _replicas_outside_elastic_range(body: Obj) -> None:
    body["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 5
    body["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 3}


def _launcher_creation_policy_sometimes(body: Obj) -> None:
    body["spec"]["launcherCreationPolicy"] = "Sometimes"


def _unknown_mpi_implementation(body: Obj) -> None:
    body["spec"]["mpiImplementation"] = "OpenMPIX"


@pytest.mark.parametrize(
    ("breaker", "field"),
    [
        (_launcher_replicas_2, "spec.mpiReplicaSpecs[Launcher].replicas"),
        (_replicas_outside_elastic_range, "spec.mpiReplicaSpecs[Worker].replicas"),
        (_launcher_creation_policy_sometimes, "spec.launcherCreationPolicy"),
        (_unknown_mpi_implementation, "spec.mpiImplementation"),
    ],
    ids=["launcher-replicas-2", "replicas-outside-elastic-range", "launcher-creation-policy-enum", "unknown-mpi"],
)
async def test_invalid_manifest_is_refused_by_kubectl_apply_naming_the_field(
    kube: Kube, kubeconfig: Path, tmp_path: Path, breaker: Any, field: str
) -> None:
    body = mpijob("bad")
    breaker(body)
    code, output = await apply_manifest(kubeconfig, kube.ns, tmp_path, body)
    assert code != 0, output
    assert field in output, output
    assert await kube.get(API_VERSION, "MPIJob", "bad") is None
    # The valid form of the same manifest is accepted (the refusal is about that field only).
    code, output = await apply_manifest(kubeconfig, kube.ns, tmp_path, mpijob("good"))
    assert code == 0, output


async def test_job_with_more_workers_than_the_schema_allows_is_refused_naming_the_field(
    kube: Kube, kubeconfig: Path, tmp_path: Path
) -> None:
    # A 50-character name with 1,000,000 workers would need "<name>-worker-999999" (64 characters, not a
    # DNS label). The schema bounds replicas (10,000), so the API server refuses it with the field named;
    # the planner's validation applies the same bound (tests/integration/test_safety.py checks they agree).
    name = ("too-long-worker-names-" + "x" * 50)[:50]
    code, output = await apply_manifest(kubeconfig, kube.ns, tmp_path, mpijob(name, workers=1_000_000))
    assert code != 0, output
    assert "replicas" in output and "10000" in output, output
    assert await kube.get(API_VERSION, "MPIJob", name) is None
    assert not await kube.list("v1", "Pod")


# -- 10. operator restart ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kill_after", ["service", "first-worker"])
async def test_operator_killed_mid_way_converges_without_duplicates(
    kube: Kube, running_operator: OperatorProcess, kill_after: str
) -> None:
    name = "restart"
    workers = 3
    await kube.create(mpijob(name, workers=workers))

    # SIGKILL as soon as the first child (the Service) or the first worker appears: in the middle of the
    # first reconcile, before the rest of the children exist.
    async def first_child() -> list[Obj]:
        if kill_after == "service":
            return [svc] if (svc := await kube.get("v1", "Service", name)) else []
        return await kube.workers(name)

    await eventually(first_child, within=60, interval=0.02, what=f"first child ({kill_after})")
    running_operator.stop(kill=True)
    created_before_kill = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await kube.list("v1", "Pod")}
    running_operator.start()

    await wait_running(kube, name, workers, within=120)
    selector = f"{c.LABEL_JOB_NAME}={name}"

    async def counts() -> dict[str, int]:
        return {
            kind: len(await kube.list(api_version, kind, selector))
            for api_version, kind in (
                ("v1", "Service"),
                ("v1", "ConfigMap"),
                ("v1", "Secret"),
                ("batch/v1", "Job"),
            )
        }

    expected = {"Service": 1, "ConfigMap": 1, "Secret": 1, "Job": 1}
    assert await counts() == expected
    pods = await kube.list("v1", "Pod")
    assert sorted(names(pods)) == sorted(
        [c.worker_name(name, i) for i in range(workers)] + names(await kube.launcher_pods(name))
    )
    assert len(await kube.launcher_pods(name)) == 1
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
    for pod_name, uid in created_before_kill.items():
        assert before.get(pod_name) == uid, f"{pod_name} created before the kill was replaced"
    secret_uid = (await kube.get("v1", "Secret", c.secret_name(name)) or {})["metadata"]["uid"]
    await asyncio.sleep(4)
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await kube.list("v1", "Pod")}
    assert after == before, "a pod was recreated after the job was Running"
    assert await counts() == expected
    assert (await kube.get("v1", "Secret", c.secret_name(name)) or {})["metadata"]["uid"] == secret_uid
    assert has_condition(await kube.job(name), "Running")


# -- 11. managedBy -------------------------------------------------------------------------------------------


async def test_job_managed_by_another_controller_is_left_alone(kube: Kube) -> None:
    name = "elsewhere"
    await kube.create(mpijob(name, run_policy={"managedBy": "kueue.x-k8s.io/multikueue"}))
    # A job of ours created afterwards shows the operator is up and has seen the namespace's events.
    await kube.create(mpijob("ours", workers=1))
    await wait_condition(kube, "ours", "Created")
    await asyncio.sleep(3)
    job = await kube.job(name)
    assert not job.get("status"), job.get("status")
    assert await kube.get("v1", "Service", name) is None
    assert await kube.get("v1", "ConfigMap", c.config_map_name(name)) is None
    assert await kube.get("v1", "Secret", c.secret_name(name)) is None
    assert await launcher_job(kube, name) is None
    assert not await kube.list("v1", "Pod", f"{c.LABEL_JOB_NAME}={name}")
    assert not await kube.events(name)


# -- 12. eviction (reference #647) ---------------------------------------------------------------------------


async def test_evicted_worker_fails_the_job_with_completion_time_and_cleanup_runs(kube: Kube) -> None:
    name = "evicted"
    await kube.create(mpijob(name, workers=2, run_policy={"cleanPodPolicy": "All"}))
    await wait_running(kube, name, 2)
    victim = c.worker_name(name, 0)
    # The patch's answer, not a later read: with cleanPodPolicy All the operator may delete the pod at once.
    pod = await merge_patch(
        kube,
        "v1",
        "Pod",
        victim,
        {"status": {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}},
        subresource="status",
    )
    assert phase(pod) == "Failed" and pod["status"]["reason"] == "Evicted", pod

    job = await wait_condition(kube, name, "Failed", within=60)
    failed = condition(job, "Failed")
    assert failed is not None and failed["reason"] == "MPIJobEvicted", failed
    assert "1/2 workers are evicted" in failed["message"]
    assert job["status"]["completionTime"]
    assert has_condition(job, "Running", "False")

    async def all_gone() -> bool:
        return not await kube.workers(name)

    await eventually(all_gone, within=60, what="every worker deleted (cleanPodPolicy All)")


# -- 13. steady state costs nothing -------------------------------------------------------------------------


async def test_running_job_in_steady_state_causes_zero_writes(kube: Kube) -> None:
    name = "steady"
    await kube.create(mpijob(name, workers=2))
    await wait_running(kube, name, 2)

    async def settled() -> dict[str, tuple[str, str]] | None:
        # The Job controller and kwok finish their own status updates shortly after the pods start.
        first = await children_versions(kube, name)
        await asyncio.sleep(1.5)
        second = await children_versions(kube, name)
        return second if first == second else None

    before = await eventually(settled, within=60, what="children settled")
    events_before = len(await kube.events(name))
    await asyncio.sleep(5)
    after = await children_versions(kube, name)
    changed = {k: (before.get(k), v) for k, v in after.items() if before.get(k) != v}
    changed.update({k: (v, None) for k, v in before.items() if k not in after})
    assert not changed, f"written in steady state: {changed}"
    assert len(await kube.events(name)) == events_before
