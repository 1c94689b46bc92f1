"""What a test does when this machine cannot run it: skip with the reason on a developer's machine, fail with
the reason in CI (`CI=true`) and under `make e2e` (MPIJOB_REQUIRE_REAL_NODE=1), so a suite that cannot run never
goes green by skipping where it is supposed to run."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

ENV_REQUIRE = "MPIJOB_REQUIRE_REAL_NODE"


def must_run() -> bool:
    return os.environ.get("CI", "").lower() == "true" or os.environ.get(ENV_REQUIRE) == "1"


def cannot_run(reason: str) -> NoReturn:
    if must_run():
        pytest.fail(f"this suite must run here (CI=true or {ENV_REQUIRE}=1) but cannot: {reason}", pytrace=False)
    pytest.skip(reason)
