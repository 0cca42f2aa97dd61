"""`RegressionConfig.floor_at_idle`: no phase fitted below the idle power (off by default).

On the H200 reference loops (benchmarks/results/ref_loops, "Tried") the plain fit put user4's
spin at 70 W and pl_resnet50's stall at 99 W, below idle powers of 128-129 W; the floor keeps
them at the idle power. It did not move any verdict there, so it stays off.
"""

from __future__ import annotations

import numpy as np
import pytest

from jouleprof.attribution.common import IDLE, build_timeline
from jouleprof.attribution.placement import fit_powers, floor_map
from jouleprof.attribution.regression import RegressionConfig, attribute_regression
from jouleprof.sensors.simulated_workload import PhaseSpec, simulate_training


def _design(seed: int = 0, n: int = 400):
    """Rows over three labels (idle, busy, spin): each row's shares of its time, summing to 1."""
    rng = np.random.default_rng(seed)
    a = rng.dirichlet([1.0, 1.0, 0.3], size=n)
    return a, rng


def test_the_floor_holds_every_power_at_or_above_the_floor_column():
    a, rng = _design()
    truth = np.array([130.0, 600.0, 130.0])  # the spin draws what idle does
    b = a @ truth + rng.normal(0.0, 40.0, len(a))
    plain = fit_powers(a, b)
    floored = fit_powers(a, b, floor_map(3, 0))
    assert plain[2] < plain[0]  # noise puts the spin below idle without the floor
    assert floored[2] >= floored[0] - 1e-9
    assert floored[2] == pytest.approx(floored[0], abs=1e-6)  # the floor is active
    # A smaller feasible set: never a lower residual than the plain fit's.
    assert np.sum((b - a @ floored) ** 2) >= np.sum((b - a @ plain) ** 2) - 1e-6


def test_a_floor_that_does_not_bind_changes_nothing():
    a, rng = _design(1)
    b = a @ np.array([120.0, 600.0, 300.0]) + rng.normal(0.0, 5.0, len(a))
    np.testing.assert_allclose(fit_powers(a, b, floor_map(3, 0)), fit_powers(a, b), rtol=1e-9)


def test_floor_at_idle_keeps_a_phase_at_idle_power_above_the_idle_fit():
    # A host-side phase that draws the idle power, between idle gaps: its fit scatters about
    # the idle power; with the floor it never falls below it.
    phases = [
        PhaseSpec("data", 0.004, 90.0),
        PhaseSpec("forward", 0.120, 480.0),
        PhaseSpec("backward", 0.200, 600.0),
    ]
    run = simulate_training(phases, 150, span_noise_s=50e-6, gap_s=0.03, seed=3)
    samples = run.samples_frame()
    tl = build_timeline(run.spans_frame(), samples["t_s"].min(), samples["t_s"].max())
    cfg = dict(stall_model=False, bins=False, n_boot=200)
    res = {
        floor: attribute_regression(
            samples, tl, "gpu0", RegressionConfig(floor_at_idle=floor, **cfg)
        ).diagnostics["fitted_power_w"]
        for floor in (False, True)
    }
    on = res[True]
    assert all(p >= on[IDLE] - 1e-6 for p in on.values()), on
    assert on["forward"] == pytest.approx(480.0, rel=0.02)
    assert on["backward"] == pytest.approx(600.0, rel=0.02)
