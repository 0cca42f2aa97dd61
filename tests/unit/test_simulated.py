import math

import numpy as np
import pytest

from jouleprof.clock import ManualClock
from jouleprof.sensors.simulated import PowerSchedule, SensorModel, SimulatedGPU


def test_schedule_integral_is_exact():
    s = PowerSchedule(idle_w=100.0)
    s.append(1.0, 300.0)
    s.append(0.5, 500.0)
    assert s.energy_j(0.0, 1.5) == pytest.approx(550.0)
    assert s.energy_j(0.25, 1.25) == pytest.approx(0.75 * 300 + 0.25 * 500)
    assert s.energy_j(1.5, 3.5) == pytest.approx(200.0)  # idle after the end
    assert s.power_at_w(1.2) == 500.0


def test_counter_refreshes_only_at_refresh_instants_in_whole_mj():
    clock = ManualClock()
    s = PowerSchedule(idle_w=200.0)
    s.append(10.0, 200.0)
    model = SensorModel(refresh_jitter_s=0.0, phase_offset_s=0.05, counter_origin_j=0.0)
    gpu = SimulatedGPU(s, clock, model)
    clock.advance_s(0.06)  # one refresh at 0.05 s
    e1 = gpu.read("gpu0", counter=True).energy_j
    clock.advance_s(0.08)  # still before the refresh at 0.15 s
    e2 = gpu.read("gpu0", counter=True).energy_j
    assert e1 == e2 == pytest.approx(10.0)  # 0.05 s × 200 W
    clock.advance_s(0.02)  # past 0.15 s
    assert gpu.read("gpu0", counter=True).energy_j == pytest.approx(30.0)
    assert gpu.read("gpu0", counter=False).energy_j is None  # not read: None, never 0
    e = gpu.read("gpu0", counter=True).energy_j
    assert math.isclose(e * 1000, round(e * 1000))


def test_instant_field_sees_only_its_window():
    clock = ManualClock()
    s = PowerSchedule(idle_w=100.0)
    s.append(0.07, 100.0)
    s.append(0.03, 700.0)  # the last 30 ms before the refresh at 0.1 s
    s.append(1.0, 100.0)
    model = SensorModel(
        refresh_jitter_s=0.0,
        instant_window_s=0.025,
        power_noise_w=0.0,
        power_refresh_s=0.1,
        power_phase_offset_s=0.0,
        power_refresh_jitter_s=0.0,
    )
    gpu = SimulatedGPU(s, clock, model)
    clock.advance_s(0.101)
    r = gpu.read("gpu0", counter=True)
    assert r.power_instant_w == pytest.approx(700.0)
    # The 1 s average saw 0.07 s at 100 W, 0.03 s at 700 W and 0.9 s of idle before 0.
    assert r.power_w == pytest.approx((0.97 * 100 + 0.03 * 700), rel=1e-6)


def test_refresh_instants_are_jittered_around_the_grid():
    clock = ManualClock()
    gpu = SimulatedGPU(PowerSchedule(), clock, SensorModel(refresh_jitter_s=0.002), seed=3)
    ts = np.array(gpu.refresh_instants_s(100.0))
    d = np.diff(ts)
    assert abs(np.mean(d) - 0.1) < 1e-4
    assert 0.001 < np.std(d) < 0.005


def test_bad_model_is_refused():
    with pytest.raises(ValueError, match="refresh_s"):
        SensorModel(refresh_s=0)
    with pytest.raises(ValueError, match="instant_window_s"):
        SensorModel(instant_window_s=0.5)
