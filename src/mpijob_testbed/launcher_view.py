"""What a job's launcher sees: its discover_hosts.sh (from the ConfigMap the operator wrote) run as a local
process with the launcher's own credentials, as a pod would get them: a TokenRequest for the ServiceAccount
the launcher pod runs as, the cluster CA, and the API address in KUBERNETES_SERVICE_HOST/PORT. No kubelet
projects files here, so unless the caller writes them, only the API path is exercised.

The one place the demo, the benchmarks and the integration tests build a launcher's credentials and
environment."""

from __future__ import annotations

import asyncio
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpijob.api import constants as c
from mpijob.kube.client import Client
from mpijob.kube.resources import collection_path, object_path
from mpijob.planner.hostfile import parse_discovery_output


@dataclass
class LauncherView:
    hosts: list[tuple[str, int]]
    source: str
    seconds: float
    ok: bool
    error: str


@dataclass
class ScriptRun:
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def api_address(kube: Client) -> tuple[str, str]:
    """KUBERNETES_SERVICE_HOST and _PORT as a pod would see them for this client's API server."""
    server = urllib.parse.urlsplit(str(kube.api.configuration.host))
    return server.hostname or "127.0.0.1", str(server.port or 443)


async def launcher_account(kube: Client, namespace: str, job: str) -> str | None:
    """The ServiceAccount the job's live launcher pod runs as, None without one."""
    selector = f"{c.LABEL_JOB_NAME}={job},{c.LABEL_JOB_ROLE}={c.ROLE_LAUNCHER}"
    pods = await kube.request("GET", collection_path("v1", "Pod", namespace), query=[("labelSelector", selector)])
    live = [p for p in pods.get("items") or [] if not p["metadata"].get("deletionTimestamp")]
    if not live:
        return None
    return str(live[0]["spec"].get("serviceAccountName") or "default")


async def request_token(
    kube: Client, namespace: str, account: str, *, seconds: int = 600, bound_secret: dict[str, Any] | None = None
) -> str:
    """A TokenRequest for `account`; bound to `bound_secret` (revoked when it is deleted) when given."""
    body: dict[str, Any] = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": seconds},
    }
    if bound_secret is not None:
        meta = bound_secret["metadata"]
        body["spec"]["boundObjectRef"] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "name": meta["name"],
            "uid": meta["uid"],
        }
    result = await kube.create(object_path("v1", "ServiceAccount", namespace, account, "token"), body)
    return str(result["status"]["token"])


def write_service_account(directory: Path, kube: Client, namespace: str, token: str) -> Path:
    """The files a pod finds in /var/run/secrets/kubernetes.io/serviceaccount: token, ca.crt, namespace."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "token").write_text(token)
    (directory / "ca.crt").write_text(Path(str(kube.api.configuration.ssl_ca_cert)).read_text())
    (directory / "namespace").write_text(namespace)
    return directory


def launcher_env(
    host: str, port: str, service_account_dir: Path, discovery_file: Path, config_file: Path
) -> dict[str, str]:
    """discover_hosts.sh's environment in a launcher: the API address, the credentials, the projected files."""
    return {
        "PATH": "/usr/bin:/bin",
        "KUBERNETES_SERVICE_HOST": host,
        "KUBERNETES_SERVICE_PORT": port,
        "MPIJOB_SERVICEACCOUNT_DIR": str(service_account_dir),
        "MPIJOB_DISCOVERY_FILE": str(discovery_file),
        "MPIJOB_DISCOVERY_CONFIG_FILE": str(config_file),
        # A local process is outside the cluster: no cluster DNS answers the workers' names here (the host's
        # resolver says NXDOMAIN), so the script's DNS check would hold every host back. Real-node launchers
        # (tests/integration/test_real_node*.py) run it with the check on, against the testbed's CoreDNS.
        "MPIJOB_DISCOVERY_DNS_CHECK": "0",
    }


async def discover_hosts_script(kube: Client, namespace: str, job: str) -> str:
    cm = await kube.get(object_path("v1", "ConfigMap", namespace, c.config_map_name(job)))
    return str(cm["data"][c.DISCOVER_HOSTS_KEY])


async def run_discover_hosts(path: Path, env: dict[str, str], *, within: float = 30.0) -> ScriptRun:
    """Runs the script with `sh` (as Horovod's driver does) and `--explain` (the source it used, on stderr).
    `within` only keeps a hung script from hanging the caller (no performance claim)."""
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        "sh", str(path), "--explain", env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), within)
    return ScriptRun(int(proc.returncode or 0), out.decode(), err.decode(), time.monotonic() - started)


async def launcher_view(kube: Client, namespace: str, job: str, *, account: str | None = None) -> LauncherView:
    """One run of the job's discover_hosts.sh as its launcher (`account`: default the launcher pod's)."""
    account = account or await launcher_account(kube, namespace, job)
    if account is None:
        return LauncherView([], "", 0.0, False, "no launcher pod yet")
    token = await request_token(kube, namespace, account)
    script = await discover_hosts_script(kube, namespace, job)
    with tempfile.TemporaryDirectory(prefix="mpijob-launcher-") as tmp:
        root = Path(tmp)
        write_service_account(root, kube, namespace, token)
        path = root / "discover_hosts.sh"
        path.write_text(script)
        host, port = api_address(kube)
        # The projected files point nowhere: only the API path is exercised.
        env = launcher_env(host, port, root, root / "not-projected", root / "not-projected")
        run = await run_discover_hosts(path, env)
    source = next(
        (line.removeprefix("source: ") for line in run.stderr.splitlines() if line.startswith("source: ")), ""
    )
    ok = run.returncode == 0
    hosts = parse_discovery_output(run.stdout) if ok else []
    return LauncherView(hosts, source, run.seconds, ok, "" if ok else run.stderr)
