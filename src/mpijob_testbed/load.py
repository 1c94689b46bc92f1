"""`mpijob-testbed load ARCHIVE`: a user's own image (an OCI or `docker save` archive) into every real node's
containerd, as `kind load image-archive` does for kind; the tests load their MPI and Horovod images the same
way. kwok nodes run no containers, so they need no image."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mpijob_testbed import nodeimages, processes, realnode
from mpijob_testbed.archives import read_archive, targets
from mpijob_testbed.errors import TestbedError
from mpijob_testbed.paths import Layout, resolve_state_dir

Echo = Callable[[str], None]


def real_nodes(layout: Layout) -> list[realnode.NodeLayout]:
    """The real nodes `up` started at this state directory, each with its containerd running."""
    if not layout.state_file.exists():
        raise TestbedError(f"no testbed at {layout.root} (start one with `mpijob-testbed up --real-node`)")
    try:
        state: dict[str, Any] = json.loads(layout.state_file.read_text())
    except ValueError as exc:
        raise TestbedError(f"{layout.state_file} is not the testbed's state ({exc})") from exc
    started = state.get("real_nodes") or ([state["real_node"]] if state.get("real_node") else [])
    if not started:
        raise TestbedError(
            f"the testbed at {layout.root} has no real node (kwok nodes run no images); "
            "start it with `mpijob-testbed up --real-node` or `--real-nodes N`"
        )
    nodes = [realnode.node_layout(layout, int(str(n["name"]).removeprefix("real-"))) for n in started]
    for node in nodes:
        pid = processes.read_pid(layout.pid(node.component("containerd")))
        if pid is None or not processes.is_running(pid, realnode.CONTAINERD):
            raise TestbedError(f"{node.name}'s containerd is not running (see `mpijob-testbed status`)")
    return nodes


def load(
    archive: str | os.PathLike[str],
    *,
    name: str | None = None,
    state_dir: str | os.PathLike[str] | None = None,
    echo: Echo = print,
) -> dict[str, float]:
    """Import `archive` into every real node, as `name` when given; returns the seconds each node took."""
    image = read_archive(Path(archive).expanduser().absolute())
    names = ", ".join(targets(image, name))  # a bad --name or a nameless archive fails before any node
    nodes = real_nodes(Layout(resolve_state_dir(state_dir)))
    took: dict[str, float] = {}
    started = time.monotonic()
    for node in nodes:
        echo(f"[testbed] {node.name}: importing {image.path.name} as {names} ...")
        t = time.monotonic()
        nodeimages.import_archive(node.socket, image, name)
        took[node.name] = round(time.monotonic() - t, 1)
        echo(f"[testbed] {node.name}: {names} imported ({took[node.name]:.1f}s)")
    echo(f"[testbed] loaded {names} into {len(nodes)} real node(s) in {time.monotonic() - started:.1f}s")
    return took
