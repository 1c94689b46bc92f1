"""The heap the operator freed goes back to the OS at the two moments that leave the most behind (issue 20,
bench/memory.py, runtime/heap.py): after every informer list, and when the work queue goes idle after a
burst of reconciles (not after each one); and a relist keeps the cached view of an object whose uid and
resourceVersion are unchanged, so the store is not held twice while the pages come in."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest

from mpijob.runtime import heap
from mpijob.runtime.cache import Cache
from mpijob.runtime.informer import Informer
from mpijob.runtime.kinds import BY_KIND
from mpijob.runtime.workqueue import WorkQueue

Obj = dict[str, Any]
PODS = BY_KIND["Pod"]


def _pod(name: str, rv: str, uid: str | None = None) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": uid or f"uid-{name}", "resourceVersion": rv},
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Running"},
    }


class _Server:
    """Answers each list with the next page set (one page each)."""

    def __init__(self, *lists: list[Obj]) -> None:
        self.lists = [{"metadata": {"resourceVersion": "100"}, "items": items} for items in lists]

    async def request(self, method: str, path: str, query: Any = None, **_: Any) -> Any:
        return self.lists.pop(0)


class _Sink:
    """Stores what a list delivers, as the controller does; records the order of calls."""

    def __init__(self, cache: Cache, calls: list[str]) -> None:
        self.cache = cache
        self.calls = calls

    def replaced(self, watched: Any, namespace: str | None, items: dict[Any, Obj]) -> None:
        self.calls.append("replaced")
        self.cache.indexes[watched.index] = dict(items)

    def observed(self, watched: Any, type: str, obj: Obj) -> None:
        pass


def test_a_relist_keeps_the_cached_view_of_an_unchanged_object_and_slims_a_changed_one() -> None:
    cache = Cache()
    calls: list[str] = []
    server = _Server(
        [_pod("a", "1"), _pod("b", "1"), _pod("c", "1")],
        # b changed (a new resourceVersion); c is another pod of the same name (a new uid, same version).
        [_pod("a", "1"), _pod("b", "2"), _pod("c", "1", uid="uid-c2")],
    )
    informer = Informer(PODS, "/api/v1/pods", server, _Sink(cache, calls), cached=cache.get)  # type: ignore[arg-type]
    asyncio.run(informer._list())
    first = dict(cache.indexes["pods"])
    asyncio.run(informer._list())
    second = cache.indexes["pods"]

    assert second[("ns", "a")] is first[("ns", "a")]
    assert second[("ns", "b")] is not first[("ns", "b")]
    assert second[("ns", "b")]["metadata"]["resourceVersion"] == "2"
    assert second[("ns", "c")]["metadata"]["uid"] == "uid-c2"
    # What the store got is the slimmed view either way (no raw list item slipped in).
    assert set(second[("ns", "b")]) == set(second[("ns", "a")]) == {"metadata", "spec", "status"}


def test_without_a_cache_lookup_a_relist_slims_every_object() -> None:
    cache = Cache()
    server = _Server([_pod("a", "1")], [_pod("a", "1")])
    informer = Informer(PODS, "/api/v1/pods", server, _Sink(cache, []))  # type: ignore[arg-type]
    asyncio.run(informer._list())
    first = cache.indexes["pods"][("ns", "a")]
    asyncio.run(informer._list())

    assert cache.indexes["pods"][("ns", "a")] is not first
    assert cache.indexes["pods"][("ns", "a")] == first


def test_the_heap_is_trimmed_after_each_list_once_the_store_has_it() -> None:
    calls: list[str] = []
    trimmer = heap.Trimmer(trim=lambda: calls.append("trim"))
    cache = Cache()
    informer = Informer(
        PODS,
        "/api/v1/pods",
        _Server([_pod("a", "1")], []),  # type: ignore[arg-type]
        _Sink(cache, calls),
        on_listed=trimmer.listed,
    )
    asyncio.run(informer._list())
    asyncio.run(informer._list())

    assert calls == ["replaced", "trim", "replaced", "trim"]


def test_an_idle_queue_trims_only_after_a_burst_of_reconciles() -> None:
    trims: list[int] = []
    trimmer = heap.Trimmer(trim=lambda: trims.append(1), burst=3)

    trimmer.idle(1)
    trimmer.idle(1)
    assert trims == []  # a trickle: one event, one reconcile, idle again
    trimmer.idle(1)
    assert trims == [1]  # three since the last trim
    trimmer.idle(2)
    assert trims == [1]
    trimmer.idle(5)
    assert trims == [1, 1]
    # A list trims too, and starts the count again.
    trimmer.idle(2)
    trimmer.listed()
    trimmer.idle(2)
    assert trims == [1, 1, 1] and trimmer.pending == 2


def test_the_work_queue_says_when_it_goes_idle_and_how_many_keys_were_done_since() -> None:
    idle: list[int] = []

    async def go() -> None:
        queue = WorkQueue()
        queue.on_idle = idle.append
        for key in ("a", "b", "c"):
            queue.add(key)
        first = (await queue.get())[0]
        queue.add(first)  # an event for a key being processed: it runs again, the queue is not idle
        queue.done(first)
        for _ in range(2):
            queue.done((await queue.get())[0])
        assert idle == []  # the re-added key is still pending
        queue.done((await queue.get())[0])
        assert idle == [4]
        queue.add("d")
        key = (await queue.get())[0]
        queue.done(key)

    asyncio.run(go())
    assert idle == [4, 1]


def test_a_key_still_running_keeps_the_queue_from_being_idle() -> None:
    idle: list[int] = []

    async def go() -> None:
        queue = WorkQueue()
        queue.on_idle = idle.append
        queue.add("a")
        queue.add("b")
        a, b = (await queue.get())[0], (await queue.get())[0]
        queue.done(a)
        assert idle == []
        queue.done(b)

    asyncio.run(go())
    assert idle == [2]


class _FakeLibc:
    def __init__(self, answer: int = 1) -> None:
        self.calls: list[tuple[str, int, int]] = []
        self.answer = answer

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append(("mallopt", param, value))
        return self.answer

    def malloc_trim(self, pad: int) -> int:
        self.calls.append(("malloc_trim", pad, 0))
        return 1


def test_configure_fixes_both_thresholds_so_glibc_stops_raising_them() -> None:
    libc = _FakeLibc()
    assert heap.configure(libc)  # type: ignore[arg-type]
    assert libc.calls == [
        ("mallopt", -3, heap.MMAP_THRESHOLD),  # M_MMAP_THRESHOLD
        ("mallopt", -1, heap.TRIM_THRESHOLD),  # M_TRIM_THRESHOLD
    ]
    assert not heap.configure(_FakeLibc(answer=0))  # type: ignore[arg-type]  # refused: said so


@pytest.mark.skipif(heap._libc() is None, reason="malloc is not glibc's here")
def test_glibc_accepts_the_thresholds_and_the_trim() -> None:
    # mallopt answers 0 for a parameter or value it refuses.
    assert heap.configure()
    heap.malloc_trim()


def test_the_operator_wires_the_trims_and_the_relist_lookup_into_every_informer_and_its_queue() -> None:
    from mpijob.app.operator import OperatorOptions, _informers
    from mpijob.executor.apply import Executor
    from mpijob.planner.snapshot import OperatorConfig
    from mpijob.runtime.controller import Controller

    from .fakes import RecordingClient

    controller = Controller(Executor(RecordingClient()), OperatorConfig())  # type: ignore[arg-type]
    made = _informers(OperatorOptions(namespaces=["a", "b"]), RecordingClient(), controller)  # type: ignore[arg-type]

    assert made and all(i.cached == controller.cache.get for i in made)
    trimmers = {id(getattr(i.on_listed, "__self__", None)) for i in made}
    assert len(trimmers) == 1  # one Trimmer: a list and an idle queue share the count
    assert controller.queue.on_idle is not None
    assert id(getattr(controller.queue.on_idle, "__self__", None)) in trimmers


_TLS_READS = r"""
import resource, ssl, sys
from pathlib import Path
from mpijob.runtime import heap
from mpijob_testbed.certs import create_pki

pki = create_pki(Path(sys.argv[1]), apiserver_ips=[], clients={})
heap.configure()
server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
server.load_cert_chain(pki.apiserver_cert, pki.apiserver_key)
client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
client.load_verify_locations(pki.ca_cert)
c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
c = client.wrap_bio(c_in, c_out, server_hostname="localhost")
s = server.wrap_bio(s_in, s_out, server_side=True)
for _ in range(10):
    for end in (c, s):
        try:
            end.do_handshake()
        except ssl.SSLWantReadError:
            pass
    s_in.write(c_out.read())
    c_in.write(s_out.read())
records = []
for _ in range(2000):
    s.write(b"x" * 3000)
    records.append(s_out.read())
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for record in records:
    c_in.write(record)
    c.read(256 * 1024)  # what asyncio's and uvloop's SSL protocols ask for on every read
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_a_tls_read_of_the_event_loop_does_not_map_fresh_pages_once_the_heap_is_configured(tmp_path: Any) -> None:
    """The event loops read TLS with `SSLObject.read(256 KiB)`: with the mmap threshold at that size each read
    was a mmap, 4 page faults and a munmap (10x the read's CPU); above it, the buffer comes from the heap."""
    if heap._libc() is None:
        pytest.skip("malloc is not glibc's: nothing is configured")
    out = subprocess.run(
        [sys.executable, "-c", _TLS_READS, str(tmp_path / "pki")], capture_output=True, text=True, check=True
    )
    faults = int(out.stdout.strip().splitlines()[-1])
    assert faults < 500, f"{faults} page faults for 2,000 TLS reads: each read mmapped its buffer"
