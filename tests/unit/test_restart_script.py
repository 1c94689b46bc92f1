"""mpijob-run (src/mpijob/planner/mpijob_run.sh), the launcher's supervisor in Restart mode, run by a real sh
around a stand-in `mpirun` (a script of that name, so the supervisor finds it as it finds the real one) that
checkpoints and exits 75 on SIGUSR1, as testbed/mpi/jacobi.c does under a real mpirun."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from mpijob.planner.restart import RUN_SCRIPT

MPIRUN = """#!/bin/sh
trap 'echo "stopped with $MPIJOB_RANKS"; exit 75' USR1
if [ -n "${IGNORE:-}" ]; then trap '' "$IGNORE"; fi
echo "run $MPIJOB_RUN with $MPIJOB_RANKS ranks: $(tr '\\n' ' ' < "$MPIJOB_HOSTFILE")"
i=0
while [ "$i" -lt "${STEPS:-600}" ] && [ ! -e "$FINISH" ]; do sleep 0.1; i=$((i + 1)); done
echo "finished with $MPIJOB_RANKS"
exit "${STATUS:-0}"
"""


def _listing(*hosts: str) -> str:
    return "# mpijob discovery of ns/pi, changed now\n" + "".join(f"{h}:1\n" for h in hosts)


class Supervised:
    def __init__(self, tmp: Path, **env: str) -> None:
        self.tmp = tmp
        (tmp / "bin").mkdir()
        mpirun = tmp / "bin" / "mpirun"
        mpirun.write_text(MPIRUN)
        mpirun.chmod(0o755)
        script = tmp / "mpijob-run"
        script.write_text(RUN_SCRIPT)
        self.list = tmp / "hosts"
        self.finish = tmp / "finish"
        self.out = tmp / "out"
        environ = {
            **os.environ,
            "PATH": f"{tmp / 'bin'}:{os.environ['PATH']}",
            "MPIJOB_RUN_LIST": str(self.list),
            "MPIJOB_RUN_LEAVING": str(tmp / "leaving"),
            "MPIJOB_RUN_CONFIG_LIST": str(tmp / "none"),
            "MPIJOB_HOSTFILE": str(tmp / "hostfile"),
            "MPIJOB_GRACE_SECONDS": "10",
            "FINISH": str(self.finish),
            **env,
        }
        self.proc = subprocess.Popen(
            ["sh", str(script), "--", "mpirun"],
            env=environ,
            stdout=self.out.open("w"),
            stderr=subprocess.STDOUT,
        )

    def text(self) -> str:
        return self.out.read_text()

    def wait_for(self, needle: str, within: float = 15) -> None:
        end = time.monotonic() + within
        while needle not in self.text():
            assert time.monotonic() < end, f"{needle!r} not in {self.text()!r}"
            time.sleep(0.1)


@pytest.fixture
def localhost_names() -> list[str]:
    """Two names this machine resolves (its /etc/hosts), so the DNS check passes at once."""
    names = ["localhost", socket.gethostname()]
    for name in names:
        assert subprocess.run(["getent", "hosts", name], capture_output=True).returncode == 0, name
    return names


def test_a_list_change_stops_the_run_with_the_signal_and_starts_it_on_the_new_hosts(
    tmp_path: Path, localhost_names: list[str]
) -> None:
    run = Supervised(tmp_path)
    try:
        run.list.write_text(_listing(*localhost_names))
        run.wait_for("run 1 with 2 ranks: localhost slots=1 ")
        run.list.write_text(_listing(localhost_names[0]))
        run.wait_for("stopped with 2")
        run.wait_for("run 2 with 1 ranks: localhost slots=1")
        run.finish.touch()
        assert run.proc.wait(timeout=15) == 0
    finally:
        run.proc.kill()
    text = run.text()
    assert "finished with 1" in text and "run 1 stopped (status 75)" in text, text
    assert "sending SIGUSR1" in text, text


def test_the_program_ending_by_itself_ends_the_launcher_with_its_status(
    tmp_path: Path, localhost_names: list[str]
) -> None:
    run = Supervised(tmp_path, STEPS="5", STATUS="3")
    try:
        run.list.write_text(_listing(*localhost_names))
        assert run.proc.wait(timeout=20) == 3, "a crash is the job's failure, not a restart"
    finally:
        run.proc.kill()
    assert "run 1 ended with status 3" in run.text()


def test_nothing_runs_before_the_list_names_a_host_and_a_hydra_hostfile_has_host_colon_slots(
    tmp_path: Path, localhost_names: list[str]
) -> None:
    run = Supervised(tmp_path, STEPS="5", MPIJOB_HOSTFILE_FORMAT="hydra")
    try:
        run.list.write_text(_listing())
        time.sleep(1.5)
        assert "run 1" not in run.text()
        run.list.write_text(_listing(localhost_names[0]))
        run.wait_for("run 1 with 1 ranks: localhost:1")
        assert run.proc.wait(timeout=20) == 0
    finally:
        run.proc.kill()


def test_a_run_that_ignores_the_signal_is_terminated_at_the_deadline(
    tmp_path: Path, localhost_names: list[str]
) -> None:
    # The stand-in runs until told to finish: a run that ended by itself under load would prove nothing here.
    run = Supervised(tmp_path, MPIJOB_RESTART_SIGNAL="SIGUSR2", MPIJOB_GRACE_SECONDS="5", IGNORE="USR2")
    try:
        run.list.write_text(_listing(*localhost_names))
        run.wait_for("run 1 with 2 ranks")
        started = time.monotonic()
        run.list.write_text(_listing(localhost_names[0]))
        run.wait_for("2s to checkpoint and exit")
        run.wait_for("still running at the deadline: SIGTERM", within=10)
        run.wait_for("run 2 with 1 ranks", within=10)
        # Left alone the stand-in would run 60 s: well under that means the supervisor ended it (no tight bound: load).
        assert time.monotonic() - started < 30
        run.finish.touch()
        assert run.proc.wait(timeout=15) == 0
    finally:
        run.proc.kill()
    assert "finished with 2" not in run.text(), run.text()
