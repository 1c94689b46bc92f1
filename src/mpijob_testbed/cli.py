"""`mpijob-testbed ...`: a local Kubernetes control plane with kwok fake nodes for integration tests, and the
demo played on it. A development tool: it is not part of the operator's package or image."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from mpijob.cli.errors import OneLineParser, run_program
from mpijob_testbed import cluster, demo, extras, load, realnode
from mpijob_testbed.build import run_build
from mpijob_testbed.client import kubeconfig_path
from mpijob_testbed.errors import TestbedError
from mpijob_testbed.paths import ENV_BIN_DIR, ENV_STATE_DIR, resolve_bin_dir


def _echo(message: str) -> None:
    print(message, flush=True)


def _build(args: argparse.Namespace) -> int:
    run_build(resolve_bin_dir(args.bin_dir), echo=_echo)
    return 0


def _up(args: argparse.Namespace) -> int:
    tb = cluster.up(
        nodes=args.nodes,
        state_dir=args.dir,
        bin_dir=args.bin_dir,
        echo=_echo,
        with_=tuple(args.with_.split(",")),
        real_node=args.real_node,
        real_nodes=args.real_nodes,
    )
    print(f"nodes: {', '.join(tb.nodes) or '(none)'}")
    print(f"export KUBECONFIG={tb.kubeconfig}")
    return 0


def _down(args: argparse.Namespace) -> int:
    cluster.down(args.dir, echo=_echo)
    return 0


def _status(args: argparse.Namespace) -> int:
    st = cluster.status(args.dir)
    if not st.exists:
        print(f"no testbed at {st.state_dir}")
        return 1
    print(f"testbed {st.state_dir}: {'running' if st.running else 'NOT running'}")
    print(f"  API server {st.server} ({'ready' if st.ready else 'not ready'})")
    for c in st.components:
        state = "running" if c.running else "stopped"
        print(f"  {c.name:<24} pid {c.pid if c.pid is not None else '-':<8} {state:<8} log {c.log}")
    print(f"  nodes: {', '.join(st.nodes) or '-'}")
    return 0 if st.running else 1


def _kubeconfig(args: argparse.Namespace) -> int:
    path = kubeconfig_path(args.dir)
    print(path)
    if not path.exists():
        print(f"mpijob-testbed: {path} does not exist yet; run `mpijob-testbed up`", file=sys.stderr)
        return 1
    return 0


def _load(args: argparse.Namespace) -> int:
    load.load(args.archive, name=args.name, state_dir=args.dir, echo=_echo)
    return 0


def _count(low: int, high: int | None = None) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
        if number < low or (high is not None and number > high):
            bounds = f"{low} or more" if high is None else f"{low} to {high}"
            raise argparse.ArgumentTypeError(f"must be {bounds}, not {value}")
        return number

    return parse


def _components(value: str) -> str:
    try:
        return ",".join(extras.parse_with(value))
    except TestbedError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("--with ")) from None


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="mpijob-testbed", description=__doc__)
    commands = parser.add_subparsers(dest="testbed_command", required=True)

    def with_dir(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--dir", default=None, help=f"state directory (default: ${ENV_STATE_DIR} or <repo>/.testbed)")
        return p

    def with_bin_dir(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        default = f"${ENV_BIN_DIR} or <repo>/.cache/testbed/bin"
        p.add_argument("--bin-dir", default=None, help=f"binary directory (default: {default})")
        return p

    p = with_bin_dir(commands.add_parser("build", help="build the control-plane binaries (testbed/build.sh)"))
    p.set_defaults(func=(_build))

    p = with_bin_dir(with_dir(commands.add_parser("up", help="start the testbed (or add nodes to the running one)")))
    p.add_argument(
        "--nodes",
        type=_count(0),
        default=cluster.DEFAULT_NODES,
        help=f"fake nodes node-1..node-N (default {cluster.DEFAULT_NODES}); existing ones are kept",
    )
    p.add_argument(
        "--with",
        dest="with_",
        type=_components,
        default="",
        help="opt-in components, comma-separated: kueue, coscheduling (built from their Go modules by "
        "testbed/extras/build.sh on first use), prometheus (testbed/prometheus/build.sh; scrapes the operator "
        "as the chart's ServiceMonitor says); volcano is not available here",
    )
    p.add_argument(
        "--real-node",
        action="store_true",
        help="also run one real node (containerd + kubelet on this host; root; installs Debian packages)",
    )
    p.add_argument(
        "--real-nodes",
        type=_count(0, realnode.MAX_REAL_NODES),
        default=0,
        metavar="N",
        help="run N real nodes real-1..real-N instead (each its own containerd + kubelet on this host; "
        f"at most {realnode.MAX_REAL_NODES}; see docs/testbed.md)",
    )
    p.set_defaults(func=(_up))

    p = with_dir(commands.add_parser("down", help="stop every testbed process and delete the state directory"))
    p.set_defaults(func=(_down))

    p = with_dir(commands.add_parser("status", help="show components, pids and nodes (exit 1 if not running)"))
    p.set_defaults(func=(_status))

    p = with_dir(commands.add_parser("kubeconfig", help="print the path of the testbed's admin kubeconfig"))
    p.set_defaults(func=(_kubeconfig))

    p = with_dir(
        commands.add_parser(
            "load",
            help="import an OCI or `docker save` image archive into every real node (like `kind load image-archive`)",
        )
    )
    p.add_argument("archive", metavar="ARCHIVE", help="the image archive (a plain tar: OCI layout or docker save)")
    p.add_argument(
        "--name",
        metavar="IMAGE",
        default=None,
        help="the name pods use for it (needed when the archive names no image; overrides the archive's)",
    )
    p.set_defaults(func=(_load))

    demo.register(commands)
    return parser


def _run(args: argparse.Namespace) -> int:
    """A testbed step that failed is a paragraph naming the component and its log, and exit code 1."""
    try:
        return int(args.func(args))
    except TestbedError as exc:
        print(f"mpijob-testbed: {exc}", file=sys.stderr, flush=True)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_program(lambda: _run(args), prog="mpijob-testbed")
