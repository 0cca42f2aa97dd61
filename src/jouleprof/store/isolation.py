"""isolation_windows.csv: the isolation runner's windows, one row per replay (format and I/O).

    replay, n_calls, t0_s, t1_s, time_per_call_s

t0_s/t1_s: seconds on the run's clock (the clock of samples.csv); time_per_call_s =
(t1_s − t0_s) / n_calls. Written by `bench.isolation` as each replay finishes; read by the
attribution's isolation method, which measures each window's energy from samples.csv.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ISOLATION_CSV = "isolation_windows.csv"
ISOLATION_COLUMNS = ("replay", "n_calls", "t0_s", "t1_s", "time_per_call_s")


@dataclass(frozen=True)
class IsolationWindow:
    """One replay's measured window (one row of isolation_windows.csv)."""

    replay: str
    n_calls: int
    t0_s: float
    t1_s: float

    def __post_init__(self) -> None:
        if not self.replay:
            raise ValueError("IsolationWindow.replay must be a non-empty name")
        if self.n_calls < 1:
            raise ValueError(f"window {self.replay!r} has n_calls {self.n_calls} < 1")
        if not (math.isfinite(self.t0_s) and math.isfinite(self.t1_s)) or self.t1_s <= self.t0_s:
            raise ValueError(f"window {self.replay!r} has bad times [{self.t0_s}, {self.t1_s}]")

    @property
    def duration_s(self) -> float:
        return self.t1_s - self.t0_s

    @property
    def time_per_call_s(self) -> float:
        return self.duration_s / self.n_calls

    def row(self) -> tuple[Any, ...]:
        return (self.replay, self.n_calls, self.t0_s, self.t1_s, self.time_per_call_s)


def append_window(path: Path, window: IsolationWindow) -> None:
    new = not path.exists() or path.stat().st_size == 0
    with path.open("a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(ISOLATION_COLUMNS)
        w.writerow([repr(v) if isinstance(v, float) else v for v in window.row()])
        f.flush()
        os.fsync(f.fileno())


def read_isolation_windows(path: str | os.PathLike[str]) -> list[IsolationWindow]:
    """Read isolation_windows.csv (a run directory or the file itself).

    Raises:
        ValueError: the file is missing, lacks a column, or holds a bad row.
    """
    p = Path(path)
    if p.is_dir():
        p = p / ISOLATION_CSV
    if not p.is_file():
        raise ValueError(f"no isolation windows: {p} does not exist (run the isolation bench)")
    with p.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in ISOLATION_COLUMNS[:4] if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{p} lacks the columns {missing}")
        out = []
        for i, r in enumerate(reader, start=2):
            try:
                out.append(
                    IsolationWindow(
                        r["replay"], int(r["n_calls"]), float(r["t0_s"]), float(r["t1_s"])
                    )
                )
            except (TypeError, ValueError) as e:
                raise ValueError(f"{p} line {i}: {e}") from None
    return out
