"""Discovery as the launcher sees it, on the testbed with the real operator: the job's real discover_hosts.sh
(from the ConfigMap the operator wrote) run as a process with the launcher's real credentials (a TokenRequest
for the ServiceAccount its pod runs as, the testbed CA, the API address), see tests/integration/launcher.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from elastic_jobs import elastic_job, own_nodes, start_job
from kube import Kube, eventually, has_condition, live
from kubernetes_asyncio.client import ApiClient
from launcher import api_view, dumps, launcher

from mpijob.api import constants as c
from mpijob.api.models import API_VERSION
from mpijob.planner.discovery import listed_hosts
from mpijob_testbed import SPOT_ITN_TAINT, taint_node

pytestmark = pytest.mark.integration

Obj = dict[str, Any]


async def discovery_in_api(kube: Kube, job: str) -> list[str]:
    cm = await kube.get("v1", "ConfigMap", c.config_map_name(job))
    return sorted(h.split(".", 1)[0] for h in listed_hosts((cm or {}).get("data") or {}) or [])


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A local port nothing listens on (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    yield port


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A local port that accepts TCP connections and never answers (a hung API server)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s.getsockname()[1]


async def test_launcher_prints_exactly_the_running_non_leaving_workers_with_their_slots(
    kube: Kube, api: ApiClient
) -> None:
    async with own_nodes(api, kube, "a", "b") as nodes:
        body = elastic_job("slots", nodes, workers=3, min_replicas=1)
        body["spec"]["slotsPerWorker"] = 2
        pods = await start_job(kube, body, nodes)

        async with launcher(kube, "slots") as seat:
            run = await seat.run()
            assert run.returncode == 0, dumps(run)
            assert "source: API" in run.stderr, dumps(run)
            assert run.pods == api_view(await kube.workers("slots")) == sorted(p["metadata"]["name"] for p in pods)
            assert sorted(run.lines) == sorted(f"{p['metadata']['name']}.slots.{kube.ns}.svc:2" for p in pods)

            # One worker leaves (listed): gone from the very next run, while its pod is still Running.
            await kube.patch_job(
                "slots",
                {
                    "spec": {
                        "elasticPolicy": {"workersToDelete": ["slots-worker-1"]},
                        "mpiReplicaSpecs": {"Worker": {"replicas": 2}},
                    }
                },
            )

            async def left() -> bool:
                return "slots-worker-1" not in await discovery_in_api(kube, "slots")

            await eventually(left, within=30, what="slots-worker-1 out of the discovery list")
            run = await seat.run()
            assert run.returncode == 0 and "slots-worker-1" not in run.pods, dumps(run)
            assert run.pods == api_view(await kube.workers("slots")), dumps(run)


async def test_after_a_termination_taint_the_next_run_drops_the_victims_while_their_pods_still_run(
    kube: Kube, api: ApiClient
) -> None:
    async with own_nodes(api, kube, "a", "b") as nodes:
        # A long grace period: the victims keep running while the launcher must already have dropped them.
        pods = await start_job(kube, elastic_job("spot", nodes, workers=4, grace=120), nodes)
        victims = sorted(p["metadata"]["name"] for p in pods if p["spec"]["nodeName"] == nodes[1])
        keepers = sorted(p["metadata"]["name"] for p in pods if p["spec"]["nodeName"] == nodes[0])
        assert victims and keepers

        async with launcher(kube, "spot") as seat:
            script = await seat.script()
            await taint_node(api, nodes[1], SPOT_ITN_TAINT)
            # Every run from the taint on lists either everyone or exactly the keepers, never anything else.
            seen: list[list[str]] = []
            while True:
                run = await seat.run(script)
                assert run.returncode == 0 and "source: API" in run.stderr, dumps(run)
                seen.append(run.pods)
                assert run.pods in (sorted(victims + keepers), keepers), dumps(run)
                if run.pods == keepers:
                    break
                assert len(seen) < 300, "the launcher never stopped listing the victims"
            # The victims are out of the launcher's view while their pods still serve.
            for victim in victims:
                pod = await kube.get("v1", "Pod", victim)
                assert pod is not None and pod["status"]["phase"] == "Running", victim
                assert not pod["metadata"].get("deletionTimestamp"), victim

            # And the very next run after the discovery write (as a quorum read of the API shows it) agrees.
            assert await discovery_in_api(kube, "spot") == keepers
            run = await seat.run(script)
            assert run.pods == keepers, dumps(run)


async def test_api_unreachable_hung_or_token_revoked_falls_back_to_the_files_and_with_nothing_fails_loudly(
    kube: Kube, api: ApiClient
) -> None:
    async with own_nodes(api, kube, "a", "b") as nodes:
        pods = await start_job(kube, elastic_job("fallback", nodes, workers=2, min_replicas=1), nodes)
        expected = sorted(p["metadata"]["name"] for p in pods)

        async def nudged() -> bool:
            (pod,) = live(await kube.launcher_pods("fallback"))
            value = (pod["metadata"].get("annotations") or {}).get(c.ANNOTATION_DISCOVERED_HOSTS, "")
            return sorted(h.split(".", 1)[0] for h in listed_hosts({c.DISCOVERED_HOSTS_KEY: value}) or []) == expected

        await eventually(nudged, within=30, what="the launcher pod annotated with the discovery list")

        secret = await kube.create(
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "launcher-token-binding"}, "type": "Opaque"}
        )
        async with launcher(kube, "fallback", bound_secret=secret) as seat:
            run = await seat.run()
            assert run.returncode == 0 and "source: API" in run.stderr, dumps(run)
            assert run.pods == expected

            # Nothing listens at the API address.
            with closed_port() as port:
                run = await seat.run(KUBERNETES_SERVICE_PORT=str(port))
            assert run.returncode == 0 and "source: file (pod annotation)" in run.stderr, dumps(run)
            assert run.pods == expected

            # The API accepts the connection and never answers: the script's own deadline ends the wait.
            with silent_server() as port:
                run = await seat.run(KUBERNETES_SERVICE_PORT=str(port))
            assert run.returncode == 0 and "source: file (pod annotation)" in run.stderr, dumps(run)
            assert run.pods == expected

            # The token is revoked (the object it is bound to is deleted): 401, then the file.
            await kube.delete("v1", "Secret", "launcher-token-binding")

            async def refused() -> bool:
                return await seat.get_as_launcher(f"/api/v1/namespaces/{kube.ns}/configmaps/fallback-config") == 401

            await eventually(refused, within=30, what="the revoked token refused")
            run = await seat.run()
            assert run.returncode == 0 and "HTTP 401" in run.stderr, dumps(run)
            assert "source: file (pod annotation)" in run.stderr and run.pods == expected, dumps(run)

            # The annotation not projected yet (a new launcher pod): the ConfigMap volume's copy.
            (seat.dir / "discovery-hosts").write_text("")
            run = await seat.run()
            assert run.returncode == 0 and "source: file (ConfigMap volume)" in run.stderr, dumps(run)
            assert run.pods == expected

            # Neither the API nor a file: no host at all, the reason, a non-zero exit.
            missing = str(seat.dir / "missing")
            run = await seat.run(MPIJOB_DISCOVERY_FILE=missing, MPIJOB_DISCOVERY_CONFIG_FILE=missing)
            assert run.returncode != 0, dumps(run)
            assert run.stdout == ""
            assert "no usable host list" in run.stderr and "HTTP 401" in run.stderr, dumps(run)


async def test_the_launcher_token_can_read_its_own_list_and_nothing_else(kube: Kube, api: ApiClient) -> None:
    async with own_nodes(api, kube, "a", "b") as nodes:
        await start_job(kube, elastic_job("mine", nodes, workers=2, min_replicas=1), nodes)
        await start_job(kube, elastic_job("theirs", nodes, workers=2, min_replicas=1), nodes)
        ns = kube.ns
        own = "fieldSelector=metadata.name%3Dmine-config"
        (worker, *_) = await kube.workers("mine")
        async with launcher(kube, "mine") as seat:
            assert await seat.get_as_launcher(f"/api/v1/namespaces/{ns}/configmaps/mine-config") == 200
            refused = {
                "another job's discovery list": f"/api/v1/namespaces/{ns}/configmaps/theirs-config",
                "the ConfigMap list": f"/api/v1/namespaces/{ns}/configmaps",
                "watching its own list": f"/api/v1/namespaces/{ns}/configmaps?watch=1&{own}",
                "its SSH Secret": f"/api/v1/namespaces/{ns}/secrets/mine-ssh",
                "Secrets": f"/api/v1/namespaces/{ns}/secrets",
                "a worker pod": f"/api/v1/namespaces/{ns}/pods/{worker['metadata']['name']}",
                "pods": f"/api/v1/namespaces/{ns}/pods",
                "its MPIJob": f"/apis/{API_VERSION}/namespaces/{ns}/mpijobs/mine",
                "ConfigMaps of other namespaces": "/api/v1/namespaces/default/configmaps/mine-config",
            }
            answers = {what: await seat.get_as_launcher(path) for what, path in refused.items()}
            assert answers == dict.fromkeys(refused, 403)


async def test_user_service_account_is_bound_and_a_file_only_job_gets_no_access(kube: Kube, api: ApiClient) -> None:
    async with own_nodes(api, kube, "a", "b") as nodes:
        await kube.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "trainer"}})
        body = elastic_job("byo", nodes, workers=2, min_replicas=1)
        body["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["serviceAccountName"] = "trainer"
        await start_job(kube, body, nodes)
        assert await kube.get("v1", "ServiceAccount", "byo-launcher") is None
        binding = await kube.get("rbac.authorization.k8s.io/v1", "RoleBinding", "byo-launcher")
        assert binding is not None
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "trainer", "namespace": kube.ns}]
        trainer = await kube.get("v1", "ServiceAccount", "trainer")
        assert trainer is not None and not trainer["metadata"].get("ownerReferences")
        async with launcher(kube, "byo") as seat:
            run = await seat.run()
            assert run.returncode == 0 and "source: API" in run.stderr, dumps(run)

        filed = elastic_job("filed", nodes, workers=2, min_replicas=1, hostDiscovery="File")
        await start_job(kube, filed, nodes, source="file (pod annotation)")
        for kind in ("ServiceAccount", "Role", "RoleBinding"):
            api_version = "v1" if kind == "ServiceAccount" else "rbac.authorization.k8s.io/v1"
            assert await kube.get(api_version, kind, "filed-launcher") is None, kind
        async with launcher(kube, "filed") as seat:
            run = await seat.run()
            assert run.returncode == 0, dumps(run)
            assert "source: file (pod annotation)" in run.stderr, dumps(run)
            assert "discover_hosts.sh: using" not in run.stderr  # file only is not a fallback worth a warning


async def test_a_foreign_service_account_with_the_launchers_name_is_never_adopted(kube: Kube, api: ApiClient) -> None:
    async with own_nodes(api, kube, "a", "b") as nodes:
        foreign = await kube.create(
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "taken-launcher"}}
        )
        await kube.create(elastic_job("taken", nodes, workers=2, min_replicas=1))

        async def conflict() -> bool:
            job = await kube.job("taken")
            cond = next(
                (x for x in (job.get("status") or {}).get("conditions") or [] if x["type"] == "ResourceConflict"), None
            )
            return cond is not None and cond["status"] == "True" and "ServiceAccount taken-launcher" in cond["message"]

        await eventually(conflict, within=60, what="ResourceConflict naming the ServiceAccount")
        await asyncio.sleep(1.0)
        assert await kube.get("batch/v1", "Job", "taken-launcher") is None
        # Nothing is granted to a ServiceAccount that is not the job's.
        assert await kube.get("rbac.authorization.k8s.io/v1", "RoleBinding", "taken-launcher") is None
        still = await kube.get("v1", "ServiceAccount", "taken-launcher")
        assert still is not None and still["metadata"]["uid"] == foreign["metadata"]["uid"]
        assert not still["metadata"].get("ownerReferences")

        # Once it is gone, the job gets its own and starts.
        await kube.delete("v1", "ServiceAccount", "taken-launcher")

        async def started() -> bool:
            job = await kube.job("taken")
            return await kube.get("batch/v1", "Job", "taken-launcher") is not None and not has_condition(
                job, "ResourceConflict"
            )

        await eventually(started, within=60, what="the launcher created after the conflict resolved")
        account = await kube.get("v1", "ServiceAccount", "taken-launcher")
        assert account is not None and account["metadata"]["ownerReferences"][0]["name"] == "taken"
