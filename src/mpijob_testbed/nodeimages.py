"""Images into one real node's containerd (`ctr images import`), under the names pods ask for."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from mpijob_testbed.archives import HANDLE, Archive, targets
from mpijob_testbed.errors import TestbedError

# With --digests ctr also names each image HANDLE@<digest> (archives.HANDLE is the --base-name): a handle to
# tag from, whatever the archive calls its images (a tag only, a full name, nothing). ctr drops OCI full ref
# names outside its base name; those are tagged from the handles instead, normalized.
# What `ctr images import` prints for each image it created and unpacked (cmd/ctr/commands/images/import.go).
_UNPACKED = re.compile(r"unpacking (\S+) \((sha256:[0-9a-f]{64})\)\.\.\.done")


def ctr(socket: Path, *args: str, check: bool = True, timeout: float = 120) -> str | None:
    argv = ["ctr", "--address", str(socket), "--namespace", "k8s.io", *args]
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
    if result.returncode != 0:
        if check:
            raise TestbedError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
        return None
    return result.stdout


def imported_names(ctr_output: str) -> list[str]:
    return [name for name, _ in _UNPACKED.findall(ctr_output)]


def import_archive(socket: Path, archive: Archive, name: str | None = None, timeout: float = 600) -> tuple[str, ...]:
    """Import `archive` into the containerd at `socket`; returns the names its image(s) have there now:
    `name` when given (see archives.targets), else the archive's own."""
    wanted = targets(archive, name)
    out = ctr(socket, "images", "import", "--digests", "--base-name", HANDLE, str(archive.path), timeout=timeout)
    made = imported_names(out or "")
    handles = sorted({n for n in made if n.startswith(f"{HANDLE}@")})
    if not handles:
        raise TestbedError(f"ctr imported no image from {archive.path}: {(out or '').strip()[-300:]}")
    for target in wanted:
        if target not in made:
            ctr(socket, "images", "tag", "--force", _source(archive, target, handles), target)
    # The handles and any HANDLE:<tag> from a tag-only ref: the wanted names keep the content referenced.
    ctr(socket, "images", "rm", *sorted({n for n in made if n.startswith(HANDLE)}))
    return wanted


def _source(archive: Archive, target: str, handles: list[str]) -> str:
    if len(handles) == 1:
        return handles[0]
    for entry in archive.entries:
        if target in entry.names and f"{HANDLE}@{entry.digest}" in handles:
            return f"{HANDLE}@{entry.digest}"
    raise TestbedError(f"{archive.path}: ctr imported no image named {target} or with its digest")
