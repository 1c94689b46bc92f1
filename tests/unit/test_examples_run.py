"""Every manifest under examples/ names the `make test` test that runs it as written (only the image swapped)
on the real nodes, or the reason it does not run there yet; a new example without either fails here. The
named tests exist and read their example's file."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
INTEGRATION = ROOT / "tests" / "integration"

# example -> (module, test) that runs it.
RUN_BY = {
    "elastic-horovod.yaml": (
        "test_real_node_horovod.py",
        "test_the_elastic_horovod_example_runs_as_written_and_a_scale_in_by_name_leaves_at_a_commit",
    ),
    "gang-coscheduling.yaml": (
        "test_real_node_mpi.py",
        "test_the_gang_example_binds_no_pod_until_the_whole_gang_fits_then_pi_runs",
    ),
    "kueue-elastic.yaml": (
        "test_real_node_horovod.py",
        "test_the_kueue_example_is_admitted_and_a_spot_signal_keeps_its_admission_and_trains_on",
    ),
    "restart-from-checkpoint.yaml": (
        "test_real_node_mpi.py",
        "test_restart_mode_shrinks_jacobi_off_a_spot_node_and_grows_it_back_from_its_checkpoints_to_the_same_grid",
    ),
    **{
        f"spot/{provider}.yaml": (
            "test_real_node_horovod.py",
            "test_each_spot_example_runs_as_written_and_its_providers_reclaim_takes_a_node_out_at_a_commit",
        )
        for provider in ("aks", "aws-nth", "gke", "karpenter")
    },
}
# Examples that are the reference's own example object for object: its run test runs them.
SAME_AS_REFERENCE = {"pi-openmpi.yaml": INTEGRATION / "data" / "reference-examples" / "v2beta1" / "pi" / "pi.yaml"}
REFERENCE_RUN = ("test_real_node_mpi.py", "test_the_reference_example_runs_unchanged_but_for_the_image")
# Not run on the real nodes yet, and why.
NOT_RUN_YET: dict[str, str] = {}


def _examples() -> set[str]:
    return {str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*.yaml")}


def test_every_example_names_its_run_test_or_why_it_has_none() -> None:
    named = set(RUN_BY) | set(SAME_AS_REFERENCE)
    assert not named & set(NOT_RUN_YET)
    assert _examples() == named | set(NOT_RUN_YET)


def test_each_run_test_exists_and_reads_its_example() -> None:
    for example, (module, test) in RUN_BY.items():
        source = (INTEGRATION / module).read_text()
        assert re.search(rf"^async def {test}\(", source, re.MULTILINE), (module, test)
        assert f'"examples" / "{example}"' in source, (module, example)
    module, test = REFERENCE_RUN
    assert re.search(rf"^async def {test}\(", (INTEGRATION / module).read_text(), re.MULTILINE)


def test_an_example_kept_as_the_references_is_the_same_object() -> None:
    for example, reference in SAME_AS_REFERENCE.items():
        assert yaml.safe_load((EXAMPLES / example).read_text()) == yaml.safe_load(reference.read_text()), example


def _training_programs() -> dict[str, str]:
    programs = {}
    for path in EXAMPLES.rglob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] == "ConfigMap" and "train.py" in doc.get("data", {}):
                programs[str(path.relative_to(EXAMPLES))] = doc["data"]["train.py"]
    return programs


def test_the_examples_that_carry_a_training_program_carry_the_same_one() -> None:
    programs = _training_programs()
    horovod = {"elastic-horovod.yaml", "kueue-elastic.yaml", *(e for e in RUN_BY if e.startswith("spot/"))}
    assert horovod <= set(programs)
    assert len(set(programs.values())) == 1, sorted(programs)
