import numpy as np
import pytest

from jouleprof.clock import ManualClock
from jouleprof.sensors.refresh import detect_device_refresh
from jouleprof.sensors.sampler import ListSink, Sampler, SamplerConfig
from jouleprof.sensors.simulated import PowerSchedule, SimulatedGPU
from jouleprof.sensors.simulated_workload import PhaseSpec, simulate_training
from jouleprof.timeline.windows import window_energies


def _constant_run(power_w: float, seconds: float, seed: int = 0):
    import pandas as pd

    from jouleprof.types import SAMPLE_COLUMNS

    clock = ManualClock()
    s = PowerSchedule(idle_w=power_w)
    s.append(seconds, power_w)
    gpu = SimulatedGPU(s, clock, seed=seed)
    sink = ListSink()
    sampler = Sampler([gpu], sink, SamplerConfig(interval_s=0.02), clock=clock)
    rng = np.random.default_rng(seed)
    while clock.now_s() < seconds:
        sampler.poll_once()
        clock.advance_s(0.02 * rng.uniform(0.75, 1.25))
    sampler.flush()
    return pd.DataFrame([x.row() for x in sink.samples], columns=list(SAMPLE_COLUMNS))


@pytest.mark.parametrize("power_w", [95.0, 450.0, 690.0])
@pytest.mark.parametrize("window_s", [1.0, 2.5, 10.0])
def test_windows_of_known_power_within_one_percent(power_w, window_s):
    df = _constant_run(power_w, 20.0)
    est = detect_device_refresh(df, "gpu0")
    t0 = 4.321
    w = window_energies(df, "gpu0", t0, t0 + window_s, est)
    truth = power_w * window_s
    for name in ("counter", "power_instant", "power_avg"):
        assert w[name].energy_j == pytest.approx(truth, rel=0.01), name
        tol = 1e-9 * truth
        assert w[name].lo_j - tol <= truth <= w[name].hi_j + tol, name
    assert not w["counter"].short


def test_varying_power_windows_from_the_counter():
    # Power steps every 30–200 ms inside the window: the edges are interpolated across one
    # refresh period, so a 1 s window is within 2 %, a 4 s window within 0.5 %, bounds hold.
    phases = [PhaseSpec("a", 0.12, 480), PhaseSpec("b", 0.2, 650), PhaseSpec("c", 0.03, 300)]
    run = simulate_training(phases, steps=100, seed=7)
    df = run.samples_frame()
    est = detect_device_refresh(df, "gpu0")
    for t0 in (3.0, 11.7, 20.2):
        for width in (1.0, 4.0):
            truth = run.schedule.energy_j(t0, t0 + width)
            w = window_energies(df, "gpu0", t0, t0 + width, est)["counter"]
            assert w.energy_j == pytest.approx(truth, rel=0.02 if width < 2 else 0.005)
            assert w.lo_j <= truth <= w.hi_j


def test_short_windows_are_flagged_and_their_bounds_widen():
    phases = [PhaseSpec("a", 0.12, 480), PhaseSpec("b", 0.2, 650)]
    run = simulate_training(phases, steps=80, seed=1)
    df = run.samples_frame()
    est = detect_device_refresh(df, "gpu0")
    widths = [0.05, 0.2, 0.45, 2.0, 8.0]
    rel = []
    for width in widths:
        t0 = 10.0
        truth = run.schedule.energy_j(t0, t0 + width)
        w = window_energies(df, "gpu0", t0, t0 + width, est)["counter"]
        assert w.short == (width < 5 * est.period_s)
        assert w.lo_j <= truth <= w.hi_j  # the counter bound holds whatever the power did
        rel.append(w.rel_halfwidth)
    assert all(a > b for a, b in zip(rel, rel[1:], strict=False))  # narrower as the window grows


def test_window_outside_the_readings_is_unavailable_with_a_reason():
    df = _constant_run(300.0, 5.0)
    w = window_energies(df, "gpu0", 3.0, 9.0)
    assert w["counter"].energy_j is None
    assert "outside" in w["counter"].reason
