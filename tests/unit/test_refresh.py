import numpy as np
import pandas as pd
import pytest

from jouleprof.sensors.refresh import (
    RefreshEstimate,
    counter_points,
    detect_device_refresh,
    detect_refresh,
)
from jouleprof.sensors.simulated import SensorModel
from jouleprof.sensors.simulated_workload import PhaseSpec, simulate_training

PHASES = [
    PhaseSpec("forward", 0.12, 480),
    PhaseSpec("backward", 0.2, 600),
    PhaseSpec("opt", 0.03, 430),
]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_power_field_grid_is_recovered_from_its_updates(seed):
    run = simulate_training(PHASES, steps=150, seed=seed)
    est = detect_device_refresh(run.samples_frame(), "gpu0", "power_instant_w")
    assert est is not None and est.method == "grid"
    assert est.period_s == pytest.approx(run.sensor.model.power_refresh_s, rel=5e-4)
    true = np.array(run.sensor.power_refresh_instants_s(run.schedule.end_s))
    k = np.round((true - est.offset_s) / est.period_s)
    err = true - (est.offset_s + k * est.period_s)
    assert abs(np.mean(err)) < 0.003
    assert np.std(err) < 0.006


@pytest.mark.parametrize("period_s", [0.1, 0.1000039, 0.10002])
def test_counter_grid_is_recovered_from_sparse_counter_reads(period_s):
    # The counter is read about once per refresh (it costs ~5 ms a read on an H200), on its own
    # grid, which the power fields do not share: only which read gaps saw it move tells its grid.
    model = SensorModel(refresh_s=period_s, refresh_jitter_s=0.0017)
    run = simulate_training(PHASES, steps=500, model=model, seed=5)
    df = run.samples_frame()
    est = detect_device_refresh(df, "gpu0")
    assert est.signal == "energy_j" and est.method.startswith("counter-gaps")
    assert est.period_s == pytest.approx(period_s, rel=2e-5)
    true = np.array(run.sensor.refresh_instants_s(run.schedule.end_s))
    k = np.round((true - est.offset_s) / est.period_s)
    err = true - (est.offset_s + k * est.period_s)
    assert abs(np.mean(err)) < 0.003  # over the whole run: no drift
    assert abs(np.mean(err[:100])) < 0.004 and abs(np.mean(err[-100:])) < 0.004
    assert np.std(err) < 0.003


def test_reads_too_sparse_to_see_refreshes_are_refused():
    t = np.arange(0, 60, 0.5)
    v = np.arange(len(t), dtype=float)  # changes on every read: aliased, period unknowable
    assert detect_refresh(t, v) is None


def test_counter_points_place_values_at_refresh_instants():
    run = simulate_training(PHASES, steps=60, seed=4)
    df = run.samples_frame()
    est = detect_device_refresh(df, "gpu0")
    tau, c = counter_points(df["t_s"].to_numpy(), df["energy_j"].to_numpy(), est)
    assert np.all(np.diff(tau) > 0) and np.all(np.diff(c) > 0)
    # Each point's value is the true cumulative energy at that refresh instant, within jitter.
    origin = run.sensor.model.counter_origin_j
    truth = np.array([origin + run.schedule.energy_until_j(t) for t in tau])
    assert np.max(np.abs(truth - c)) < 0.01 * 700  # < 10 ms of full power


def test_a_jitter_free_grid_read_sparsely_gets_a_finite_placement_error():
    # A counter ticking exactly every 100 ms, read about once a refresh: every gap agrees with
    # a band of offsets and the jitter fits at its floor, where the likelihood is flat. The
    # curvature read that as 0.86 s and 168 s on the H200 (run4/run5), leaving the regression's
    # counter shift free; the profile likelihood bounds it (at least 1 ms at the floor).
    from jouleprof.sensors.refresh_fit import fit_jitter_grid

    rng = np.random.default_rng(3)
    t = np.cumsum(rng.uniform(0.075, 0.125, 1500))  # 150 s, as in a fine run
    period_s, offset_s = 0.1, 0.0437
    energy_j = np.floor((t - offset_s) / period_s) * 40.0  # one step per refresh
    start = RefreshEstimate("energy_j", period_s, offset_s + 0.0004, 0.0, 0, 0.1, "test")
    jg = fit_jitter_grid(t, energy_j, start)
    assert jg.method == "mle" and jg.jitter_s < 1e-4
    assert 1e-3 <= jg.offset_se_s < 5e-3
    assert jg.period_se_s < 1e-4


def test_a_near_floor_jitter_gets_a_bounded_error():
    # A counter whose instants jitter by tens of µs, read about once a refresh for 240 s: σ
    # fits just above its floor, where the curvature gave 83 s for this draw (19 s on the
    # H200's run6) and the regression's σ perturbation then blurred every row by seconds.
    from jouleprof.sensors.refresh_fit import fit_jitter_grid

    rng = np.random.default_rng(2)
    t = np.cumsum(rng.uniform(0.085, 0.131, 2400))
    instants = 0.0437 + 0.1 * np.arange(2700) + rng.normal(0.0, 25e-6, 2700)
    energy_j = np.searchsorted(instants, t) * 40.0
    start = RefreshEstimate("energy_j", 0.1, 0.0441, 0.0, 0, 0.1, "test")
    jg = fit_jitter_grid(t, energy_j, start)
    assert jg.method == "mle" and jg.jitter_s < 1e-4
    assert jg.jitter_s <= jg.jitter_se_s < 1e-3


def _power_reads(late_period_s: float, seed: int = 0):
    """240 s of instant power read every ~20 ms; the refresh period is 100.10 ms, then
    `late_period_s` from 120 s on; instants jitter by 0.5 ms."""
    rng = np.random.default_rng(seed)
    inst, t = [], 0.0137
    while t < 240:
        inst.append(t)
        t += 0.10010 if t < 120 else late_period_s
    instants = np.array(inst) + rng.normal(0.0, 0.5e-3, len(inst))
    reads = np.cumsum(rng.uniform(0.015, 0.025, 12500))
    reads = reads[reads < 240]
    values = rng.uniform(300, 700, len(instants) + 1)[np.searchsorted(instants, reads)]
    return pd.DataFrame(
        {
            "t_s": reads,
            "device": "gpu0",
            "power_w": np.nan,
            "power_instant_w": values,
            "energy_j": np.nan,
        }
    )


def test_a_power_grid_whose_period_moves_is_fitted_in_pieces():
    # The power fields' period moves with the load (run6 on the H200: 100.16–100.23 ms in 60 s
    # pieces): one grid for 240 s then jitters by many ms, and few readings can be placed on
    # it. Pieces of ~60 s each find their own period, within the true 0.5 ms jitter.
    from jouleprof.attribution.grid import device_grids, power_pieces

    df = _power_reads(0.10030)
    whole = device_grids(df, df, use_counter=False)[0]["power"]
    assert whole.jitter_s > 5e-3
    pieces = power_pieces(df, whole)
    assert pieces is not None and len(pieces) == 4
    periods = [g.grid.period_s for _, _, g in pieces]
    assert periods[:2] == pytest.approx([0.10010] * 2, abs=2e-6)
    assert periods[2:] == pytest.approx([0.10030] * 2, abs=2e-6)
    assert all(g.jitter_s < 1e-3 for _, _, g in pieces)
    # A run whose single grid holds is left whole, and so is a short one.
    steady = _power_reads(0.10010)
    one = device_grids(steady, steady, use_counter=False)[0]["power"]
    assert one.jitter_s < 1e-3 and power_pieces(steady, one) is None
    assert power_pieces(df[df["t_s"] < 100], whole) is None
