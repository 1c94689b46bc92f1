"""What a job's launcher sees: its discover_hosts.sh (from the ConfigMap the operator wrote) run as a local
process with the launcher's own credentials, as a pod would get them: a TokenRequest for the ServiceAccount
the launcher pod runs as, the cluster CA, and the API address in KUBERNETES_SERVICE_HOST/PORT. No kubelet
projects files here, so only the API path is exercised (the file fallbacks point nowhere)."""

from __future__ import annotations

import asyncio
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from mpijob.api import constants as c
from mpijob.executor.client import Client
from mpijob.executor.resources import collection_path, object_path
from mpijob.planner.hostfile import parse_discovery_output


@dataclass
class LauncherView:
    hosts: list[tuple[str, int]]
    source: str
    seconds: float
    ok: bool
    error: str


async def launcher_account(kube: Client, namespace: str, job: str) -> str | None:
    selector = f"{c.LABEL_JOB_NAME}={job},{c.LABEL_JOB_ROLE}={c.ROLE_LAUNCHER}"
    pods = await kube.request("GET", collection_path("v1", "Pod", namespace), query=[("labelSelector", selector)])
    live = [p for p in pods.get("items") or [] if not p["metadata"].get("deletionTimestamp")]
    if not live:
        return None
    return str(live[0]["spec"].get("serviceAccountName") or "default")


async def launcher_view(kube: Client, namespace: str, job: str) -> LauncherView:
    account = await launcher_account(kube, namespace, job)
    if account is None:
        return LauncherView([], "", 0.0, False, "no launcher pod yet")
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}}
    token = await kube.create(object_path("v1", "ServiceAccount", namespace, account, "token"), body)
    cm = await kube.get(object_path("v1", "ConfigMap", namespace, c.config_map_name(job)))
    cfg = kube.api.configuration
    server = urllib.parse.urlsplit(str(cfg.host))
    ca = await asyncio.to_thread(Path(str(cfg.ssl_ca_cert)).read_text)
    with tempfile.TemporaryDirectory(prefix="mpijob-launcher-") as tmp:
        root = Path(tmp)
        (root / "token").write_text(token["status"]["token"])
        (root / "ca.crt").write_text(ca)
        script = root / "discover_hosts.sh"
        script.write_text(cm["data"][c.DISCOVER_HOSTS_KEY])
        env = {
            "PATH": "/usr/bin:/bin",
            "KUBERNETES_SERVICE_HOST": server.hostname or "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(server.port or 443),
            "MPIJOB_SERVICEACCOUNT_DIR": str(root),
            "MPIJOB_DISCOVERY_FILE": str(root / "not-projected"),
            "MPIJOB_DISCOVERY_CONFIG_FILE": str(root / "not-projected"),
        }
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            "sh", str(script), "--explain", env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await proc.communicate()
        took = time.monotonic() - started
    text = err.decode()
    source = next((line.removeprefix("source: ") for line in text.splitlines() if line.startswith("source: ")), "")
    ok = proc.returncode == 0
    return LauncherView(parse_discovery_output(out.decode()) if ok else [], source, took, ok, "" if ok else text)
