"""`kubectl mpijob`, run through the testbed's real kubectl (plugin discovery on PATH, kubectl's plugin
completion hook) against the testbed, with kubectl's habits: the namespace from the current context,
--context, -n, -o, --version, one-line errors, scale-in --wait with progress."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from elastic_jobs import elastic_job, own_nodes, start_job
from kube import Kube, live, names
from kubernetes_asyncio.client import ApiClient

from mpijob_testbed.paths import resolve_bin_dir

pytestmark = pytest.mark.integration


def _kubeconfig(admin: Path, namespace: str, out: Path) -> Path:
    """The admin kubeconfig with two contexts: `test` (current, namespace = the test's) and `other`."""
    config = yaml.safe_load(admin.read_text())
    base = next(c for c in config["contexts"] if c["name"] == config["current-context"])["context"]
    ca = next(c for c in config["clusters"] if c["name"] == base["cluster"])["cluster"]
    for key in ("certificate-authority",):
        if ca.get(key) and not Path(ca[key]).is_absolute():
            ca[key] = str(admin.parent / ca[key])
    for user in config["users"]:
        for key in ("client-certificate", "client-key"):
            if user["user"].get(key) and not Path(user["user"][key]).is_absolute():
                user["user"][key] = str(admin.parent / user["user"][key])
    config["contexts"] = [
        {"name": "test", "context": {**base, "namespace": namespace}},
        {"name": "other", "context": {**base, "namespace": "default"}},
    ]
    config["current-context"] = "test"
    out.write_text(yaml.safe_dump(config))
    return out


async def _kubectl(kubeconfig: Path, *args: str) -> tuple[int, str, str]:
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        # The plugin and its completion helper, as `pip install` puts them next to the interpreter.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    proc = await asyncio.create_subprocess_exec(
        str(resolve_bin_dir(None) / "kubectl"),
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    return int(proc.returncode or 0), out.decode(), err.decode()


async def test_kubectl_mpijob_has_kubectls_habits(kube: Kube, api: ApiClient, kubeconfig: Path, tmp_path: Path) -> None:
    config = _kubeconfig(kubeconfig, kube.ns, tmp_path / "config")
    rc, out, _ = await _kubectl(config, "plugin", "list")
    assert rc == 0 and "kubectl-mpijob" in out, out
    rc, out, _ = await _kubectl(config, "mpijob", "--version")
    assert rc == 0 and out.strip() == "kubectl-mpijob v0.1.0", out

    job = "plug"
    async with own_nodes(api, kube, "a", "b") as nodes:
        pods = await start_job(kube, elastic_job(job, nodes, grace=4), nodes)

        # No -n: the namespace comes from the current context.
        rc, out, err = await _kubectl(config, "mpijob", "status", job, "-o", "json")
        assert rc == 0, err
        doc = json.loads(out)
        assert doc["namespace"] == kube.ns and sorted(w["name"] for w in doc["workers"]) == sorted(names(pods))
        assert len(doc["discovery"]) == 4
        rc, out, _ = await _kubectl(config, "mpijob", "status", job, "-o", "yaml")
        assert yaml.safe_load(out)["name"] == job
        rc, out, _ = await _kubectl(config, "mpijob", "status", job, "-o", "wide")
        header = next(line for line in out.splitlines() if line.startswith("NAME"))
        assert header.split() == ["NAME", "INDEX", "STATUS", "NODE", "LEAVING", "REASON", "IP"], header

        # --context switches the namespace with it; -n wins over the context's.
        rc, out, err = await _kubectl(config, "mpijob", "--context", "other", "status", job)
        assert rc == 1 and out == "", out
        assert err.strip() == f"error: MPIJob default/{job} not found", err
        rc, out, err = await _kubectl(config, "mpijob", "status", job, "--context", "other", "-n", kube.ns)
        assert rc == 0, err

        # Completion through kubectl's own plugin-completion hook (kubectl_complete-mpijob).
        rc, out, _ = await _kubectl(config, "__complete", "mpijob", "status", "")
        assert job in out.splitlines(), out
        rc, out, _ = await _kubectl(config, "__complete", "mpijob", "scale-in", job, "--workers", "")
        assert set(names(pods)) <= set(out.splitlines()), out

        # scale-in --wait: progress until the victim is gone.
        victim = names(pods)[0]
        rc, out, err = await _kubectl(
            config, "mpijob", "scale-in", job, "--workers", victim, "--wait", "--timeout", "120"
        )
        assert rc == 0, err
        lines = out.splitlines()
        assert lines[0] == f"mpijob {kube.ns}/{job}: workersToDelete += {victim}; replicas 4 -> 3"
        assert any(f"{victim}: left discovery at" in line for line in lines), out
        assert lines[-2].endswith(f"{victim}: gone") and lines[-1] == "all 1 workers gone", out
        assert victim not in names(live(await kube.workers(job)))

        # Bad input: one line, no traceback.
        rc, out, err = await _kubectl(config, "mpijob", "scale-in", job, "--workers", "nope")
        assert rc == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
