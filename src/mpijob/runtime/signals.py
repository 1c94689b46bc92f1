"""What a watch event says about how soon its jobs need a pass: the queue priority the controller adds them at.

Read from the event (the cached object before it, the object after), and for an MPIJob from whether it is the
echo of our own write (`runtime.record.JobRecord.echo`): our record of a decision is no news, and raised to SIGNAL
it would put the rest of that job's pass ahead of other jobs' launcher nudges.
"""

from __future__ import annotations

from mpijob.api.objects import FINISHED_PHASES, Obj, is_leaving, is_terminating, pod_ready
from mpijob.runtime.workqueue import NORMAL, SIGNAL


def event_priority(kind: str, type: str, old: Obj | None, new: Obj, own: bool = False) -> int:
    """SIGNAL for what can change who is in a launcher's discovery: any node event that reached the queue (a
    taint, a condition, a cordon, the node gone), a pod going (`pod_going`), an edit of the MPIJob
    (`mpijob_edited`) that is not our own (`own`). NORMAL for the rest: progress, our children, our echoes."""
    if kind == "Node":
        return SIGNAL
    if kind == "Pod" and pod_going(type, old, new):
        return SIGNAL
    if kind == "MPIJob" and not own and mpijob_edited(type, old, new):
        return SIGNAL
    return NORMAL


def pod_going(type: str, old: Obj | None, new: Obj) -> bool:
    """The pod is leaving: deleted (unless it was terminating already: that was the signal), starting to
    terminate, newly Failed or Succeeded, no longer Ready, or its DisruptionTarget condition changed. A worker
    marked leaving is out of discovery since its mark: its going is no news (our deletes at its deadline)."""
    if is_leaving(new):
        return False
    if type == "DELETED":
        return not is_terminating(old if old is not None else new)
    if old is None:
        return False
    if is_terminating(new) and not is_terminating(old):
        return True
    phase = (new.get("status") or {}).get("phase")
    if phase in FINISHED_PHASES and phase != (old.get("status") or {}).get("phase"):
        return True
    if pod_ready(old) and not pod_ready(new):
        return True
    return _disruption(old) != _disruption(new)


def mpijob_edited(type: str, old: Obj | None, new: Obj) -> bool:
    """A MODIFIED MPIJob whose spec, labels, annotations or deletion changed (a user's edit, or our record);
    a status write alone is not an edit. A new job is NORMAL: nothing of it is in discovery yet."""
    if type != "MODIFIED" or old is None:
        return False
    om, nm = old.get("metadata") or {}, new.get("metadata") or {}
    if any(om.get(k) != nm.get(k) for k in ("labels", "annotations", "deletionTimestamp")):
        return True
    return bool(old.get("spec") != new.get("spec"))


def _disruption(pod: Obj) -> object:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "DisruptionTarget":
            return cond.get("status")
    return None


def only_progress(old: Obj | None, new: Obj) -> bool:
    """Whether a pod event (slimmed views, runtime/slim.py) only moved the pod forward: bound to a node,
    Pending -> Running, given its IP, Ready, and nothing else changed. Such a change only adds (a host to
    discovery, a count to the status) and can wait for its siblings; anything else is not progress."""
    if old is None:
        return False
    om, nm = old.get("metadata") or {}, new.get("metadata") or {}
    if om.get("deletionTimestamp") or nm.get("deletionTimestamp"):
        return False
    if any(om.get(k) != nm.get(k) for k in ("uid", "labels", "annotations", "ownerReferences")):
        return False
    os_, ns_ = old.get("status") or {}, new.get("status") or {}
    if os_.get("reason") != ns_.get("reason") or os_.get("message") != ns_.get("message"):
        return False
    forward = (
        ("nodeName", (old.get("spec") or {}).get("nodeName"), (new.get("spec") or {}).get("nodeName")),
        ("podIP", os_.get("podIP"), ns_.get("podIP")),
    )
    if any(before != after and before is not None for _, before, after in forward):
        return False
    if os_.get("phase") != ns_.get("phase") and (os_.get("phase"), ns_.get("phase")) != ("Pending", "Running"):
        return False
    if pod_ready(old) and not pod_ready(new):
        return False
    # Other conditions (DisruptionTarget: the pod is about to go) are news, never progress.
    others = [[c for c in (v.get("conditions") or []) if c.get("type") != "Ready"] for v in (os_, ns_)]
    return others[0] == others[1]
