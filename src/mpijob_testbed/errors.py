"""The one exception the testbed raises for anything a user can act on."""

from __future__ import annotations


class TestbedError(RuntimeError):
    """A testbed step failed; the message names the component and its log file."""

    # Keeps pytest from trying to collect this as a test class when a test module imports it.
    __test__ = False
