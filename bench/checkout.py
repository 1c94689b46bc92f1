"""Importing this makes a benchmark measure the code of the checkout it lives in: `src/` goes first on this
process's path and on PYTHONPATH, which the operator processes the benchmarks start inherit. Without it a
benchmark run from a git worktree that links the main checkout's `.venv` imported the main checkout's code
through the venv's editable install, for itself and for the operator it measured (2026-12-03: a "baseline"
run on an older commit had measured main's code)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")
if sys.path[:1] != [SRC]:
    sys.path.insert(0, SRC)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p)
