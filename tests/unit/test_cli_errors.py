"""Mistakes a user can make at the command line, made as a user makes them (the installed console scripts, in a
subprocess): each ends with one line on stderr naming the cause, and an exit code that says which kind. A bug
keeps its traceback. A missing job needs an API server: tests/integration/test_cli_errors.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio.config import ConfigException

from mpijob.cli import errors
from mpijob.cli.errors import EXIT_BUG, EXIT_KUBECONFIG, EXIT_NO_CLUSTER, EXIT_REFUSED, EXIT_USAGE
from mpijob.cli.kube import missing_job
from mpijob.kube.client import ApiError

BIN = Path(sys.executable).parent  # where `pip install` put the console scripts


def run(program: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Runs an installed program; returns its exit code and its stderr, checked to be one line."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_SERVICE_")}
    proc = subprocess.run(
        [str(BIN / program), *args],
        env={**environment, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, lines[0]


def kubeconfig_for(server: str, path: Path) -> Path:
    cluster = {"name": "c", "cluster": {"server": server}}
    context = {"name": "c", "context": {"cluster": "c", "user": "u"}}
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "c", "clusters": [cluster]}
    path.write_text(yaml.safe_dump({**doc, "contexts": [context], "users": [{"name": "u", "user": {"token": "t"}}]}))
    return path


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on (bound, then let go)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    "command",
    [
        ["mpijob", "operator", "--kubeconfig"],
        ["mpi-operator", "-kubeconfig"],
        ["mpijob", "install", "--kubeconfig"],
        ["kubectl-mpijob", "status", "job", "--kubeconfig"],
        ["mpijob", "scale", "job", "--replicas", "2", "--kubeconfig"],
    ],
)
@pytest.mark.parametrize(
    "content", [None, "clusters: [\n", "just a string\n", ""], ids=["missing", "yaml", "str", "empty"]
)
def test_a_missing_or_broken_kubeconfig_is_one_line_naming_the_file(
    command: list[str], content: str | None, tmp_path: Path
) -> None:
    config = tmp_path / "my-kubeconfig"
    if content is not None:
        config.write_text(content)
    code, line = run(*command, str(config))
    assert code == EXIT_KUBECONFIG and line.startswith("error: ") and str(config) in line, line


def test_an_unknown_context_is_one_line_naming_it(tmp_path: Path, closed_port: int) -> None:
    config = kubeconfig_for(f"https://127.0.0.1:{closed_port}", tmp_path / "config")
    code, line = run("kubectl-mpijob", "--context", "nosuch", "status", "job", env={"KUBECONFIG": str(config)})
    assert code == EXIT_KUBECONFIG and '"nosuch"' in line and str(config) in line, line


def test_no_kubeconfig_outside_a_pod_says_so(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "KUBECONFIG": ""}
    for command in (["mpijob", "operator"], ["kubectl-mpijob", "status", "job"]):
        code, line = run(*command, env=env)
        assert code == EXIT_KUBECONFIG and "no kubeconfig" in line and "not in a pod" in line, line


@pytest.mark.parametrize(
    "command",
    [
        ["mpijob", "operator"],
        ["mpi-operator"],
        ["mpijob", "install"],
        ["kubectl-mpijob", "status", "job"],
        ["kubectl-mpijob", "history", "job"],
        ["mpijob", "scale-in", "job", "--workers", "job-worker-0"],
    ],
)
def test_no_cluster_is_one_line_naming_the_servers_address(
    command: list[str], tmp_path: Path, closed_port: int
) -> None:
    config = kubeconfig_for(f"https://127.0.0.1:{closed_port}", tmp_path / "config")
    code, line = run(*command, env={"KUBECONFIG": str(config)})
    assert code == EXIT_NO_CLUSTER and f"127.0.0.1:{closed_port}" in line, line


@pytest.mark.parametrize(
    ("command", "named"),
    [
        (["mpijob", "operator", "--workers", "abc"], "--workers"),
        (["mpijob", "operator", "--log-format", "xml"], "--log-format"),
        (["mpijob", "no-such-command"], "no-such-command"),
        (["mpijob"], "command"),
        (["mpi-operator", "-threadiness=two"], "-threadiness"),  # the reference's command line, as Go's flag
        (["kubectl-mpijob", "scale", "job", "--replicas", "many"], "--replicas"),
        (["kubectl-mpijob", "status", "job", "-o", "table"], "--output"),
        (["kubectl-mpijob", "scale-in", "job"], "--workers"),
        (["mpijob-testbed", "up", "--nodes", "x"], "--nodes"),
        (["mpijob-testbed", "up", "--nodes", "-1"], "--nodes"),
        (["mpijob-testbed", "up", "--with", "nosuch"], "nosuch"),
        (["mpijob-testbed", "up", "--real-nodes", "99"], "--real-nodes"),
        (["mpijob-testbed", "bogus"], "bogus"),
    ],
)
def test_a_wrong_flag_or_value_is_one_line_naming_it_and_exits_2(command: list[str], named: str) -> None:
    code, line = run(*command)
    assert code == EXIT_USAGE and named in line, line


def test_a_testbed_that_cannot_do_its_step_says_why_in_one_line(tmp_path: Path) -> None:
    archive, state = tmp_path / "no-such-image.tar", tmp_path / "no-testbed"
    code, line = run("mpijob-testbed", "load", str(archive), "--dir", str(state))
    assert code == 1 and str(archive) in line, line
    code, line = run("mpijob-testbed", "kubeconfig", "--dir", str(state))  # no testbed: no kubeconfig yet
    assert code == 1 and str(state / "kubeconfig") in line and "mpijob-testbed up" in line, line


def test_a_bug_keeps_its_traceback_and_its_own_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    def broken() -> int:
        return {}["missing"]  # type: ignore[no-any-return]

    assert errors.run_program(broken, prog="mpijob") == EXIT_BUG
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError: 'missing'" in err and "a bug" in err.splitlines()[-1], err


def test_a_kubernetes_config_error_names_the_kubeconfig(tmp_path: Path) -> None:
    found = errors.expected(ConfigException("Invalid kube-config file.\nmore"), str(tmp_path / "cfg"))
    assert found is not None and found.code == EXIT_KUBECONFIG
    assert str(found) == f"kubeconfig {tmp_path / 'cfg'}: Invalid kube-config file."


def test_api_refusals_are_the_servers_message_in_one_line() -> None:
    body = '{"kind":"Status","message":"mpijobs.kubeflow.org \\"x\\" is forbidden: no","code":403}'
    refused = errors.expected(ApiError(403, "Forbidden", body))
    assert refused is not None and (str(refused), refused.code) == ('mpijobs.kubeflow.org "x" is forbidden: no', 1)
    assert errors.api_message(ApiError(500, "Internal", "<html>\n<body>")) == "500 Internal"


def test_a_404_on_a_job_says_whether_the_job_or_the_kind_is_missing() -> None:
    job_gone = {"kind": "Status", "code": 404, "details": {"name": "pi", "group": "kubeflow.org", "kind": "mpijobs"}}
    assert str(missing_job(ApiError(404, "Not Found", json.dumps(job_gone)), "ns", "pi")) == "MPIJob ns/pi not found"
    no_kind = {"kind": "Status", "code": 404, "message": "the server could not find the requested resource"}
    found = missing_job(ApiError(404, "Not Found", json.dumps(no_kind)), "ns", "pi")
    assert "does not serve MPIJobs" in str(found) and found.code == EXIT_REFUSED


def test_unexpected_errors_are_not_taken_for_a_users_mistake() -> None:
    for err in (KeyError("x"), TypeError("y"), ValueError("z"), RuntimeError("w")):
        assert errors.expected(err) is None
