"""Smoke test of the side-by-side benchmark (bench/compare.py): a tiny comparison, 2 MPIJobs x 2 workers,
with the reference operator built from its Go module (bench/reference/build.sh, cached) and mpijob, each on
its own fresh testbed. It proves the comparison runs end to end and both operators got every pod Running
and scaled in; it asserts no timing (figures on a shared machine are for bench/, not for tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_side_by_side_comparison_runs_both_operators_and_prints_the_table(tmp_path: Path) -> None:
    out = tmp_path / "compare.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "compare.py"),
            "--jobs=2",
            "--workers=2",
            "--idle=3",
            "--settle=1",
            "--timeout=300",
            f"--json={out}",
        ],
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "| create -> every worker and launcher Running, s |" in done.stdout, done.stdout
    assert "mpijob / reference" in done.stdout
    results = json.loads(out.read_text())["results"]
    assert [r["operator"].split()[0] for r in results] == ["reference", "mpijob"]
    for r in results:
        # Every pod Running (the benchmark waits for 2 x 3), then W -> W/2 with discovery showing the kept set.
        assert r["create_to_all_running_s"] > 0, r
        assert r["scale_in_victims"] == 2, r
        assert r["reconciles_per_job"] > 0, r
        assert r["api_requests_per_job"] > 0, r
        # ... and every job's Running status and discovery written before the requests were counted again.
        assert r["converged_jobs"] == "2/2", r
        assert r["api_requests_per_job_converged"] >= r["api_requests_per_job"], r
    ours = results[1]
    assert ours["victims_terminated_while_listed"] == 0, ours
