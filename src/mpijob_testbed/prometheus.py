"""Prometheus on the testbed (`mpijob-testbed up --with prometheus`), built from its Go module by
testbed/prometheus/build.sh, scraping the operator the way the chart's ServiceMonitor says.

The scrape job is read off the chart: `helm template --set metrics.serviceMonitor.enabled=true` (helm built by
testbed/helm/build.sh) gives the ServiceMonitor's endpoint (path, interval, port name), and the port name
resolves through the Service and the Deployment to the container port, as the Prometheus operator resolves
it. On the testbed the operator is a process on this host, not a pod: its address goes into a file_sd target
file (`add_target`), which Prometheus re-reads on its own. Rule files are loaded from `<state>/prometheus/
rules/` (`set_rules` writes one and reloads Prometheus).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mpijob_testbed import processes
from mpijob_testbed.errors import TestbedError
from mpijob_testbed.paths import Layout, repo_root
from mpijob_testbed.ports import free_ports
from mpijob_testbed.waiting import until_http_ok

Echo = Callable[[str], None]

ENV_PROMETHEUS_BIN = "MPIJOB_PROMETHEUS_BIN"
ENV_HELM_BIN = "MPIJOB_HELM_BIN"
NAME = "prometheus"
JOB = "mpijob-operator"  # the scrape job's name (the Prometheus operator would say serviceMonitor/<ns>/<name>/0)
CHART = Path("deploy") / "helm" / "mpijob-operator"
# The chart checks its kubeVersion; helm template without a cluster assumes an old one. The testbed's own
# (testbed/build.sh builds k8s.io/kubernetes v1.37.2).
KUBE_VERSION = "1.37.2"
# How often rules are evaluated on the testbed. Not in the ServiceMonitor (a Prometheus CR's evaluationInterval
# in a cluster); shorter than the scrape so a test sees an alert soon after the sample that fires it.
EVALUATION_INTERVAL = "5s"
SCRAPE_INTERVAL = "5s"
_HEALTH_TIMEOUT = 60.0


def bin_dir() -> Path:
    env = os.environ.get(ENV_PROMETHEUS_BIN)
    return Path(env).expanduser().absolute() if env else repo_root() / ".cache" / "testbed" / "prometheus"


def helm_binary() -> Path:
    env = os.environ.get(ENV_HELM_BIN)
    return (Path(env).expanduser().absolute() if env else repo_root() / ".cache" / "helm" / "bin") / "helm"


def build(*, echo: Echo = print) -> None:
    """testbed/prometheus/build.sh (a no-op when both binaries match their stamps)."""
    script = repo_root() / "testbed" / "prometheus" / "build.sh"
    echo("[testbed] building prometheus and promtool with testbed/prometheus/build.sh")
    env = {**os.environ, ENV_PROMETHEUS_BIN: str(bin_dir())}
    code = subprocess.call(["bash", str(script)], cwd=repo_root(), env=env)
    if code != 0:
        raise TestbedError(f"testbed/prometheus/build.sh failed with exit code {code}")


# --- the chart's ServiceMonitor ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ScrapeEndpoint:
    path: str
    interval: str
    port: int  # the container port the ServiceMonitor's named Service port leads to
    port_name: str


def endpoint_from_rendered(objects: list[dict[str, Any]]) -> ScrapeEndpoint:
    """The ServiceMonitor's first endpoint, its port name followed through the Service to the container."""
    by_kind = {o.get("kind"): o for o in objects if isinstance(o, dict)}
    try:
        monitor, service = by_kind["ServiceMonitor"], by_kind["Service"]
        deployment = by_kind["Deployment"]
    except KeyError as missing:
        raise TestbedError(f"the chart rendered no {missing.args[0]} (metrics.serviceMonitor.enabled=true)") from None
    [endpoint, *_] = monitor["spec"]["endpoints"]
    [service_port] = [p for p in service["spec"]["ports"] if p.get("name") == endpoint["port"]]
    target = service_port.get("targetPort", service_port["port"])
    if isinstance(target, int):
        port = target
    else:
        container_ports = [
            p
            for container in deployment["spec"]["template"]["spec"]["containers"]
            for p in container.get("ports") or []
            if p.get("name") == target
        ]
        if len(container_ports) != 1:
            raise TestbedError(f"the Service's targetPort {target!r} names {len(container_ports)} container ports")
        port = int(container_ports[0]["containerPort"])
    return ScrapeEndpoint(endpoint.get("path", "/metrics"), endpoint.get("interval", "30s"), port, endpoint["port"])


def chart_endpoint() -> ScrapeEndpoint:
    helm = helm_binary()
    if not helm.exists():
        raise TestbedError(f"{helm} is missing (the scrape job is read off the chart): run `make helm`")
    argv = [str(helm), "template", "r", str(repo_root() / CHART), "--kube-version", KUBE_VERSION]
    # Any image: the chart refuses to render without one, and only the Service and ServiceMonitor are read.
    argv += ["--set", "metrics.serviceMonitor.enabled=true", "--set", "image.repository=mpijob-operator"]
    # A scrape interval a user may set (the chart's default is 30 s): tests wait for scrapes, not for 30 s each.
    argv += ["--set", f"metrics.serviceMonitor.interval={SCRAPE_INTERVAL}"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise TestbedError(f"helm template failed: {proc.stderr.strip()}")
    return endpoint_from_rendered(list(yaml.safe_load_all(proc.stdout)))


# --- the server -------------------------------------------------------------------------------------------


def workdir(layout: Layout) -> Path:
    return layout.root / "extras" / NAME


def config(layout: Layout, endpoint: ScrapeEndpoint) -> dict[str, Any]:
    base = workdir(layout)
    return {
        "global": {"scrape_interval": endpoint.interval, "evaluation_interval": EVALUATION_INTERVAL},
        "rule_files": [str(base / "rules" / "*.yaml")],
        "scrape_configs": [
            {
                "job_name": JOB,
                "metrics_path": endpoint.path,
                "scrape_interval": endpoint.interval,
                "file_sd_configs": [{"files": [str(base / "targets" / "*.json")], "refresh_interval": "5s"}],
            }
        ],
    }


def _port_file(layout: Layout) -> Path:
    return workdir(layout) / "port"


def url(layout: Layout) -> str:
    try:
        return f"http://127.0.0.1:{int(_port_file(layout).read_text())}"
    except (FileNotFoundError, ValueError):
        raise TestbedError(
            f"prometheus is not running on the testbed at {layout.root} (`up --with prometheus`)"
        ) from None


def start(layout: Layout, echo: Echo) -> tuple[int, Path]:
    """Start Prometheus; returns (pid, binary)."""
    endpoint = chart_endpoint()
    base = workdir(layout)
    for sub in ("rules", "targets", "data"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    (base / "prometheus.yaml").write_text(yaml.safe_dump(config(layout, endpoint)))
    (port,) = free_ports(1)
    binary = bin_dir() / NAME
    log = layout.log(NAME)
    argv = [
        str(binary),
        f"--config.file={base / 'prometheus.yaml'}",
        f"--storage.tsdb.path={base / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-lifecycle",  # POST /-/reload after a rule file changes
        "--storage.tsdb.retention.time=1d",
    ]
    started = time.monotonic()
    pid = processes.spawn(argv, log_path=log, pid_path=layout.pid(NAME))
    url = f"http://127.0.0.1:{port}/-/ready"
    until_http_ok(url, name=NAME, pid=pid, log=log, timeout=_HEALTH_TIMEOUT, echo=echo, interval=0.3)
    _port_file(layout).write_text(f"{port}\n")
    echo(
        f"[testbed] prometheus ready (pid {pid}, {time.monotonic() - started:.1f}s, http://127.0.0.1:{port}, "
        f"job {JOB}: {endpoint.path} every {endpoint.interval} as the chart's ServiceMonitor says, log {log})"
    )
    return pid, binary


# --- what tests drive -------------------------------------------------------------------------------------


def add_target(layout: Layout, name: str, address: str, labels: dict[str, str] | None = None) -> None:
    """Scrape `address` (host:port) in the operator's job; Prometheus picks the file up within 5 s."""
    path = workdir(layout) / "targets" / f"{name}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([{"targets": [address], "labels": labels or {}}]))
    tmp.replace(path)  # atomic: Prometheus never reads half a file


def remove_target(layout: Layout, name: str) -> None:
    (workdir(layout) / "targets" / f"{name}.json").unlink(missing_ok=True)


def set_rules(layout: Layout, name: str, text: str | None) -> None:
    """Write (or with None, remove) rule file `name` and reload Prometheus; a rule file it rejects fails."""
    path = workdir(layout) / "rules" / f"{name}.yaml"
    if text is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text(text)
    request = urllib.request.Request(f"{url(layout)}/-/reload", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30):
            pass
    except urllib.error.HTTPError as err:
        raise TestbedError(f"prometheus rejected {path}: {err.read().decode(errors='replace')}") from err


def api(layout: Layout, path: str, **params: str) -> Any:
    """GET /api/v1/<path>; the `data` of a success, TestbedError otherwise."""
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    try:
        with urllib.request.urlopen(f"{url(layout)}/api/v1/{path}{query}", timeout=30) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as err:
        body = json.loads(err.read() or b"{}")
    if body.get("status") != "success":
        raise TestbedError(f"prometheus /api/v1/{path} {params}: {body.get('errorType')}: {body.get('error')}")
    return body["data"]
