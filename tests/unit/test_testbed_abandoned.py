"""A real-node testbed whose run was killed leaves the host's one bridge behind (the stop of 2026-12-01:
every real-node test of the next CI run failed with "a mpijobtb0 bridge exists already"). The next `up`
takes such a testbed down only when nothing of it runs and nobody is bringing it up or down."""

from __future__ import annotations

import fcntl
import shutil
import time
from pathlib import Path

from mpijob_testbed import cluster, processes
from mpijob_testbed.paths import Layout


def _state_dir(tmp_path: Path) -> Layout:
    layout = Layout(tmp_path / "state")
    layout.root.mkdir()
    layout.marker.touch()
    return layout


def test_a_testbed_with_nothing_running_and_no_lock_held_is_abandoned(tmp_path: Path) -> None:
    assert cluster._abandoned(_state_dir(tmp_path))


def test_a_testbed_whose_up_or_down_holds_its_lock_is_not_abandoned(tmp_path: Path) -> None:
    layout = _state_dir(tmp_path)
    with open(layout.lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert not cluster._abandoned(layout)
    assert cluster._abandoned(layout)


def test_a_testbed_with_one_process_still_running_is_not_abandoned(tmp_path: Path) -> None:
    layout = _state_dir(tmp_path)
    shell = shutil.which("sh")
    assert shell is not None
    kubelet = tmp_path / "kubelet"  # a node component, found by its name and the state directory in its argv
    shutil.copy(shell, kubelet)
    pid = processes.spawn(
        [str(kubelet), "-c", "sleep 60; true", f"{layout.root}/node/kubelet.yaml"],
        log_path=tmp_path / "kubelet.log",
        pid_path=tmp_path / "kubelet.pid",
    )
    try:
        deadline = time.monotonic() + 5
        while not processes.find_processes(f"{layout.root}/", ("kubelet",)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not cluster._abandoned(layout)
    finally:
        processes.stop_group(pid, kubelet)


def test_a_directory_that_is_not_a_testbed_is_never_abandoned(tmp_path: Path) -> None:
    layout = Layout(tmp_path / "other")
    layout.root.mkdir()
    assert not cluster._abandoned(layout)
