"""The launcher's side of discovery, on the testbed: the job's real discover_hosts.sh (taken from the ConfigMap
the operator wrote), run as a host process the way a launcher pod would run it, with the launcher's real
credentials: a TokenRequest for the ServiceAccount the launcher runs as, the testbed's CA, and the API
address in KUBERNETES_SERVICE_HOST/PORT.

kwok pods run no kubelet, so the two files a real kubelet would project into the launcher are written here
from what the API holds: the launcher pod's discovery annotation (the downwardAPI volume) and the
ConfigMap's list (the ConfigMap volume). A real kubelet's refresh delay is measured on the real-node lane,
not here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kube import Kube

from mpijob.api import constants as c
from mpijob_testbed.launcher_view import (
    api_address,
    launcher_env,
    request_token,
    run_discover_hosts,
    write_service_account,
)

Obj = dict[str, Any]


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    @property
    def pods(self) -> list[str]:
        """Pod names of the printed hosts (`<pod>.<job>.<ns>.svc:<slots>`)."""
        return sorted(line.split(".", 1)[0] for line in self.stdout.splitlines() if line.strip())

    @property
    def lines(self) -> list[str]:
        return [line for line in self.stdout.splitlines() if line.strip()]


@dataclass
class Launcher:
    """One launcher's credentials and files, in a temporary directory."""

    kube: Kube
    job: str
    dir: Path
    host: str
    port: str
    env: dict[str, str] = field(default_factory=dict)

    @property
    def ca_file(self) -> Path:
        return self.dir / "serviceaccount" / "ca.crt"

    @property
    def token(self) -> str:
        return (self.dir / "serviceaccount" / "token").read_text()

    async def script(self) -> str:
        cm = await self.kube.get("v1", "ConfigMap", c.config_map_name(self.job))
        assert cm is not None, f"ConfigMap of {self.job} missing"
        return str(cm["data"][c.DISCOVER_HOSTS_KEY])

    async def project_files(self) -> None:
        """What the kubelet would have projected: the launcher pod's annotation and the ConfigMap's list."""
        pods = await self.kube.launcher_pods(self.job)
        annotation = ""
        for pod in pods:
            annotation = (pod["metadata"].get("annotations") or {}).get(c.ANNOTATION_DISCOVERED_HOSTS, "")
        (self.dir / "discovery-hosts").write_text(annotation)
        cm = await self.kube.get("v1", "ConfigMap", c.config_map_name(self.job))
        (self.dir / "config-discovered-hosts").write_text(
            ((cm or {}).get("data") or {}).get(c.DISCOVERED_HOSTS_KEY, "")
        )

    def base_env(self) -> dict[str, str]:
        return launcher_env(
            self.host,
            self.port,
            self.dir / "serviceaccount",
            self.dir / "discovery-hosts",
            self.dir / "config-discovered-hosts",
        )

    async def run(self, script: str | None = None, **overrides: str | None) -> Run:
        """Runs discover_hosts.sh with `sh` (as Horovod's driver does) and `--explain`; `overrides` change
        the environment (None removes a variable)."""
        text = script if script is not None else await self.script()
        path = self.dir / "discover_hosts.sh"
        path.write_text(text)
        path.chmod(0o555)
        env = {**self.base_env(), **self.env}
        for key, value in overrides.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        run = await run_discover_hosts(path, env)
        return Run(run.returncode, run.stdout, run.stderr)

    async def get_as_launcher(self, path: str) -> int:
        """HTTP status of a GET with the launcher's token (200 or the refusal)."""
        url = f"https://{self.host}:{self.port}{path}"
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.token}"})
        context = ssl.create_default_context(cafile=str(self.ca_file))

        def call() -> int:
            try:
                with urllib.request.urlopen(request, context=context, timeout=10) as response:
                    return int(response.status)
            except urllib.error.HTTPError as err:
                return int(err.code)

        return await asyncio.to_thread(call)


async def service_account_of(kube: Kube, job: str) -> str:
    """The ServiceAccount the job's launcher pod runs as (as the API server admitted it)."""
    pods = [p for p in await kube.launcher_pods(job) if not p["metadata"].get("deletionTimestamp")]
    assert len(pods) == 1, f"expected one launcher pod of {job}, found {len(pods)}"
    return str(pods[0]["spec"].get("serviceAccountName") or "default")


@contextlib.asynccontextmanager
async def launcher(kube: Kube, job: str, *, bound_secret: Obj | None = None) -> AsyncIterator[Launcher]:
    """The launcher of `job` (its pod must exist): token, CA and API address as a pod would get them."""
    account = await service_account_of(kube, job)
    token = await request_token(kube.client, kube.ns, account, seconds=3600, bound_secret=bound_secret)
    with tempfile.TemporaryDirectory(prefix="launcher-") as tmp:
        root = Path(tmp)
        write_service_account(root / "serviceaccount", kube.client, kube.ns, token)
        item = Launcher(kube, job, root, *api_address(kube.client))
        await item.project_files()
        yield item


def api_view(workers: list[Obj], slots: int = 1) -> list[str]:
    """What discovery should list, from the pods in the API: Running, not leaving, not terminating."""
    return sorted(
        p["metadata"]["name"]
        for p in workers
        if (p.get("status") or {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
        and c.ANNOTATION_LEAVING_SINCE not in (p["metadata"].get("annotations") or {})
    )


def dumps(run: Run) -> str:
    return json.dumps({"rc": run.returncode, "out": run.stdout, "err": run.stderr})
