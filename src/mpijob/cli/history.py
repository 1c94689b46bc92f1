"""`mpijob history JOB` (and `kubectl mpijob history JOB`): when an elastic job shrank or grew, why, and which
workers, read from what the operator already records: its Events on the MPIJob (NodeTerminating,
WorkersDisrupted, WorkersLeaving, WorkerLost, WorkerRemoved, FloorHeld, the worker pods it created and
deleted, the regrow Events, Restarted in Restart mode), the BelowMinReplicas condition's transitions, and the
leaving-since/reason annotations of workers still in their grace period. Nothing is inferred that was not written down.

Events live as long as the API server keeps them (`--event-ttl`, 1 h by default): older history is gone.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import asdict, dataclass
from typing import Any

from mpijob.api import constants as c
from mpijob.api.objects import resource_version, resource_version_number
from mpijob.cli.kube import client, get_job, namespace_arg, print_document, run_command, worker_pods
from mpijob.kube.resources import collection_path

# Event reason -> what happened to the job's size, for the reasons the elastic code writes.
KINDS = {
    "NodeTerminating": "shrink",
    "WorkersDisrupted": "shrink",
    "WorkersLeaving": "shrink",
    "WorkerLost": "shrink",
    "WorkerRemoved": "removed",
    "SuccessfulDeletePod": "removed",
    # The executor posts one Event per batch of creates: "Created Service pi; ...; Created Pod pi-worker-0, ..."
    "SuccessfulCreate": "grow",
    "SuccessfulCreatePod": "grow",
    # A new job's first creates ride on its MPIJobCreated Event: "MPIJob ns/pi is created. Created Service pi; ..."
    c.JOB_CREATED_REASON: "grow",
    "FloorHeld": "floor",
    "InvalidWorkerToDelete": "refused",
    "RegrowProbe": "regrow",
    "RegrowBackoff": "regrow",
    "Regrown": "grow",
    # Restart mode: the MPI run restarted on the new host set (planner/restart.py).
    "Restarted": "restart",
}
# "node X is terminating (taint K)", "are being disrupted (DisruptionTarget: ...)", "left discovery (scale-down)"
_SIGNAL = re.compile(r"(?:is terminating|being disrupted|left discovery) \(([^)]*)\)")
# One Event per batch of deletes: "Deleted pod pi-worker-1: leaving the job; Deleted pod pi-worker-3: ..."
_DELETED_WHY = re.compile(r"Deleted pod \S+: ([^;]*)")


@dataclass(frozen=True)
class Entry:
    time: str
    kind: str  # shrink, grow, removed, floor, below-min, regrow, refused, leaving
    reason: str  # the Event's reason, the condition or the annotation it comes from
    signal: str
    workers: tuple[str, ...]
    message: str


def workers_named(job: str, text: str) -> tuple[str, ...]:
    """The job's worker pod names in `text`, in order of appearance, once each."""
    pattern = re.compile(rf"\b{re.escape(job)}-worker-\d+\b")
    return tuple(dict.fromkeys(pattern.findall(text)))


def signal_of(reason: str, message: str) -> str:
    if reason == "WorkerLost":
        return "worker-lost"
    if reason == "SuccessfulDeletePod":
        return "; ".join(dict.fromkeys(w.strip() for w in _DELETED_WHY.findall(message)))
    found = _SIGNAL.search(message)
    return found.group(1) if found else ""


def _event_time(event: dict[str, Any]) -> str:
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        if event.get(key):
            return str(event[key])
    return str((event.get("metadata") or {}).get("creationTimestamp") or "")


def history(job: dict[str, Any], events: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[Entry]:
    """The job's elastic history, oldest first."""
    name = str(job["metadata"]["name"])
    uid = job["metadata"].get("uid")
    out: list[tuple[str, int, Entry]] = []  # (time, resourceVersion, entry): Events of one second in write order
    for event in events:
        involved = event.get("involvedObject") or {}
        if involved.get("kind") != "MPIJob" or involved.get("name") != name:
            continue
        if uid and involved.get("uid") and involved["uid"] != uid:
            continue  # an earlier job of the same name
        reason, message = str(event.get("reason") or ""), str(event.get("message") or "")
        kind = KINDS.get(reason)
        workers = workers_named(name, message)
        # Pod creates and deletes of the launcher, Services... are no elastic history.
        if kind is None or ((reason.startswith("Successful") or reason == c.JOB_CREATED_REASON) and not workers):
            continue
        entry = Entry(_event_time(event), kind, reason, signal_of(reason, message), workers, message)
        out.append((entry.time, resource_version_number(resource_version(event)), entry))
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "BelowMinReplicas" and cond.get("lastTransitionTime"):
            below = cond.get("status") == "True"
            entry = Entry(
                str(cond["lastTransitionTime"]),
                "below-min" if below else "floor",
                f"BelowMinReplicas={cond.get('status')}",
                "",
                (),
                str(cond.get("message") or ""),
            )
            out.append((entry.time, resource_version_number(resource_version(job)), entry))
    for pod in pods:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        since = annotations.get(c.ANNOTATION_LEAVING_SINCE)
        if since:
            reason = str(annotations.get(c.ANNOTATION_LEAVING_REASON) or "")
            worker = str(pod["metadata"]["name"])
            text = f"{worker} out of discovery, in its grace period"
            entry = Entry(str(since), "leaving", "leaving-since annotation", reason, (worker,), text)
            out.append((entry.time, resource_version_number(resource_version(pod)), entry))
    # ISO-8601 UTC stamps sort as text; within one second, etcd's revision says what was written first.
    return [entry for _, _, entry in sorted(out, key=lambda t: (t[0], t[1]))]


def table(entries: list[Entry], wide: bool = False) -> str:
    rows = [("TIME", "WHAT", "SIGNAL", "WORKERS") + (("REASON", "MESSAGE") if wide else ())]
    for e in entries:
        row = (e.time, e.kind, e.signal or "-", ",".join(e.workers) or "-")
        rows.append(row + ((e.reason, e.message) if wide else ()))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def register(subparsers: Any, common: Any) -> None:
    hist = subparsers.add_parser("history", help="when the job shrank or grew, why (signal) and which workers")
    common(hist)
    hist.set_defaults(func=lambda a: run_command(_history(a)))


async def _history(args: argparse.Namespace) -> int:
    ns = namespace_arg(args)
    async with client(args.kubeconfig, args.context) as kube:
        obj = await get_job(kube, ns, args.job)
        selector = f"involvedObject.kind=MPIJob,involvedObject.name={args.job}"
        listing = await kube.request("GET", collection_path("v1", "Event", ns), query=[("fieldSelector", selector)])
        pods = await worker_pods(kube, ns, args.job)
    entries = history(obj, listing.get("items") or [], pods)
    if args.output in ("json", "yaml"):
        doc = {
            "namespace": ns,
            "name": args.job,
            "history": [asdict(e) | {"workers": list(e.workers)} for e in entries],
        }
        print_document(doc, args.output)
        return 0
    if not entries:
        print(f"MPIJob {ns}/{args.job}: no elastic history recorded (Events expire after the API server's --event-ttl)")
        return 0
    print(table(entries, wide=args.output == "wide"))
    return 0
