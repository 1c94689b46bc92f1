"""A flake census (issue 31): the same tests N times in a row, each run its own pytest process with its junit
XML, then per test how often it passed, failed, errored and skipped, and how long it took (min/median/max).

    .venv/bin/python bench/soak.py                                   # tests/integration, 5 runs
    .venv/bin/python bench/soak.py --runs 10 tests/integration/test_elastic.py tests/integration/test_chaos.py
    .venv/bin/python bench/soak.py --hog tests/integration/test_core.py::test_x  # beside a CPU hog
    make soak SOAK_RUNS=10 SOAK_HOG=1 SOAK_TESTS="tests/integration/test_elastic.py"

`--hog`: a busy loop of our own (a child `python -c 'while True: pass'`, not niced: it competes at normal
priority) takes one core from before the first run until after the last, as a loaded machine would.

Every run shares one testbed: the script sets MPIJOB_KEEP_TESTBED=1 for each pytest, so the first run that
needs one starts it (tests/integration/conftest.py) and later runs reuse it; at the end the script brings it
down when it was not running before the census. Unit tests alone never start one.

Written to --out (default .cache/soak/<start time>): run-NN.xml and run-NN.log per run, soak.json and soak.md
(failing tests first, then by name). Exits 1 when any run had a failure or an error (or pytest exited
non-zero), after writing the report.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import checkout  # noqa: F401  (first: the code tested is this checkout's)

from mpijob_testbed import cluster
from mpijob_testbed.paths import resolve_state_dir

ROOT = Path(__file__).resolve().parents[1]
OUTCOMES = ("pass", "fail", "error", "skip")
BAD = ("fail", "error")
HOG_LOOP = "while True: pass"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def say(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- one run's junit XML ----------------------------------------------------------------------------------
@dataclass
class Case:
    test: str  # classname::name, e.g. tests.unit.test_soak::test_x
    outcome: str  # one of OUTCOMES
    seconds: float
    message: str = ""  # first line of the failure or error message


def first_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[0][:300] if lines else ""


def parse_junit(text: str) -> list[Case]:
    """The test cases of pytest's junit XML. A case with a <failure> is "fail" (even when its teardown also
    errored), else with an <error> "error" (setup, teardown, collection), else with <skipped> "skip" (xfail
    too), else "pass"."""
    cases = []
    for case in ET.fromstring(text).iter("testcase"):
        test = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome, message = "pass", ""
        for tag, name in (("failure", "fail"), ("error", "error"), ("skipped", "skip")):
            found = case.find(tag)
            if found is not None:
                outcome = name
                message = first_line(found.get("message") or found.text) if name in BAD else ""
                break
        cases.append(Case(test, outcome, float(case.get("time") or 0.0), message))
    return cases


@dataclass
class Run:
    index: int  # 1-based
    exit_code: int  # pytest's
    wall_s: float
    load_at_start: str  # load average (1/5/15 min)
    cases: list[Case] = field(default_factory=list)
    note: str = ""  # e.g. the junit XML is missing

    def counts(self) -> dict[str, int]:
        found = Counter(case.outcome for case in self.cases)
        return {outcome: found.get(outcome, 0) for outcome in OUTCOMES}

    def bad(self) -> bool:
        return self.exit_code != 0 or any(case.outcome in BAD for case in self.cases)


def exit_code(runs: list[Run]) -> int:
    """The census gates: 1 when any run had a failure or an error, pytest exited non-zero, or nothing ran."""
    return 1 if not runs or any(run.bad() for run in runs) else 0


# -- all runs, per test -----------------------------------------------------------------------------------
@dataclass
class TestRow:
    test: str
    counts: dict[str, int]
    min_s: float
    median_s: float
    max_s: float
    failures: list[dict[str, Any]]  # run, outcome, message of each failure or error

    def failing(self) -> bool:
        return bool(self.failures)


def aggregate(runs: list[Run]) -> list[TestRow]:
    """One row per test seen in any run; its durations over every run it appeared in. Tests that failed or
    errored at least once first, then by name."""
    seen: dict[str, list[tuple[int, Case]]] = {}
    for run in runs:
        for case in run.cases:
            seen.setdefault(case.test, []).append((run.index, case))
    rows = []
    for test, cases in seen.items():
        found = Counter(case.outcome for _, case in cases)
        seconds = [case.seconds for _, case in cases]
        failures = [
            {"run": index, "outcome": case.outcome, "message": case.message}
            for index, case in cases
            if case.outcome in BAD
        ]
        counts = {outcome: found.get(outcome, 0) for outcome in OUTCOMES}
        rows.append(TestRow(test, counts, min(seconds), statistics.median(seconds), max(seconds), failures))
    return sorted(rows, key=lambda row: (not row.failing(), row.test))


# -- the report -------------------------------------------------------------------------------------------
def report(runs: list[Run], meta: dict[str, Any]) -> dict[str, Any]:
    rows = aggregate(runs)
    return {
        **meta,
        "exit_code": exit_code(runs),
        "runs": [
            {
                "run": run.index,
                "exit_code": run.exit_code,
                "bad": run.bad(),
                "wall_s": round(run.wall_s, 2),
                "load_at_start": run.load_at_start,
                **run.counts(),
                "note": run.note,
            }
            for run in runs
        ],
        "tests": [asdict(row) for row in rows],
    }


def markdown(data: dict[str, Any], only_failing: bool = False) -> str:
    """The report as Markdown; `only_failing`: the per-test table only with the tests that failed or errored."""
    bad_runs = sum(1 for run in data["runs"] if run["bad"])
    lines = [
        f"# Flake census: {len(data['runs'])} of {data['runs_asked']} runs of {' '.join(data['tests_asked'])}",
        "",
        f"- command: `{data['command']}`",
        f"- started: {data['started']}; commit: {data['commit']}; hog: {data['hog']['summary']}",
        f"- runs with a failure or an error: {bad_runs} of {len(data['runs'])}"
        + ("; interrupted" if data.get("interrupted") else ""),
        "",
        "| run | pytest exit code | pass | fail | error | skip | wall s | load average at start | note |",
        "|" + "---|" * 9,
    ]
    for run in data["runs"]:
        lines.append(
            f"| {run['run']} | {run['exit_code']} | {run['pass']} | {run['fail']} | {run['error']} | {run['skip']} "
            f"| {run['wall_s']:.1f} | {run['load_at_start']} | {run['note']} |"
        )
    tests = [t for t in data["tests"] if t["failures"] or not only_failing]
    if only_failing:
        lines += ["", f"Tests that failed or errored: {len(tests)} of {len(data['tests'])}."]
    if tests:
        lines += ["", "| test | pass | fail | error | skip | min s | median s | max s |", "|" + "---|" * 8]
    for t in tests:
        n, name = t["counts"], t["test"].replace("|", "\\|")  # a | in a parameter id would end the cell
        lines.append(
            f"| `{name}` | {n['pass']} | {n['fail']} | {n['error']} | {n['skip']} "
            f"| {t['min_s']:.2f} | {t['median_s']:.2f} | {t['max_s']:.2f} |"
        )
    failures = [(t["test"], f) for t in data["tests"] for f in t["failures"]]
    if failures:
        lines += ["", "First lines of the failures:", ""]
        lines += [f"- `{test}` run {f['run']} ({f['outcome']}): {f['message']}" for test, f in failures]
    return "\n".join(lines) + "\n"


# -- running ----------------------------------------------------------------------------------------------
def commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()

    return git("rev-parse", "HEAD") + (" (with uncommitted changes)" if git("status", "--porcelain") else "")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def load_average() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


@contextlib.contextmanager
def cpu_hog(on: bool) -> Iterator[dict[str, Any]]:
    """With `on`, a busy loop in a child process from entering until leaving; yields its summary (filled in
    at the end with the CPU seconds it used)."""
    if not on:
        yield {"on": False, "summary": "off"}
        return
    proc = subprocess.Popen([sys.executable, "-c", HOG_LOOP])
    hog: dict[str, Any] = {"on": True, "pid": proc.pid, "summary": f"on (pid {proc.pid})"}
    say(
        f"hog: pid {proc.pid} runs a busy loop at normal priority (not niced), taking one of the "
        f"{os.cpu_count()} cores until the last run ends"
    )
    try:
        yield hog
    finally:
        hog["alive_at_end"] = proc.poll() is None
        hog["cpu_s"] = round(cpu_seconds(proc.pid), 1) if hog["alive_at_end"] else None
        proc.kill()
        proc.wait()
        hog["summary"] = f"on (a busy loop at normal priority, pid {proc.pid}, {hog['cpu_s']} s of CPU)"
        say(f"hog: stopped; it used {hog['cpu_s']} s of CPU (alive until the end: {hog['alive_at_end']})")


def pytest_argv(tests: list[str], junit: Path) -> list[str]:
    return [sys.executable, "-m", "pytest", *tests, "-q", "-p", "no:cacheprovider", f"--junitxml={junit}"]


def one_run(index: int, total: int, tests: list[str], out: Path) -> Run:
    junit, log = out / f"run-{index:02d}.xml", out / f"run-{index:02d}.log"
    say(f"run {index}/{total} started (log {log})")
    load, start = load_average(), time.monotonic()
    with log.open("w") as f:
        env = {**os.environ, "MPIJOB_KEEP_TESTBED": "1"}
        code = subprocess.run(
            pytest_argv(tests, junit), cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT
        ).returncode
    run = Run(index, code, time.monotonic() - start, load)
    try:
        run.cases = parse_junit(junit.read_text())
    except (OSError, ET.ParseError) as err:
        run.note = f"no readable junit XML: {err}"
    n = run.counts()
    outcome = "FAILED" if run.bad() else "ok"
    say(
        f"run {index}/{total}: {outcome} (pytest exit code {code}; {n['pass']} passed, {n['fail']} failed, "
        f"{n['error']} errors, {n['skip']} skipped) in {run.wall_s:.1f} s" + (f"; {run.note}" if run.note else "")
    )
    return run


def census(tests: list[str], runs: int, out: Path) -> tuple[list[Run], bool]:
    """The runs, one after the other; Ctrl-C stops after the current one (returns interrupted=True)."""
    done: list[Run] = []
    try:
        for index in range(1, runs + 1):
            done.append(one_run(index, runs, tests, out))
    except KeyboardInterrupt:
        say(f"interrupted after {len(done)} of {runs} runs")
        return done, True
    return done, False


def testbed_running() -> bool | None:
    """Whether the testbed the integration tests would use is up; None when they use another cluster."""
    if os.environ.get("MPIJOB_TEST_KUBECONFIG"):
        return None
    return cluster.is_running(resolve_state_dir(None))


def bring_down_if_ours(was_running: bool | None, existed: bool) -> None:
    """The census's runs keep the testbed (MPIJOB_KEEP_TESTBED=1); down at the end when it was not running
    before and is now, or its directory is new (a half-dead testbed a run left behind)."""
    state_dir = resolve_state_dir(None)
    if was_running is False and (testbed_running() or (not existed and state_dir.exists())):
        say("bringing down the testbed the census started")
        cluster.down(state_dir, echo=say)


def write_report(runs: list[Run], meta: dict[str, Any], out: Path) -> int:
    """soak.json and soak.md into `out`, the failing part on stdout; returns the exit code."""
    data = report(runs, meta)
    (out / "soak.json").write_text(json.dumps(data, indent=2) + "\n")
    (out / "soak.md").write_text(markdown(data))
    print(markdown(data, only_failing=True), end="")
    print(f"\nfull report: {out / 'soak.md'} and {out / 'soak.json'}")
    return 1 if meta["interrupted"] else int(data["exit_code"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "tests", nargs="*", default=["tests/integration"], help="modules or node ids, relative to the checkout"
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--hog", action="store_true", help="beside a busy loop taking one core")
    parser.add_argument("--out", type=Path, default=None, help="results directory (default .cache/soak/<start>)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    started = datetime.now().astimezone()
    out: Path = args.out or ROOT / ".cache" / "soak" / started.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    was_running, existed = testbed_running(), resolve_state_dir(None).exists()
    say(f"{args.runs} runs of {' '.join(args.tests)} into {out}")
    say(f"testbed at {resolve_state_dir(None)} running before the census: {was_running}")
    try:
        with cpu_hog(args.hog) as hog:
            runs, interrupted = census(args.tests, args.runs, out)
        meta = {
            "command": shlex.join(["python", *sys.argv]),
            "pytest": shlex.join(pytest_argv(args.tests, out / "run-NN.xml")),
            "started": started.isoformat(timespec="seconds"),
            "commit": commit(),
            "hog": hog,
            "tests_asked": args.tests,
            "runs_asked": args.runs,
            "interrupted": interrupted,
        }
        return write_report(runs, meta, out)
    finally:
        bring_down_if_ours(was_running, existed)


if __name__ == "__main__":
    sys.exit(main())
