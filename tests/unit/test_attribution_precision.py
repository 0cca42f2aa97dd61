"""attribution.precision: how many steps a phase's interval needs to reach a target."""

from __future__ import annotations

import pytest

from jouleprof.attribution.precision import plan, plan_text, steps_needed
from jouleprof.attribution.result import DeviceAttribution, PhaseResult


def _phase(name, e, hw, n=1000, resolved=True):
    lo, hi = (e - hw, e + hw) if resolved else (None, None)
    return PhaseResult(
        name,
        1.0,
        1e-3,
        e if resolved else None,
        lo,
        hi,
        500.0,
        3.0,
        "regression",
        resolved,
        n_steps=n,
    )


def test_noise_falls_as_one_over_root_steps():
    # ±20 % from 1,000 steps: ±5 % needs 16 × the steps; ±10 %, 4 ×.
    assert steps_needed(0.20, 1000, 0.05) == 16000
    assert steps_needed(0.20, 1000, 0.10) == 4000
    # A fixed part adds in quadrature and stays: ±20 % of which 3 % fixed, target 5 %.
    n = steps_needed(0.20, 1000, 0.05, 0.03)
    assert n == pytest.approx(1000 * (0.2**2 - 0.03**2) / (0.05**2 - 0.03**2), abs=1)
    assert steps_needed(0.20, 1000, 0.05, 0.05) is None  # no number of steps reaches it
    assert steps_needed(0.04, 1000, 0.05) == 1000  # already there: never fewer than now
    with pytest.raises(ValueError, match="positive"):
        steps_needed(0.2, 0, 0.05)


def test_plan_counts_the_bin_and_window_moves_as_the_fixed_part():
    res = DeviceAttribution(
        "gpu0",
        "regression",
        [
            _phase("forward", 60_000.0, 600.0),  # ±1 %: already inside 5 %
            _phase("optimizer", 3_000.0, 600.0),  # ±20 %, of which bins and window move it 6 %
            _phase("ema", 2_000.0, 400.0),  # ±20 %, no move recorded
            _phase("data", 0.0, 0.0, resolved=False),
        ],
        n_steps=1000,
        warmup_steps=1,
        step_time_s=0.2,
        step_energy_j=65_000.0,
        diagnostics={
            "bins": {"length_check": {"moved_j": {"optimizer": 144.0}}},
            "buffer_window_choice": {"moved_j": {"optimizer": 108.0}},  # 144 ⊕ 108 = 180 J
        },
    )
    by = {n.phase: n for n in plan(res, 0.05)}
    assert set(by) == {"optimizer", "ema"}
    assert by["optimizer"].fixed_rel == pytest.approx(0.06) and by["optimizer"].steps_needed is None
    assert by["ema"].steps_needed == 16000
    assert "out of reach" in plan_text(by["optimizer"], 0.05, 0.2)
    text = plan_text(by["ema"], 0.05, 0.2)
    assert "16,000 steps" in text and "~53 min" in text
