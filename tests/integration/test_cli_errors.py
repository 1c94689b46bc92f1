"""A job that does not exist, asked for as a user asks (the installed `mpijob` and `kubectl-mpijob`, in a
subprocess) of a real API server: one line naming the job's namespace and name, exit code 1, as kubectl's for
an object that is not there. The mistakes that need no API server: tests/unit/test_cli_errors.py."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from kube import Kube

from mpijob.cli.errors import EXIT_REFUSED

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent  # where `pip install` put the console scripts


async def run(program: str, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        str(BIN / program), *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return int(proc.returncode or 0), out.decode(), err.decode()


@pytest.mark.parametrize(
    "command",
    [
        ["kubectl-mpijob", "status"],
        ["kubectl-mpijob", "history"],
        ["mpijob", "scale", "--replicas", "2"],
        ["mpijob", "scale-in", "--workers", "nosuch-worker-0"],
        ["mpijob", "status", "-o", "json"],
    ],
)
async def test_a_job_that_does_not_exist_is_one_line_naming_it(
    kube: Kube, kubeconfig: Path, command: list[str]
) -> None:
    program, verb, *rest = command
    code, out, err = await run(program, verb, "nosuch", "-n", kube.ns, "--kubeconfig", str(kubeconfig), *rest)
    assert (code, out, err) == (EXIT_REFUSED, "", f"error: MPIJob {kube.ns}/nosuch not found\n")
