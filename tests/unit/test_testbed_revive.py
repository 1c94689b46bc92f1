"""The testbed restarts a control-plane component that exited on its own, as the kubelet restarts a crashed
static pod (docs/reliability.md: the fault round's stall was a kube-scheduler that exits on purpose after an
API server restart under load, and nothing started it again)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from mpijob_testbed import cluster, processes
from mpijob_testbed.components import COMPONENTS
from mpijob_testbed.paths import Layout


def _testbed(tmp_path: Path, real_node: Any = None) -> tuple[Layout, Path]:
    """A state directory as `up` leaves it, whose components are `sleep` processes under the binaries' names."""
    layout = Layout(tmp_path / "state")
    layout.root.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sleep = shutil.which("sleep")
    assert sleep is not None
    for component in COMPONENTS:
        shutil.copy(sleep, bin_dir / component)
    ports = dict.fromkeys(("etcd_client", "etcd_peer", "apiserver", "controller_manager", "scheduler", "kwok"), 1)
    state = {"version": cluster._STATE_VERSION, "bin_dir": str(bin_dir), "ports": ports, "real_node": real_node}
    layout.state_file.write_text(json.dumps(state))
    return layout, bin_dir


def _run(layout: Layout, bin_dir: Path, component: str) -> int:
    return processes.spawn(
        [str(bin_dir / component), "60"], log_path=layout.log(component), pid_path=layout.pid(component)
    )


def _exited(layout: Layout, bin_dir: Path, component: str) -> int:
    """A component that ran and exited on its own (as kube-scheduler does when its cache is corrupted)."""
    proc = subprocess.Popen([str(bin_dir / component), "0"])
    proc.wait()
    layout.pid(component).write_text(f"{proc.pid}\n")
    return proc.pid


def test_a_component_that_exited_is_started_again_and_the_others_are_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout, bin_dir = _testbed(tmp_path)
    started: list[str] = []
    monkeypatch.setattr(cluster, "_start", lambda component, **_: started.append(component))
    live = {c: _run(layout, bin_dir, c) for c in ("etcd", "kube-apiserver", "kube-controller-manager")}
    dead = _exited(layout, bin_dir, "kube-scheduler")
    # kwok has no pid file: stopped on purpose (as `restart_component` leaves it for a moment), not revived.
    try:
        said: list[str] = []
        assert cluster.revive(layout.root, echo=said.append) == ["kube-scheduler"]
        assert started == ["kube-scheduler"]
        assert any("kube-scheduler" in line and str(dead) in line and "exited" in line for line in said), said
        assert not layout.pid("kube-scheduler").exists()  # `_start` writes the new one
        for component, pid in live.items():
            assert processes.is_running(pid, bin_dir / component)
    finally:
        for component, pid in live.items():
            processes.stop_group(pid, bin_dir / component, grace=2)


def test_nothing_is_started_when_every_component_runs_or_no_testbed_is_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout, bin_dir = _testbed(tmp_path)
    started: list[Any] = []
    monkeypatch.setattr(cluster, "_start", lambda component, **_: started.append(component))
    live = {c: _run(layout, bin_dir, c) for c in COMPONENTS}
    try:
        time.sleep(0.1)
        assert cluster.revive(layout.root, echo=lambda _: None) == []
        assert cluster.revive(tmp_path / "no-testbed", echo=lambda _: None) == []
        assert started == []
    finally:
        for component, pid in live.items():
            processes.stop_group(pid, bin_dir / component, grace=2)


def test_the_api_server_of_a_testbed_with_a_real_node_is_not_started_without_its_node_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout, bin_dir = _testbed(tmp_path, real_node={"name": "node"})
    started: list[str] = []
    monkeypatch.setattr(cluster, "_start", lambda component, **_: started.append(component))
    _exited(layout, bin_dir, "kube-apiserver")
    _exited(layout, bin_dir, "kube-scheduler")
    said: list[str] = []
    assert cluster.revive(layout.root, echo=said.append) == ["kube-scheduler"]
    assert started == ["kube-scheduler"]
    assert any("kube-apiserver" in line and "real node" in line for line in said), said
    # Polled every second: it says once that it leaves that API server alone.
    said.clear()
    cluster.revive(layout.root, echo=said.append)
    assert not [line for line in said if "kube-apiserver" in line], said
