"""What the testbed benchmarks (run.py, discovery.py) share: the report's header and end, and a testbed with
the CRD installed for one run (left running if it was running before)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import platform
import sys
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (first: the code measured is this checkout's)

from mpijob.api.models import API_VERSION
from mpijob.cli.operator import install_crd
from mpijob_testbed import cluster
from mpijob_testbed.nodes import spread_over


def report_header() -> dict[str, Any]:
    return {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


@contextlib.contextmanager
def testbed_with_crd(state_dir: str, nodes: int) -> Iterator[Path]:
    """The testbed's admin kubeconfig, the MPIJob CRD installed; a testbed started here is stopped after."""
    was_running = cluster.is_running(state_dir)
    testbed = cluster.up(nodes, state_dir, echo=_stderr)
    try:
        asyncio.run(install_crd(str(testbed.kubeconfig)))
        yield testbed.kubeconfig
    finally:
        if not was_running:
            cluster.down(state_dir, echo=_stderr)


def measure_on_testbed(
    state_dir: str, key: str, measure: Callable[[Path], Awaitable[dict[str, Any]]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the report, its `key` part): `measure(kubeconfig)` run on a testbed with the CRD (see testbed_with_crd)."""
    report = report_header()
    with testbed_with_crd(state_dir, 0) as kubeconfig:
        report[key] = asyncio.run(measure(kubeconfig))
    return report, report[key]


def print_table(measures: dict[str, Any], *, round_floats: bool = True) -> None:
    """A Markdown table of the measures; floats with two decimals unless the caller rounded them itself. Keys
    starting with "_" are raw series (for the JSON and the plots), not rows."""
    print("| measure | value |\n|---|---|")
    for key, value in measures.items():
        if key.startswith("_"):
            continue
        shown = f"{value:.2f}" if round_floats and isinstance(value, float) else f"{value}"
        print(f"| {key} | {shown} |")


def finish(report: dict[str, Any], json_path: str | None) -> int:
    print(f"\ncommand: {report['command']}  ({report['when']}, Python {report['python']})")
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2))
    return 0


def spread_elastic_job(
    name: str, workers: int, worker_nodes: list[str], launcher_node: str, elastic: dict[str, Any]
) -> dict[str, Any]:
    """An elastic MPIJob of placeholder containers: workers spread evenly over `worker_nodes`, the launcher
    pinned to `launcher_node` (the discovery and regrow benchmarks' job)."""
    spread = {"bench": name}
    template = {
        "metadata": {"labels": spread},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            **spread_over(worker_nodes, spread),
            "containers": [{"name": "w", "image": "x"}],
        },
    }
    pin = {"kubernetes.io/hostname": launcher_node}
    launcher = {"spec": {"nodeSelector": pin, "containers": [{"name": "l", "image": "x"}]}}
    return {
        "apiVersion": API_VERSION,
        "kind": "MPIJob",
        "metadata": {"name": name},
        "spec": {
            "elasticPolicy": elastic,
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": launcher},
                "Worker": {"replicas": workers, "template": template},
            },
        },
    }
