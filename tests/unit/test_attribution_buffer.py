"""NVML's power buffer as regression rows: one row per ~20 ms sample, placed before its stamp.

The simulated buffer samples the true power every 12–28 ms, each sample the power weighed by
an exponential kernel over the 50 ms that ended 5 ms before its stamp, read 3 % high, with
2 W of noise. The simulated sampler's readings keep only the energy counter, so that without
the buffer the two short phases (6 and 4 ms) are beyond what 150 steps resolve.
"""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pandas as pd
import pytest

from jouleprof.attribution import attribute
from jouleprof.attribution.kernels import exponential
from jouleprof.attribution.regression import RegressionConfig
from jouleprof.attribution.rows import (
    BUFFER,
    COUNTER,
    SensorRows,
    buffer_rows,
    buffer_scale,
    merge_rows,
)
from jouleprof.errors import AttributionError
from jouleprof.sensors.simulated_workload import PhaseSpec, simulate_training

PHASES = [
    PhaseSpec("forward", 0.06, 700, 0.03),
    PhaseSpec("backward", 0.08, 450, 0.05),
    PhaseSpec("optimizer", 0.006, 620, 0.05),
    PhaseSpec("ema", 0.004, 250, 0.05),
]
KERNEL = exponential()
WINDOW_S, LAG_S, SCALE = 0.050, 0.005, 1.03
BUFFER_OPTS = {
    "use_buffer": True,
    "buffer_kernel": KERNEL,
    "buffer_window_s": WINDOW_S,
    "buffer_lag_s": LAG_S,
    "buffer_window_scales": (),  # the true window: its choice is tested on its own
}


def simulated_buffer(run, kernel=KERNEL, window_s=WINDOW_S, lag_s=LAG_S, scale=SCALE, seed=0):
    """power_buffer.csv of a simulated run: the schedule's power weighed by `kernel` over
    `window_s` ending `lag_s` before each stamp, times `scale`, plus 2 W of noise."""
    rng = np.random.default_rng(seed)
    t = 0.3 + np.cumsum(rng.uniform(0.012, 0.028, int(run.schedule.end_s / 0.012)))
    t = t[t < run.schedule.end_s - 0.3]
    p = np.zeros(len(t))
    for start, end, weight in kernel:
        a, b = t - lag_s - start * window_s, t - lag_s - end * window_s
        p += weight * np.array([run.schedule.mean_power_w(x, y) for x, y in zip(a, b, strict=True)])
    p = scale * p + rng.normal(0.0, 2.0, len(t))
    return pd.DataFrame(
        {"t_s": t, "device": "gpu0", "power_w": p, "timestamp_us": (1e6 * t).astype(np.int64)}
    )


@pytest.fixture(scope="module")
def counter_run(tmp_path_factory):
    """A run directory whose samples hold only the counter, and its power buffer."""
    d = tmp_path_factory.mktemp("buffer_run")
    run = simulate_training(PHASES, 150, seed=0, span_noise_s=20e-6)
    s = run.samples_frame()
    s["power_instant_w"] = np.nan
    s["power_w"] = np.nan
    s.to_csv(d / "samples.csv", index=False)
    pd.DataFrame([asdict(x) for x in run.spans]).to_csv(d / "spans.csv", index=False)
    simulated_buffer(run).to_csv(d / "power_buffer.csv", index=False)
    return d, run


def _phases(result):
    return _phases_of(result.devices[0])


def _phases_of(dev):
    return {p.phase: p for p in dev.phases}


def test_a_buffer_row_is_the_window_before_its_stamp_less_the_lag():
    buf = pd.DataFrame({"t_s": [0.5, 1.0, 1.02, 9.9], "power_w": [100.0, 200.0, 300.0, 400.0]})
    rows = buffer_rows(buf, 0.05, 0.005, 0.5, (0.0, 9.0))
    np.testing.assert_allclose(rows.t1_s, [0.495, 0.995, 1.015])
    np.testing.assert_allclose(rows.t0_s, [0.445, 0.945, 0.965])
    np.testing.assert_allclose(rows.power_w, [100.0, 200.0, 300.0])  # 9.9 s: past the samples
    assert (rows.kind == BUFFER).all() and (rows.weight == 0.5).all()
    counter = SensorRows(
        np.array([0.9, 0.4]),
        np.array([1.0, 0.5]),
        np.array([1.0, 2.0]),
        np.array([COUNTER, COUNTER]),
        np.ones(2),
    )
    merged = merge_rows(counter, rows)
    assert np.all(np.diff(merged.mid_s) >= 0) and len(merged) == 5
    with pytest.raises(ValueError, match="window"):
        buffer_rows(buf, 0.0, 0.005, 0.5, (0.0, 9.0))


def test_the_buffers_scale_is_set_against_the_counter():
    # A constant 300 W: counter rows of 100 ms read 300 W, the buffer 3 % high.
    t0 = np.arange(1.0, 11.0, 0.1)
    counter = SensorRows(
        t0, t0 + 0.1, np.full(len(t0), 300.0), np.full(len(t0), COUNTER), np.ones(len(t0))
    )
    stamps = np.arange(0.5, 11.5, 0.02)
    sc = buffer_scale(counter, stamps, np.full(len(stamps), 309.0), lag_s=0.005)
    assert sc.scale == pytest.approx(1.03, abs=1e-6)
    assert sc.n_blocks == 2 and sc.seconds == pytest.approx(10.0)


def test_the_runs_buffer_is_used_and_resolves_what_the_counter_alone_cannot(counter_run):
    d, run = counter_run
    truth = run.true_energy_j
    alone = _phases(attribute(d, "regression", None, 0, stall_model=False, use_buffer=False))
    assert not alone["ema"].resolved  # 4 ms: beyond the counter alone in 150 steps
    res = attribute(d, "regression", None, 0, stall_model=False, **BUFFER_OPTS)
    dev = res.devices[0]
    buf = dev.diagnostics["buffer"]
    assert buf is not None and buf["n_rows"] > 1000  # read from power_buffer.csv
    assert buf["lag_fitted_s"] == pytest.approx(LAG_S, abs=5e-4)
    # The buffer reads 3 % high; the counter sets the scale, so the energies stay exact.
    assert buf["scale_vs_counter"]["scale"] == pytest.approx(SCALE, abs=0.003)
    assert dev.step_energy_j == pytest.approx(sum(truth.values()) - truth.get("idle", 0), rel=2e-3)
    rows = _phases(res)
    for name, tol in (("forward", 0.01), ("backward", 0.01), ("optimizer", 0.05), ("ema", 0.05)):
        r = rows[name]
        assert r.resolved, (name, r.note)
        assert r.energy_j == pytest.approx(truth[name], rel=tol), name
        assert r.energy_lo_j <= truth[name] <= r.energy_hi_j, name
    # The intervals carry the window's own uncertainty (±25 % by default): the large phases'
    # stay about as wide as from the counter alone.
    assert any("power buffer" in n for n in dev.notes)


def test_the_runs_own_buffer_rows_choose_the_kernels_length(counter_run):
    # Told 60 ms (the simulated kernel spans 50 ms), the fit tries 40, 50, 60 and 75 ms and
    # keeps the length whose buffer rows fit best; the neighbours' move widens the intervals.
    d, run = counter_run
    told = {
        **BUFFER_OPTS,
        "buffer_window_s": 0.060,
        "buffer_window_scales": (2 / 3, 5 / 6, 1.0, 1.25),
    }
    dev = attribute(d, "regression", None, 0, stall_model=False, **told).devices[0]
    choice = dev.diagnostics["buffer_window_choice"]
    assert choice["window_s"] == pytest.approx(WINDOW_S)
    rms = choice["residual_rms_w"]
    assert min(rms, key=rms.get) == "0.05" and not choice["at_edge"]
    assert set(choice["moved_j"]) >= {"forward", "backward", "optimizer", "ema"}
    assert any(n.startswith("buffer window: 50 ms fits") for n in dev.notes)
    rows = _phases_of(dev)
    for name in ("forward", "backward", "optimizer", "ema"):
        r = rows[name]
        assert r.resolved and r.energy_lo_j <= run.true_energy_j[name] <= r.energy_hi_j, name
        assert "buffer windows of 40/60 ms" in r.note, r.note
    assert rows["optimizer"].energy_j == pytest.approx(run.true_energy_j["optimizer"], rel=0.05)


def test_a_best_length_at_the_edge_is_looked_past(counter_run):
    # Told 32 ms with only ×1 and ×1.25 to try, the best (40 ms) is at the edge: the fit tries
    # 50 and 62.5 ms too, and keeps the simulated 50 ms.
    d, _ = counter_run
    told = {**BUFFER_OPTS, "buffer_window_s": 0.032, "buffer_window_scales": (1.0, 1.25)}
    dev = attribute(d, "regression", None, 0, stall_model=False, **told).devices[0]
    choice = dev.diagnostics["buffer_window_choice"]
    assert choice["window_s"] == pytest.approx(WINDOW_S)
    assert sorted(float(k) for k in choice["residual_rms_w"]) == pytest.approx(
        [0.032, 0.04, 0.05, 0.0625]
    )
    assert not choice["at_edge"]


def test_buffer_rows_placed_at_the_wrong_time_do_not_fit(counter_run):
    d, run = counter_run
    right = attribute(d, "regression", None, 0, stall_model=False, **BUFFER_OPTS).devices[0]
    # The lag is refined from the data: a prior 3 ms off comes back to the truth.
    off = {**BUFFER_OPTS, "buffer_lag_s": LAG_S + 0.003}
    moved = attribute(d, "regression", None, 0, stall_model=False, **off).devices[0]
    assert moved.diagnostics["buffer"]["lag_fitted_s"] == pytest.approx(LAG_S, abs=5e-4)
    # Held 25 ms off, the rows cannot be fitted, and the short phases go wrong.
    wrong = {**BUFFER_OPTS, "buffer_lag_s": LAG_S + 0.025, "buffer_lag_sd_s": 0.0}
    bad = attribute(d, "regression", None, 0, stall_model=False, **wrong).devices[0]
    res_right = right.diagnostics["rows"]["power_buffer"]["residual_rms_w"]
    res_bad = bad.diagnostics["rows"]["power_buffer"]["residual_rms_w"]
    assert res_right < 5.0 and res_bad > 10 * res_right
    ema = {p.phase: p for p in bad.phases}["ema"]
    assert ema.energy_j is None or abs(ema.energy_j / run.true_energy_j["ema"] - 1) > 0.3


def test_the_lag_floor_widens_intervals_the_lag_moves_and_keeps_the_estimates(counter_run):
    """The lag a run fits is pinned to 0.1-0.2 ms by its own rows, while loops on one card fit
    lags ~0.8 ms apart: the floor carries the lag at that σ at least. It widens the phases the
    lag moves (the short ones between two others most) and moves no estimate."""
    d, _ = counter_run
    none = {**BUFFER_OPTS, "buffer_lag_floor_sd_s": 0.0}
    plain = attribute(d, "regression", None, 0, stall_model=False, **none).devices[0]
    floor = {**BUFFER_OPTS, "buffer_lag_floor_sd_s": 0.002}
    wide = attribute(d, "regression", None, 0, stall_model=False, **floor).devices[0]
    a, b = _phases_of(plain), _phases_of(wide)
    # wider intervals resolve no phase the plain fit left unresolved (a joint one may appear)
    resolved = lambda ph: {n for n, p in ph.items() if p.resolved and "+" not in n}  # noqa: E731
    assert resolved(b) <= resolved(a) and len(resolved(b)) >= 2
    widened = 0
    for name, p in a.items():
        q = b.get(name)
        if q is None or not (p.resolved and q.resolved):
            continue
        assert q.energy_j == pytest.approx(p.energy_j, rel=1e-9)
        wa, wb = p.energy_hi_j - p.energy_lo_j, q.energy_hi_j - q.energy_lo_j
        assert wb >= wa * (1 - 1e-9), name
        widened += wb > 1.05 * wa
    assert widened >= 1
    # A floor below the posterior's own σ adds nothing.
    tiny = {**BUFFER_OPTS, "buffer_lag_floor_sd_s": 1e-7}
    same = attribute(d, "regression", None, 0, stall_model=False, **tiny).devices[0]
    for name, p in a.items():
        q = _phases_of(same)[name]
        assert (q.energy_lo_j, q.energy_hi_j) == (p.energy_lo_j, p.energy_hi_j), name


def test_without_power_buffer_csv_the_regression_is_unchanged(counter_run, tmp_path):
    d, _ = counter_run
    for name in ("samples.csv", "spans.csv"):
        (tmp_path / name).write_bytes((d / name).read_bytes())
    plain = attribute(tmp_path, "regression", None, 0, stall_model=False)
    off = attribute(d, "regression", None, 0, stall_model=False, use_buffer=False)
    assert plain.devices[0].diagnostics["buffer"] is None
    assert [p.energy_j for p in plain.devices[0].phases] == [
        p.energy_j for p in off.devices[0].phases
    ]
    with pytest.raises(AttributionError, match="power-buffer"):
        attribute(tmp_path, "regression", None, 0, stall_model=False, use_buffer=True)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("buffer_window_s", 0.0, "buffer_window_s"),
        ("buffer_weight", -1.0, "buffer_weight"),
        ("buffer_kernel", ((1.0, 0.0, 0.5),), "buffer_kernel"),
        ("buffer_window_rel_sd", 1.0, "buffer_window_rel_sd"),
        ("buffer_lag_sd_s", -0.001, "buffer_lag_sd_s"),
        ("buffer_lag_floor_sd_s", -0.001, "buffer_lag_floor_sd_s"),
        ("buffer_window_scales", (1.0, 0.0), "buffer_window_scales"),
    ],
)
def test_buffer_settings_are_checked(field, value, match):
    with pytest.raises(ValueError, match=match):
        RegressionConfig(**{field: value})


def test_buffer_rows_are_used_wherever_recorded(counter_run):
    # On by default where power_buffer.csv holds samples (None); False turns them off.
    d, _ = counter_run
    default = attribute(d, "regression", None, 0, stall_model=False, buffer_window_scales=())
    off = attribute(d, "regression", None, 0, stall_model=False, use_buffer=False)
    assert default.devices[0].diagnostics["buffer"]["n_rows"] > 1000
    assert off.devices[0].diagnostics.get("buffer") is None
    assert _phases(default)["forward"].energy_j != _phases(off)["forward"].energy_j


def test_attribute_cli_sets_the_lag_floor_and_states_the_configs_default(counter_run):
    import json

    from typer.testing import CliRunner

    from jouleprof.cli.attribute import LAG_FLOOR_MS
    from jouleprof.cli.main import app

    assert RegressionConfig().buffer_lag_floor_sd_s == pytest.approx(LAG_FLOOR_MS / 1e3)
    d, _ = counter_run
    runner = CliRunner()
    bad = runner.invoke(app, ["attribute", str(d), "--buffer-lag-floor-ms", "-1"])
    assert bad.exit_code == 2 and "buffer-lag-floor-ms" in bad.output
    widths = []
    for ms in ("0", "2"):
        r = runner.invoke(
            app,
            ["attribute", str(d), "--warmup-steps", "0", "--no-stall-model", "--no-bins",
             "--buffer-lag-floor-ms", ms, "--json"],
        )  # fmt: skip
        assert r.exit_code == 0, r.output
        phases = json.loads(r.output)["devices"][0]["phases"]
        widths.append({p["phase"]: p["energy_hi_j"] - p["energy_lo_j"] for p in phases
                       if p["resolved"] and "+" not in p["phase"]})  # fmt: skip
    common = widths[0].keys() & widths[1].keys()
    assert common and any(widths[1][n] > 1.05 * widths[0][n] for n in common)
