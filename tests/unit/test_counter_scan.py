"""The counter-offset scan: a short run's ambiguous counter grid placed by the fit's residual."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import jouleprof.attribution.regression as regression
from jouleprof.attribution.common import build_timeline
from jouleprof.attribution.counter_scan import (
    AMBIGUOUS_OFFSET_SE_S,
    is_ambiguous,
    near_best_stretch,
    scan_offsets,
    scan_window,
    shifted,
)
from jouleprof.attribution.regression import attribute_regression
from jouleprof.attribution.regression_config import RegressionConfig
from jouleprof.bench.simulate import simulate_samples
from jouleprof.sensors.refresh import RefreshEstimate
from jouleprof.sensors.refresh_fit import JitterGrid

# The spans of a 40-step `jouleprof.profile` loop recorded on a loaded 2-core CPU (data 30 ms
# asleep, forward 50 ms and backward 90 ms busy): on the simulated GPU its counter, read about
# once per refresh, saw a refresh in 71 of 72 gaps, and offsets in three stretches of the period
# agreed with all of them. Without the scan the fit took the wrong one: backward +2.5 % inside
# a ±0.1 % interval.
SPANS = Path(__file__).parent / "data" / "short_cpu_run_spans.csv"


def _grid(offset_s: float, se_s: float) -> JitterGrid:
    est = RefreshEstimate("energy_j", 0.1, offset_s, 0.002, 50, 0.11, "test")
    return JitterGrid(est, 0.002, 0.001, se_s, 1e-4, 5.0, 50, "mle")


def test_near_best_stretch_wraps_around_the_period():
    rms = np.array([10.0, 10.5, 40, 50, 60, 50, 40, 10.2])
    assert near_best_stretch(rms) == (7, 3)  # indices 7, 0, 1
    assert near_best_stretch(np.full(5, 3.0)) == (0, 5)
    with pytest.raises(ValueError):
        near_best_stretch(np.full(3, np.inf))


def test_scan_takes_the_middle_of_the_flat_bottom_and_its_width():
    true_offset = 0.063
    jc = _grid(0.030, 0.015)

    def rms_w(g: JitterGrid) -> float:
        d = abs((g.grid.offset_s - true_offset + 0.05) % 0.1 - 0.05)
        return 11.0 if d <= 0.0125 else 11.0 + 4000 * (d - 0.0125)

    scan = scan_offsets(jc, rms_w)
    moved = shifted(jc, scan.shift_s, scan.offset_se_s)
    assert moved.grid.offset_s == pytest.approx(true_offset, abs=0.0025)
    assert scan.offset_se_s == pytest.approx(0.0125, abs=0.0025)
    # a residual that cannot tell offsets apart leaves the grid where it was
    flat = scan_offsets(jc, lambda g: 5.0)
    assert flat.shift_s == 0.0 and flat.offset_se_s == jc.offset_se_s
    # a shift where no fit is possible counts as the worst
    failing = scan_offsets(jc, lambda g: (_ for _ in ()).throw(ValueError("no rows")))
    assert failing.shift_s == 0.0


def test_a_long_run_is_scanned_on_the_middle_minute_only():
    short = np.linspace(0.0, 50.0, 501)
    assert scan_window(short).all()
    long = np.linspace(0.0, 240.0, 2401)
    kept = long[scan_window(long)]
    assert kept.min() == pytest.approx(90.0) and kept.max() == pytest.approx(150.0)


def test_is_ambiguous_only_beyond_the_threshold():
    assert not is_ambiguous(None)
    assert not is_ambiguous(_grid(0.0, 0.9 * AMBIGUOUS_OFFSET_SE_S))
    assert is_ambiguous(_grid(0.0, 1.1 * AMBIGUOUS_OFFSET_SE_S))
    assert is_ambiguous(_grid(0.0, float("inf")))


def _fit(spans):
    sim = simulate_samples(spans)
    df = pd.DataFrame([dataclasses.asdict(s) for s in sim.samples])
    tl = build_timeline(spans, df["t_s"].min(), df["t_s"].max(), 1)
    dev = attribute_regression(df, tl, "sim0", RegressionConfig(bins=False))
    truth = sum(e for (st, ph), e in sim.true_step_j.items() if ph == "backward" and st >= 1)
    back = next(p for p in dev.phases if p.phase == "backward")
    return back.energy_j / truth - 1, dev


def test_short_run_with_an_ambiguous_counter_grid_is_placed_by_the_scan(monkeypatch):
    spans = pd.read_csv(SPANS)
    err, dev = _fit(spans)
    assert "counter_scan" in dev.diagnostics
    assert any("ambiguous" in n for n in dev.notes)
    assert abs(err) < 0.003, err
    # the same run without the scan: the wrong stretch of the period, percents off
    monkeypatch.setattr(regression, "is_ambiguous", lambda jc: False)
    err_unscanned, dev_unscanned = _fit(spans)
    assert "counter_scan" not in dev_unscanned.diagnostics
    assert abs(err_unscanned) > 0.01, err_unscanned
