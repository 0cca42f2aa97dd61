"""benchmarks/buffer_window.py finds a simulated power buffer's window and lag.

The simulated buffer samples, every ~20 ms, the mean power of the 20 ms that ended 10 ms
before its timestamp, under a square load of recorded bursts (kernel_probe.py's shape).
"""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pandas as pd
import pytest

from jouleprof.sensors.simulated_workload import PhaseSpec, simulate_training


def test_the_buffers_own_window_and_lag_fit_best(load_benchmark):
    bw = load_benchmark("buffer_window")
    run = simulate_training(
        [PhaseSpec("busy", 0.035, 650.0, 0.3), PhaseSpec("rest", 0.05, 90.0, 0.3)], 120, seed=4
    )
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.uniform(0.015, 0.025, 600)) + 1.0
    t = t[t < run.schedule.end_s - 1.0]
    w_true, lag_true = 0.020, 0.010
    watts = [run.schedule.mean_power_w(x - lag_true - w_true, x - lag_true) for x in t]
    buffer = pd.DataFrame({"t_s": t, "device": "gpu0", "power_w": watts})
    spans = pd.DataFrame([asdict(s) for s in run.spans])
    out = bw.fit_windows(buffer, spans, bw.grid_ms("5:40:5"), bw.grid_ms("-20:30:5"))
    best = out["best"]
    assert best["window_ms"] == pytest.approx(20) and best["lag_ms"] == pytest.approx(10)
    assert best["residual_w"] < 1.0
    assert best["power_w"]["busy"] == pytest.approx(650, rel=0.01)
    assert best["power_w"]["rest"] == pytest.approx(90, rel=0.05)
    wrong = [g for g in out["grid"] if g["window_ms"] == 40 and g["lag_ms"] == 10][0]
    assert wrong["residual_w"] > 20 * best["residual_w"] + 10
