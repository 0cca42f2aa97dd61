import threading
import time

import numpy as np
import pytest

from jouleprof.clock import ManualClock, MonotonicClock
from jouleprof.errors import SensorError
from jouleprof.sensors.sampler import ListSink, Sampler, SamplerConfig
from jouleprof.sensors.simulated import PowerSchedule, SimulatedGPU
from jouleprof.sensors.simulated_workload import PhaseSpec, simulate_training
from jouleprof.types import Reading


def test_counter_is_read_about_once_per_refresh_at_every_phase():
    run = simulate_training(
        [PhaseSpec("a", 0.1, 400), PhaseSpec("b", 0.13, 620)], steps=200, seed=2
    )
    counter_t = [s.t_s for s in run.samples if s.energy_j is not None]
    fast = [s for s in run.samples if s.power_instant_w is not None]
    duration = run.schedule.end_s
    # 20 ms cheap reads, counter reads rationed to about one per 100 ms refresh.
    assert len(fast) == pytest.approx(duration / 0.0215, rel=0.1)
    assert len(counter_t) == pytest.approx(duration / 0.1, rel=0.25)
    inner = counter_t[1:-3]  # the run's first and last polls read the counter on purpose
    assert min(b - a for a, b in zip(inner, inner[1:], strict=False)) >= 0.075 - 1e-9
    # Dithered: the reads fall at every phase of the counter's refresh grid.
    refreshes = run.sensor.refresh_instants_s(duration)
    import bisect

    lag = np.array([t - refreshes[bisect.bisect_right(refreshes, t) - 1] for t in inner])
    assert np.histogram(lag, bins=5, range=(0, 0.1))[0].min() > len(lag) / 20


def test_cheap_reads_never_carry_a_counter_value():
    run = simulate_training([PhaseSpec("a", 0.2, 500)], steps=20, seed=0)
    n_counter = sum(s.energy_j is not None for s in run.samples)
    assert 0 < n_counter < len(run.samples) / 3


def test_background_thread_timing_and_overhead():
    clock = MonotonicClock()
    sched = PowerSchedule(idle_w=100)
    sched.append(100.0, 300)
    gpu = SimulatedGPU(sched, clock)
    sink = ListSink()
    with Sampler([gpu], sink, SamplerConfig(interval_s=0.01, flush_every_s=0.1), clock=clock) as s:
        time.sleep(0.6)
    t = [x.t_s for x in sink.samples]
    assert all(b > a for a, b in zip(t, t[1:], strict=False))  # one monotonic clock
    # ~60 polls in 0.6 s (dithered ±25 %), with generous slack for a loaded CI machine.
    assert 25 <= s.stats.n_polls <= 75
    assert s.stats.wall_s == pytest.approx(0.6, abs=0.2)
    assert s.stats.cpu_fraction_of_core is not None and s.stats.cpu_fraction_of_core < 0.5
    assert sink.samples[0].energy_j is not None and sink.samples[-1].energy_j is not None


class _FailingSensor:
    kind = "failing"
    devices = ("gpu0",)
    counter_read_is_slow = False
    nominal_refresh_s = None

    def __init__(self):
        self.n = 0

    def signals(self):
        return []

    def read(self, device, counter):
        self.n += 1
        if self.n % 2:
            raise SensorError("GPU fell off the bus")
        return Reading(power_w=100.0, energy_j=float(self.n))

    def close(self):
        pass


def test_read_errors_are_counted_not_raised_and_not_zero():
    clock = ManualClock()
    sink = ListSink()
    s = Sampler([_FailingSensor()], sink, clock=clock)
    for _ in range(6):
        s.poll_once()
        clock.advance_s(0.02)
    s.flush()
    assert s.stats.n_read_errors == 3
    assert len(sink.samples) == 3
    assert all(x.power_w == 100.0 for x in sink.samples)
    assert "fell off the bus" in s.stats.errors[0]


def test_samples_reach_the_sink_while_running():
    clock = MonotonicClock()
    sched = PowerSchedule()
    gpu = SimulatedGPU(sched, clock)
    sink = ListSink()
    s = Sampler([gpu], sink, SamplerConfig(interval_s=0.005, flush_every_s=0.05), clock=clock)
    s.start()
    time.sleep(0.3)
    seen_mid_run = len(sink.samples)
    s.stop()
    assert seen_mid_run > 10  # flushed incrementally, not only at the end
    assert threading.active_count() >= 1


@pytest.mark.parametrize("bad", [0, -0.01])
def test_bad_interval_is_refused(bad):
    with pytest.raises(ValueError, match="interval_s"):
        SamplerConfig(interval_s=bad)


def test_sparse_counter_reads_with_a_dense_start_and_bursts():
    cfg = SamplerConfig(
        interval_s=0.02, counter_interval_s=1.0, counter_dense_s=5.0, counter_burst_every_s=20.0
    )
    run = simulate_training([PhaseSpec("a", 0.2, 500)], steps=200, seed=1, sampler_config=cfg)
    t = np.array([s.t_s for s in run.samples if s.energy_j is not None])
    dense = np.sum(t < 5.0)
    assert 40 <= dense <= 60  # ~ every refresh for the first 5 s
    later = t[(t > 6.0) & (t < run.schedule.end_s - 1)]
    in_burst = ((later % 20.0) < 1.0).sum()
    assert in_burst >= 0.3 * len(later)  # bursts hold many of the later reads
    span = later[-1] - later[0]
    assert len(later) < 1.3 * span / 1.0 + 12 * (span / 20.0 + 1)  # else ~one read a second


def test_bad_burst_settings_are_refused():
    with pytest.raises(ValueError, match="counter_burst"):
        SamplerConfig(counter_burst_every_s=1.0, counter_burst_s=2.0)


def _sparse_sampler(**cfg):
    clock = MonotonicClock()
    sched = PowerSchedule(idle_w=100)
    sched.append(100.0, 300)
    sink = ListSink()
    config = SamplerConfig(interval_s=0.5, counter_interval_s=1.0, **cfg)
    return Sampler([SimulatedGPU(sched, clock)], sink, config, clock=clock), sink, clock


def test_a_slow_sampler_polls_densely_while_it_densifies():
    # The e2e mode polls every 0.5 s: densify() must still give a counter read ~every refresh,
    # which needs polls that often, and must not wait out the current 0.5 s sleep.
    s, sink, clock = _sparse_sampler(counter_dense_s=0.0)
    with s:
        time.sleep(0.7)
        t_dense = clock.now_s()
        s.densify(0.6, read_now=True)
        first = sink.samples[-1] if sink.samples else None
        time.sleep(0.9)
    # read_now: a reading with the counter, taken inside the call.
    counter_t = [x.t_s for x in sink.samples if x.energy_j is not None]
    assert any(abs(t - t_dense) < 0.05 for t in counter_t)
    inside = [t for t in counter_t if t_dense < t < t_dense + 0.6]
    assert len(inside) >= 3  # ~every 0.1 s refresh; a 0.5 s poll would allow one
    polls_inside = [x.t_s for x in sink.samples if t_dense + 0.05 < x.t_s < t_dense + 0.55]
    assert len(polls_inside) >= 5
    after = [x.t_s for x in sink.samples if x.t_s > t_dense + 0.75]
    assert len(after) <= 2  # back to 0.5 s polls once the dense stretch ends
    assert first is None or first.t_s <= clock.now_s()


def test_a_slow_sampler_polls_densely_through_its_opening_stretch():
    s, sink, clock = _sparse_sampler(counter_dense_s=0.5)
    with s:
        time.sleep(0.6)
    early = [x.t_s for x in sink.samples if 0 < x.t_s - sink.samples[0].t_s < 0.45]
    assert len(early) >= 4  # dense_interval_s (0.05 s) polls, not one at 0.5 s


def test_dense_interval_must_be_positive():
    with pytest.raises(ValueError, match="dense_interval_s"):
        SamplerConfig(dense_interval_s=0)


class _FastSensor:
    """A sensor with a fast path: the instant power alone, except every 4th poll (slow fields
    due) and never when the counter is read."""

    kind = "fast"
    counter_read_is_slow = True
    nominal_refresh_s = 0.1
    devices = ("gpu0",)

    def __init__(self) -> None:
        self.n_fast = self.n_full = 0
        self.energy_j = 0.0

    def signals(self):
        return []

    def read_fast(self, device):
        if (self.n_fast + self.n_full) % 4 == 3:
            return None
        self.n_fast += 1
        return "power_instant_w", 300.0

    def read(self, device, counter):
        self.n_full += 1
        self.energy_j += 1.0
        return Reading(
            power_w=250.0, power_instant_w=310.0, energy_j=self.energy_j if counter else None
        )

    def close(self):
        pass


def test_fast_polls_take_the_sensors_fast_path_and_become_full_samples_at_the_flush():
    clock = ManualClock()
    sensor = _FastSensor()
    sink = ListSink()
    sampler = Sampler([sensor], sink, SamplerConfig(counter_interval_s=1.0), clock=clock)
    sampler.mark_start()
    first = sampler.poll_once(force_counter=True)  # a counter poll: never the fast path
    assert first[0].energy_j == 1.0 and sensor.n_fast == 0
    for _ in range(40):
        clock.advance_s(0.02)
        sampler.poll_once()
    sampler.flush()
    samples = sink.samples
    assert len(samples) == 41 and [s.t_s for s in samples] == sorted(s.t_s for s in samples)
    fast = [s for s in samples if s.power_w is None]
    assert len(fast) == sensor.n_fast > 20  # the fast path was taken ...
    assert all(s.power_instant_w == 300.0 and s.energy_j is None for s in fast)
    full = [s for s in samples if s.power_w is not None]
    assert len(full) == sensor.n_full >= 10  # ... and read() where it said None
    assert sum(s.energy_j is not None for s in samples) >= 1
    assert sampler.stats.n_reads == 41
