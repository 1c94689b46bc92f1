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


_PROGRAM = r"""
import json, os, re, signal, socket, ssl, sys, threading, time, urllib.error, urllib.request

NAMESPACE = @NAMESPACE@
CONFIG_MAP = @CONFIG_MAP@
JOB_UID = @JOB_UID@
USE_API = @USE_API@
KEY = @KEY@
HEADER = @HEADER@
BUDGET = @BUDGET@
DNS_BUDGET = @DNS_BUDGET@
STATE = os.environ.get("MPIJOB_DISCOVERY_STATE") or "/tmp/mpijob-discovery-printed"
DNS_CHECK = os.environ.get("MPIJOB_DISCOVERY_DNS_CHECK") != "0"
ADDRESS = @ADDRESS@
LINE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?:[0-9]+$")
env = os.environ
start = time.monotonic()


class Unusable(Exception):
    pass


def hosts_of(text, where):
    if not text:
        raise Unusable(where + ": empty (no list written yet)")
    if not text.startswith(HEADER):
        raise Unusable(where + ": not a discovery list")
    lines = text.splitlines()
    hosts = [l.strip() for l in lines[1:] if l.strip() and not l.startswith("#")]
    for h in hosts:
        if not LINE.match(h):
            raise Unusable(where + ": malformed line " + repr(h))
    addresses = dict(l[len(ADDRESS):].strip().partition(" ")[::2] for l in lines[1:] if l.startswith(ADDRESS))
    return lines[0], hosts, addresses


def lookup(name, answers):
    try:
        # Both families, as ssh asks (AddressFamily any): the answer Horovod's ssh will get, not a narrower one.
        answers[name] = {a[4][0] for a in socket.getaddrinfo(name, None, 0, socket.SOCK_STREAM)}
    except socket.gaierror as e:
        # Only "no such name" is an answer; a resolver failure (EAI_AGAIN, ...) is no answer.
        answers[name] = "NXDOMAIN" if e.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", -5)) else None
    except Exception:
        answers[name] = None


# The host lines this script printed last time (Horovod runs it every second), or None when that cannot be
# read (then every host counts as printed: the old rule). A missing file is an empty set: nothing printed yet.
def printed_last():
    try:
        with open(STATE) as f:
            return set(f.read().split())
    except FileNotFoundError:
        return set()
    except OSError:
        return None


def remember(hosts):
    try:
        tmp = "%s.%d" % (STATE, os.getpid())
        with open(tmp, "w") as f:
            f.write("".join(h + "\n" for h in hosts))
        os.replace(tmp, STATE)
    except OSError:
        pass  # a read-only /tmp: the state stays as it was (unreadable state keeps the old rule)


# (hosts DNS agrees with, {held-back host line: why}): a host whose name does not resolve yet, or resolves
# to another address than its pod's, is held back. A lookup that erred or took too long holds back only a
# host not printed last time (ssh would not resolve it either; for it waiting costs a second): for a host
# already printed, resolver trouble must never look like the host leaving.
def agreeing_with_dns(hosts, addresses):
    if not DNS_CHECK:
        return hosts, {}
    before = printed_last()
    answers, threads = {}, []
    for line in hosts:
        name = line.rpartition(":")[0]
        if addresses.get(name):
            t = threading.Thread(target=lookup, args=(name, answers), daemon=True)
            t.start()
            threads.append(t)
    deadline = time.monotonic() + DNS_BUDGET
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    kept, held = [], {}
    for line in hosts:
        name = line.rpartition(":")[0]
        got, want = answers.get(name), addresses.get(name)
        if got == "NXDOMAIN":
            held[line] = "not in DNS yet"
        elif isinstance(got, set) and want not in got:
            held[line] = "DNS answers %s, the pod is %s" % (",".join(sorted(got)), want)
        elif got is None and want and before is not None and line not in before:
            held[line] = "no DNS answer yet (new host)"
        else:
            kept.append(line)
    return kept, held


def timed_out(signum, frame):
    raise TimeoutError("no answer within %.1fs" % BUDGET)


def from_api():
    if not USE_API:
        raise Unusable("API: not used for this job (file only)")
    host = env.get("KUBERNETES_SERVICE_HOST")
    port = env.get("KUBERNETES_SERVICE_PORT") or "443"
    if not host:
        raise Unusable("API: KUBERNETES_SERVICE_HOST is not set")
    sa = env.get("MPIJOB_SERVICEACCOUNT_DIR") or @SA_DIR@
    try:
        with open(os.path.join(sa, "token")) as f:
            token = f.read().strip()
        ctx = ssl.create_default_context(cafile=os.path.join(sa, "ca.crt"))
    except OSError as e:
        raise Unusable("API: no service-account credentials (%s: %s)" % (e.strerror, e.filename))
    if ":" in host:
        host = "[" + host + "]"
    url = "https://%s:%s/api/v1/namespaces/%s/configmaps/%s?resourceVersion=0" % (host, port, NAMESPACE, CONFIG_MAP)
    request = urllib.request.Request(url, headers={"Authorization": "Bearer " + token, "Accept": "application/json"})
    # No proxy from the environment: the API server is reached directly, as in-cluster clients do.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
    signal.signal(signal.SIGALRM, timed_out)
    signal.setitimer(signal.ITIMER_REAL, BUDGET)  # a hard bound, name resolution and slow reads included
    try:
        with opener.open(request, timeout=BUDGET) as response:
            obj = json.load(response)
    except urllib.error.HTTPError as e:
        raise Unusable("API: HTTP %d %s" % (e.code, e.reason))
    except (urllib.error.URLError, OSError, TimeoutError, ValueError) as e:
        raise Unusable("API: %s" % (getattr(e, "reason", None) or e))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    meta = obj.get("metadata") or {}
    if not any(r.get("controller") and r.get("uid") == JOB_UID for r in meta.get("ownerReferences") or []):
        raise Unusable("API: ConfigMap %s/%s is not this MPIJob's" % (NAMESPACE, CONFIG_MAP))
    header, hosts, addresses = hosts_of((obj.get("data") or {}).get(KEY), "API")
    where = "API (ConfigMap %s/%s, resourceVersion %s)" % (NAMESPACE, CONFIG_MAP, meta.get("resourceVersion"))
    return where, header, hosts, addresses


def from_file(path, what):
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise Unusable("%s %s: %s" % (what, path, e.strerror))
    header, hosts, addresses = hosts_of(text, "%s %s" % (what, path))
    return "%s %s" % (what, path), header, hosts, addresses


def main():
    reasons = []
    sources = [
        from_api,
        lambda: from_file(env.get("MPIJOB_DISCOVERY_FILE") or @ANNOTATION_FILE@, "file (pod annotation)"),
        lambda: from_file(env.get("MPIJOB_DISCOVERY_CONFIG_FILE") or @CONFIG_FILE@, "file (ConfigMap volume)"),
    ]
    for source in sources:
        try:
            where, header, hosts, addresses = source()
        except Unusable as e:
            reasons.append(str(e))
            continue
        if reasons and USE_API:
            sys.stderr.write("discover_hosts.sh: using %s; %s\n" % (where, "; ".join(reasons)))
        hosts, held = agreeing_with_dns(hosts, addresses)
        if DNS_CHECK:
            remember(hosts)  # only the DNS check reads it
        if "--explain" in sys.argv[1:]:
            took = (time.monotonic() - start) * 1000
            sys.stderr.write("source: %s\nlist: %s\ntook: %.0f ms\n" % (where, header, took))
            for line, why in held.items():
                sys.stderr.write("held back: %s (%s)\n" % (line, why))
        sys.stdout.write("".join(h + "\n" for h in hosts))
        return 0
    sys.stderr.write("discover_hosts.sh: no usable host list: %s\n" % "; ".join(reasons))
    return 1


sys.exit(main())
"""


def script(namespace: str, job: str, job_uid: str, *, use_api: bool) -> str:
    """discover_hosts.sh for an elastic job. It does not change with the hosts (they are read at run time), so
    the kubelet's late refresh of the mounted script does not matter."""
    config_map = constants.config_map_name(job)
    values = {
        "@NAMESPACE@": namespace,
        "@CONFIG_MAP@": config_map,
        "@JOB_UID@": job_uid,
        "@KEY@": constants.DISCOVERED_HOSTS_KEY,
        "@HEADER@": HEADER,
        "@SA_DIR@": constants.SERVICE_ACCOUNT_MOUNT_PATH,
        "@ANNOTATION_FILE@": f"{constants.DISCOVERY_MOUNT_PATH}/{constants.DISCOVERY_FILE}",
        "@CONFIG_FILE@": f"{constants.CONFIG_MOUNT_PATH}/{constants.DISCOVERED_HOSTS_KEY}",
    }
    program = _PROGRAM
    for key, value in values.items():
        program = program.replace(key, repr(value))
    program = program.replace("@USE_API@", repr(use_api)).replace("@BUDGET@", repr(API_BUDGET_SECONDS))
    program = program.replace("@DNS_BUDGET@", repr(DNS_BUDGET_SECONDS)).replace("@ADDRESS@", repr(ADDRESS))
    source = (
        f"the Kubernetes API (ConfigMap {namespace}/{config_map}, key {constants.DISCOVERED_HOSTS_KEY}), then "
        if use_api
        else ""
    )
    return (
        "#!/bin/sh\n"
        f"# Generated by mpijob-operator for MPIJob {namespace}/{job}. Prints the job's serving workers, one\n"
        "# host:slots a line, for Horovod elastic (--host-discovery-script). Reads "
        f"{source}the list the\n"
        "# kubelet projects from the launcher pod's annotation "
        f"({constants.DISCOVERY_MOUNT_PATH}/{constants.DISCOVERY_FILE}), "
        "then, until\n"
        f"# that exists, this ConfigMap's copy ({constants.CONFIG_MOUNT_PATH}/{constants.DISCOVERED_HOSTS_KEY}). "
        "Nothing usable: "
        "no host, the reason\n"
        "# on stderr, exit 1. A host whose name cluster DNS does not resolve to its pod's address yet is held\n"
        "# back. `sh discover_hosts.sh --explain` tells which source answered and what was held back.\n"
        "if ! command -v python3 >/dev/null 2>&1; then\n"
        '  echo "discover_hosts.sh: python3 not found" >&2\n'
        "  exit 1\n"
        "fi\n"
        # -I -S: the standard library only, whatever PYTHON* variables or site packages the image has.
        "exec python3 -I -S - \"$@\" <<'MPIJOB_DISCOVERY'\n"
        f"{program.strip()}\n"
        "MPIJOB_DISCOVERY\n"
    )
