"""A simulated training run on the simulated GPU, sampled in virtual time, with its true answer.

Each step runs the given phases in order, each at its own constant power, with durations that
vary a little from step to step; the sampler reads the simulated sensor at its interval, picked
up a few milliseconds late, exactly as on real hardware. The result holds what a real run
directory would (samples and spans) plus the truth that attribution should recover.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from jouleprof.clock import ManualClock
from jouleprof.sensors.sampler import ListSink, Sampler, SamplerConfig
from jouleprof.sensors.simulated import PowerSchedule, SensorModel, SimulatedGPU
from jouleprof.types import Sample, Span


@dataclass(frozen=True)
class PhaseSpec:
    """One phase of the simulated step."""

    name: str
    duration_s: float
    power_w: float
    duration_jitter: float = 0.05
    """Relative standard deviation of the phase's duration from step to step."""
    stall_s: float = 0.0
    """A host-paced phase: each occurrence also waits U(0, stall_s) seconds for the host, inside
    its span and after its work, drawing `stall_w` (the GPU's work per step stays the same; its
    span and energy grow with the wait, far less than at the work's power)."""
    stall_w: float = 120.0

    def __post_init__(self) -> None:
        if self.duration_s <= 0 or self.power_w < 0 or not 0 <= self.duration_jitter < 0.5:
            raise ValueError(f"bad PhaseSpec {self}: need duration_s > 0, power_w ≥ 0, jitter<0.5")
        if self.stall_s < 0 or self.stall_w < 0:
            raise ValueError(f"bad PhaseSpec {self}: need stall_s ≥ 0 and stall_w ≥ 0")


_STALL_PIECES = 4


@dataclass
class SimulatedRun:
    samples: list[Sample]
    spans: list[Span]
    """The spans as recorded (with `span_noise_s` on their edges)."""
    true_spans: list[Span]
    """The spans as they really were."""
    schedule: PowerSchedule
    true_energy_j: dict[str, float]
    """Energy of each phase summed over all steps (and "idle" for time no phase covers)."""
    true_time_s: dict[str, float]
    steps: int
    sensor: SimulatedGPU
    extra: dict[str, float] = field(default_factory=dict)

    def samples_frame(self):
        import pandas as pd

        from jouleprof.types import SAMPLE_COLUMNS

        return pd.DataFrame([s.row() for s in self.samples], columns=list(SAMPLE_COLUMNS))

    def spans_frame(self):
        import pandas as pd

        from jouleprof.types import SPAN_COLUMNS

        return pd.DataFrame([s.row() for s in self.spans], columns=list(SPAN_COLUMNS))

    def true_energy_in_steps_j(self, steps: set[int]) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for sp in self.true_spans:
            if sp.step in steps:
                out[sp.phase] += self.schedule.energy_j(sp.t0_s, sp.t1_s)
        return dict(out)


def simulate_training(
    phases: Sequence[PhaseSpec],
    steps: int,
    *,
    gap_s: float = 0.0,
    idle_w: float = 90.0,
    lead_s: float = 1.0,
    model: SensorModel | None = None,
    interval_s: float = 0.02,
    pickup_delay_s: float = 0.003,
    span_noise_s: float = 0.0,
    seed: int = 0,
    sampler_config: SamplerConfig | None = None,
) -> SimulatedRun:
    """Simulate `steps` training steps and sample them.

    Args:
        phases: the phases of one step, in order.
        steps: how many steps.
        gap_s: idle time between steps, covered by no phase.
        idle_w: power before, between (gap) and after the steps.
        lead_s: idle time before the first step and after the last.
        model: the sensor model (defaults: 100 ms refresh with jitter, 25 ms instant window).
        interval_s: the sampler's interval.
        pickup_delay_s: each poll starts up to this much late (uniform), like a real thread;
            the waits are dithered as the real sampler's are.
        span_noise_s: standard deviation of the error on each recorded span edge (the mapping of
            device timestamps onto the host clock is not perfect).
        seed: seeds durations, the sensor's jitter and the sampler's delays.
        sampler_config: the sampler's settings (default: `interval_s`, counter every refresh).
    """
    if steps < 1:
        raise ValueError(f"steps must be ≥ 1, got {steps}")
    rng = np.random.default_rng(seed)
    schedule = PowerSchedule(idle_w=idle_w)
    schedule.append(lead_s, idle_w)
    spans: list[Span] = []
    true_spans: list[Span] = []
    true_e: dict[str, float] = defaultdict(float)
    true_t: dict[str, float] = defaultdict(float)
    for step in range(steps):
        for ph in phases:
            d = ph.duration_s * max(0.2, 1.0 + rng.normal(0.0, ph.duration_jitter))
            t0 = schedule.end_s
            e = d * ph.power_w
            if ph.stall_s > 0:
                # The host's waits fall between the phase's kernels: the wait comes in
                # _STALL_PIECES pieces spread through the work, not as one block at its end.
                wait = float(rng.uniform(0.0, ph.stall_s))
                for _ in range(_STALL_PIECES):
                    schedule.append(d / _STALL_PIECES, ph.power_w)
                    schedule.append(wait / _STALL_PIECES, ph.stall_w)
                d, e = d + wait, e + wait * ph.stall_w
            else:
                schedule.append(d, ph.power_w)
            t1 = schedule.end_s
            n0, n1 = rng.normal(0.0, span_noise_s, 2) if span_noise_s > 0 else (0.0, 0.0)
            spans.append(Span(step, ph.name, float(t0 + n0), float(max(t1 + n1, t0 + n0))))
            true_spans.append(Span(step, ph.name, t0, t1))
            true_e[ph.name] += e
            true_t[ph.name] += d
        if gap_s > 0:
            schedule.append(gap_s, idle_w)
            true_e["idle"] += gap_s * idle_w
            true_t["idle"] += gap_s
    schedule.append(lead_s, idle_w)

    clock = ManualClock()
    gpu = SimulatedGPU(schedule, clock, model, seed=seed + 1)
    sink = ListSink()
    scfg = sampler_config or SamplerConfig(interval_s=interval_s)
    interval_s = scfg.interval_s
    sampler = Sampler([gpu], sink, scfg, clock=clock)
    sampler.mark_start()
    end = schedule.end_s
    dither = sampler.config.dither
    t, first = 0.0, True
    while t < end:
        clock.advance_s(max(t - clock.now_s(), 0.0))
        last = t + interval_s * (1 + dither) >= end
        sampler.poll_once(force_counter=first or last)
        first = False
        t += interval_s * float(rng.uniform(1 - dither, 1 + dither))
        t += float(rng.uniform(0.0, pickup_delay_s))  # the thread wakes a little late
    sampler.flush()
    return SimulatedRun(
        sink.samples, spans, true_spans, schedule, dict(true_e), dict(true_t), steps, gpu
    )
