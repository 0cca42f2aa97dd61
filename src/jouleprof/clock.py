"""The one monotonic clock every sample and span is stamped on.

Times are seconds since the clock's origin (the start of a run), from `time.perf_counter_ns`,
never wall-clock. Tests pass a `ManualClock` to drive simulated sensors and samplers in
virtual time.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Seconds on a monotonic clock since a fixed origin."""

    def now_s(self) -> float: ...

    def sleep_s(self, seconds: float) -> None: ...


class MonotonicClock:
    """`time.perf_counter_ns` relative to the moment the clock was made (or to `origin_ns`)."""

    def __init__(self, origin_ns: int | None = None) -> None:
        self.origin_ns = time.perf_counter_ns() if origin_ns is None else origin_ns

    def now_s(self) -> float:
        return (time.perf_counter_ns() - self.origin_ns) / 1e9

    def to_clock_s(self, perf_counter_ns: int) -> float:
        """Convert a raw `perf_counter_ns` stamp taken elsewhere onto this clock."""
        return (perf_counter_ns - self.origin_ns) / 1e9

    def sleep_s(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class ManualClock:
    """A clock that only moves when told to: `sleep_s` and `advance_s` move it forward.

    Thread-safe, so a sampler thread and a test can share it.
    """

    def __init__(self, start_s: float = 0.0) -> None:
        self._t_s = start_s
        self._lock = threading.Lock()

    def now_s(self) -> float:
        with self._lock:
            return self._t_s

    def advance_s(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock cannot go back: advance_s({seconds})")
        with self._lock:
            self._t_s += seconds

    def sleep_s(self, seconds: float) -> None:
        if seconds > 0:
            self.advance_s(seconds)
