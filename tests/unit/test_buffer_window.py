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


def _square_wave_buffer(window_s: float, lag_s: float):
    """A busy/rest square wave, and a ~20 ms buffer whose samples average `window_s` ending
    `lag_s` before their stamps."""
    run = simulate_training(
        [PhaseSpec("busy", 0.035, 650.0, 0.3), PhaseSpec("rest", 0.05, 90.0, 0.3)], 120, seed=4
    )
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.uniform(0.015, 0.025, 600)) + 1.0
    t = t[t < run.schedule.end_s - 1.0]
    watts = [run.schedule.mean_power_w(x - lag_s - window_s, x - lag_s) for x in t]
    return run, pd.DataFrame({"t_s": t, "device": "gpu0", "power_w": watts})


def test_the_buffers_own_window_and_lag_fit_best(load_benchmark):
    bw = load_benchmark("buffer_window")
    run, buffer = _square_wave_buffer(0.020, 0.010)
    spans = pd.DataFrame([asdict(s) for s in run.spans])
    out = bw.fit_windows(buffer, spans, bw.grid_ms("5:40:5"), bw.grid_ms("-20:30:5"))
    best = out["best"]
    assert best["window_ms"] == pytest.approx(20) and best["lag_ms"] == pytest.approx(10)
    assert best["residual_w"] < 1.0
    assert best["power_w"]["busy"] == pytest.approx(650, rel=0.01)
    assert best["power_w"]["rest"] == pytest.approx(90, rel=0.05)
    wrong = [g for g in out["grid"] if g["window_ms"] == 40 and g["lag_ms"] == 10][0]
    assert wrong["residual_w"] > 20 * best["residual_w"] + 10


def test_the_shape_free_response_puts_the_weight_where_the_buffer_looks(load_benchmark):
    # A 20 ms boxcar ending 10 ms before the stamp: the response spans 10–30 ms, centroid 20.
    bw = load_benchmark("buffer_window")
    run, buffer = _square_wave_buffer(0.020, 0.010)
    spans = pd.DataFrame([asdict(s) for s in run.spans])
    r = bw.response(buffer, spans, "busy", bin_s=0.002, lo_s=-0.01, hi_s=0.06)
    assert r["centroid_ms"] == pytest.approx(20.0, abs=1.0)
    assert r["step_w"] == pytest.approx(560.0, rel=0.03)  # busy − rest
    assert r["baseline_w"] == pytest.approx(90.0, abs=5.0)
    assert r["reach_ms"]["10%"] >= 8 and r["reach_ms"]["99%"] <= 32


def test_pieces_cut_a_phase_and_the_gap_after_it(load_benchmark):
    bw = load_benchmark("buffer_window")
    spans = pd.DataFrame(
        {"step": [0, 1], "phase": ["busy", "busy"], "t0_s": [1.0, 1.1], "t1_s": [1.05, 1.13]}
    )
    p = bw.piece_spans(spans, "busy", [0.01], [0.02])
    got = [(r.step, r.phase, round(r.t0_s, 4), round(r.t1_s, 4)) for r in p.itertuples()]
    assert got[:4] == [
        (0, "busy0", 1.0, 1.01),
        (0, "busy1", 1.01, 1.05),
        (0, "gap0", 1.05, 1.07),
        (0, "gap1", 1.07, 1.099),  # 1 ms short of the next burst
    ]
    assert got[4:6] == [(1, "busy0", 1.1, 1.11), (1, "busy1", 1.11, 1.13)]
