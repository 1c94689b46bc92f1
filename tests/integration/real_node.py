"""Helpers for the real-node modules (test_real_node*.py; their testbed fixtures are in conftest.py): pod
placement on the real node, kubectl against the module's testbed, recording measured figures, and checking
that `down` left the host as it was found.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mpijob.planner.podgroups import parse_quantity
from mpijob_testbed import cluster, hoststate, realnode
from mpijob_testbed.paths import resolve_bin_dir

Obj = dict[str, Any]
HOSTNAME = "kubernetes.io/hostname"
# Lifted from the real nodes and put on the kwok nodes while an unchanged manifest runs (only_real_nodes).
KWOK_ONLY_TAINT = "testbed.mpijob.io/runs-no-processes"
ON_REAL_NODE: Obj = {
    "nodeSelector": {realnode.REAL_NODE_LABEL: "true"},
    "tolerations": [{"key": realnode.REAL_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
}
# Where measured latencies are appended (one JSON object per line) when set; docs/results.md quotes them.
ENV_RESULTS = "MPIJOB_REALNODE_RESULTS"


def skip_reason() -> str | None:
    if os.environ.get("MPIJOB_SKIP_REAL_NODE") == "1":
        return "MPIJOB_SKIP_REAL_NODE=1"
    return realnode.machine_supports_real_node()


def host_as_found() -> dict[str, Any]:
    """The host's state before a test's `up`. A killed run's testbed (its mounts, cgroups, sysctls) is not the
    host as found: `up` would take it down and the test of `down` would count what it removed (seen after a
    session ended mid-run), so it goes first."""
    cluster.take_down_abandoned_real_node()
    return hoststate.capture()


def kubectl(tb: cluster.Testbed, *args: str, timeout: float = 60, input_text: str | None = None) -> str:
    binary = resolve_bin_dir(None) / "kubectl"
    if not binary.exists():
        binary = Path(shutil.which("kubectl") or "kubectl")
    out = subprocess.run(
        [str(binary), f"--kubeconfig={tb.kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        input=input_text,
    )
    assert out.returncode == 0, f"kubectl {' '.join(args)}: {out.stderr}"
    return out.stdout


def record(**figures: Any) -> None:
    print("real-node figure:", json.dumps(figures))
    path = os.environ.get(ENV_RESULTS)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **figures}) + "\n")


def assert_down_leaves_the_host_as_found(real_testbed: tuple[cluster.Testbed, dict[str, Any]]) -> None:
    tb, before = real_testbed
    assert cluster.down(tb.state_dir)
    assert not tb.state_dir.exists()
    after = hoststate.capture()
    assert hoststate.differences(before, after, realnode.own_mounts(tb.state_dir)) == []
    assert not processes_named("kubelet", "containerd", realnode.SHIM)


def processes_named(*names: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv0 = (entry / "cmdline").read_bytes().split(b"\0")[0].decode()
            except OSError:
                continue
            if Path(argv0).name in names:
                found.append(f"{entry.name} {argv0}")
    return found


@contextmanager
def only_real_nodes(tb: cluster.Testbed, count: int) -> Iterator[None]:
    """For manifests that carry no toleration or node selector (the reference's examples, ours), the cluster
    looks like one of real nodes only: the kwok nodes (which run no process) are tainted NoSchedule and the
    real nodes' own taint is lifted; both are put back afterwards."""
    real = realnode.node_names(count)
    kwok = [n for n in kubectl(tb, "get", "nodes", "-o", "jsonpath={.items[*].metadata.name}").split() if n not in real]
    kubectl(tb, "taint", "nodes", *kwok, f"{KWOK_ONLY_TAINT}=true:NoSchedule", "--overwrite")
    kubectl(tb, "taint", "nodes", *real, f"{realnode.REAL_NODE_TAINT}:NoSchedule-")
    try:
        yield
    finally:
        kubectl(tb, "taint", "nodes", *real, f"{realnode.REAL_NODE_TAINT}=true:NoSchedule", "--overwrite")
        kubectl(tb, "taint", "nodes", *kwok, f"{KWOK_ONLY_TAINT}:NoSchedule-")


def millicores(quantity: str) -> int:
    """A CPU quantity ("500m", "2") in millicores, parsed as the operator parses quantities."""
    parsed = parse_quantity(quantity)
    assert parsed is not None, quantity
    return int(parsed * 1000)


def allocatable_millicores(tb: cluster.Testbed, node: str) -> int:
    """A node's allocatable CPU, as the scheduler counts it."""
    return millicores(json.loads(kubectl(tb, "get", "node", node, "-o", "json"))["status"]["allocatable"]["cpu"])


def example_with_image(path: Path, upstream: str, image: str) -> str:
    """An example's text as a user applies it, with one change: the testbed's image for the one it names."""
    text = path.read_text()
    assert upstream in text, (path, upstream)
    return text.replace(upstream, image)
