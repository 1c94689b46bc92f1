"""`kubectl mpijob ...`: the elastic commands as a kubectl plugin (an executable named `kubectl-mpijob` on the
PATH), with kubectl's habits: --context, -n or the context's namespace, -o json|yaml|wide, --version, one-line
errors, and shell completion through kubectl's own plugin-completion hook (`kubectl_complete-mpijob`)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from mpijob.api.models import API_VERSION
from mpijob.cli import elastic
from mpijob.cli.errors import OneLineParser, run_program
from mpijob.cli.kube import client, resolve_namespace, worker_pods
from mpijob.kube.kubeconfig import context_names
from mpijob.kube.resources import collection_path

COMMANDS = ("status", "history", "scale", "scale-in", "completion", "version")
OUTPUTS = ("json", "yaml", "wide")
# cobra's ShellCompDirectiveNoFileComp: kubectl's completion then offers no file names.
NO_FILE_COMPLETION = ":4"


def package_version() -> str:
    try:
        return version("mpijob-operator")
    except PackageNotFoundError:  # running from a source tree without an install
        return "0+unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="kubectl mpijob", description="Elastic MPIJob operations (mpijob operator)")
    parser.add_argument("--version", action="version", version=f"kubectl-mpijob v{package_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    elastic.register(subparsers)
    comp = subparsers.add_parser("completion", help="print a shell completion script (bash or zsh)")
    comp.add_argument("shell", choices=("bash", "zsh"))
    comp.set_defaults(func=lambda a: (sys.stdout.write(completion_script(a.shell)), 0)[1])
    ver = subparsers.add_parser("version", help="print the plugin's version")
    ver.set_defaults(func=lambda a: (print(f"kubectl-mpijob v{package_version()}"), 0)[1])
    return parser


# Options every command takes, that kubectl users put anywhere: `kubectl mpijob -n ns status job`.
_GLOBAL_WITH_VALUE = ("-n", "--namespace", "--context", "--kubeconfig", "-o", "--output")


def hoist_global_options(argv: list[str]) -> list[str]:
    """Moves options given before the command to after it, where the command's parser reads them."""
    before: list[str] = []
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] not in ("-h", "--help", "--version"):
        name = argv[i].split("=", 1)[0]
        if name not in _GLOBAL_WITH_VALUE:
            break
        take = 1 if "=" in argv[i] else 2
        before += argv[i : i + take]
        i += take
    if not before or i >= len(argv):
        return argv
    return [argv[i], *before, *argv[i + 1 :]]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(hoist_global_options(list(sys.argv[1:] if argv is None else argv)))
    kubeconfig = getattr(args, "kubeconfig", None)
    return run_program(lambda: int(args.func(args)), prog="kubectl mpijob", kubeconfig=kubeconfig)


# -- completion --------------------------------------------------------------------------------------------


def completion_script(shell: str) -> str:
    """For `kubectl-mpijob` used directly; under kubectl (>= 1.26), `kubectl_complete-mpijob` is enough."""
    body = (
        "_kubectl_mpijob() {\n"
        "  local IFS=$'\\n'\n"
        '  COMPREPLY=($(kubectl_complete-mpijob "${COMP_WORDS[@]:1:$COMP_CWORD}" 2>/dev/null | grep -v "^:"))\n'
        "}\n"
        "complete -F _kubectl_mpijob kubectl-mpijob\n"
    )
    if shell == "zsh":
        return "autoload -U +X bashcompinit && bashcompinit\n" + body
    return body


def _option_value(words: list[str], *names: str) -> str | None:
    for i, word in enumerate(words[:-1]):
        if word in names:
            return words[i + 1]
        for name in names:
            if name.startswith("--") and word.startswith(name + "="):
                return word.split("=", 1)[1]
    return None


async def _api_names(words: list[str], what: str) -> list[str]:
    kubeconfig = _option_value(words, "--kubeconfig")
    context = _option_value(words, "--context")
    ns = resolve_namespace(kubeconfig, context, _option_value(words, "-n", "--namespace"))
    async with client(kubeconfig, context) as kube:
        if what == "namespaces":
            items = (await kube.get("/api/v1/namespaces")).get("items") or []
        elif what == "nodes":
            items = (await kube.get("/api/v1/nodes")).get("items") or []
        elif what == "workers":
            job = next((w for w in words[1:-1] if not w.startswith("-")), "")
            items = [p for p in await worker_pods(kube, ns, job) if not p["metadata"].get("deletionTimestamp")]
        else:
            items = (await kube.get(collection_path(API_VERSION, "MPIJob", ns))).get("items") or []
    return [str(i["metadata"]["name"]) for i in items]


def candidates(words: list[str]) -> list[str]:
    """What may come next: `words` are the arguments so far, the last one the (possibly empty) partial word."""
    partial = words[-1] if words else ""
    before = words[:-1]
    previous = before[-1] if before else ""
    try:
        if not before:
            found = list(COMMANDS)
        elif previous in ("-o", "--output"):
            found = list(OUTPUTS)
        elif previous == "--context":
            found = context_names(_option_value(words, "--kubeconfig"))
        elif previous in ("-n", "--namespace"):
            found = asyncio.run(_api_names(words, "namespaces"))
        elif previous == "--node":
            found = asyncio.run(_api_names(words, "nodes"))
        elif previous == "--workers":
            done, _, rest = partial.rpartition(",")
            names = asyncio.run(_api_names(words, "workers"))
            return [f"{done},{n}" if done else n for n in names if n.startswith(rest)]
        elif partial.startswith("-"):
            found = ["--namespace", "--context", "--kubeconfig", "--output", "--workers", "--node", "--replicas"]
            found += ["--replace", "--wait", "--timeout"]
        elif before[0] in ("status", "history", "scale", "scale-in") and not any(
            not w.startswith("-") for w in before[1:] if w not in _values(before)
        ):
            found = asyncio.run(_api_names(words, "mpijobs"))
        else:
            found = []
    except Exception:  # completion must never print a traceback into the user's shell
        return []
    return [f for f in found if f.startswith(partial)]


def _values(words: list[str]) -> set[str]:
    """Words that are option values (so not the job's name)."""
    with_value = {"-n", "--namespace", "--context", "--kubeconfig", "-o", "--output", "--workers", "--node"}
    with_value |= {"--replicas", "--timeout"}
    return {words[i + 1] for i, w in enumerate(words[:-1]) if w in with_value}


def complete_main(argv: Sequence[str] | None = None) -> int:
    """kubectl's plugin completion protocol: candidates one per line, then a `:<directive>` line."""
    words: list[Any] = list(sys.argv[1:] if argv is None else argv) or [""]
    for found in candidates([str(w) for w in words]):
        print(found)
    print(NO_FILE_COMPLETION)
    return 0


def run() -> None:
    sys.exit(main())


def run_complete() -> None:
    sys.exit(complete_main())


if __name__ == "__main__":
    run()
