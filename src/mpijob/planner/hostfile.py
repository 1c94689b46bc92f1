"""Host names, the MPI hostfile and Horovod's discover_hosts.sh.

Horovod elastic runs discover_hosts.sh about once a second and expects one `host:slots` line per usable
host. A host that disappears from that output is removed gracefully at the next commit; a host whose pod
dies first makes training roll back. So the script lists only Running workers that are not leaving.
"""

from __future__ import annotations

from collections.abc import Sequence

from mpijob.api.models import MPIImplementation


def host_fqdn(pod: str, job: str, namespace: str, cluster_domain: str) -> str:
    host = f"{pod}.{job}.{namespace}.svc"
    return f"{host}.{cluster_domain}" if cluster_domain else host


def hostfile(
    hosts: Sequence[str], slots: int, implementation: MPIImplementation, launcher_host: str | None = None
) -> str:
    """One line per host, in the given order; the launcher first when it also runs as a worker."""
    lines = []
    for host in ([launcher_host] if launcher_host else []) + list(hosts):
        if implementation is MPIImplementation.OPENMPI:
            lines.append(f"{host} slots={slots}")
        else:
            lines.append(f"{host}:{slots}")
    return "".join(line + "\n" for line in lines)


def discover_hosts_script(hosts: Sequence[str], slots: int, launcher_host: str | None = None) -> str:
    lines = ["#!/bin/sh"]
    for host in ([launcher_host] if launcher_host else []) + list(hosts):
        lines.append(f"echo {host}:{slots}")
    return "\n".join(lines) + "\n"


def parse_discovery_output(output: str) -> list[tuple[str, int]]:
    """Parses what discover_hosts.sh prints, the way Horovod does (host[:slots]); used by the CLI and tests."""
    result = []
    for line in output.splitlines():
        line = line.strip()
        if not line:
            continue
        host, _, slots = line.partition(":")
        result.append((host, int(slots) if slots else 1))
    return result
