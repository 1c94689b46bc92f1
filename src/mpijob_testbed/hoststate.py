"""What a real node changes on the host, recorded before `up --real-node` and put back by `down`.

The kubelet, containerd and the CNI plugins leave things outside the state directory: mounts, a bridge
and veth links, iptables chains, cgroups under every v1 controller, sysctls and directories under /run,
/var/lib and /usr/libexec. `capture()` records the parts of the host they touch; `restore()` undoes the
difference (only things matching what a node makes, never anything else that appeared meanwhile); the
real-node test compares `capture()` before `up` and after `down`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

# Sysctls the kubelet (setupKernelTunables) and the CNI bridge plugin (isGateway) set.
SYSCTLS = (
    "vm/overcommit_memory",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/forwarding",
    "net/ipv6/conf/all/forwarding",
    "net/ipv4/conf/all/route_localnet",
    "net/bridge/bridge-nf-call-iptables",
)

# Host paths outside the state directory that the kubelet, containerd, runc or CNI create.
PATHS = (
    "/var/lib/kubelet",
    "/var/lib/cni",
    "/var/lib/containerd",
    "/run/netns",
    "/run/containerd",
    "/run/runc",
    "/opt/containerd",
    "/opt/cni",
    "/etc/cni",
    "/etc/kubernetes",
    "/usr/libexec/kubernetes",
    "/var/log/pods",
    "/var/log/containers",
)

# Chains a node may add (the kubelet's KUBE-*, the bridge plugin's CNI-*, the testbed's own MPIJOB-*).
_OWN_CHAIN = re.compile(r"^(KUBE-|CNI-|MPIJOB-)")
_OWN_LINK = re.compile(r"^(mpijobtb\d+|veth[0-9a-f]+)$")
_CGROUP_ROOT = Path("/sys/fs/cgroup")
# Defined here, where `down` checks the host, and used by realnode to name the nodes' cgroup roots.
MAX_REAL_NODES = 4
CGROUP_ROOT_PREFIX = "mpijobtb-real-"
# The kubelet's default root, and the cgroup roots of real-2.. (realnode.NodeLayout.cgroup_root).
_OWN_CGROUP = ("kubepods", "kubepods.slice", *(f"{CGROUP_ROOT_PREFIX}{i}" for i in range(2, MAX_REAL_NODES + 1)))


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def sysctls() -> dict[str, str | None]:
    return {name: _read(Path("/proc/sys") / name) for name in SYSCTLS}


def mounts() -> list[str]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        points.append(line.split()[4].replace("\\040", " "))
    return sorted(points)


def links() -> list[str]:
    return sorted(os.listdir("/sys/class/net"))


def _iptables_save(tool: str) -> dict[str, list[str]] | None:
    if shutil.which(tool) is None:
        return None
    out = subprocess.run([tool], capture_output=True, text=True, check=False).stdout
    tables: dict[str, list[str]] = {}
    table = ""
    for line in out.splitlines():
        if line.startswith("*"):
            table = line[1:]
            tables[table] = []
        elif line.startswith(":"):
            # ":CHAIN POLICY [packets:bytes]": the counters change all the time.
            tables[table].append(line.rsplit(" ", 1)[0])
        elif line.startswith("-A"):
            tables[table].append(line)
    return {t: sorted(lines) for t, lines in tables.items()}


def iptables() -> dict[str, dict[str, list[str]] | None]:
    return {"ipv4": _iptables_save("iptables-save"), "ipv6": _iptables_save("ip6tables-save")}


def cgroups() -> list[str]:
    """The top-level cgroup directories of each v1 controller (and cgroup2), and everything under the
    kubelet's `kubepods`. Deeper levels elsewhere belong to whoever else runs on the host and come and go."""
    found: list[str] = []
    if not _CGROUP_ROOT.is_dir():
        return found
    for controller in sorted(_CGROUP_ROOT.iterdir()):
        if not controller.is_dir() or controller.is_symlink():
            continue
        with contextlib.suppress(OSError):
            for child in sorted(p for p in controller.iterdir() if p.is_dir()):
                found.append(str(child))
                if child.name in _OWN_CGROUP:
                    found += sorted(str(p) for p in child.rglob("*") if p.is_dir())
    return found


def _recorded_cgroup(path: str) -> bool:
    parts = Path(path).relative_to(_CGROUP_ROOT).parts
    return len(parts) == 2 or (len(parts) > 2 and parts[1] in _OWN_CGROUP)


def paths() -> dict[str, bool]:
    return {p: os.path.lexists(p) for p in PATHS}


def capture() -> dict[str, Any]:
    return {
        "mounts": mounts(),
        "links": links(),
        "iptables": iptables(),
        "sysctls": sysctls(),
        "cgroups": cgroups(),
        "paths": paths(),
    }


def _under(point: str, roots: tuple[str, ...]) -> bool:
    return any(point == root or point.startswith(root.rstrip("/") + "/") for root in roots)


def differences(
    before: dict[str, Any], after: dict[str, Any], mounts_under: tuple[str, ...] | None = None
) -> list[str]:
    """Human-readable list of what differs; empty when the host is as it was. `mounts_under`: compare only
    the mount points under these roots (the nodes' own); a chroot or a container that something else on the
    host mounts meanwhile is not the testbed's to undo, nor a reason for its `down` to fail."""
    out = []
    for key in ("mounts", "links", "cgroups"):
        was, now = set(before[key]), set(after[key])
        if key == "cgroups":  # records made with deeper levels compare on what cgroups() records now
            was, now = {x for x in was if _recorded_cgroup(x)}, {x for x in now if _recorded_cgroup(x)}
        if key == "mounts" and mounts_under is not None:
            was, now = {x for x in was if _under(x, mounts_under)}, {x for x in now if _under(x, mounts_under)}
        added = sorted(now - was)
        removed = sorted(was - now)
        out += [f"{key}: added {x}" for x in added] + [f"{key}: removed {x}" for x in removed]
    for family in ("ipv4", "ipv6"):
        b, a = before["iptables"].get(family) or {}, after["iptables"].get(family) or {}
        for table in sorted(set(a) | set(b)):
            added = sorted(set(a.get(table, [])) - set(b.get(table, [])))
            removed = sorted(set(b.get(table, [])) - set(a.get(table, [])))
            out += [f"{family} {table}: added {x}" for x in added]
            out += [f"{family} {table}: removed {x}" for x in removed]
    for name, value in before["sysctls"].items():
        if after["sysctls"].get(name) != value:
            out.append(f"sysctl {name}: {value} -> {after['sysctls'].get(name)}")
    for path, existed in before["paths"].items():
        if after["paths"].get(path) != existed:
            out.append(f"path {path}: {'existed' if existed else 'absent'} before, not now")
    return out


# --- putting it back -------------------------------------------------------------------------------


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


def unmount_new(before: dict[str, Any], under: tuple[str, ...]) -> list[str]:
    """Lazily unmount mount points that are new since `before` and lie under one of `under`, deepest
    first (the kubelet bind-mounts its root dir onto itself; pods' volumes are tmpfs; netns are nsfs)."""
    old = set(before["mounts"])
    undone = []
    for _ in range(5):  # a mount can be stacked several times on one point
        new = [m for m in mounts() if m not in old and _under(m, under)]
        if not new:
            break
        for point in sorted(new, key=len, reverse=True):
            if _run("umount", "-l", point).returncode == 0:
                undone.append(point)
    return undone


def _kill_cgroup_processes(directory: Path) -> None:
    for procs in directory.rglob("cgroup.procs"):
        for pid in (_read(procs) or "").split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), 9)


def remove_cgroups(before: dict[str, Any]) -> list[str]:
    """Kill whatever still runs in the node's kubepods cgroups and remove them (deepest first)."""
    old = set(before["cgroups"])
    removed: list[str] = []
    if not _CGROUP_ROOT.is_dir():
        return removed
    for controller in sorted(_CGROUP_ROOT.iterdir()):
        for name in _OWN_CGROUP:
            top = controller / name
            if str(top) in old or not top.is_dir():
                continue
            _kill_cgroup_processes(top)
            dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
            for d in [*dirs, top]:
                for _ in range(50):
                    try:
                        d.rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        # a killed process leaves the cgroup a moment later
                        _kill_cgroup_processes(d)
                        time.sleep(0.1)
            removed.append(str(top))
    return removed


def delete_links(before: dict[str, Any]) -> list[str]:
    old = set(before["links"])
    deleted = []
    for name in links():
        if name not in old and _OWN_LINK.match(name) and _run("ip", "link", "delete", name).returncode == 0:
            deleted.append(name)
    return deleted


def restore_iptables(before: dict[str, Any]) -> list[str]:
    """Delete rules and chains that are new since `before` and belong to a node (KUBE-*, CNI-*, MPIJOB-*):
    first the new rules that jump to such chains from other chains, then the chains themselves."""
    undone = []
    for family, tool in (("ipv4", "iptables"), ("ipv6", "ip6tables")):
        old_tables = before["iptables"].get(family)
        now_tables = iptables()[family]
        if now_tables is None:
            continue
        for table, lines in now_tables.items():
            old = set((old_tables or {}).get(table, []))
            new_chains = [
                line[1:].split()[0]
                for line in lines
                if line.startswith(":") and line not in old and _OWN_CHAIN.match(line[1:])
            ]
            for line in lines:
                if not line.startswith("-A") or line in old:
                    continue
                parts = shlex.split(line)
                chain = parts[1]
                if chain in new_chains:
                    continue  # goes with the chain
                ours = any(c in parts for c in new_chains) or _OWN_CHAIN.match(chain)
                if ours and _run(tool, "-t", table, "-D", *parts[1:]).returncode == 0:
                    undone.append(f"{family} {table}: {line}")
            for chain in new_chains:
                _run(tool, "-t", table, "-F", chain)
            for chain in new_chains:
                if _run(tool, "-t", table, "-X", chain).returncode == 0:
                    undone.append(f"{family} {table}: chain {chain}")
            # With the nf_tables backend the first rule creates the whole table; iptables cannot delete a
            # table, nft can (only when it is new and now empty).
            if table not in (old_tables or {}) and shutil.which("nft"):
                rest = (iptables()[family] or {}).get(table, [])
                if not any(line.startswith("-A") for line in rest):
                    nft_family = "ip" if family == "ipv4" else "ip6"
                    if _run("nft", "delete", "table", nft_family, table).returncode == 0:
                        undone.append(f"{family} table {table}")
    return undone


def restore_sysctls(before: dict[str, Any]) -> list[str]:
    undone = []
    for name, value in before["sysctls"].items():
        now = _read(Path("/proc/sys") / name)
        if value is not None and now is not None and now != value:
            with contextlib.suppress(OSError):
                (Path("/proc/sys") / name).write_text(value + "\n")
                undone.append(f"{name}={value} (was {now})")
    return undone


def remove_new_paths(before: dict[str, Any]) -> list[str]:
    removed = []
    for path, existed in before["paths"].items():
        if not existed and os.path.lexists(path):
            unmount_new(before, (path,))
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            removed.append(path)
    return removed
