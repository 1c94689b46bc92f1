"""The relist compares resourceVersions as well as uids and, at DEBUG, names each cached object older than
the API server's (how the fault round's stall was ruled out as a stale cache: docs/reliability.md); it still
drops only objects the list lacks, never on staleness."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from kopf._core.engines.indexing import OperatorIndexer

from mpijob.runtime import resync
from mpijob.runtime.cache import Cache


class _Lists:
    """The API server's metadata-only lists: (namespace, name, uid, resourceVersion) per list path."""

    def __init__(self, items: dict[str, list[tuple[str, str, str, str]]], list_rv: str) -> None:
        self.items = items
        self.list_rv = list_rv

    async def request(self, method: str, path: str, **_: Any) -> Any:
        assert method == "GET"
        return {
            "metadata": {"resourceVersion": self.list_rv},
            "items": [
                {"metadata": {"namespace": ns, "name": name, "uid": uid, "resourceVersion": rv}}
                for ns, name, uid, rv in self.items.get(path, [])
            ],
        }


def _cache(jobs: list[tuple[str, str, str, str]]) -> Cache:
    cache = Cache()
    for name in Cache.INDEXES:
        cache.indexes[name] = OperatorIndexer().index
    indexer = OperatorIndexer()
    for ns, name, uid, rv in jobs:
        obj = {"metadata": {"namespace": ns, "name": name, "uid": uid, "resourceVersion": rv}}
        indexer.replace((ns, name, uid), {(ns, name): obj})
    cache.indexes["mpijobs"] = indexer.index
    return cache


async def test_a_cached_job_older_than_the_list_is_named_and_kept(caplog: pytest.LogCaptureFixture) -> None:
    path = resync.BY_KIND["MPIJob"].path
    cache = _cache([("ns", "stale", "u1", "10"), ("ns", "fresh", "u2", "30"), ("ns", "gone", "u3", "5")])
    lists = _Lists({path: [("ns", "stale", "u1", "25"), ("ns", "fresh", "u2", "30")]}, list_rv="40")
    ghosts: list[str] = []
    caplog.set_level(logging.DEBUG, logger="mpijob.resync")

    dropped = await resync.relist_once(lists, cache, lambda kind, obj: ghosts.append(obj["metadata"]["name"]))

    assert dropped == 1 and ghosts == ["gone"]  # only what the list lacks
    assert cache.mpijob(("ns", "stale")) is not None  # staleness drops nothing
    report = [r.getMessage() for r in caplog.records if r.getMessage().startswith("relist MPIJob")]
    assert report == ["relist MPIJob at rv 40: 2 listed, 3 cached, behind: ['ns/stale 10<25']"], report


async def test_a_cache_as_new_as_the_list_reports_nothing_behind(caplog: pytest.LogCaptureFixture) -> None:
    path = resync.BY_KIND["MPIJob"].path
    # A cached copy newer than the list (an event that arrived after the list was taken) is not behind.
    cache = _cache([("ns", "a", "u1", "25"), ("ns", "b", "u2", "50")])
    lists = _Lists({path: [("ns", "a", "u1", "25"), ("ns", "b", "u2", "45")]}, list_rv="45")
    caplog.set_level(logging.DEBUG, logger="mpijob.resync")

    assert await resync.relist_once(lists, cache, lambda kind, obj: None) == 0

    report = [r.getMessage() for r in caplog.records if r.getMessage().startswith("relist MPIJob")]
    assert report == ["relist MPIJob at rv 45: 2 listed, 2 cached, behind: []"], report
