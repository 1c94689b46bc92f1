"""The operator under test: a real `mpijob operator` process against the testbed, which tests may kill
and restart (restart safety is part of what they prove)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


class OperatorProcess:
    def __init__(
        self,
        kubeconfig: Path,
        log_dir: Path,
        extra_args: tuple[str, ...] = (),
        *,
        metrics: bool = False,
        env: dict[str, str] | None = None,
        command: tuple[str, ...] = ("operator",),
    ) -> None:
        self.kubeconfig = kubeconfig
        self.log_dir = log_dir
        self.extra_args = extra_args
        # ("operator",): `mpijob operator`; (): flags alone, the reference binary's command line.
        self.command = command
        # Added to the process's environment (an upgrade test runs an older checkout's code via PYTHONPATH).
        self.env = env or {}
        # /metrics on a port free now; the same port across restarts, so a scrape URL stays valid.
        self.metrics_port = _free_port() if metrics else 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def log_path(self) -> Path:
        # One file per process start, named by the session's pid so a later session does not overwrite it.
        return self.log_dir / f"operator-{os.getpid()}-{self.starts}.log"

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, "operator already running"
        self.starts += 1
        log = self.log_path.open("wb")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mpijob",
                *self.command,
                "--kubeconfig",
                str(self.kubeconfig),
                "--log-level",
                "DEBUG",
                *(
                    ("--metrics-port", str(self.metrics_port), "--metrics-bind-address", "127.0.0.1")
                    if self.metrics_port
                    else ()
                ),
                *self.extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        log.close()

    def stop(self, *, kill: bool = False) -> None:
        """Stops the operator; kill=True is SIGKILL (no chance to clean up, like a node crash)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)

    def restart(self, *, kill: bool = False) -> None:
        self.stop(kill=kill)
        time.sleep(0.2)
        self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
