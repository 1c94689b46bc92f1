"""The discovery channel of an elastic job: the host list, where the launcher reads it, and the script.

The list (`host:slots` lines under a header line) is written to the job's ConfigMap (key
`discovered_hosts`) and to an annotation of each launcher pod. The launcher's `discover_hosts.sh`:
  1. GETs the ConfigMap from the API server (`?resourceVersion=0`: served from the API server's watch cache)
     with the launcher's service-account token, within a hard time budget;
  2. else reads the annotation as the kubelet projects it (downwardAPI volume; the kubelet re-syncs a pod at
     once when its annotations change, but a ConfigMap volume only on its periodic resync, ~1 min);
  3. else, while that annotation is not set yet (a new launcher pod), the ConfigMap's copy as mounted;
  4. else prints no host, says why on stderr and exits 1: an error never looks like "every host removed".
An empty list from a source is a real answer (no worker is serving: not Ready yet, or all leaving) and
is printed as such, exit 0: Horovod then waits for hosts, which is what the job's state means.

The list also carries each worker's pod IP (`# address <host> <ip>` lines, which readers of `host:slots`
lines skip). The script prints a host only when cluster DNS agrees: a name that DNS does not know yet
(NXDOMAIN: its record appears once the pod is Ready and the endpoints follow) or answers with another
address (a reused worker name whose old record is still cached, `cache 30`) is held back, since Horovod
would fail to reach it and blacklist the name. A lookup that errs or times out holds back only a host the
script did not print last time (it remembers its last output in /tmp, `MPIJOB_DISCOVERY_STATE`): a resolver
problem never looks like hosts leaving, and a new name is never offered before DNS answered for it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from importlib import resources

from mpijob.api import constants

HEADER = "# mpijob discovery"
# How long the script may spend on the API before falling back to the files (its whole run stays < 1 s:
# Horovod's driver runs it every second, synchronously, with no timeout of its own).
API_BUDGET_SECONDS = 0.6
# How long the script waits for all its DNS lookups together (they run in parallel) before it keeps the
# hosts still unanswered.
DNS_BUDGET_SECONDS = 0.3
ADDRESS = "# address "
_LINE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?:[0-9]+$")


def payload(
    namespace: str, job: str, hosts: Sequence[str], slots: int, changed: str, addresses: Mapping[str, str] | None = None
) -> str:
    """The list: header, `host:slots` lines, then the known pod IP of each host (for the DNS check)."""
    known = addresses or {}
    lines = [f"{HEADER} of {namespace}/{job}, changed {changed}", *(f"{h}:{slots}" for h in hosts)]
    lines += [f"{ADDRESS}{h} {known[h]}" for h in hosts if known.get(h)]
    return "\n".join(lines) + "\n"


def payload_addresses(text: str | None) -> dict[str, str]:
    """host -> pod IP of a discovery list's address lines (empty for lists written before they existed)."""
    out = {}
    for line in (text or "").splitlines():
        if line.startswith(ADDRESS):
            host, _, ip = line[len(ADDRESS) :].strip().partition(" ")
            out[host] = ip.strip()
    return out


def payload_hosts(text: str | None) -> list[str] | None:
    """The `host:slots` lines of a discovery list, or None when `text` is not one."""
    if not text or not text.startswith(HEADER):
        return None
    hosts = [line.strip() for line in text.splitlines()[1:] if line.strip() and not line.startswith("#")]
    if any(not _LINE.match(h) for h in hosts):
        return None
    return hosts


def listed_lines(data: Mapping[str, str]) -> list[str] | None:
    """The `host:slots` lines of a job's discovery list (ConfigMap data, key `discovered_hosts`), or None for
    an *unknown listing*: data without a list we can read (a ConfigMap written by an operator version before
    the list existed, or edited by hand). The generated script is never parsed to learn what was listed;
    callers treat an unknown listing conservatively (see `listed_hosts`)."""
    return payload_hosts(data.get(constants.DISCOVERED_HOSTS_KEY))


def listed_hosts(data: Mapping[str, str]) -> list[str] | None:
    """Host names (without slots) of listed_lines(), or None for an unknown listing: then any host may be
    listed (a write replacing it may drop hosts; a leaving worker may still be served), and the next
    ConfigMap write, which always carries the list, makes it known."""
    lines = listed_lines(data)
    return None if lines is None else [h.rpartition(":")[0] or h for h in lines]


def desired_payload(
    current: str | None,
    namespace: str,
    job: str,
    hosts: Sequence[str],
    slots: int,
    now: str,
    addresses: Mapping[str, str] | None = None,
) -> str:
    """The list to write: the current text when the hosts and their addresses are the same (a steady job
    writes nothing, and the "changed" time stays the time of the last real change), else a new one stamped
    `now`."""
    new = payload(namespace, job, hosts, slots, now, addresses)
    if current is None:
        return new
    same = payload_hosts(current) == payload_hosts(new) and payload_addresses(current) == payload_addresses(new)
    return current if same else new


# discover_hosts.sh, beside this module (package data; `make lint` runs shellcheck on it). `@NAME@` stands for
# a Python literal of the program it runs, `@NAME_TEXT@` for plain text in its header comment.
_TEMPLATE = resources.files(__package__).joinpath("discover_hosts.sh").read_text(encoding="utf-8")
_TOKEN = re.compile(r"@([A-Z_]+)@")


def script(namespace: str, job: str, job_uid: str, *, use_api: bool) -> str:
    """discover_hosts.sh for an elastic job. It does not change with the hosts (they are read at run time), so
    the kubelet's late refresh of the mounted script does not matter."""
    config_map = constants.config_map_name(job)
    annotation_file = f"{constants.DISCOVERY_MOUNT_PATH}/{constants.DISCOVERY_FILE}"
    config_file = f"{constants.CONFIG_MOUNT_PATH}/{constants.DISCOVERED_HOSTS_KEY}"
    literals: dict[str, object] = {
        "NAMESPACE": namespace,
        "CONFIG_MAP": config_map,
        "JOB_UID": job_uid,
        "USE_API": use_api,
        "KEY": constants.DISCOVERED_HOSTS_KEY,
        "HEADER": HEADER,
        "BUDGET": API_BUDGET_SECONDS,
        "DNS_BUDGET": DNS_BUDGET_SECONDS,
        "ADDRESS": ADDRESS,
        "SA_DIR": constants.SERVICE_ACCOUNT_MOUNT_PATH,
        "ANNOTATION_FILE": annotation_file,
        "CONFIG_FILE": config_file,
    }
    source = (
        f"the Kubernetes API (ConfigMap {namespace}/{config_map}, key {constants.DISCOVERED_HOSTS_KEY}), then "
        if use_api
        else ""
    )
    texts = {
        "NAMESPACE_TEXT": namespace,
        "JOB_TEXT": job,
        "SOURCE_TEXT": source,
        "ANNOTATION_FILE_TEXT": annotation_file,
        "CONFIG_FILE_TEXT": config_file,
    }
    values = {name: repr(value) for name, value in literals.items()} | texts
    # One pass: a value is never searched for tokens itself; an unknown token is a KeyError, not a silent gap.
    return _TOKEN.sub(lambda m: values[m.group(1)], _TEMPLATE)
