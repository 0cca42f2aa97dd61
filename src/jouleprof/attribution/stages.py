"""Where an attribution spends its time: named stages, their wall and CPU seconds, and a
progress callback told when each begins.

The regression marks its stages (`stage("refresh grids")`, `stage("fit: stall model")`, ...).
Nothing is measured unless a caller asks: `recording()` collects every stage entered inside
it (nested stages are named by their path, "fit: stall model/bootstrap"), and `reporting(
progress)` calls `progress` with a short description as each top-level or second-level stage
begins. Both are context-local, so concurrent attributions do not mix.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

Progress = Callable[[str], None]


@dataclass
class StageTimes:
    """Stages in the order they ended: (path, wall_s, cpu_s); cpu_s is the process's CPU time
    (all threads) over the stage."""

    rows: list[tuple[str, float, float]] = field(default_factory=list)

    def totals(self) -> dict[str, tuple[float, float]]:
        """path → (wall_s, cpu_s) summed over the stage's occurrences."""
        out: dict[str, tuple[float, float]] = {}
        for path, wall, cpu in self.rows:
            w0, c0 = out.get(path, (0.0, 0.0))
            out[path] = (w0 + wall, c0 + cpu)
        return out


_times: ContextVar[StageTimes | None] = ContextVar("jouleprof_stage_times", default=None)
_progress: ContextVar[Progress | None] = ContextVar("jouleprof_stage_progress", default=None)
_path: ContextVar[tuple[str, ...]] = ContextVar("jouleprof_stage_path", default=())

PROGRESS_DEPTH = 3
"""Stages this deep or shallower are reported to the progress callback."""


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Mark a stage of the attribution (measured only inside `recording`, reported only
    inside `reporting`)."""
    times, progress = _times.get(), _progress.get()
    path = (*_path.get(), name)
    if times is None and progress is None:
        yield
        return
    if progress is not None and len(path) <= PROGRESS_DEPTH:
        progress(name)
    token = _path.set(path)
    w0, c0 = time.perf_counter(), time.process_time()
    try:
        yield
    finally:
        _path.reset(token)
        if times is not None:
            times.rows.append(("/".join(path), time.perf_counter() - w0, time.process_time() - c0))


@contextmanager
def recording() -> Iterator[StageTimes]:
    """Collect the wall and CPU seconds of every stage entered inside."""
    times = StageTimes()
    token = _times.set(times)
    try:
        yield times
    finally:
        _times.reset(token)


@contextmanager
def reporting(progress: Progress | None) -> Iterator[None]:
    """Tell `progress` (if not None) a short description as each stage begins."""
    token = _progress.set(progress)
    try:
        yield
    finally:
        _progress.reset(token)


__all__ = ["PROGRESS_DEPTH", "Progress", "StageTimes", "recording", "reporting", "stage"]
