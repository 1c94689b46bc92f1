"""The reference operator's command line (kubeflow/mpi-operator v0.8.2, `cmd/mpi-operator`), accepted as it is.

An install that swaps the reference's image for ours keeps its Deployment's args (`-alsologtostderr
--lock-namespace=mpi-operator`). Those are Go `flag` arguments: one or two dashes, `-name=value` or `-name
value`, booleans only as `-name` or `-name=BOOL`, parsing stops at the first non-flag. `translate` turns them
into `mpijob operator` arguments: each flag mpijob has keeps its meaning, each other one is accepted and said
to have no effect. Invoked with flags and no sub-command (`mpijob -alsologtostderr ...`, the image's contract
with those args), the operator also starts as the reference's binary does: it always elects a leader, on the
Lease `mpi-operator` in --lock-namespace (default `mpi-operator`), so the two never run a job at once, and
serves /healthz on :8080; the namespace defaults to KUBEFLOW_NAMESPACE.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# The reference binary's own Lease name, lock namespace and health port (cmd/mpi-operator/app/server.go).
REFERENCE_LEASE = "mpi-operator"
REFERENCE_LOCK_NAMESPACE = "mpi-operator"
REFERENCE_HEALTH_PORT = 8080
# The reference reads its default namespace from this variable (pkg/apis/kubeflow/v2beta1).
NAMESPACE_ENV = "KUBEFLOW_NAMESPACE"
# klog's -v at which Kubernetes components log debug detail.
DEBUG_VERBOSITY = 4

_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


class FlagError(ValueError):
    """A reference flag with a value Go's flag package would refuse too."""


def _go_int(name: str, value: str) -> int:
    """strconv.ParseInt(value, 0, 64), as Go's flag package parses an int flag."""
    try:
        return int(value, 0)
    except ValueError:
        raise FlagError(f'invalid value "{value}" for flag -{name}: parse error') from None


def _go_bool(name: str, value: str) -> bool:
    if value in _GO_TRUE:
        return True
    if value in _GO_FALSE:
        return False
    raise FlagError(f'invalid boolean value "{value}" for flag -{name}: parse error')


@dataclass(frozen=True)
class RefFlag:
    """One flag of the reference binary: its Go type, and the `mpijob operator` arguments it becomes (None:
    accepted with no effect here, and why)."""

    kind: str  # "bool", "int" or "string"
    to: Callable[[str], list[str]] | None = None
    no_effect: str = ""


def _same(option: str) -> Callable[[str], list[str]]:
    return lambda value: [f"{option}={value}"]


def _namespace(value: str) -> list[str]:
    return [f"--namespace={value}"] if value else []  # the reference's "" means every namespace


def _verbosity(value: str) -> list[str]:
    return ["--log-level=DEBUG"] if int(value, 0) >= DEBUG_VERBOSITY else []


_KLOG = "mpijob logs to stderr, always (klog's flags do not apply)"
_QUEUE = "mpijob's work queue orders passes by priority and paces writes by class (docs/design.md)"

REFERENCE_FLAGS: dict[str, RefFlag] = {
    "master": RefFlag("string", _same("--master")),
    "kubeConfig": RefFlag("string", _same("--kubeconfig")),
    "namespace": RefFlag("string", _namespace),
    "threadiness": RefFlag("int", _same("--workers")),
    "version": RefFlag("bool"),  # handled by `translate`: prints the version and exits
    "monitoring-port": RefFlag("int", _same("--monitoring-port")),
    "gang-scheduling": RefFlag("string", _same("--gang-scheduling")),
    "lock-namespace": RefFlag("string", _same("--lock-namespace")),
    "kube-api-qps": RefFlag("int", _same("--kube-api-qps")),
    "kube-api-burst": RefFlag("int", _same("--kube-api-burst")),
    "controller-queue-rate-limit": RefFlag("int", no_effect=_QUEUE),
    "controller-queue-burst": RefFlag("int", no_effect=_QUEUE),
    "cluster-domain": RefFlag("string", _same("--cluster-domain")),
    # klog v2's flags (klog.InitFlags); -v alone changes something here: 4 or more is debug logging.
    "v": RefFlag("int", _verbosity),
    "vmodule": RefFlag("string", no_effect=_KLOG),
    "alsologtostderr": RefFlag("bool", no_effect=_KLOG),
    "logtostderr": RefFlag("bool", no_effect=_KLOG),
    "log_dir": RefFlag("string", no_effect=_KLOG),
    "log_file": RefFlag("string", no_effect=_KLOG),
    "log_file_max_size": RefFlag("int", no_effect=_KLOG),
    "log_backtrace_at": RefFlag("string", no_effect=_KLOG),
    "add_dir_header": RefFlag("bool", no_effect=_KLOG),
    "skip_headers": RefFlag("bool", no_effect=_KLOG),
    "skip_log_headers": RefFlag("bool", no_effect=_KLOG),
    "one_output": RefFlag("bool", no_effect=_KLOG),
    "stderrthreshold": RefFlag("string", no_effect=_KLOG),
    "legacy_stderr_threshold_behavior": RefFlag("bool", no_effect=_KLOG),
}


@dataclass
class Translated:
    """`mpijob operator` arguments, and what to log once logging is set up."""

    args: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    given: set[str] = field(default_factory=set)  # the reference flags given
    version: bool = False


def _split(token: str) -> tuple[str, str | None] | None:
    """("name", value or None) for a flag token of the reference's, else None."""
    if not token.startswith("-") or token in ("-", "--"):
        return None
    body = token[2:] if token.startswith("--") else token[1:]
    name, eq, value = body.partition("=")
    if name not in REFERENCE_FLAGS:
        return None
    return name, (value if eq else None)


def _value(name: str, flag: RefFlag, inline: str | None, rest: list[str]) -> str:
    """The flag's value, Go's way: a bool takes one only inline; other kinds take the next argument."""
    if flag.kind == "bool":
        return "true" if inline is None else str(_go_bool(name, inline)).lower()
    if inline is None:
        if not rest:
            raise FlagError(f"flag needs an argument: -{name}")
        inline = rest.pop(0)
    if flag.kind == "int":
        return str(_go_int(name, inline))
    return inline


def translate(argv: Sequence[str]) -> Translated:
    """The reference's flags among `argv` turned into ours; every other argument is kept as it is (a single
    dash before a long name of ours is read as two, as Go's flag package reads both)."""
    out = Translated()
    rest = list(argv)
    while rest:
        token = rest.pop(0)
        if token == "--":
            out.args += ["--", *rest]
            break
        split = _split(token)
        if split is None:
            long_single = token.startswith("-") and not token.startswith("--") and len(token.partition("=")[0]) > 2
            out.args.append("-" + token if long_single else token)
            continue
        name, inline = split
        flag = REFERENCE_FLAGS[name]
        value = _value(name, flag, inline, rest)
        out.given.add(name)
        if name == "version":
            out.version = value == "true"
        elif flag.to is not None:
            out.args += flag.to(value)
        else:
            out.notes.append(f"flag -{name}={value} has no effect: {flag.no_effect}")
    return out


def reference_defaults(given: set[str], env: dict[str, str] | None = None) -> list[str]:
    """What the reference's binary does without being asked: leader election on its Lease, /healthz on :8080,
    the namespace from KUBEFLOW_NAMESPACE."""
    env = dict(os.environ) if env is None else env
    args = ["--leader-elect", f"--lease-name={REFERENCE_LEASE}", f"--health-port={REFERENCE_HEALTH_PORT}"]
    if "lock-namespace" not in given:
        args.append(f"--lock-namespace={REFERENCE_LOCK_NAMESPACE}")
    if "namespace" not in given:
        args += _namespace(env.get(NAMESPACE_ENV, ""))
    return args
