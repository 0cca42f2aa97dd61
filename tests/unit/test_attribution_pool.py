"""benchmarks/attribution_pool.py: repeated fine runs pooled against their references."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNS = [ROOT / "benchmarks" / "results" / "attr_vith_b8" / f"run{i}" for i in (4, 6, 7, 8)]


def _phases(d: Path, rows) -> None:
    cols = ["phase", "time_s", "time_per_step_s", "energy_j", "energy_lo_j", "energy_hi_j"]
    pd.DataFrame(rows, columns=cols).to_csv(d, index=False)


def test_pooling_weighs_runs_by_their_intervals_and_scales_for_scatter(tmp_path, load_benchmark):
    pool = load_benchmark("attribution_pool")
    # Two runs of 10 steps: the optimizer 10 % high ±10 % in one, 10 % low ±20 % in the other.
    for name, e, hw in (("a", 11.0, 1.0), ("b", 9.0, 2.0)):
        d = tmp_path / name
        d.mkdir()
        _phases(
            d / "phases_regression.csv",
            [
                ("forward/target", 1.0, 0.1, 500.0, 495.0, 505.0),
                ("forward/context", 0.5, 0.05, 250.0, 245.0, 255.0),
                ("optimizer", 0.06, 0.006, e, e - hw, e + hw),
                ("optimizer+ema", 0.09, 0.009, 15.0, 14.0, 16.0),  # joint rows are left out
                ("ema", 0.03, 0.003, None, None, None),  # unresolved: left out
            ],
        )
        _phases(
            d / "phases_isolation.csv",
            [
                ("forward", 1.5, 0.15, 740.0, 740.0, 740.0),
                ("optimizer", 0.06, 0.006, 10.0, 10.0, 10.0),
                ("ema", 0.03, 0.003, 5.0, 5.0, 5.0),
            ],
        )
    res = pool.pool([tmp_path / "a", tmp_path / "b"])
    assert "ema" not in res["pooled"]
    opt = res["pooled"]["optimizer"]
    # Inverse-variance weights 4:1 → +6 %. The runs disagree beyond their intervals (χ² =
    # 0.8 z² = 3.07 on 1), so the standard error 1/(z√125) is scaled by √χ²: 8 %.
    assert opt["d_pct"] == pytest.approx(6.0)
    assert opt["chi2"] == pytest.approx(0.8 * pool.Z95**2)
    assert opt["se_pct"] == pytest.approx(8.0)
    lo, hi = opt["ci95_pct"]
    assert hi - lo == pytest.approx(2 * pool.Z95 * opt["se_pct"])
    # forward: its children summed (750 J over 10 steps = 75 J) against 74 J.
    fwd = res["per_run"][str(tmp_path / "a")]["forward"]
    assert fwd["regression_j"] == pytest.approx(75.0)
    assert fwd["d"] == pytest.approx(75 / 74 - 1)
    assert fwd["s"] == pytest.approx((5**2 + 5**2) ** 0.5 / 10 / pool.Z95 / 74)


@pytest.mark.skipif(not all((r / "samples.csv").is_file() for r in RUNS), reason="runs absent")
def test_the_h200_runs_pool_to_an_unbiased_optimizer(load_benchmark):
    res = load_benchmark("attribution_pool").pool(RUNS)
    opt = res["pooled"]["optimizer"]
    assert opt["n_runs"] == 3  # run4 leaves it unresolved
    lo, hi = opt["ci95_pct"]
    assert lo < 0 < hi and abs(opt["d_pct"]) < 5
    assert abs(res["pooled"]["forward"]["d_pct"]) < 1
