"""Phase energy split by time share: the usual estimate, kept as the baseline to beat.

The energy of the analysed steps is measured over one window (the cumulative counter where there
is one, else the integrated power readings; `timeline.windows`), and each phase gets the share of
it that its time has. This assumes every phase draws the same power, which is false on a GPU:
on the H200 it was off by up to 87% per phase (shared/FACTS.md). Its interval is only the
window's bound, scaled by the phase's share: it does not, and cannot, include the error of the
equal-power assumption.
"""

from __future__ import annotations

from jouleprof.attribution.common import IDLE, Timeline
from jouleprof.attribution.result import DeviceAttribution, PhaseResult
from jouleprof.errors import AttributionError
from jouleprof.sensors.refresh import detect_device_refresh
from jouleprof.timeline.summary import best_energy
from jouleprof.timeline.windows import WindowEnergy, window_energies

METHOD = "proportional"


def measured_region_energy(samples, timeline: Timeline, device: str) -> WindowEnergy:
    """Measured energy of the analysed steps' region (idle gaps between steps included).

    Raises:
        AttributionError: no signal can give the window's energy.
    """
    r0, r1 = timeline.region_s
    refresh = detect_device_refresh(samples, device)
    wins = window_energies(samples, device, r0, r1, refresh)
    best = best_energy(wins)
    if best is None:
        reasons = "; ".join(f"{k}: {w.reason}" for k, w in wins.items())
        raise AttributionError(
            f"the energy of {device} over the analysed steps cannot be measured ({reasons})"
        )
    return best


def attribute_proportional(samples, timeline: Timeline, device: str) -> DeviceAttribution:
    """Split the measured energy of the analysed steps by each phase's share of time."""
    win = measured_region_energy(samples, timeline, device)
    r0, r1 = timeline.region_s
    total_s = r1 - r0
    e, lo, hi = win.energy_j, win.lo_j, win.hi_j
    assert e is not None  # best_energy returns only available windows
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
        notes.append("the analysed steps span fewer than 5 sensor refresh periods: coarse")
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
        diagnostics={"signal": win.signal, "window_s": [r0, r1], "window_energy_j": e},
        notes=notes,
    )
