"""bench/soak.py (the flake census): what it reads from pytest's junit XML, how it adds up the runs, and when
it exits non-zero."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import soak


def junit(*cases: str) -> str:
    # The shape pytest writes (xunit2): <testsuites><testsuite><testcase classname name time>...
    body = "".join(cases)
    return f'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">{body}</testsuite></testsuites>'


def case(name: str, seconds: float, inner: str = "", classname: str = "tests.integration.test_x") -> str:
    return f'<testcase classname="{classname}" name="{name}" time="{seconds}">{inner}</testcase>'


FAILURE = '<failure message="AssertionError: assert 1 == 2&#10;second line">long traceback</failure>'
ERROR = '<error message="failed on setup with &quot;TimeoutError: no Lease&quot;">trace</error>'
SKIPPED = '<skipped type="pytest.skip" message="needs a real node">reason</skipped>'


def run(index: int, *cases: soak.Case, exit_code: int = 0) -> soak.Run:
    return soak.Run(index, exit_code, 1.0, "0.5 / 0.5 / 0.5", list(cases))


def test_each_outcome_its_duration_and_the_first_line_of_the_message_come_from_the_junit_xml() -> None:
    text = junit(
        case("test_ok", 1.5),
        case("test_bad", 2.0, FAILURE),
        case("test_setup", 0.25, ERROR),
        case("test_later", 0.0, SKIPPED),
    )
    assert soak.parse_junit(text) == [
        soak.Case("tests.integration.test_x::test_ok", "pass", 1.5),
        soak.Case("tests.integration.test_x::test_bad", "fail", 2.0, "AssertionError: assert 1 == 2"),
        soak.Case(
            "tests.integration.test_x::test_setup", "error", 0.25, 'failed on setup with "TimeoutError: no Lease"'
        ),
        soak.Case("tests.integration.test_x::test_later", "skip", 0.0),
    ]


def test_a_failure_whose_teardown_also_errored_counts_as_a_failure() -> None:
    (only,) = soak.parse_junit(junit(case("test_both", 3.0, FAILURE + ERROR)))
    assert (only.outcome, only.message) == ("fail", "AssertionError: assert 1 == 2")


def test_a_failure_without_a_message_attribute_gives_the_first_line_of_its_text() -> None:
    (only,) = soak.parse_junit(junit(case("test_x", 1.0, "<failure>\n  E   boom\n  more</failure>")))
    assert only.message == "E   boom"


def test_the_counts_and_durations_of_a_test_add_up_over_every_run_it_appeared_in() -> None:
    flaky = "tests.integration.test_x::test_flaky"
    runs = [
        run(1, soak.Case(flaky, "pass", 4.0)),
        run(2, soak.Case(flaky, "fail", 9.0, "TimeoutError: 30 s"), exit_code=1),
        run(3, soak.Case(flaky, "pass", 5.0)),
    ]
    (row,) = soak.aggregate(runs)
    assert row.counts == {"pass": 2, "fail": 1, "error": 0, "skip": 0}
    assert (row.min_s, row.median_s, row.max_s) == (4.0, 5.0, 9.0)
    assert row.failures == [{"run": 2, "outcome": "fail", "message": "TimeoutError: 30 s"}]


def test_tests_that_failed_or_errored_once_come_first_then_all_by_name() -> None:
    runs = [
        run(1, soak.Case("a::ok", "pass", 1), soak.Case("z::err", "error", 1), soak.Case("m::skip", "skip", 0)),
        run(2, soak.Case("a::ok", "pass", 1), soak.Case("b::flaky", "fail", 1), soak.Case("m::skip", "skip", 0)),
        run(3, soak.Case("b::flaky", "pass", 1)),
    ]
    assert [row.test for row in soak.aggregate(runs)] == ["b::flaky", "z::err", "a::ok", "m::skip"]


def test_the_census_exits_zero_only_when_every_run_passed_or_skipped() -> None:
    clean = [run(1, soak.Case("a::t", "pass", 1)), run(2, soak.Case("a::t", "skip", 0))]
    assert soak.exit_code(clean) == 0
    assert soak.exit_code([*clean, run(3, soak.Case("a::t", "fail", 1), exit_code=1)]) == 1
    assert soak.exit_code([*clean, run(3, soak.Case("a::t", "error", 1), exit_code=1)]) == 1


def test_a_run_whose_pytest_exited_non_zero_fails_the_census_even_without_a_failing_case() -> None:
    # e.g. a crash before the junit XML was written, or exit code 5: no test collected.
    assert soak.exit_code([run(1, soak.Case("a::t", "pass", 1)), run(2, exit_code=5)]) == 1


def test_a_census_without_any_run_fails() -> None:
    assert soak.exit_code([]) == 1


def test_the_markdown_on_stdout_lists_only_the_failing_tests_and_their_first_lines() -> None:
    runs = [
        run(1, soak.Case("a::ok", "pass", 1.0), soak.Case("b::flaky", "pass", 2.0)),
        run(2, soak.Case("a::ok", "pass", 1.0), soak.Case("b::flaky", "fail", 7.0, "assert False"), exit_code=1),
    ]
    meta = {
        "command": "python bench/soak.py --runs 2",
        "started": "2026-12-10T10:00:00+00:00",
        "commit": "abc",
        "hog": {"on": False, "summary": "off"},
        "tests_asked": ["tests/x.py"],
        "runs_asked": 2,
        "interrupted": False,
    }
    data = soak.report(runs, meta)
    assert data["exit_code"] == 1
    short, full = soak.markdown(data, only_failing=True), soak.markdown(data)
    assert "| `b::flaky` | 1 | 1 | 0 | 0 | 2.00 | 4.50 | 7.00 |" in short
    assert "`a::ok`" not in short
    assert full.index("`b::flaky`") < full.index("`a::ok`")
    assert "- `b::flaky` run 2 (fail): assert False" in full
    assert "runs with a failure or an error: 1 of 2" in full


def test_a_real_pytest_run_is_read_from_its_own_junit_xml(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(
        "import pytest\n\ndef test_ok(): pass\n\ndef test_bad(): assert 1 == 2\n\n"
        "@pytest.mark.skip(reason='later')\ndef test_later(): pass\n"
    )
    result = soak.one_run(1, 1, [str(tmp_path / "test_sample.py")], tmp_path)
    assert result.exit_code == 1 and result.bad()
    assert result.counts() == {"pass": 1, "fail": 1, "error": 0, "skip": 1}
    assert (tmp_path / "run-01.xml").exists() and "test_bad" in (tmp_path / "run-01.log").read_text()


def test_the_hog_burns_cpu_while_the_census_runs_and_is_gone_after() -> None:
    with soak.cpu_hog(True) as hog:
        time.sleep(0.3)
    assert hog["alive_at_end"] and hog["cpu_s"] > 0
    assert not Path(f"/proc/{hog['pid']}").exists()
