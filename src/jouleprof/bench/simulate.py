"""A simulated GPU for runs on a machine without one, driven by the run's own phase spans.

On a CPU-only machine a fine-mode run records every phase's time but no energy: there is no
sensor to read. So that a first run still shows what attribution does, `simulate_run` replays
the recorded phase spans on the package's simulated GPU (`sensors.simulated`): each phase
draws a fixed, assumed power (`PhasePowers`, loosely the isolated phase powers of a large
video transformer on an H200), idle power between them, seen through the realistic sensor
model (100 ms refresh, a short instant window, a 1 s running average, a mJ counter) and sampled
in virtual time as the real sampler would. The samples go to samples.csv under device "sim0";
the attribution methods then run on them, and because the simulated truth is known, every
phase's true (simulated) energy is written beside the estimate.

Nothing here is a measurement of this machine or of any GPU: run.json's
``extra["simulated_gpu"]`` says so (``source: simulated``), every figure made from these
samples has source ``simulated``, and the phase tables carry a ``source`` column.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from jouleprof.errors import JouleprofError
from jouleprof.store.rundir import RunDir
from jouleprof.timeline.excite import GAP_PHASE

log = logging.getLogger(__name__)

SIM_DEVICE = "sim0"
SIMULATED_NOTE = (
    "SIMULATED: no NVIDIA GPU was measured; the energies come from the package's simulated GPU "
    "driven by this run's recorded phase times at assumed per-phase powers. They show how "
    "attribution works; they are not a measurement of this machine or of any GPU."
)


@dataclass(frozen=True)
class PhasePowers:
    """The assumed power of each phase on the simulated GPU.

    A phase takes the power of the first keyword its name contains (case-insensitive), else
    `other_w`; an excitation gap (`excite_gap`) the idle power. The defaults are round figures
    near what phases of a large video transformer drew when replayed alone on an H200:
    assumptions for the simulation, not measurements.
    """

    by_keyword_w: tuple[tuple[str, float], ...] = (
        ("data", 110.0),
        ("target", 420.0),
        ("context", 500.0),
        ("forward", 480.0),
        ("backward", 600.0),
        ("optim", 430.0),
        ("ema", 495.0),
    )
    """(keyword, watts) pairs, tried in order."""
    other_w: float = 350.0
    """Power of a phase whose name contains no keyword."""
    idle_w: float = 80.0
    """Power outside every phase (between steps, before and after them)."""

    def __post_init__(self) -> None:
        for k, w in self.by_keyword_w:
            if not k or w < 0:
                raise ValueError(f"by_keyword_w needs non-empty keywords and watts ≥ 0: {k!r}={w}")
        if self.other_w < 0 or self.idle_w < 0:
            raise ValueError("other_w and idle_w must be ≥ 0 watts")

    def power_w(self, phase: str) -> float:
        if phase.rsplit("/", 1)[-1] == GAP_PHASE:  # a `sync` excitation gap idles the device
            return self.idle_w
        name = phase.lower()
        for keyword, watts in self.by_keyword_w:
            if keyword in name:
                return watts
        return self.other_w


@dataclass
class SimulatedSamples:
    """What `simulate_samples` returns: the sensor's samples and the truth behind them."""

    samples: list[Any]
    true_energy_j: dict[str, float]
    """Each leaf phase's energy over all recorded steps (the simulation's exact figure)."""
    true_step_j: dict[tuple[int, str], float]
    """The same per (step, leaf phase)."""
    phase_power_w: dict[str, float]
    extra: dict[str, Any] = field(default_factory=dict)


def exclusive_pieces(spans) -> list[tuple[int, str, float, float]]:
    """(step, phase, t0_s, t1_s) pieces of time, each labelled as attribution's partition labels
    it (`attribution.common.build_timeline`, the first step included): the innermost phase
    open then, a parent ("forward") keeping the time its nested phases leave uncovered, the
    microseconds between one phase's recorded end and the next one's start closed at their
    midpoint as recording noise. So the simulated GPU draws each phase's power over exactly
    the time attribution labels with it, and its truth is comparable with the estimate.
    Untracked time inside a step and time between steps are no piece (idle). Sorted by start.
    """
    import numpy as np

    from jouleprof.attribution.common import IDLE, OUTSIDE, UNTRACKED, WARMUP, build_timeline

    if spans is None or not len(spans):
        return []
    t0 = float(spans["t0_s"].min())
    t1 = float(spans["t1_s"].max())
    tl = build_timeline(spans, t0, t1, warmup_steps=0)
    steps = sorted(tl.step_extents_s, key=lambda s: tl.step_extents_s[s][0])
    starts = np.array([tl.step_extents_s[s][0] for s in steps])
    not_phases = {IDLE, OUTSIDE, UNTRACKED, WARMUP}
    out: list[tuple[int, str, float, float]] = []
    for a, b, label in zip(tl.edges_s[:-1], tl.edges_s[1:], tl.labels, strict=True):
        name = tl.names[label]
        if name in not_phases or not b > a:
            continue
        k = int(np.searchsorted(starts, 0.5 * (a + b), side="right")) - 1
        out.append((int(steps[max(k, 0)]), name, float(a), float(b)))
    return out


def simulate_samples(
    spans, powers: PhasePowers | None = None, *, margin_s: float = 1.0, seed: int = 0
) -> SimulatedSamples:
    """Sample a simulated GPU that runs `spans` (a spans.csv frame) at `powers`.

    The schedule is idle power from 0, then each exclusive piece of a phase at that phase's
    power (overlaps are cut at the previous piece's end). The sampler polls every 20 ms,
    reading the counter at every refresh, from `margin_s` before the first span to `margin_s`
    after the last.
    """
    import numpy as np

    from jouleprof.clock import ManualClock
    from jouleprof.sensors.sampler import ListSink, Sampler, SamplerConfig
    from jouleprof.sensors.simulated import PowerSchedule, SimulatedGPU

    powers = powers or PhasePowers()
    pieces = exclusive_pieces(spans)
    if not pieces:
        raise JouleprofError("no phase spans to drive the simulated GPU with")
    schedule = PowerSchedule(idle_w=powers.idle_w)
    truth: dict[str, float] = {}
    per_step: dict[tuple[int, str], float] = {}
    for step, phase, t0, t1 in pieces:
        t0 = max(t0, schedule.end_s)
        if t1 <= t0:
            continue
        schedule.append(t0 - schedule.end_s, powers.idle_w)
        w = powers.power_w(phase)
        schedule.append(t1 - t0, w)
        truth[phase] = truth.get(phase, 0.0) + w * (t1 - t0)
        per_step[(step, phase)] = per_step.get((step, phase), 0.0) + w * (t1 - t0)
    start_s = max(pieces[0][2] - margin_s, 0.0)
    end_s = schedule.end_s + margin_s
    clock = ManualClock(start_s)
    gpu = SimulatedGPU(schedule, clock, seed=seed, device=SIM_DEVICE)
    sink = ListSink()
    cfg = SamplerConfig(interval_s=0.02, counter_interval_s=0.1, counter_dense_s=0.0)
    sampler = Sampler([gpu], sink, cfg, clock=clock)
    sampler.mark_start()
    rng = np.random.default_rng(seed)
    t, first = start_s, True
    while t < end_s:
        clock.advance_s(max(t - clock.now_s(), 0.0))
        last = t + cfg.interval_s * (1 + cfg.dither) >= end_s
        sampler.poll_once(force_counter=first or last)
        first = False
        t += cfg.interval_s * float(rng.uniform(1 - cfg.dither, 1 + cfg.dither))
        t += float(rng.uniform(0.0, 0.003))  # a real thread wakes a little late
    sampler.flush()
    used = {p: powers.power_w(p) for p in sorted(truth)}
    return SimulatedSamples(sink.samples, truth, per_step, used, {"t_range_s": [start_s, end_s]})


def gpu_was_measured(rd: RunDir) -> bool:
    """Whether samples.csv holds any real GPU reading."""
    if not rd.has("samples.csv"):
        return False
    s = rd.read_samples()
    return bool((s["device"].astype(str).str.startswith("gpu")).any())


def simulate_run(
    run_dir: str | os.PathLike[str],
    reason: str,
    powers: PhasePowers | None = None,
    methods: tuple[str, ...] = ("proportional", "regression"),
    warmup_steps: int | None = 0,
) -> dict[str, Any]:
    """Drive the simulated GPU with the run's spans, then attribute it by each method.

    Appends the simulated samples to samples.csv (device "sim0"), writes phases_<method>.csv
    for each method that succeeds and phases.csv (the regression's, else the first that
    succeeded), each with `source` = simulated and the simulated truth per phase, and records
    everything in run.json (``extra["simulated_gpu"]``, ``extra["attribution"]``, notes and
    summary figures with source simulated). Returns ``extra["simulated_gpu"]``.

    Args:
        run_dir: a run directory with spans.csv and no real GPU samples.
        reason: why no real GPU was measured (said once, in run.json).
        powers: the assumed phase powers.
        methods: attribution methods to run on the simulated samples.
        warmup_steps: steps to exclude (0: the recorded spans are already past warm-up).

    Raises:
        JouleprofError: no spans, or the run already holds simulated samples.
    """
    from jouleprof.attribution.api import attribute
    from jouleprof.attribution.excitation import record_costs
    from jouleprof.types import Figure, Source

    rd = RunDir(run_dir)
    powers = powers or PhasePowers()
    spans = rd.read_spans()
    samples = rd.read_samples() if rd.has("samples.csv") else None
    if samples is not None and (samples["device"].astype(str) == SIM_DEVICE).any():
        raise JouleprofError(f"{rd.path} already holds simulated samples ({SIM_DEVICE})")
    sim = simulate_samples(spans, powers)
    w = rd.sample_writer()
    try:
        w.write(sim.samples)
    finally:
        w.close()
    status: dict[str, Any] = {}
    frames: dict[str, Any] = {}
    for method in methods:
        try:
            res = attribute(
                rd.path, method, device=SIM_DEVICE, warmup_steps=warmup_steps, **_options(method)
            )
        except JouleprofError as e:
            status[method] = {"ok": False, "reason": str(e), "source": "simulated"}
            continue
        df = res.to_frame()
        df["source"] = "simulated"
        df["true_energy_j"] = [_truth(sim.true_step_j, p, res) for p in df["phase"]]
        frames[method] = df
        rd.write_phases(df, f"phases_{method}.csv")
        status[method] = {"ok": True, "source": "simulated", "device": SIM_DEVICE}
        record_costs(status[method], res)  # what the opt-in excitation or repetition cost
    main = "regression" if "regression" in frames else next(iter(frames), None)
    if main is not None:
        rd.write_phases(frames[main])
    steps = spans["step"].nunique()
    info = {
        "source": "simulated",
        "device": SIM_DEVICE,
        "why": reason,
        "note": SIMULATED_NOTE,
        "phase_power_w": sim.phase_power_w,
        "idle_w": powers.idle_w,
        "true_energy_j": sim.true_energy_j,
        "steps": int(steps),
        "phases_csv_method": main,
        "sensor_model": "sensors.simulated.SensorModel defaults (100 ms refresh, 25 ms instant "
        "window, 1 s running average, mJ counter)",
    }
    rec = rd.read_record()
    rec.extra["simulated_gpu"] = info
    rec.extra["attribution"] = status
    if SIMULATED_NOTE not in rec.notes:
        rec.notes.append(SIMULATED_NOTE)
    total = sum(sim.true_energy_j.values())
    rec.summary["simulated_gpu_phase_energy_j"] = Figure(
        total, "J", Source.SIMULATED, reason="simulated GPU over the recorded phases", signal="sim"
    )
    rd.write_record(rec)
    return info


def _options(method: str) -> dict[str, Any]:
    """Attribution options for a simulated run. Its phases draw flat power, so the regression
    needs no bins, and on a CPU's long phases bins would be many (a 3 s backward is 240 bins
    of 12.5 ms a step), costing minutes and gigabytes for nothing."""
    return {"bins": False} if method == "regression" else {}


def true_energies(spans, phase_power_w: dict[str, float], result) -> dict[str, float | None]:
    """The simulated truth of every row of `result` (an AttributionResult of a simulated run),
    from the spans and the power each phase drew (run.json extra.simulated_gpu.phase_power_w)."""
    per_step: dict[tuple[int, str], float] = {}
    for step, phase, t0, t1 in exclusive_pieces(spans):
        if phase in phase_power_w:
            e = float(phase_power_w[phase]) * (t1 - t0)
            per_step[(step, phase)] = per_step.get((step, phase), 0.0) + e
    rows = {p.phase for d in result.devices for p in d.phases}
    return {p: _truth(per_step, p, result) for p in rows}


def _truth(true_step_j: dict[tuple[int, str], float], phase: str, res) -> float | None:
    """The simulated truth of one row of a phases table over the steps attributed (the first
    `warmup_steps` excluded): an exclusive label's own energy, a joint row ("a+b") the sum of
    its parts; None for rows with no phase behind them (idle, untracked)."""
    if not res.devices:
        return None
    dev = res.devices[0]
    steps = sorted({s for s, _ in true_step_j})
    used = set(steps[dev.warmup_steps : dev.warmup_steps + dev.n_steps])
    total, found = 0.0, False
    for part in phase.split("+"):
        for (step, name), e in true_step_j.items():
            if name == part:
                found = True
                if step in used:
                    total += e
    return total if found else None
