"""A simulated GPU: a known power schedule seen through a realistic sensor model.

The true power is piecewise constant (`PowerSchedule`). The sensor model reproduces how NVML
behaves on recent NVIDIA GPUs (shared/FACTS.md):

- every signal updates only at refresh instants, about every 100 ms, and those instants jitter;
- the "instant" power field averages only a short window (about 25 ms) before each refresh;
- the default power reading is a 1 s running average;
- the cumulative energy counter integrates all of the power, in whole millijoules.

Tests and the attribution benchmarks use it because its truth is known exactly; it is part of
the package so users can check attribution methods on their own schedules.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np

from jouleprof.clock import Clock
from jouleprof.sensors.base import SIGNALS, SignalInfo
from jouleprof.types import Reading

SIMULATED_DEVICE_PREFIX = "sim"
"""Simulated GPUs are named "sim0" (one per rank under torchrun: "sim*") in samples.csv."""


def is_simulated_device(name: str) -> bool:
    """Whether a samples.csv device is a simulated GPU (its figures are labelled SIMULATED)."""
    return str(name).startswith(SIMULATED_DEVICE_PREFIX)


class PowerSchedule:
    """True power as a piecewise-constant function of time, extended as a workload runs.

    Before the first segment and after the last one the device draws `idle_w`.
    """

    def __init__(self, idle_w: float = 90.0, start_s: float = 0.0) -> None:
        if idle_w < 0:
            raise ValueError(f"idle_w must be ≥ 0, got {idle_w}")
        self.idle_w = idle_w
        self._edges_s: list[float] = [start_s]
        self._power_w: list[float] = []
        self._cum_j: list[float] = [0.0]  # energy from start_s to each edge

    @property
    def start_s(self) -> float:
        return self._edges_s[0]

    @property
    def end_s(self) -> float:
        return self._edges_s[-1]

    def append(self, duration_s: float, power_w: float) -> None:
        """Draw `power_w` for `duration_s` after the current end of the schedule."""
        if duration_s < 0 or power_w < 0:
            raise ValueError(f"duration_s and power_w must be ≥ 0, got {duration_s}, {power_w}")
        if duration_s == 0:
            return
        self._cum_j.append(self._cum_j[-1] + duration_s * power_w)
        self._edges_s.append(self._edges_s[-1] + duration_s)
        self._power_w.append(power_w)

    def power_at_w(self, t_s: float) -> float:
        i = bisect.bisect_right(self._edges_s, t_s) - 1
        if i < 0 or i >= len(self._power_w):
            return self.idle_w
        return self._power_w[i]

    def energy_until_j(self, t_s: float) -> float:
        """Energy drawn from the schedule's start to `t_s` (idle power outside the segments)."""
        start, end = self._edges_s[0], self._edges_s[-1]
        if t_s <= start:
            return -(start - t_s) * self.idle_w
        if t_s >= end:
            return self._cum_j[-1] + (t_s - end) * self.idle_w
        i = bisect.bisect_right(self._edges_s, t_s) - 1
        return self._cum_j[i] + (t_s - self._edges_s[i]) * self._power_w[i]

    def in_flight_j(self, t_s: float, tau_s: float) -> float:
        """∫₀^∞ exp(−s/τ) p(t − s) ds: the energy drawn before `t_s` that a response
        trailing by an exponential of time constant `tau_s` has not yet booked (exact for the
        piecewise-constant schedule, idle power before its start)."""
        if tau_s <= 0:
            return 0.0
        edges, power = self._edges_s, self._power_w
        i = bisect.bisect_right(edges, t_s) - 1  # the segment holding t_s (-1: before start)
        total, hi = 0.0, t_s  # hi: the later end of the piece being added
        if i >= len(power):  # after the schedule: idle from its end
            total += self.idle_w * tau_s * (1.0 - math.exp(-(t_s - edges[-1]) / tau_s))
            hi, i = edges[-1], len(power) - 1
        while i >= 0 and (t_s - hi) < 40.0 * tau_s:
            lo = edges[i]
            decay = math.exp(-(t_s - hi) / tau_s) - math.exp(-(t_s - lo) / tau_s)
            total += power[i] * tau_s * decay
            hi, i = lo, i - 1
        if i < 0:  # before the schedule: idle
            total += self.idle_w * tau_s * math.exp(-(t_s - min(hi, edges[0])) / tau_s)
        return total

    def energy_j(self, t0_s: float, t1_s: float) -> float:
        """Exact energy of the window [t0_s, t1_s]."""
        return self.energy_until_j(t1_s) - self.energy_until_j(t0_s)

    def mean_power_w(self, t0_s: float, t1_s: float) -> float:
        if t1_s <= t0_s:
            return self.power_at_w(t0_s)
        return self.energy_j(t0_s, t1_s) / (t1_s - t0_s)


@dataclass(frozen=True)
class SensorModel:
    """How the simulated sensor sees the true power."""

    refresh_s: float = 0.1
    """Nominal period between updates of every signal."""
    refresh_jitter_s: float = 0.002
    """Standard deviation of each refresh instant around its nominal grid point."""
    instant_window_s: float = 0.025
    """The instant power field averages this much time before each refresh."""
    average_window_s: float = 1.0
    """The default power reading is a running average over this window."""
    counter_resolution_j: float = 0.001
    """The energy counter counts whole millijoules."""
    counter_origin_j: float = 1.0e6
    """The counter's value at the schedule's start (real counters count from driver load)."""
    power_noise_w: float = 0.5
    """Standard deviation of the noise on each refresh's power readings (the counter has none)."""
    phase_offset_s: float | None = None
    """Offset of the counter's refresh grid; None draws it at random in [0, refresh_s)."""
    power_phase_offset_s: float | None = None
    """Offset of the power fields' grid; None draws it at random."""
    power_refresh_s: float = 0.1014
    """Period of the power fields' own refreshes. On an H200 they tick on a cadence of their own
    (~101–103 ms), not with the counter (benchmarks/results/measure_core)."""
    power_refresh_jitter_s: float = 0.003
    """Standard deviation of each power-field refresh instant around its grid point."""
    counter_tail_s: float = 0.0
    """The energy counter books a share `counter_tail_fraction` of the energy drawn late, by
    an exponential of this time constant (0: at once, as the default). The power fields do
    not see it: it is the counter's own response (attribution's `counter_tail_s` models it)."""
    counter_tail_fraction: float = 1.0
    """The share of the energy that trails by counter_tail_s."""
    counter_lag_s: float = 0.0
    """The counter books the energy drawn this long before its refresh (a pure delay)."""

    def __post_init__(self) -> None:
        if self.refresh_s <= 0:
            raise ValueError(f"refresh_s must be > 0, got {self.refresh_s}")
        if not 0 <= self.refresh_jitter_s < self.refresh_s / 4:
            raise ValueError(
                f"refresh_jitter_s must be in [0, refresh_s/4), got {self.refresh_jitter_s}"
            )
        if not 0 < self.instant_window_s <= self.refresh_s:
            raise ValueError(
                f"instant_window_s must be in (0, refresh_s], got {self.instant_window_s}"
            )
        if self.average_window_s <= 0 or self.counter_resolution_j <= 0:
            raise ValueError("average_window_s and counter_resolution_j must be > 0")
        if (
            not self.power_refresh_s > 0
            or not 0 <= self.power_refresh_jitter_s < self.power_refresh_s / 4
        ):
            raise ValueError(
                "power_refresh_s must be > 0 and power_refresh_jitter_s in [0, power_refresh_s/4)"
            )
        if self.counter_tail_s < 0 or not 0 <= self.counter_tail_fraction <= 1:
            raise ValueError(
                "counter_tail_s must be ≥ 0 and counter_tail_fraction in [0, 1], got "
                f"{self.counter_tail_s}, {self.counter_tail_fraction}"
            )
        if self.counter_lag_s < 0:
            raise ValueError(f"counter_lag_s must be ≥ 0, got {self.counter_lag_s}")
        if self.power_noise_w < 0:
            raise ValueError(f"power_noise_w must be ≥ 0, got {self.power_noise_w}")


class _JitteredGrid:
    """Refresh instants offset + k × period + N(0, jitter), generated lazily and kept.

    Instant 0 lies one period before the offset: a sensor has always refreshed at some point
    before a run begins.
    """

    def __init__(self, period_s: float, offset_s: float, jitter_s: float, rng) -> None:
        self.period_s, self.offset_s, self.jitter_s = period_s, offset_s, jitter_s
        self._rng = rng
        self.instants_s: list[float] = []

    def extend(self, until_s: float) -> None:
        while not self.instants_s or self.instants_s[-1] <= until_s:
            k = len(self.instants_s) - 1
            t = self.offset_s + k * self.period_s + float(self._rng.normal(0.0, self.jitter_s))
            if self.instants_s:
                t = max(t, self.instants_s[-1] + 1e-6)
            self.instants_s.append(t)

    def last(self, now_s: float) -> int:
        """Index of the last instant at or before now_s (0 if none yet)."""
        self.extend(now_s)
        return max(bisect.bisect_right(self.instants_s, now_s) - 1, 0)


class SimulatedGPU:
    """A `Sensor` for one simulated GPU whose true power is `schedule`, read on `clock`.

    The counter and the power fields refresh on two independent jittered grids, as measured on
    an H200; attribution sees neither.

    Args:
        schedule: the true power over time (the workload extends it as it runs).
        clock: the clock the sampler stamps reads with; the sensor returns the values of the
            last refresh at or before `clock.now_s()`.
        model: the sensor's behaviour.
        seed: seeds the refresh jitter, the random phase offsets and the power noise.
        device: the device name written to samples.csv.
        mem_used_bytes: a constant memory figure to report.
    """

    kind = "simulated"
    counter_read_is_slow = True

    def __init__(
        self,
        schedule: PowerSchedule,
        clock: Clock,
        model: SensorModel | None = None,
        seed: int = 0,
        device: str = "gpu0",
        mem_used_bytes: int = 8 * 1024**3,
    ) -> None:
        self.schedule = schedule
        self.clock = clock
        m = self.model = model or SensorModel()
        rng = np.random.default_rng(seed)
        offset = m.phase_offset_s if m.phase_offset_s is not None else rng.uniform(0, m.refresh_s)
        self._counter = _JitteredGrid(m.refresh_s, float(offset), m.refresh_jitter_s, rng)
        p_offset = m.power_phase_offset_s
        if p_offset is None:
            p_offset = float(rng.uniform(0.0, m.power_refresh_s))
        self._power = _JitteredGrid(m.power_refresh_s, p_offset, m.power_refresh_jitter_s, rng)
        self._noise_rng = np.random.default_rng([seed, 1])
        self._noise_w: list[tuple[float, float]] = []  # (instant, average) noise per power refresh
        self._device = device
        self._mem_used_bytes = mem_used_bytes
        self.n_reads = 0
        self.n_counter_reads = 0

    @property
    def devices(self) -> tuple[str, ...]:
        return (self._device,)

    @property
    def nominal_refresh_s(self) -> float:
        return self.model.refresh_s

    def signals(self) -> list[SignalInfo]:
        notes = {
            "power_w": f"simulated {self.model.average_window_s:g} s running average",
            "power_instant_w": f"simulated {self.model.instant_window_s * 1e3:g} ms window",
            "energy_j": f"simulated counter, {self.model.counter_resolution_j * 1e3:g} mJ steps",
        }
        return [SignalInfo(self._device, s, True, notes.get(s)) for s in SIGNALS]

    def refresh_instants_s(self, until_s: float) -> list[float]:
        """The counter's true (jittered) refresh instants up to `until_s`; attribution never
        sees these."""
        self._counter.extend(until_s)
        return [t for t in self._counter.instants_s if t <= until_s]

    def power_refresh_instants_s(self, until_s: float) -> list[float]:
        """The power fields' true refresh instants up to `until_s`."""
        self._power.extend(until_s)
        return [t for t in self._power.instants_s if t <= until_s]

    def _noise(self, k: int) -> tuple[float, float]:
        sd = self.model.power_noise_w
        while len(self._noise_w) <= k:
            n = self._noise_rng.normal(0.0, sd, 2) if sd else (0.0, 0.0)
            self._noise_w.append((float(n[0]), float(n[1])))
        return self._noise_w[k]

    def read(self, device: str, counter: bool) -> Reading:
        if device != self._device:
            raise ValueError(f"simulated sensor has device {self._device!r}, not {device!r}")
        m = self.model
        now_s = self.clock.now_s()
        sched = self.schedule
        self.n_reads += 1
        energy_j = None
        if counter:
            self.n_counter_reads += 1
            tau_c = self._counter.instants_s[self._counter.last(now_s)]
            res = m.counter_resolution_j
            t_c = tau_c - m.counter_lag_s
            total_j = m.counter_origin_j + sched.energy_until_j(t_c)
            if m.counter_tail_s > 0:
                total_j -= m.counter_tail_fraction * sched.in_flight_j(t_c, m.counter_tail_s)
            energy_j = round(math.floor(total_j / res + 1e-9) * res, 6)
        k = self._power.last(now_s)
        tau = self._power.instants_s[k]
        noise_inst_w, noise_avg_w = self._noise(k)
        inst_w = max(sched.mean_power_w(tau - m.instant_window_s, tau) + noise_inst_w, 0.0)
        avg_w = max(sched.mean_power_w(tau - m.average_window_s, tau) + noise_avg_w, 0.0)
        busy = sched.power_at_w(tau) > sched.idle_w * 1.2
        return Reading(
            power_w=round(avg_w, 3),  # NVML reports whole milliwatts
            power_instant_w=round(inst_w, 3),
            energy_j=energy_j,
            util_pct=100.0 if busy else 0.0,
            mem_used_bytes=self._mem_used_bytes,
            sm_clock_mhz=1980.0 if busy else 345.0,
            temp_c=30.0 + 0.04 * avg_w,
        )

    def close(self) -> None:
        pass
