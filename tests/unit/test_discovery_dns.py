"""Discovery and cluster DNS agree: an elastic job lists only Ready workers (the headless Service's records
exist for Ready pods only), the list carries each worker's pod IP, and the launcher's discover_hosts.sh holds
back a host whose name DNS answers with another address (a reused name still cached) or not at all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mpijob.api import constants as c
from mpijob.planner import discovery

from .builders import hosts_in
from .world import World, running_world


def _world() -> World:
    return running_world(workers=3)


def test_a_running_worker_is_listed_only_once_it_is_ready() -> None:
    world = _world()
    world.run("pi-worker-1", ready=False)
    world.reconcile("pi")
    assert hosts_in(world.config_data("pi")[c.DISCOVERED_HOSTS_KEY]) == ["pi-worker-0", "pi-worker-2"]

    world.run("pi-worker-1", ready=True)
    world.reconcile("pi")
    assert hosts_in(world.config_data("pi")[c.DISCOVERED_HOSTS_KEY]) == ["pi-worker-0", "pi-worker-1", "pi-worker-2"]


def test_the_list_carries_the_pod_ip_of_every_listed_worker() -> None:
    world = _world()
    listed = world.config_data("pi")[c.DISCOVERED_HOSTS_KEY]
    addresses = discovery.payload_addresses(listed)
    assert sorted(addresses) == [f"pi-worker-{i}.pi.team-a.svc" for i in range(3)]
    for i in range(3):
        assert addresses[f"pi-worker-{i}.pi.team-a.svc"] == world.pod(f"pi-worker-{i}")["status"]["podIP"]
    # Readers of host:slots lines skip the address lines.
    assert discovery.payload_hosts(listed) == [f"pi-worker-{i}.pi.team-a.svc:1" for i in range(3)]


def test_same_hosts_with_a_new_address_rewrite_the_list() -> None:
    before = discovery.payload("ns", "pi", ["a.pi.ns.svc"], 1, "t0", {"a.pi.ns.svc": "10.0.0.1"})
    same = discovery.desired_payload(before, "ns", "pi", ["a.pi.ns.svc"], 1, "t1", {"a.pi.ns.svc": "10.0.0.1"})
    moved = discovery.desired_payload(before, "ns", "pi", ["a.pi.ns.svc"], 1, "t1", {"a.pi.ns.svc": "10.0.0.2"})
    assert same == before
    assert moved != before and discovery.payload_addresses(moved) == {"a.pi.ns.svc": "10.0.0.2"}


def _run_script(tmp_path: Path, listed: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "discover_hosts.sh"
    script.write_text(discovery.script("ns", "pi", "uid-1", use_api=False))
    (tmp_path / "list").write_text(listed)
    environ = {
        **os.environ,
        "MPIJOB_DISCOVERY_FILE": str(tmp_path / "list"),
        "MPIJOB_DISCOVERY_STATE": str(tmp_path / "printed"),  # not the machine's /tmp
        **env,
    }
    environ["PATH"] = f"{Path(sys.executable).parent}:{environ.get('PATH', '')}"
    return subprocess.run(
        ["sh", str(script), "--explain"], capture_output=True, text=True, env=environ, check=False, timeout=10
    )


def test_the_script_holds_back_a_host_that_dns_answers_with_another_address(tmp_path: Path) -> None:
    # `localhost` resolves on every machine (/etc/hosts), to 127.0.0.1: a listed address of 10.255.255.1 is
    # what a reused worker name looks like while DNS still answers with the old pod's IP.
    listed = discovery.payload("ns", "pi", ["localhost"], 1, "t0", {"localhost": "10.255.255.1"})
    out = _run_script(tmp_path, listed)
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""
    # Both families are asked, as ssh does: ::1 may be among the answers where /etc/hosts has it.
    assert "held back: localhost:1 (DNS answers " in out.stderr and "127.0.0.1" in out.stderr, out.stderr
    assert ", the pod is 10.255.255.1)" in out.stderr, out.stderr


def test_the_script_prints_a_host_whose_name_resolves_to_its_pod(tmp_path: Path) -> None:
    listed = discovery.payload("ns", "pi", ["localhost"], 2, "t0", {"localhost": "127.0.0.1"})
    out = _run_script(tmp_path, listed)
    assert (out.returncode, out.stdout) == (0, "localhost:2\n"), out.stderr
    assert "held back" not in out.stderr


def test_the_script_checks_nothing_for_hosts_without_an_address_or_when_turned_off(tmp_path: Path) -> None:
    unchecked = discovery.payload("ns", "pi", ["localhost"], 1, "t0")
    assert _run_script(tmp_path, unchecked).stdout == "localhost:1\n"
    wrong = discovery.payload("ns", "pi", ["localhost"], 1, "t0", {"localhost": "10.255.255.1"})
    assert _run_script(tmp_path, wrong, MPIJOB_DISCOVERY_DNS_CHECK="0").stdout == "localhost:1\n"


# A name the resolver cannot even be asked about (a label over 63 bytes): its lookup errs, like a resolver that
# does not answer within the script's budget, with no network needed.
UNANSWERED = "w" * 64 + ".pi.ns.svc"


def test_a_new_host_whose_lookup_gets_no_answer_is_held_back_until_dns_answers(tmp_path: Path) -> None:
    # Seen on real Horovod: a reused name was printed because its lookup ran out of time, and Horovod's ssh, a
    # moment later, got "Could not resolve hostname", so the ring waited for that rank until Gloo timed out.
    listed = discovery.payload(
        "ns", "pi", ["localhost", UNANSWERED], 1, "t0", {"localhost": "127.0.0.1", UNANSWERED: "10.0.0.9"}
    )
    state = tmp_path / "printed"
    out = _run_script(tmp_path, listed, MPIJOB_DISCOVERY_STATE=str(state))
    assert out.stdout == "localhost:1\n", out.stderr
    assert f"held back: {UNANSWERED}:1 (no DNS answer yet (new host))" in out.stderr
    assert state.read_text() == "localhost:1\n", "the script remembers what it printed"


def test_a_host_printed_last_time_stays_printed_when_its_lookup_gets_no_answer(tmp_path: Path) -> None:
    # Resolver trouble must never read as the host leaving: Horovod would take a healthy worker out.
    listed = discovery.payload("ns", "pi", [UNANSWERED], 1, "t0", {UNANSWERED: "10.0.0.9"})
    state = tmp_path / "printed"
    state.write_text(f"{UNANSWERED}:1\n")
    out = _run_script(tmp_path, listed, MPIJOB_DISCOVERY_STATE=str(state))
    assert out.stdout == f"{UNANSWERED}:1\n", out.stderr
    assert "held back" not in out.stderr


def test_an_unreadable_state_keeps_the_old_rule_and_prints_an_unanswered_host(tmp_path: Path) -> None:
    listed = discovery.payload("ns", "pi", [UNANSWERED], 1, "t0", {UNANSWERED: "10.0.0.9"})
    state = tmp_path / "a-directory"
    state.mkdir()  # open() fails with IsADirectoryError: not "nothing printed yet"
    out = _run_script(tmp_path, listed, MPIJOB_DISCOVERY_STATE=str(state))
    assert out.stdout == f"{UNANSWERED}:1\n", out.stderr
