"""The testbed's fake nodes and async helpers to disturb them the way a cloud does.

Node `node-<i>` (i from 1) carries:
  kubernetes.io/hostname=node-<i>, kubernetes.io/os=linux, kubernetes.io/arch=amd64,
  topology.kubernetes.io/region=testbed-1, topology.kubernetes.io/zone=zone-a (odd i) / zone-b (even i),
  node.kubernetes.io/instance-type=r5.8xlarge (32 vCPU / 256 GiB, matching the allocatable),
  karpenter.sh/capacity-type and node.kubernetes.io/capacity-type = spot (even i) / on-demand (odd i),
  annotation kwok.x-k8s.io/node=fake (kwok manages it), its own pod CIDR and internal IP.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable
from typing import Any

from kubernetes_asyncio.client import ApiClient, CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException

from mpijob_testbed.components import KWOK_NODE_ANNOTATION, KWOK_NODE_ANNOTATION_VALUE
from mpijob_testbed.stages import DEFAULT_CAPACITY, INTERNAL_IP_ANNOTATION

NODE_PREFIX = "node-"
ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
INSTANCE_TYPE = "r5.8xlarge"
# Both spellings: Karpenter's label is what EKS clusters carry; the node.kubernetes.io one is the neutral
# form some tools read. Both always hold the same value.
CAPACITY_TYPE_LABELS = ("karpenter.sh/capacity-type", "node.kubernetes.io/capacity-type")
SPOT = "spot"
ON_DEMAND = "on-demand"
# The taint aws-node-termination-handler puts on a spot node that received an interruption notice.
SPOT_ITN_TAINT = "aws-node-termination-handler/spot-itn"

_NODE_IPS = ipaddress.ip_network("10.1.0.0/16")
_POD_CIDRS = ipaddress.ip_network("10.128.0.0/9")


def node_name(index: int) -> str:
    return f"{NODE_PREFIX}{index}"


def node_index(name: str) -> int | None:
    """i for `node-<i>`, None for other names."""
    suffix = name.removeprefix(NODE_PREFIX)
    return int(suffix) if name.startswith(NODE_PREFIX) and suffix.isdigit() else None


def node_manifest(name: str, *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Node object kwok will manage. Zone, capacity type, IP and pod CIDR follow from the index in
    `node-<i>`; other names get zone-a, on-demand and kwok's shared pod range. `labels` are added last."""
    index = node_index(name)
    odd = index is None or index % 2 == 1
    capacity_type = ON_DEMAND if odd else SPOT
    all_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        REGION_LABEL: "testbed-1",
        ZONE_LABEL: "zone-a" if odd else "zone-b",
        INSTANCE_TYPE_LABEL: INSTANCE_TYPE,
        **dict.fromkeys(CAPACITY_TYPE_LABELS, capacity_type),
        "type": "kwok",
        **(labels or {}),
    }
    annotations = {KWOK_NODE_ANNOTATION: KWOK_NODE_ANNOTATION_VALUE, "node.alpha.kubernetes.io/ttl": "0"}
    spec: dict[str, Any] = {}
    if index is not None and 0 < index < _NODE_IPS.num_addresses - 1:
        annotations[INTERNAL_IP_ANNOTATION] = str(_NODE_IPS[index])
        cidr = str(ipaddress.ip_network((int(_POD_CIDRS.network_address) + index * 256, 24)))
        spec = {"podCIDR": cidr, "podCIDRs": [cidr]}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels, "annotations": annotations},
        "spec": spec,
        # Nodes may be created with status; kwok's initialize stage then only adds conditions and addresses.
        "status": {"capacity": dict(DEFAULT_CAPACITY), "allocatable": dict(DEFAULT_CAPACITY)},
    }


async def create_node(api: ApiClient, name: str, *, labels: dict[str, str] | None = None) -> None:
    """Create one more fake node (kwok makes it Ready within a second or two)."""
    # The client accepts plain dicts as bodies; its stubs only name the model classes.
    body: Any = node_manifest(name, labels=labels)
    await CoreV1Api(api).create_node(body)


async def _update_spec(api: ApiClient, node: str, change: Callable[[dict[str, Any]], None]) -> None:
    """Read-modify-write of a node's spec with optimistic concurrency: `change(spec_dict)` edits in place
    and the patch carries the resourceVersion read, so a concurrent writer causes a retry, not a lost update.
    (Node taints are an atomic list in strategic merge patches: the patch replaces the whole list.)"""
    v1 = CoreV1Api(api)
    for _ in range(10):
        raw = await v1.read_node(node)
        obj = api.sanitize_for_serialization(raw)
        spec = obj.get("spec") or {}
        before = repr(spec)
        change(spec)
        if repr(spec) == before:
            return
        body = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "spec": spec}
        try:
            await v1.patch_node(node, body)
            return
        except ApiException as exc:
            if exc.status != 409:
                raise
        await asyncio.sleep(0.05)
    raise RuntimeError(f"node {node}: too many conflicting updates")


async def taint_node(
    api: ApiClient, node: str, key: str = SPOT_ITN_TAINT, value: str = "", effect: str = "NoSchedule"
) -> None:
    """Add (or replace) the taint `key=value:effect` on `node`."""

    def change(spec: dict[str, Any]) -> None:
        taints = [t for t in spec.get("taints") or [] if (t["key"], t["effect"]) != (key, effect)]
        taint = {"key": key, "effect": effect}
        if value:
            taint["value"] = value
        spec["taints"] = [*taints, taint]

    await _update_spec(api, node, change)


async def untaint_node(api: ApiClient, node: str, key: str = SPOT_ITN_TAINT, effect: str | None = None) -> None:
    """Remove taints with `key` (and `effect`, when given) from `node`."""

    def change(spec: dict[str, Any]) -> None:
        taints = spec.get("taints") or []
        kept = [t for t in taints if t["key"] != key or (effect is not None and t["effect"] != effect)]
        if len(kept) != len(taints):
            spec["taints"] = kept or None

    await _update_spec(api, node, change)


async def cordon_node(api: ApiClient, node: str) -> None:
    """Mark `node` unschedulable, as `kubectl cordon` does."""
    await CoreV1Api(api).patch_node(node, {"spec": {"unschedulable": True}})


async def uncordon_node(api: ApiClient, node: str) -> None:
    await CoreV1Api(api).patch_node(node, {"spec": {"unschedulable": None}})


async def delete_node(api: ApiClient, node: str) -> None:
    """Delete the Node object, as a cloud does when the machine is gone; its pods are then removed by the
    pod garbage collector. A node that is already gone is fine."""
    try:
        await CoreV1Api(api).delete_node(node)
    except ApiException as exc:
        if exc.status != 404:
            raise


HOSTNAME_LABEL = "kubernetes.io/hostname"


def spread_evenly(labels: dict[str, str], *, honor_taints: bool = False) -> list[dict[str, Any]]:
    """topologySpreadConstraints: the pods matching `labels` one per node in turn (skew at most 1).
    `honor_taints`: a tainted or cordoned node is no spreading domain, so replacements may all go elsewhere."""
    constraint: dict[str, Any] = {
        "maxSkew": 1,
        "topologyKey": HOSTNAME_LABEL,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": labels},
    }
    if honor_taints:
        constraint["nodeTaintsPolicy"] = "Honor"
    return [constraint]


def spread_over(nodes: list[str], labels: dict[str, str], *, honor_taints: bool = False) -> dict[str, Any]:
    """Pod spec fields that keep pods on `nodes` only and spread them evenly (see `spread_evenly`)."""
    term = {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": list(nodes)}]}
    return {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}},
        "topologySpreadConstraints": spread_evenly(labels, honor_taints=honor_taints),
    }
