"""The operator image (built by `make image`: deploy/image/build-offline.sh, a Debian root filesystem, the
hash-locked dependencies, umoci), run once with runc against the testbed: as uid 65532, on a read-only root
filesystem, with the operator's ServiceAccount token, it reconciles a job."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from kube import Kube, eventually, has_condition, live, mpijob
from operator_harness import OperatorProcess

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
IMAGE_DIR = Path(os.environ.get("MPIJOB_IMAGE_DIR", REPO / ".cache/image"))
VERSION = "0.1.0"


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found: the image test needs umoci and runc (Debian packages umoci, runc)")
    return path


def _unpack(bundle: Path) -> Path:
    """The image as a runtime bundle (config.json and rootfs/)."""
    if not (IMAGE_DIR / "oci").is_dir():
        pytest.fail(f"no image in {IMAGE_DIR}/oci: run `make image`")
    subprocess.run(
        [_tool("umoci"), "unpack", "--image", f"{IMAGE_DIR / 'oci'}:{VERSION}", str(bundle)],
        check=True,
        capture_output=True,
    )
    return bundle


def _bundle(tmp: Path, kubeconfig: Path, namespace: str) -> Path:
    bundle = _unpack(tmp / "bundle")
    config = json.loads((bundle / "config.json").read_text())
    # What the image says (user, entrypoint, env) is kept; the test only adds what a pod spec would.
    assert config["process"]["user"] == {"uid": 65532, "gid": 65532}
    config["process"]["terminal"] = False
    # Credentials as a pod gets them: a directory readable by the container's user, mounted read-only.
    creds = tmp / "creds"
    creds.mkdir()
    kube_config = yaml.safe_load(kubeconfig.read_text())
    cluster = kube_config["clusters"][0]["cluster"]
    if cluster.get("certificate-authority"):
        shutil.copy(cluster["certificate-authority"], creds / "ca.crt")
        cluster["certificate-authority"] = "/etc/mpijob/ca.crt"
    (creds / "kubeconfig").write_text(yaml.safe_dump(kube_config))
    for path in (creds, *creds.iterdir()):
        os.chown(path, 65532, 65532)
    config["process"]["args"] = [
        *config["process"]["args"][:2],  # the image's entrypoint and command: mpijob operator
        "--kubeconfig", "/etc/mpijob/kubeconfig", "--namespace", namespace, "--log-level", "DEBUG",
    ]  # fmt: skip
    config["root"]["readonly"] = True  # readOnlyRootFilesystem
    # The host's network (the testbed listens on 127.0.0.1).
    config["linux"]["namespaces"] = [n for n in config["linux"]["namespaces"] if n["type"] != "network"]
    config["mounts"].append(
        {"destination": "/etc/mpijob", "type": "bind", "source": str(creds), "options": ["rbind", "ro"]}
    )
    # The Deployment's emptyDir at /tmp: the Kubernetes client writes inline certificate data to temp files.
    config["mounts"].append(
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]}
    )
    (bundle / "config.json").write_text(json.dumps(config))
    return bundle


def test_the_image_carries_the_operator_and_not_the_development_testbed(tmp_path: Path) -> None:
    lib = _unpack(tmp_path / "bundle") / "rootfs/opt/mpijob/lib"
    assert (lib / "mpijob/app/operator.py").is_file()
    shipped = sorted(p.name for p in lib.iterdir() if "testbed" in p.name) + [
        str(p.relative_to(lib)) for p in (lib / "mpijob").rglob("*testbed*")
    ]
    assert shipped == [], shipped


def test_the_reference_images_entrypoint_path_reads_the_reference_command_line(tmp_path: Path) -> None:
    """A Deployment that names the reference image's entrypoint (`command: [/opt/mpi-operator]`) runs too."""
    rootfs = _unpack(tmp_path / "bundle") / "rootfs"
    env = {"PYTHONPATH": "/opt/mpijob/lib", "PATH": "/usr/local/bin:/usr/bin:/bin"}
    out = subprocess.run(
        [
            shutil.which("chroot", path="/usr/sbin:/usr/bin:/sbin:/bin") or "chroot",
            str(rootfs),
            "/opt/mpi-operator",
            "-version",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0 and out.stdout.startswith("mpijob "), (out.stdout, out.stderr)


async def test_the_image_runs_non_root_on_a_read_only_root_and_reconciles_a_job(
    kube: Kube, operator_kubeconfig: Path, running_operator: OperatorProcess, tmp_path: Path
) -> None:
    runc = _tool("runc")
    bundle = _bundle(tmp_path, operator_kubeconfig, kube.ns)
    container = f"mpijob-test-{kube.ns.rsplit('-', 1)[-1]}"
    log = (tmp_path / "container.log").open("wb")
    running_operator.stop()  # the container is the only operator for this test
    run = [runc, "run", "--bundle", str(bundle), container]
    proc = subprocess.Popen(run, stdout=log, stderr=subprocess.STDOUT)  # noqa: ASYNC220 (lives across awaits)
    try:
        await kube.create(mpijob("image", workers=2))

        async def running() -> bool:
            job = await kube.job("image")
            return has_condition(job, "Running") and len(live(await kube.workers("image"))) == 2

        try:
            await eventually(running, within=90, what="the job Running under the containerized operator")
        except AssertionError:
            raise AssertionError((tmp_path / "container.log").read_text()[-3000:]) from None
        assert proc.poll() is None, "the container exited"
        text = (tmp_path / "container.log").read_text()
        assert "operator started" in text and "Read-only file system" not in text, text[-2000:]
    finally:
        subprocess.run([runc, "kill", container, "KILL"], capture_output=True, check=False)  # noqa: ASYNC221 (instant)
        try:
            proc.wait(timeout=15)
        finally:
            subprocess.run([runc, "delete", "--force", container], capture_output=True, check=False)  # noqa: ASYNC221
            log.close()
            running_operator.start()
