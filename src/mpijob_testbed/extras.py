"""Opt-in components of a testbed: Kueue's controller manager and the scheduler-plugins scheduler
(coscheduling), built from their Go modules by testbed/extras/build.sh, and Prometheus, built by
testbed/prometheus/build.sh (mpijob_testbed.prometheus) (`mpijob-testbed up --with ...`).

They run as real processes next to the control plane, with their own CRDs read at run time from the
downloaded module (never copied into this repository). Kueue's webhooks (admission and CRD conversion) are
registered with the testbed's API server by local URL, served with the testbed's localhost certificate,
whose CA goes into each caBundle: the same wiring as in a cluster, without a Service in between.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mpijob.api.crd import crd as mpijob_crd
from mpijob_testbed import certs, processes
from mpijob_testbed import prometheus as prom
from mpijob_testbed.certs import Pki
from mpijob_testbed.errors import TestbedError
from mpijob_testbed.paths import Layout, repo_root
from mpijob_testbed.ports import free_ports
from mpijob_testbed.rest import Rest, tls_context
from mpijob_testbed.waiting import until_http_ok

Echo = Callable[[str], None]

ENV_EXTRAS_BIN = "MPIJOB_TESTBED_EXTRAS_BIN"
KUEUE = "kueue"
COSCHEDULING = "coscheduling"
VOLCANO = "volcano"
PROMETHEUS = prom.NAME
# What `--with` accepts, in start order.
EXTRAS = (KUEUE, COSCHEDULING, PROMETHEUS)
# Why a component cannot be had here at all (asked for, it fails with this reason).
UNAVAILABLE = {
    VOLCANO: "volcano.sh/volcano is not served by the Go module proxy this machine reaches (403 'not available')",
}
BINARY = {KUEUE: "kueue", COSCHEDULING: "scheduler-plugins-scheduler", PROMETHEUS: "prometheus"}
# The schedulerName of the coscheduling profile (pass it to the operator's --gang-scheduling).
COSCHEDULING_SCHEDULER_NAME = "scheduler-plugins-scheduler"
KUEUE_NAMESPACE = "kueue-system"
# Kueue CRDs served in two versions, converted by Kueue's /convert webhook (its kustomize patches say so).
_KUEUE_CONVERTED = {
    "localqueues.kueue.x-k8s.io",
    "clusterqueues.kueue.x-k8s.io",
    "cohorts.kueue.x-k8s.io",
    "workloads.kueue.x-k8s.io",
    "multikueueclusters.kueue.x-k8s.io",
}
_HEALTH_TIMEOUT = 180.0


def extras_bin_dir() -> Path:
    env = os.environ.get(ENV_EXTRAS_BIN)
    return Path(env).expanduser().absolute() if env else repo_root() / ".cache" / "testbed" / "extras"


def parse_with(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """`--with kueue,coscheduling` -> ("kueue", "coscheduling"), validated, in start order."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    names = {v.strip() for v in items if v.strip()}
    for name in names:
        if name in UNAVAILABLE:
            raise TestbedError(f"--with {name}: not available here: {UNAVAILABLE[name]}")
        if name not in EXTRAS:
            raise TestbedError(f"--with {name}: unknown component; choose from {', '.join(EXTRAS)}")
    return tuple(n for n in EXTRAS if n in names)


def build(names: Iterable[str], *, echo: Echo = print) -> None:
    """Run testbed/extras/build.sh for `names` (a no-op per binary when its stamp matches), and
    testbed/prometheus/build.sh for prometheus."""
    wanted = list(names)
    if PROMETHEUS in wanted:
        prom.build(echo=echo)
        wanted.remove(PROMETHEUS)
    if not wanted:
        return
    script = repo_root() / "testbed" / "extras" / "build.sh"
    echo(f"[testbed] building {', '.join(wanted)} with testbed/extras/build.sh")
    env = {**os.environ, ENV_EXTRAS_BIN: str(extras_bin_dir())}
    code = subprocess.call(["bash", str(script), *wanted], cwd=repo_root(), env=env)
    if code != 0:
        raise TestbedError(f"testbed/extras/build.sh {' '.join(wanted)} failed with exit code {code}")


def module_dir(name: str) -> Path:
    path = extras_bin_dir() / f"{BINARY[name]}.module"
    try:
        found = Path(path.read_text().strip())
    except FileNotFoundError:
        raise TestbedError(f"{path} is missing; run testbed/extras/build.sh {name}") from None
    if not found.is_dir():
        raise TestbedError(f"module directory {found} of {name} is gone; run testbed/extras/build.sh {name}")
    return found


# --- state -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Running:
    name: str
    pid: int
    binary: Path


def _state_file(layout: Layout) -> Path:
    return layout.root / "extras.json"


def _load(layout: Layout) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(_state_file(layout).read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return data


def _save(layout: Layout, data: dict[str, Any]) -> None:
    _state_file(layout).write_text(json.dumps(data, indent=2) + "\n")


def running(layout: Layout) -> list[Running]:
    out = []
    for name, entry in _load(layout).items():
        pid = processes.read_pid(layout.pid(BINARY[name]))
        binary = Path(entry["binary"])
        if pid is not None and processes.is_running(pid, binary):
            out.append(Running(name, pid, binary))
    return out


def stop(layout: Layout, *, echo: Echo = print) -> int:
    """Stop every extra component of this testbed (newest first); returns how many were running."""
    stopped = 0
    state = _load(layout)
    for name in reversed(list(state)):
        binary = Path(state[name]["binary"])
        pid = processes.read_pid(layout.pid(BINARY[name]))
        if pid is not None and processes.stop_group(pid, binary):
            echo(f"[testbed] stopped {name} (pid {pid})")
            stopped += 1
        layout.pid(BINARY[name]).unlink(missing_ok=True)
    for pid, binary in processes.find_processes(f"{layout.root}{os.sep}", tuple(BINARY.values())).items():
        if processes.stop_group(pid, binary):
            echo(f"[testbed] stopped stray {binary.name} (pid {pid})")
            stopped += 1
    _state_file(layout).unlink(missing_ok=True)
    return stopped


# --- API helpers -----------------------------------------------------------------------------------------


def _apply(rest: Rest, collection: str, obj: dict[str, Any]) -> None:
    """Create, or replace what is there (keeping its resourceVersion): an idempotent `kubectl apply`."""
    name = obj["metadata"]["name"]
    code, body = rest.post(collection, obj)
    if code == 409:
        code, current = rest.get(f"{collection}/{name}")
        if code != 200:
            raise TestbedError(f"reading {collection}/{name}: HTTP {code}: {current}")
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}}
        code, body = rest.request("PUT", f"{collection}/{name}", obj)
    if code not in (200, 201):
        raise TestbedError(f"applying {collection}/{name}: HTTP {code}: {str(body)[:500]}")


_CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def _apply_crds(rest: Rest, crds: list[dict[str, Any]]) -> None:
    for crd in crds:
        _apply(rest, _CRDS, crd)
    deadline = time.monotonic() + 60
    for crd in crds:
        name = crd["metadata"]["name"]
        while True:
            _, body = rest.get(f"{_CRDS}/{name}")
            conditions = {c["type"]: c["status"] for c in ((body or {}).get("status") or {}).get("conditions") or []}
            if conditions.get("Established") == "True":
                break
            if time.monotonic() > deadline:
                raise TestbedError(f"CRD {name} not established after 60s")
            time.sleep(0.2)


def _yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


def _wait_healthy(name: str, pid: int, url: str, ctx: Any, log: Path, echo: Echo) -> None:
    until_http_ok(url, ctx, name=name, pid=pid, log=log, timeout=_HEALTH_TIMEOUT, echo=echo, interval=0.3)


# --- Kueue ---------------------------------------------------------------------------------------------------


def _kueue_config(workdir: Path, webhook_port: int, health_port: int) -> dict[str, Any]:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        # No metrics endpoint: nothing scrapes it here, and it would need one more port.
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(workdir / "certs")},
        "leaderElection": {"leaderElect": False},
        # Certificates come from the testbed's CA (below), not from Kueue's own rotator.
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 100, "burst": 200},
        "integrations": {"frameworks": ["kubeflow.org/mpijob"]},
        # The visibility API server would need an APIService and another port; the tests do not use it.
        "featureGates": {"VisibilityOnDemand": False},
    }


def _kueue_webhooks(module: Path, base_url: str, ca_bundle: str) -> list[tuple[str, dict[str, Any]]]:
    """Kueue's webhook configurations, for the kinds the testbed uses (Kueue's own and MPIJobs), pointed
    at the local webhook server. Webhooks of integrations that are not enabled are left out: the server
    does not serve them, and a Fail policy on, say, every Pod would break the cluster."""
    out = []
    for doc in _yaml_docs(module / "config" / "components" / "webhook" / "manifests.yaml"):
        kind = doc.get("kind")
        if kind not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            continue
        hooks = []
        for hook in doc.get("webhooks") or []:
            groups = {g for rule in hook.get("rules") or [] for g in rule.get("apiGroups") or []}
            resources = {r for rule in hook.get("rules") or [] for r in rule.get("resources") or []}
            if groups == {"kueue.x-k8s.io"} or (groups == {"kubeflow.org"} and resources <= {"mpijobs"}):
                path = hook["clientConfig"]["service"]["path"]
                hook = {**hook, "clientConfig": {"url": f"{base_url}{path}", "caBundle": ca_bundle}}
                hooks.append(hook)
        name = f"kueue-{doc['metadata']['name']}"
        plural = "mutatingwebhookconfigurations" if kind.startswith("Mutating") else "validatingwebhookconfigurations"
        out.append((plural, {**doc, "metadata": {"name": name}, "webhooks": hooks}))
    return out


def _kueue_crds(module: Path, base_url: str, ca_bundle: str) -> list[dict[str, Any]]:
    crds = []
    for path in sorted((module / "config" / "components" / "crd" / "bases").glob("*.yaml")):
        for crd in _yaml_docs(path):
            if crd["metadata"]["name"] in _KUEUE_CONVERTED:
                crd["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {
                        "clientConfig": {"url": f"{base_url}/convert", "caBundle": ca_bundle},
                        "conversionReviewVersions": ["v1"],
                    },
                }
            crds.append(crd)
    return crds


# Kueue v0.17 reads a metrics certificate from this fixed path whenever its own certificate manager is off
# (cmd/kueue/main.go), even with the metrics endpoint disabled; it exits if the files are missing.
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")


def _ensure_kueue_metrics_certs(directory: Path = KUEUE_METRICS_CERTS) -> None:
    """A throwaway self-signed pair there (never a testbed key: the endpoint that would use it is off)."""
    if (directory / "tls.crt").is_file() and (directory / "tls.key").is_file():
        return
    try:
        directory.mkdir(parents=True, exist_ok=True)
        cert, key = certs.self_signed()
        (directory / "tls.crt").write_bytes(cert)
        fd = os.open(directory / "tls.key", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
    except OSError as err:
        raise TestbedError(f"Kueue needs a certificate pair in {directory} (its fixed metrics path): {err}") from err


def _start_kueue(layout: Layout, rest: Rest, bin_dir: Path, echo: Echo) -> Running:
    module = module_dir(KUEUE)
    _ensure_kueue_metrics_certs()
    pki = Pki(layout.pki)
    workdir = layout.root / "extras" / KUEUE
    (workdir / "certs").mkdir(parents=True, exist_ok=True)
    # The testbed's localhost serving certificate (127.0.0.1 and localhost, signed by the testbed CA).
    shutil.copyfile(pki.serving_cert, workdir / "certs" / "tls.crt")
    shutil.copyfile(pki.serving_key, workdir / "certs" / "tls.key")
    os.chmod(workdir / "certs" / "tls.key", 0o600)
    webhook_port, health_port = free_ports(2)
    base_url = f"https://127.0.0.1:{webhook_port}"
    ca_bundle = base64.b64encode(pki.ca_cert.read_bytes()).decode()
    (workdir / "config.yaml").write_text(yaml.safe_dump(_kueue_config(workdir, webhook_port, health_port)))
    _apply(rest, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}})
    _apply_crds(rest, _kueue_crds(module, base_url, ca_bundle))
    binary = bin_dir / BINARY[KUEUE]
    log = layout.log(BINARY[KUEUE])
    env = {**os.environ, "KUBECONFIG": str(layout.kubeconfig)}
    argv = [str(binary), f"--config={workdir / 'config.yaml'}", "--zap-log-level=info"]
    started = time.monotonic()
    pid = processes.spawn(argv, log_path=log, pid_path=layout.pid(BINARY[KUEUE]), env=env)
    _wait_healthy(KUEUE, pid, f"http://127.0.0.1:{health_port}/readyz", None, log, echo)
    for plural, body in _kueue_webhooks(module, base_url, ca_bundle):
        _apply(rest, f"/apis/admissionregistration.k8s.io/v1/{plural}", body)
    echo(f"[testbed] kueue healthy (pid {pid}, {time.monotonic() - started:.1f}s, webhooks at {base_url}, log {log})")
    return Running(KUEUE, pid, binary)


# --- scheduler-plugins (coscheduling) ------------------------------------------------------------------------


def coscheduling_config(kubeconfig: Path, permit_wait_seconds: int = 10) -> dict[str, Any]:
    """A second scheduler whose only profile gang-schedules pods through the Coscheduling plugin."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "profiles": [
            {
                "schedulerName": COSCHEDULING_SCHEDULER_NAME,
                "plugins": {
                    "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
                    "queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "*"}]},
                },
                "pluginConfig": [{"name": "Coscheduling", "args": {"permitWaitingTimeSeconds": permit_wait_seconds}}],
            }
        ],
    }


def _start_coscheduling(layout: Layout, rest: Rest, bin_dir: Path, echo: Echo) -> Running:
    module = module_dir(COSCHEDULING)
    pki = Pki(layout.pki)
    workdir = layout.root / "extras" / COSCHEDULING
    workdir.mkdir(parents=True, exist_ok=True)
    _apply_crds(rest, _yaml_docs(module / "manifests" / "coscheduling" / "crd.yaml"))
    (workdir / "config.yaml").write_text(yaml.safe_dump(coscheduling_config(layout.kubeconfig)))
    (port,) = free_ports(1)
    binary = bin_dir / BINARY[COSCHEDULING]
    log = layout.log(BINARY[COSCHEDULING])
    argv = [
        str(binary),
        f"--config={workdir / 'config.yaml'}",
        f"--authentication-kubeconfig={layout.kubeconfig}",
        f"--authorization-kubeconfig={layout.kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--tls-cert-file={pki.serving_cert}",
        f"--tls-private-key-file={pki.serving_key}",
        # A gang rejected at Permit is retried on a sibling pod or PodGroup event only (in a cluster the
        # scheduler-plugins controller's PodGroup status updates provide those), or when the scheduler
        # flushes its unschedulable pods: every 5 minutes by default, every 15 s here.
        "--pod-max-in-unschedulable-pods-duration=15s",
    ]
    started = time.monotonic()
    pid = processes.spawn(argv, log_path=log, pid_path=layout.pid(BINARY[COSCHEDULING]))
    ctx = tls_context(pki.ca_cert, pki.client_cert("admin"), pki.client_key("admin"))
    _wait_healthy(COSCHEDULING, pid, f"https://127.0.0.1:{port}/healthz", ctx, log, echo)
    echo(
        f"[testbed] coscheduling scheduler healthy (pid {pid}, {time.monotonic() - started:.1f}s, "
        f"schedulerName {COSCHEDULING_SCHEDULER_NAME}, log {log})"
    )
    return Running(COSCHEDULING, pid, binary)


def _start_prometheus(layout: Layout, rest: Rest, bin_dir: Path, echo: Echo) -> Running:
    del rest, bin_dir  # it reads nothing from the API server; its binary is in its own directory
    pid, binary = prom.start(layout, echo)
    return Running(PROMETHEUS, pid, binary)


def ensure(layout: Layout, rest: Rest, names: Iterable[str], *, echo: Echo = print) -> None:
    """Start whichever of `names` is not running yet (building it first when needed). The MPIJob CRD is
    installed first: Kueue's MPIJob integration starts only when the kind is served."""
    wanted = list(parse_with(list(names)))
    if not wanted:
        return
    up = {r.name for r in running(layout)}
    todo = [n for n in wanted if n not in up]
    if not todo:
        return
    bin_dir = extras_bin_dir()
    build(todo, echo=echo)
    _apply_crds(rest, [mpijob_crd()])
    state = _load(layout)
    for name in todo:
        starter = {KUEUE: _start_kueue, COSCHEDULING: _start_coscheduling, PROMETHEUS: _start_prometheus}[name]
        done = starter(layout, rest, bin_dir, echo)
        state[name] = {"binary": str(done.binary)}
        _save(layout, state)
