"""The regression's fast paths give what the plain formulas give.

- `Timeline.kernel_overlap` / `knot_overlap` (a row's overlap with every label from the edges
  near its knots) equal the cumulative-time form (`Timeline.cumulative_s`, `overlap_s`), with
  and without jitter, for boxcars, kernels of boxes and delayed copies, on a timeline whose
  segments are shared between labels (the stall model's weights);
- `nnls.nnls_rows` (normal equations and refinement) equals an NNLS on the rows;
- `Placement.design(..., only=mask)` equals the whole design's rows;
- `stages` records each stage's seconds and reports progress, and `attribute(progress=...)`
  calls the callback with short stage descriptions.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import nnls

from jouleprof.attribution import stages
from jouleprof.attribution.common import build_timeline
from jouleprof.attribution.kernels import BOXCAR, exponential, triangle
from jouleprof.attribution.nnls import nnls_rows
from jouleprof.attribution.placement import (
    _STEP_S,
    Placement,
    delay_knots,
    delayed_fractions,
    kernel_fractions,
    kernel_multiples,
)
from jouleprof.attribution.rows import BUFFER, COUNTER, INSTANT, SensorRows
from jouleprof.attribution.stall import split_stalls


def _timeline(seed: int = 0, steps: int = 60):
    """A timeline of uneven phases (some host-paced) split by the stall model."""
    rng = np.random.default_rng(seed)
    rows, t = [], 1.0
    for step in range(steps):
        for name, d in (("data", 0.004), ("fwd", 0.030), ("fwd/in", 0.012), ("bwd", 0.050)):
            dur = d * rng.uniform(0.7, 1.6)
            if name == "fwd/in":
                rows.append((step, name, t - 0.02, t - 0.02 + dur))
                continue
            rows.append((step, name, t, t + dur))
            t += dur
        t += rng.uniform(0.0, 0.003)
    spans = pd.DataFrame(rows, columns=["step", "phase", "t0_s", "t1_s"])
    tl = build_timeline(spans, 0.0, t + 1.0, warmup_steps=2)
    return split_stalls(tl).timeline


@pytest.mark.parametrize("sigma_s", [0.0, 0.0003, 0.004])
def test_kernel_overlap_equals_the_cumulative_form(sigma_s):
    tl = _timeline()
    rng = np.random.default_rng(1)
    t_ref = np.sort(rng.uniform(tl.edges_s[0] + 0.2, tl.edges_s[-1] - 0.2, 3000))
    cols = list(range(2, len(tl.names)))
    for kernel in (exponential(), triangle()):
        window = rng.uniform(0.02, 0.07, len(t_ref))
        mult, gamma = kernel_multiples(kernel)
        sig = sigma_s * rng.uniform(0.5, 1.0, len(t_ref))
        fast = tl.kernel_overlap(t_ref, window, mult, gamma[None, :] / window[:, None], sig, cols)
        ref = kernel_fractions(tl, t_ref, window, kernel, sig)[:, cols]
        np.testing.assert_allclose(fast, ref, rtol=0, atol=1e-11)
    d = rng.uniform(0.01, 0.2, len(t_ref))
    box = tl.kernel_overlap(
        t_ref, d, np.array([0.0, 1.0]), np.column_stack([1 / d, -1 / d]), sigma_s, cols
    )
    ref = tl.overlap_s(t_ref - d, t_ref, sigma_s)[:, cols] / d[:, None]
    np.testing.assert_allclose(box, ref, rtol=0, atol=1e-11)
    assert np.abs(box).max() > 0.5  # not a comparison of zeros


def test_knot_overlap_equals_delayed_fractions():
    tl = _timeline(2)
    rng = np.random.default_rng(3)
    t1 = np.sort(rng.uniform(tl.edges_s[0] + 0.5, tl.edges_s[-1] - 0.5, 2000))
    t0 = t1 - rng.uniform(0.05, 0.15, len(t1))
    delays = ((0.0005, 0.4), (0.004, 0.3), (0.012, 0.3))
    knots, coefs = delay_knots(t0, t1, delays)
    fast = tl.knot_overlap(knots, coefs, 0.0015)
    ref = delayed_fractions(tl, t0, t1, delays, 0.0015)
    np.testing.assert_allclose(fast, ref, rtol=0, atol=1e-11)


def test_energy_until_is_the_cumulative_time_times_the_powers():
    tl = _timeline(4)
    power = np.linspace(50, 500, len(tl.names))
    t = np.linspace(tl.edges_s[0] - 1, tl.edges_s[-1] + 1, 5000)
    np.testing.assert_allclose(tl.energy_until_j(t, power), tl.cumulative_s(t) @ power, rtol=1e-12)


def test_nnls_rows_equals_nnls_on_the_rows():
    rng = np.random.default_rng(5)
    base = np.abs(rng.normal(size=(4000, 12)))
    a = base + 0.9 * base[:, [0]]  # correlated columns
    truth = np.abs(rng.normal(300, 100, 12))
    truth[4] = 0.0
    b = a @ truth + rng.normal(0, 20, len(a))
    b -= 40 * a[:, 4]  # a column the fit must pin at zero
    ref = nnls(a, b, maxiter=600)[0]
    got = nnls_rows(a, b)
    assert got[4] == 0.0 and ref[4] == 0.0
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-9)


def _placement(tl, rows, sigma_s, instant_kernel, **extra) -> Placement:
    """Rows placed on `tl`, every in-step label fitted, the buffer's exponential kernel."""
    cols = list(range(2, len(tl.names)))
    u = np.linspace(-1, 1, len(rows))
    return Placement(tl, rows, cols, np.array(sigma_s), u, instant_kernel, exponential(), **extra)


def test_a_design_of_some_rows_is_those_rows_of_the_whole():
    tl = _timeline(6)
    rng = np.random.default_rng(7)
    n = 900
    t1 = np.sort(rng.uniform(tl.edges_s[0] + 0.5, tl.edges_s[-1] - 0.5, n))
    kind = rng.choice([COUNTER, INSTANT, BUFFER], n)
    dur = np.where(kind == COUNTER, 0.1, np.where(kind == INSTANT, 0.025, 0.06))
    rows = SensorRows(t1 - dur, t1, np.full(n, 300.0), kind, np.ones(n), np.full(n, np.nan))
    pl = _placement(tl, rows, [0.0015, 0.003, 0.003, 0.0003], triangle())
    theta = np.array([2e-4, -1e-4, 5e-4, 1e-4, 2e-3, 0.01, -3e-4])
    whole = pl.design(theta)
    for k in (COUNTER, INSTANT, BUFFER):
        m = kind == k
        np.testing.assert_array_equal(pl.design(theta, only=m), whole[m])
    moved = pl.moved_rows(np.array([0, 0, 0, 0, 0, 0, 1e-5]))
    assert np.array_equal(moved, kind == BUFFER)


@pytest.mark.parametrize("delays", [None, ((0.0, 0.6), (0.006, 0.4))])
def test_placement_derivatives_equal_central_differences(delays):
    """`Placement.derivatives` (from the edges near each knot) equals the central differences
    of the whole design over the same step: each shift's, and the instant window's."""
    tl = _timeline(8)
    rng = np.random.default_rng(9)
    n = 1200
    t1 = np.sort(rng.uniform(tl.edges_s[0] + 0.5, tl.edges_s[-1] - 0.5, n))
    kind = rng.choice([COUNTER, INSTANT, BUFFER], n)
    dur = np.where(
        kind == COUNTER, rng.uniform(0.08, 0.12, n), np.where(kind == INSTANT, 0.025, 0.06)
    )
    own_sd = np.where(kind == INSTANT, rng.uniform(0.5e-3, 2e-3, n), np.nan)
    rows = SensorRows(t1 - dur, t1, np.full(n, 300.0), kind, np.ones(n), own_sd)
    extra = {} if delays is None else {"counter_delays": delays}
    for instant_kernel in (BOXCAR, triangle()):
        pl = _placement(tl, rows, [0.0015, 0.004, 0.004, 0.0003], instant_kernel, **extra)
        cols = pl.cols
        theta = np.array([2e-4, -1e-4, 5e-4, 1e-4, 2e-3, 0.01, -3e-4])
        power = rng.uniform(100, 600, len(cols))
        d_shift, d_window = pl.derivatives(theta, power, pl.design(theta) @ power)
        h = _STEP_S
        for i, got in ((0, d_shift), (2, d_shift), (6, d_shift), (4, d_window)):
            e = np.zeros(7)
            e[i] = h
            m = pl.moved_rows(e)
            fd = (pl.design(theta + e) - pl.design(theta - e))[m] @ power / (2 * h)
            assert np.abs(fd).max() > 100  # rows on power steps: a comparison of non-zeros
            # The designs' difference cancels ~1e-13 of a row's ~300 W: ~1e-8 W/s at this step.
            np.testing.assert_allclose(got[m], fd, rtol=0, atol=1e-9 * np.abs(fd).max())
        assert np.all(d_window[kind != INSTANT] == 0)


def test_stages_are_timed_and_reported():
    seen: list[str] = []
    with stages.recording() as times, stages.reporting(seen.append):
        with stages.stage("outer"):
            with stages.stage("inner"):
                sum(range(10000))
            with stages.stage("inner"):
                pass
        with stages.stage("other"):
            pass
    assert seen == ["outer", "inner", "inner", "other"]  # depth ≤ PROGRESS_DEPTH
    totals = times.totals()
    assert set(totals) == {"outer", "outer/inner", "other"}
    assert totals["outer"][0] >= totals["outer/inner"][0] >= 0
    with stages.stage("silent"):  # outside recording: nothing kept, nothing raised
        pass
    assert "silent" not in times.totals()


def test_attribute_reports_its_stages(tmp_path):
    from jouleprof.attribution import attribute
    from jouleprof.sensors.simulated_workload import PhaseSpec, simulate_training

    run = simulate_training(
        [PhaseSpec("fwd", 0.03, 500.0), PhaseSpec("bwd", 0.05, 350.0)], 120, seed=3
    )
    path = tmp_path / "run"
    path.mkdir()
    run.samples_frame().to_csv(path / "samples.csv", index=False)
    run.spans_frame().to_csv(path / "spans.csv", index=False)
    seen: list[str] = []
    res = attribute(path, "regression", progress=seen.append)
    assert res.devices[0].phase("fwd").resolved
    assert seen[0] == "reading the run"
    assert any(s.startswith("fit: ") for s in seen)
    assert "fit the chosen model" in seen
