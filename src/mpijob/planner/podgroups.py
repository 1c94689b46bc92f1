"""Gang scheduling: the PodGroup of an MPIJob, and what its pods carry so the gang scheduler finds it.

Two gang schedulers, chosen by the operator's --gang-scheduling flag as in the reference operator:
- "volcano": a `scheduling.volcano.sh/v1beta1` PodGroup; pods get schedulerName "volcano" and the annotation
  `scheduling.k8s.io/group-name`.
- any other non-empty value: the scheduler-plugins coscheduling plugin. The value is the schedulerName of the
  scheduler profile that runs it; the PodGroup is `scheduling.x-k8s.io/v1alpha1` and pods get the label
  `scheduling.x-k8s.io/pod-group`.

The PodGroup is named like the job and owned by it. It exists while the job runs (not suspended, not
finished): Kueue preempts by suspending, and a stale group would hold the gang's place in the scheduler.

Elastic jobs: minMember is `minReplicas` (+1 for the launcher) unless schedulingPolicy.minAvailable says
otherwise, and never more than the pods the job has now (replicas + launcher). So a job shrunk by a node
termination still satisfies its gang, and its replacement workers are schedulable one by one.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from mpijob.api.models import MPIJobSpec
from mpijob.planner import children
from mpijob.planner.actions import Create, Delete, Patch, Write
from mpijob.planner.snapshot import Obj, meta, name_of, resource_version, uid_of

VOLCANO = "volcano"
VOLCANO_API = "scheduling.volcano.sh/v1beta1"
SCHEDULER_PLUGINS_API = "scheduling.x-k8s.io/v1alpha1"
# Pod metadata that ties a pod to its group.
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
SCHEDULER_PLUGINS_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
KIND = "PodGroup"


def api_version(gang_scheduler: str) -> str:
    return VOLCANO_API if gang_scheduler == VOLCANO else SCHEDULER_PLUGINS_API


def scheduler_name(gang_scheduler: str) -> str:
    return VOLCANO if gang_scheduler == VOLCANO else gang_scheduler


# -- quantities ------------------------------------------------------------------------------------------

_SUFFIXES: dict[str, Decimal] = {
    "Ki": Decimal(1024),
    "Mi": Decimal(1024) ** 2,
    "Gi": Decimal(1024) ** 3,
    "Ti": Decimal(1024) ** 4,
    "Pi": Decimal(1024) ** 5,
    "Ei": Decimal(1024) ** 6,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
}


def parse_quantity(value: object) -> Decimal | None:
    """A Kubernetes resource quantity ("500m", "2Gi", "1e3", 4) as an exact number; None if malformed."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return Decimal(str(value))
    if not isinstance(value, str) or not value or len(value) > 64:
        return None
    text = value.strip()
    for suffix in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E"):
        if text.endswith(suffix):
            number, scale = text[: -len(suffix)], _SUFFIXES[suffix]
            break
    else:
        number, scale = text, Decimal(1)
    if not number or any(ch not in "0123456789.+-eE" for ch in number):
        return None
    try:
        parsed = Decimal(number) * scale
    except InvalidOperation:
        return None
    return parsed if parsed.is_finite() and parsed >= 0 else None


def format_quantity(value: Decimal) -> str:
    """A canonical quantity string: whole binary multiples as Gi/Mi/Ki, whole numbers plain, else milli/nano."""
    if value == value.to_integral_value():
        whole = int(value)
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            unit = int(_SUFFIXES[suffix])
            if whole >= unit and whole % unit == 0:
                return f"{whole // unit}{suffix}"
        return str(whole)
    milli = value * 1000
    if milli == milli.to_integral_value():
        return f"{int(milli)}m"
    return f"{int((value * Decimal('1e9')).to_integral_value())}n"


def _same_resources(a: object, b: object) -> bool:
    """Resource lists compared by value ("1Gi" == "1024Mi"), as the reference compares them semantically."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return bool(not a and not b)
    if set(a) != set(b):
        return False
    return all(parse_quantity(a[k]) is not None and parse_quantity(a[k]) == parse_quantity(b[k]) for k in a)


# -- the desired PodGroup ----------------------------------------------------------------------------------


def member_count(spec: MPIJobSpec) -> int:
    """Pods the job has when whole: its workers plus the launcher."""
    return spec.worker_replicas + 1


def min_member(spec: MPIJobSpec) -> int:
    """schedulingPolicy.minAvailable, else workers + 1 (elastic: minReplicas + 1), capped at the pods the job
    has now, so a shrunk elastic job (or a lowered replicas) never leaves an unsatisfiable gang behind."""
    policy = spec.run_policy.scheduling_policy
    if policy is not None and policy.min_available is not None:
        wanted = policy.min_available
    elif spec.elastic_policy is not None:
        wanted = spec.elastic_policy.min_replicas + 1
    else:
        wanted = member_count(spec)
    return min(wanted, member_count(spec))


def _pod_requests(template: dict[str, Any]) -> dict[str, Decimal]:
    """Per-pod requests of a template: requests, else limits, summed over its containers (as the reference)."""
    total: dict[str, Decimal] = {}
    for container in (template.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        merged = dict(resources.get("limits") or {})
        merged.update(resources.get("requests") or {})
        for name, raw in merged.items():
            quantity = parse_quantity(raw)
            if quantity is not None:
                total[str(name)] = total.get(str(name), Decimal(0)) + quantity
    return total


def min_resources(spec: MPIJobSpec, members: int) -> dict[str, str] | None:
    """schedulingPolicy.minResources, else the requests of the launcher plus members-1 workers."""
    policy = spec.run_policy.scheduling_policy
    if policy is not None and policy.min_resources is not None:
        return {str(k): str(v) for k, v in policy.min_resources.items()}
    if members <= 0:
        return None
    total: dict[str, Decimal] = {}
    parts = [(spec.launcher.template, 1)]
    if spec.worker is not None:
        parts.append((spec.worker.template, max(members - 1, 0)))
    for template, count in parts:
        for name, quantity in _pod_requests(template).items():
            total[name] = total.get(name, Decimal(0)) + quantity * count
    return {name: format_quantity(value) for name, value in sorted(total.items())} or None


def priority_class(spec: MPIJobSpec) -> str | None:
    policy = spec.run_policy.scheduling_policy
    if policy is not None and policy.priority_class:
        return policy.priority_class
    for rspec in (spec.launcher, spec.worker):
        if rspec is not None:
            name = (rspec.template.get("spec") or {}).get("priorityClassName")
            if name:
                return str(name)
    return None


def desired_spec(job: Obj, spec: MPIJobSpec, gang_scheduler: str) -> Obj:
    members = min_member(spec)
    resources = min_resources(spec, members)
    out: Obj = {"minMember": members}
    if resources:
        out["minResources"] = resources
    policy = spec.run_policy.scheduling_policy
    if gang_scheduler == VOLCANO:
        queue = (meta(job).get("annotations") or {}).get(VOLCANO_QUEUE_ANNOTATION)
        if policy is not None and policy.queue:
            queue = policy.queue
        if queue:
            out["queue"] = queue
        pc = priority_class(spec)
        if pc:
            out["priorityClassName"] = pc
    elif policy is not None and policy.schedule_timeout_seconds is not None:
        # Unset, the coscheduling plugin uses its own permit timeout; the reference writes 0 here, which the
        # plugin reads as "do not wait" and so rejects any gang whose pods arrive one by one.
        out["scheduleTimeoutSeconds"] = policy.schedule_timeout_seconds
    return out


def pod_group(job: Obj, spec: MPIJobSpec, gang_scheduler: str) -> Obj:
    name = name_of(job)
    return {
        "apiVersion": api_version(gang_scheduler),
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": meta(job).get("namespace"),
            "labels": children.default_labels(name),
            "ownerReferences": [children.owner_reference(job)],
        },
        "spec": desired_spec(job, spec, gang_scheduler),
    }


# -- pods ---------------------------------------------------------------------------------------------------


def decorate(metadata: Obj, pod_spec: Obj, job_name: str, gang_scheduler: str) -> None:
    """Points a pod (or pod template) at the gang scheduler and its group. Overrides a schedulerName the
    template set, as the reference does: a gang member scheduled by another scheduler would break the gang."""
    if not gang_scheduler:
        return
    pod_spec["schedulerName"] = scheduler_name(gang_scheduler)
    if gang_scheduler == VOLCANO:
        metadata["annotations"] = {**(metadata.get("annotations") or {}), VOLCANO_GROUP_ANNOTATION: job_name}
    else:
        metadata["labels"] = {**(metadata.get("labels") or {}), SCHEDULER_PLUGINS_GROUP_LABEL: job_name}


def group_labels(job_name: str, gang_scheduler: str) -> dict[str, str]:
    """Labels the launcher template must keep when its scheduling directives are synced on resume."""
    if gang_scheduler and gang_scheduler != VOLCANO:
        return {SCHEDULER_PLUGINS_GROUP_LABEL: job_name}
    return {}


def group_annotations(job_name: str, gang_scheduler: str) -> dict[str, str]:
    if gang_scheduler == VOLCANO:
        return {VOLCANO_GROUP_ANNOTATION: job_name}
    return {}


# -- the plan -------------------------------------------------------------------------------------------------


def plan_pod_group(
    job: Obj, spec: MPIJobSpec, current: Obj | None, gang_scheduler: str, *, wanted: bool
) -> tuple[list[Write], bool]:
    """Actions that bring the job's PodGroup to what it should be, and whether the name is held by an object
    this job does not own (a conflict: left untouched, reported by the caller). No write when it matches."""
    if not gang_scheduler:
        return [], False
    name = name_of(job)
    version = api_version(gang_scheduler)
    if current is not None and not _owned(current, job):
        return [], True
    if not wanted:
        if current is None:
            return [], False
        return [Delete(version, KIND, name, uid=uid_of(current))], False
    desired = pod_group(job, spec, gang_scheduler)
    if current is None:
        return [Create(desired)], False
    have = current.get("spec") or {}
    want = desired["spec"]
    patch: Obj = {}
    for key in ("minMember", "queue", "priorityClassName", "scheduleTimeoutSeconds"):
        if have.get(key) != want.get(key):
            patch[key] = want.get(key)
    if not _same_resources(have.get("minResources"), want.get("minResources")):
        current_resources = have.get("minResources")
        old: dict[str, Any] = current_resources if isinstance(current_resources, dict) else {}
        new: dict[str, Any] = want.get("minResources") or {}
        # A merge patch keeps keys it does not name: null the ones that must go.
        patch["minResources"] = {**{k: None for k in old if k not in new}, **new} if new else None
    if not patch:
        return [], False
    # Our labels ride along: the cache keeps a PodGroup's spec only while it carries them.
    body = {"metadata": {"labels": children.default_labels(name)}, "spec": patch}
    return [Patch(version, KIND, name, body, resource_version=resource_version(current))], False


def _owned(obj: Obj, job: Obj) -> bool:
    for ref in meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return bool(ref.get("uid") == uid_of(job))
    return False
