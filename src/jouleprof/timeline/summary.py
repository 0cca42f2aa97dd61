"""Summary figures of a run, per device, computed from samples.csv alone (pure functions).

Energy comes from the cumulative counter where there is one, cross-checked against the
integrated power readings; every figure says which signal it came from, and a figure that
cannot be computed says why.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from jouleprof.sensors.refresh import RefreshEstimate
from jouleprof.sensors.simulated import is_simulated_device
from jouleprof.timeline.windows import WindowEnergy, signal_grids, window_energies
from jouleprof.types import Figure, Source


@dataclass(frozen=True)
class Interval:
    t0_s: float
    t1_s: float

    @property
    def duration_s(self) -> float:
        return self.t1_s - self.t0_s


def _energy_figure(w: WindowEnergy) -> Figure:
    if w.energy_j is None:
        return Figure.unavailable("J", w.reason or "no readings")
    reason = None
    if w.short:
        reason = "window shorter than 5 sensor refresh periods: treat as coarse"
    return Figure.measured(w.energy_j, "J", signal=w.signal, lo=w.lo_j, hi=w.hi_j, reason=reason)


def best_energy(windows: dict[str, WindowEnergy]) -> WindowEnergy | None:
    """The counter where available, else the instant power, else the 1 s average."""
    for name in ("counter", "power_instant", "power_avg"):
        w = windows.get(name)
        if w is not None and w.energy_j is not None:
            return w
    return None


def device_summary(
    samples,
    device: str,
    work: Interval,
    idle: Interval | None = None,
    refresh: RefreshEstimate | None = None,
) -> dict[str, Figure]:
    """Figures for one device over the `work` interval, with `idle` as its baseline.

    Keys: energy_j, energy_power_instant_j, energy_power_avg_j, crosscheck_instant_pct,
    crosscheck_avg_pct, avg_power_w, peak_power_w, idle_power_w, energy_above_idle_j,
    peak_mem_used_bytes, refresh_period_s.
    """
    d = samples[samples["device"] == device]
    out: dict[str, Figure] = {}
    grids = signal_grids(samples, device)  # once, for the work and the idle windows
    if refresh is None:
        refresh = grids["energy_j"]
    if refresh is not None:
        out["refresh_period_s"] = Figure.measured(
            refresh.period_s, "s", signal=refresh.signal, reason=f"detected ({refresh.method})"
        )
    else:
        out["refresh_period_s"] = Figure.unavailable(
            "s", "too few updates seen, or reads too sparse, to detect the refresh period"
        )
    wins = window_energies(samples, device, work.t0_s, work.t1_s, refresh, grids)
    best = best_energy(wins)
    is_gpu = device.startswith(("gpu", "sim"))
    out["energy_j"] = (
        _energy_figure(best)
        if best is not None
        else Figure.unavailable("J", "; ".join(f"{k}: {w.reason}" for k, w in wins.items()))
    )
    if is_gpu:
        out["energy_power_instant_j"] = _energy_figure(wins["power_instant"])
        out["energy_power_avg_j"] = _energy_figure(wins["power_avg"])
        for key, name in (
            ("crosscheck_instant_pct", "power_instant"),
            ("crosscheck_avg_pct", "power_avg"),
        ):
            other = wins[name]
            if best is not None and best.signal == "counter" and other.energy_j and best.energy_j:
                pct = 100.0 * (other.energy_j - best.energy_j) / best.energy_j
                out[key] = Figure.measured(pct, "%", signal=f"{name} vs counter")
            else:
                out[key] = Figure.unavailable("%", "needs both the counter and that power signal")
    if best is not None and work.duration_s > 0:
        out["avg_power_w"] = Figure.measured(
            best.energy_j / work.duration_s, "W", signal=best.signal
        )
    else:
        out["avg_power_w"] = Figure.unavailable("W", "energy unavailable")
    in_work = d[(d["t_s"] >= work.t0_s) & (d["t_s"] <= work.t1_s)]
    for col, key, unit in (
        ("power_instant_w", "peak_power_w", "W"),
        ("mem_used_bytes", "peak_mem_used_bytes", "B"),
    ):
        v = in_work[col].dropna() if col in in_work else []
        if len(v):
            out[key] = Figure.measured(float(np.max(v)), unit, signal=col)
        elif is_gpu:
            out[key] = Figure.unavailable(unit, f"no {col} readings during the run")
    if idle is not None and idle.duration_s > 0:
        iw = best_energy(window_energies(samples, device, idle.t0_s, idle.t1_s, refresh, grids))
        if iw is not None:
            idle_w = iw.energy_j / idle.duration_s
            out["idle_power_w"] = Figure.measured(
                idle_w,
                "W",
                signal=iw.signal,
                reason=f"mean over {idle.duration_s:.2f} s before the workload",
            )
            if best is not None:
                out["energy_above_idle_j"] = Figure.estimated(
                    best.energy_j - idle_w * work.duration_s,
                    "J",
                    reason="energy minus idle power × duration",
                )
        else:
            out["idle_power_w"] = Figure.unavailable("W", "no readings in the idle window")
    else:
        out["idle_power_w"] = Figure.unavailable("W", "no idle baseline was taken (--idle-s 0)")
    if "energy_above_idle_j" not in out:
        out["energy_above_idle_j"] = Figure.unavailable("J", "needs both energy and idle power")
    return out


def run_summary(
    samples, devices: list[str], work: Interval, idle: Interval | None = None
) -> dict[str, Figure]:
    """Flat summary for run.json: "<device>.<figure>" keys plus "wall_time_s". A simulated
    device's figures ("sim0.*", `measure(simulate_gpu_w=...)`) have source "simulated": they
    are read from the package's simulated GPU, never measured."""
    out: dict[str, Figure] = {"wall_time_s": Figure.measured(work.duration_s, "s", signal="timer")}
    for dev in devices:
        sim = is_simulated_device(dev)
        for k, f in device_summary(samples, dev, work, idle).items():
            if sim and f.value is not None:
                f = replace(f, source=Source.SIMULATED)
            out[f"{dev}.{k}"] = f
    gpu_e = [out[f"{d}.energy_j"] for d in devices if d.startswith("gpu")]
    if gpu_e and all(f.value is not None for f in gpu_e):
        total = sum(f.value for f in gpu_e)  # type: ignore[misc]
        out["gpu_energy_j"] = Figure.measured(
            total, "J", signal="+".join(sorted({f.signal or "" for f in gpu_e}))
        )
    elif gpu_e:
        out["gpu_energy_j"] = Figure.unavailable("J", "some GPU's energy is unavailable")
    return out
