"""Phase energy split by time share: the usual estimate, kept as the baseline to beat.

The energy of the analysed steps is measured over the windows they span (the cumulative counter
where there is one, else the integrated power readings; `timeline.windows`), and each phase
gets the share of it that its time has. This assumes every phase draws the same power, which is
false on a GPU: on the H200 it was off by up to 87% per phase (shared/FACTS.md). Its interval
is only the windows' bound, scaled by the phase's share: it does not, and cannot, include the
error of the equal-power assumption.
"""

from __future__ import annotations

from dataclasses import dataclass

from jouleprof.attribution.common import IDLE, Timeline
from jouleprof.attribution.result import DeviceAttribution, PhaseResult
from jouleprof.errors import AttributionError
from jouleprof.timeline.summary import best_energy
from jouleprof.timeline.windows import signal_grids, window_energies

METHOD = "proportional"


@dataclass(frozen=True)
class MeasuredEnergy:
    """Energy of the analysed steps' runs, summed (idle gaps between steps included)."""

    energy_j: float
    lo_j: float | None
    hi_j: float | None
    time_s: float
    signal: str
    short: bool


def measured_steps_energy(samples, timeline: Timeline, device: str) -> MeasuredEnergy:
    """Measured energy of every run of consecutive analysed steps, summed.

    Bounds add up end to end (conservative). Time excluded between runs (unrecorded work,
    `common.OUTSIDE`) is not counted.

    Raises:
        AttributionError: no signal can give a run's energy.
    """
    grids = signal_grids(samples, device)  # once for every run of steps
    total, lo, hi, time_s = 0.0, 0.0, 0.0, 0.0
    signals, short = set(), False
    for r0, r1 in timeline.runs_s:
        wins = window_energies(samples, device, r0, r1, grids=grids)
        best = best_energy(wins)
        if best is None or best.energy_j is None:
            reasons = "; ".join(f"{k}: {w.reason}" for k, w in wins.items())
            raise AttributionError(
                f"the energy of {device} over the analysed steps cannot be measured ({reasons})"
            )
        total += best.energy_j
        lo = None if lo is None or best.lo_j is None else lo + best.lo_j
        hi = None if hi is None or best.hi_j is None else hi + best.hi_j
        time_s += r1 - r0
        signals.add(best.signal)
        short = short or best.short
    return MeasuredEnergy(total, lo, hi, time_s, "+".join(sorted(signals)), short)


def attribute_proportional(samples, timeline: Timeline, device: str) -> DeviceAttribution:
    """Split the measured energy of the analysed steps by each phase's share of time."""
    win = measured_steps_energy(samples, timeline, device)
    total_s = win.time_s
    e, lo, hi = win.energy_j, win.lo_j, win.hi_j
    n_steps = timeline.n_steps
    step_s = timeline.step_time_s
    results = []
    for name in timeline.order:
        t = timeline.time_s[name]
        f = t / total_s
        results.append(
            PhaseResult(
                name,
                t,
                t / n_steps,
                e * f,
                None if lo is None else lo * f,
                None if hi is None else hi * f,
                e / total_s,
                100.0 * t / step_s if name != IDLE and step_s > 0 else None,
                METHOD,
                True,
                f"time share of the {win.signal} energy: assumes every phase draws the same power",
                device,
                n_steps,
            )
        )
    f_step = step_s / total_s
    notes = []
    if win.short:
        notes.append("a run of analysed steps spans fewer than 5 sensor refreshes: coarse")
    return DeviceAttribution(
        device=device,
        method=METHOD,
        phases=results,
        n_steps=n_steps,
        warmup_steps=len(timeline.warmup_steps),
        step_time_s=step_s / n_steps,
        step_energy_j=e * f_step,
        step_energy_lo_j=None if lo is None else lo * f_step,
        step_energy_hi_j=None if hi is None else hi * f_step,
        diagnostics={"signal": win.signal, "windows_s": timeline.runs_s, "window_energy_j": e},
        notes=notes,
    )
