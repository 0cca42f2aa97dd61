"""Thermal hygiene between cells: wait until a GPU's power is back near idle, or a time limit.

A cell that starts on a GPU still hot from the last one draws more static power and may clock
lower, which shows up as a difference between cells that no factor explains. Before a GPU cell
starts, `Cooldown.wait` reads the power of its GPUs until every one is within a margin of its idle
power for a few reads in a row, or `max_s` passes, and returns a record of the wait for the cell's
cell.json. Idle power is `idle_w` where given, else the lowest power this Cooldown has read on
that GPU (the study's first wait starts on a GPU that has not yet run a cell).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

PowerReader = Callable[[Sequence[int]], "list[float | None]"]
"""GPU indices (as this process numbers them) -> each one's power in W (None: not read)."""


@dataclass(frozen=True)
class CooldownConfig:
    """When a GPU counts as cooled down."""

    max_s: float = 60.0
    """The longest wait before a cell; the cell then starts anyway (the record says so)."""
    idle_w: float | None = None
    """Idle power in W; None: the lowest power read on that GPU so far."""
    margin_w: float = 15.0
    """Near idle means at most idle + max(margin_w, margin_frac × idle)."""
    margin_frac: float = 0.10
    """See margin_w."""
    poll_s: float = 0.5
    """Seconds between power reads."""
    settle_reads: int = 3
    """Consecutive reads near idle that end the wait."""

    def __post_init__(self) -> None:
        if not self.max_s >= 0:
            raise ValueError(f"max_s must be ≥ 0, got {self.max_s}")
        if self.idle_w is not None and not self.idle_w > 0:
            raise ValueError(f"idle_w must be > 0 W or None, got {self.idle_w}")
        if self.margin_w < 0 or self.margin_frac < 0:
            raise ValueError("margin_w and margin_frac must be ≥ 0")
        if not self.poll_s > 0:
            raise ValueError(f"poll_s must be > 0, got {self.poll_s}")
        if self.settle_reads < 1:
            raise ValueError(f"settle_reads must be ≥ 1, got {self.settle_reads}")


def nvml_power_reader() -> PowerReader:
    """Power of the GPUs this process sees, through NVML (raises SensorUnavailable without)."""
    from jouleprof.sensors.nvml import import_pynvml
    from jouleprof.sensors.visible import resolve_gpus

    nv = import_pynvml()
    nv.nvmlInit()

    def read(gpus: Sequence[int]) -> list[float | None]:
        out: list[float | None] = []
        for g in resolve_gpus(nv, list(gpus)):
            try:
                out.append(nv.nvmlDeviceGetPowerUsage(g.handle) / 1000.0)
            except nv.NVMLError:
                out.append(None)
        return out

    return read


class Cooldown:
    """Waits for GPUs to cool between cells; remembers each GPU's lowest power."""

    def __init__(
        self,
        config: CooldownConfig | None = None,
        read_power: PowerReader | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config or CooldownConfig()
        self._read, self._sleep, self._clock = read_power, sleep, clock
        self._why_none = ""
        self.lowest_w: dict[int, float] = {}

    def _reader(self) -> PowerReader | None:
        if self._read is None and not self._why_none:
            try:
                self._read = nvml_power_reader()
            except Exception as e:  # no NVML or no driver: the cells start at once, recorded
                self._why_none = f"no GPU power reading ({type(e).__name__}: {e})"
        return self._read

    def target_w(self, gpu: int) -> float | None:
        idle = self.config.idle_w if self.config.idle_w is not None else self.lowest_w.get(gpu)
        if idle is None:
            return None
        return idle + max(self.config.margin_w, self.config.margin_frac * idle)

    def wait(self, gpus: Sequence[int]) -> dict[str, Any]:
        """Wait for `gpus` to cool; returns what happened (waited_s, start/end power, target,
        reason: near idle | time limit | no power reading)."""
        read = self._reader()
        if read is None:
            return {"gpus": list(gpus), "waited_s": 0.0, "reason": self._why_none}
        cfg = self.config
        t0 = self._clock()
        first = read(gpus)
        now, streak = first, 0
        self._remember(gpus, first)
        while True:
            targets = [self.target_w(g) for g in gpus]
            cool = all(
                p is not None and t is not None and p <= t
                for p, t in zip(now, targets, strict=True)
            )
            streak = streak + 1 if cool else 0
            waited = self._clock() - t0
            if streak >= cfg.settle_reads:
                reason = "near idle"
                break
            if waited >= cfg.max_s:
                reason = "time limit"
                break
            self._sleep(cfg.poll_s)
            now = read(gpus)
            self._remember(gpus, now)
        return {
            "gpus": list(gpus),
            "waited_s": round(self._clock() - t0, 3),
            "start_w": first,
            "end_w": now,
            "target_w": [None if t is None else round(t, 2) for t in targets],
            "reason": reason,
        }

    def _remember(self, gpus: Sequence[int], powers: Sequence[float | None]) -> None:
        for g, p in zip(gpus, powers, strict=True):
            if p is not None:
                self.lowest_w[g] = min(p, self.lowest_w.get(g, p))
