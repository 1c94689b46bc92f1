"""Packaging that cannot run here is at least consistent: the image's lock covers the project's
dependencies with hashes, the Dockerfile pins its base and runs as non-root, the krew manifest matches the
package and its entry points."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_lock_pins_every_runtime_dependency_with_hashes() -> None:
    lock = (REPO / "requirements.lock").read_text()
    pinned = {_norm(m.group(1)): m.group(2) for m in re.finditer(r"^([A-Za-z0-9_.-]+)==(\S+) \\$", lock, re.M)}
    for dep in PROJECT["dependencies"]:
        name = _norm(re.split(r"[<>=!~ \[;]", dep, maxsplit=1)[0])
        assert name in pinned, f"{name} missing from requirements.lock: run `make lock`"
    # Every pinned requirement carries at least one hash (pip --require-hashes refuses otherwise).
    blocks = re.split(r"\n(?=[A-Za-z0-9_.-]+==)", lock.split("\n\n", 1)[-1])
    assert all("--hash=sha256:" in b for b in blocks if "==" in b)


def test_dockerfile_pins_the_base_by_digest_and_runs_as_non_root() -> None:
    text = (REPO / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE=\S+@sha256:[0-9a-f]{64}$", text, re.M)
    assert all(line.split()[1].startswith("${BASE}") for line in text.splitlines() if line.startswith("FROM "))
    assert text.count("FROM ") >= 2, "multi-stage"
    assert "--require-hashes" in text
    users = re.findall(r"^USER (\S+)$", text, re.M)
    assert users and users[-1].split(":")[0] == "65532"


def test_krew_manifest_matches_the_package() -> None:
    manifest = yaml.safe_load((REPO / "deploy/krew/mpijob.yaml").read_text())
    assert manifest["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert manifest["kind"] == "Plugin" and manifest["metadata"]["name"] == "mpijob"
    assert manifest["spec"]["version"] == "v" + PROJECT["version"]
    scripts = PROJECT["scripts"]
    assert scripts["kubectl-mpijob"] == "mpijob.cli.plugin:run"
    assert scripts["kubectl_complete-mpijob"] == "mpijob.cli.plugin:run_complete"
    for platform in manifest["spec"]["platforms"]:
        assert platform["bin"] == "kubectl-mpijob"
        assert {f["from"] for f in platform["files"]} >= {"kubectl-mpijob", "kubectl_complete-mpijob", "lib/*"}
        assert PROJECT["version"] in platform["uri"]


def test_the_operator_wheel_holds_only_the_operator_package() -> None:
    # The package list setuptools builds the wheel (and so the image and the plugin archive) from.
    import setuptools

    find = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = setuptools.find_packages(where=str(REPO / find["where"][0]), include=find["include"])
    layers = {"mpijob.api", "mpijob.planner", "mpijob.kube", "mpijob.executor", "mpijob.runtime", "mpijob.app"}
    assert {"mpijob", *layers, "mpijob.cli"} <= set(packages)
    assert all(p == "mpijob" or p.startswith("mpijob.") for p in packages), packages
    assert not any("testbed" in target for target in PROJECT["scripts"].values())


def test_the_testbed_is_its_own_distribution_with_its_own_command() -> None:
    testbed = tomllib.loads((REPO / "testbed/pyproject.toml").read_text())
    assert testbed["project"]["name"] == "mpijob-testbed"
    assert testbed["project"]["scripts"] == {"mpijob-testbed": "mpijob_testbed.cli:main"}
    (source,) = testbed["tool"]["setuptools"]["package-dir"].values()
    assert (REPO / "testbed" / source).resolve() == REPO / "src" / "mpijob_testbed"
    assert "mpijob-operator" in testbed["project"]["dependencies"]


def test_every_file_of_the_operator_package_is_in_its_wheel() -> None:
    # setuptools ships modules by itself; any other file (py.typed, discover_hosts.sh) only when package-data
    # names it, and a file left out would fail only once installed (the image, the plugin archive).
    package_data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    src = REPO / "src"
    shipped = {
        path
        for package, patterns in package_data.items()
        for pattern in patterns
        for path in (src / package.replace(".", "/")).glob(pattern)
    }
    files = {p for p in (src / "mpijob").rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert {p for p in files if p.suffix != ".py"} - shipped == set()
