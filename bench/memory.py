"""Benchmark: the operator's memory with N elastic jobs x 8 workers cached, without a testbed (issue 20, "RSS
<= 150 MiB with 10,000 worker pods cached").

What it builds is the operator's own: the controller, cache, informers, executor and metrics of
`mpijob.app.operator.run`, fed through the informers' real paths (a paged list decoded from JSON bytes
and slimmed, then one watch event per object read from a byte stream, as the API server sends them, then the
periodic relist of every kind with the store full), then one reconcile of every job (the planner on the cache;
expectations and metric stamps as a reconcile leaves them). The heap is kept as the operator keeps it
(runtime/heap.py: fixed malloc thresholds, a trim after each list and once the reconciles are done);
`--heap none|mallopt|trim` leaves out both or one part, to see what each gives.
Only the API server is a stand-in, answering the lists and watches from files of bodies (written first, by
another process, so that the measured one builds nothing of its own) made as the operator makes them: one
elastic job (examples/elastic-horovod.yaml at 8 workers) settled by the planner against the unit tests'
in-memory world (tests/unit/world.py: the planner's own pods, ConfigMap, launcher Job, Service, PDB, RBAC,
status), given what the API server and the kubelet add (uids, managedFields, defaulted pod specs, pod status
with five conditions and container statuses, the launcher pod, kubectl's last-applied annotation), then
copied N times with its names, uids and addresses changed. Workers of every job are spread over 8 nodes, as
bench/scale.py does.
Any write a reconcile attempts is refused and counted: the bodies are steady jobs, so a realistic body set
plans none (the count is reported).

Each N runs in a fresh process (RSS is a high-water mark of the heap). Reported per N: VmRSS after the
imports, after the list, after the watch events, after the relist and after the reconciles (gc'd), per worker
pod; and, with --trace, tracemalloc's largest allocation sites and the deep size of each structure the operator
keeps (cache stores, pod indexes, fingerprints, expectations, metric stamps).

    .venv/bin/python bench/memory.py                  # N = 250 and 1250 (10,000 worker pods)
    .venv/bin/python bench/memory.py --jobs 1250 --trace
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import json
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORKERS = 8
NAMESPACE = "bench"
TEMPLATE_JOB = "bench-00000"


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


# -- the bodies --------------------------------------------------------------------------------------------


def _managed(manager: str, operation: str, fields: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "manager": manager,
        "operation": operation,
        "apiVersion": "v1",
        "time": "2026-03-01T12:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    if subresource:
        entry["subresource"] = subresource
    return entry


def _fields_of(obj: Any) -> Any:
    """A FieldsV1-like tree of an object's keys (what managedFields records, about as large)."""
    if isinstance(obj, dict):
        return {f"f:{k}": _fields_of(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return {f'k:{{"name":"{i}"}}': _fields_of(v) for i, v in enumerate(obj)} if obj else {}
    return {}


_TIME = "2026-03-01T12:00:00Z"


def _pod_spec_defaults(spec: dict[str, Any], node: str) -> None:
    """What the API server and admission add to a pod's spec (a kube-api-access volume, defaults)."""
    spec.update(
        {
            "nodeName": node,
            "dnsPolicy": spec.get("dnsPolicy", "ClusterFirst"),
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "restartPolicy": spec.get("restartPolicy", "Always"),
            "schedulerName": "default-scheduler",
            "securityContext": {},
            "serviceAccount": spec.get("serviceAccountName", "default"),
            "serviceAccountName": spec.get("serviceAccountName", "default"),
            "terminationGracePeriodSeconds": spec.get("terminationGracePeriodSeconds", 30),
            "tolerations": [
                {"effect": "NoExecute", "key": f"node.kubernetes.io/{k}", "operator": "Exists", "tolerationSeconds": t}
                for k, t in (("not-ready", 300), ("unreachable", 300))
            ],
        }
    )
    spec.setdefault("volumes", []).append(
        {
            "name": "kube-api-access-x7k2p",
            "projected": {
                "defaultMode": 420,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
                    {
                        "downwardAPI": {
                            "items": [
                                {
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                    "path": "namespace",
                                }
                            ]
                        }
                    },
                ],
            },
        }
    )
    for container in spec.get("containers") or []:
        container.setdefault("imagePullPolicy", "IfNotPresent")
        container.setdefault("resources", {})
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("volumeMounts", []).append(
            {
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                "name": "kube-api-access-x7k2p",
                "readOnly": True,
            }
        )


def _pod_status(pod: dict[str, Any], host_ip: str) -> None:
    """The kubelet's status of a running, ready pod (the world's pod IP kept)."""
    ip = (pod.get("status") or {}).get("podIP")
    kinds = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
    pod["status"] = {
        "phase": "Running",
        "conditions": [
            {"lastProbeTime": None, "lastTransitionTime": _TIME, "status": "True", "type": t} for t in kinds
        ],
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "qosClass": "BestEffort",
        "startTime": _TIME,
        "containerStatuses": [
            {
                "containerID": "containerd://" + "0f" * 32,
                "image": str(c.get("image")),
                "imageID": "docker.io/" + str(c.get("image")) + "@sha256:" + "ab" * 32,
                "lastState": {},
                "name": str(c.get("name")),
                "ready": True,
                "restartCount": 0,
                "started": True,
                "state": {"running": {"startedAt": _TIME}},
                "volumeMounts": [
                    {
                        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                        "name": "kube-api-access-x7k2p",
                        "readOnly": True,
                        "recursiveReadOnly": "Disabled",
                    }
                ],
            }
            for c in pod["spec"].get("containers") or []
        ],
    }


def _served(obj: dict[str, Any], creator: str) -> dict[str, Any]:
    """The object as the API server serves it: managedFields of its writers, defaults, a status."""
    obj = copy.deepcopy(obj)
    kind = obj["kind"]
    if kind == "Pod":
        node = obj["spec"].get("nodeName") or "launcher-node"
        _pod_spec_defaults(obj["spec"], node)
        _pod_status(obj, "172.18.0." + node.rsplit("-", 1)[-1].replace("node", "9"))
    managed = [_managed(creator, "Update", _fields_of({k: v for k, v in obj.items() if k not in ("status",)}))]
    if "status" in obj:
        status_writer = {"Pod": "kubelet", "Job": "kube-controller-manager", "MPIJob": "mpijob-operator"}
        managed.append(_managed(status_writer.get(kind, creator), "Update", _fields_of(obj["status"]), "status"))
    obj["metadata"]["managedFields"] = managed
    if kind == "MPIJob":
        obj["metadata"]["generation"] = 1
        obj["metadata"]["annotations"] = {
            "kubectl.kubernetes.io/last-applied-configuration": json.dumps(
                {k: obj[k] for k in ("apiVersion", "kind", "spec")}
            )
        }
    return obj


def template_job() -> tuple[list[dict[str, Any]], list[str]]:
    """One steady elastic job of WORKERS workers as the planner made it (settled in the unit tests' world),
    with what the API server adds, and the names of the nodes its workers run on."""
    import yaml
    from tests.unit.world import World

    nodes = [f"node-{k}" for k in range(WORKERS)]
    docs = yaml.safe_load_all((ROOT / "examples/elastic-horovod.yaml").read_text())
    job = next(d for d in docs if d["kind"] == "MPIJob")
    job["metadata"]["name"] = TEMPLATE_JOB
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = WORKERS
    world = World(namespace=NAMESPACE, placement=nodes)
    world.add_nodes(*nodes)
    world.add(job)
    world.settle(TEMPLATE_JOB)
    launcher_pod = world.start_launcher(TEMPLATE_JOB)
    launcher_pod["metadata"]["labels"]["training.kubeflow.org/operator-name"] = "mpi-operator"
    launcher_pod["spec"] = copy.deepcopy(world.get("Job", f"{TEMPLATE_JOB}-launcher")["spec"]["template"]["spec"])
    launcher_pod["spec"]["nodeName"] = "launcher-node"
    launcher_pod["status"] = {"phase": "Running", "podIP": "10.1.255.254"}
    world.settle(TEMPLATE_JOB)
    launcher = world.get("Job", f"{TEMPLATE_JOB}-launcher")
    launcher["status"] = {"active": 1, "ready": 1, "startTime": _TIME, "terminating": 0, "uncountedTerminatedPods": {}}
    creators = {"MPIJob": "kubectl-client-side-apply", "Pod": "mpijob-operator"}
    objects = [
        _served(obj, creators.get(kind, "mpijob-operator"))
        for (kind, _), obj in sorted(world.objects.items())
        if kind != "Secret"  # not watched
    ]
    for obj in objects:
        if obj["kind"] == "Pod" and obj["metadata"]["name"].startswith(f"{TEMPLATE_JOB}-launcher"):
            obj["metadata"]["managedFields"][0]["manager"] = "kube-controller-manager"
    return objects, nodes


class Bodies:
    """N copies of the template job, made one at a time as JSON text (the bench keeps none of them)."""

    def __init__(self, jobs: int) -> None:
        objects, self.nodes = template_job()
        self.jobs = jobs
        uids = sorted({str(o["metadata"]["uid"]) for o in objects} | self._refs(objects))
        text = json.dumps(objects)
        # Longest first: no uid is replaced inside a longer one (the script names the job's uid too).
        for n, uid in enumerate(sorted(uids, key=len, reverse=True)):
            # A real uid's shape (36 characters), unique per job: @IDX@ is the job's index.
            text = text.replace(uid, f"{n:08x}-0000-4000-8000-@IDX@")
        self.text = text.replace(TEMPLATE_JOB, "bench-@JOB@").replace("10.0.", "10.@NET@.")

    @staticmethod
    def _refs(objects: list[dict[str, Any]]) -> set[str]:
        return {str(r["uid"]) for o in objects for r in o["metadata"].get("ownerReferences") or []} | {
            str((o.get("status") or {}).get("sshSecretUID")) for o in objects if o["kind"] == "MPIJob"
        }

    def job(self, i: int) -> list[dict[str, Any]]:
        """The i-th copy: its own names, uids, addresses and resourceVersions."""
        text = self.text.replace("@IDX@", f"{i:012d}").replace("@JOB@", f"{i:05d}").replace("@NET@", str(i % 250))
        objects: list[dict[str, Any]] = json.loads(text)
        for n, obj in enumerate(objects):
            obj["metadata"]["resourceVersion"] = str(1000 + i * 100 + n)
        return objects

    def nodes_encoded(self) -> list[bytes]:
        import orjson

        return [
            orjson.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": name, "uid": f"node-uid-{name}", "resourceVersion": "7", "labels": {}},
                    "spec": {},
                    "status": {"conditions": [{"type": "Ready", "status": "True"}]},
                }
            )
            for name in [*self.nodes, "launcher-node"]
        ]

    def write(self, where: Path, page: int) -> None:
        """Per kind, the list pages (`KIND.START`), the watch stream (`KIND.events`: one MODIFIED event per
        object, its resourceVersion moved) and the relist's pages (`KIND.relist.START`: the objects as the
        events left them), encoded as the API server sends them. Written before the measured process
        starts, so that it decodes what it reads and builds nothing else."""
        import orjson

        encoded: dict[str, list[bytes]] = {"Node": self.nodes_encoded()}
        for i in range(self.jobs):
            for obj in self.job(i):
                encoded.setdefault(obj["kind"], []).append(orjson.dumps(obj))
        where.mkdir(parents=True, exist_ok=True)
        for kind, items in encoded.items():
            _pages(where / kind, items, page, "900000")
            rv = b'"resourceVersion":"'
            moved = [body.replace(rv, rv + f"{n}9".encode(), 1) for n, body in enumerate(items)]
            with (where / f"{kind}.events").open("wb") as events:
                for body in moved:
                    events.write(b'{"type":"MODIFIED","object":' + body + b"}\n")
            # The periodic relist's pages: the objects as the watch events left them (nothing changed since).
            _pages(where / f"{kind}.relist", moved, page, "900001")


def _pages(stem: Path, items: list[bytes], page: int, rv: str) -> None:
    """`STEM.START`: the list page from item START, with the next page's start as its continue token."""
    kind = stem.name.split(".")[0]
    for start in range(0, len(items), page):
        more = start + page < len(items)
        meta = f'{{"resourceVersion":"{rv}"' + (f',"continue":"{start + page}"' if more else "") + "}"
        head = f'{{"kind":"{kind}List","apiVersion":"v1","metadata":{meta},"items":['.encode()
        stem.with_name(f"{stem.name}.{start}").write_bytes(head + b",".join(items[start : start + page]) + b"]}")


class Stream:
    """A watch response's content (what Informer._read reads): the file, in chunks as a socket gives them."""

    def __init__(self, path: Path) -> None:
        self.file = path.open("rb") if path.exists() else None

    async def readany(self) -> bytes:
        return self.file.read(65536) if self.file is not None else b""


class ApiStandIn:
    """The informers' and the executor's client: lists answered from the written pages, every write refused."""

    def __init__(self, where: Path) -> None:
        self.where = where
        self.writes: list[tuple[str, str]] = []
        self.requests = 0
        # Set for the periodic relist: the pages as the watch events left the objects.
        self.relist = False

    @staticmethod
    def kind(path: str) -> str:
        from mpijob.runtime.kinds import watched

        return next(w.kind for w in watched() if w.path == path)

    async def request(self, method: str, path: str, query: Any = None, **_: Any) -> Any:
        from mpijob.api.jsoncodec import loads
        from mpijob.runtime.informer import PAGE

        self.requests += 1
        if method != "GET":
            return await self._refuse(method, path)
        asked = dict(query or [])
        assert int(asked.get("limit") or 0) == PAGE, "pages written for another page size"
        stem = f"{self.kind(path)}.relist" if self.relist else self.kind(path)
        page = self.where / f"{stem}.{asked.get('continue') or 0}"
        return loads(page.read_bytes() if page.exists() else b'{"metadata":{"resourceVersion":"1"},"items":[]}')

    async def _refuse(self, method: str, path: str) -> Any:
        from mpijob.kube.client import ApiError

        self.writes.append((method, path))
        raise ApiError(503, "bench", "the memory bench refuses writes")

    async def get(self, path: str) -> Any:
        return await self.request("GET", path)

    async def create(self, path: str, obj: Any, **_: Any) -> Any:
        return await self._refuse("POST", path)

    async def merge_patch(self, path: str, patch: Any, **_: Any) -> Any:
        return await self._refuse("PATCH", path)

    async def delete(self, path: str, options: Any = None, **_: Any) -> Any:
        return await self._refuse("DELETE", path)


# -- one run -----------------------------------------------------------------------------------------------


async def _fill(where: Path, phases: dict[str, int], heap_mode: str) -> dict[str, Any]:
    from datetime import UTC, datetime

    from prometheus_client import generate_latest

    from mpijob.app.metrics import Metrics
    from mpijob.executor.apply import Executor
    from mpijob.planner.snapshot import OperatorConfig
    from mpijob.runtime import heap, informer
    from mpijob.runtime.controller import Controller

    api = ApiStandIn(where)
    config = OperatorConfig()
    metrics = Metrics()
    executor = Executor(api)  # type: ignore[arg-type]
    # The world's clock: the bodies' times are its "now", so the jobs are steady at it.
    now = datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC)
    controller = Controller(executor, config, clock=lambda: now, observer=metrics)
    metrics.attach(controller)
    metrics.register(controller, config)
    controller.leading.set()
    # The heap as app/operator.py:run keeps it (--heap: without either part, to see what each gives).
    if heap_mode in ("both", "mallopt"):
        heap.configure()
    trimmer = heap.Trimmer(trim=heap.malloc_trim if heap_mode in ("both", "trim") else lambda: None)
    # As app/operator.py:run wires them.
    watches = informer.informers(
        controller.kinds,
        api,  # type: ignore[arg-type]
        controller,
        [],
        cached=controller.cache.get,
        on_listed=trimmer.listed,
    )
    for i in watches:
        await i._list()
        phases[f"list {i.watched.kind}"] = rss_kib()
    await controller.warm_up(watches)
    gc.collect()
    phases["listed"] = rss_kib()
    for i in watches:
        await i._read(Stream(where / f"{i.watched.kind}.events"))  # type: ignore[arg-type]
    gc.collect()
    phases["watched"] = rss_kib()
    # The periodic relist (informer.RELIST, every ~5 min): every store listed again while it is full.
    api.relist = True
    for i in watches:
        await i._list()
    gc.collect()
    phases["relisted"] = rss_kib()
    outcomes: dict[str, int] = {}
    for key in controller.cache.mpijob_keys():
        try:
            result = await controller.reconcile(key)
            asked = result.requeue_after is not None or result.backoff or result.clear_stall
            outcomes["requeue" if asked else "done"] = outcomes.get("requeue" if asked else "done", 0) + 1
        except Exception as err:  # a refused write
            outcomes[type(err).__name__] = outcomes.get(type(err).__name__, 0) + 1
    generate_latest(metrics.registry)  # a scrape: the collectors walk the cache
    # The reconciles ran outside the work queue: what it does once idle after them.
    trimmer.idle(sum(outcomes.values()))
    gc.collect()
    phases["reconciled"] = rss_kib()
    return {"controller": controller, "metrics": metrics, "api": api, "outcomes": outcomes}


def _deep_size(root: Any, seen: set[int]) -> int:
    """Bytes of every object reachable from root not counted yet (shared strings count once, first)."""
    total = 0
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, type | types.FunctionType | types.MethodType | types.ModuleType):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, list | tuple | set | frozenset):
            stack.extend(obj)
    return total


def structures(state: dict[str, Any]) -> dict[str, int]:
    """Deep size of what the operator keeps, per structure."""
    controller = state["controller"]
    cache = controller.cache
    seen: set[int] = set()
    out = {f"cache {name}": _deep_size(store, seen) for name, store in cache.indexes.items()}
    out["cache pod refs (owner, node)"] = sum(_deep_size(getattr(cache, a), seen) for a in ("_by_owner", "_by_node"))
    out["fingerprints"] = _deep_size(controller.fingerprints, seen)
    # Per job: expectations, spin guard, backoff and the metrics' stamps (runtime/record.py).
    out["job records"] = _deep_size(list(controller.records), seen)
    out["metrics stamps (nodes)"] = _deep_size(vars(state["metrics"].stamps), seen)
    out["work queue"] = _deep_size(vars(controller.queue), seen)
    return out


def run_one(jobs: int, trace: bool, page: int, where: Path, heap_mode: str = "both") -> dict[str, Any]:
    phases: dict[str, int] = {"python": rss_kib()}
    import mpijob.cli.operator  # noqa: F401  (what `mpijob operator` imports)
    from mpijob.runtime import informer

    informer.PAGE = page

    phases["imports"] = rss_kib()
    if trace:
        import tracemalloc

        tracemalloc.start(4)
    started = time.perf_counter()
    state = asyncio.run(_fill(where, phases, heap_mode))
    result: dict[str, Any] = {
        "jobs": jobs,
        "page": informer.PAGE,
        "heap": heap_mode,
        "worker_pods": sum(
            1
            for p in state["controller"].cache.indexes["pods"].values()
            if (p["metadata"].get("labels") or {}).get("training.kubeflow.org/job-role") == "worker"
        ),
        "rss_kib": phases,
        "reconciles": state["outcomes"],
        "writes_attempted": len(state["api"].writes),
        "seconds": round(time.perf_counter() - started, 1),
    }
    if trace:
        import tracemalloc

        snapshot = tracemalloc.take_snapshot()
        result["traced_kib"] = sum(s.size for s in snapshot.statistics("filename")) // 1024
        result["sites"] = [
            (s.size // 1024, s.count, " <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in s.traceback))
            for s in snapshot.statistics("traceback")[:15]
        ]
        result["structures_kib"] = {k: v // 1024 for k, v in structures(state).items()}
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, nargs="*", default=[250, 1250])
    parser.add_argument("--trace", action="store_true", help="tracemalloc sites and structure sizes (slower)")
    parser.add_argument("--page", type=int, help="list page size (default: the informer's)")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/mpijob-memory-bench"), help="where bodies are written")
    parser.add_argument(
        "--heap",
        choices=("both", "mallopt", "trim", "none"),
        default="both",
        help="the operator's heap settings (runtime/heap.py): both (as it runs), one of them, or none",
    )
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.page is None:
        from mpijob.runtime.informer import PAGE

        args.page = PAGE
    if args.one:
        print(json.dumps(run_one(args.jobs[0], args.trace, args.page, args.dir, args.heap)))
        return 0
    for jobs in args.jobs:
        where = args.dir / f"{jobs}x{WORKERS}-page{args.page}"
        if not (where / "Pod.relist.0").exists():
            Bodies(jobs).write(where, args.page)
        cmd = [sys.executable, __file__, "--one", "--jobs", str(jobs), "--page", str(args.page), "--dir", str(where)]
        cmd += ["--heap", args.heap]
        out = json.loads(
            subprocess.run(cmd + (["--trace"] if args.trace else []), check=True, capture_output=True, text=True).stdout
        )
        report(out)
    return 0


def report(out: dict[str, Any]) -> None:
    rss = out["rss_kib"]
    pods = out["worker_pods"]
    print(
        f"## {out['jobs']} jobs x {WORKERS} workers: {pods} worker pods cached (list pages of {out['page']}, "
        f"heap: {out['heap']})"
    )
    for phase, kib in rss.items():
        print(f"  VmRSS {phase:<24} {kib / 1024:7.1f} MiB")
    cached = rss["reconciled"] - rss["imports"]
    print(f"  above the imports: {cached / 1024:.1f} MiB, {cached / max(pods, 1):.2f} KiB per worker pod")
    print(f"  reconciles: {out['reconciles']}; writes attempted: {out['writes_attempted']}")
    if "sites" in out:
        print(f"  traced (tracemalloc) {out['traced_kib'] / 1024:.1f} MiB; largest sites (KiB, blocks):")
        for size, count, where in out["sites"]:
            print(f"    {size:8d} {count:8d}  {where}")
        print("  what the operator keeps (deep size, KiB; a shared object counts once, in the first row):")
        for name, kib in out["structures_kib"].items():
            print(f"    {kib:8d}  {name}")


if __name__ == "__main__":
    sys.exit(main())
