"""Bringing a whole testbed up and down: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok.

Everything a testbed owns lives in its state directory (default `<repo>/.testbed`): PKI, kubeconfigs,
etcd data, kwok's stage config, one `<component>.log` and `<component>.pid` per process, and `state.json`
(ports and binary directory). The processes run detached, so the testbed outlives the command that
started it; `down` finds them again through the pid files.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpijob_testbed import extras, processes, realnode
from mpijob_testbed.build import ensure_binaries
from mpijob_testbed.certs import Pki, create_pki
from mpijob_testbed.components import (
    CLIENTS,
    COMPONENTS,
    KUBERNETES_SERVICE_IP,
    Ports,
    apiserver_url,
    command,
    health_url,
)
from mpijob_testbed.errors import TestbedError
from mpijob_testbed.kubeconfigs import kubeconfig_dict, write_kubeconfig
from mpijob_testbed.nodes import node_index, node_manifest, node_name
from mpijob_testbed.paths import Layout, resolve_bin_dir, resolve_state_dir
from mpijob_testbed.ports import free_ports
from mpijob_testbed.rest import Rest, get_status, tls_context
from mpijob_testbed.stages import render_config
from mpijob_testbed.waiting import until_http_ok

Echo = Callable[[str], None]

DEFAULT_NODES = 4

# Start-up limits per component. Generous: a cold API server on two busy cores needs ~10-20 s.
_HEALTH_TIMEOUT = {
    "etcd": 30.0,
    "kube-apiserver": 120.0,
    "kube-controller-manager": 60.0,
    "kube-scheduler": 60.0,
    "kwok": 60.0,
}
_READY_TIMEOUT = 120.0
_STATE_VERSION = 1
# Taints the node-lifecycle controller keeps on a node kwok has not (yet) reported Ready.
_NOT_READY_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


@dataclass(frozen=True)
class Testbed:
    """A running testbed, as `up` returns it."""

    state_dir: Path
    kubeconfig: Path
    server: str
    ports: Ports
    nodes: tuple[str, ...]
    # False when `up` found it already running and only made sure of the nodes.
    started: bool


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    pid: int | None
    running: bool
    log: Path


@dataclass(frozen=True)
class Status:
    state_dir: Path
    exists: bool
    server: str | None
    components: tuple[ComponentStatus, ...]
    ready: bool
    nodes: tuple[str, ...]

    @property
    def running(self) -> bool:
        return self.exists and self.ready and all(c.running for c in self.components)


def _say(echo: Echo, message: str) -> None:
    echo(f"[testbed] {message}")


# --- state directory ------------------------------------------------------------------------------


def _prepare_dir(layout: Layout) -> None:
    root = layout.root
    if root.exists() and not layout.marker.exists() and any(root.iterdir()):
        raise TestbedError(f"{root} exists, is not empty and is not a testbed directory; choose another --dir")
    root.mkdir(parents=True, exist_ok=True)
    layout.marker.touch()


@contextlib.contextmanager
def _locked(layout: Layout) -> Iterator[None]:
    """Serialises `up`/`down` on one state directory (two pytest sessions starting at once, say)."""
    with open(layout.lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _load_state(layout: Layout) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(layout.state_file.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return data if data.get("version") == _STATE_VERSION else None


def _state_ports(state: dict[str, Any]) -> Ports:
    return Ports.from_json(state["ports"])


def _state_bin_dir(state: dict[str, Any] | None) -> Path:
    return Path(state["bin_dir"]) if state and state.get("bin_dir") else resolve_bin_dir(None)


def _wipe(layout: Layout) -> None:
    """Empty the state directory, keeping only the marker and the lock we hold."""
    for entry in layout.root.iterdir():
        if entry in (layout.marker, layout.lock):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


# --- processes ------------------------------------------------------------------------------------


def _component_pid(layout: Layout, component: str, bin_dir: Path) -> tuple[int | None, bool]:
    pid = processes.read_pid(layout.pid(component))
    return pid, pid is not None and processes.is_running(pid, bin_dir / component)


def _stop_all(layout: Layout, bin_dir: Path, echo: Echo) -> int:
    """Stop every component, newest first; returns how many were running. Processes whose pid file is
    gone are still found through their command line, which always names the state directory."""
    stopped = 0
    left: list[str] = []
    if realnode.has_node(layout):
        # The node goes first, while the API server can still tell its kubelet to tear pods down.
        rest = _admin_rest(layout, _state_ports(state)) if (state := _load_state(layout)) else None
        left = realnode.stop(layout, rest, echo)
        if not left:
            realnode.node_layout(layout).before.unlink()
    # The extras depend on the control plane: stopped before it.
    stopped += extras.stop(layout, echo=echo)
    for component in reversed(COMPONENTS):
        pid = processes.read_pid(layout.pid(component))
        if pid is None:
            continue
        if processes.stop_group(pid, bin_dir / component):
            _say(echo, f"stopped {component} (pid {pid})")
            stopped += 1
        layout.pid(component).unlink(missing_ok=True)
    for pid, binary in _stragglers(layout).items():
        if processes.stop_group(pid, binary):
            _say(echo, f"stopped stray {binary.name} (pid {pid})")
            stopped += 1
    if left:
        # Everything is stopped; the record stays so that `down` (or `up`) can try again.
        raise TestbedError(
            "the real node's host changes were not all undone (state kept; run `down` again):\n  " + "\n  ".join(left)
        )
    return stopped


def _stragglers(layout: Layout) -> dict[int, Path]:
    return processes.find_processes(f"{layout.root}{os.sep}", COMPONENTS)


def _pki(layout: Layout) -> Pki:
    return Pki(layout.pki)


def _admin_context(layout: Layout) -> ssl.SSLContext:
    pki = _pki(layout)
    return tls_context(pki.ca_cert, pki.client_cert("admin"), pki.client_key("admin"))


def _admin_rest(layout: Layout, ports: Ports) -> Rest:
    return Rest(apiserver_url(ports), _admin_context(layout))


def _apiserver_ready(layout: Layout, ports: Ports) -> bool:
    try:
        ctx = _admin_context(layout)
    except (OSError, ssl.SSLError):
        return False
    return get_status(health_url("kube-apiserver", ports), ctx) == 200


def _start(
    component: str, *, layout: Layout, bin_dir: Path, ports: Ports, echo: Echo, extra: list[str] | None = None
) -> None:
    started = time.monotonic()
    pki = _pki(layout)
    argv = command(component, bin_dir=bin_dir, layout=layout, pki=pki, ports=ports, extra=extra or ())
    env = dict(os.environ)
    if component == "kwok":
        env["HOME"] = str(layout.kwok_home)
    log = layout.log(component)
    pid = processes.spawn(argv, log_path=log, pid_path=layout.pid(component), env=env)
    ctx: ssl.SSLContext | None = None
    if component != "etcd" and component != "kwok":
        ctx = _admin_context(layout)
    until_http_ok(
        health_url(component, ports),
        ctx,
        name=component,
        pid=pid,
        log=log,
        timeout=_HEALTH_TIMEOUT[component],
        echo=echo,
    )
    _say(echo, f"{component} healthy (pid {pid}, {time.monotonic() - started:.1f}s, log {log})")


# --- API objects ----------------------------------------------------------------------------------


def _wait_for(what: str, check: Callable[[], bool], timeout: float, hint: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() >= deadline:
            raise TestbedError(f"timed out after {timeout:.0f}s waiting for {what}; {hint}")
        time.sleep(0.25)


def _node_ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    taints = (node.get("spec") or {}).get("taints") or []
    return ready and not any(t.get("key") in _NOT_READY_TAINTS for t in taints)


def _list_nodes(rest: Rest) -> dict[str, dict[str, Any]]:
    code, body = rest.get("/api/v1/nodes")
    if code != 200:
        raise TestbedError(f"listing nodes failed: HTTP {code}: {body}")
    return {item["metadata"]["name"]: item for item in body.get("items", [])}


def _sorted_names(nodes: dict[str, Any]) -> tuple[str, ...]:
    # node-2 before node-10; other names after the testbed's own.
    def key(name: str) -> tuple[int, str]:
        index = node_index(name)
        return (index if index is not None else sys.maxsize, name)

    return tuple(sorted(nodes, key=key))


def ensure_nodes(rest: Rest, count: int, layout: Layout, echo: Echo) -> tuple[str, ...]:
    """Create whichever of node-1..node-<count> is missing (never deletes any) and wait until they are
    Ready and free of the not-ready taint, i.e. schedulable."""
    wanted = [node_name(i) for i in range(1, count + 1)]
    existing = _list_nodes(rest)
    created = []
    for name in wanted:
        if name in existing:
            continue
        code, body = rest.post("/api/v1/nodes", node_manifest(name))
        if code not in (201, 409):
            raise TestbedError(f"creating node {name} failed: HTTP {code}: {body}")
        created.append(name)
    if created:
        _say(echo, f"created {', '.join(created)}; waiting for them to be Ready")
    started = time.monotonic()

    def all_ready() -> bool:
        nodes = _list_nodes(rest)
        return all(name in nodes and _node_ready(nodes[name]) for name in wanted)

    hint = f"kwok marks nodes Ready ({layout.log('kwok')}), the node-lifecycle controller removes the "
    hint += f"not-ready taint ({layout.log('kube-controller-manager')})"
    _wait_for(f"nodes {', '.join(wanted)} to be Ready", all_ready, _READY_TIMEOUT, hint)
    if created:
        _say(echo, f"nodes Ready ({time.monotonic() - started:.1f}s)")
    return _sorted_names(_list_nodes(rest))


def _wait_default_service_account(rest: Rest, layout: Layout) -> None:
    # The serviceaccount controller creates it; pods cannot be created in a namespace before it exists.
    _wait_for(
        "the default ServiceAccount",
        lambda: rest.get("/api/v1/namespaces/default/serviceaccounts/default")[0] == 200,
        60.0,
        f"see {layout.log('kube-controller-manager')}",
    )


# --- public API -----------------------------------------------------------------------------------


def status(state_dir: str | os.PathLike[str] | None = None) -> Status:
    """What runs at `state_dir`; never changes anything."""
    layout = Layout(resolve_state_dir(state_dir))
    state = _load_state(layout)
    bin_dir = _state_bin_dir(state)
    components = []
    for component in COMPONENTS:
        pid, running = _component_pid(layout, component, bin_dir)
        components.append(ComponentStatus(component, pid, running, layout.log(component)))
    if state is not None and state.get("real_node"):
        for node in realnode.node_layouts(layout):
            for component in realnode.NODE_COMPONENTS:
                name = node.component(component)
                pid = processes.read_pid(layout.pid(name))
                alive = pid is not None and processes.is_running(pid, realnode.binary(component))
                components.append(ComponentStatus(name, pid, alive, layout.log(name)))
    if state is None:
        return Status(layout.root, False, None, tuple(components), False, ())
    ports = _state_ports(state)
    apiserver = components[COMPONENTS.index("kube-apiserver")]
    ready = apiserver.running and _apiserver_ready(layout, ports)
    nodes: tuple[str, ...] = ()
    if ready:
        with contextlib.suppress(TestbedError, OSError):
            nodes = _sorted_names(_list_nodes(_admin_rest(layout, ports)))
    return Status(layout.root, True, apiserver_url(ports), tuple(components), ready, nodes)


def is_running(state_dir: str | os.PathLike[str] | None = None) -> bool:
    """True when every component of the testbed at `state_dir` runs and the API server is ready."""
    layout = Layout(resolve_state_dir(state_dir))
    if not layout.state_file.exists():
        return False
    return status(state_dir).running


def up(
    nodes: int = DEFAULT_NODES,
    state_dir: str | os.PathLike[str] | None = None,
    bin_dir: str | os.PathLike[str] | None = None,
    *,
    echo: Echo = print,
    with_: tuple[str, ...] = (),
    real_node: bool = False,
    real_nodes: int = 0,
) -> Testbed:
    """Start a testbed with `nodes` fake nodes, or make sure the one already running has them.

    `real_node` adds one real node (containerd and a kubelet on this host, see realnode.py), `real_nodes`
    that many (real-1..real-N, each its own containerd and kubelet); a running testbed without them is not
    changed into one: `down` it first.

    Builds the binaries when missing. A directory holding a stopped or half-dead testbed is cleaned
    (remaining processes stopped, files removed) and started afresh. On failure every process started
    is stopped again; the logs stay for inspection and the error names the failing component's log.
    """
    if nodes < 0:
        raise TestbedError("--nodes must be 0 or more")
    if real_nodes < 0:
        raise TestbedError("--real-nodes must be 0 or more")
    with_ = extras.parse_with(with_)
    real_count = max(real_nodes, 1 if real_node else 0)
    layout = Layout(resolve_state_dir(state_dir))
    _prepare_dir(layout)
    with _locked(layout):
        state = _load_state(layout)
        if state is not None:
            ports = _state_ports(state)
            old_bins = _state_bin_dir(state)
            alive = [c for c in COMPONENTS if _component_pid(layout, c, old_bins)[1]]
            if len(alive) == len(COMPONENTS) and _apiserver_ready(layout, ports):
                running_real = len(state.get("real_nodes") or ([state["real_node"]] if state.get("real_node") else []))
                if real_count and running_real != real_count:
                    raise TestbedError(
                        f"the testbed at {layout.root} runs with {running_real} real node(s), not {real_count};"
                        " `down` it first"
                    )
                _say(echo, f"already running at {layout.root} (API server {apiserver_url(ports)})")
                names = ensure_nodes(_admin_rest(layout, ports), nodes, layout, echo)
                extras.ensure(layout, _admin_rest(layout, ports), with_, echo=echo)
                return Testbed(layout.root, layout.kubeconfig, apiserver_url(ports), ports, names, False)
        leftovers = any(layout.pid(c).exists() for c in COMPONENTS) or bool(_stragglers(layout))
        leftovers = leftovers or realnode.has_node(layout)
        if state is not None or leftovers:
            _say(echo, f"found a stopped or broken testbed in {layout.root}; cleaning it up")
            _stop_all(layout, _state_bin_dir(state), echo)
            _wipe(layout)
        return _start_fresh(layout, resolve_bin_dir(bin_dir), nodes, echo, with_, real_count)


# The names of every process a testbed may run (control plane, real-node components, cluster DNS).
ALL_PROCESSES = (*COMPONENTS, *realnode.NODE_COMPONENTS, "coredns")


def _abandoned(layout: Layout) -> bool:
    """True when nothing of the testbed at `layout` runs and no `up` or `down` holds it: its run was killed."""
    if not layout.marker.exists():
        return False
    with open(layout.lock, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        try:
            return not processes.find_processes(f"{layout.root}{os.sep}", ALL_PROCESSES)
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def take_down_abandoned_real_node(echo: Echo = print, *, mine: Path | None = None) -> bool:
    """A real-node testbed whose run was killed (a CI job cancelled, a session ended) keeps the host's one
    bridge and its host changes; `down` on its state directory undoes them. Only when nothing of it runs:
    a live testbed's bridge is refused by `realnode.prepare` as before. `up` calls it; so does a test that
    captures the host's state before its `up` (the leftovers are not the host as it was). True when it
    took one down."""
    owner = realnode.bridge_owner()
    if owner is None or owner == mine or not _abandoned(Layout(owner)):
        return False
    _say(echo, f"the real-node testbed at {owner} was left behind (nothing of it runs); taking it down")
    down(owner, echo=echo)
    return True


def _start_fresh(
    layout: Layout, bin_dir: Path, nodes: int, echo: Echo, with_: tuple[str, ...] = (), real_nodes: int = 0
) -> Testbed:
    ensure_binaries(bin_dir, echo=echo)
    if real_nodes:
        take_down_abandoned_real_node(echo, mine=layout.root)
    real = realnode.prepare(layout, echo, real_nodes) if real_nodes else []
    started = time.monotonic()
    ports = Ports(*free_ports(6))
    _say(echo, f"starting in {layout.root} (API server port {ports.apiserver})")
    pki = create_pki(layout.pki, apiserver_ips=[KUBERNETES_SERVICE_IP], clients=CLIENTS)
    server = apiserver_url(ports)
    write_kubeconfig(
        layout.kubeconfig,
        kubeconfig_dict(
            server,
            ca=pki.ca_cert,
            cert=pki.client_cert("admin"),
            key=pki.client_key("admin"),
            user=CLIENTS["admin"].user,
            embed=True,
        ),
    )
    for component in ("kube-controller-manager", "kube-scheduler", "kwok"):
        write_kubeconfig(
            layout.component_kubeconfig(component),
            kubeconfig_dict(
                server,
                ca=pki.ca_cert,
                cert=pki.client_cert(component),
                key=pki.client_key(component),
                user=CLIENTS[component].user,
                embed=False,
            ),
        )
    layout.kwok_config.write_text(render_config())
    layout.kwok_home.mkdir(exist_ok=True)
    state = {
        "version": _STATE_VERSION,
        "bin_dir": str(bin_dir),
        "ports": ports.to_json(),
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "real_node": None,
    }
    layout.state_file.write_text(json.dumps(state, indent=2) + "\n")
    try:
        extra: list[str] = []
        if real:
            realnode.issue_certificates(pki, real)
            realnode.setup_network(ports.apiserver, real, owner=layout.root)
            extra = realnode.apiserver_flags(pki, real[0])
        for component in COMPONENTS:
            _start(
                component,
                layout=layout,
                bin_dir=bin_dir,
                ports=ports,
                echo=echo,
                extra=extra if component == "kube-apiserver" else None,
            )
        rest = _admin_rest(layout, ports)
        _wait_default_service_account(rest, layout)
        names = ensure_nodes(rest, nodes, layout, echo)
        extras.ensure(layout, rest, with_, echo=echo)
        if real:
            state["cluster_dns"] = realnode.start_dns(layout, echo)
            started_nodes = [realnode.start(layout, pki, server, rest, echo, n.index) for n in real]
            state["real_node"], state["real_nodes"] = started_nodes[0], started_nodes
            layout.state_file.write_text(json.dumps(state, indent=2) + "\n")
            names = _sorted_names(_list_nodes(rest))
    except BaseException:
        # Leave no half-started control plane behind; the logs stay for the error message's pointers.
        with contextlib.suppress(TestbedError):
            _stop_all(layout, bin_dir, echo)
        raise
    _say(echo, f"up in {time.monotonic() - started:.1f}s; kubeconfig: {layout.kubeconfig}")
    return Testbed(layout.root, layout.kubeconfig, server, ports, names, True)


def start_extras(
    names: tuple[str, ...] | str, state_dir: str | os.PathLike[str] | None = None, *, echo: Echo = print
) -> None:
    """Start opt-in scheduling components (`mpijob-testbed up --with`) on the running testbed at `state_dir`."""
    layout = Layout(resolve_state_dir(state_dir))
    with _locked(layout):
        state = _load_state(layout)
        if state is None:
            raise TestbedError(f"no testbed at {layout.root}; run `mpijob-testbed up` first")
        extras.ensure(layout, _admin_rest(layout, _state_ports(state)), extras.parse_with(names), echo=echo)


def down(state_dir: str | os.PathLike[str] | None = None, *, echo: Echo = print) -> bool:
    """Stop every process of the testbed at `state_dir` and delete the directory.

    Returns False when there was no testbed there. Raises TestbedError when a process cannot be stopped
    or the directory is not a testbed directory.
    """
    layout = Layout(resolve_state_dir(state_dir))
    if not layout.root.exists():
        _say(echo, f"no testbed at {layout.root}")
        return False
    if not layout.marker.exists():
        raise TestbedError(f"{layout.root} is not a testbed directory (no {layout.marker.name}); not touching it")
    with _locked(layout):
        state = _load_state(layout)
        bin_dir = _state_bin_dir(state)
        stopped = _stop_all(layout, bin_dir, echo)
        survivors = _stragglers(layout)
        if survivors:
            raise TestbedError(f"still running after stop: {survivors}")
        _remove_tree(layout.root)
    _say(echo, f"down: stopped {stopped} process(es), removed {layout.root}")
    return True


def _remove_tree(root: Path) -> None:
    """`rm -rf`: a third faster than shutil.rmtree over a real node's unpacked images (tens of thousands of
    files), and `--one-file-system` refuses to descend into anything still mounted below, where rmtree would
    delete through the mount."""
    done = subprocess.run(["rm", "-rf", "--one-file-system", "--", str(root)], capture_output=True, text=True)
    if done.returncode != 0:
        raise TestbedError(f"could not remove {root}: {done.stderr.strip()[-500:]}")


# (state dir, pid) of exited components `revive` said it leaves alone, so that it says so once.
_REPORTED_NOT_REVIVED: set[tuple[Path, int]] = set()


def revive(state_dir: str | os.PathLike[str] | None = None, *, echo: Echo = print) -> list[str]:
    """Starts again, with the same flags and ports, each component of a running testbed whose process has
    exited on its own, as the kubelet restarts a crashed control-plane static pod. Some components exit on
    purpose when they stop trusting their own state: kube-scheduler does (`klog.FlushAndExit` in its cache's
    UpdatePod, "Pod updated on a different node than previously added to") after a kube-apiserver restart
    under load, and then no pod is ever scheduled again. A component whose pid file is gone was stopped on
    purpose (`down`, `restart_component`) and is left alone. Returns the components started again; nothing
    when every component runs or no testbed is up. Started as `restart_component` starts them; the API
    server of a testbed with a real node is not (its real-node flags are not kept)."""
    layout = Layout(resolve_state_dir(state_dir))
    revived: list[str] = []
    if not layout.root.is_dir():
        return revived
    with _locked(layout):
        state = _load_state(layout)
        if state is None:
            return revived
        bin_dir = _state_bin_dir(state)
        for component in COMPONENTS:
            pid, running = _component_pid(layout, component, bin_dir)
            if pid is None or running:
                continue
            if component == "kube-apiserver" and state.get("real_node"):
                # Its real-node flags are not in the state: started without them, the node would be cut off.
                # Said once per process: revive is polled every second.
                if (layout.root, pid) not in _REPORTED_NOT_REVIVED:
                    _REPORTED_NOT_REVIVED.add((layout.root, pid))
                    _say(echo, f"{component} (pid {pid}) has exited; not started again (a real node joined)")
                continue
            _say(echo, f"{component} (pid {pid}) has exited; starting it again (log {layout.log(component)})")
            layout.pid(component).unlink(missing_ok=True)
            _start(component, layout=layout, bin_dir=bin_dir, ports=_state_ports(state), echo=echo)
            revived.append(component)
    return revived


def restart_component(component: str, state_dir: str | os.PathLike[str] | None = None, *, echo: Echo = print) -> float:
    """Stops one running component of the testbed and starts it again with the same flags and ports (a
    kube-apiserver restart for fault-injection tests: every watch drops, and its watch cache starts over,
    so clients resuming from an older resourceVersion get 410 Gone). Returns the seconds it was down."""
    if component not in COMPONENTS:
        raise TestbedError(f"unknown component {component!r}; one of {', '.join(COMPONENTS)}")
    layout = Layout(resolve_state_dir(state_dir))
    with _locked(layout):
        state = _load_state(layout)
        if state is None:
            raise TestbedError(f"no testbed at {layout.root}")
        bin_dir = _state_bin_dir(state)
        pid, running = _component_pid(layout, component, bin_dir)
        if pid is None or not running:
            raise TestbedError(f"{component} is not running in {layout.root}")
        started = time.monotonic()
        processes.stop_group(pid, bin_dir / component)
        layout.pid(component).unlink(missing_ok=True)
        _start(component, layout=layout, bin_dir=bin_dir, ports=_state_ports(state), echo=echo)
        return time.monotonic() - started
