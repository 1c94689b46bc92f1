"""Local Kubernetes testbed: a real control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler) with kwok fake nodes, started as detached processes. See docs/testbed.md.

Independent of the operator (`mpijob.runtime`); tests and the CLI use it.
"""

from mpijob_testbed.client import kubeconfig_path, load_api_client
from mpijob_testbed.cluster import Status, Testbed, down, is_running, status, up
from mpijob_testbed.errors import TestbedError
from mpijob_testbed.nodes import (
    SPOT_ITN_TAINT,
    cordon_node,
    create_node,
    delete_node,
    taint_node,
    uncordon_node,
    untaint_node,
)
from mpijob_testbed.pods import complete_pod
from mpijob_testbed.stages import COMPLETE_ANNOTATION
from mpijob_testbed.waiting import wait_until

__all__ = [
    "COMPLETE_ANNOTATION",
    "SPOT_ITN_TAINT",
    "Status",
    "Testbed",
    "TestbedError",
    "complete_pod",
    "cordon_node",
    "create_node",
    "delete_node",
    "down",
    "is_running",
    "kubeconfig_path",
    "load_api_client",
    "status",
    "taint_node",
    "uncordon_node",
    "untaint_node",
    "up",
    "wait_until",
]
