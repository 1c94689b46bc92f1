"""Summarises py-spy's collapsed stacks (`bench/compare.py --profile FILE`): the share of samples in which
each function appears anywhere on the stack (inclusive) and at the top (self), largest first.

    .venv/bin/python bench/profile_summary.py FILE [--top 30] [--match informer]
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path

_FRAME = re.compile(r"^(?P<fn>.*?) \((?P<file>[^:]*)(?::\d+)?\)$")


def _name(frame: str) -> str:
    m = _FRAME.match(frame)
    if not m:
        return frame
    path = m.group("file")
    for marker in ("site-packages/", "src/", "lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{m.group('fn')} ({path})"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--match", default="")
    args = parser.parse_args()
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in Path(args.file).read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        frames = [_name(f) for f in stack.split(";")[1:]]  # the first is the thread
        if not frames:
            continue
        total += n
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    print(f"{total} samples\n\n| inclusive % | self % | function |\n|---|---|---|")
    for frame, n in inclusive.most_common():
        if args.match in frame:
            print(f"| {100 * n / total:.1f} | {100 * own[frame] / total:.1f} | {frame} |")
            args.top -= 1
            if args.top == 0:
                break
    return 0


if __name__ == "__main__":
    sys.exit(main())
