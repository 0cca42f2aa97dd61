"""Costs of windows of a run (training epochs, validation passes, an inference loop), from
its recorded samples: energy with its interval and source, mean power, per-item figures.

Pure functions of samples.csv (a DataFrame) and window edges on the run's clock. A device named
"sim*" is a simulated GPU: its figures are labelled estimated ("simulated"), never measured.
"""

from __future__ import annotations

from collections.abc import Sequence

from jouleprof.sensors.simulated import is_simulated_device
from jouleprof.timeline.summary import best_energy
from jouleprof.timeline.windows import signal_grids, window_energies
from jouleprof.types import Figure, Source

SIMULATED = "simulated GPU (no real sensor): a testing aid, not a measurement"


def gpu_devices(devices: Sequence[str]) -> list[str]:
    """The GPU-like devices of a run: real GPUs ("gpu*"), else simulated ones ("sim*")."""
    real = [d for d in devices if d.startswith("gpu")]
    return real or [d for d in devices if is_simulated_device(d)]


class WindowCoster:
    """Energy of windows of one run, the refresh grids detected once per device."""

    def __init__(self, samples, devices: Sequence[str], unavailable_reason: str) -> None:
        self.samples = samples
        self.devices = gpu_devices(devices)
        self.reason = unavailable_reason
        self._grids = {d: signal_grids(samples, d) for d in self.devices}

    @property
    def simulated(self) -> bool:
        return bool(self.devices) and all(is_simulated_device(d) for d in self.devices)

    def energy(self, t0_s: float, t1_s: float) -> Figure:
        """GPU energy of [t0_s, t1_s], summed over the run's GPUs, with its interval."""
        if not self.devices:
            return Figure.unavailable("J", self.reason)
        total = lo = hi = 0.0
        signals, short = set(), False
        for d in self.devices:
            w = best_energy(window_energies(self.samples, d, t0_s, t1_s, grids=self._grids[d]))
            if w is None:
                return Figure.unavailable("J", f"{d}: no signal covers [{t0_s:.3f}, {t1_s:.3f}] s")
            total += w.energy_j
            lo += w.lo_j if w.lo_j is not None else w.energy_j
            hi += w.hi_j if w.hi_j is not None else w.energy_j
            signals.add(w.signal)
            short = short or w.short
        signal = "+".join(sorted(signals))
        if self.simulated:
            return Figure.estimated(total, "J", SIMULATED, signal=signal, lo=lo, hi=hi)
        reason = "window shorter than 5 sensor refresh periods: coarse" if short else None
        return Figure.measured(total, "J", signal=signal, lo=lo, hi=hi, reason=reason)


def scaled(fig: Figure, factor: float, unit: str, what: str) -> Figure:
    """`fig` × factor (e.g. energy / duration → power; energy / clips → per clip)."""
    if fig.value is None:
        return Figure.unavailable(unit, fig.reason or "unavailable")
    if not factor > 0:
        return Figure.unavailable(unit, f"{what}: the divisor is not positive")
    lo = None if fig.lo is None else fig.lo * factor
    hi = None if fig.hi is None else fig.hi * factor
    if fig.source is Source.MEASURED:
        return Figure.measured(fig.value * factor, unit, signal=fig.signal, lo=lo, hi=hi)
    return Figure(
        fig.value * factor, unit, fig.source, reason=fig.reason, signal=fig.signal, lo=lo, hi=hi
    )


def summed(figs: Sequence[Figure], unit: str = "J") -> Figure:
    """The sum of figures (their bounds summed); unavailable if any is."""
    if not figs:
        return Figure.unavailable(unit, "no window")
    bad = [f for f in figs if f.value is None]
    if bad:
        return Figure.unavailable(unit, bad[0].reason or "unavailable")
    value = sum(f.value for f in figs)  # type: ignore[misc]
    lo = sum(f.lo if f.lo is not None else f.value for f in figs)  # type: ignore[misc]
    hi = sum(f.hi if f.hi is not None else f.value for f in figs)  # type: ignore[misc]
    first = figs[0]
    if all(f.source is Source.MEASURED for f in figs):
        return Figure.measured(value, unit, signal=first.signal, lo=lo, hi=hi)
    return Figure.estimated(
        value, unit, first.reason or "estimated", signal=first.signal, lo=lo, hi=hi
    )


def exact(value: float | None, unit: str, signal: str, reason: str) -> Figure:
    """A measured figure with no interval (a timer, a memory peak), or unavailable."""
    if value is None:
        return Figure.unavailable(unit, reason)
    return Figure.measured(float(value), unit, signal=signal)
