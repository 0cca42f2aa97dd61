"""A sensor that plays back a recorded samples.csv on a clock, to re-run a sampler or an attribution
over recorded data with no GPU.

At time `clock.now_s()` each signal of a device reads as the most recent value recorded for it at
or before that time; an empty cell ("not read this time") never hides an earlier value, and a
signal never recorded before now reads None. A cheap read returns the cheap signals; the energy
counter is returned only by a counter read, as with a real sensor.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from jouleprof.clock import Clock
from jouleprof.errors import RunDirError, SensorError
from jouleprof.sensors.base import SIGNALS, SignalInfo
from jouleprof.types import Reading

_CHEAP = tuple(s for s in SIGNALS if s != "energy_j")


@dataclass
class _Track:
    """One device's recorded samples, sorted by time."""

    t_s: list[float]
    values: dict[str, list[Any]]
    """Per signal, the value of each row (None where the cell was empty)."""
    last: dict[str, list[int]]
    """Per signal, for each row, the index of the latest row at or before it with a value (-1)."""


def _track(frame: pd.DataFrame) -> _Track:
    frame = frame.sort_values("t_s", kind="stable")
    values: dict[str, list[Any]] = {}
    last: dict[str, list[int]] = {}
    for signal in SIGNALS:
        if signal in frame.columns:
            column = [None if math.isnan(v) else v for v in frame[signal].to_numpy(float)]
        else:
            column = [None] * len(frame)
        if signal == "mem_used_bytes":
            column = [None if v is None else int(v) for v in column]
        idx, running = [], -1
        for i, v in enumerate(column):
            if v is not None:
                running = i
            idx.append(running)
        values[signal], last[signal] = column, idx
    return _Track(frame["t_s"].astype(float).tolist(), values, last)


class ReplaySensor:
    """Recorded samples played back on a clock.

    Args:
        samples: a samples.csv path, or a DataFrame with its columns (t_s and device at least).
        clock: the clock that says "now" (a ManualClock to step through a recording).
        counter_read_is_slow: what to claim, e.g. True to replay a GPU's rationed counter reads.
        nominal_refresh_s: the recorded sensor's refresh period, if known.
        max_age_s: if set, a value recorded longer ago than this reads None.

    Raises:
        RunDirError: the file is missing, lacks t_s or device, or holds non-numbers.
    """

    kind = "replay"

    def __init__(
        self,
        samples: str | Path | pd.DataFrame,
        clock: Clock,
        *,
        counter_read_is_slow: bool = False,
        nominal_refresh_s: float | None = None,
        max_age_s: float | None = None,
    ) -> None:
        self._source = "the frame" if isinstance(samples, pd.DataFrame) else str(samples)
        frame = samples.copy() if isinstance(samples, pd.DataFrame) else self._load(Path(samples))
        missing = [c for c in ("t_s", "device") if c not in frame.columns]
        if missing:
            raise RunDirError(f"{self._source} lacks column(s) {missing}: not a samples.csv")
        try:
            for signal in SIGNALS:
                if signal in frame.columns:
                    frame[signal] = pd.to_numeric(frame[signal])
            frame["t_s"] = pd.to_numeric(frame["t_s"])
        except (ValueError, TypeError) as err:
            raise RunDirError(f"{self._source} holds a non-numeric value: {err}") from err
        if frame["t_s"].isna().any() or frame["device"].isna().any():
            raise RunDirError(f"{self._source} has a row without t_s or device")
        frame["device"] = frame["device"].astype(str)
        self._tracks = {str(d): _track(g) for d, g in frame.groupby("device", sort=False)}
        self._devices = tuple(self._tracks)
        self._clock = clock
        self.counter_read_is_slow = counter_read_is_slow
        self.nominal_refresh_s = nominal_refresh_s
        self._max_age_s = max_age_s

    @staticmethod
    def _load(path: Path) -> pd.DataFrame:
        try:
            # device names are text even when they look like numbers
            return pd.read_csv(path, dtype={"device": str})
        except FileNotFoundError as err:
            raise RunDirError(f"no samples file at {path}: give a run's samples.csv") from err
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
            raise RunDirError(f"{path} is not a readable samples.csv: {err}") from err

    @property
    def devices(self) -> tuple[str, ...]:
        return self._devices

    def signals(self) -> list[SignalInfo]:
        infos = []
        for device, track in self._tracks.items():
            for signal in SIGNALS:
                if track.last[signal] and track.last[signal][-1] >= 0:
                    infos.append(SignalInfo(device, signal, True, f"replayed from {self._source}"))
                else:
                    reason = f"never recorded for {device} in {self._source}"
                    infos.append(SignalInfo(device, signal, False, reason))
        return infos

    def read(self, device: str, counter: bool) -> Reading:
        """The latest recorded values of `device` at or before now (energy_j only if `counter`)."""
        track = self._tracks.get(device)
        if track is None:
            raise SensorError(f"unknown device {device!r}: the recording has {self._devices}")
        now_s = self._clock.now_s()
        row = bisect.bisect_right(track.t_s, now_s) - 1
        if row < 0:
            return Reading()
        out: dict[str, Any] = {}
        for signal in (*_CHEAP, "energy_j") if counter else _CHEAP:
            j = track.last[signal][row]
            if j < 0:
                continue
            if self._max_age_s is not None and now_s - track.t_s[j] > self._max_age_s:
                continue
            out[signal] = track.values[signal][j]
        return Reading(**out)

    def close(self) -> None:
        """Nothing to release."""
