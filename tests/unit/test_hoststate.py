"""The host record of a real node: what `differences` reports (down fails on any of it)."""

from __future__ import annotations

import copy
import time
from typing import Any

from mpijob_testbed import hoststate


def record() -> dict[str, Any]:
    return {
        "mounts": ["/", "/proc"],
        "links": ["eth0", "lo"],
        "iptables": {"ipv4": {"filter": [":INPUT ACCEPT"]}, "ipv6": None},
        "sysctls": {"net/ipv4/ip_forward": "0", "vm/overcommit_memory": "0"},
        "cgroups": ["/sys/fs/cgroup/cpu/user"],
        "paths": {"/var/lib/kubelet": False, "/run/containerd": False},
    }


def test_an_unchanged_host_has_no_differences() -> None:
    assert hoststate.differences(record(), record()) == []


def test_every_kind_of_leftover_is_reported() -> None:
    after = copy.deepcopy(record())
    after["mounts"].append("/var/lib/kubelet")
    after["links"].append("mpijobtb0")
    after["iptables"]["ipv4"]["nat"] = [":PREROUTING ACCEPT", "-A PREROUTING -i mpijobtb0 -j MPIJOB-TESTBED"]
    after["sysctls"]["net/ipv4/ip_forward"] = "1"
    after["cgroups"].append("/sys/fs/cgroup/cpu/kubepods")
    after["paths"]["/run/containerd"] = True
    found = hoststate.differences(record(), after)
    assert "mounts: added /var/lib/kubelet" in found
    assert "links: added mpijobtb0" in found
    assert "ipv4 nat: added -A PREROUTING -i mpijobtb0 -j MPIJOB-TESTBED" in found
    assert "sysctl net/ipv4/ip_forward: 0 -> 1" in found
    assert "cgroups: added /sys/fs/cgroup/cpu/kubepods" in found
    assert "path /run/containerd: absent before, not now" in found
    assert len(found) == 7  # the nat table's chain line too


def test_something_gone_that_was_there_is_reported_too() -> None:
    after = copy.deepcopy(record())
    after["links"].remove("eth0")
    assert hoststate.differences(record(), after) == ["links: removed eth0"]


def test_the_capture_of_this_host_is_stable_between_two_calls() -> None:
    # `make test` runs the real-node tests beside this one, and their nodes' containers add and remove mounts
    # and cgroups on this host: two captures may differ for a moment. What must not happen is that they never
    # agree (a counter or an ordering in the capture itself), so two consecutive captures must agree within
    # a few seconds.
    seen = []
    previous = hoststate.capture()
    for _ in range(40):
        current = hoststate.capture()
        seen = hoststate.differences(previous, current)
        if not seen:
            return
        previous = current
        time.sleep(0.25)
    raise AssertionError(f"no two consecutive captures agreed; the last differences: {seen}")


def test_mounts_outside_the_nodes_roots_are_not_the_testbeds_to_report() -> None:
    """A chroot another program mounts while the testbed runs: not a leftover of ours; one under the
    kubelet's root is."""
    after = copy.deepcopy(record())
    after["mounts"] += ["/tmp/someone-elses-chroot/proc", "/var/lib/kubelet/pods/x/volumes/tmpfs"]
    roots = ("/var/lib/kubelet", "/run/containerd")
    assert hoststate.differences(record(), after, mounts_under=roots) == [
        "mounts: added /var/lib/kubelet/pods/x/volumes/tmpfs"
    ]
    assert len(hoststate.differences(record(), after)) == 2
