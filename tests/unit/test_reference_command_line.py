"""Issue 40: an install that swaps the reference operator's image keeps its Deployment's args. Every flag of
kubeflow/mpi-operator v0.8.2's `mpi-operator` (cmd/mpi-operator/app/options/options.go, and klog's) is
accepted the way Go's flag package reads it, keeps its meaning where mpijob has the feature, and is said to
have no effect where it has not. Flags without a sub-command start the operator as the reference's binary
does: leader election on its Lease, /healthz on :8080."""

from __future__ import annotations

import pytest

from mpijob.cli import main as cli_main
from mpijob.cli import reference_flags
from mpijob.cli.main import _operator_argv, build_parser

# v0.8.2's own flags, with a value each kind accepts.
REFERENCE_OWN = {
    "master": "https://10.0.0.1:6443",
    "kubeConfig": "/etc/kube/config",
    "namespace": "team-a",
    "threadiness": "2",
    "version": None,
    "monitoring-port": "8443",
    "gang-scheduling": "scheduler-plugins-scheduler",
    "lock-namespace": "mpi-operator",
    "kube-api-qps": "5",
    "kube-api-burst": "10",
    "controller-queue-rate-limit": "10",
    "controller-queue-burst": "100",
    "cluster-domain": "cluster.local",
}
KLOG = ["alsologtostderr", "logtostderr", "v", "vmodule", "log_dir", "log_file", "log_file_max_size",
        "add_dir_header", "skip_headers", "skip_log_headers", "one_output", "stderrthreshold", "log_backtrace_at",
        "legacy_stderr_threshold_behavior"]  # fmt: skip


def parsed(argv: list[str]) -> tuple[object, list[str]]:
    out = _operator_argv(argv)
    assert not isinstance(out, int), out
    return build_parser().parse_args(out[0]), out[1]


def test_the_reference_deployment_args_start_the_operator_as_the_reference_binary_does() -> None:
    args, notes = parsed(["-alsologtostderr", "--lock-namespace=mpi-operator"])
    assert args.command == "operator"  # type: ignore[attr-defined]
    assert args.leader_elect and args.lease_name == "mpi-operator"  # type: ignore[attr-defined]
    assert args.lock_namespace == "mpi-operator" and args.health_port == 8080  # type: ignore[attr-defined]
    assert args.namespaces == []  # type: ignore[attr-defined]
    assert notes == ["flag -alsologtostderr=true has no effect: " + reference_flags._KLOG]


def test_the_base_manifest_without_lock_namespace_elects_in_the_reference_default() -> None:
    args, _ = parsed(["-alsologtostderr"])
    assert args.lock_namespace == "mpi-operator"  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", [n for n in REFERENCE_OWN if n != "version"] + KLOG)
@pytest.mark.parametrize("dashes", ["-", "--"])
def test_every_reference_flag_is_accepted_with_one_or_two_dashes_inline_or_spaced(name: str, dashes: str) -> None:
    flag = reference_flags.REFERENCE_FLAGS[name]
    value = REFERENCE_OWN.get(name) or {"bool": "true", "int": "3", "string": "x"}[flag.kind]
    forms = [[f"{dashes}{name}={value}"]]
    if flag.kind == "bool":
        forms.append([f"{dashes}{name}"])
    else:
        forms.append([f"{dashes}{name}", value])
    for form in forms:
        parsed(form)
        parsed(["operator", *form])


def test_flags_mpijob_has_keep_their_meaning() -> None:
    argv = [f"--{n}={v}" for n, v in REFERENCE_OWN.items() if v is not None]
    args, notes = parsed(argv)
    assert args.master == "https://10.0.0.1:6443" and args.kubeconfig == "/etc/kube/config"  # type: ignore[attr-defined]
    assert args.namespaces == ["team-a"] and args.workers == 2  # type: ignore[attr-defined]
    assert args.metrics_port == 8443 and args.gang_scheduling == "scheduler-plugins-scheduler"  # type: ignore[attr-defined]
    assert (args.kube_api_qps, args.kube_api_burst, args.cluster_domain) == (5, 10, "cluster.local")  # type: ignore[attr-defined]
    assert [n.split("=")[0] for n in notes] == ["flag -controller-queue-rate-limit", "flag -controller-queue-burst"]


def test_an_empty_namespace_means_every_namespace_and_kubeflow_namespace_is_the_default() -> None:
    args, _ = parsed(["-namespace="])
    assert args.namespaces == []  # type: ignore[attr-defined]
    assert "--namespace=team-b" in reference_flags.reference_defaults(set(), {"KUBEFLOW_NAMESPACE": "team-b"})
    assert not any(a.startswith("--namespace") for a in reference_flags.reference_defaults({"namespace"}, {}))


def test_klog_verbosity_four_or_more_is_debug_logging() -> None:
    assert parsed(["-v=4"])[0].log_level == "DEBUG"  # type: ignore[attr-defined]
    assert parsed(["-v", "2"])[0].log_level != "DEBUG"  # type: ignore[attr-defined]


def test_the_sub_command_keeps_its_own_defaults_with_reference_flags() -> None:
    args, _ = parsed(["operator", "-alsologtostderr", "-threadiness=4"])
    assert not args.leader_elect and args.lease_name == "mpijob-operator" and args.workers == 4  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "argv",
    [["-threadiness=two"], ["-alsologtostderr=maybe"], ["-kube-api-qps"], ["operator", "-monitoring-port", "x"]],
)
def test_a_bad_value_exits_2_as_go_flag_does(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(argv) == 2
    assert "flag" in capsys.readouterr().err


def test_an_unknown_flag_is_refused() -> None:
    with pytest.raises(SystemExit) as exit_:
        cli_main.main(["-no-such-flag"])
    assert exit_.value.code == 2


def test_version_prints_and_exits(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(["-version"]) == 0
    assert capsys.readouterr().out.startswith("mpijob ")


def test_our_own_long_flags_take_one_dash_too() -> None:
    args, _ = parsed(["operator", "-leader-elect", "-health-port=9000"])
    assert args.leader_elect and args.health_port == 9000  # type: ignore[attr-defined]


def test_the_reference_binary_name_reads_even_no_arguments_as_the_references_command_line() -> None:
    out = _operator_argv([], reference=True)
    assert not isinstance(out, int)
    args = build_parser().parse_args(out[0])
    assert args.leader_elect and args.lease_name == "mpi-operator" and args.health_port == 8080  # type: ignore[attr-defined]
