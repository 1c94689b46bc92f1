"""jacobi (testbed/mpi/jacobi.c), the checkpointing program in the testbed's MPI images, run with `mpirun` in the
openmpi4 image's root filesystem (chroot, one host, no cluster): its final grid does not depend on the rank count,
nor on being stopped by SIGUSR1 or killed outright and resumed on fewer ranks, and is the grid an independent
evaluation of the same sweeps in Python gives.

The image comes from testbed/build-mpi-images.sh, cached by input hash (~1 min cold). Needs root (chroot, mount)
and umoci; elsewhere the module skips, or fails under CI=true (cannot_run)."""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mpi_rootfs import IN_ROOT, fnv1a64, python_jacobi, unpack_image

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
IMAGE = "openmpi4"
JACOBI = "/home/mpiuser/jacobi"
# Small enough for a few seconds a run, big enough that 3 ranks get unequal blocks of rows (40 = 14 + 13 + 13).
SIZE, ITERATIONS, EVERY = 40, 240, 40
DELAY_MS = 10  # per sweep: a run with it lasts ~2.4 s, so a signal lands midway
HEADER = struct.Struct("=8sqq")  # jacobi.c's checkpoint header: magic, size, iteration
FINISHED = re.compile(r"^finished iteration (\d+) with (\d+) ranks: checksum ([0-9a-f]{16})$", re.MULTILINE)
EXIT_STOPPED = 75  # jacobi.c: checkpointed and stopped on SIGUSR1


@pytest.fixture(scope="module")
def rootfs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The openmpi4 image's root filesystem, unpacked from the archive build-mpi-images.sh keeps in its cache."""
    return unpack_image(IMAGE, tmp_path_factory.mktemp("jacobi"))


class Run:
    """jacobi under `mpirun -n ranks` in the root filesystem; its output lines collected as they come."""

    def __init__(self, root: Path, ranks: int, ckpt: str | None, *extra: str) -> None:
        self.root = root
        args = ["--size", str(SIZE), "--iterations", str(ITERATIONS), *extra]
        if ckpt is not None:
            args += ["--checkpoint-dir", ckpt]
        mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", str(ranks), JACOBI, *args]
        unshare = shutil.which("unshare") or "unshare"
        # unshare, sh and chroot exec each other: the process is mpirun itself, what a signal is sent to.
        self.proc = subprocess.Popen(
            [unshare, "--mount", "--propagation", "private", "sh", "-c", IN_ROOT, "sh", str(root), *mpirun],
            env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, pattern: str, within: float = 30) -> re.Match[str]:
        """The first line from here on that matches `pattern` (the run's output so far if it never comes)."""
        deadline = time.monotonic() + within
        while True:
            try:
                line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise AssertionError(f"no line {pattern!r} within {within} s: {self.seen}") from None
            if line is None:
                raise AssertionError(f"the run ended without a line {pattern!r}: {self.seen}")
            self.seen.append(line)
            if m := re.fullmatch(pattern, line):
                return m

    def finish(self, within: float = 60) -> tuple[int, str]:
        """Exit code and the whole output."""
        code = self.proc.wait(timeout=within)
        while (line := self.lines.get(timeout=10)) is not None:
            self.seen.append(line)
        return code, "\n".join(self.seen)

    def kill(self) -> None:
        """SIGKILL to mpirun and every rank, as a node that is gone: no handler runs, no checkpoint is written."""
        for pid in _processes_in(self.root):
            os.kill(pid, signal.SIGKILL)
        assert self.proc.wait(timeout=30) == -signal.SIGKILL, "mpirun was not killed (ended on its own?)"
        deadline = time.monotonic() + 30
        while (left := _processes_in(self.root)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left, f"processes left in the root filesystem: {left}"


def _processes_in(root: Path) -> list[int]:
    """The processes whose root directory is `root`: this module's mpirun and ranks, and only those."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "root") == str(root):
                    found.append(int(entry.name))
            except OSError:
                pass  # gone meanwhile, or not ours to look at
    return found


@pytest.fixture
def runs(rootfs: Path) -> Iterator[list[Run]]:
    """The runs a test starts; whatever still runs at its end is killed."""
    started: list[Run] = []
    try:
        yield started
    finally:
        _kill_leftovers(started)


def _kill_leftovers(runs: list[Run]) -> None:
    for run in runs:
        if run.proc.poll() is None:
            run.kill()


def _start(runs: list[Run], root: Path, ranks: int, ckpt: str | None, *extra: str) -> Run:
    run = Run(root, ranks, ckpt, *extra)
    runs.append(run)
    return run


def _completed(runs: list[Run], root: Path, ranks: int, ckpt: str | None, *extra: str) -> str:
    """The checksum of a run that must finish, with `ranks` ranks, every sweep done."""
    code, out = _start(runs, root, ranks, ckpt, *extra).finish()
    done = FINISHED.search(out)
    assert code == 0 and done is not None, out
    assert (int(done[1]), int(done[2])) == (ITERATIONS, ranks), out
    return done[3]


def _fresh_dir(root: Path, name: str) -> str:
    """A checkpoint directory inside the root filesystem, empty; its path as the ranks see it."""
    shutil.rmtree(root / "tmp" / name, ignore_errors=True)
    return f"/tmp/{name}"


def _grid(path: Path) -> tuple[int, bytes]:
    """The iteration and the raw doubles of a checkpoint or final.bin, after checking the header."""
    data = path.read_bytes()
    magic, size, iteration = HEADER.unpack_from(data)
    assert (magic, size, len(data)) == (b"JACOBI01", SIZE, HEADER.size + SIZE * SIZE * 8), path
    return iteration, data[HEADER.size :]


@pytest.fixture(scope="module")
def reference(rootfs: Path) -> str:
    """The checksum of an uninterrupted one-rank run, after checking its final.bin against Python's grid."""
    started: list[Run] = []
    ckpt = _fresh_dir(rootfs, "reference")
    try:
        checksum = _completed(started, rootfs, 1, ckpt)
    finally:
        _kill_leftovers(started)
    iteration, grid = _grid(rootfs / ckpt.lstrip("/") / "final.bin")
    assert iteration == ITERATIONS
    assert grid == python_jacobi(SIZE, ITERATIONS), "jacobi's grid differs from the Python evaluation"
    assert fnv1a64(grid) == checksum, "the printed checksum is not the FNV-1a of final.bin's grid"
    return checksum


@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_the_final_grid_is_bitwise_the_same_for_any_rank_count(
    rootfs: Path, reference: str, runs: list[Run], ranks: int
) -> None:
    assert _completed(runs, rootfs, ranks, None) == reference


def test_sigusr1_checkpoints_and_stops_and_the_run_resumes_on_fewer_ranks_to_the_same_grid(
    rootfs: Path, reference: str, runs: list[Run]
) -> None:
    """4 ranks stopped by SIGUSR1 to mpirun, resumed on 3, stopped again, finished on 2."""
    ckpt = _fresh_dir(rootfs, "stopped")
    resumed_at = 0
    for ranks in (4, 3):
        run = _start(runs, rootfs, ranks, ckpt, "--checkpoint-every", str(EVERY), "--delay-ms", str(DELAY_MS))
        run.wait_for(rf"starting at iteration {resumed_at} with {ranks} ranks")
        run.wait_for(rf"checkpoint at iteration \d+ with {ranks} ranks")  # some progress: the signal lands midway
        run.proc.send_signal(signal.SIGUSR1)
        stopped = int(run.wait_for(rf"stopped at iteration (\d+) with {ranks} ranks")[1])
        code, out = run.finish()
        assert code == EXIT_STOPPED, out
        assert f"checkpoint at iteration {stopped} with {ranks} ranks" in out and not FINISHED.search(out), out
        assert resumed_at < stopped < ITERATIONS
        assert _grid(rootfs / ckpt.lstrip("/") / "checkpoint.bin")[0] == stopped
        assert not (rootfs / ckpt.lstrip("/") / "final.bin").exists()
        resumed_at = stopped
    last = _start(runs, rootfs, 2, ckpt)
    last.wait_for(rf"starting at iteration {resumed_at} with 2 ranks")
    code, out = last.finish()
    done = FINISHED.search(out)
    assert code == 0 and done is not None and done[3] == reference, out


def test_a_run_killed_outright_resumes_from_its_last_periodic_checkpoint_to_the_same_grid(
    rootfs: Path, reference: str, runs: list[Run]
) -> None:
    ckpt = _fresh_dir(rootfs, "killed")
    run = _start(runs, rootfs, 4, ckpt, "--checkpoint-every", str(EVERY), "--delay-ms", str(DELAY_MS))
    run.wait_for(rf"checkpoint at iteration {2 * EVERY} with 4 ranks")
    run.kill()
    assert not (rootfs / ckpt.lstrip("/") / "final.bin").exists()
    iteration = _grid(rootfs / ckpt.lstrip("/") / "checkpoint.bin")[0]
    assert iteration % EVERY == 0 and 2 * EVERY <= iteration < ITERATIONS, iteration
    resumed = _start(runs, rootfs, 3, ckpt)
    resumed.wait_for(rf"starting at iteration {iteration} with 3 ranks")
    code, out = resumed.finish()
    done = FINISHED.search(out)
    assert code == 0 and done is not None and done[3] == reference, out
    iteration, grid = _grid(rootfs / ckpt.lstrip("/") / "final.bin")
    assert iteration == ITERATIONS and fnv1a64(grid) == reference


@pytest.mark.parametrize("cut", [False, True], ids=["another-size", "cut-short"])
def test_a_checkpoint_that_does_not_fit_the_run_is_refused_not_resumed_from(
    rootfs: Path, runs: list[Run], cut: bool
) -> None:
    ckpt = _fresh_dir(rootfs, "refused")
    code, out = _start(runs, rootfs, 2, ckpt, "--checkpoint-every", str(EVERY)).finish()
    assert code == 0, out
    path = rootfs / ckpt.lstrip("/") / "checkpoint.bin"
    if cut:
        path.write_bytes(path.read_bytes()[:-8])
    # A second --size, later on the line, wins over Run's.
    extra = [] if cut else ["--size", str(SIZE + 1)]
    code, out = _start(runs, rootfs, 2, ckpt, *extra).finish()
    assert code == 2 and "is not a checkpoint of" in out and "starting at" not in out, out
