"""Two or more real nodes on one host must not share what a node owns (no cluster needed: the layouts and
configs `up --real-nodes N` writes)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from mpijob_testbed import hoststate, realnode
from mpijob_testbed.certs import Pki
from mpijob_testbed.paths import Layout

NODES = [realnode.node_layout(Layout(Path("/tmp/tb")), i) for i in range(1, realnode.MAX_REAL_NODES + 1)]


def test_each_node_has_its_own_name_address_socket_directory_and_processes() -> None:
    for attr in ("name", "ip", "socket", "root", "kubelet_dir", "cni_conf_dir"):
        values = [getattr(n, attr) for n in NODES]
        assert len(set(values)) == len(values), attr
    components = [n.component(c) for n in NODES for c in realnode.NODE_COMPONENTS]
    assert len(set(components)) == len(components)
    # real-1 keeps the one-node layout, so a one-node testbed is unchanged.
    assert NODES[0].root == Path("/tmp/tb/node") and NODES[0].component("kubelet") == "kubelet"
    assert (NODES[0].name, NODES[0].ip) == (realnode.NODE_NAME, realnode.NODE_IP)


def test_pod_ranges_are_disjoint_inside_the_bridge_subnet_and_miss_the_node_addresses() -> None:
    subnet = ipaddress.ip_network(realnode.POD_SUBNET)
    taken: set[ipaddress.IPv4Address] = set()
    for node in NODES:
        first, last = (ipaddress.IPv4Address(a) for a in node.pod_range())
        addresses = {ipaddress.IPv4Address(i) for i in range(int(first), int(last) + 1)}
        assert all(a in subnet for a in addresses)
        assert len(addresses) >= 20 + 1  # maxPods, plus one
        assert not addresses & taken
        taken |= addresses
    assert not taken & {ipaddress.IPv4Address(n.ip) for n in NODES}
    assert subnet.broadcast_address not in taken


def test_cni_configs_use_the_one_bridge_and_gateway_with_separate_ipam_data() -> None:
    configs = [realnode._cni_config(n) for n in NODES]
    assert {c["bridge"] for c in configs} == {realnode.BRIDGE}
    assert {c["ipam"]["ranges"][0][0]["gateway"] for c in configs} == {realnode.NODE_IP}
    data_dirs = [c["ipam"]["dataDir"] for c in configs]
    assert len(set(data_dirs)) == len(data_dirs)


def test_kubelets_listen_on_their_own_address_and_only_real_1_uses_the_default_cgroup_root() -> None:
    pki = Pki(Path("/tmp/tb/pki"))
    configs = [realnode._kubelet_config(n, pki, 10250 + n.index, 10260 + n.index) for n in NODES]
    assert [c["address"] for c in configs] == [n.ip for n in NODES]
    assert "cgroupRoot" not in configs[0]
    roots = [c["cgroupRoot"] for c in configs[1:]]
    assert len(set(roots)) == len(roots)
    assert all(str(c["containerRuntimeEndpoint"]).endswith(str(n.socket)) for c, n in zip(configs, NODES, strict=True))


def test_the_host_record_treats_every_nodes_cgroup_root_as_the_testbeds() -> None:
    """`down` removes, and the host comparison looks inside, each node's cgroup root (hoststate)."""
    for node in NODES[1:]:
        assert node.cgroup_root is not None
        top = node.cgroup_root.lstrip("/")
        assert top in hoststate._OWN_CGROUP
        assert hoststate._recorded_cgroup(f"/sys/fs/cgroup/memory/{top}/kubepods/besteffort")
