"""The testbed's one start-up wait (mpijob_testbed.waiting.until_healthy): it returns once a just-spawned
process is healthy, and otherwise fails saying what it waited for, how long, how the process ended, and the
tail of its log. Driven with real processes (spawned as the testbed spawns its components) and a real HTTP
server."""

from __future__ import annotations

import contextlib
import http.server
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mpijob_testbed import processes
from mpijob_testbed.errors import TestbedError
from mpijob_testbed.ports import free_ports
from mpijob_testbed.waiting import Check, http_ok, log_tail, until_healthy


def _spawn(tmp_path: Path, script: str) -> tuple[int, Path]:
    log = tmp_path / "component.log"
    sh = shutil.which("sh")
    assert sh is not None
    return processes.spawn([sh, "-c", script], log_path=log, pid_path=tmp_path / "component.pid"), log


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A running component that logged a few lines."""
    pid, log = _spawn(tmp_path, "for i in 1 2 3; do echo line $i; done; exec sleep 60")
    deadline = time.monotonic() + 30
    while "line 3" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.01)
    yield pid, log
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    while not processes.has_exited(pid) and time.monotonic() < deadline + 30:
        time.sleep(0.01)


def _answers(*answers: bool | str) -> tuple[Check, list[int]]:
    """A check that gives `answers` in turn (the last one from then on), counting its calls."""
    calls = [0]

    def check() -> bool | str:
        calls[0] += 1
        return answers[min(calls[0], len(answers)) - 1]

    return check, calls


def _wait(check: Check, pid: int, log: Path, timeout: float = 30, **kw: float) -> list[str]:
    said: list[str] = []
    until_healthy(
        check, what="the thing to be ready", name="component", pid=pid, log=log, timeout=timeout, echo=said.append, **kw
    )
    return said


def test_returns_at_once_when_already_healthy(sleeper: tuple[int, Path]) -> None:
    check, calls = _answers(True)
    said = _wait(check, *sleeper, interval=0.01)
    assert calls == [1]
    assert said == []


def test_returns_once_healthy_after_some_answers(sleeper: tuple[int, Path]) -> None:
    check, calls = _answers(False, "HTTP 503", True)
    _wait(check, *sleeper, interval=0.01)
    assert calls == [3]


def test_a_long_wait_says_what_it_waits_for_and_the_last_answer(sleeper: tuple[int, Path]) -> None:
    check, _ = _answers("HTTP 503", "HTTP 503", True)
    said = _wait(check, *sleeper, timeout=60, interval=0.05, progress_every=0.01)
    assert said, "no progress line on a wait longer than progress_every"
    assert all(line.startswith("[testbed] component: still waiting for the thing to be ready (") for line in said), said
    assert "of 60s; last answer: HTTP 503)" in said[0]


def test_a_process_that_dies_fails_with_its_exit_code_and_log_tail(tmp_path: Path) -> None:
    pid, log = _spawn(tmp_path, "for i in $(seq 1 40); do echo line $i; done; echo 'fatal: bad flag'; exit 3")
    check, _ = _answers(False)
    with pytest.raises(TestbedError) as err:
        _wait(check, pid, log, interval=0.01)
    message = str(err.value)
    assert message.startswith("component exited with code 3 after ")
    assert "while waiting for the thing to be ready; see " + str(log) in message
    assert message.endswith("    fatal: bad flag")
    tail = message.split("\n")[1:]
    assert len(tail) == 25 and tail[0] == "    line 17", tail


def test_a_process_killed_by_a_signal_names_the_signal(tmp_path: Path) -> None:
    pid, log = _spawn(tmp_path, "kill -KILL $$")
    check, _ = _answers(False)
    with pytest.raises(TestbedError, match=r"^component was killed by signal 9 \(SIGKILL\) after "):
        _wait(check, pid, log, interval=0.01)


def test_an_answer_while_the_process_is_gone_is_not_health(tmp_path: Path) -> None:
    # Something else may hold the port: the process's own end outranks a 200.
    pid, log = _spawn(tmp_path, "exit 0")
    deadline = time.monotonic() + 30
    while not processes.has_exited(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    check, calls = _answers(True)
    with pytest.raises(TestbedError, match=r"^component exited with code 0 after "):
        _wait(check, pid, log)
    assert calls == [0]


def test_a_process_not_spawned_here_that_is_gone_has_an_unknown_exit_status(tmp_path: Path) -> None:
    other = subprocess.Popen(["true"])
    other.wait()
    check, _ = _answers(False)
    log = tmp_path / "missing.log"
    with pytest.raises(TestbedError) as err:
        _wait(check, other.pid, log)
    assert "component exited (exit status unknown: not a child of this process)" in str(err.value)
    assert str(err.value).endswith("    (no log file)")


def test_a_timeout_names_what_how_long_the_last_answer_and_the_log_tail(sleeper: tuple[int, Path]) -> None:
    check, calls = _answers("HTTP 500")
    with pytest.raises(TestbedError) as err:
        _wait(check, *sleeper, timeout=0.2, interval=0.01)
    first, *tail = str(err.value).split("\n")
    assert first == (
        f"component: timed out after 0.2s waiting for the thing to be ready; last answer: HTTP 500; see {sleeper[1]}"
    )
    assert tail[-3:] == ["    line 1", "    line 2", "    line 3"]
    assert calls[0] >= 2


def test_exit_code_survives_the_reaping_of_the_child(tmp_path: Path) -> None:
    pid, _ = _spawn(tmp_path, "exit 7")
    deadline = time.monotonic() + 30
    # is_running reaps a finished child and forgets its Popen; its exit code must outlive that.
    while processes.is_running(pid, Path(shutil.which("sh") or "sh")) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert processes.exit_code(pid) == 7


def test_log_tail_reads_the_end_of_a_large_log(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    log.write_text("".join(f"line {i} {'x' * 100}\n" for i in range(20000)))
    tail = log_tail(log, lines=2).split("\n")
    assert tail == [f"    line 19998 {'x' * 100}", f"    line 19999 {'x' * 100}"]
    (tmp_path / "empty.log").write_text("")
    assert log_tail(tmp_path / "empty.log") == "    (empty log)"


class _Statuses(http.server.BaseHTTPRequestHandler):
    statuses: list[int] = []

    def do_GET(self) -> None:
        self.send_response(self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0])
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        del format, args


def test_http_ok_is_healthy_on_200_and_quotes_any_other_answer() -> None:
    _Statuses.statuses = [503, 200]
    server = http.server.HTTPServer(("127.0.0.1", 0), _Statuses)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        check = http_ok(f"http://127.0.0.1:{server.server_port}/ready")
        assert check() == "HTTP 503"
        assert check() is True
    finally:
        server.shutdown()
        server.server_close()
    (closed,) = free_ports(1)
    assert http_ok(f"http://127.0.0.1:{closed}/ready")() == "no answer"
