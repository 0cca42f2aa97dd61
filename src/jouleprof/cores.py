"""How many CPU cores this process may run on: one answer for the run record, the attribution's
worker pool and the video loader's workers."""

from __future__ import annotations

import os


def usable_cores() -> int | None:
    """The cores this process may be scheduled on (its affinity mask, which a container or
    `taskset` narrows); None where the OS cannot say (os.sched_getaffinity is Linux-only)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return None


def pool_cores() -> int:
    """The cores to size a pool of workers by: the usable ones, else the logical ones, at
    least 1."""
    return usable_cores() or os.cpu_count() or 1
