"""The informer's protocol with a scripted API server (the real one: tests/integration/test_informer.py): a
list replaces the store, watches resume from the last resourceVersion (bookmarks included), 410 Gone relists,
a silent watch is restarted, errors back off with jitter; and the controller's side: fingerprints, indexes,
the warm gate."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from mpijob.executor.apply import Executor
from mpijob.kube.client import ApiError
from mpijob.planner.snapshot import OperatorConfig
from mpijob.runtime import informer as informer_module
from mpijob.runtime.controller import Controller
from mpijob.runtime.informer import BUSY_RECHECK, Backoff, Informer, informers
from mpijob.runtime.kinds import BY_KIND

from .builders import mpijob, worker
from .fakes import RecordingClient

PODS = BY_KIND["Pod"]
NODES = BY_KIND["Node"]
Obj = dict[str, Any]


def _obj(name: str, rv: int, ns: str = "ns", **meta: Any) -> Obj:
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "resourceVersion": str(rv), **meta}}


def _line(type: str, obj: Obj) -> bytes:
    return orjson.dumps({"type": type, "object": obj}) + b"\n"


class _Content:
    def __init__(self, chunks: list[bytes], hang: bool) -> None:
        self.chunks = chunks
        self.hang = hang

    async def readany(self) -> bytes:
        if self.chunks:
            return self.chunks.pop(0)
        if self.hang:
            await asyncio.Event().wait()
        return b""


class _Response:
    def __init__(self, status: int, chunks: list[bytes], hang: bool = False) -> None:
        self.status = status
        self.reason = "scripted"
        self.content = _Content(chunks, hang)

    async def read(self) -> bytes:
        return b"{}"

    def release(self) -> None:
        pass


class Server:
    """Answers lists from `lists` (one list per call, or an ApiError) and watches from `watches`; once the
    script is out, a watch hangs, and `done` is set."""

    def __init__(self, lists: list[Any], watches: list[_Response]) -> None:
        self.lists = lists
        self.watches = watches
        self.watch_queries: list[dict[str, str]] = []
        self.done = asyncio.Event()

    async def request(self, method: str, path: str, query: Any = None, **_: Any) -> Any:
        answer = self.lists.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def stream(self, path: str, query: list[tuple[str, str]]) -> _Response:
        self.watch_queries.append(dict(query))
        if self.watches:
            return self.watches.pop(0)
        self.done.set()
        return _Response(200, [], hang=True)


class Sink:
    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []

    def replaced(self, watched: Any, namespace: str | None, items: dict[Any, Obj]) -> None:
        self.log.append(("LIST", ",".join(sorted(k[1] for k in items))))

    def observed(self, watched: Any, type: str, obj: Obj) -> None:
        self.log.append((type, obj["metadata"]["name"]))


def _list(rv: int, *items: Obj) -> Obj:
    return {"metadata": {"resourceVersion": str(rv)}, "items": list(items)}


def _run(server: Server, sink: Any, **settings: Any) -> Informer:
    informer = Informer(PODS, "/api/v1/pods", server, sink, backoff=Backoff(rand=lambda a, b: 0.0), **settings)  # type: ignore[arg-type]

    async def go() -> None:
        task = asyncio.create_task(informer.run())
        await asyncio.wait_for(server.done.wait(), 5)
        task.cancel()

    asyncio.run(go())
    return informer


def test_watches_resume_from_the_last_event_or_bookmark_and_lines_may_span_chunks() -> None:
    event = _line("ADDED", _obj("b", 12))
    server = Server(
        [_list(10, _obj("a", 9))],
        [
            _Response(200, [event[:7], event[7:], _line("BOOKMARK", {"metadata": {"resourceVersion": "15"}})]),
            _Response(200, [_line("MODIFIED", _obj("b", 17))]),
        ],
    )
    sink = Sink()
    informer = _run(server, sink)

    assert sink.log == [("LIST", "a"), ("ADDED", "b"), ("MODIFIED", "b")]
    assert [q["resourceVersion"] for q in server.watch_queries] == ["10", "15", "17"]
    assert all(q["allowWatchBookmarks"] == "true" for q in server.watch_queries)
    assert informer.counters.lists == 1 and informer.counters.bookmarks == 1


@pytest.mark.parametrize("how", ["http", "event"])
def test_410_gone_relists(how: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mpijob.informer")
    gone = (
        _Response(410, [])
        if how == "http"
        else _Response(200, [_line("ERROR", {"kind": "Status", "code": 410, "reason": "Expired"})])
    )
    server = Server([_list(10, _obj("a", 9), _obj("b", 9)), _list(30, _obj("b", 9), _obj("c", 25))], [gone])
    sink = Sink()
    informer = _run(server, sink)

    assert sink.log == [("LIST", "a,b"), ("LIST", "b,c")]
    assert [q["resourceVersion"] for q in server.watch_queries] == ["10", "30"]
    assert informer.counters.gone == 1
    # Each list is logged with why it ran and what it held, so a burst's profile can be read against it.
    lists = [r.getMessage() for r in caplog.records if r.name == "mpijob.informer" and " objects, " in r.getMessage()]
    assert [m.split(":")[0] for m in lists] == ["first list Pod", "relist after 410 Pod"]
    assert lists[1].startswith("relist after 410 Pod: 2 objects, 1 pages, ")


def test_a_watch_silent_past_the_stall_bound_is_restarted_from_its_resource_version() -> None:
    server = Server([_list(10)], [_Response(200, [_line("ADDED", _obj("a", 11))], hang=True)])
    informer = _run(server, Sink(), stall=0.05)

    assert informer.counters.stalls == 1 and informer.counters.lists == 1
    assert [q["resourceVersion"] for q in server.watch_queries] == ["10", "11"]


def test_a_kind_not_served_yet_is_listed_again_until_it_is() -> None:
    not_served = ApiError(404, "Not Found", "the server could not find the requested resource")
    server = Server([not_served, not_served, _list(5, _obj("a", 4))], [])
    sink = Sink()
    informer = _run(server, sink)

    assert sink.log == [("LIST", "a")] and informer.listed.is_set()
    assert informer.counters.errors == 2


def test_backoff_doubles_to_its_cap_with_jitter_and_resets() -> None:
    picks: list[tuple[float, float]] = []

    def rand(a: float, b: float) -> float:
        picks.append((a, b))
        return b

    backoff = Backoff(base=1.0, most=8.0, rand=rand)
    delays = [backoff.next() for _ in range(6)]
    backoff.reset()

    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert all(a == b / 2 for a, b in picks)  # jittered over the upper half
    assert backoff.next() == 1.0


def test_one_informer_per_namespace_for_namespaced_kinds_and_one_for_nodes() -> None:
    made = informers((PODS, NODES), RecordingClient(), Sink(), ["a", "b"])  # type: ignore[arg-type]

    assert [i.path for i in made] == ["/api/v1/namespaces/a/pods", "/api/v1/namespaces/b/pods", "/api/v1/nodes"]


# -- the controller as the informers' sink ----------------------------------------------------------------


def _controller() -> Controller:
    return Controller(Executor(RecordingClient()), OperatorConfig())  # type: ignore[arg-type]


def _queued(controller: Controller) -> set[Any]:
    return set(controller.queue.take_pending())


def _edit(obj: Obj, change: Callable[[Obj], None]) -> Obj:
    copy = orjson.loads(orjson.dumps(obj))
    change(copy)
    copy["metadata"]["resourceVersion"] = str(int(copy["metadata"].get("resourceVersion") or 0) + 1)
    return copy


def test_a_pod_event_that_changes_nothing_the_planner_reads_enqueues_nothing() -> None:
    controller = _controller()
    job = mpijob()
    pod = PODS.slim(worker(job, 0, node="node-1"))
    key = (pod["metadata"]["namespace"], "pi")
    controller.observed(PODS, "ADDED", pod)
    assert _queued(controller) == {key}
    # A new resourceVersion, nothing else: what a status write of a field we do not read looks like here.
    controller.observed(PODS, "MODIFIED", _edit(pod, lambda p: None))
    assert _queued(controller) == set() and controller.stats.events_ignored == 1
    controller.observed(PODS, "MODIFIED", _edit(pod, lambda p: p["status"].update(phase="Failed")))
    assert _queued(controller) == {key}


def test_a_node_event_wakes_the_jobs_with_pods_on_it_once_the_cache_is_warm() -> None:
    controller = _controller()
    job = mpijob()
    pod = PODS.slim(worker(job, 0, node="node-1"))
    node = {"metadata": {"name": "node-1", "uid": "n1", "resourceVersion": "1"}, "spec": {}}
    controller.observed(PODS, "ADDED", pod)
    _queued(controller)
    controller.observed(NODES, "ADDED", node)
    assert _queued(controller) == set()  # not warm: every job gets one look at warm-up anyway
    controller.cache.ready = True
    controller.observed(NODES, "MODIFIED", _edit(node, lambda n: n["spec"].update(unschedulable=True)))
    assert _queued(controller) == {(pod["metadata"]["namespace"], "pi")}
    # A heartbeat (nothing the planner reads) wakes nobody.
    controller.observed(NODES, "MODIFIED", _edit(node, lambda n: n["spec"].update(unschedulable=True)))
    assert _queued(controller) == set()


def test_a_relist_delivers_what_vanished_as_a_deletion_and_drops_it_from_the_pod_indexes() -> None:
    controller = _controller()
    job = mpijob()
    ns = job["metadata"]["namespace"]
    pods = [PODS.slim(worker(job, i, node="node-1")) for i in range(2)]
    controller.replaced(PODS, None, {(ns, p["metadata"]["name"]): p for p in pods})
    assert controller.stats.ghosts == 0  # the first list is not a relist
    assert controller.cache.jobs_on_node("node-1") == [(ns, "pi")]
    _queued(controller)

    controller.replaced(PODS, None, {(ns, pods[0]["metadata"]["name"]): pods[0]})

    assert controller.cache.pod(ns, pods[1]["metadata"]["name"]) is None
    assert controller.stats.ghosts == 1 and _queued(controller) == {(ns, "pi")}
    owned = controller.cache._owned_pods(job["metadata"]["uid"], ns)
    assert [p["metadata"]["name"] for p in owned] == [pods[0]["metadata"]["name"]]


def test_no_reconcile_before_every_informer_has_listed() -> None:
    async def go() -> list[bool]:
        controller = _controller()
        made = informers((PODS, NODES), RecordingClient(), controller, [])  # type: ignore[arg-type]
        gate = asyncio.create_task(controller.warm_up(made))
        made[0].listed.set()
        await asyncio.sleep(0)
        states = [controller.warm.is_set()]
        made[1].listed.set()
        await asyncio.wait_for(gate, 1)
        return [*states, controller.warm.is_set(), controller.cache.ready]

    assert asyncio.run(go()) == [False, True, True]


def test_a_listed_object_has_the_kind_and_api_version_a_watch_event_would_give_it() -> None:
    kept: list[Obj] = []

    class Keep(Sink):
        def replaced(self, watched: Any, namespace: str | None, items: dict[Any, Obj]) -> None:
            kept.extend(items.values())

    page = {"kind": "MPIJobList", "apiVersion": "kubeflow.org/v2beta1", **_list(3, _obj("pi", 2))}
    server = Server([page], [])
    informer = Informer(BY_KIND["MPIJob"], "/apis/kubeflow.org/v2beta1/mpijobs", server, Keep())  # type: ignore[arg-type]

    async def go() -> None:
        task = asyncio.create_task(informer.run())
        await asyncio.wait_for(server.done.wait(), 5)
        task.cancel()

    asyncio.run(go())
    assert [(o["kind"], o["apiVersion"]) for o in kept] == [("MPIJob", "kubeflow.org/v2beta1")]


def _due_informer(busy: bool | None) -> Informer:
    informer = Informer(PODS, "/api/v1/pods", None, Sink(), relist=300.0)  # type: ignore[arg-type]
    informer.resource_version, informer.relist_at = "10", 1000.0
    if busy is not None:
        informer.busy = lambda: busy
    return informer


def test_a_periodic_relist_due_in_a_burst_waits_for_the_controller_to_be_idle_at_most_one_more_period() -> None:
    idle, busy, unwired = _due_informer(False), _due_informer(True), _due_informer(None)

    assert idle.until_list(900.0) == busy.until_list(900.0) == 100.0  # not due yet: the same for all
    assert idle.until_list(1000.0) <= 0 and unwired.until_list(1000.0) <= 0
    assert busy.until_list(1000.0) == BUSY_RECHECK  # due in a burst: looked at again soon, watching meanwhile
    assert busy.until_list(1290.0) == 10.0  # never past one more period
    assert busy.until_list(1300.0) <= 0
    busy.resource_version = None
    assert busy.until_list(900.0) <= 0  # a first list or a 410's relist never waits


def _paged(informer: Informer, busy: Callable[[], bool], pages: int = 3) -> list[float]:
    """Runs one list of `pages` pages; returns the loop time of each page request."""
    asked: list[float] = []

    class Pages:
        async def request(self, method: str, path: str, query: Any = None, **_: Any) -> Any:
            asked.append(asyncio.get_running_loop().time())
            n = len(asked)
            more = {"continue": f"t{n}"} if n < pages else {}
            return {"metadata": {"resourceVersion": "10", **more}, "items": [_obj(f"p{n}", 9)]}

    informer.client = Pages()  # type: ignore[assignment]
    informer.busy = busy
    asyncio.run(informer._list())
    return asked


def test_a_periodic_relist_pauses_between_pages_while_a_burst_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A burst that comes after a relist started (a mass scale-in met a 46 s pod relist at 2,000 x 8) gets the
    CPU: the relist waits between two pages until the controller is idle."""
    monkeypatch.setattr(informer_module, "PAGE_RECHECK", 0.01)
    checks = iter([True] * 5 + [False] * 100)
    relisting = Informer(PODS, "/api/v1/pods", None, Sink())  # type: ignore[arg-type]
    relisting.listed.set()
    relisting.resource_version = "5"  # a periodic relist: listed before, resourceVersion kept
    asked = _paged(relisting, lambda: next(checks))
    assert len(asked) == 3
    assert asked[1] - asked[0] >= 0.04, "waited out the burst before the second page"


def test_a_first_list_or_a_relist_after_410_never_pauses_and_a_relist_pauses_at_most_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(informer_module, "PAGE_RECHECK", 0.01)
    monkeypatch.setattr(informer_module, "PAGE_WAIT", 0.05)
    first = Informer(PODS, "/api/v1/pods", None, Sink())  # type: ignore[arg-type]
    asked = _paged(first, lambda: True)
    assert asked[-1] - asked[0] < 0.04, "the controller waits for a first list: it never pauses"
    after_gone = Informer(PODS, "/api/v1/pods", None, Sink())  # type: ignore[arg-type]
    after_gone.listed.set()
    asked = _paged(after_gone, lambda: True)
    assert asked[-1] - asked[0] < 0.04, "a relist after 410 Gone closes a gap: it never pauses"
    periodic = Informer(PODS, "/api/v1/pods", None, Sink())  # type: ignore[arg-type]
    periodic.listed.set()
    periodic.resource_version = "5"
    asked = _paged(periodic, lambda: True, pages=4)
    assert len(asked) == 4 and 0.04 <= asked[-1] - asked[0] < 0.5, "bounded: PAGE_WAIT in all per list"
