"""The operator's event loop: uvloop by default (less CPU per request, docs/design.md), the standard loop on
request, and nothing else."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from mpijob.app.operator import _event_loop_runner
from mpijob.cli.main import build_parser


async def _loop_type() -> type:
    return type(asyncio.get_running_loop())


def test_the_operator_runs_on_uvloop_by_default_and_on_the_standard_loop_when_asked() -> None:
    args = build_parser().parse_args(["operator"])
    assert args.event_loop == "uvloop"
    with _event_loop_runner(args.event_loop) as runner:
        assert issubclass(runner.run(_loop_type()), uvloop.Loop)
    with _event_loop_runner("asyncio") as runner:
        assert not issubclass(runner.run(_loop_type()), uvloop.Loop)


def test_an_unknown_event_loop_is_refused() -> None:
    with pytest.raises(ValueError, match="uvloop or asyncio"):
        _event_loop_runner("trio")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["operator", "--event-loop", "trio"])
