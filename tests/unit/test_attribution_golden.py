"""Attribution on hand-built timelines whose answer is known exactly."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from jouleprof.attribution import (
    IDLE,
    UNTRACKED,
    IsolationResult,
    auto_warmup_steps,
    build_timeline,
    compare,
    per_call_energies,
    read_isolation_csv,
    write_isolation_csv,
)
from jouleprof.attribution.common import WARMUP
from jouleprof.attribution.isolation import attribute_isolation
from jouleprof.attribution.proportional import attribute_proportional
from jouleprof.attribution.regression import attribute_regression
from jouleprof.attribution.result import AttributionResult
from jouleprof.sensors.simulated import SensorModel
from jouleprof.sensors.simulated_workload import PhaseSpec, simulate_training


def sensor_model(**fields) -> SensorModel:
    """A SensorModel with the given fields, leaving out any this version does not have (the
    power fields' own refresh grid came later than the counter's)."""
    known = {f.name for f in dataclasses.fields(SensorModel)}
    return SensorModel(**{k: v for k, v in fields.items() if k in known})


def spans(*rows: tuple[int, str, float, float]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["step", "phase", "t0_s", "t1_s"])


# -- the exclusive partition -------------------------------------------------------------------


def test_nested_phases_leave_the_parent_its_uncovered_time():
    tl = build_timeline(
        spans(
            (0, "forward", 1.0, 1.010),
            (0, "forward/target", 1.002, 1.005),
            (0, "forward/target/attn", 1.003, 1.004),
            (0, "backward", 1.010, 1.030),
        ),
        0.0,
        2.0,
        warmup_steps=0,
    )
    assert tl.order == ["forward", "forward/target", "forward/target/attn", "backward"]
    assert tl.time_s["forward"] == pytest.approx(0.007)
    assert tl.time_s["forward/target"] == pytest.approx(0.002)
    assert tl.time_s["forward/target/attn"] == pytest.approx(0.001)
    assert tl.time_s["backward"] == pytest.approx(0.020)
    assert tl.step_time_s == pytest.approx(0.030)
    assert tl.inclusive_time_s["forward"] == pytest.approx(0.010)


def test_uncovered_time_in_a_step_is_untracked_and_between_steps_idle():
    tl = build_timeline(
        spans(
            (0, "a", 1.0, 1.004),
            (0, "b", 1.006, 1.010),  # 2 ms inside the step that no phase covers
            (1, "a", 1.030, 1.034),  # 20 ms between steps
            (1, "b", 1.034, 1.040),
        ),
        0.0,
        2.0,
        warmup_steps=0,
    )
    assert tl.time_s[UNTRACKED] == pytest.approx(0.002)
    assert tl.time_s[IDLE] == pytest.approx(0.020)
    assert tl.time_s["a"] == pytest.approx(0.008)
    assert tl.time_s["b"] == pytest.approx(0.010)
    assert tl.step_time_s == pytest.approx(0.020)
    assert tl.order[-1] == IDLE
    # Every instant of [0, 2] s has exactly one label.
    assert tl.overlap_s(np.array([0.0]), np.array([2.0])).sum() == pytest.approx(2.0)


def test_recording_noise_between_phases_and_steps_is_split_at_the_midpoint():
    tl = build_timeline(
        spans(
            (0, "a", 1.0, 1.0101),  # overlaps b by 0.2 ms
            (0, "b", 1.0099, 1.0200),  # leaves 0.2 ms before the next step
            (1, "a", 1.0202, 1.0300),
            (1, "b", 1.0301, 1.0400),  # 0.1 ms gap
        ),
        0.0,
        2.0,
        warmup_steps=0,
    )
    assert UNTRACKED not in tl.time_s and IDLE not in tl.time_s
    assert tl.time_s["a"] == pytest.approx(0.0100 + 0.00995, abs=1e-9)
    assert tl.time_s["b"] == pytest.approx(0.0101 + 0.00995, abs=1e-9)


def test_warmup_steps_are_excluded_as_a_whole():
    rows = [(s, "a", 1.0 + 0.01 * s, 1.005 + 0.01 * s) for s in range(5)]
    rows += [(s, "b", 1.005 + 0.01 * s, 1.01 + 0.01 * s) for s in range(5)]
    tl = build_timeline(spans(*rows), 0.0, 2.0, warmup_steps=2)
    assert tl.warmup_steps == [0, 1] and tl.analysed_steps == [2, 3, 4]
    assert tl.time_s["a"] == pytest.approx(0.015)
    assert tl.counts == {"a": 3, "b": 3}
    w = tl.names.index(WARMUP)
    assert tl.overlap_s(np.array([1.0]), np.array([1.02]))[0, w] == pytest.approx(0.02)


@pytest.mark.parametrize(
    ("durations", "expected"),
    [
        ([1.0] * 10, 1),  # always at least one
        ([9.0, 4.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], 3),  # until stable
        ([9.0, 1.0, 1.0, 3.0, 1.0, 1.0, 1.0, 1.0], 4),  # a hiccup restarts the count
        ([5.0], 0),  # a single step is analysed as it is
        ([5.0, 4.0, 3.0, 2.0, 1.5, 1.2, 1.1, 1.0], 4),  # never more than half
    ],
)
def test_auto_warmup_rule(durations, expected):
    assert auto_warmup_steps(np.array(durations)) == expected


def test_overlap_with_jitter_is_the_expected_overlap():
    tl = build_timeline(spans((0, "a", 1.0, 1.004), (0, "b", 1.004, 1.010)), 0.0, 2.0, 0)
    t0, t1 = np.array([1.001]), np.array([1.006])
    a, b = tl.names.index("a"), tl.names.index("b")
    rng = np.random.default_rng(0)
    d = rng.normal(0.0, 0.001, (4000, 2))
    mc = np.mean([tl.overlap_s(t0 + x, t1 + y)[0] for x, y in d], axis=0)
    exact = tl.overlap_s(t0, t1, jitter_s=0.001)[0]
    assert exact[a] == pytest.approx(mc[a], abs=2e-5)
    assert exact[b] == pytest.approx(mc[b], abs=2e-5)


# -- the methods on an exact sensor ----------------------------------------------------------


def exact_run(power_a_w: float, power_b_w: float, idle_w: float):
    """200 steps of a (40 ms) then b (60 ms); refreshes on exact grids, exact counter."""
    phases = [PhaseSpec("a", 0.04, power_a_w), PhaseSpec("b", 0.06, power_b_w)]
    model = sensor_model(refresh_jitter_s=0.0, power_refresh_jitter_s=0.0)
    run = simulate_training(phases, 200, idle_w=idle_w, seed=3, model=model)
    samples, sp = run.samples_frame(), run.spans_frame()
    tl = build_timeline(sp, samples["t_s"].min(), samples["t_s"].max())
    truth = run.true_energy_in_steps_j(set(tl.analysed_steps))
    return run, samples, tl, truth


def isolation_rows(power_a_w: float, power_b_w: float) -> list[IsolationResult]:
    """Replay loops of a, and of a+b, as a runner would write them (±0.1 % bounds)."""
    e_a, e_ab = 200 * 0.04 * power_a_w, 200 * (0.04 * power_a_w + 0.06 * power_b_w)
    return [
        IsolationResult("a", 200, 8.0, e_a, 0.999 * e_a, 1.001 * e_a),
        IsolationResult("a+b", 200, 20.0, e_ab, 0.999 * e_ab, 1.001 * e_ab),
    ]


def test_equal_power_phases_every_method_is_exact():
    _, samples, tl, truth = exact_run(300.0, 300.0, 300.0)
    reg = attribute_regression(samples, tl, "gpu0")
    prop = attribute_proportional(samples, tl, "gpu0")
    counts = tl.counts
    iso = attribute_isolation(isolation_rows(300.0, 300.0), tl, "gpu0", reg.step_energy_j)
    for name in ("a", "b"):
        for res in (reg, prop):
            p = res.phase(name)
            assert p.resolved
            assert p.energy_j == pytest.approx(truth[name], rel=1e-3), (res.method, name)
            assert p.energy_lo_j <= p.energy_j <= p.energy_hi_j
        # Isolation is exact per call; the run's phase lasted what it lasted (5 % jitter).
        dur = {"a": 0.04, "b": 0.06}[name]
        assert iso.phase(name).energy_j == pytest.approx(counts[name] * dur * 300.0)
        assert iso.phase(name).mean_power_w == pytest.approx(300.0)


def test_unequal_powers_regression_exact_proportional_splits_by_time():
    _, samples, tl, truth = exact_run(200.0, 500.0, 200.0)
    reg = attribute_regression(samples, tl, "gpu0")
    prop = attribute_proportional(samples, tl, "gpu0")
    total = sum(truth.values())
    for name, power in (("a", 200.0), ("b", 500.0)):
        r = reg.phase(name)
        assert r.energy_j == pytest.approx(truth[name], rel=1e-3)
        assert r.mean_power_w == pytest.approx(power, rel=1e-3)
        # The interval is ±0.01 % here; allow the golden tolerance around it.
        assert (
            r.energy_lo_j - 1e-3 * truth[name] <= truth[name] <= r.energy_hi_j + 1e-3 * truth[name]
        )
        # The baseline's golden value: the measured total times the time share.
        share = tl.time_s[name] / tl.step_time_s
        assert prop.phase(name).energy_j == pytest.approx(total * share, rel=1e-3)
    assert prop.phase("a").energy_j > 1.5 * truth["a"]  # time share is not energy share
    assert sum(p.share_pct for p in reg.phases) == pytest.approx(100.0)


def test_isolation_differences_and_propagates_bounds():
    rows = [
        IsolationResult("forward", 100, 6.0, 1000.0, 990.0, 1010.0),
        IsolationResult("forward+backward", 50, 6.0, 1500.0, 1490.0, 1510.0),
        IsolationResult("optimizer", 400, 5.0, 2000.0, 1996.0, 2004.0),
    ]
    per = per_call_energies(rows)
    assert per["forward"].energy_j == pytest.approx(10.0)
    assert per["backward"].energy_j == pytest.approx(20.0)
    # backward = (f+b) − f: the widest the two bounds allow.
    assert per["backward"].energy_lo_j == pytest.approx(29.8 - 10.1)
    assert per["backward"].energy_hi_j == pytest.approx(30.2 - 9.9)
    assert per["backward"].time_s == pytest.approx(0.12 - 0.06)
    assert per["backward"].derived_from == "forward+backward − forward"
    assert per["optimizer"].energy_j == pytest.approx(5.0)
    # A combination replayed only as a whole cannot be split.
    assert per_call_energies([IsolationResult("a+b", 10, 6.0, 100.0, 99.0, 101.0)]) == {}


def test_isolation_csv_round_trip(tmp_path):
    rows = isolation_rows(200.0, 500.0) + [
        IsolationResult("ema", 1000, 5.5, 123.456, 120.0, 126.0, "power_instant", "gpu1")
    ]
    write_isolation_csv(tmp_path, rows)
    assert read_isolation_csv(tmp_path) == rows


def test_isolation_scales_to_the_runs_calls_and_leaves_the_rest_unresolved():
    sp = spans(
        *[(s, "data", 1.0 + s, 1.1 + s) for s in range(4)],
        *[(s, "a", 1.1 + s, 1.5 + s) for s in range(4)],
        *[(s, "b", 1.5 + s, 1.9 + s) for s in range(4)],
        *[(s, "b", 1.9 + s, 2.0 + s) for s in range(4)],  # b twice a step
    )
    tl = build_timeline(sp, 0.0, 6.0, warmup_steps=1)
    res = attribute_isolation(isolation_rows(200.0, 500.0), tl, "gpu0", step_energy_j=1000.0)
    assert res.phase("a").energy_j == pytest.approx(3 * 0.04 * 200.0)
    assert res.phase("b").energy_j == pytest.approx(6 * 0.06 * 500.0)
    assert res.phase("b").mean_power_w == pytest.approx(500.0)
    assert res.phase("a").share_pct == pytest.approx(100 * 24.0 / 1000.0)
    data = res.phase("data")
    assert not data.resolved and data.energy_j is None and "not replayed" in data.note


def test_compare_gives_the_percentage_difference_per_phase():
    _, samples, tl, _ = exact_run(200.0, 500.0, 200.0)
    prop = attribute_proportional(samples, tl, "gpu0")
    reg = attribute_regression(samples, tl, "gpu0")
    iso = attribute_isolation(isolation_rows(200.0, 500.0), tl, "gpu0")
    d_reg = compare(AttributionResult("regression", [reg]), iso)
    d_prop = compare(prop, iso)
    for name in ("a", "b"):
        ref = iso.phase(name).energy_j
        assert d_prop[name] == pytest.approx(100 * (prop.phase(name).energy_j - ref) / ref)
        # Isolation counts nominal call durations; the run's durations jittered by 5 %.
        assert abs(d_reg[name]) < 5.0
    assert d_prop["a"] > 50.0


def test_isolation_windows_are_measured_from_the_runs_samples(tmp_path):
    """The runner writes only windows of time; their energy comes from samples.csv."""
    import csv

    from jouleprof.attribution.isolation import WINDOWS_CSV, load_replays

    run, samples, tl, _ = exact_run(200.0, 500.0, 200.0)
    # Steps 20-119 as one "replay" window of a+b: 100 calls.
    t0 = float(run.spans_frame().query("step == 20")["t0_s"].min())
    t1 = float(run.spans_frame().query("step == 119")["t1_s"].max())
    with (tmp_path / WINDOWS_CSV).open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["replay", "n_calls", "t0_s", "t1_s", "time_per_call_s"])
        w.writerow(["a+b", 100, t0, t1, (t1 - t0) / 100])
    (rep,) = load_replays(tmp_path, samples, "gpu0")
    truth = run.schedule.energy_j(t0, t1)
    assert rep.replay == "a+b" and rep.n_calls == 100 and rep.signal == "counter"
    assert rep.time_s == pytest.approx(t1 - t0)
    assert rep.energy_j == pytest.approx(truth, rel=1e-3)
    assert rep.energy_lo_j <= truth <= rep.energy_hi_j
