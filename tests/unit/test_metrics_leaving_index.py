"""The metrics' leaving workers, indexed by job: what `leaving_of` gives is always what a scan of every
leaving worker would (each applied batch reads its own job's; the scan was O(every leaving worker))."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mpijob.runtime.metrics import _Leaving, _Stamps

_op = st.tuples(st.sampled_from(["mark", "unmark"]), st.sampled_from(["ns-a", "ns-b"]), st.integers(0, 5))


@settings(max_examples=200, deadline=None)
@given(st.lists(_op, max_size=60))
def test_leaving_of_a_job_is_what_a_scan_of_every_leaving_worker_finds(ops: list[tuple[str, str, int]]) -> None:
    stamps = _Stamps()
    for op, namespace, n in ops:
        key = (namespace, f"job{n % 2}-worker-{n}")
        if op == "mark":
            stamps.mark_leaving(key, _Leaving(f"job{n % 2}", "spot", 0.0))
        else:
            stamps.unmark_leaving(key)
        for ns in ("ns-a", "ns-b"):
            for job in ("job0", "job1"):
                scanned = {k for k, v in stamps.leaving.items() if v.job == job and k[0] == ns}
                assert {k for k, _ in stamps.leaving_of(ns, job)} == scanned
    assert all(names for names in stamps.leaving_by_job.values()), "no empty entry is kept (bounded memory)"
