"""Detached component processes: start them in their own session, find them again by pid file, stop them.

A component outlives the Python process that started it (start_new_session, output to a log file), so
everything here works from pid files and /proc rather than from Popen objects alone.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from mpijob_testbed.errors import TestbedError

# Popen objects of processes started by this Python process, so they can be reaped (a dead child would
# otherwise linger as a zombie and look alive) and so Popen.__del__ does not warn about running children.
_children: dict[int, subprocess.Popen[bytes]] = {}
# Exit statuses of children reaped here (Popen.returncode convention: -N for signal N), so a start-up error
# can still say how a process ended after it was reaped.
_exit_codes: dict[int, int] = {}


def spawn(
    argv: Sequence[str],
    *,
    log_path: Path,
    pid_path: Path,
    env: Mapping[str, str] | None = None,
) -> int:
    """Start `argv` detached (own session and process group), appending its output to `log_path`."""
    with open(log_path, "ab") as log:
        stamp = dt.datetime.now().isoformat(timespec="seconds")
        log.write(f"--- {stamp} mpijob testbed starts: {shlex.join(argv)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            env=dict(env) if env is not None else None,
        )
    _children[proc.pid] = proc
    _exit_codes.pop(proc.pid, None)  # a recycled pid's old status is not this process's
    pid_path.write_text(f"{proc.pid}\n")
    return proc.pid


def read_pid(pid_path: Path) -> int | None:
    try:
        text = pid_path.read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None


def _reap(pid: int) -> None:
    proc = _children.get(pid)
    if proc is not None:
        if proc.poll() is not None:
            _exit_codes[pid] = proc.returncode
            del _children[pid]
        return
    # Not started by this process object, but possibly still our child (e.g. a forked test runner).
    with contextlib.suppress(ChildProcessError):
        reaped, status = os.waitpid(pid, os.WNOHANG)
        if reaped == pid:
            _exit_codes[pid] = os.waitstatus_to_exitcode(status)


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, process group id) from /proc, or None when there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name is in parentheses and may contain spaces; the fixed fields follow the last ')'.
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[2])


def _argv0(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return raw.split(b"\0", 1)[0].decode(errors="replace") if raw else None


def _live(pid: int) -> bool:
    _reap(pid)
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def _is_binary(pid: int, binary: Path) -> bool:
    argv0 = _argv0(pid)
    if argv0 is None:
        # The command line reads empty while a fresh child is still inside exec (loading a 100 MB binary
        # can take a moment); a process we spawned ourselves is ours regardless.
        return pid in _children
    return argv0 == str(binary)


def is_running(pid: int, binary: Path) -> bool:
    """True when `pid` is alive and is `binary` (a recycled pid running something else does not count)."""
    return _live(pid) and _is_binary(pid, binary)


def has_exited(pid: int) -> bool:
    """For a process spawned here: has it ended? (Exact, via its Popen; /proc otherwise.)"""
    proc = _children.get(pid)
    if proc is not None:
        return proc.poll() is not None
    return not _live(pid)


def exit_code(pid: int) -> int | None:
    """How a process spawned here ended (-N: killed by signal N); None while it runs or when not known
    (a process of an earlier command, found by its pid file, is not our child)."""
    proc = _children.get(pid)
    if proc is not None:
        return proc.poll()
    return _exit_codes.get(pid)


def group_members(pgid: int) -> list[int]:
    """Live processes in process group `pgid`."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            pid = int(entry.name)
            st = _stat(pid)
            if st is not None and st[1] == pgid and _live(pid):
                members.append(pid)
    return members


def _wait_gone(pgid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if not group_members(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def stop_group(pid: int, binary: Path, *, grace: float = 10.0) -> bool:
    """Stop the process group led by `pid` (as started by `spawn`): SIGTERM, then SIGKILL after `grace`.

    Returns False when there was nothing of ours to stop. Raises TestbedError when something survives.
    The group is only signalled when one of its members is `binary`, so a recycled pid is never hit.
    """
    members = group_members(pid)
    if not any(_is_binary(m, binary) for m in members):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    if not _wait_gone(pid, grace):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        if not _wait_gone(pid, 5.0):
            raise TestbedError(f"process group {pid} ({binary.name}) survived SIGKILL: {group_members(pid)}")
    return True


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def find_processes(argument_part: str, names: Sequence[str]) -> dict[int, Path]:
    """Live processes whose binary is called one of `names` and one of whose arguments contains
    `argument_part` (a state directory path ending in '/'): {pid: binary}. This finds a testbed's
    processes even when a pid file is lost, and proves that none is left after stopping."""
    found: dict[int, Path] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        argv = _cmdline(pid)
        if argv and Path(argv[0]).name in names and any(argument_part in arg for arg in argv[1:]) and _live(pid):
            found[pid] = Path(argv[0])
    return found
