"""How the command-line programs (`mpijob`, `mpi-operator`, `kubectl mpijob`, `mpijob-testbed`) end on a
mistake a user can make: one line on stderr and an exit code that says which kind of mistake. Anything else is
a bug: its traceback is kept, under a last line saying so, and the exit code is its own (docs/kubectl-plugin.md,
"Errors and exit codes")."""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn

import aiohttp
from kubernetes_asyncio import config as k8s_config

from mpijob.kube.client import ApiError
from mpijob.kube.kubeconfig import kubeconfig_files

EXIT_REFUSED = 1  # the API server refused or has no such object, or the command's own check refused (kubectl's 1)
EXIT_USAGE = 2  # a wrong flag, value or argument (argparse's and Go's flag package's code)
EXIT_KUBECONFIG = 3  # the kubeconfig is missing, unreadable or broken, or has no such context
EXIT_NO_CLUSTER = 4  # nothing answers at the API server's address
EXIT_BUG = 70  # an unexpected exception (sysexits' EX_SOFTWARE), traceback printed
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT


class CommandError(Exception):
    """A mistake the user can fix, said in one line; `code` is the exit code."""

    def __init__(self, message: str, code: int = EXIT_REFUSED) -> None:
        super().__init__(message)
        self.code = code


class KubeconfigError(CommandError):
    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_KUBECONFIG)


class OneLineParser(argparse.ArgumentParser):
    """argparse, with a usage error said in one line (the usage itself is one `--help` away)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0].strip() if lines else ""


def api_message(err: ApiError) -> str:
    """The API server's own message (what kubectl prints), else the HTTP status."""
    try:
        message = json.loads(err.body).get("message")
    except (ValueError, AttributeError):
        message = None
    return first_line(str(message)) if message else f"{err.status} {err.reason}"


def kubeconfig_named(kubeconfig: str | None) -> str:
    """Which kubeconfig a command read, for a message: the files kubectl would read, or in-cluster's."""
    files = kubeconfig_files(kubeconfig)
    if files:
        return "kubeconfig " + os.pathsep.join(str(f) for f in files)
    return "no kubeconfig (--kubeconfig, KUBECONFIG or ~/.kube/config) and not in a pod"


def expected(err: BaseException, kubeconfig: str | None = None) -> CommandError | None:
    """The user's mistake `err` stands for, or None for a bug."""
    if isinstance(err, CommandError):
        return err
    if isinstance(err, k8s_config.ConfigException):
        return KubeconfigError(f"{kubeconfig_named(kubeconfig)}: {first_line(str(err))}")
    if isinstance(err, aiohttp.ClientConnectorError):
        reason = err.os_error.strerror or str(err.os_error)
        return CommandError(f"cannot reach the API server at {err.host}:{err.port}: {reason}", EXIT_NO_CLUSTER)
    if isinstance(err, aiohttp.ClientConnectionError):  # the server went away or did not answer in time
        return CommandError(f"lost the API server: {first_line(str(err)) or type(err).__name__}", EXIT_NO_CLUSTER)
    if isinstance(err, ApiError):
        return CommandError(api_message(err))
    return None


def run_program(run: Callable[[], int], *, prog: str, kubeconfig: str | None = None) -> int:
    """The one place a program turns its expected errors into one line and their exit code."""
    try:
        return run()
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as err:
        known = expected(err, kubeconfig)
        if known is None:
            traceback.print_exc()
            print(f"{prog}: unexpected error (a bug; please report it with the traceback above)", file=sys.stderr)
            return EXIT_BUG
        print(f"error: {known}", file=sys.stderr, flush=True)
        return known.code
