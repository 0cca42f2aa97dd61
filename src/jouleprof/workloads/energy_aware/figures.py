"""An energy-aware cell's summary figures, from its recorded samples and spans (pure).

Energy of a span: the GPU's cumulative counter across the span's window where it was read
(bounds from the counter's refresh brackets), else the integrated power readings — whichever
`timeline.summary.best_energy` picks, with its signal named. A simulated GPU's figures are
labelled estimated ("simulated"), never measured. Without a GPU the figure is unavailable with
the reason measure() recorded.
"""

from __future__ import annotations

from jouleprof.sensors.simulated import is_simulated_device
from jouleprof.types import Figure, Source

SIMULATED = getattr(Source, "SIMULATED", Source.ESTIMATED)
SIM_REASON = "simulated GPU (testing aid): not a measurement"

SPAN_NAMES = ("train", "eval", "infer")


def _gpu_devices(devices: list[str]) -> tuple[list[str], bool]:
    """The run's GPU-like devices (`scores.costs.gpu_devices`) and whether they are simulated."""
    from jouleprof.scores.costs import gpu_devices

    devs = gpu_devices(devices)
    return devs, bool(devs) and all(is_simulated_device(d) for d in devs)


def span_energy(samples, devices: list[str], t0_s: float, t1_s: float, no_gpu_reason: str):
    """(Figure of the window's GPU energy summed over devices, mean util %, or None)."""
    import numpy as np

    from jouleprof.timeline.summary import best_energy
    from jouleprof.timeline.windows import signal_grids, window_energies

    devs, simulated = _gpu_devices(devices)
    if not devs or samples is None or not len(samples):
        return Figure.unavailable("J", no_gpu_reason), None
    total = lo = hi = 0.0
    signals, short = set(), False
    for d in devs:
        best = best_energy(window_energies(samples, d, t0_s, t1_s, grids=signal_grids(samples, d)))
        if best is None:
            return Figure.unavailable("J", f"no energy reading covers the window on {d}"), None
        total += best.energy_j
        lo += best.lo_j if best.lo_j is not None else best.energy_j
        hi += best.hi_j if best.hi_j is not None else best.energy_j
        signals.add(best.signal)
        short = short or best.short
    signal = "+".join(sorted(signals))
    util = samples[samples["device"].isin(devs) & samples["t_s"].between(t0_s, t1_s)]
    util_pct = util["util_pct"].dropna() if "util_pct" in util else []
    mean_util = float(np.mean(util_pct)) if len(util_pct) and not simulated else None
    if simulated:
        fig = Figure(total, "J", SIMULATED, reason=SIM_REASON, signal=signal, lo=lo, hi=hi)
    else:
        why = "window shorter than 5 sensor refresh periods: coarse" if short else None
        fig = Figure.measured(total, "J", signal=signal, lo=lo, hi=hi, reason=why)
    return fig, mean_util


def _per(fig: Figure, n: int, unit: str) -> Figure:
    if fig.value is None or n <= 0:
        return Figure.unavailable(unit, fig.reason or "no samples")
    scale = 1.0 / n
    kw = {
        "lo": fig.lo * scale if fig.lo is not None else None,
        "hi": fig.hi * scale if fig.hi is not None else None,
        "signal": fig.signal,
    }
    return Figure(fig.value * scale, unit, fig.source, reason=fig.reason, **kw)


def cell_figures(
    rec,
    samples,
    spans: dict[str, tuple[float, float]],
    res,
    e_unit: str,
    parameters: int,
    on_cpu: bool = False,
) -> dict[str, Figure]:
    """The figures a cell adds to run.json's summary (flat keys, copied into runs.csv)."""
    out: dict[str, Figure] = {}
    gpu_fig = rec.summary.get("gpu_energy_j")
    no_gpu = (gpu_fig.reason if gpu_fig is not None and gpu_fig.value is None else None) or (
        "no GPU was measured"
    )
    if on_cpu:
        no_gpu = "the cell ran on the CPU: there is no GPU energy to measure"
    devices = sorted({k.split(".")[0] for k in rec.summary if "." in k})
    idle_w = None
    for d in _gpu_devices(devices)[0]:
        f = rec.summary.get(f"{d}.idle_power_w")
        if f is not None and f.value is not None:
            idle_w = (idle_w or 0.0) + f.value
    if res.test_accuracy is not None:
        out["accuracy"] = Figure.measured(res.test_accuracy, "fraction", signal="test set")
    if res.test_energy is not None:
        out["internal_energy"] = Figure.measured(
            res.test_energy, e_unit, signal="regularizer hooks, test set, per sample"
        )
    if res.epoch_energy:
        out["internal_energy_train"] = Figure.measured(
            res.epoch_energy[-1], e_unit, signal="regularizer hooks, last epoch, per sample"
        )
    if res.test_sparsity is not None:
        out["activation_sparsity"] = Figure.measured(
            res.test_sparsity, "fraction", signal="exact zeros among hooked inputs, test set"
        )
    out["parameters"] = Figure.measured(parameters, "count", signal="model")
    counts = {"train": res.samples, "eval": 0, "infer": res.infer_samples}
    for name in ("train", "infer"):
        if name not in spans:
            continue
        t0, t1 = spans[name]
        out[f"{name}_time_s"] = Figure.measured(t1 - t0, "s", signal="timer (synchronized)")
        energy, util = span_energy(samples, devices, t0, t1, no_gpu)
        out[f"{name}_gpu_energy_j"] = energy
        out[f"{name}_energy_per_sample_j"] = _per(energy, counts[name], "J")
        if energy.value is not None and t1 > t0:
            out[f"{name}_gpu_power_w"] = Figure(
                energy.value / (t1 - t0),
                "W",
                energy.source,
                reason=energy.reason,
                signal=energy.signal,
            )
            if idle_w is not None:
                above = energy.value - idle_w * (t1 - t0)
                how = "window energy minus idle power × duration"
                out[f"{name}_gpu_energy_above_idle_j"] = (
                    Figure(above, "J", SIMULATED, reason=f"{SIM_REASON}; {how}")
                    if energy.source is SIMULATED
                    else Figure.estimated(above, "J", reason=how)
                )
        if util is not None:
            out[f"{name}_gpu_util_pct"] = Figure.measured(util, "%", signal="util_pct, mean")
    return out
