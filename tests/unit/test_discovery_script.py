"""discover_hosts.sh as rendered from its package file: the same bytes as the script built in Python before."""

from __future__ import annotations

from pathlib import Path

from mpijob.planner import discovery

DATA = Path(__file__).parent / "data"


def test_the_rendered_script_is_the_one_rendered_before_the_template_moved_to_a_file() -> None:
    api = discovery.script("team-a", "elastic-pi", "5f0c8a2e-1b2c-4d3e-9f00-0123456789ab", use_api=True)
    assert api == (DATA / "discover_hosts.api.sh").read_text()
    assert discovery.script("ns", "pi", "uid-1", use_api=False) == (DATA / "discover_hosts.file.sh").read_text()
