"""The optimizer priced where it runs (forward+backward+optimizer − forward+backward), beside
the main isolation system, which that loop must not change."""

from __future__ import annotations

import pandas as pd
import pytest

from jouleprof.attribution import build_timeline
from jouleprof.attribution.isolation import (
    IsolationResult,
    attribute_isolation,
    in_place_energies,
    per_call_energies,
    split_loops,
    write_isolation_csv,
)

# Per call: forward 10 J, backward 20 J, optimizer alone 5 J, ema 1 J; forward+backward+
# optimizer 35.5 J, so the optimizer after a backward costs 5.5 J (10 % more than alone).
MAIN = [
    IsolationResult("forward", 100, 6.0, 1000.0, 990.0, 1010.0),
    IsolationResult("forward+backward", 50, 6.0, 1500.0, 1490.0, 1510.0),
    IsolationResult("optimizer", 400, 5.0, 2000.0, 1996.0, 2004.0),
    IsolationResult("ema", 500, 5.0, 500.0, 495.0, 505.0),
]
FBO = IsolationResult("forward+backward+optimizer", 40, 6.4, 1420.0, 1412.0, 1428.0)


def test_the_in_place_optimizer_is_the_difference_with_interval_bounds():
    (opt,) = in_place_energies(MAIN + [FBO]).values()
    assert opt.phase == "optimizer"
    assert opt.energy_j == pytest.approx(35.5 - 30.0)
    # The widest the two bounds allow: low of the first less high of the second, and back.
    assert opt.energy_lo_j == pytest.approx(1412.0 / 40 - 1510.0 / 50)
    assert opt.energy_hi_j == pytest.approx(1428.0 / 40 - 1490.0 / 50)
    assert opt.time_s == pytest.approx(6.4 / 40 - 6.0 / 50)
    assert opt.derived_from == "forward+backward+optimizer − forward+backward"
    # Without the loop, or without the loop of its other phases, there is none.
    assert in_place_energies(MAIN) == {}
    assert in_place_energies([r for r in MAIN if r.replay != "forward+backward"] + [FBO]) == {}


def test_the_extra_loop_leaves_the_main_system_unchanged_in_any_order():
    assert split_loops(MAIN + [FBO]) == (MAIN, [FBO])
    assert split_loops(MAIN) == (MAIN, [])
    before = per_call_energies(MAIN)
    assert per_call_energies(MAIN + [FBO]) == before
    assert per_call_energies([FBO] + MAIN) == before  # kept out by its phases, not its place
    assert before["optimizer"].energy_j == pytest.approx(5.0)
    assert before["optimizer"].derived_from == "optimizer"
    # Repeats of a kept combination are still averaged by least squares.
    again = IsolationResult("optimizer", 400, 5.0, 2400.0, 2396.0, 2404.0)
    assert per_call_energies(MAIN + [again, FBO])["optimizer"].energy_j == pytest.approx(5.5)


def test_the_attribution_keeps_the_isolated_optimizer_and_notes_the_in_place_one():
    sp = pd.DataFrame(
        [
            row
            for s in range(4)
            for row in (
                (s, "forward", 1.0 + s, 1.1 + s),
                (s, "backward", 1.1 + s, 1.3 + s),
                (s, "optimizer", 1.3 + s, 1.31 + s),
                (s, "ema", 1.31 + s, 1.32 + s),
            )
        ],
        columns=["step", "phase", "t0_s", "t1_s"],
    )
    tl = build_timeline(sp, 0.0, 6.0, warmup_steps=1)
    base = attribute_isolation(MAIN, tl, "gpu0", step_energy_j=100.0)
    res = attribute_isolation(MAIN + [FBO], tl, "gpu0", step_energy_j=100.0)
    assert res.phases == base.phases
    assert res.phase("optimizer").energy_j == pytest.approx(3 * 5.0)
    assert res.diagnostics["alternative_replays"] == ["forward+backward+optimizer"]
    assert res.diagnostics["in_place"]["optimizer"]["energy_j"] == pytest.approx(5.5)
    assert any(n.startswith("optimizer in place") for n in res.notes)


def test_attribution_compare_reports_the_optimizer_in_place(load_benchmark, tmp_path):
    ac = load_benchmark("attribution_compare")
    cols = ["phase", "time_s", "energy_j", "energy_lo_j", "energy_hi_j", "time_per_step_s"]
    # Ten steps, one call of each phase a step: each file holds ten steps' energy.
    iso = [
        ("forward", 1.2, 100.0, 99.0, 101.0, 0.12),
        ("backward", 1.2, 200.0, 197.0, 203.0, 0.12),
        ("optimizer", 0.05, 50.0, 49.9, 50.1, 0.005),
    ]
    reg = [(*r[:2], e, e - 1, e + 1, r[5]) for r, e in zip(iso, (100.0, 200.0, 57.75), strict=True)]
    for name, rows in (("isolation", iso), ("regression", reg), ("proportional", reg)):
        df = pd.DataFrame(rows, columns=cols)
        df["device"] = "gpu0"
        df.to_csv(tmp_path / f"phases_{name}.csv", index=False)
    write_isolation_csv(tmp_path, MAIN + [FBO])
    out = ac.compare(tmp_path)
    opt = out["phases"]["optimizer"]
    assert opt["isolation_j"] == pytest.approx(5.0)  # a step
    assert opt["in_place_j"] == pytest.approx(5.5)
    assert opt["in_place_lo_j"] == pytest.approx(1412.0 / 40 - 1510.0 / 50)
    assert opt["in_place_vs_isolation_pct"] == pytest.approx(10.0)
    assert opt["regression_vs_isolation_pct"] == pytest.approx(15.5)
    assert opt["regression_vs_in_place_pct"] == pytest.approx(5.0)
    assert opt["in_place_s"] == pytest.approx(0.04)
    assert opt["in_place_time_ratio"] == pytest.approx(0.04 / 0.005)
    assert "in_place_j" not in out["phases"]["forward"]
    # A run without the loop gets no in-place figures.
    write_isolation_csv(tmp_path, MAIN)
    assert "in_place_j" not in ac.compare(tmp_path)["phases"]["optimizer"]
