"""A fresh MPIJob: every child is created in shape, for each MPI implementation."""

from __future__ import annotations

import pytest

from mpijob.api import constants as c
from mpijob.planner.actions import Create
from mpijob.planner.plan import plan
from mpijob.planner.snapshot import Obj, OperatorConfig

from .builders import (
    JOB_UID,
    NS,
    cond,
    config_map,
    created_names,
    creates,
    emits,
    env_of,
    mpijob,
    patches,
    secret,
    service,
    snap,
    status_of,
    template,
    worker,
)

IMPLEMENTATIONS = ["OpenMPI", "Intel", "MPICH"]


def _one(objs: list[Obj]) -> Obj:
    assert len(objs) == 1, objs
    return objs[0]


def _owned_by_job(obj: Obj) -> bool:
    refs = obj["metadata"]["ownerReferences"]
    return (
        len(refs) == 1 and refs[0]["uid"] == JOB_UID and refs[0]["controller"] is True and refs[0]["kind"] == "MPIJob"
    )


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_fresh_job_creates_service_config_secret_workers_and_launcher_in_order(implementation: str) -> None:
    actions = plan(snap(mpijob(workers=3, implementation=implementation)))

    kinds = [a.obj["kind"] for a in actions if isinstance(a, Create)]
    assert kinds == ["Service", "ConfigMap", "Secret", "Pod", "Pod", "Pod", "Job"]
    for obj in creates(actions):
        assert _owned_by_job(obj), obj["metadata"]
        assert obj["metadata"]["namespace"] == NS
    assert created_names(actions, "Pod") == ["pi-worker-0", "pi-worker-1", "pi-worker-2"]
    # An Event per create.
    assert len(emits(actions, "Normal", "SuccessfulCreatePod")) == 3
    status = status_of(actions)
    assert status is not None
    created = cond(status, "Created")
    assert created is not None and created["status"] == "True"
    assert status["startTime"]
    assert status["state"] == "Created"


def test_service_is_headless_and_selects_launcher_and_workers() -> None:
    svc = _one(creates(plan(snap(mpijob())), "Service"))
    assert svc["metadata"]["name"] == "pi"
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {c.LABEL_OPERATOR_NAME: c.OPERATOR_NAME, c.LABEL_JOB_NAME: "pi"}
    assert svc["spec"]["publishNotReadyAddresses"] is False


@pytest.mark.parametrize(
    "implementation,line",
    [
        ("OpenMPI", "pi-worker-{i}.pi.team-a.svc slots=2"),
        ("Intel", "pi-worker-{i}.pi.team-a.svc:2"),
        ("MPICH", "pi-worker-{i}.pi.team-a.svc:2"),
    ],
)
def test_hostfile_format_follows_the_implementation(implementation: str, line: str) -> None:
    cm = _one(creates(plan(snap(mpijob(workers=2, slots=2, implementation=implementation))), "ConfigMap"))
    assert cm["metadata"]["name"] == "pi-config"
    assert cm["data"][c.HOSTFILE_KEY] == "".join(line.format(i=i) + "\n" for i in range(2))


def test_discover_hosts_lists_only_running_workers_as_host_colon_slots() -> None:
    job = mpijob(workers=3, slots=4)
    pods = [
        worker(job, 0, phase="Running"),
        worker(job, 1, phase="Pending", node=None),
        worker(job, 2, phase="Running", ready=False),
    ]

    cm = _one(creates(plan(snap(job, pods)), "ConfigMap"))

    assert cm["data"][c.DISCOVER_HOSTS_KEY] == (
        "#!/bin/sh\necho pi-worker-0.pi.team-a.svc:4\necho pi-worker-2.pi.team-a.svc:4\n"
    )


def test_discover_hosts_is_updated_when_a_worker_starts_running() -> None:
    job = mpijob(workers=2)
    data = {
        c.HOSTFILE_KEY: "pi-worker-0.pi.team-a.svc slots=1\npi-worker-1.pi.team-a.svc slots=1\n",
        c.DISCOVER_HOSTS_KEY: "#!/bin/sh\necho pi-worker-0.pi.team-a.svc:1\n",
    }
    pods = [worker(job, 0), worker(job, 1)]

    actions = plan(snap(job, pods, config_map_obj=config_map(job, data), service_obj=service(job)))

    [patch] = patches(actions, "ConfigMap")
    assert patch.patch["data"][c.DISCOVER_HOSTS_KEY].endswith("echo pi-worker-1.pi.team-a.svc:1\n")
    assert patch.resource_version == "10"


def test_cluster_domain_is_used_in_hostfile_discovery_and_dns_search() -> None:
    job = mpijob(workers=1)
    actions = plan(snap(job, [worker(job, 0)], config=OperatorConfig(cluster_domain="example.org")))

    cm = _one(creates(actions, "ConfigMap"))
    assert cm["data"][c.HOSTFILE_KEY] == "pi-worker-0.pi.team-a.svc.example.org slots=1\n"
    assert "echo pi-worker-0.pi.team-a.svc.example.org:1" in cm["data"][c.DISCOVER_HOSTS_KEY]
    job2 = mpijob(workers=1)
    pod = _one(creates(plan(snap(job2, config=OperatorConfig(cluster_domain="example.org"))), "Pod"))
    assert pod["spec"]["dnsConfig"]["searches"] == ["pi.team-a.svc.example.org"]


def test_ssh_secret_is_created_with_a_generated_key_pair() -> None:
    actions = plan(snap(mpijob()))
    [create] = [a for a in actions if isinstance(a, Create) and a.obj["kind"] == "Secret"]
    assert create.generate_ssh_keys is True
    assert create.obj["metadata"]["name"] == "pi-ssh"
    assert create.obj["type"] == "kubernetes.io/ssh-auth"
    others = [a for a in actions if isinstance(a, Create) and a.obj["kind"] != "Secret"]
    assert not any(a.generate_ssh_keys for a in others)


def test_existing_secret_is_not_recreated() -> None:
    job = mpijob()
    assert created_names(plan(snap(job, secret_obj=secret(job))), "Secret") == []


def test_worker_pods_have_stable_hostname_subdomain_labels_env_and_ssh() -> None:
    job = mpijob(workers=2, worker={"replicas": 2, "template": template(nodeSelector={"gpu": "a100"})})
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"] = {
        "labels": {"team": "a"},
        "annotations": {"note": "x"},
    }

    pods = creates(plan(snap(job)), "Pod")

    for index, pod in enumerate(pods):
        name = f"pi-worker-{index}"
        assert pod["metadata"]["name"] == name
        assert pod["spec"]["hostname"] == name
        assert pod["spec"]["subdomain"] == "pi"
        assert pod["spec"]["restartPolicy"] == "Never"
        assert pod["spec"]["nodeSelector"] == {"gpu": "a100"}
        assert pod["metadata"]["labels"] == {
            "team": "a",
            c.LABEL_OPERATOR_NAME: c.OPERATOR_NAME,
            c.LABEL_JOB_NAME: "pi",
            c.LABEL_JOB_ROLE: c.ROLE_WORKER,
            c.LABEL_REPLICA_INDEX: str(index),
        }
        assert pod["metadata"]["annotations"] == {"note": "x"}
        container = pod["spec"]["containers"][0]
        assert env_of(container)["K_MPI_JOB_ROLE"] == "worker"
        assert container["command"] == ["/usr/sbin/sshd", "-De"]
        assert {"name": "ssh-auth", "mountPath": "/root/.ssh"} in container["volumeMounts"]
        volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "ssh-auth")
        assert volume["secret"]["secretName"] == "pi-ssh"
        assert volume["secret"]["defaultMode"] == 0o600
        assert pod["spec"]["dnsConfig"]["searches"] == ["pi.team-a.svc.cluster.local"]


def test_worker_command_from_the_template_is_kept() -> None:
    tmpl = {"spec": {"containers": [{"name": "mpi", "image": "x", "command": ["sleep", "1"]}]}}
    pod = creates(plan(snap(mpijob(workers=1, worker={"replicas": 1, "template": tmpl}))), "Pod")[0]
    assert pod["spec"]["containers"][0]["command"] == ["sleep", "1"]


LAUNCHER_ENV = {
    "OpenMPI": {
        "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
        "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
        "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
        "OMPI_MCA_orte_set_default_slots": "3",
        "PRTE_MCA_prte_keep_fqdn_hostnames": "false",
        "PRTE_MCA_prte_default_hostfile": "/etc/mpi/hostfile",
        "PRTE_MCA_plm_ssh_args": "-o ConnectionAttempts=10",
        "PRTE_MCA_prte_set_default_slots": "3",
    },
    "Intel": {
        "I_MPI_HYDRA_HOST_FILE": "/etc/mpi/hostfile",
        "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS": "-o ConnectionAttempts=10",
        "I_MPI_PERHOST": "3",
    },
    "MPICH": {"HYDRA_HOST_FILE": "/etc/mpi/hostfile", "HYDRA_LAUNCH_EXTRA_ARGS": "-o ConnectionAttempts=10"},
}


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_launcher_job_env_follows_the_implementation(implementation: str) -> None:
    launcher = _one(creates(plan(snap(mpijob(implementation=implementation, slots=3))), "Job"))

    container = launcher["spec"]["template"]["spec"]["containers"][0]
    env = env_of(container)
    assert env == {
        "K_MPI_JOB_ROLE": "launcher",
        **LAUNCHER_ENV[implementation],
        "NVIDIA_VISIBLE_DEVICES": "",
        "NVIDIA_DRIVER_CAPABILITIES": "",
    }
    assert {"name": "mpi-job-config", "mountPath": "/etc/mpi"} in container["volumeMounts"]
    config = next(v for v in launcher["spec"]["template"]["spec"]["volumes"] if v["name"] == "mpi-job-config")
    assert config["configMap"]["name"] == "pi-config"
    modes = {i["key"]: i["mode"] for i in config["configMap"]["items"]}
    assert modes == {c.HOSTFILE_KEY: 0o444, c.DISCOVER_HOSTS_KEY: 0o555, c.DISCOVERED_HOSTS_KEY: 0o444}


def test_openmpi_launcher_env_serves_openmpi4_and_5() -> None:
    """OpenMPI 4 (ORTE) reads the reference's OMPI_MCA_* names, OpenMPI 5 (PRRTE) only PRTE_MCA_* ones: the
    launcher gets both, the reference's first and in its order, each PRRTE name beside its ORTE counterpart."""
    launcher = _one(creates(plan(snap(mpijob(implementation="OpenMPI", slots=4))), "Job"))
    env = launcher["spec"]["template"]["spec"]["containers"][0]["env"]
    mpi = [(e["name"], e["value"]) for e in env if e["name"].startswith(("OMPI_MCA_", "PRTE_MCA_"))]

    assert mpi == [
        ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
        ("OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile"),
        ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
        ("OMPI_MCA_orte_set_default_slots", "4"),
        # PRRTE matches host names without resolving them: keeping the FQDN would make the launcher's own
        # hostfile line a remote host (it still connects to the full name with false).
        ("PRTE_MCA_prte_keep_fqdn_hostnames", "false"),
        ("PRTE_MCA_prte_default_hostfile", "/etc/mpi/hostfile"),
        ("PRTE_MCA_plm_ssh_args", "-o ConnectionAttempts=10"),
        ("PRTE_MCA_prte_set_default_slots", "4"),
    ]


def test_openmpi_launcher_as_worker_gets_the_prrte_env_too() -> None:
    job = mpijob(workers=1, launcher_as_worker=True, implementation="OpenMPI", slots=2)
    launcher = _one(creates(plan(snap(job)), "Job"))
    env = env_of(launcher["spec"]["template"]["spec"]["containers"][0])

    assert env["PRTE_MCA_prte_default_hostfile"] == "/etc/mpi/hostfile"
    assert env["PRTE_MCA_prte_keep_fqdn_hostnames"] == "false"
    assert env["PRTE_MCA_prte_set_default_slots"] == "2"


def test_user_set_prrte_variable_wins_over_the_operators() -> None:
    user_env = [{"name": "PRTE_MCA_prte_keep_fqdn_hostnames", "value": "true"}]
    tmpl = {"spec": {"containers": [{"name": "mpi", "image": "x", "env": user_env}]}}
    job = mpijob(implementation="OpenMPI", launcher={"replicas": 1, "template": tmpl})
    launcher = _one(creates(plan(snap(job)), "Job"))
    env = launcher["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e["value"] for e in env if e["name"] == "PRTE_MCA_prte_keep_fqdn_hostnames"] == ["true"]


def test_launcher_job_passes_run_policy_through() -> None:
    job = mpijob(run_policy={"backoffLimit": 3, "activeDeadlineSeconds": 600, "ttlSecondsAfterFinished": 60})

    launcher = _one(creates(plan(snap(job)), "Job"))

    assert launcher["metadata"]["name"] == "pi-launcher"
    spec = launcher["spec"]
    assert spec["backoffLimit"] == 3
    assert spec["activeDeadlineSeconds"] == 600
    assert spec["podReplacementPolicy"] == "Failed"
    assert spec["suspend"] is False
    pod_spec = spec["template"]["spec"]
    assert pod_spec["hostname"] == "pi-launcher"
    assert pod_spec["subdomain"] == "pi"
    assert pod_spec["restartPolicy"] == "OnFailure"
    assert spec["template"]["metadata"]["labels"][c.LABEL_JOB_ROLE] == c.ROLE_LAUNCHER


def test_launcher_job_without_run_policy_sets_no_limits() -> None:
    spec = _one(creates(plan(snap(mpijob())), "Job"))["spec"]
    assert "backoffLimit" not in spec
    assert "activeDeadlineSeconds" not in spec


def test_run_launcher_as_worker_puts_the_launcher_first_and_numbers_workers_from_one() -> None:
    job = mpijob(workers=2, launcher_as_worker=True, implementation="Intel")
    actions = plan(snap(job))

    cm = _one(creates(actions, "ConfigMap"))
    assert cm["data"][c.HOSTFILE_KEY] == (
        "pi-launcher.pi.team-a.svc:1\npi-worker-0.pi.team-a.svc:1\npi-worker-1.pi.team-a.svc:1\n"
    )
    assert cm["data"][c.DISCOVER_HOSTS_KEY] == "#!/bin/sh\necho pi-launcher.pi.team-a.svc:1\n"
    labels = [p["metadata"]["labels"][c.LABEL_REPLICA_INDEX] for p in creates(actions, "Pod")]
    assert labels == ["1", "2"]
    launcher = _one(creates(actions, "Job"))
    assert launcher["spec"]["template"]["metadata"]["labels"][c.LABEL_REPLICA_INDEX] == "0"
    env = env_of(launcher["spec"]["template"]["spec"]["containers"][0])
    assert "NVIDIA_VISIBLE_DEVICES" not in env
    assert _one(creates(actions, "Service"))["spec"]["publishNotReadyAddresses"] is True


def test_wait_for_workers_ready_creates_no_launcher_while_workers_are_missing_or_not_ready() -> None:
    job = mpijob(workers=2, launcher_creation_policy="WaitForWorkersReady")

    assert created_names(plan(snap(job)), "Job") == []
    not_ready = [worker(job, 0), worker(job, 1, ready=False)]
    assert created_names(plan(snap(job, not_ready)), "Job") == []
    one_missing = [worker(job, 0)]
    assert created_names(plan(snap(job, one_missing)), "Job") == []


def test_wait_for_workers_ready_creates_the_launcher_once_all_workers_are_ready() -> None:
    job = mpijob(workers=2, launcher_creation_policy="WaitForWorkersReady")
    ready = [worker(job, 0), worker(job, 1)]

    assert created_names(plan(snap(job, ready)), "Job") == ["pi-launcher"]


def test_at_startup_creates_the_launcher_before_any_worker_runs() -> None:
    assert created_names(plan(snap(mpijob(workers=2))), "Job") == ["pi-launcher"]


def test_launcher_only_job_creates_no_workers() -> None:
    actions = plan(snap(mpijob(workers=None)))
    assert created_names(actions, "Pod") == []
    assert created_names(actions, "Job") == ["pi-launcher"]
    assert _one(creates(actions, "ConfigMap"))["data"][c.HOSTFILE_KEY] == ""


def test_host_network_workers_use_cluster_first_with_host_net_dns() -> None:
    job = mpijob(workers=1, worker={"replicas": 1, "template": template(hostNetwork=True)})
    pod = _one(creates(plan(snap(job)), "Pod"))
    assert pod["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"


def test_a_host_network_launcher_uses_cluster_first_with_host_net_dns_too() -> None:
    # Found with real mpirun on the real nodes: with the node's resolver the launcher's ssh cannot resolve
    # its workers' names (test_real_node_mpi.py::test_host_network_job_resolves_its_worker_through_cluster_dns...).
    job = mpijob(workers=1, worker={"replicas": 1, "template": template(hostNetwork=True)})
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["hostNetwork"] = True
    launcher = _one(creates(plan(snap(job)), "Job"))
    assert launcher["spec"]["template"]["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"


def _key_modes(job: Obj) -> list[tuple[int, dict[str, int]]]:
    """(defaultMode, item modes) of the SSH volume in the worker pod and in the launcher's pod template."""
    actions = plan(snap(job))
    pod_specs = [_one(creates(actions, "Pod"))["spec"], _one(creates(actions, "Job"))["spec"]["template"]["spec"]]
    out = []
    for pod_spec in pod_specs:
        volume = next(v for v in pod_spec["volumes"] if v["name"] == "ssh-auth")
        out.append((volume["secret"]["defaultMode"], {i["path"]: i["mode"] for i in volume["secret"]["items"]}))
        mount = {"name": "ssh-auth", "mountPath": job["spec"].get("sshAuthMountPath", "/root/.ssh")}
        assert mount in pod_spec["containers"][0]["volumeMounts"]
    return out


def _ssh_job(mount_path: str, pod_context: Obj | None = None, container_context: Obj | None = None) -> Obj:
    job = mpijob(workers=1)
    job["spec"]["sshAuthMountPath"] = mount_path
    for role in ("Launcher", "Worker"):
        pod_spec = job["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]
        if pod_context is not None:
            pod_spec["securityContext"] = pod_context
        if container_context is not None:
            pod_spec["containers"][0]["securityContext"] = container_context
    return job


PRIVATE = (0o600, {"id_rsa": 0o600, "id_rsa.pub": 0o644, "authorized_keys": 0o644})
SHARED = (0o644, {"id_rsa": 0o644, "id_rsa.pub": 0o644, "authorized_keys": 0o644})


@pytest.mark.parametrize(
    ("mount_path", "pod_context", "container_context"),
    [
        ("/root/.ssh", None, None),  # the reference's rule: 0600 at root's path
        ("/root/.ssh", None, {"runAsUser": 1000}),
        ("/home/mpiuser/.ssh", {"fsGroup": 1000}, {"runAsUser": 1000}),  # kubelet: 0640 root:1000
        ("/home/mpiuser/.ssh", {"runAsUser": 0}, None),
        ("/home/mpiuser/.ssh", {"runAsUser": 1000}, {"runAsUser": 0}),  # the container's field wins
    ],
)
def test_ssh_private_key_is_0600_where_the_container_user_can_still_read_it(
    mount_path: str, pod_context: Obj | None, container_context: Obj | None
) -> None:
    job = _ssh_job(mount_path, pod_context, container_context)
    assert _key_modes(job) == [PRIVATE, PRIVATE]
    assert not emits(plan(snap(job)), reason="SSHKeyNotPrivate")


@pytest.mark.parametrize(
    ("pod_context", "container_context"),
    [
        (None, {"runAsUser": 1000}),  # the reference's pi example (examples/v2beta1/pi/pi.yaml)
        (None, None),  # the image's user, which may be anyone
        ({"runAsUser": 0}, {"runAsUser": 1000}),
        ({"runAsNonRoot": True}, None),
    ],
)
def test_ssh_private_key_is_mounted_as_the_reference_does_when_a_non_root_user_could_not_read_0600(
    pod_context: Obj | None, container_context: Obj | None
) -> None:
    """No fsGroup and a user that may not be root: a 0600 root-owned key would lock it out and the job
    would fail where the reference's runs, so 0644 as the reference mounts it, and one Warning naming the
    field that would make it 0600, announced with the Secret's creation (so said once)."""
    job = _ssh_job("/home/mpiuser/.ssh", pod_context, container_context)
    assert _key_modes(job) == [SHARED, SHARED]
    actions = plan(snap(job))
    secret_create = next(a for a in actions if isinstance(a, Create) and a.obj["kind"] == "Secret")
    warnings = [e for e in secret_create.announce if e.reason == "SSHKeyNotPrivate"]
    assert len(warnings) == 1 and warnings[0].type == "Warning", secret_create.announce
    for role in ("Launcher", "Worker"):
        assert f"spec.mpiReplicaSpecs.{role}.template.spec.securityContext.fsGroup" in warnings[0].message


def test_the_shared_key_warning_names_only_the_role_without_fs_group() -> None:
    job = _ssh_job("/home/mpiuser/.ssh", None, {"runAsUser": 1000})
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["securityContext"] = {"fsGroup": 1000}
    worker_mode, launcher_mode = _key_modes(job)
    assert (worker_mode, launcher_mode) == (PRIVATE, SHARED)
    (warning,) = emits(plan(snap(job)), reason="SSHKeyNotPrivate")
    assert "spec.mpiReplicaSpecs.Launcher." in warning.message and ".Worker." not in warning.message
