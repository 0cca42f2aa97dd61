"""benchmarks/attribution_compare.py: a second reference for a phase whose replay ran long."""

from __future__ import annotations

import pandas as pd
import pytest

COLS = ["phase", "time_s", "energy_j", "energy_lo_j", "energy_hi_j", "time_per_step_s"]


def _phases(path, rows):
    df = pd.DataFrame(rows, columns=COLS)
    df["device"] = "gpu0"
    df.to_csv(path, index=False)


def test_an_unfaithful_replay_gets_the_step_less_the_other_phases(load_benchmark, tmp_path):
    ac = load_benchmark("attribution_compare")
    # Ten steps: each file holds ten steps' energy.
    # In the steps: data 1 J, forward 60 J, backward 40 J, optimizer 3 J (104 J a step).
    _phases(
        tmp_path / "phases_proportional.csv",
        [
            ("data", 0.01, 10.0, 10.0, 10.0, 0.001),
            ("forward", 0.9, 600.0, 600.0, 600.0, 0.09),
            ("backward", 0.8, 400.0, 400.0, 400.0, 0.08),
            ("optimizer", 0.05, 30.0, 30.0, 30.0, 0.005),
        ],
    )
    # Alone, the backward's replay ran 20 ms longer a call, drawing 150 W: 3 J more.
    _phases(
        tmp_path / "phases_isolation.csv",
        [
            ("data", 0.01, None, None, None, 0.001),
            ("forward", 0.9, 600.0, 590.0, 610.0, 0.09),
            ("backward", 0.8, 430.0, 420.0, 440.0, 0.08),
            ("optimizer", 0.05, 30.0, 29.0, 31.0, 0.005),
        ],
    )
    _phases(
        tmp_path / "phases_regression_x.csv",
        [
            ("forward", 0.9, 600.0, 590.0, 610.0, 0.09),
            ("backward", 0.8, 396.0, 390.0, 402.0, 0.08),
            ("optimizer", 0.05, 40.0, 30.0, 50.0, 0.005),
        ],
    )
    pd.DataFrame(
        {
            "replay": ["forward", "forward+backward", "optimizer"],
            "n_calls": [10, 10, 10],
            "t0_s": [0.0, 1.0, 3.0],
            "t1_s": [0.9, 2.9, 3.05],
            "time_per_call_s": [0.09, 0.19, 0.005],
        }
    ).to_csv(tmp_path / "isolation_windows.csv", index=False)
    out = ac.compare(tmp_path, "phases_regression_x.csv")
    assert out["regression_file"] == "phases_regression_x.csv"
    bwd = out["phases"]["backward"]
    assert bwd["replay_faithful"] is False and bwd["replay_time_ratio"] == pytest.approx(1.25)
    assert bwd["regression_vs_isolation_pct"] == pytest.approx(100 * (39.6 / 43 - 1))
    # 104 J − (60 + 3) J isolated − 1 J data (not replayed: its proportional share) = 40 J.
    assert bwd["difference_j"] == pytest.approx(40.0)
    assert bwd["not_replayed_j"] == pytest.approx(1.0)
    assert bwd["regression_vs_difference_pct"] == pytest.approx(-1.0)
    assert bwd["replay_extra_power_w"] == pytest.approx(3.0 / 0.02)
    assert "difference_j" not in out["phases"]["forward"]  # its replay is faithful


def test_isolation_on_a_simulated_gpu_says_the_replays_were_not_simulated(tmp_path):
    from jouleprof.attribution.isolation import load_replays
    from jouleprof.errors import AttributionError

    (tmp_path / "isolation_windows.csv").write_text("replay,n_calls,t0_s,t1_s\nforward,5,1.0,2.0\n")
    with pytest.raises(AttributionError, match="simulated GPU .sim0. covers the training steps"):
        load_replays(tmp_path, pd.DataFrame(), "sim0")
