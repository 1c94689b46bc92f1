"""kwok Stage objects: how fake nodes and pods move through their lifecycle in the testbed.

Written to `<state dir>/kwok.yaml` and passed to kwok with --config. Differences from kwok's stock stages:
  * pods never complete on their own: they stay Running until a test sets the annotation
    `testbed.mpijob.io/complete` to `Succeeded` or `Failed` (see `mpijob_testbed.pods.complete_pod`),
    because launchers and workers of an MPIJob are long-running and their end is what tests control;
  * a deleted pod keeps running until its deletionTimestamp (i.e. for its full grace period), then is
    marked Failed with exit code 137 (killed after the grace period, as the kubelet reports it) and removed;
    a pod that had already finished is removed at once;
  * nodes get the generous capacity and the per-node internal IP the testbed chose.
"""

from __future__ import annotations

from typing import Any

import yaml

COMPLETE_ANNOTATION = "testbed.mpijob.io/complete"
INTERNAL_IP_ANNOTATION = "testbed.mpijob.io/internal-ip"

# Defaults for a node created without capacity (the testbed's own nodes always carry theirs).
DEFAULT_CAPACITY = {"cpu": "32", "memory": "256Gi", "pods": "110", "ephemeral-storage": "500Gi"}

# Heartbeat every 20-25 s, well inside the node-lifecycle controller's 50 s grace period. kwok also
# renews the node Leases itself, which is what the controller primarily watches.
_HEARTBEAT_MS = 20_000
_HEARTBEAT_JITTER_MS = 25_000


def _flow(mapping: dict[str, str]) -> str:
    return "{" + ", ".join(f'{k}: "{v}"' for k, v in mapping.items()) + "}"


_NODE_CONDITIONS = """\
conditions:
{{- range NodeConditions }}
- type: {{ .type | Quote }}
  status: {{ .status | Quote }}
  reason: {{ .reason | Quote }}
  message: {{ .message | Quote }}
  lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $since | Quote }}
{{- end }}
"""

_NODE_INITIALIZE = (
    """\
{{- $now := Now }}
{{- $since := or .metadata.creationTimestamp $now }}
{{- $annotations := or .metadata.annotations dict }}
"""
    + _NODE_CONDITIONS
    + f"""\
addresses:
- type: InternalIP
  address: {{{{ or (index $annotations "{INTERNAL_IP_ANNOTATION}") NodeIP | Quote }}}}
- type: Hostname
  address: {{{{ .metadata.name | Quote }}}}
{{{{- if not .status.capacity }}}}
capacity: {_flow(DEFAULT_CAPACITY)}
{{{{- end }}}}
{{{{- if not .status.allocatable }}}}
allocatable: {_flow(DEFAULT_CAPACITY)}
{{{{- end }}}}
nodeInfo:
  architecture: amd64
  operatingSystem: linux
  osImage: mpijob-testbed
  kernelVersion: {{{{ printf "kwok-%s" Version | Quote }}}}
  containerRuntimeVersion: {{{{ printf "kwok://%s" Version | Quote }}}}
  kubeletVersion: {{{{ printf "kwok-%s" Version | Quote }}}}
  kubeProxyVersion: {{{{ printf "kwok-%s" Version | Quote }}}}
  machineID: {{{{ .metadata.name | Quote }}}}
  systemUUID: {{{{ .metadata.uid | Quote }}}}
  bootID: {{{{ .metadata.uid | Quote }}}}
phase: Running
"""
)

_NODE_HEARTBEAT = (
    """\
{{- $now := Now }}
{{- $since := or .metadata.creationTimestamp $now }}
"""
    + _NODE_CONDITIONS
)

# The identity of one container status, inside a `range` over the pod's (init) containers.
_CONTAINER = """\
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  imageID: ""
  containerID: {{ printf "kwok://%s" .name | Quote }}
"""

_POD_READY = (
    """\
{{- $now := Now }}
phase: Running
startTime: {{ $now | Quote }}
{{- with NodeIPsWith .spec.nodeName }}
hostIP: {{ index . 0 | Quote }}
hostIPs:
{{- range . }}
- ip: {{ . | Quote }}
{{- end }}
{{- end }}
{{- with PodIPsWith .spec.nodeName (or .spec.hostNetwork false) .metadata.uid .metadata.name .metadata.namespace }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{- range . }}
- ip: {{ . | Quote }}
{{- end }}
{{- end }}
conditions:
{{- range list "PodReadyToStartContainers" "Initialized" "ContainersReady" "Ready" }}
- type: {{ . }}
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
{{- end }}
{{- range .spec.readinessGates }}
- type: {{ .conditionType | Quote }}
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
{{- end }}
containerStatuses:
{{- range .spec.containers }}
"""
    + _CONTAINER
    + """\
  ready: true
  started: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
{{- end }}
{{- with .spec.initContainers }}
initContainerStatuses:
{{- range . }}
"""
    + _CONTAINER
    + """\
  restartCount: 0
{{- if eq (or .restartPolicy "") "Always" }}
  ready: true
  started: true
  state:
    running:
      startedAt: {{ $now | Quote }}
{{- else }}
  ready: true
  started: false
  state:
    terminated:
      exitCode: 0
      reason: Completed
      startedAt: {{ $now | Quote }}
      finishedAt: {{ $now | Quote }}
{{- end }}
{{- end }}
{{- end }}
"""
)


def _terminated_container(exit_code: int, reason: str) -> str:
    """Status template of one container (inside a `range`) that ran from `$started` and ended `$now`."""
    return _CONTAINER + (
        "  ready: false\n"
        "  started: false\n"
        "  restartCount: 0\n"
        "  state:\n"
        "    terminated:\n"
        f"      exitCode: {exit_code}\n"
        f"      reason: {reason}\n"
        "      startedAt: {{ $started | Quote }}\n"
        "      finishedAt: {{ $now | Quote }}\n"
    )


def _terminated(phase: str, exit_code: int, reason: str) -> str:
    """Status template: every container terminated with `exit_code` (init containers with 0, Completed)."""
    head = """\
{{- $now := Now }}
{{- $started := or .status.startTime $now }}
"""
    conditions = f"""\
phase: {phase}
conditions:
- type: Ready
  status: "False"
  reason: PodCompleted
  lastTransitionTime: {{{{ $now | Quote }}}}
- type: ContainersReady
  status: "False"
  reason: PodCompleted
  lastTransitionTime: {{{{ $now | Quote }}}}
"""
    containers = (
        "containerStatuses:\n{{- range .spec.containers }}\n"
        + _terminated_container(exit_code, reason)
        + "{{- end }}\n{{- with .spec.initContainers }}\ninitContainerStatuses:\n{{- range . }}\n"
        + _terminated_container(0, "Completed")
        + "{{- end }}\n{{- end }}\n"
    )
    return head + conditions + containers


def _jq(key: str, operator: str, *values: str) -> dict[str, Any]:
    expr: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        expr["values"] = list(values)
    return {"jq": expr}


def _stage(
    name: str,
    kind: str,
    match: list[dict[str, Any]],
    steps: list[dict[str, Any]],
    *,
    delay: dict[str, Any] | None = None,
    immediate_next: bool = False,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": kind},
        "selector": {"matchExpressions": match},
    }
    if delay is not None:
        spec["delay"] = delay
    spec["steps"] = steps
    if immediate_next:
        spec["immediateNextStage"] = True
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name}, "spec": spec}


def _status_patch(template: str) -> dict[str, Any]:
    return {"patch": {"subresource": "status", "root": "status", "template": template}}


_READY = '.status.conditions.[] | select(.type == "Ready") | .status'
_NOT_DELETED = _jq(".metadata.deletionTimestamp", "DoesNotExist")
_TERMINAL = ("Succeeded", "Failed")


def stage_objects() -> list[dict[str, Any]]:
    """All Stage objects of the testbed, in the order they are written to the config."""
    stages = [
        _stage(
            "node-initialize",
            "Node",
            [_jq(_READY, "NotIn", "True")],
            [_status_patch(_NODE_INITIALIZE)],
        ),
        _stage(
            "node-heartbeat",
            "Node",
            [_jq(".status.phase", "In", "Running"), _jq(_READY, "In", "True")],
            [_status_patch(_NODE_HEARTBEAT)],
            delay={"durationMilliseconds": _HEARTBEAT_MS, "jitterDurationMilliseconds": _HEARTBEAT_JITTER_MS},
            immediate_next=True,
        ),
        _stage(
            "pod-ready",
            "Pod",
            [_NOT_DELETED, _jq(".status.phase", "In", "Pending"), _jq(_READY, "NotIn", "True")],
            [_status_patch(_POD_READY)],
        ),
    ]
    for phase, code, reason in (("Succeeded", 0, "Completed"), ("Failed", 1, "Error")):
        stages.append(
            _stage(
                f"pod-complete-{phase.lower()}",
                "Pod",
                [
                    _NOT_DELETED,
                    _jq(".status.phase", "In", "Running"),
                    _jq(f'.metadata.annotations["{COMPLETE_ANNOTATION}"]', "In", phase),
                ],
                [_status_patch(_terminated(phase, code, reason))],
            )
        )
    # Deletion in two steps so each reacts to the previous one's status change: a running pod is killed
    # when its grace period ends (deletionTimestamp), then the finished pod is removed.
    until_deletion = {"durationMilliseconds": 0, "durationFrom": {"jq": {"expression": ".metadata.deletionTimestamp"}}}
    stages.append(
        _stage(
            "pod-kill",
            "Pod",
            [_jq(".metadata.deletionTimestamp", "Exists"), _jq(".status.phase", "NotIn", *_TERMINAL)],
            [_status_patch(_terminated("Failed", 137, "Error"))],
            delay=until_deletion,
        )
    )
    stages.append(
        _stage(
            "pod-remove",
            "Pod",
            [_jq(".metadata.deletionTimestamp", "Exists"), _jq(".status.phase", "In", *_TERMINAL)],
            [{"delete": True}],
            delay=until_deletion,
        )
    )
    return stages


class _LiteralDumper(yaml.SafeDumper):
    """Writes multi-line strings (the templates) as literal blocks so the config stays readable."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_LiteralDumper.add_representer(str, _represent_str)


def render_config() -> str:
    """The kwok --config file: every stage as one YAML document."""
    return yaml.dump_all(stage_objects(), Dumper=_LiteralDumper, sort_keys=False, width=200)
