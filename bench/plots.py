"""PNG plots of the benchmarks' raw figures (matplotlib, Agg: no display needed): latency CDFs of several
series on one axes, and time series of a scale-in. bench/compare.py and bench/discovery.py call these with
what they measured (`--plots DIR`); `python bench/plots.py compare|discovery RESULT.json DIR` redraws from a
saved `--json` result."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; chosen before pyplot is imported
import matplotlib.pyplot as plt

# Small files: the PNGs are committed (docs/results.md embeds them), each well under 200 KB.
DPI = 100
SIZE = (6.4, 3.6)


def cdf_points(values: Sequence[float]) -> tuple[list[float], list[float]]:
    """The empirical CDF as step points: x sorted, y = fraction of values <= x."""
    xs = sorted(values)
    n = len(xs)
    return xs, [(i + 1) / n for i in range(n)]


def latency_cdf(series: Mapping[str, Sequence[float]], *, title: str, xlabel: str, path: Path) -> Path:
    """One CDF line per series (e.g. the reference and mpijob), log x when they span two decades."""
    fig, ax = plt.subplots(figsize=SIZE, dpi=DPI)
    shown = [v for v in series.values() if v]
    for label, values in series.items():
        if not values:
            continue
        xs, ys = cdf_points(values)
        ax.step(xs, ys, where="post", label=f"{label} (n={len(values)}, max {max(values):.2f} s)")
    lows = [min(v) for v in shown]
    highs = [max(v) for v in shown]
    if lows and min(lows) > 0 and max(highs) / min(lows) > 100:
        ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of jobs")
    ax.set_title(textwrap.fill(title, 80), fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def count_over_time(
    times: Sequence[float], start: int, step: int, end: float | None = None
) -> tuple[list[float], list[int]]:
    """A count that starts at `start` and moves by `step` at each of `times` (seconds since t0), as step
    points from 0 to the last time (or to `end`, held at the last count)."""
    xs, ys, count = [0.0], [start], start
    for t in sorted(times):
        count += step
        xs.append(t)
        ys.append(count)
    if end is not None and end > xs[-1]:
        xs.append(end)
        ys.append(count)
    return xs, ys


def scale_in_timeline(
    panels: Mapping[str, Mapping[str, tuple[Sequence[float], int, int]]], *, title: str, path: Path
) -> Path:
    """Side-by-side panels (e.g. one per operator) sharing the y axis; each line is a count over time
    given as (event times, starting count, step per event)."""
    fig, axes = plt.subplots(1, len(panels), figsize=(SIZE[0] * 1.5, SIZE[1]), dpi=DPI, sharey=True, squeeze=False)
    for ax, (name, lines) in zip(axes[0], panels.items(), strict=True):
        # Every line of a panel runs to the panel's last event, so a count that stopped moving stays visible.
        end = max((t for times, _, _ in lines.values() for t in times), default=0.0) * 1.03
        for label, (times, start, step) in lines.items():
            xs, ys = count_over_time(times, start, step, end)
            ax.step(xs, ys, where="post", label=label)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("seconds since the scale-in")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("count")
    fig.suptitle(textwrap.fill(title, 120), fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


# -- per benchmark ---------------------------------------------------------------------------------------


def compare_plots(results: Sequence[Mapping[str, Any]], directory: Path) -> list[Path]:
    """bench/compare.py: the scale-in W -> W/2 of every job, both operators (times since the first patch
    in the timeline; per job, from its own patch, in the CDF)."""
    if not results or "_scale_in_delays" not in results[0]:
        return []
    size = f"{results[0]['jobs']} MPIJobs x {results[0]['workers']} workers"
    cdf = latency_cdf(
        {r["operator"]: r["_scale_in_delays"] for r in results},
        title=f"Scale-in W -> W/2 ({size}): replicas patch -> discover_hosts.sh shows the kept set",
        xlabel="seconds (per job)",
        path=directory / "compare-scale-in-cdf.png",
    )
    panels = {
        r["operator"]: {
            "jobs whose discovery shows the kept set": (r["_scale_in_shown_at"], 0, 1),
            "removed workers not deleted yet": (r["_victims_deleted_at"], int(r["scale_in_victims"]), -1),
        }
        for r in results
    }
    timeline = scale_in_timeline(
        panels, title=f"Scale-in W -> W/2, {size}", path=directory / "compare-scale-in-timeline.png"
    )
    return [cdf, timeline]


def discovery_plots(result: Mapping[str, Any], directory: Path) -> list[Path]:
    """bench/discovery.py: one node's spot taint -> every affected launcher's discovery."""
    size = f"{result['jobs']} jobs x {result['workers_per_job']} workers over {result['worker_nodes']} nodes"
    api, annotation = result["_taint_to_api_s"], result["_taint_to_annotation_s"]
    cdf = latency_cdf(
        {"API (discover_hosts.sh's GET)": api, "launcher annotation (file fallback)": annotation},
        title=f"Spot taint -> the affected launchers' discovery ({size})",
        xlabel="seconds since the taint (per affected job)",
        path=directory / "discovery-taint-cdf.png",
    )
    affected = int(result["affected_jobs"])
    timeline = scale_in_timeline(
        {
            "one node tainted": {
                "jobs whose API discovery still lists a victim": (api, affected, -1),
                "jobs whose annotation still lists a victim": (annotation, affected, -1),
            }
        },
        title=f"Spot taint, {size}",
        path=directory / "discovery-taint-timeline.png",
    )
    return [cdf, timeline]


def main(argv: Sequence[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("compare", "discovery"):
        print("usage: plots.py compare|discovery RESULT.json DIR", file=sys.stderr)
        return 2
    kind, source, directory = argv[0], Path(argv[1]), Path(argv[2])
    data = json.loads(source.read_text())
    paths = (
        compare_plots(data["results"], directory)
        if kind == "compare"
        else discovery_plots(data["discovery"], directory)
    )
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
