"""Giving back to the OS the heap the operator no longer uses (glibc's malloc; elsewhere nothing is done).

Why (docs/design.md, "Memory"): with 10,000 worker pods cached, what the operator's RSS holds above its live
objects is mostly glibc heap it freed and kept. A list page of 500 pods decodes to ~20 MiB of objects, and
glibc raises its trim threshold to twice the largest block it has freed from an mmap (up to 64 MiB), so the
top of the heap a relist or a burst of creates left free is never returned: on the testbed at 1,250 x 8,
36.6 MiB of the heap were free, 20.8 in use. So:
- `configure()`, at start: fixed thresholds (`mallopt`), which also turn the dynamic raise off: blocks of
  1 MiB and more are mmapped (returned when freed) and a free top above 1 MiB is returned at once. Not
  lower: every TLS read of the event loop (asyncio's and uvloop's SSL protocols) asks `SSLObject.read` for
  256 KiB and shrinks the answer, and a mmap threshold at or below that size made each read a mmap, page
  faults and a munmap: ~30 us instead of ~3 us per read (docs/design.md, "Memory");
- `Trimmer`: `malloc_trim(0)` (also returns whole free pages inside the heap, which the threshold does not)
  after each informer list, and when the work queue goes idle after at least `burst` reconciles: the two
  moments that leave the most freed heap behind. Not per reconcile: a trim walks the heap's free lists.
Python's own small-object allocator (pymalloc) returns its 1 MiB arenas only when they are empty; none of
this touches it.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable

log = logging.getLogger("mpijob.heap")

# mallopt's parameter numbers (glibc malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# Above the event loops' 256 KiB TLS read buffer (see the module's docstring); a list page's body (500 pods:
# megabytes) is still mmapped and returned when freed.
MMAP_THRESHOLD = 1024 * 1024
TRIM_THRESHOLD = 1024 * 1024
# Reconciles since the last trim that make an idle queue worth a trim (a burst of creates, a scale-in).
BURST = 64


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


def configure(libc: ctypes.CDLL | None = None) -> bool:
    """Fixed mmap and trim thresholds (see the module's docstring); False where malloc is not glibc's."""
    libc = libc if libc is not None else _libc()
    if libc is None:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def malloc_trim() -> None:
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


class Trimmer:
    """When to trim: after every list, and when the queue goes idle after a burst of reconciles."""

    def __init__(self, trim: Callable[[], None] = malloc_trim, burst: int = BURST) -> None:
        self.trim = trim
        self.burst = burst
        # Reconciles since the last trim.
        self.pending = 0
        self.trims = 0

    def listed(self) -> None:
        """An informer's list is in the store (its pages are dropped): trim now."""
        self._trim()

    def idle(self, processed: int) -> None:
        """The work queue has nothing pending or running; `processed` keys were done since it last was idle."""
        self.pending += processed
        if self.pending >= self.burst:
            self._trim()

    def _trim(self) -> None:
        self.pending = 0
        self.trims += 1
        self.trim()
