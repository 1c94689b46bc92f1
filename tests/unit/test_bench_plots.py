"""bench/plots.py: the plots docs/results.md embeds are drawn from the figures given, as real PNGs."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import plots

PNG = b"\x89PNG\r\n\x1a\n"


def test_the_cdf_steps_through_every_value_to_one() -> None:
    assert plots.cdf_points([3.0, 1.0, 2.0, 2.0]) == ([1.0, 2.0, 2.0, 3.0], [0.25, 0.5, 0.75, 1.0])


def test_a_count_over_time_moves_by_its_step_at_each_event_in_time_order() -> None:
    assert plots.count_over_time([2.0, 0.5], start=4, step=-1) == ([0.0, 0.5, 2.0], [4, 3, 2])
    assert plots.count_over_time([2.0], start=0, step=1, end=5.0) == ([0.0, 2.0, 5.0], [0, 1, 1])


def test_compare_plots_are_small_pngs_of_both_operators(tmp_path: Path) -> None:
    result = {"jobs": 3, "workers": 8, "scale_in_victims": 12}
    results = [
        result
        | {
            "operator": "reference",
            "_scale_in_delays": [50.0, 90.0, 150.0],
            "_scale_in_shown_at": [51.0, 91.0, 151.0],
            "_victims_deleted_at": [1.0] * 12,
        },
        result
        | {
            "operator": "mpijob",
            "_scale_in_delays": [0.4, 0.6, 0.7],
            "_scale_in_shown_at": [0.4, 0.7, 0.9],
            "_victims_deleted_at": [31.0] * 12,
        },
    ]
    paths = plots.compare_plots(results, tmp_path)
    assert [p.name for p in paths] == ["compare-scale-in-cdf.png", "compare-scale-in-timeline.png"]
    for path in paths:
        data = path.read_bytes()
        assert data.startswith(PNG) and 5_000 < len(data) < 200_000, (path, len(data))


def test_compare_without_a_scale_in_draws_nothing(tmp_path: Path) -> None:
    assert plots.compare_plots([{"operator": "mpijob", "jobs": 1, "workers": 8}], tmp_path) == []


def test_discovery_plots_draw_the_api_and_the_annotation_series(tmp_path: Path) -> None:
    result = {
        "jobs": 20, "workers_per_job": 4, "worker_nodes": 2, "affected_jobs": 3,
        "_taint_to_api_s": [0.1, 0.2, 0.3], "_taint_to_annotation_s": [0.5, 0.6, 0.9],
    }  # fmt: skip
    paths = plots.discovery_plots(result, tmp_path)
    assert [p.name for p in paths] == ["discovery-taint-cdf.png", "discovery-taint-timeline.png"]
    assert all(p.read_bytes().startswith(PNG) for p in paths)
