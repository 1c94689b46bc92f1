"""The reference's own e2e suite (kubeflow/mpi-operator v0.8.2 `test/e2e`, Ginkgo v1), unchanged, against mpijob
on the two real nodes (issue 40, item 4).

bench/reference/build-e2e.sh compiles the suite with `go test -c ./test/e2e` in a writable copy of the module;
this module runs that binary as its own CI runs it against an existing cluster (`USE_EXISTING_CLUSTER=true`,
`USE_EXISTING_OPERATOR=true`, the images from `TEST_OPENMPI_IMAGE`/`TEST_MPICH_IMAGE`/`TEST_INTELMPI_IMAGE`,
the kubeconfig from `KUBECONFIG`), with a JUnit report (`-ginkgo.reportFile`), and checks spec by spec that the
expected specs ran and passed. What kind gives the suite, the testbed arranges outside it: the MPI images
loaded onto the real nodes, and the suite's pods (no tolerations, no node selector) sent to the real nodes by
tainting the kwok nodes (test_real_node_mpi.py's `unchanged_pods_land_on_real_nodes`). The operator is
mpijob as a process, as in test_real_node_mpi.py.

Skipped with `-ginkgo.skip`, each with its reason (SKIPPED below): the contexts that re-deploy the
`mpi-operator` Deployment (mpijob does not run as that Deployment's pod here yet), Volcano, and Intel MPI while
testbed/build-mpi-images.sh cannot build an `intelmpi` image. The real-node skips and a failed build are
failures under CI=true (cannot_run.py).
"""

from __future__ import annotations

import os
import subprocess
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cannot_run import cannot_run
from operator_harness import OperatorProcess
from reference_operator import REFERENCE
from test_real_node import real_testbed, record, rn_operator  # noqa: F401
from test_real_node_mpi import image, unchanged_pods_land_on_real_nodes  # noqa: F401

from mpijob_testbed import cluster
from mpijob_testbed.load import load
from mpijob_testbed.paths import repo_root, resolve_bin_dir

pytestmark = [pytest.mark.integration, pytest.mark.realnode]

# real_testbed (test_real_node.py) starts this many real nodes for this module.
REAL_NODES = 2
SUITE = REFERENCE / "e2e"
# The suite's image variables, and the testbed image (testbed/build-mpi-images.sh) each one names.
IMAGE_ENV = {"openmpi4": "TEST_OPENMPI_IMAGE", "mpich": "TEST_MPICH_IMAGE", "intelmpi": "TEST_INTELMPI_IMAGE"}
SUITE_TIMEOUT_S = 30 * 60

# Every spec of the pinned suite, as its JUnit report names them, by context.
_OMPI = "MPIJob with OpenMPI implementation when "
OPENMPI = [
    f"{_OMPI}has malformed command should fail",
    f"{_OMPI}running as root should succeed",
    f"{_OMPI}running as root when suspended on creation should not create pods when suspended and succeed when resumed",
    f"{_OMPI}running as root when running with host network should succeed",
    f"{_OMPI}running as non-root should succeed",
    f"{_OMPI}running as non-root should not be updated when managed externally, only created",
    f"{_OMPI}running as non-root should succeed when explicitly managed by mpi-operator",
]
MPICH = [
    "MPIJob with MPICH Implementation when running as root should succeed",
    "MPIJob with MPICH Implementation when running as non-root should succeed",
]
INTEL = [
    "MPIJob with Intel Implementation when running as root should succeed",
    "MPIJob with Intel Implementation when running as non-root should succeed",
]
INTEL_CONTEXT = "with Intel Implementation"
# Contexts this testbed cannot host against mpijob yet, each with its spec and why (passed as -ginkgo.skip).
SKIPPED = {
    "with scheduler-plugins": (
        ["MPIJob with scheduler-plugins should create pending pods"],
        "re-deploys the `mpi-operator` Deployment with --gang-scheduling and waits for it to be available; "
        "mpijob runs as a host process here, not as that Deployment's pod (issue 40, item 2)",
    ),
    "with custom cluster-domain": (
        ["MPIJob with custom cluster-domain when running as root should succeed"],
        "re-deploys the `mpi-operator` Deployment with --cluster-domain; mpijob runs as a host process here, "
        "not as that Deployment's pod (issue 40, item 2)",
    ),
    "with volcano-scheduler": (
        ["MPIJob with volcano-scheduler should create pending pods"],
        "the Volcano scheduler (volcano.sh/volcano) is not served by the Go module proxy, and its images cannot "
        "be pulled here",
    ),
}


@dataclass(frozen=True)
class Spec:
    name: str
    state: str  # passed, failed or skipped
    seconds: float
    failure: str


@pytest.fixture(scope="module")
def suite_binary() -> Path:
    """The compiled suite (cached by build-e2e.sh's input hash); built before any testbed starts."""
    t = time.monotonic()
    try:
        build = subprocess.run(
            ["bash", str(repo_root() / "bench" / "reference" / "build-e2e.sh")],
            capture_output=True, text=True, check=False, timeout=60 * 60,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as err:
        cannot_run(f"the reference's e2e suite does not build here: {err}")
    if build.returncode != 0:
        cannot_run(f"the reference's e2e suite does not build here: {build.stdout[-1500:]}{build.stderr[-1500:]}")
    print(build.stdout.strip(), f"({time.monotonic() - t:.1f}s)")
    return SUITE / "e2e.test"


def _build_images(out: Path, *names: str) -> subprocess.CompletedProcess[str]:
    script = repo_root() / "testbed" / "build-mpi-images.sh"
    return subprocess.run(["bash", str(script), str(out), *names], capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def suite_images(real_testbed: tuple[cluster.Testbed, dict[str, Any]]) -> dict[str, str]:  # noqa: F811
    """The suite's image variables: the testbed's OpenMPI 4.1 and MPICH images, loaded onto both real nodes
    under the names the variables give; Intel MPI's too once build-mpi-images.sh knows `intelmpi`."""
    tb = real_testbed[0]
    out = tb.state_dir / "mpi-images"
    build = _build_images(out, "openmpi4", "mpich")
    if build.returncode != 0:
        cannot_run(f"the MPI images cannot be built here (exit {build.returncode}): {build.stderr[-2000:]}")
    names = ["openmpi4", "mpich"]
    intel = _build_images(out, "intelmpi")
    if intel.returncode == 0:
        names.append("intelmpi")
    elif "unknown image" not in intel.stderr:  # known to the script, and broken: that must not pass as a skip
        cannot_run(f"the Intel MPI image cannot be built here (exit {intel.returncode}): {intel.stderr[-2000:]}")
    took = {name: load(out / f"{name}.tar", name=image(name), state_dir=tb.state_dir) for name in names}
    record(reference_e2e_image_import_s=took)
    return {IMAGE_ENV[name]: image(name) for name in names}


def skip_reasons(images: dict[str, str]) -> dict[str, str]:
    """Context -> why it does not run here; Intel only while there is no Intel MPI image."""
    reasons = {context: why for context, (_, why) in SKIPPED.items()}
    if IMAGE_ENV["intelmpi"] not in images:
        reasons[INTEL_CONTEXT] = "no Intel MPI image: testbed/build-mpi-images.sh does not build `intelmpi` yet"
    return reasons


def expected_to_run(images: dict[str, str]) -> list[str]:
    return OPENMPI + MPICH + (INTEL if IMAGE_ENV["intelmpi"] in images else [])


def run_suite(binary: Path, tb: cluster.Testbed, images: dict[str, str], skip: list[str], report: Path) -> int:
    """The suite as its CI runs it against an existing cluster and operator; its output goes to stdout and to
    <state dir>/reference-e2e.log. The suite resolves `../../bin/kubectl` from its working directory: the
    copy gets the testbed's kubectl there (the specs that run here never call it; the skipped ones do)."""
    workdir = SUITE / "src" / "test" / "e2e"
    kubectl = SUITE / "src" / "bin" / "kubectl"
    kubectl.parent.mkdir(exist_ok=True)
    kubectl.unlink(missing_ok=True)
    kubectl.symlink_to(resolve_bin_dir(None) / "kubectl")
    env = {
        **os.environ,
        "KUBECONFIG": str(tb.kubeconfig),
        "USE_EXISTING_CLUSTER": "true",
        "USE_EXISTING_OPERATOR": "true",
        **images,
    }
    argv = [str(binary), "-test.timeout", f"{SUITE_TIMEOUT_S}s", "-ginkgo.v", "-ginkgo.noColor",
            f"-ginkgo.reportFile={report}", *(f"-ginkgo.skip={s}" for s in skip)]  # fmt: skip
    log = tb.state_dir / "reference-e2e.log"
    with log.open("w") as out, subprocess.Popen(argv, cwd=workdir, env=env, stdout=subprocess.PIPE,
                                                stderr=subprocess.STDOUT, text=True) as proc:  # fmt: skip
        assert proc.stdout is not None
        for line in proc.stdout:  # streamed: a 96 s run should show its progress under -s
            print(line, end="")
            out.write(line)
        return proc.wait(timeout=SUITE_TIMEOUT_S)


def read_report(report: Path) -> list[Spec]:
    """Ginkgo v1's JUnit report: one testcase per spec (a failed BeforeSuite is a testcase of its own)."""
    specs = []
    for case in ET.parse(report).getroot().iter("testcase"):
        failure = case.find("failure")
        state = "failed" if failure is not None else "skipped" if case.find("skipped") is not None else "passed"
        text = (failure.text or "") if failure is not None else ""
        specs.append(Spec(case.get("name", ""), state, float(case.get("time", "0")), text))
    return specs


def test_the_reference_e2e_suite_passes_every_spec_the_testbed_can_host_against_mpijob(
    suite_binary: Path,
    real_testbed: tuple[cluster.Testbed, dict[str, Any]],  # noqa: F811
    rn_operator: OperatorProcess,  # noqa: F811
    suite_images: dict[str, str],
    unchanged_pods_land_on_real_nodes: None,  # noqa: F811
) -> None:
    """The reference's own suite, not a word of it changed, against mpijob: every spec of OpenMPI (malformed
    command, root, suspend, host network, non-root, both managedBy cases), MPICH and, with its image, Intel MPI
    runs and passes; the contexts this testbed cannot host are skipped, each with its reason, and nothing
    else is skipped."""
    tb = real_testbed[0]
    reasons = skip_reasons(suite_images)
    for context, why in reasons.items():
        print(f"reference e2e: skipping '{context}': {why}")
    report = tb.state_dir / "reference-e2e-junit.xml"
    t = time.monotonic()
    code = run_suite(suite_binary, tb, suite_images, list(reasons), report)
    took = time.monotonic() - t
    assert report.exists(), f"the suite wrote no JUnit report (exit {code}); its output: {tb.state_dir}"
    specs = read_report(report)
    for spec in specs:
        print(f"reference e2e: {spec.state.upper():7} {spec.seconds:6.1f}s  {spec.name}")
    record(reference_e2e_s=round(took, 1), reference_e2e={s.name: s.state for s in specs})
    failed = [f"{s.name}:\n{s.failure}" for s in specs if s.state == "failed"]
    assert not failed, "\n\n".join(failed) + f"\n(operator log: {rn_operator.log_path})"
    ran = sorted(s.name for s in specs if s.state == "passed")
    assert ran == sorted(expected_to_run(suite_images)), ran
    every = OPENMPI + MPICH + INTEL + [name for names, _ in SKIPPED.values() for name in names]
    assert sorted(s.name for s in specs) == sorted(every), "the suite's specs are not the pinned version's"
    assert code == 0, f"the suite exited {code} with every spec passed"
