"""A training cell's summary, computed from its run directory alone (re-runnable offline).

`finish_cell(run_dir)` reads run.json, samples.csv, steps.csv and spans.csv, and adds to
run.json: throughput, energy per sample and per 1,000 samples, model FLOP utilization, the
physical floor in joules per sample, the overhead of fine mode, and the phase attribution by every
method the run supports (phases_<method>.csv; phases.csv is the regression's).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from jouleprof.errors import JouleprofError
from jouleprof.store.rundir import RunDir
from jouleprof.timeline.summary import best_energy
from jouleprof.timeline.windows import window_energies
from jouleprof.types import Figure
from jouleprof.units import J_PER_KWH

log = logging.getLogger(__name__)

# Dense bf16 tensor-core peak by GPU model, FLOP/s (vendor datasheets, without sparsity): the
# denominator of MFU as it is usually quoted.
BF16_PEAK_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "RTX 5000 Ada": 261e12}
# Measured on an H200 (shared/FACTS.md): 790 TFLOP/s of bf16 matmul at ~700 W, i.e. about
# 1.13 TFLOP per joule. A workload cannot do its FLOPs for fewer joules than FLOPs / this.
BF16_FLOP_PER_J_H200 = 790e12 / 700.0


def _peak_flops(hardware: dict[str, Any]) -> tuple[float | None, str]:
    gpus = hardware.get("gpus")
    if isinstance(gpus, dict):  # not described, and the record says why
        return None, f"no GPU in the hardware record ({gpus.get('reason') or 'no reason given'})"
    names = [g.get("name", "") for g in gpus] if isinstance(gpus, list) else []
    for name in names:
        for key, peak in BF16_PEAK_FLOPS.items():
            if key in name:
                return peak, f"{key} bf16 dense datasheet peak"
    return None, f"no datasheet peak known for GPU {names or 'none'}"


def _described_gpu_count(hardware: dict[str, Any]) -> int:
    """How many GPUs the hardware record describes (a baseline cell samples none)."""
    gpus = hardware.get("gpus")
    return len(gpus) if isinstance(gpus, list) else 0


def _read_steps(rd: RunDir):
    import pandas as pd

    p = rd.path / "steps.csv"
    return pd.read_csv(p) if p.is_file() and p.stat().st_size > 0 else None


def cell_figures(rd: RunDir) -> dict[str, Figure]:
    """Throughput, energy per sample, MFU and floors of the measured segment."""
    rec = rd.read_record()
    seg = rec.extra.get("measured_segment")
    out: dict[str, Figure] = {}
    if rec.extra.get("oom"):
        out["throughput_samples_per_s"] = Figure.unavailable("samples/s", "out of memory")
        return out
    if not seg or seg["t1_s"] <= seg["t0_s"]:
        out["throughput_samples_per_s"] = Figure.unavailable(
            "samples/s", "the measured segment did not complete"
        )
        return out
    dur = seg["t1_s"] - seg["t0_s"]
    samples_n = seg["samples"]
    thr = samples_n / dur
    out["measured_s"] = Figure.measured(dur, "s", signal="timer")
    out["throughput_samples_per_s"] = Figure.measured(
        thr, "samples/s", signal="timer", reason="synchronized at the segment's edges"
    )
    out["step_time_s"] = Figure.measured(dur / seg["steps"], "s", signal="timer")
    samples = rd.read_samples() if rd.has("samples.csv") else None
    gpus = (
        sorted(d for d in samples["device"].unique() if d.startswith("gpu"))
        if samples is not None and len(samples)
        else []
    )
    energies = []
    for dev in gpus:
        w = best_energy(window_energies(samples, dev, seg["t0_s"], seg["t1_s"]))
        if w is None:
            continue
        energies.append(w)
    if gpus and len(energies) == len(gpus):
        e = sum(w.energy_j for w in energies)
        lo = sum(w.lo_j for w in energies if w.lo_j is not None)
        hi = sum(w.hi_j for w in energies if w.hi_j is not None)
        sig = "+".join(sorted({w.signal for w in energies}))
        out["segment_gpu_energy_j"] = Figure.measured(e, "J", signal=sig, lo=lo, hi=hi)
        out["segment_gpu_power_w"] = Figure.measured(e / dur, "W", signal=sig)
        out["energy_per_sample_j"] = Figure.measured(
            e / samples_n, "J", signal=sig, lo=lo / samples_n, hi=hi / samples_n
        )
        out["energy_per_1000_samples_kwh"] = Figure.measured(
            1000 * e / samples_n / J_PER_KWH, "kWh", signal=sig
        )
    else:
        if rec.extra.get("mode") in ("baseline", "codecarbon", "zeus"):
            why = f"jouleprof's sensors are off in {rec.extra.get('mode')} mode"
        else:
            run_gpu = rec.summary.get("gpu_energy_j")
            why = (run_gpu.reason if run_gpu is not None and run_gpu.reason else None) or (
                "no GPU energy readings in the measured segment"
            )
        for k, u in (("segment_gpu_energy_j", "J"), ("energy_per_sample_j", "J")):
            out[k] = Figure.unavailable(u, why)
    cc = rec.extra.get("crosscheck")
    if cc and cc.get("gpu_energy_j"):
        out["crosscheck_energy_per_sample_j"] = Figure.measured(
            cc["gpu_energy_j"] / samples_n, "J", signal=cc.get("tool")
        )
    flops = (rec.extra.get("workload_facts") or {}).get("flops_per_sample") or {}
    f_train = flops.get("forward_backward_flops")
    if f_train:
        peak, why = _peak_flops(rec.hardware)
        n_gpu = len(gpus) or _described_gpu_count(rec.hardware) or 1
        if peak:
            out["mfu_pct"] = Figure.estimated(
                100 * f_train * thr / (peak * n_gpu), "%", reason=f"counted FLOPs / {why}"
            )
        else:
            out["mfu_pct"] = Figure.unavailable("%", why)
        out["floor_energy_per_sample_j"] = Figure.estimated(
            f_train / BF16_FLOP_PER_J_H200,
            "J",
            reason="counted FLOPs / 1.13 TFLOP per J (H200 bf16 matmul, measured)",
        )
    mem = rec.extra.get("peak_mem_allocated_bytes")
    if mem:
        out["peak_mem_allocated_bytes"] = Figure.measured(mem, "B", signal="torch allocator")
    wait_s = seg.get("data_wait_s")
    if wait_s is not None:
        out["data_wait_pct"] = Figure.measured(
            100 * wait_s / (seg["t1_s"] - seg["t0_s"]), "%", signal="timer"
        )
    host_us = (rec.extra.get("phase_recorder") or {}).get("host_us_per_step")
    step = out.get("step_time_s")
    if host_us is not None and step is not None and step.value:
        out["recorder_host_pct"] = Figure.estimated(
            100 * host_us / 1e6 / step.value,
            "%",
            "the phase recorder's own host time per step (sampled boundaries and step ends) "
            "over the step time: what it can add to a step the host paces",
        )
    ov = rec.extra.get("overhead") or {}
    # The geometric mean over pairs, and the median pair (robust to pairs a stall hit).
    for key, value, lo, hi, signal in (
        ("fine_overhead_pct", "overhead_pct", "ci_lo_pct", "ci_hi_pct", "interleaved blocks"),
        (
            "fine_overhead_median_pct",
            "median_pct",
            "median_ci_lo_pct",
            "median_ci_hi_pct",
            "interleaved blocks, median pair",
        ),
    ):
        if ov.get(value) is not None:
            out[key] = Figure.measured(ov[value], "%", signal=signal, lo=ov.get(lo), hi=ov.get(hi))
    return out


def attribute_cell(rd: RunDir) -> dict[str, Any]:
    """Every attribution method the run supports; phases_<method>.csv files; a status per method."""
    from jouleprof.attribution.api import attribute
    from jouleprof.attribution.excitation import record_costs

    status: dict[str, Any] = {}
    if not rd.has("spans.csv") or (rd.path / "spans.csv").stat().st_size == 0:
        return {"reason": "no phase spans (only fine mode records them)"}
    methods = ["proportional", "regression"]
    if rd.has("isolation_windows.csv") or rd.has("isolation.csv"):
        methods.append("isolation")
    for method in methods:
        try:
            res = attribute(rd.path, method, warmup_steps=0)
        except JouleprofError as e:
            status[method] = {"ok": False, "reason": str(e)}
            continue
        df = res.to_frame()
        rd.write_phases(df, f"phases_{method}.csv")
        status[method] = {"ok": True}
        record_costs(status[method], res)  # what the opt-in excitation or repetition cost
        if method == "regression":
            rd.write_phases(df)  # phases.csv is the regression's
            # Which model each device's figures come from (`attribution.regression_choice`).
            for key, diag in (("model", "stall_model_choice"), ("bins", "bins_choice")):
                choices = {
                    d.device: d.diagnostics[diag] for d in res.devices if diag in d.diagnostics
                }
                if choices:
                    status[method][key] = choices
    return status


def finish_cell(run_dir: str | os.PathLike[str], timing_s: dict[str, Any] | None = None) -> None:
    """Add the cell's figures and attribution to its run.json (idempotent).

    timing_s: more parts of the cell's wall time to record (run.json extra.timing_s), to which
    this adds "finish", its own duration.
    """
    t0 = time.perf_counter()
    rd = RunDir(Path(run_dir))
    figs = cell_figures(rd)
    status = attribute_cell(rd)
    rec = rd.read_record()
    rec.summary.update(figs)
    rec.extra["attribution"] = status
    timing = rec.extra.setdefault("timing_s", {})
    timing.update(timing_s or {})
    timing["finish"] = round(time.perf_counter() - t0, 3)
    rd.write_record(rec)
