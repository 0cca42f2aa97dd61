"""Long idle gaps ("edges") as excitation, on an H200-like simulated GPU (issue 20).

On the H200 the run's own buffer residuals do not pick the power buffer's window length
(Δχ² of the neighbouring lengths 0.1-1.1, against 9 to reject one), so every interval keeps the
neighbours' full move; on the package's simulated GPU they reject the neighbours easily,
because its phases draw flat power and the regression's model is exact there. This script
makes the simulated GPU misfit the way the H200 does, then tests whether a few long
load→idle→load edges (`ExciteConfig.edges()`: 40-150 ms `sync` gaps in a few % of the steps)
identify the window anyway.

What the simulated GPU gets here, beyond `benchmarks/ref_loops_sim.py` (`Misfit`):

- power that is not flat within a phase: a GEMM that starts at its unthrottled 900 W and is
  throttled toward 690 W (τ 10 ms), its headroom recovering (τ 15 ms) while the device runs
  below the limit or idles, so a GEMM after a long gap starts higher than in a plain step; a
  copy, and a backward, that ramp up;
- per-occurrence level noise (σ 3 % of each phase's power), 1 ms power noise (σ 40 W), a slow
  drift (σ 2 %, τ 2 s), noise on each buffer sample (σ 15 W) and on the instant field (10 W);
- optionally a tail of the load's power after it ends (`idle_tail_frac`): a decay the
  regression could take for a longer buffer kernel, the worst case for long gaps.

The buffer is NVML's as the regression assumes it (an exponential cut at `true_window_s`, 5 ms
late; 30 boxes here, 10 in the fit), every 20 ms. The counter and the power fields are the
package's simulated GPU (`jouleprof.sensors.simulated`) read by the real sampler; the phases
are recorded by a real `PhaseRecorder`, whose `Exciter` puts the gaps. The attribution is the
default `attribute(run, "regression")`; every figure is simulated.

    PYTHONPATH=src python3 benchmarks/edge_excite_sim.py --out DIR [--fine-s 60] \
        [--loops user4h] [--settings plain,short,edges5,edges10] [--misfit h200] [--seeds 0]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ref_loops import excite_config  # noqa: E402
from ref_loops_sim import record_steps  # noqa: E402

BUFFER_PERIOD_S = 0.020
SEG_S = 1e-3
"""The simulated power's resolution within a phase (it is piecewise constant on this grid)."""


@dataclass(frozen=True)
class Shape:
    """One phase: `ms` long, settling to `w` from `start_w` with time constant `tau_ms`."""

    name: str
    ms: float
    w: float
    start_w: float | None = None
    """The power at its start (None: flat at `w`)."""
    tau_ms: float = 10.0
    throttle: bool = False
    """The start is the unthrottled demand, reached only with full headroom: the headroom
    decays (τ `tau_ms`) while this phase runs and recovers while the device runs below it."""
    jitter: float = 0.01
    """Relative σ of its duration from step to step."""


@dataclass(frozen=True)
class Misfit:
    """How the simulated GPU departs from the regression's model (module docstring)."""

    shapes: bool = True
    """Phases draw their shapes (False: flat, at each phase's mean power with full headroom)."""
    level_sd: float = 0.03
    fine_sd_w: float = 40.0
    drift_sd: float = 0.02
    drift_tau_s: float = 2.0
    buffer_noise_w: float = 15.0
    instant_noise_w: float = 10.0
    recover_ms: float = 15.0
    """The throttle headroom's recovery time constant below the limit."""
    idle_tail_frac: float = 0.0
    """Share of the drop from the last load's power to idle that decays slowly (τ
    `idle_tail_ms`) after the load ends (0: the power drops at once)."""
    idle_tail_ms: float = 20.0

    @classmethod
    def flat(cls) -> Misfit:
        """The simulated GPU as ref_loops_sim.py has it: flat phases, ~1 W of noise."""
        return cls(False, 0.0, 0.0, 0.0, 2.0, 1.0, 0.5)


MISFITS: dict[str, Misfit] = {
    "flat": Misfit.flat(),
    "h200": Misfit(),
    "h200_tail": Misfit(idle_tail_frac=0.3, idle_tail_ms=20.0),
    "shapes_only": replace(Misfit.flat(), shapes=True),
    "noise_only": replace(Misfit(), shapes=False),
    "white_only": replace(Misfit.flat(), fine_sd_w=40.0, buffer_noise_w=15.0, instant_noise_w=10.0),
    "level_only": replace(Misfit.flat(), level_sd=0.03),
    "drift_only": replace(Misfit.flat(), drift_sd=0.02),
}


@dataclass(frozen=True)
class Loop:
    name: str
    phases: tuple[Shape, ...]
    idle_w: float = 90.0
    between_ms: float = 0.0
    notes: dict = field(default_factory=dict)


LOOPS: dict[str, Loop] = {
    # user4 as on the H200: a GEMM at the 700 W limit (throttled from ~900 W), a 1 GiB copy,
    # a one-thread spin, 600 tiny kernels; 51 ms a step.
    "user4h": Loop(
        "user4h",
        (
            Shape("gemm", 29.0, 690.0, start_w=900.0, tau_ms=10.0, throttle=True),
            Shape("copy", 15.0, 450.0, start_w=380.0, tau_ms=6.0),
            Shape("spin", 6.0, 160.0),
            Shape("tiny", 1.0, 230.0),
        ),
    ),  # fmt: skip
    # A BERT-like step whose backward ramps from ~435 W to ~630 W (as a V-JEPA2 backward).
    "bert_h": Loop(
        "bert_h",
        (
            Shape("forward", 17.0, 500.0, start_w=560.0, tau_ms=8.0),
            Shape("backward", 33.0, 640.0, start_w=435.0, tau_ms=15.0),
            Shape("optimizer", 2.0, 380.0),
        ),
        between_ms=6.0,
    ),  # fmt: skip
    # pl_resnet50 as on the H200: data-bound, ~34 ms idle between steps of ~30 ms (an idle
    # edge in every step, each shorter than the buffer's window): a check of the misfit
    # against the H200's residuals there (the neighbours' RMS +4-8 %, Δχ² below 9).
    "resnet_h": Loop(
        "resnet_h",
        (
            Shape("forward", 11.0, 520.0, start_w=600.0, tau_ms=5.0),
            Shape("backward", 19.0, 630.0, start_w=435.0, tau_ms=10.0),
            Shape("optimizer", 0.4, 300.0),
        ),
        between_ms=34.0,
    ),  # fmt: skip
    # infer_mixed as on the H200 (no_grad inference, 19.5 ms a step): an fp32 embedding MLP
    # and a bf16 encoder both read above the 700 W limit alone (throttled), an fp32 vocabulary
    # loss, a host-side log that waits for the device and sleeps 2 ms.
    "infer_h": Loop(
        "infer_h",
        (
            Shape("embed_fp32", 5.6, 700.0, start_w=780.0, tau_ms=8.0, throttle=True),
            Shape("encoder_bf16", 8.0, 690.0, start_w=760.0, tau_ms=10.0, throttle=True),
            Shape("loss_fp32", 2.9, 660.0),
            Shape("log", 2.5, 200.0),
        ),
    ),  # fmt: skip
}


def _edges(fraction: float, lo_ms: float | None = None, hi_ms: float | None = None):
    """`ExciteConfig.edges` (its gaps' lengths, or `lo_ms`-`hi_ms`) in `fraction` of the
    steps in the first 75 % of the run."""

    def make(fine_s: float):
        from jouleprof.timeline.excite import ExciteConfig

        kw = {}
        if lo_ms is not None and hi_ms is not None:
            kw = dict(min_gap_s=1e-3 * lo_ms, max_gap_s=1e-3 * hi_ms)
        return ExciteConfig.edges(window_s=0.75 * fine_s, fraction=fraction, **kw)

    return make


SETTINGS = {
    "plain": None,
    "short": excite_config,  # ref_loops.py's `<loop>_excite` (0.5-5 ms gaps, 30 % of the steps)
    "edges5": _edges(0.05),
    "edges10": _edges(0.10),
    "edges2": _edges(0.02),
    "edges5_long": _edges(0.05, 100.0, 150.0),
    "edges10_40_80": _edges(0.10, 40.0, 80.0),
    "edges30": _edges(0.30),
}
"""Excitation per setting, a function of the fine run's seconds (None: none)."""

REPEATS: dict[str, tuple[tuple[str, ...], float]] = {
    "repeat_copy10": (("copy",), 0.10),
    "repeat_copy30": (("copy",), 0.30),
    "repeat_gemm30": (("gemm",), 0.30),
    "repeat_copy_gemm30": (("copy", "gemm"), 0.30),
    "repeat_all30": (("gemm", "copy", "spin", "tiny", "forward", "backward", "optimizer"), 0.30),
    "repeat_infer10": (("embed_fp32", "encoder_bf16", "loss_fp32"), 0.10),
    "repeat_infer30": (("embed_fp32", "encoder_bf16", "loss_fp32"), 0.30),
    "repeat_loss30": (("loss_fp32",), 0.30),
}
"""Phase repetition as excitation (the issue's other kind: phases repeated where they are
replayable): in the steps of the run's first 75 %, each named phase runs twice back to back
with chance `fraction` (drawn for each phase and step), each run its own span of that phase.
Settings beside SETTINGS."""


class Driver:
    """A power schedule (1 ms pieces inside phases) and a manual clock a PhaseRecorder records
    on; keeps each occurrence's true energy."""

    def __init__(self, loop: Loop, misfit: Misfit, seed: int) -> None:
        from jouleprof.clock import ManualClock
        from jouleprof.sensors.simulated import PowerSchedule

        self.loop, self.mf = loop, misfit
        self.rng = np.random.default_rng([seed, 2026])
        self.sched = PowerSchedule(idle_w=loop.idle_w)
        self.clock = ManualClock()
        self.edges = [0.0]
        self.cum = [0.0]
        self.headroom = 1.0
        self.last_load_w = loop.idle_w
        self.drift = 0.0
        self.truth: dict[str, list[float]] = {}
        self.idle(1.0)

    def _put(self, d: float, w: float) -> float:
        """Append `d` s at `w` W (with the drift and 1 ms noise); returns the energy."""
        mf = self.mf
        if mf.drift_sd:
            a = math.exp(-d / mf.drift_tau_s)
            self.drift = a * self.drift + mf.drift_sd * math.sqrt(1 - a * a) * self.rng.normal()
        idle = self.loop.idle_w
        p = idle + (w - idle) * (1.0 + self.drift)
        if mf.fine_sd_w:
            p += mf.fine_sd_w * self.rng.normal() * min(1.0, math.sqrt(SEG_S / max(d, 1e-9)))
        p = max(p, 0.3 * idle)
        self.sched.append(d, p)
        self.edges.append(self.edges[-1] + d)
        self.cum.append(self.cum[-1] + d * p)
        return d * p

    def idle(self, s: float) -> None:
        self.clock.advance_s(s)
        self.catch_up()

    def catch_up(self) -> None:
        """Idle from the schedule's end to now (a gap, a sleep), the load's tail decaying."""
        gap = self.clock.now_s() - self.sched.end_s
        if gap <= 0:
            return
        mf, idle = self.mf, self.loop.idle_w
        tail = mf.idle_tail_frac * max(self.last_load_w - idle, 0.0)
        fine = mf.fine_sd_w > 0 or tail > 0
        n = max(1, round(gap / SEG_S)) if fine and gap < 0.5 else 1
        d = gap / n
        for i in range(n):
            w = idle + tail * math.exp(-(i + 0.5) * d / (1e-3 * mf.idle_tail_ms))
            self._put(d, w)
        self.headroom = 1.0 - (1.0 - self.headroom) * math.exp(-gap / (1e-3 * mf.recover_ms))
        self.last_load_w = idle

    def run(self, ph: Shape, record: bool = True) -> None:
        self.catch_up()
        mf = self.mf
        d = 1e-3 * ph.ms * max(0.2, 1.0 + self.rng.normal(0.0, ph.jitter))
        level = 1.0 + mf.level_sd * self.rng.normal() if mf.level_sd else 1.0
        n = max(1, round(d / SEG_S))
        dt = d / n
        e = 0.0
        tau = 1e-3 * ph.tau_ms
        h0 = self.headroom if ph.throttle else 1.0
        for i in range(n):
            t = (i + 0.5) * dt
            if ph.start_w is None:
                w = ph.w
            elif not mf.shapes:  # flat at the shape's mean with full headroom
                w = ph.w + (ph.start_w - ph.w) * tau / d * (1 - math.exp(-d / tau))
            else:
                w = ph.w + (ph.start_w - ph.w) * h0 * math.exp(-t / tau)
            e += self._put(dt, w * level)
        if ph.throttle and mf.shapes:
            self.headroom = h0 * math.exp(-d / tau)
        elif mf.shapes:
            self.headroom = 1.0 - (1.0 - self.headroom) * math.exp(-d / (1e-3 * mf.recover_ms))
        self.last_load_w = self.sched.power_at_w(self.sched.end_s - 0.5 * dt)
        self.clock.advance_s(d)
        if record:
            self.truth.setdefault(ph.name, []).append(e)

    def energy_until(self, t: np.ndarray) -> np.ndarray:
        """Energy from the start to each `t` (idle power beyond the schedule's ends)."""
        edges, cum = np.asarray(self.edges), np.asarray(self.cum)
        e = np.interp(t, edges, cum)
        idle = self.loop.idle_w
        return (
            e
            + np.where(t < edges[0], (t - edges[0]) * idle, 0.0)
            + np.where(t > edges[-1], (t - edges[-1]) * idle, 0.0)
        )


def buffer_samples(drv: Driver, rng, end_s: float, window_s: float, noise_w: float):
    """NVML's power buffer: a sample every ~20 ms, each the power weighed by an exponential
    cut at `window_s` (5 τ; 30 boxes), 5 ms before its stamp, plus noise."""
    import pandas as pd

    from jouleprof.attribution.kernels import exponential
    from jouleprof.attribution.regression_config import BUFFER_LAG_S

    n = int(end_s / BUFFER_PERIOD_S)
    t = 0.2 + np.cumsum(rng.normal(BUFFER_PERIOD_S, 0.3e-3, n))
    t = t[t < end_s - 0.2]
    p = np.zeros(len(t))
    for start, stop, weight in exponential(30):
        a = t - BUFFER_LAG_S - start * window_s
        b = t - BUFFER_LAG_S - stop * window_s
        p += weight * (drv.energy_until(b) - drv.energy_until(a)) / (b - a)
    p += rng.normal(0.0, noise_w, len(t))
    return pd.DataFrame({"t_s": t, "device": "gpu0", "power_w": np.round(p, 3)})


def _sample(drv: Driver, rd, seed: int, window_s: float) -> None:
    """Read the simulated GPU with the real sampler into samples.csv and power_buffer.csv."""
    from ref_loops_sim import sample_gpu

    from jouleprof.sensors.simulated import SensorModel

    model = SensorModel(power_noise_w=drv.mf.instant_noise_w)
    end, rng = sample_gpu(drv, rd, seed, model)
    buf = buffer_samples(drv, rng, end, window_s, drv.mf.buffer_noise_w)
    buf.to_csv(rd.path / "power_buffer.csv", index=False)


def write_fine(loop: Loop, path: Path, fine_s: float, misfit: Misfit, seed: int = 0,
               excite=None, window_s: float = 0.060, repeat=None) -> dict:  # fmt: skip
    """The measured run: `fine_s` seconds of steps recorded by a PhaseRecorder (with `repeat`,
    a REPEATS entry, its phases run through `PhaseRecorder.replay` with a `RepeatConfig` of its
    fraction over the run's first 75 %)."""
    from jouleprof.store.rundir import RunDir
    from jouleprof.timeline.recorder import PhaseRecorder
    from jouleprof.timeline.repeat import RepeatConfig
    from jouleprof.types import RunRecord, RunStatus

    drv = Driver(loop, misfit, seed)
    extra = {"simulated": True, "loop": asdict(loop), "misfit": asdict(misfit),
             "true_buffer_window_s": window_s}  # fmt: skip
    rec = RunRecord(run_id=f"edge-sim-{path.parent.name}", kind="edge_excite_sim", extra=extra)
    rd = RunDir.create(path, rec)
    rep = RepeatConfig(fraction=repeat[1], window_s=0.75 * fine_s, seed=seed) if repeat else None
    recorder = PhaseRecorder(drv.clock, rd.span_writer(), device="cpu", excite=excite,
                             record=rec, repeat=rep)  # fmt: skip
    record_steps(loop, drv, recorder, fine_s, repeat[0] if repeat else ())
    _sample(drv, rd, seed, window_s)
    rec.extra["simulated_truth_j"] = {k: [float(x) for x in v] for k, v in drv.truth.items()}
    rec.status = RunStatus.COMPLETE
    rd.write_record(rec)
    return rec.extra


class _BufferResiduals:
    """Diagnostic only (`--paired`): keeps each point fit's buffer-row residuals (those the
    window is chosen by), keyed by its buffer window, stall model and bins, by wrapping the
    regression's per-model fit (serially, `parallel.PARALLEL` off, so that every fit runs
    here). Changes no result."""

    def __init__(self) -> None:
        self.got: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

    def __enter__(self) -> _BufferResiduals:
        import jouleprof.attribution.parallel as par
        import jouleprof.attribution.regression as reg
        from jouleprof.attribution.regression import RegressionConfig
        from jouleprof.attribution.rows import BUFFER

        self._reg, self._par = reg, par
        self._orig, self._parallel = reg._attribute_model, par.PARALLEL
        par.PARALLEL = False
        orig, got = self._orig, self.got

        def wrapped(found, timeline, device, cfg):
            out = orig(found, timeline, device, cfg)
            if cfg.intervals:  # the choice's point fits only (the final fit's prior differs)
                return out
            f = found.passes[replace(cfg, intervals=True)][0]
            resid = f.pl.target(f.theta) - f.x @ f.power
            m = f.pl.rows.kind == BUFFER
            key = (round(cfg.buffer_window_s, 6), bool(cfg.stall_model), bool(cfg.bins))
            if cfg.bin_s == RegressionConfig.bin_s and key not in got:  # the search's own
                got[key] = (np.round(f.pl.rows.t1_s[m], 4), resid[m])
            return out

        reg._attribute_model = wrapped
        return self

    def __exit__(self, *exc) -> None:
        self._reg._attribute_model = self._orig
        self._par.PARALLEL = self._parallel


def paired_chi2(got: dict, model: tuple[bool, bool], best_s: float, block_s: float) -> dict:
    """Per other window length fitted under `model` (stall, bins): a paired test of its buffer
    rows against the chosen length's, by blocks of `block_s`: d_b = Σ_b (r_other² − r_best²),
    Δχ² = (mean d / its standard error)². The package's Δχ² (`window_support`) instead takes
    each block's share of the total residual as the unit, which does not pair the rows."""
    stall, bins = model
    base = got.get((round(best_s, 6), stall, bins))
    if base is None:
        return {}
    out = {}
    for (w, st, bn), (at1, r1) in sorted(got.items()):
        if (st, bn) != (stall, bins) or w == round(best_s, 6):
            continue
        at, i0, i1 = np.intersect1d(base[0], at1, return_indices=True)  # the same samples
        r0, r1 = base[1][i0], r1[i1]
        blk = np.floor((at - at.min()) / block_s).astype(int)
        d = np.bincount(blk, r1**2 - r0**2)[np.bincount(blk) > 0]
        se = d.std(ddof=1) / np.sqrt(len(d))
        out[f"{1e3 * w:.0f}"] = float(np.sign(d.mean()) * (d.mean() / se) ** 2) if se > 0 else None
    return out


def occurrence_truth(spans, truth: dict[str, list[float]], phase: str, steps=None) -> np.ndarray:
    """The true energy of each run of `phase` (its spans, in order: the driver keeps one truth
    per run), those in `steps` (a sorted list of step numbers: its first to its last) where
    given."""
    occ = spans[spans["phase"] == phase].sort_values("t0_s")
    e = np.asarray(truth.get(phase, []), dtype=float)[: len(occ)]
    if steps is None:
        return e
    step = occ["step"].to_numpy()[: len(e)]
    return e[(step >= steps[0]) & (step <= steps[-1])]


def repeat_cost(spans, truth: dict[str, list[float]]) -> dict:
    """What repeating phases cost the run: the second runs' time over the run's (from the
    spans), their energy over the run's phases' (from the simulated truth, each run of a phase
    in a step taken as costing alike)."""
    d = spans.sort_values("t0_s")
    second = d.groupby(["step", "phase"]).cumcount() > 0
    dur = d["t1_s"] - d["t0_s"]
    total_s = float(d["t1_s"].max() - d["t0_s"].min())
    extra_j = total_j = 0.0
    for phase in truth:  # a step's k runs of a phase taken as costing alike: (k - 1) / k of it
        e = occurrence_truth(d, truth, phase)
        step = d.loc[d["phase"] == phase, "step"].to_numpy()[: len(e)]
        steps, at = np.unique(step, return_inverse=True)
        per_step_j, k = np.bincount(at, e, len(steps)), np.bincount(at, minlength=len(steps))
        total_j += float(per_step_j.sum())
        extra_j += float(np.sum(per_step_j * (k - 1) / k))
    return {
        "run_time_overhead_pct": 100 * float(dur[second].sum()) / total_s if total_s else None,
        "run_energy_overhead_pct": 100 * extra_j / total_j if total_j else None,
    }


def evaluate(fine: Path, paired: bool = False, opts: dict | None = None) -> dict:
    """The default regression on the run (or with `opts`: RegressionConfig fields passed to
    `attribute`), against its truth: per phase the error and the 95 % half-width; the buffer
    window chosen, each neighbour's Δχ²; the excitation's cost."""
    from ref_loops_eval import window_chi2

    from jouleprof.attribution.api import attribute
    from jouleprof.attribution.excitation import overhead
    from jouleprof.attribution.regression_choice import WINDOW_CLEAR_CHI2
    from jouleprof.store.rundir import RunDir

    rd = RunDir(fine)
    rec = rd.read_record()
    opts = opts or {}
    t0 = time.perf_counter()
    if paired:
        with _BufferResiduals() as cap:
            res = attribute(fine, "regression", device="gpu0", **opts).devices[0]
    else:
        res = attribute(fine, "regression", device="gpu0", **opts).devices[0]
    wall = time.perf_counter() - t0
    spans = rd.read_spans()
    steps = sorted(int(x) for x in spans["step"].unique())
    used = steps[res.warmup_steps : res.warmup_steps + res.n_steps]
    truth_all = rec.extra["simulated_truth_j"]
    phases = []
    for p in res.phases:
        if p.phase in ("idle", "untracked", "excite_gap") or p.phase.startswith("<"):
            continue
        parts = p.phase.split("+")
        if not all(q in truth_all for q in parts):
            continue
        # The truth over the analysed steps: each run of a phase has its truth, in span order.
        t = sum(float(np.sum(occurrence_truth(spans, truth_all, q, used))) for q in parts)
        row = {"phase": p.phase, "truth_j": t, "resolved": bool(p.resolved)}
        if p.resolved:
            row.update(
                estimate_j=p.energy_j,
                error_pct=100 * (p.energy_j - t) / t,
                hw_pct=50 * (p.energy_hi_j - p.energy_lo_j) / p.energy_j,
                inside=bool(p.energy_lo_j <= t <= p.energy_hi_j),
            )
        elif p.estimate_j is not None:
            row["estimate_error_pct"] = 100 * (p.estimate_j - t) / t
        phases.append(row)
    d = res.diagnostics
    choice = d.get("buffer_window_choice") or {}
    rms = {float(k): v for k, v in (choice.get("residual_rms_w") or {}).items()}
    best = choice.get("window_s")
    n_blocks = max(1.0, res.n_steps * res.step_time_s / (d.get("block_s") or 1.5))
    chi2 = window_chi2(res)
    ex = overhead(spans, res) if "excite" in rec.extra else {}
    if "repeat" in rec.extra:
        ex = repeat_cost(spans, truth_all)
    pchi2 = {}
    if paired and best is not None:
        model = (bool(d.get("stall")), bool(d.get("bins")))
        pchi2 = paired_chi2(cap.got, model, best, d.get("block_s") or 1.5)
    return {
        "n_steps": res.n_steps,
        "step_ms": 1e3 * res.step_time_s,
        "true_window_ms": 1e3 * rec.extra["true_buffer_window_s"],
        "chosen_window_ms": 1e3 * best if best else None,
        "buffer_rms_w": {f"{1e3 * k:.0f}": v for k, v in sorted(rms.items())},
        "delta_chi2": chi2,
        "paired_chi2": pchi2,
        "identified": bool(chi2) and all(c > WINDOW_CLEAR_CHI2 for c in chi2.values()),
        "n_blocks": n_blocks,
        "block_s": d.get("block_s"),
        "residual_rms_w": d.get("residual_rms_w"),
        "bins": bool(d.get("bins")),
        "buffer_rule": d.get("buffer_rows_left_out"),
        "bins_used": {k: len(v) for k, v in ((d.get("bins") or {}).get("members") or {}).items()},
        "bin_s": (d.get("bins") or {}).get("bin_s"),
        "regression_opts": opts,
        "phases": phases,
        "excite": ex,
        "notes": res.notes,
        "attribute_wall_s": wall,
    }


def _fmt_phases(ev: dict) -> str:
    out = []
    for r in ev["phases"]:
        if r["resolved"]:
            ok = "in" if r["inside"] else "OUT"
            out.append(f"{r['phase']} {r['error_pct']:+.2f}%±{r['hw_pct']:.1f} {ok}")
        else:
            out.append(f"{r['phase']} unres")
    return "; ".join(out)


def table(results: list[dict]) -> str:
    """The results as a markdown table, one row per run."""
    head = (
        "| loop | misfit | setting | seed | window chosen (true), ms | Δχ² of the neighbours "
        "| buffer RMS | phases: error vs truth, ±95 % half-width | cost: time, energy |"
    )
    out = [head, "|" + " --- |" * 9]
    for ev in results:
        chi2 = ", ".join(f"{k}: {v:.1f}" for k, v in ev["delta_chi2"].items())
        ph = []
        for r in ev["phases"]:
            if r["resolved"]:
                out_ = "" if r["inside"] else " **out**"
                ph.append(f"{r['phase']} {r['error_pct']:+.1f} % ±{r['hw_pct']:.1f}{out_}")
            else:
                ph.append(f"{r['phase']} unresolved")
        ex = ev.get("excite") or {}
        cost = (
            f"+{ex['run_time_overhead_pct']:.1f} %, +{ex['run_energy_overhead_pct']:.2f} %"
            if ex.get("run_time_overhead_pct") is not None
            else ""
        )
        if ev["chosen_window_ms"] is None:
            win, rms = "no buffer rows", "—"
        else:
            win = f"{ev['chosen_window_ms']:.0f} ({ev['true_window_ms']:.0f})"
            rms = f"{min(ev['buffer_rms_w'].values()):.1f} W"
        setting = ev["setting"] + "".join(
            f", {k}={v}" for k, v in sorted((ev.get("regression_opts") or {}).items())
        )
        seed = f"{ev['seed']}" + (f", {ev['fine_s']:g} s" if ev["fine_s"] != 60 else "")
        out.append(f"| {ev['loop']} | {ev['misfit']} | {setting} | {seed} | {win} | "
                   f"{chi2} | {rms} | {'; '.join(ph)} | {cost} |")  # fmt: skip
    return "\n".join(out) + "\n"


def run_one(out: Path, loop: str, setting: str, misfit: str, seed: int, fine_s: float,
            window_ms: float, paired: bool = False, opts: dict | None = None) -> dict:  # fmt: skip
    """One simulated run (written once under out/loops/<tag>/fine) and its evaluation (with
    `opts`: RegressionConfig fields; the run is the same, its tag gets their suffix)."""
    make = SETTINGS.get(setting)
    excite = replace(make(fine_s), seed=seed) if make else None
    repeat = REPEATS.get(setting)
    tag = f"{loop}@{setting}@{misfit}@w{window_ms:g}@{fine_s:g}s@s{seed}"
    fine = out / "loops" / tag / "fine"
    t0 = time.perf_counter()
    if not (fine / "run.json").is_file():
        write_fine(LOOPS[loop], fine, fine_s, MISFITS[misfit], seed, excite, 1e-3 * window_ms,
                   repeat)  # fmt: skip
    ev = evaluate(fine, paired, opts)
    if opts:
        tag += "@" + ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                              for k, v in sorted(opts.items())).replace(" ", "")  # fmt: skip
    ev.update(tag=tag, loop=loop, setting=setting, misfit=misfit, seed=seed, fine_s=fine_s,
              excite_config=asdict(excite) if excite else None,
              wall_s=time.perf_counter() - t0)  # fmt: skip
    return ev


def _line(ev: dict) -> str:
    chi2 = ", ".join(f"{k} ms {v:.1f}" for k, v in ev["delta_chi2"].items())
    if ev["paired_chi2"]:
        chi2 += "; paired " + ", ".join(
            f"{k}:{v:.0f}" for k, v in ev["paired_chi2"].items() if v is not None
        )
    ex = ev["excite"]
    cost = (
        f"; cost time {ex['run_time_overhead_pct']:+.2f}% energy "
        f"{ex['run_energy_overhead_pct']:+.2f}%"
        if ex.get("run_time_overhead_pct") is not None
        else ""
    )
    if ev["chosen_window_ms"] is None:  # no buffer rows
        where = "no buffer rows"
    else:
        where = (
            f"window {ev['chosen_window_ms']:.0f} ms (true {ev['true_window_ms']:.0f}); "
            f"Δχ² {chi2}; buffer RMS {min(ev['buffer_rms_w'].values()):.1f} W"
        )
    return (
        f"{ev['tag']}: {where}; bins {ev['bins']}; {_fmt_phases(ev)}{cost} [{ev['wall_s']:.0f} s]"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--fine-s", type=float, default=60.0)
    ap.add_argument("--loops", default="user4h", help=f"some of {', '.join(LOOPS)}")
    ap.add_argument("--settings", default="plain,short,edges5,edges10",
                    help=f"some of {', '.join([*SETTINGS, *REPEATS])}")  # fmt: skip
    ap.add_argument("--misfit", default="h200", help=f"some of {', '.join(MISFITS)}")
    ap.add_argument("--window-ms", type=float, default=60.0, help="the buffer's true window")
    ap.add_argument("--seeds", default="0")
    paired = "also a paired per-block test of the window lengths (a diagnostic)"
    ap.add_argument("--paired", action="store_true", help=paired)
    ap.add_argument("--table", action="store_true", help="only print OUT/results.jsonl's table")
    ap.add_argument("--bins", choices=("auto", "on", "off"), default="auto",
                    help="RegressionConfig.bins: auto (None, the default: tried, kept where "
                    "clearly better), on (True), off (False)")  # fmt: skip
    ap.add_argument("--bin-ms", type=float, default=None,
                    help="RegressionConfig.bin_s in ms (default: the package's)")  # fmt: skip
    ap.add_argument("--stall", choices=("auto", "on", "off"), default="auto",
                    help="RegressionConfig.stall_model: auto (None, default), on, off")  # fmt: skip
    ap.add_argument("--reg", action="append", default=[], metavar="FIELD=JSON",
                    help="any other RegressionConfig field, its value as JSON (a list: a "
                    "tuple), e.g. buffer_window_scales=[1.0]; repeatable")  # fmt: skip
    args = ap.parse_args(argv)
    tri = {"on": True, "off": False}
    opts: dict = {}
    if args.bins in tri:
        opts["bins"] = tri[args.bins]
    if args.bin_ms is not None:
        opts["bin_s"] = 1e-3 * args.bin_ms
    if args.stall in tri:
        opts["stall_model"] = tri[args.stall]
    for kv in args.reg:
        k, v = kv.split("=", 1)
        v = json.loads(v)
        opts[k] = tuple(v) if isinstance(v, list) else v
    if args.table:
        lines = (args.out / "results.jsonl").read_text().splitlines()
        print(table([json.loads(x) for x in lines if x.strip()]), end="")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for seed in (int(x) for x in args.seeds.split(",")):
        for misfit in args.misfit.split(","):
            for loop in args.loops.split(","):
                for setting in args.settings.split(","):
                    ev = run_one(args.out, loop, setting, misfit, seed, args.fine_s,
                                 args.window_ms, args.paired, opts)  # fmt: skip
                    print(_line(ev), flush=True)
                    with (args.out / "results.jsonl").open("a") as f:
                        f.write(json.dumps(ev, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
